//! Trace hashes: a fingerprint of everything observable that happened in a run, in order.
//!
//! Two hashes are kept. The *timed* hash covers virtual times too, so any divergence in the RNG
//! stream shows; the *order* hash covers only who received what from whom in which order, so two
//! runs with different delays but the same interleaving hash alike there. FNV-1a is used rather
//! than `std`'s hasher because its value must be stable across processes and compiler versions.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A 64-bit FNV-1a accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self(FNV_OFFSET)
    }
}

impl Fnv64 {
    /// Mixes in raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// Mixes in a number (little-endian, so the hash is platform independent).
    pub fn u64(&mut self, x: u64) {
        self.bytes(&x.to_le_bytes());
    }

    /// The current value.
    pub fn value(&self) -> u64 {
        self.0
    }
}

/// A 128-bit FNV-1a accumulator, for state keys that must not collide in practice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fnv128(u128);

impl Default for Fnv128 {
    fn default() -> Self {
        Self(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }
}

impl Fnv128 {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

    /// Mixes in raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u128::from(b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// Mixes in a number (little-endian).
    pub fn u64(&mut self, x: u64) {
        self.bytes(&x.to_le_bytes());
    }

    /// The current value.
    pub fn value(&self) -> u128 {
        self.0
    }
}

/// The pair of hashes a [`crate::Sim`] maintains.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Trace {
    pub(crate) timed: Fnv64,
    pub(crate) order: Fnv64,
}

impl Trace {
    /// Records an event: `tag` says what it is, `time` when, `words` and `bytes` its content.
    pub(crate) fn event(&mut self, time: u64, tag: u8, words: &[u64], bytes: &[u8]) {
        for h in [&mut self.timed, &mut self.order] {
            h.bytes(&[tag]);
            for &w in words {
                h.u64(w);
            }
            h.u64(bytes.len() as u64);
            h.bytes(bytes);
        }
        self.timed.u64(time);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_value() {
        let mut h = Fnv64::default();
        h.bytes(b"a");
        assert_eq!(h.value(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn fnv128_matches_the_reference_value() {
        let mut h = Fnv128::default();
        h.bytes(b"a");
        assert_eq!(h.value(), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
    }

    #[test]
    fn order_hash_ignores_time_but_timed_hash_does_not() {
        let mut a = Trace::default();
        let mut b = Trace::default();
        a.event(1, 0, &[1, 2], b"x");
        b.event(2, 0, &[1, 2], b"x");
        assert_eq!(a.order, b.order);
        assert_ne!(a.timed, b.timed);
    }
}
