//! Seed selection for randomized tests.
//!
//! `ROAM_SIM_SEED=<n>` replays exactly one seed; otherwise `ROAM_SIM_SEEDS=<count>` (or the
//! test's default count) runs seeds `0..count`. Every seed is printed before it runs, and a
//! failing seed is printed again with the command line that replays it, so a failure in CI is
//! reproducible from its log alone.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// Environment variable naming a single seed to replay.
pub const SEED_VAR: &str = "ROAM_SIM_SEED";
/// Environment variable giving how many seeds to run.
pub const SEEDS_VAR: &str = "ROAM_SIM_SEEDS";

/// The seeds to run: `[ROAM_SIM_SEED]` if set, else `0..ROAM_SIM_SEEDS`, else
/// `0..default_count`.
///
/// # Panics
/// If a variable is set but is not a number (a typo would otherwise silently run other seeds).
pub fn seeds(default_count: u64) -> Vec<u64> {
    seeds_from(
        std::env::var(SEED_VAR).ok(),
        std::env::var(SEEDS_VAR).ok(),
        default_count,
    )
}

fn seeds_from(one: Option<String>, count: Option<String>, default_count: u64) -> Vec<u64> {
    if let Some(one) = one {
        let seed = one
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR}={one:?} is not a u64"));
        return vec![seed];
    }
    let count = match count {
        Some(count) => count
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEEDS_VAR}={count:?} is not a u64")),
        None => default_count,
    };
    (0..count).collect()
}

/// Runs `test` once per seed of [`seeds`], printing `seed = N` first; if it panics, prints how
/// to replay that seed and re-raises the panic.
pub fn for_each_seed(default_count: u64, mut test: impl FnMut(u64)) {
    for seed in seeds(default_count) {
        eprintln!("seed = {seed}");
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| test(seed))) {
            eprintln!("FAILED with seed = {seed}; replay with {SEED_VAR}={seed}");
            resume_unwind(panic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_overrides_the_count() {
        assert_eq!(seeds_from(Some("42".into()), Some("9".into()), 3), vec![42]);
    }

    #[test]
    fn count_comes_from_the_variable_or_the_default() {
        assert_eq!(seeds_from(None, Some(" 4 ".into()), 2), vec![0, 1, 2, 3]);
        assert_eq!(seeds_from(None, None, 2), vec![0, 1]);
    }

    #[test]
    #[should_panic(expected = "is not a u64")]
    fn garbage_is_refused() {
        seeds_from(Some("x".into()), None, 1);
    }
}
