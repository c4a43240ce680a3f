//! The model's keys and their set-up: which key each entity and relation is, their value
//! lengths, the key space's optimizer (AdaGrad), the seeded initial values, and gathering the
//! whole model for evaluation.
//!
//! Invariant: every key's initial values come from a generator seeded by (seed, key) alone, so
//! the initial model is the same for any cluster shape, worker count or initialising worker.

use rand::SeedableRng;
use rand::rngs::SmallRng;
use roam::{Key, Worker};

use super::data::Graph;
use super::model::Model;
use super::train::Hyper;

/// Keys pulled or set per batch when initialising or gathering all parameters.
const GATHER_BATCH: usize = 1024;

/// splitmix64 of `a` and `b`: independent seeds per (seed, worker, epoch) or (seed, key).
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(0x632b_e59b_d9b3_e50f);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Key of relation `r`.
pub fn relation_key(graph: &Graph, r: u32) -> Key {
    u64::from(graph.num_entities) + u64::from(r)
}

/// Value lengths of the model keys: entities, then relations (the embeddings; AdaGrad's
/// accumulators are the key space's optimizer state, hidden, see [`optimizer`]).
pub fn key_lengths(graph: &Graph, model: Model) -> Vec<u32> {
    let (e, r) = (model.entity_len() as u32, model.relation_len() as u32);
    let mut lengths = vec![e; graph.num_entities as usize];
    lengths.resize(
        graph.num_entities as usize + graph.num_relations as usize,
        r,
    );
    lengths
}

/// The key space's optimizer: AdaGrad with learning rate `eta` and eps under the root, as
/// Lapse's KGE; `None` for `eta = 0` (the untrained baseline: nothing is pushed).
pub fn optimizer(eta: f32) -> Option<roam::Optimizer> {
    (eta > 0.0).then_some(roam::Optimizer::Adagrad {
        lr: eta,
        eps: super::model::ADAGRAD_EPS,
    })
}

/// Sets the initial values of the model keys `k` with `k % workers == index`; each key's
/// values come from its own generator, so the initial model is the same for any cluster shape.
pub fn init_params(
    worker: &Worker,
    graph: &Graph,
    hyper: &Hyper,
    index: u64,
    workers: u64,
) -> anyhow::Result<()> {
    let (model, seed, init_range) = (hyper.model, hyper.seed, hyper.init_range);
    let lengths = key_lengths(graph, model);
    let mine: Vec<Key> = (index..lengths.len() as u64)
        .step_by(workers as usize)
        .collect();
    let mut vals = Vec::new();
    for keys in mine.chunks(GATHER_BATCH) {
        vals.clear();
        for &k in keys {
            let start = vals.len();
            vals.resize(start + lengths[k as usize] as usize, 0.0);
            Model::init_key(
                &mut vals[start..],
                init_range,
                &mut SmallRng::seed_from_u64(mix(seed, k)),
            );
        }
        worker.set(keys, &vals)?.wait()?;
    }
    Ok(())
}

/// Pulls every entity and relation embedding, in batches.
pub fn gather(
    worker: &Worker,
    graph: &Graph,
    model: Model,
) -> anyhow::Result<super::eval::Embeddings> {
    let (e, rl) = (model.entity_len(), model.relation_len());
    let mut entities = Vec::with_capacity(graph.num_entities as usize * e);
    let mut relations = Vec::with_capacity(graph.num_relations as usize * rl);
    let lengths = key_lengths(graph, model);
    let all: Vec<Key> = (0..lengths.len() as u64).collect();
    let mut buf = Vec::new();
    for keys in all.chunks(GATHER_BATCH) {
        buf.resize(
            keys.iter().map(|&k| lengths[k as usize] as usize).sum(),
            0.0,
        );
        worker.pull(keys, &mut buf)?.wait()?;
        let mut offset = 0;
        for &k in keys {
            let len = lengths[k as usize] as usize;
            let target = if k < u64::from(graph.num_entities) {
                &mut entities
            } else {
                &mut relations
            };
            target.extend_from_slice(&buf[offset..offset + len]);
            offset += len;
        }
    }
    Ok(super::eval::Embeddings {
        model,
        entities,
        relations,
    })
}
