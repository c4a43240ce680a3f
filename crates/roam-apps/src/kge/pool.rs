//! The bucket schedule's pool (`buckets.rs`): a worker's copies of entities held elsewhere,
//! read once per round and used as negatives, with the aggregate of the worker's gradients of
//! them since they were last sent.
//!
//! Invariants: `touched` lists each key given a gradient since the last take exactly once
//! (`dirty` marks them), so [`Pool::take_aggregates`] sends each such key once and leaves
//! every aggregate at zero. A key's values, summed gradients and summed squares lie next to each other in one
//! slot of `3 · len` values at the offset `index` gives: a negative's values are read and its
//! gradient added a moment later, so the aggregates are on the lines beside the ones just read
//! (with three separate arrays the add, a cache miss on its sums, was 8 % of a 2-node `nups`
//! run's samples; interleaved, the run's training CPU fell 3 %, docs/workloads-kge.md).

use roam::Key;

/// Copies of keys held elsewhere, read once per round (a bucket round's global negatives):
/// values as pulled, and the aggregate of this worker's gradients since they were last pushed
/// — their sum and the sum of their squares, which `buckets.rs` sends with
/// `push_gradient_sums` every `--bucket-pool-flush` triples and at the round's end, so that the
/// owner's Adagrad steps as if each gradient had been pushed.
#[derive(Debug, Default)]
pub struct Pool {
    /// The keys, and where each one's slot starts in `slots`.
    pub index: rustc_hash::FxHashMap<Key, usize>,
    /// The keys in pull order.
    pub keys: Vec<Key>,
    /// Per key, in pull order: its values as read when the round started, then its gradients
    /// since the last push summed, then their squares summed (`len` each).
    slots: Vec<f32>,
    /// Values per key.
    len: usize,
    /// Positions in `keys` of the keys with a gradient since the last push (each once).
    touched: Vec<u32>,
    /// Whether each key is in `touched`.
    dirty: Vec<bool>,
}

impl Pool {
    /// Replaces the pool with `keys` (ascending or not, each once) and their values `values`
    /// (`len` per key), with no gradients.
    pub fn install(&mut self, keys: &[Key], values: &[f32], len: usize) {
        debug_assert_eq!(values.len(), keys.len() * len);
        self.len = len;
        self.index.clear();
        self.index
            .extend(keys.iter().enumerate().map(|(i, &key)| (key, i * 3 * len)));
        self.keys.clear();
        self.keys.extend_from_slice(keys);
        self.slots.clear();
        self.slots.reserve(keys.len() * 3 * len);
        for row in values.chunks_exact(len.max(1)) {
            self.slots.extend_from_slice(row);
            self.slots.resize(self.slots.len() + 2 * len, 0.0);
        }
        self.touched.clear();
        self.dirty.clear();
        self.dirty.resize(keys.len(), false);
    }

    /// The values of the key whose slot starts at `at` (from [`Pool::index`]).
    #[inline]
    pub fn values(&self, at: usize) -> &[f32] {
        &self.slots[at..at + self.len]
    }

    /// Adds gradient `grad` (`len` values) of the key whose slot starts at `at`.
    #[inline]
    pub(super) fn add(&mut self, at: usize, grad: &[f32]) {
        let len = self.len;
        debug_assert_eq!(grad.len(), len);
        let i = at / (3 * len);
        if !self.dirty[i] {
            self.dirty[i] = true;
            self.touched.push(i as u32);
        }
        let (sums, squares) = self.slots[at + len..at + 3 * len].split_at_mut(len);
        for ((d, q), g) in sums.iter_mut().zip(squares).zip(grad) {
            *d += g;
            *q += g * g;
        }
    }

    /// Moves the aggregates of the keys touched since the last call into `keys` and
    /// `aggregates` (per key its `len` summed gradients, then their `len` summed squares:
    /// `Worker::push_gradient_sums`'s layout), replacing their contents and zeroing them here.
    pub fn take_aggregates(&mut self, keys: &mut Vec<Key>, aggregates: &mut Vec<f32>) {
        let len = self.len;
        keys.clear();
        aggregates.clear();
        for &i in &self.touched {
            let i = i as usize;
            keys.push(self.keys[i]);
            let taken = &mut self.slots[i * 3 * len + len..(i + 1) * 3 * len];
            aggregates.extend_from_slice(taken);
            taken.fill(0.0);
            self.dirty[i] = false;
        }
        self.touched.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only touched keys are taken, once each, with their sums then their squares; a take
    /// leaves nothing behind.
    #[test]
    fn aggregates_are_sums_then_squares_of_the_touched_keys() {
        let mut pool = Pool::default();
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        pool.install(&[7, 3, 9], &values, 2);
        assert_eq!(pool.values(pool.index[&3]), [3.0, 4.0], "values by key");
        let at = |pool: &Pool, key| pool.index[&key];
        pool.add(at(&pool, 9), &[1.0, -2.0]);
        pool.add(at(&pool, 7), &[0.5, 0.5]);
        pool.add(at(&pool, 9), &[3.0, 1.0]);
        let (mut keys, mut aggregates) = (Vec::new(), Vec::new());
        pool.take_aggregates(&mut keys, &mut aggregates);
        assert_eq!(keys, [9, 7]);
        assert_eq!(aggregates, [4.0, -1.0, 10.0, 5.0, 0.5, 0.5, 0.25, 0.25]);
        pool.take_aggregates(&mut keys, &mut aggregates);
        assert!(keys.is_empty() && aggregates.is_empty(), "taken once");
        pool.add(at(&pool, 3), &[1.0, 1.0]);
        pool.take_aggregates(&mut keys, &mut aggregates);
        assert_eq!((keys, aggregates), (vec![3], vec![1.0, 1.0, 1.0, 1.0]));
        assert_eq!(
            pool.values(pool.index[&9]),
            [5.0, 6.0],
            "gradients leave values alone"
        );
    }
}
