//! A min-priority queue for entries that mostly arrive in order: a worker signals its intents
//! with rising starts (a KGE triple, a w2v batch at a time), so their starts and ends come
//! sorted, and a binary heap's `pop` (a sift through its whole depth per entry) was a visible
//! share of a worker's CPU.
//!
//! Entries no smaller than the last one in order go to a FIFO (`push` and `pop` in constant
//! time), the others to a heap; `pop` takes the smaller front. Both hold their entries
//! sorted, so the queue yields exactly what one heap would: the least entry first, and for
//! equal entries (indistinguishable) any of them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// See the module docs.
pub(super) struct Queue<T> {
    sorted: VecDeque<T>,
    rest: BinaryHeap<Reverse<T>>,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            sorted: VecDeque::new(),
            rest: BinaryHeap::new(),
        }
    }
}

impl<T: Ord + Copy> Queue<T> {
    pub(super) fn push(&mut self, entry: T) {
        match self.sorted.back() {
            Some(&last) if entry < last => self.rest.push(Reverse(entry)),
            _ => self.sorted.push_back(entry),
        }
    }

    /// The least entry.
    pub(super) fn peek(&self) -> Option<T> {
        match (self.sorted.front(), self.rest.peek()) {
            (Some(&a), Some(&Reverse(b))) => Some(a.min(b)),
            (Some(&a), None) => Some(a),
            (None, Some(&Reverse(b))) => Some(b),
            (None, None) => None,
        }
    }

    /// Removes and returns the least entry.
    pub(super) fn pop(&mut self) -> Option<T> {
        match (self.sorted.front(), self.rest.peek()) {
            (Some(&a), Some(&Reverse(b))) if b < a => self.rest.pop().map(|r| r.0),
            (Some(_), _) => self.sorted.pop_front(),
            (None, _) => self.rest.pop().map(|r| r.0),
        }
    }

    /// Empties the queue, returning every entry (in no particular order).
    pub(super) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.sorted.drain(..).chain(self.rest.drain().map(|r| r.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    /// 31 random bits.
    fn next(rng: &mut ChaCha8Rng) -> u64 {
        rng.next_u64() >> 33
    }

    #[test]
    fn yields_what_a_binary_heap_yields() {
        for seed in 0..50u64 {
            let mut state = ChaCha8Rng::seed_from_u64(seed);
            let (mut queue, mut heap) = (Queue::default(), BinaryHeap::new());
            let mut clock = 0u64;
            for step in 0..2_000 {
                let r = next(&mut state);
                if !r.is_multiple_of(3) {
                    // Mostly ahead of the clock, now and then behind it; ties included.
                    clock += next(&mut state) % 2;
                    let at = if r.is_multiple_of(7) {
                        clock.saturating_sub(next(&mut state) % 20)
                    } else {
                        clock + next(&mut state) % 5
                    };
                    let entry = (at, next(&mut state) % 4);
                    queue.push(entry);
                    heap.push(Reverse(entry));
                } else {
                    let want = heap.peek().map(|r| r.0);
                    assert_eq!(queue.peek(), want, "seed {seed} step {step}");
                    assert_eq!(
                        queue.pop(),
                        heap.pop().map(|r| r.0),
                        "seed {seed} step {step}"
                    );
                }
            }
            let mut left: Vec<_> = queue.drain().collect();
            let mut want: Vec<_> = heap.into_iter().map(|r| r.0).collect();
            left.sort_unstable();
            want.sort_unstable();
            assert_eq!(left, want, "seed {seed}");
            assert_eq!(queue.peek(), None);
        }
    }
}
