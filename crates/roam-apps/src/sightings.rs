//! Which keys to `localize` (`--localize`): by default (`exclusive`) the rows no other node
//! trains on, once before training (`ctr::shard::exclusive_rows`, no filter involved); all of
//! a batch's (`all`); or only those this node has seen before (`repeats`, this filter).
//!
//! Why: on sparse data with a long tail (ctr's Zipf ids over 10^8) most of a batch's rows are
//! ids used once. Moving such a row costs a relocation (a round trip through its home, the row
//! sent, the directory updated) and saves nothing, since nothing here reads it again; pulling
//! and pushing it remotely costs one access each. A row seen a second time is likely to be seen
//! again (the head of the distribution), so that is when it moves.
//!
//! How: [`Sightings`] is a Bloom filter of the keys this node offered to `localize` (TinyLFU's
//! "doorkeeper"), shared by the node's worker threads through atomic words: a key whose bits
//! are all set was seen before (or is a false positive, which only moves a row early). Memory
//! is fixed ([`BITS`] by default); once the keys inserted since the last reset reach an eighth of
//! its bits (the filter about 31 % full, 1 − e^(−3/8), false positives about 3 % with [`HASHES`] bits per key) it is
//! cleared, so it remembers a window of recent keys and never saturates. A key seen just
//! before a reset and again after it waits for a third sighting: the cost is one remote access.
//!
//! Invariants: the filter only chooses hints — every key is read and written correctly
//! wherever its row is — so a race between workers (a key inserted twice, a reset overlapping
//! an insertion) can change which rows move, never a result. Deterministic for one worker:
//! the hashes are fixed functions of the key.

use std::sync::atomic::{AtomicU64, Ordering};

use roam::Key;

/// Bits of the filter (a power of two): 2^24 bits, 2 MiB per node.
pub const BITS: u64 = 1 << 24;
/// Bits set per key.
pub const HASHES: u64 = 3;

/// Which of a batch's keys a worker asks `localize` for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Localize {
    /// Every key of the batch.
    All,
    /// Only the keys this node has seen before (the second sighting moves a row).
    Repeats,
    /// Only the keys that no other node's workers use (known from the data, which every node
    /// holds): moved here once, before the first epoch, and never asked for again; every
    /// other key is read and pushed where it is.
    Exclusive,
}

impl Localize {
    /// The `--localize` value.
    pub fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Repeats => "repeats",
            Self::Exclusive => "exclusive",
        }
    }
}

/// The keys a node has offered to `localize` recently (see the module documentation).
#[derive(Debug)]
pub struct Sightings {
    words: Vec<AtomicU64>,
    inserted: AtomicU64,
    offered: AtomicU64,
    repeats: AtomicU64,
}

impl Default for Sightings {
    fn default() -> Self {
        Self::with_bits(BITS)
    }
}

impl Sightings {
    /// A filter of `bits` bits (rounded up to a power of two, at least 64).
    pub fn with_bits(bits: u64) -> Self {
        let bits = bits.max(64).next_power_of_two();
        Self {
            words: (0..bits / 64).map(|_| AtomicU64::new(0)).collect(),
            inserted: AtomicU64::new(0),
            offered: AtomicU64::new(0),
            repeats: AtomicU64::new(0),
        }
    }

    /// Records `keys` as seen and appends to `out` those that had been seen before.
    pub fn repeats(&self, keys: &[Key], out: &mut Vec<Key>) {
        let mask = self.words.len() as u64 * 64 - 1;
        let mut new = 0;
        let before = out.len();
        for &key in keys {
            let h = mix(key);
            let step = mix(h) | 1;
            let mut seen = true;
            for i in 0..HASHES {
                let bit = h.wrapping_add(i.wrapping_mul(step)) & mask;
                let word = &self.words[(bit / 64) as usize];
                let b = 1u64 << (bit % 64);
                // Relaxed: the bits are hints, and nothing else is published through them.
                if word.fetch_or(b, Ordering::Relaxed) & b == 0 {
                    seen = false;
                }
            }
            if seen {
                out.push(key);
            } else {
                new += 1;
            }
        }
        self.offered.fetch_add(keys.len() as u64, Ordering::Relaxed);
        self.repeats
            .fetch_add((out.len() - before) as u64, Ordering::Relaxed);
        let total = self.inserted.fetch_add(new, Ordering::Relaxed) + new;
        if total >= (mask + 1) / 8
            && self
                .inserted
                .compare_exchange(total, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            for w in &self.words {
                w.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Keys offered and keys found seen before, since the filter was made.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.offered.load(Ordering::Relaxed),
            self.repeats.load(Ordering::Relaxed),
        )
    }
}

/// SplitMix64's finaliser (keys may be dense indices, so they are mixed before use).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_sighting_passes_and_the_first_does_not() {
        let s = Sightings::default();
        let mut out = Vec::new();
        s.repeats(&[1, 2, 3], &mut out);
        assert!(out.is_empty());
        s.repeats(&[2, 4, 3], &mut out);
        assert_eq!(out, [2, 3]);
        assert_eq!(s.counts(), (6, 2));
    }

    #[test]
    fn false_positives_stay_rare_and_the_filter_resets_before_it_fills() {
        // 2^12 bits: resets after 512 new keys. A stream of distinct keys passes almost never.
        let s = Sightings::with_bits(1 << 12);
        let mut out = Vec::new();
        let keys: Vec<Key> = (0..100_000u64).collect();
        for chunk in keys.chunks(64) {
            s.repeats(chunk, &mut out);
        }
        let rate = out.len() as f64 / keys.len() as f64;
        assert!(rate < 0.06, "false positives {rate}");
        // A hot key offered in every batch passes from its second batch on, resets aside.
        let s = Sightings::with_bits(1 << 12);
        let mut hot_passed = 0;
        for (i, chunk) in keys.chunks(64).enumerate() {
            let mut batch = chunk.to_vec();
            batch.push(u64::MAX);
            out.clear();
            s.repeats(&batch, &mut out);
            if i > 0 && out.contains(&u64::MAX) {
                hot_passed += 1;
            }
        }
        let batches = keys.len().div_ceil(64) - 1;
        assert!(hot_passed * 10 >= batches * 8, "{hot_passed} of {batches}");
    }
}
