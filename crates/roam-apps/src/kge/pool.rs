//! The bucket schedule's pool (`buckets.rs`): a worker's copies of entities held elsewhere,
//! read once per round and used as negatives, with the aggregate of the worker's gradients of
//! them since they were last sent.
//!
//! Invariants: `touched` lists each key with a non-zero aggregate exactly once (`dirty` marks
//! them), so [`Pool::take_aggregates`] sends each such key once and leaves every aggregate at
//! zero; values, sums and squares of a key share one offset (`index`), `len` per key.

use roam::Key;

/// Copies of keys held elsewhere, read once per round (a bucket round's global negatives):
/// values as pulled, and the aggregate of this worker's gradients since they were last pushed
/// — their sum and the sum of their squares, which `buckets.rs` sends with
/// `push_gradient_sums` every `--bucket-pool-flush` triples and at the round's end, so that the
/// owner's Adagrad steps as if each gradient had been pushed.
#[derive(Debug, Default)]
pub struct Pool {
    /// The keys, and where each one's values start in `values`, `deltas` and `squares`.
    pub index: rustc_hash::FxHashMap<Key, usize>,
    /// The keys in pull order.
    pub keys: Vec<Key>,
    /// Their values, as read when the round started.
    pub values: Vec<f32>,
    /// Their gradients since the last push, summed.
    pub deltas: Vec<f32>,
    /// The squares of those gradients, summed.
    pub squares: Vec<f32>,
    /// Positions in `keys` of the keys with a gradient since the last push (each once).
    touched: Vec<u32>,
    /// Whether each key is in `touched`.
    dirty: Vec<bool>,
}

impl Pool {
    /// Replaces the pool with `keys` (ascending or not, each once) and their values `values`
    /// (`len` per key; `values` is left with the old values' buffer).
    pub fn install(&mut self, keys: &[Key], values: &mut Vec<f32>, len: usize) {
        self.index.clear();
        self.index
            .extend(keys.iter().enumerate().map(|(i, &key)| (key, i * len)));
        self.keys.clear();
        self.keys.extend_from_slice(keys);
        std::mem::swap(&mut self.values, values);
        self.deltas.clear();
        self.deltas.resize(self.values.len(), 0.0);
        self.squares.clear();
        self.squares.resize(self.values.len(), 0.0);
        self.touched.clear();
        self.dirty.clear();
        self.dirty.resize(keys.len(), false);
    }

    /// Adds gradient `grad` of the key whose values start at `at`.
    pub(super) fn add(&mut self, at: usize, grad: &[f32]) {
        let i = at / grad.len();
        if !self.dirty[i] {
            self.dirty[i] = true;
            self.touched.push(i as u32);
        }
        let span = at..at + grad.len();
        let sums = self.deltas[span.clone()].iter_mut();
        for ((d, q), g) in sums.zip(&mut self.squares[span]).zip(grad) {
            *d += g;
            *q += g * g;
        }
    }

    /// Moves the aggregates of the keys touched since the last call into `keys` and
    /// `aggregates` (per key its `len` summed gradients, then their `len` summed squares:
    /// `Worker::push_gradient_sums`'s layout), replacing their contents and zeroing them here.
    pub fn take_aggregates(&mut self, len: usize, keys: &mut Vec<Key>, aggregates: &mut Vec<f32>) {
        keys.clear();
        aggregates.clear();
        for &i in &self.touched {
            let i = i as usize;
            keys.push(self.keys[i]);
            let span = i * len..(i + 1) * len;
            aggregates.extend_from_slice(&self.deltas[span.clone()]);
            aggregates.extend_from_slice(&self.squares[span.clone()]);
            self.deltas[span.clone()].fill(0.0);
            self.squares[span].fill(0.0);
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
        let mut values = vec![0.0; 6];
        pool.install(&[7, 3, 9], &mut values, 2);
        let at = |pool: &Pool, key| pool.index[&key];
        pool.add(at(&pool, 9), &[1.0, -2.0]);
        pool.add(at(&pool, 7), &[0.5, 0.5]);
        pool.add(at(&pool, 9), &[3.0, 1.0]);
        let (mut keys, mut aggregates) = (Vec::new(), Vec::new());
        pool.take_aggregates(2, &mut keys, &mut aggregates);
        assert_eq!(keys, [9, 7]);
        assert_eq!(aggregates, [4.0, -1.0, 10.0, 5.0, 0.5, 0.5, 0.25, 0.25]);
        pool.take_aggregates(2, &mut keys, &mut aggregates);
        assert!(keys.is_empty() && aggregates.is_empty(), "taken once");
        pool.add(at(&pool, 3), &[1.0, 1.0]);
        pool.take_aggregates(2, &mut keys, &mut aggregates);
        assert_eq!((keys, aggregates), (vec![3], vec![1.0, 1.0, 1.0, 1.0]));
    }
}
