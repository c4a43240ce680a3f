//! Choosers of the keys to replicate (NuPS), from per-key access counts that the application
//! computes from its data (word frequencies, entity and relation counts, column counts).
//!
//! Both return keys sorted ascending and are deterministic: ties break by key, so every node
//! that computes the same counts picks the same set (every node must be given the same set).

use roam_core::Key;

/// The `n` keys with the highest counts (ties: the smaller key first). Keys with a zero count
/// are never picked.
pub fn top_n(counts: impl IntoIterator<Item = (Key, u64)>, n: usize) -> Vec<Key> {
    let mut ranked: Vec<(Key, u64)> = counts.into_iter().filter(|&(_, c)| c > 0).collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut keys: Vec<Key> = ranked.into_iter().take(n).map(|(k, _)| k).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The keys accessed at least `alpha` times as often as the mean key (the mean over all
/// `num_keys` keys of the space, counted or not: keys never accessed pull the mean down, as they
/// do in the data). NuPS's paper describes its untuned heuristic as "frequency far above the
/// mean" without the factor (its code takes a count: 900 keys for KGE, 3,272 for word vectors,
/// 755 for MF); on NuPS's MF data `alpha` = 100 gives 758 columns, while `alpha` = 1 gives
/// 106,659. roam's workloads use 100 for KGE and MF and 1 for word vectors, whose keys are
/// scored by expected accesses (docs/workloads-*.md).
pub fn above_mean(
    counts: impl IntoIterator<Item = (Key, u64)>,
    num_keys: u64,
    alpha: f64,
) -> Vec<Key> {
    let counts: Vec<(Key, u64)> = counts.into_iter().collect();
    let total: u128 = counts.iter().map(|&(_, c)| u128::from(c)).sum();
    let mean = total as f64 / num_keys.max(1) as f64;
    let threshold = alpha * mean;
    let mut keys: Vec<Key> = counts
        .into_iter()
        .filter(|&(_, c)| c > 0 && c as f64 >= threshold)
        .map(|(k, _)| k)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_n_takes_the_most_frequent_and_breaks_ties_by_key() {
        let counts = [(7, 5), (3, 9), (1, 5), (4, 0), (9, 1)];
        assert_eq!(top_n(counts, 2), [1, 3]);
        assert_eq!(top_n(counts, 3), [1, 3, 7]);
        assert_eq!(
            top_n(counts, 10),
            [1, 3, 7, 9],
            "zero counts are never picked"
        );
    }

    #[test]
    fn above_mean_uses_the_mean_over_the_whole_key_space() {
        // 20 accesses over 10 keys: mean 2.
        let counts = [(0, 10), (1, 4), (2, 2), (3, 1), (5, 3)];
        assert_eq!(above_mean(counts, 10, 1.0), [0, 1, 2, 5]);
        assert_eq!(above_mean(counts, 10, 2.0), [0, 1]);
        assert_eq!(above_mean(counts, 10, 100.0), Vec::<Key>::new());
    }
}
