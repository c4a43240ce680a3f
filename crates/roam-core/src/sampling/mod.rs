//! Sampling primitives (NuPS): draws from a distribution registered at setup, served by a
//! scheme that trades exactness for locality.
//!
//! A node holds its samplers ([`NodeSamplers`]: one [`SamplerSpec`] each, and the `pool`
//! scheme's node-level [`pool::Pool`] behind its own mutex, never the node lock). A worker
//! samples through its access front end (`front.rs`): `prepare_sample(n)` gives a
//! [`SampleHandle`], `pull_sample` draws keys and reads their values (in one call, up to `n` in
//! all, possibly over several calls), `finish_sample` ends it. Pushes to sampled keys are
//! ordinary pushes. The schemes ([`Scheme`]):
//! - `naive`: draw at `pull_sample`, then an ordinary pull (exact; remote accesses);
//! - `preloc`: draw at `prepare_sample` and start localizing, pull at `pull_sample` (exact;
//!   relocations);
//! - `pool:U`: take samples from the node's pool of localized draws, each draw used up to `U`
//!   times (marginal distribution exact, samples correlated); `pool:U` postpones a not-yet-local
//!   sample behind a local one of its group, `pool:U:strict` does not;
//! - `local` / `local:next`: only keys held here (owned or replica): redraw until one is, or take
//!   the next key of the support that is; no communication. The distribution is *not* kept
//!   (docs/architecture.md, "Sampling", gives the measured deviation). After
//!   [`LOCAL_TRIES`] redraws (or a scan of [`LOCAL_SCAN`] keys) without a local key, the drawn
//!   key is read remotely, so a node holding nothing still samples.
//!
//! Every scheme ends in the store's latched reads or an ordinary pull, so a sampled value is
//! never torn, whatever moves meanwhile. Randomness comes from the node's seed: a worker's
//! draws depend only on the seed, its node and worker index, and (for `local` and `pool`) on
//! which keys are local when it draws.

mod alias;
mod dist;
mod front;
pub mod pool;

use rustc_hash::FxHashSet as HashSet;
use std::fmt;
use std::str::FromStr;

use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::SmallRng;

pub use dist::{Distribution, DistributionError, Support};
pub use pool::{Pool, PoolCounters};

use crate::directory::mix64;
use crate::id::{Key, NodeId};
use crate::keyspace::KeySpace;

/// Redraws the `local` scheme tries before reading a drawn key remotely.
pub const LOCAL_TRIES: usize = 100;
/// Support positions `local:next` scans for a local key before reading the drawn key remotely.
pub const LOCAL_SCAN: u64 = 4096;
/// Draws per group of the `pool` scheme (NuPS's default).
pub const DEFAULT_GROUP_DRAWS: usize = 250;
/// Most samples one `prepare_sample` may ask for (`preloc` and `pool` hold them all at once).
pub const MAX_PREPARED: usize = 1 << 26;
/// Most samples in one pool group (`group_draws × U`).
pub const MAX_GROUP_SAMPLES: usize = 1 << 20;

/// How a sampler serves its draws. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Draw, then an ordinary pull.
    Naive,
    /// Draw and localize at prepare, pull at pull time.
    Preloc,
    /// A node-level pool of localized draws, each used `reuse` times.
    Pool {
        /// Uses of each draw (U ≥ 1).
        reuse: u32,
        /// Swap a sample whose key is not local behind a local one of its group.
        postpone: bool,
    },
    /// Only local keys (owned or replica).
    Local {
        /// Take the next local key of the support instead of redrawing.
        next: bool,
    },
}

impl Scheme {
    /// Whether the samples follow the target distribution exactly (marginally, for `pool`).
    pub fn keeps_distribution(self) -> bool {
        !matches!(self, Self::Local { .. })
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Naive => f.write_str("naive"),
            Self::Preloc => f.write_str("preloc"),
            Self::Pool {
                reuse,
                postpone: true,
            } => write!(f, "pool:{reuse}"),
            Self::Pool {
                reuse,
                postpone: false,
            } => write!(f, "pool:{reuse}:strict"),
            Self::Local { next: false } => f.write_str("local"),
            Self::Local { next: true } => f.write_str("local:next"),
        }
    }
}

/// A scheme name that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown sampling scheme {0:?}: expected naive, preloc, pool:U, pool:U:strict (U ≥ 1), \
     local or local:next"
)]
pub struct SchemeParseError(pub String);

impl FromStr for Scheme {
    type Err = SchemeParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || SchemeParseError(s.to_owned());
        let mut parts = s.split(':');
        let scheme = match (parts.next(), parts.next(), parts.next()) {
            (Some("naive"), None, None) => Self::Naive,
            (Some("preloc"), None, None) => Self::Preloc,
            (Some("local"), None, None) => Self::Local { next: false },
            (Some("local"), Some("next"), None) => Self::Local { next: true },
            (Some("pool"), Some(u), rest) => {
                let reuse: u32 = u.parse().map_err(|_| bad())?;
                let postpone = match rest {
                    None => true,
                    Some("strict") => false,
                    Some(_) => return Err(bad()),
                };
                if reuse == 0 {
                    return Err(bad());
                }
                Self::Pool { reuse, postpone }
            }
            _ => return Err(bad()),
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(scheme)
    }
}

/// A sampler registered at setup: what to draw, how to serve it.
#[derive(Clone, Debug)]
pub struct SamplerSpec {
    /// The target distribution.
    pub distribution: Distribution,
    /// The scheme.
    pub scheme: Scheme,
    /// Whether the samples of one handle may repeat a key. Without replacement, a handle's
    /// samples are distinct keys (rejection: a repeat is redrawn, or left in the pool).
    pub with_replacement: bool,
    /// Draws per pool group (`pool` only).
    pub group_draws: usize,
}

impl SamplerSpec {
    /// A sampler with replacement and the default pool group size.
    pub fn new(distribution: Distribution, scheme: Scheme) -> Self {
        Self {
            distribution,
            scheme,
            with_replacement: true,
            group_draws: DEFAULT_GROUP_DRAWS,
        }
    }

    /// The value length every key of the support has in `space`, or why there is none (also
    /// refuses a pool group larger than [`MAX_GROUP_SAMPLES`]).
    pub fn value_len(&self, space: &KeySpace) -> Result<usize, SamplerSetupError> {
        if let Scheme::Pool { reuse, .. } = self.scheme {
            let samples = self.group_draws.max(1).saturating_mul(reuse as usize);
            if samples > MAX_GROUP_SAMPLES {
                return Err(SamplerSetupError::PoolTooLarge {
                    group_draws: self.group_draws,
                    reuse,
                    max: MAX_GROUP_SAMPLES,
                });
            }
        }
        let support = self.distribution.support();
        let last = support.last().unwrap_or(support.first);
        for key in [support.first, last] {
            if !space.contains(key) {
                return Err(SamplerSetupError::OutsideKeySpace {
                    key,
                    num_keys: space.num_keys(),
                });
            }
        }
        if let Some(len) = space.uniform_len() {
            return Ok(len);
        }
        let len = space.len(support.first);
        match (0..support.len)
            .map(|i| support.key(i))
            .find(|&k| space.len(k) != len)
        {
            Some(key) => Err(SamplerSetupError::MixedLengths {
                key,
                len: space.len(key),
                first: support.first,
                first_len: len,
            }),
            None => Ok(len),
        }
    }
}

/// Why a sampler cannot be registered.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SamplerSetupError {
    /// A pool group of more samples than [`MAX_GROUP_SAMPLES`].
    #[error("pool groups of {group_draws} draws × U = {reuse} exceed {max} samples")]
    PoolTooLarge {
        /// Draws per group.
        group_draws: usize,
        /// Uses per draw.
        reuse: u32,
        /// The limit.
        max: usize,
    },
    /// A support key outside the key space.
    #[error("sampled key {key} is outside the key space of {num_keys} keys")]
    OutsideKeySpace {
        /// The key.
        key: Key,
        /// Keys in the space.
        num_keys: u64,
    },
    /// Support keys of different value lengths (a sample's values could not be laid out).
    #[error(
        "sampled keys must have one value length: key {key} has {len}, key {first} has {first_len}"
    )]
    MixedLengths {
        /// A key with another length.
        key: Key,
        /// Its length.
        len: usize,
        /// The support's first key.
        first: Key,
        /// Its length.
        first_len: usize,
    },
}

/// Names a registered sampler: its index in the registration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SamplerId(pub u32);

/// One sampler of a node: its spec, value length, and pool (`pool` scheme only).
#[derive(Debug)]
pub(crate) struct NodeSampler {
    pub(crate) spec: SamplerSpec,
    pub(crate) value_len: usize,
    pub(crate) pool: Option<Mutex<Pool>>,
}

/// A node's samplers, shared by its workers' front ends.
#[derive(Debug)]
pub struct NodeSamplers {
    pub(crate) samplers: Vec<NodeSampler>,
    seed: u64,
    node: NodeId,
}

impl NodeSamplers {
    /// The samplers of node `node`, their random numbers derived from `seed`. Specs must have
    /// been validated against `space` ([`SamplerSpec::value_len`]).
    pub fn new(
        specs: &[SamplerSpec],
        space: &KeySpace,
        seed: u64,
        node: NodeId,
    ) -> Result<Self, SamplerSetupError> {
        let samplers = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let pool = match spec.scheme {
                    Scheme::Pool { reuse, postpone } => Some(Mutex::new(Pool::new(
                        spec.group_draws,
                        reuse as usize,
                        postpone,
                        rng_for(seed, node, u64::MAX - i as u64),
                    ))),
                    _ => None,
                };
                Ok(NodeSampler {
                    value_len: spec.value_len(space)?,
                    spec: spec.clone(),
                    pool,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            samplers,
            seed,
            node,
        })
    }

    /// Registered samplers.
    pub fn len(&self) -> usize {
        self.samplers.len()
    }

    /// Whether none is registered.
    pub fn is_empty(&self) -> bool {
        self.samplers.is_empty()
    }

    /// Sampler `id`, or the refusal that names it.
    pub(crate) fn get(&self, id: SamplerId) -> Result<&NodeSampler, SampleError> {
        self.samplers
            .get(id.0 as usize)
            .ok_or(SampleError::UnknownSampler {
                sampler: id.0,
                registered: self.samplers.len(),
            })
    }

    /// The spec of `id`.
    pub fn spec(&self, id: SamplerId) -> Option<&SamplerSpec> {
        self.samplers.get(id.0 as usize).map(|s| &s.spec)
    }

    /// The value length of `id`'s samples.
    pub fn value_len(&self, id: SamplerId) -> Option<usize> {
        self.samplers.get(id.0 as usize).map(|s| s.value_len)
    }

    /// The counters of `id`'s pool (`pool` scheme only).
    pub fn pool_counters(&self, id: SamplerId) -> Option<PoolCounters> {
        let pool = self.samplers.get(id.0 as usize)?.pool.as_ref()?;
        Some(pool.lock().counters())
    }

    /// The random numbers of worker `worker` (its draws do not depend on other workers').
    pub(crate) fn worker_rng(&self, worker: u32) -> SmallRng {
        rng_for(self.seed, self.node, u64::from(worker))
    }
}

fn rng_for(seed: u64, node: NodeId, stream: u64) -> SmallRng {
    // SplitMix64 (its increment, then its finaliser): nearby inputs give unrelated seeds.
    let mix = |x: u64| mix64(x.wrapping_add(0x9e37_79b9_7f4a_7c15));
    SmallRng::seed_from_u64(mix(seed ^ mix(u64::from(node.0) ^ mix(stream))))
}

/// One `prepare_sample` in progress: which sampler, how many samples are left, and the keys
/// drawn ahead (`preloc`, `pool`).
#[derive(Debug)]
#[must_use = "a sample handle is consumed by pull_sample and ended by finish_sample"]
pub struct SampleHandle {
    sampler: SamplerId,
    remaining: usize,
    /// Keys drawn at prepare, handed out from `next` on.
    ahead: Vec<Key>,
    next: usize,
    /// Keys handed out so far (without replacement only).
    drawn: Option<HashSet<Key>>,
}

impl SampleHandle {
    /// The sampler it draws from.
    pub fn sampler(&self) -> SamplerId {
        self.sampler
    }

    /// Samples still to be pulled.
    pub fn remaining(&self) -> usize {
        self.remaining
    }
}

/// Why a sampling call was refused (nothing was drawn).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SampleError {
    /// No sampler with this id was registered.
    #[error("no sampler {sampler}: {registered} registered")]
    UnknownSampler {
        /// The id asked for.
        sampler: u32,
        /// Samplers registered.
        registered: usize,
    },
    /// More samples prepared at once than [`MAX_PREPARED`].
    #[error("{requested} samples prepared at once; at most {max}")]
    TooManyPrepared {
        /// Asked for.
        requested: usize,
        /// The limit.
        max: usize,
    },
    /// An intent's clock range holds no clock ([`crate::Front::prepare_sample_intent`]).
    #[error("intent clock range {start}..{end} is empty: the end must be after the start")]
    EmptyIntentRange {
        /// The first clock.
        start: u64,
        /// The clock after the last.
        end: u64,
    },
    /// More samples asked of a handle than it has left.
    #[error("asked for {requested} samples, the handle has {remaining} left")]
    TooMany {
        /// Asked for.
        requested: usize,
        /// Left.
        remaining: usize,
    },
    /// More distinct samples than the distribution can draw (without replacement).
    #[error("{requested} distinct samples asked for; the distribution draws {reachable} keys")]
    NotEnoughKeys {
        /// Asked for.
        requested: usize,
        /// Keys with a non-zero probability.
        reachable: u64,
    },
    /// The values buffer does not fit the keys buffer.
    #[error("{keys} samples of {value_len} values need a buffer of {expected}, got {actual}")]
    LengthMismatch {
        /// Samples asked for.
        keys: usize,
        /// Values per key.
        value_len: usize,
        /// Needed.
        expected: usize,
        /// Given.
        actual: usize,
    },
}
