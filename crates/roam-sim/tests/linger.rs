//! Interest that lingers past short intents (`roam_core::intent` `linger.rs`) in the
//! simulator: the access pattern it is for — every worker signalling one-clock intents on a
//! few keys drawn uniformly from a small set, as KGE's negative samples do — with random
//! delays, think times and share-sync periods; in half of the cases mixed with long intents
//! signalled ahead, whose owners may defer while other nodes' replicas linger.
//!
//! Every run must end with each key's owner holding exactly the sum of every push, no replica
//! left once every worker finished (a finished worker ends its lingers), every replica granted
//! dropped, every read a sum of pushes, no warning. Over the seeds, lingering must ask for
//! keys less often than the ablation (interest ending with each intent) on the same scripts.

mod common;

use common::{
    check_shared_run, counted_push, one_clock_uses, random_keys, run_fault_free,
    run_one_worker_per_node, scripted_intents_cfg, test_rng, tick_10us, total, workers_of,
};
use rand::Rng;
use roam_core::{IntentTechniques, KeySpace};
use roam_sim::{Op, SimConfig, WorkerRef, for_each_seed, seeds};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 30 } else { 300 }
}

type Case = (SimConfig, Vec<(WorkerRef, Vec<Op>)>, Vec<Vec<f32>>);

/// A random case: 2–3 nodes of 1–2 workers, 4–12 keys, 300–500 one-clock intents per worker
/// (a run spans several 1 ms spans of the workers' rate measurement, so the intents are
/// timed and short against a share-sync period of 50–400 µs).
fn case(seed: u64, linger: bool) -> Case {
    let mut rng = test_rng(seed ^ 0x11e6);
    let nodes = rng.random_range(2..=3);
    let workers_per_node = rng.random_range(1..=2);
    let num_keys: u64 = rng.random_range(4..=12);
    let space =
        KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=2)).collect()).unwrap();
    let period = rng.random_range(50_000..=400_000);
    let cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_dynamic(true)
        .with_fast_local_access(rng.random_bool(0.8))
        .with_intent_techniques(IntentTechniques::All, period)
        .with_intent_linger(linger)
        .with_delay(
            rng.random_range(1_000..=5_000),
            rng.random_range(5_000..=40_000),
        )
        .with_think(1_000, rng.random_range(2_000..=12_000));
    // In half of the cases some intents are long and signalled ahead (a lead): their owners
    // may defer, while other nodes' replicas of the same keys linger past their uses.
    let long_share = if rng.random_bool(0.5) { 0.1 } else { 0.0 };
    let mut expected: Vec<Vec<f32>> = (0..num_keys).map(|k| vec![0.0; space.len(k)]).collect();
    let mut scripts = Vec::new();
    for w in workers_of(&cfg) {
        let mut script = Vec::new();
        for clock in 0..rng.random_range(300..=500u64) {
            let keys = random_keys(&mut rng, num_keys);
            if rng.random_bool(long_share) {
                let start = clock + rng.random_range(1..=40);
                script.push(Op::Intent {
                    keys: random_keys(&mut rng, num_keys),
                    start,
                    end: start + rng.random_range(20..=200),
                });
            }
            script.push(Op::Intent {
                keys: keys.clone(),
                start: clock + 1,
                end: clock + 2,
            });
            script.push(Op::AdvanceClock);
            let wait = rng.random_bool(0.3);
            if rng.random_bool(0.3) {
                script.push(Op::Pull {
                    keys: keys.clone(),
                    wait,
                });
            }
            script.push(counted_push(&mut rng, &space, keys, wait, &mut expected));
        }
        script.extend((0..5).map(|_| Op::AdvanceClock));
        script.push(Op::WaitAll);
        scripts.push((w, script));
    }
    (cfg, scripts, expected)
}

/// Runs one case and checks it; returns the keys asked for by intent (grants plus moves).
fn run(seed: u64, linger: bool) -> u64 {
    let (cfg, scripts, expected) = case(seed, linger);
    let sim = run_fault_free(seed, cfg, scripts);
    check_shared_run(&sim, &expected, &format!("seed {seed} (linger {linger})"));
    total(&sim, |c| &c.share_grants) + total(&sim, |c| &c.intent_relocations)
}

#[test]
fn lingering_loses_no_update_ends_every_replica_and_asks_for_keys_less_often() {
    let n = seeds(default_seeds()).len() as u64;
    let (mut lingering, mut ablation) = (0u64, 0u64);
    let mut fewer = 0u64;
    for_each_seed(default_seeds(), |seed| {
        let with = run(seed, true);
        let without = run(seed, false);
        lingering += with;
        ablation += without;
        fewer += u64::from(with < without);
    });
    eprintln!(
        "{n} seeds: keys asked for by intent {lingering} lingering, {ablation} without; fewer \
         in {fewer} runs"
    );
    assert!(
        lingering * 2 <= ablation,
        "lingering should at least halve the keys asked for: {lingering} against {ablation}"
    );
    assert!(fewer * 2 > n, "fewer in most runs: {fewer} of {n}");
}

/// Key 3 (owned by node 3, range homes) is used by node 3 for a long time at first, so nodes
/// 1 and 2, using it again and again for one clock at a time, get replicas and keep them by
/// lingering (they send no word about their later uses; two of them, so that the key is not
/// promoted to one). Once node 3's use is over, node 0 signals a long use ahead of time. The
/// sharers' uses as they announced them ended long ago: the owner must not defer node 0's
/// offer waiting for them (it would wait until the deadline, after node 0's intent started),
/// but share the key at once.
fn stale_sharers_run(seed: u64) -> roam_sim::Sim {
    let cfg = scripted_intents_cfg(4, seed);
    let key = 3;
    // Node 3: the key for clocks 1..300 (3 ms), then 700 clocks without it.
    let mut owner = vec![Op::Intent {
        keys: vec![key],
        start: 1,
        end: 300,
    }];
    for _ in 0..1_000 {
        tick_10us(&mut owner);
    }
    // Nodes 1 and 2: from clock 200 (their rates measured, so that they say when their uses
    // end) the key for one clock at a time, 800 times, a push each.
    let sharer = one_clock_uses(key, 200, 1_000);
    // Node 0: 500 clocks to measure its rate, then the key for clocks 560..760, signalled now.
    let mut wanter = Vec::new();
    for _ in 0..500 {
        tick_10us(&mut wanter);
    }
    wanter.push(Op::Intent {
        keys: vec![key],
        start: 560,
        end: 760,
    });
    for clock in 500..1_000u64 {
        tick_10us(&mut wanter);
        if (560..760).contains(&(clock + 1)) {
            wanter.push(Op::push(vec![key], vec![1.0]));
        }
    }
    run_one_worker_per_node(
        seed,
        cfg,
        vec![(0, wanter), (1, sharer.clone()), (2, sharer), (3, owner)],
    )
}

#[test]
fn an_owner_does_not_defer_an_offer_for_sharers_whose_use_is_over() {
    for seed in seeds(10) {
        let sim = stale_sharers_run(seed);
        let deferrals = total(&sim, |c| &c.share_deferrals);
        let expired = total(&sim, |c| &c.share_deferrals_expired);
        let late = sim
            .worker_counters(WorkerRef::new(0, 0))
            .late_intents
            .load(std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "seed {seed}: deferrals {deferrals}, expired {expired}, node 0's late intents {late}, \
             grants {}",
            total(&sim, |c| &c.share_grants)
        );
        assert_eq!(deferrals, 0, "seed {seed}: no offer waited for the sharers");
        assert_eq!(expired, 0, "seed {seed}: no offer waited for its deadline");
        assert!(
            total(&sim, |c| &c.share_grants) >= 3,
            "seed {seed}: nodes 1 and 2, then node 0, got replicas"
        );
        assert_eq!(
            late, 0,
            "seed {seed}: node 0 had the key when its use began"
        );
        assert_eq!(
            sim.peek(3),
            Some(vec![1_600.0 + 200.0]),
            "seed {seed}: every push once"
        );
    }
}

/// A worker of `clocks` clocks of 10 µs (100 µs from clock `slow_from` on) that signals at
/// clock `signal_at` an intent on `key` for `uses`, and pushes 1 to it at each clock of `uses`.
fn signalled_use(
    key: u64,
    signal_at: u64,
    uses: std::ops::Range<u64>,
    clocks: u64,
    slow_from: Option<u64>,
) -> Vec<Op> {
    let mut script = Vec::new();
    for clock in 0..clocks {
        if clock == signal_at {
            script.push(Op::Intent {
                keys: vec![key],
                start: uses.start,
                end: uses.end,
            });
        }
        if slow_from.is_some_and(|slow| clock >= slow) {
            script.extend([Op::Sleep(100_000), Op::AdvanceClock]);
        } else {
            tick_10us(&mut script);
        }
        if uses.contains(&(clock + 1)) {
            script.push(Op::push(vec![key], vec![1.0]));
        }
    }
    script
}

/// Key 2 (owned by node 2, range homes) is used by node 2 one clock at a time for 2 ms, so its
/// interest lingers after the last use; then node 0 and, after it, node 1 each use the key for
/// 5 clocks (a short use, under a sync period), as MF's column blocks are handed on each
/// sub-epoch. An owner whose interest only lingers must move the key to the next user, not
/// share it (a lingering owner that shared it shared it again with every later user: a grant,
/// a leave and sync rounds per use instead of one transfer).
fn handed_on_run(seed: u64) -> roam_sim::Sim {
    let cfg = scripted_intents_cfg(3, seed);
    let key = 2;
    let mut owner = one_clock_uses(key, 0, 200);
    for _ in 200..1_000 {
        tick_10us(&mut owner);
    }
    // A worker that uses the key for clocks `from + 1 .. from + 6`, signalled at `from`.
    let short_use = |from: u64| signalled_use(key, from, from + 1..from + 6, 1_000, None);
    run_one_worker_per_node(
        seed,
        cfg,
        vec![(0, short_use(300)), (1, short_use(600)), (2, owner)],
    )
}

#[test]
fn an_owner_whose_interest_only_lingers_moves_the_key_to_a_short_use() {
    for seed in seeds(10) {
        let sim = handed_on_run(seed);
        let (grants, moved) = (
            total(&sim, |c| &c.share_grants),
            total(&sim, |c| &c.intent_relocations),
        );
        eprintln!(
            "seed {seed}: grants {grants}, intent relocations {moved}, holders {:?}",
            sim.holders(2)
        );
        assert_eq!(grants, 0, "seed {seed}: no replica");
        assert_eq!(moved, 2, "seed {seed}: to node 0, then to node 1");
        assert_eq!(
            sim.holders(2),
            [roam_core::NodeId(1)],
            "seed {seed}: with its last user"
        );
        assert_eq!(
            sim.peek(2),
            Some(vec![200.0 + 10.0]),
            "seed {seed}: every push once"
        );
    }
}

/// Key 1 (owned by node 1, range homes) is used by node 1 for clocks 151..300, signalled once
/// its rate is measured (an intent acted on before that has no expected end), and node 0, on
/// the same 10 µs clocks, signals a long use from clock 300 on at clock 200: when node 0 acts on
/// it, the owner's use is expected to end within twice node 0's lead, so the owner defers the
/// offer. Then the owner slows down (100 µs a clock from clock 290): its use outlasts the
/// deadline, which must expire the deferral (the key is then shared, as without deferral)
/// rather than keep node 0 waiting for the owner's end.
fn overrun_run(seed: u64) -> roam_sim::Sim {
    let cfg = scripted_intents_cfg(2, seed);
    let key = 1;
    let owner = signalled_use(key, 150, 151..300, 400, Some(290));
    let wanter = signalled_use(key, 200, 300..500, 600, None);
    run_one_worker_per_node(seed, cfg, vec![(0, wanter), (1, owner)])
}

#[test]
fn a_deferred_offer_expires_when_the_owner_overruns_its_use() {
    for seed in seeds(10) {
        let sim = overrun_run(seed);
        let deferrals = total(&sim, |c| &c.share_deferrals);
        let expired = total(&sim, |c| &c.share_deferrals_expired);
        let grants = total(&sim, |c| &c.share_grants);
        eprintln!("seed {seed}: deferrals {deferrals}, expired {expired}, grants {grants}");
        assert_eq!(deferrals, 1, "seed {seed}: the owner deferred the offer");
        assert_eq!(expired, 1, "seed {seed}: its deadline passed first");
        assert!(grants >= 1, "seed {seed}: then the key was shared");
        assert_eq!(
            sim.peek(1),
            Some(vec![149.0 + 200.0]),
            "seed {seed}: every push once"
        );
    }
}
