//! The linger's watches by due round (`linger.rs`): one bucket of keys per round. Dues come
//! nearly but not quite in order (the break-even rounds follow the smoothed keys per request,
//! and the keys of one intent are in no order), and a binary heap's `pop` (a sift through its
//! whole depth per entry) was a visible share of a worker's CPU. A bucket is sorted by key
//! when it comes up, so entries come out in the order of a binary heap of `(round, key)`: the
//! least first.
//!
//! Every due is within the largest break-even time of the linger's clock when pushed, and
//! the linger takes out all entries due before the clock moves on, so the buckets span at
//! most that many rounds.

use std::collections::VecDeque;

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Calendar {
    /// The round of the first bucket.
    first: u64,
    buckets: VecDeque<Vec<u64>>,
    /// Whether the first bucket is sorted (descending: its least key is popped from the end).
    sorted: bool,
    spare: Vec<Vec<u64>>,
}

impl Calendar {
    pub(super) fn push(&mut self, due: u64, key: u64) {
        if self.buckets.is_empty() {
            self.first = due;
        }
        while due < self.first {
            let bucket = self.spare.pop().unwrap_or_default();
            self.buckets.push_front(bucket);
            self.first -= 1;
            self.sorted = false;
        }
        let at = (due - self.first) as usize;
        while self.buckets.len() <= at {
            let bucket = self.spare.pop().unwrap_or_default();
            self.buckets.push_back(bucket);
        }
        self.buckets[at].push(key);
        if at == 0 {
            self.sorted = false;
        }
    }

    /// The least `(round, key)`.
    pub(super) fn peek(&mut self) -> Option<(u64, u64)> {
        while self.buckets.front().is_some_and(Vec::is_empty) {
            let bucket = self.buckets.pop_front().expect("a front bucket");
            self.spare.push(bucket);
            self.first += 1;
            self.sorted = false;
        }
        let front = self.buckets.front_mut()?;
        if !self.sorted {
            front.sort_unstable_by(|a, b| b.cmp(a));
            self.sorted = true;
        }
        front.last().map(|&key| (self.first, key))
    }

    /// Removes and returns the least `(round, key)`.
    pub(super) fn pop(&mut self) -> Option<(u64, u64)> {
        let least = self.peek()?;
        self.buckets[0].pop();
        Some(least)
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use super::*;

    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    /// 31 random bits.
    fn next(rng: &mut ChaCha8Rng) -> u64 {
        rng.next_u64() >> 33
    }

    #[test]
    fn the_calendar_yields_what_a_binary_heap_yields() {
        for seed in 0..50u64 {
            let mut state = ChaCha8Rng::seed_from_u64(seed);
            let (mut calendar, mut heap) = (Calendar::default(), BinaryHeap::new());
            let mut round = 0u64;
            for step in 0..3_000 {
                let r = next(&mut state);
                if !r.is_multiple_of(4) {
                    // Due within 2..40 rounds of the clock (as the linger pushes them), keys
                    // in any order, repeats included.
                    let entry = (round + 2 + next(&mut state) % 38, next(&mut state) % 30);
                    calendar.push(entry.0, entry.1);
                    heap.push(Reverse(entry));
                } else if r.is_multiple_of(8) {
                    // The clock moves on, and everything due by then comes out.
                    round += next(&mut state) % 5;
                    while heap.peek().is_some_and(|e| e.0.0 <= round) {
                        assert_eq!(
                            calendar.pop(),
                            heap.pop().map(|r| r.0),
                            "seed {seed} step {step}"
                        );
                    }
                    assert_eq!(
                        calendar.peek(),
                        heap.peek().map(|r| r.0),
                        "seed {seed} step {step}"
                    );
                } else {
                    assert_eq!(
                        calendar.peek(),
                        heap.peek().map(|r| r.0),
                        "seed {seed} step {step}"
                    );
                }
            }
            while let Some(Reverse(entry)) = heap.pop() {
                assert_eq!(calendar.pop(), Some(entry), "seed {seed}");
            }
            assert_eq!(calendar.pop(), None);
        }
    }
}
