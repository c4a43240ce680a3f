//! The model's vectors outside training: their seeded initial values, set once by the nodes
//! that are their homes, and gathering every vector for evaluation.
//!
//! Invariant: a word's initial input vector depends only on (seed, word), so every mode and
//! cluster shape starts from the same model; output vectors start at zero (the store's
//! initial value) and are never set.

use rand::{SeedableRng, rngs::SmallRng};
use roam::{Key, Worker};
use roam_core::NodeId;

use super::eval::Embeddings;
use super::train::{CHUNK, Job};

/// Sets the initial input vectors this node is home of (each of its workers takes every
/// `workers_per_node`-th): uniform in ±1/dim from a per-word seed, so every mode and cluster
/// shape starts from the same model. Output vectors start at zero (the store's initial value).
/// A replicated key is set like any other (the set goes to its hub, once, from the node its
/// directory names as home); the caller's `sync_replicas` then brings it into every replica.
pub(super) fn init_vectors(job: &Job<'_>, w: &Worker) -> anyhow::Result<()> {
    let dim = job.args.dim as usize;
    let home = w.directory();
    let wpn = u64::from(w.workers_per_node());
    let mine: Vec<Key> = (0..job.keys.num_keys())
        .step_by(2)
        .filter(|&k| home.home(k) == NodeId(w.rank()) && (k / 2) % wpn == u64::from(w.id()))
        .collect();
    let mut vals = Vec::with_capacity(CHUNK * dim);
    for chunk in mine.chunks(CHUNK) {
        vals.clear();
        for &k in chunk {
            let word = job.keys.word_of_key(k).0;
            vals.extend(initial_vector(job.args.seed, word, dim));
        }
        w.set(chunk, &vals)?.wait()?;
    }
    Ok(())
}

/// Word `word`'s initial input vector: uniform in `±1/dim`, gensim's range (`(2u − 1)/dim`),
/// twice word2vec.c's `(u − 0.5)/dim`, which reached 0.009 less WordSim-353 Spearman on gcide
/// (docs/workloads-w2v.md, "Against gensim").
pub fn initial_vector(seed: u64, word: u32, dim: usize) -> impl Iterator<Item = f32> {
    use rand::Rng;
    let mut rng =
        SmallRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(word));
    (0..dim).map(move |_| (rng.random::<f32>() * 2.0 - 1.0) / dim as f32)
}

/// Global worker 0 pulls every vector for evaluation.
pub(super) fn gather(job: &Job<'_>, w: &Worker) -> anyhow::Result<Embeddings> {
    let dim = job.args.dim as usize;
    let v = job.vocab_len as u32;
    let mut out = Vec::with_capacity(2);
    for syn1 in [false, true] {
        let keys: Vec<Key> = (0..v)
            .map(|x| {
                if syn1 {
                    job.keys.syn1(x)
                } else {
                    job.keys.syn0(x)
                }
            })
            .collect();
        let mut m = vec![0f32; keys.len() * dim];
        for (kc, mc) in keys.chunks(CHUNK).zip(m.chunks_mut(CHUNK * dim)) {
            w.pull(kc, mc)?.wait()?;
        }
        out.push(m);
    }
    let syn1 = out.pop().unwrap_or_default();
    let syn0 = out.pop().unwrap_or_default();
    Ok(Embeddings { dim, syn0, syn1 })
}
