//! Helpers of the sampling tests (`sampling.rs`, `sampling_api.rs`): the key space and its
//! values, the target distributions, a two-node cluster's config, drawing and counting keys,
//! and the seed of each test (printed; replayed with `ROAM_SAMPLING_SEED`).
#![allow(dead_code, unreachable_pub)]

use roam::{Allocation, Config, Distribution, Key, NodeHandle, SamplerId, Support, Worker};

/// Significance of every chi-square test.
pub const SIGNIFICANCE: f64 = 0.001;
/// Samples per goodness-of-fit test (and per configuration of the locality table).
pub const DRAWS: usize = 1_000_000;
/// Samples per `prepare_sample`.
pub const BATCH: usize = 1000;
pub const VALUE_LEN: usize = 2;
pub const NUM_KEYS: u64 = 3000;
/// Keys 1, 4, 7, …, 2998: the stride exercises supports that are not ranges.
pub const SUPPORT: Support = Support {
    first: 1,
    stride: 3,
    len: 1000,
};
pub const DEFAULT_SEED: u64 = 20_261_124;

/// The seed of this run (see the module docs), printed with `test`'s name. By default each test
/// has its own ([`DEFAULT_SEED`] mixed with the name), so that no two tests draw the same keys.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("ROAM_SAMPLING_SEED") {
        // FNV-1a of the name.
        Err(_) => test
            .bytes()
            .fold(DEFAULT_SEED ^ 0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            }),
        Ok(s) if s == "random" => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            nanos ^ u64::from(std::process::id()).rotate_left(32)
        }
        Ok(s) => match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        }
        .unwrap_or_else(|e| panic!("ROAM_SAMPLING_SEED={s:?}: {e}")),
    };
    eprintln!("{test}: sampling seed {seed} (replay with ROAM_SAMPLING_SEED={seed})");
    seed
}

pub fn uniform() -> Distribution {
    Distribution::uniform(SUPPORT).unwrap()
}

/// Zipf-like: position `i` has weight `(i + 1)^-0.75` (word2vec's unigram^0.75 on a Zipf
/// vocabulary). The rarest key has probability ≈ 2.9e-4.
pub fn weighted() -> Distribution {
    let weights = (0..SUPPORT.len)
        .map(|i| ((i + 1) as f64).powf(-0.75))
        .collect();
    Distribution::weighted(SUPPORT.first, SUPPORT.stride, weights).unwrap()
}

/// [`weighted`] with every tenth weight zero: keys the alias table must never draw.
pub fn weighted_with_zeros() -> Distribution {
    let weights = (0..SUPPORT.len)
        .map(|i| {
            if i % 10 == 3 {
                0.0
            } else {
                ((i + 1) as f64).powf(-0.75)
            }
        })
        .collect();
    Distribution::weighted(SUPPORT.first, SUPPORT.stride, weights).unwrap()
}

/// The target probability of each support position.
pub fn probabilities(dist: &Distribution) -> Vec<f64> {
    (0..dist.support().len)
        .map(|i| dist.probability(i))
        .collect()
}

/// A configuration of `VALUE_LEN` values per key over `NUM_KEYS` keys.
pub fn config(allocation: Allocation, seed: u64) -> Config {
    let mut cfg = Config::new(NUM_KEYS, VALUE_LEN as u32);
    cfg.allocation = allocation;
    cfg.sampling_seed = seed;
    cfg
}

/// The value every key is given before sampling, so that a sample's values name its key.
pub fn value_of(key: Key) -> [f32; VALUE_LEN] {
    [key as f32, -(key as f32)]
}

/// Node 0 sets every key to [`value_of`]; every worker then waits at a barrier.
pub fn set_values(node: &NodeHandle, worker: &Worker) {
    if node.rank() == 0 {
        let keys: Vec<Key> = (0..NUM_KEYS).collect();
        let vals: Vec<f32> = keys.iter().flat_map(|&k| value_of(k)).collect();
        worker.set(&keys, &vals).unwrap().wait().unwrap();
    }
    worker.barrier().unwrap();
}

pub fn check_values(keys: &[Key], vals: &[f32]) {
    for (i, &key) in keys.iter().enumerate() {
        assert_eq!(
            vals[i * VALUE_LEN..(i + 1) * VALUE_LEN],
            value_of(key),
            "sample {i} (key {key}) came with another key's values"
        );
    }
}

/// Draws `total` samples of `sampler` in handles of [`BATCH`]; checks every sample's values and
/// returns the keys in the order drawn. Each handle is drawn from in two calls: `pull_sample`
/// twice, or (every other handle) `pull_sample` then `sample_keys` and an ordinary pull.
pub fn draw(worker: &Worker, sampler: SamplerId, total: usize) -> Vec<Key> {
    let mut stream = Vec::with_capacity(total);
    let mut keys = vec![0; BATCH];
    let mut vals = vec![0.0f32; BATCH * VALUE_LEN];
    let mut handles = 0;
    while stream.len() < total {
        let n = BATCH.min(total - stream.len());
        let mut handle = worker.prepare_sample(sampler, n).unwrap();
        let half = n / 2;
        for (lo, hi) in [(0, half), (half, n)] {
            let (keys, vals) = (&mut keys[lo..hi], &mut vals[lo * VALUE_LEN..hi * VALUE_LEN]);
            if lo > 0 && handles % 2 == 1 {
                worker.sample_keys(&mut handle, keys).unwrap();
                worker.pull(keys, vals).unwrap().wait().unwrap();
            } else {
                worker
                    .pull_sample(&mut handle, keys, vals)
                    .unwrap()
                    .wait()
                    .unwrap();
            }
        }
        handles += 1;
        assert_eq!(worker.finish_sample(handle), 0, "every sample was pulled");
        check_values(&keys[..n], &vals[..n * VALUE_LEN]);
        stream.extend_from_slice(&keys[..n]);
    }
    stream
}

/// Samples per support position.
pub fn count(support: &Support, keys: &[Key], counts: &mut [u64]) {
    for &key in keys {
        let i = support
            .position(key)
            .unwrap_or_else(|| panic!("sampled key {key} is not in the support"));
        counts[i as usize] += 1;
    }
}

pub fn shutdown(nodes: Vec<NodeHandle>) {
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}
