//! Bounded model checking of the relocation, home-move and membership protocols: every
//! interleaving of small scenarios (2–3 nodes, 1–3 keys, a few ops) is explored with
//! `roam_sim::explore`, branching at each step over every deliverable link head and every
//! worker that can issue its next op. At the end of every execution the same properties as the
//! random tests are checked: per-key linearizability (plus per-worker program order where it is
//! guaranteed: no location caches, fast local access, no home move, join or drain), exact final
//! sums, every op completed, a single copy of every key recorded by its home, no warning or
//! anomaly. After every step the simulator checks that no key is held twice.
//!
//! CI explores the scenarios below within a minute or two; `ROAM_SIM_EXHAUSTIVE_DEPTH=<n>`
//! (long mode) adds larger scenarios and cuts executions at `n` events (the prefixes of cut
//! ones are checked for safety only).

mod common;

use common::{consistency, finals, total};
use roam_core::{Key, KeySpace, NodeId, Partitioning};
use roam_sim::explore::{ExploreConfig, ExploreStats, explore};
use roam_sim::{
    Consistency, Op, Outcome, Sim, SimConfig, WorkerRef, check_final_sums_exact, check_linearizable,
};

/// A small scenario: cluster shape, flags and scripts.
struct Scenario {
    name: &'static str,
    nodes: u32,
    workers: u32,
    keys: u64,
    caches: bool,
    fast: bool,
    /// A sparse key space (hash homes; keys created on first use).
    sparse: bool,
    /// Static allocation: keys stay at their home, and a home move carries them.
    static_alloc: bool,
    /// Replicated keys (synchronised by one background round at time 0, racing with
    /// everything else, and by `SyncReplicas`; no later round, so executions are finite).
    replicated: Vec<Key>,
    /// The last node is a server that asks to join at time 0 (its `Join` races with
    /// everything else).
    joiner: bool,
    /// Intents may replicate keys (all techniques; one share-sync round at time 0, then
    /// replicas change by grants and leaves only, so executions are finite). Replica reads are
    /// bounded-stale, not linearizable: such scenarios check exact final sums, and that no
    /// replica or interest is left.
    shared: bool,
    scripts: Vec<(WorkerRef, Vec<Op>)>,
}

/// Fast local access, no location caches, a dense key space, nothing replicated.
impl Default for Scenario {
    fn default() -> Self {
        Self {
            name: "",
            nodes: 2,
            workers: 1,
            keys: 1,
            caches: false,
            fast: true,
            sparse: false,
            static_alloc: false,
            replicated: Vec::new(),
            joiner: false,
            shared: false,
            scripts: Vec::new(),
        }
    }
}

impl Scenario {
    /// `nodes` nodes of one worker each over `keys` keys and no scripts yet, with the defaults
    /// otherwise (other fields set as `Scenario { field, ..Scenario::new(…) }`).
    fn new(name: &'static str, nodes: u32, keys: u64) -> Self {
        Self {
            name,
            nodes,
            keys,
            ..Self::default()
        }
    }

    /// Adds `worker`'s script (scripts are added in the order the explorer sees them).
    fn script(mut self, worker: WorkerRef, script: impl Into<Vec<Op>>) -> Self {
        self.scripts.push((worker, script.into()));
        self
    }

    fn build(&self) -> Sim {
        let (space, partitioning) = if self.sparse {
            (KeySpace::sparse(1).unwrap(), Partitioning::Hash)
        } else {
            (
                KeySpace::uniform(self.keys, 1).unwrap(),
                Partitioning::Range,
            )
        };
        let cfg = SimConfig::new(self.nodes, self.workers, space)
            .with_partitioning(partitioning)
            .with_dynamic(!self.static_alloc)
            .with_location_caches(self.caches)
            .with_fast_local_access(self.fast)
            .with_delay(0, 0)
            .with_think(0, 0)
            .with_joiners(u32::from(self.joiner))
            .with_intent_techniques(
                if self.shared {
                    roam_core::IntentTechniques::All
                } else {
                    roam_core::IntentTechniques::RelocateOnly
                },
                u64::MAX,
            );
        let cfg = if self.replicated.is_empty() {
            cfg
        } else {
            cfg.with_replication(self.replicated.clone(), u64::MAX)
        };
        let mut sim = Sim::new(cfg);
        for (w, script) in &self.scripts {
            sim.add_script(*w, script.clone());
        }
        if self.joiner {
            sim.start_join(NodeId(self.nodes - 1));
        }
        sim
    }

    /// Every key's final value: the sum of the pushes to it (scenarios do not set).
    fn expected(&self) -> Vec<f32> {
        let mut sums = vec![0.0; self.keys as usize];
        for (_, script) in &self.scripts {
            for op in script {
                match op {
                    Op::Push { keys, vals, .. } => keys
                        .iter()
                        .zip(vals)
                        .for_each(|(&k, v)| sums[k as usize] += v),
                    Op::Set { .. } => panic!("scenarios only push"),
                    _ => {}
                }
            }
        }
        sums
    }

    fn explore(&self, depth: usize) -> ExploreStats {
        let expected = self.expected();
        // Joins and drains move homes too.
        let moves_homes = self.joiner
            || self.scripts.iter().any(|(_, script)| {
                script
                    .iter()
                    .any(|op| matches!(op, Op::MoveHome { .. } | Op::Drain { .. }))
            });
        let name = self.name;
        let mut check = |sim: &Sim, complete: bool| {
            let history = sim.history();
            if !complete {
                // A cut execution: nothing may be wrong so far.
                if !self.shared {
                    check_linearizable(history, Consistency::linearizable(), None)
                        .unwrap_or_else(|v| panic!("{name}: {v}"));
                }
                return;
            }
            assert!(
                sim.unfinished_workers().is_empty(),
                "{name}: hung: {:?}",
                sim.unfinished_workers()
            );
            for op in history.ops() {
                assert!(op.succeeded(), "{name}: {op}");
            }
            assert!(sim.warnings().is_empty(), "{name}: {:?}", sim.warnings());
            assert_eq!(total(sim, |c| &c.anomalies), 0, "{name}");
            sim.check_quiescent_placement()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // Replicated keys: every pull after the worker's `SyncReplicas` reads the exact sum.
            for (wr, script) in &self.scripts {
                let synced = script
                    .iter()
                    .position(|op| matches!(op, Op::SyncReplicas))
                    .unwrap_or(script.len());
                for (op, record) in script.iter().zip(history.of_worker(*wr)).skip(synced) {
                    if let Op::Pull { keys, .. } = op {
                        let want: Vec<f32> = keys.iter().map(|&k| expected[k as usize]).collect();
                        assert_eq!(record.outcome, Outcome::Pulled(want), "{name}: {record}");
                    }
                }
            }
            let finals = finals(sim);
            for (k, want) in expected.iter().enumerate() {
                if self.replicated.contains(&(k as Key)) {
                    continue;
                }
                assert_eq!(
                    finals[k],
                    Some(vec![*want]),
                    "{name}: final value of key {k}"
                );
            }
            if self.shared {
                for n in 0..sim.config().nodes {
                    let node = sim.node(NodeId(n));
                    assert_eq!(
                        (node.shared_replicas(), node.shared_keys()),
                        (0, 0),
                        "{name}: node {n} still shares keys"
                    );
                }
                return;
            }
            check_final_sums_exact(history, &finals).unwrap_or_else(|e| panic!("{name}: {e}"));
            check_linearizable(
                history,
                consistency(sim.config(), moves_homes),
                Some(&finals),
            )
            .unwrap_or_else(|v| panic!("{name}: {v}"));
        };
        let started = std::time::Instant::now();
        let stats = explore(
            &|| self.build(),
            ExploreConfig {
                max_depth: depth,
                merge_states: true,
            },
            &mut check,
        );
        eprintln!(
            "{name}: {} interleavings covered, {} executions run and checked, {} merged, {} truncated, \
             {} states, {} steps, longest {} events, {:.2?}",
            stats.interleavings,
            stats.executions_checked,
            stats.merged,
            stats.truncated,
            stats.states,
            stats.steps,
            stats.deepest,
            started.elapsed()
        );
        stats
    }
}

/// An asynchronous move of `key`'s bucket to node `to`.
fn move_async(key: Key, to: u32) -> Op {
    Op::MoveHome {
        key,
        to,
        wait: false,
    }
}

fn w(node: u32, worker: u32) -> WorkerRef {
    WorkerRef::new(node, worker)
}

fn push(keys: impl Into<Vec<Key>>, v: f32) -> Op {
    let keys = keys.into();
    let vals = vec![v; keys.len()];
    Op::push_async(keys, vals)
}

/// The scenarios CI explores completely.
fn ci_scenarios() -> Vec<Scenario> {
    vec![
        // Key 0 (home node 0) moves to node 1 while the home pushes to it and both read it.
        Scenario::new("relocation racing with accesses (2 nodes, 1 key)", 2, 1)
            .script(
                w(1, 0),
                [
                    Op::localize_async(vec![0]),
                    push([0], 1.0),
                    Op::pull(vec![0]),
                ],
            )
            .script(w(0, 0), [push([0], 2.0), Op::pull(vec![0])]),
        // Two nodes ask for the home's key at once: one relocation may chain into the other.
        Scenario::new("competing and chained relocations (3 nodes, 1 key)", 3, 1)
            .script(w(1, 0), [Op::localize_async(vec![0]), push([0], 1.0)])
            .script(w(2, 0), [Op::localize_async(vec![0]), push([0], 2.0)])
            .script(w(0, 0), [Op::pull(vec![0])]),
        // Batched ops over two keys with different homes while one of them moves.
        Scenario::new("batched ops across owners (2 nodes, 2 keys)", 2, 2)
            .script(
                w(0, 0),
                [
                    Op::localize_async(vec![1]),
                    push([0, 1], 1.0),
                    Op::pull(vec![1, 0]),
                ],
            )
            .script(w(1, 0), [push([1, 0], 2.0), Op::pull(vec![0, 1])]),
        // Location caches: stale entries and the hops they cost (linearizability only).
        Scenario {
            caches: true,
            ..Scenario::new("location caches (3 nodes, 1 key)", 3, 1)
                .script(w(1, 0), [Op::localize(vec![0])])
                .script(
                    w(2, 0),
                    [Op::pull_async(vec![0]), push([0], 1.0), push([0], 2.0)],
                )
        },
        // No fast local access: local ops travel over the self-link while the key moves.
        Scenario {
            fast: false,
            ..Scenario::new("no fast local access (2 nodes, 1 key)", 2, 1)
                .script(
                    w(1, 0),
                    [Op::localize(vec![0]), push([0], 1.0), Op::pull(vec![0])],
                )
                .script(w(0, 0), [Op::localize_async(vec![0]), push([0], 2.0)])
        },
    ]
}

/// Home moves racing with accesses and relocations.
fn home_move_scenarios() -> Vec<Scenario> {
    vec![
        // Key 0's home moves from node 0 to node 1 while both push to it and read it.
        Scenario::new("home move racing with accesses (2 nodes, 1 key)", 2, 1)
            .script(
                w(1, 0),
                [move_async(0, 1), push([0], 1.0), Op::pull(vec![0])],
            )
            .script(w(0, 0), [push([0], 2.0), Op::pull(vec![0])]),
        // The home moves to a third node while a relocation of the key is under way. (With a
        // read from the old home as well it is a long-mode scenario: 700 s on these VMs.)
        Scenario::new("home move racing with a relocation (3 nodes, 1 key)", 3, 1)
            .script(w(1, 0), [Op::localize_async(vec![0]), push([0], 1.0)])
            .script(w(2, 0), [move_async(0, 2), push([0], 2.0)]),
        // Batched ops over two buckets while one bucket's home moves and a key relocates.
        Scenario::new(
            "home move with batches across buckets (2 nodes, 2 keys)",
            2,
            2,
        )
        .script(
            w(0, 0),
            [move_async(1, 0), push([0, 1], 1.0), Op::pull(vec![1, 0])],
        )
        .script(w(1, 0), [Op::localize_async(vec![0]), push([1, 0], 2.0)]),
    ]
}

/// Home moves under static allocation, which carry the bucket's keys to the new home, racing
/// with accesses from every node (dense and sparse keys).
fn static_home_move_scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            static_alloc: true,
            ..Scenario::new(
                "static: a key carried to a new home while both nodes push and read (2 nodes)",
                2,
                1,
            )
            .script(
                w(1, 0),
                [move_async(0, 1), push([0], 1.0), Op::pull(vec![0])],
            )
            .script(w(0, 0), [push([0], 2.0), Op::pull(vec![0])])
        },
        Scenario {
            static_alloc: true,
            ..Scenario::new(
                "static: a key carried to a third node while the others push and read (3 nodes)",
                3,
                1,
            )
            .script(w(2, 0), [move_async(0, 2), push([0], 2.0)])
            .script(w(1, 0), [push([0], 1.0)])
            .script(w(0, 0), [Op::pull(vec![0])])
        },
        Scenario {
            sparse: true,
            static_alloc: true,
            ..Scenario::new(
                "static: a sparse key created while its bucket is carried (2 nodes)",
                2,
                1,
            )
            .script(w(1, 0), [move_async(0, 1), push([0], 1.0)])
            .script(w(0, 0), [push([0], 2.0), Op::pull(vec![0])])
        },
    ]
}

/// A server joining and a node draining (`membership.rs`), racing with accesses from the
/// other nodes, under both allocations.
fn membership_scenarios() -> Vec<Scenario> {
    let mut scenarios = Vec::new();
    for static_alloc in [true, false] {
        scenarios.push(Scenario {
            static_alloc,
            joiner: true,
            // Range homes of keys 0..3 over 2 nodes: 0, 0, 1; the joiner takes bucket 1.
            ..Scenario::new(
                if static_alloc {
                    "static: a server joins and takes a bucket while both nodes push and read"
                } else {
                    "dynamic: a server joins and takes a bucket while both nodes push and read"
                },
                3,
                3,
            )
            .script(w(0, 0), [push([1], 1.0), Op::pull(vec![1])])
            .script(w(1, 0), [push([1], 2.0)])
        });
        scenarios.push(Scenario {
            static_alloc,
            // One key per node; node 2's key goes to node 0 (the fewest buckets, lowest id).
            ..Scenario::new(
                if static_alloc {
                    "static: node 2 drains while node 1 pushes to and reads its key"
                } else {
                    "dynamic: node 2 drains while node 1 localizes, pushes and reads its key"
                },
                3,
                3,
            )
            .script(w(0, 0), [Op::drain(2)])
            .script(
                w(1, 0),
                if static_alloc {
                    vec![push([2], 1.0), Op::pull(vec![2])]
                } else {
                    vec![Op::localize_async(vec![2]), push([2], 1.0)]
                },
            )
        });
    }
    scenarios
}

/// CI: every interleaving of the join and drain scenarios, none cut.
#[test]
fn every_interleaving_of_small_join_and_drain_scenarios_is_correct() {
    explore_completely(membership_scenarios());
}

/// CI: every interleaving of the static home-move scenarios, none cut.
#[test]
fn every_interleaving_of_small_static_home_move_scenarios_is_correct() {
    explore_completely(static_home_move_scenarios());
}

/// Larger scenarios for the long mode: each one op or one worker more than a CI scenario
/// (about ten to a hundred times the interleavings).
fn long_scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            workers: 2,
            replicated: vec![0],
            ..Scenario::new(
                "long: replicated key pushed by two workers, read on both nodes (2 x 2)",
                2,
                1,
            )
            .script(w(0, 0), [Op::SyncReplicas, Op::pull(vec![0])])
            .script(w(0, 1), [Op::SyncReplicas])
            .script(
                w(1, 0),
                [push([0], 2.0), Op::SyncReplicas, Op::pull(vec![0])],
            )
            .script(w(1, 1), [push([0], 3.0), Op::SyncReplicas])
        },
        Scenario::new(
            "long: home move racing with a relocation and a read at the old home (3 nodes)",
            3,
            1,
        )
        .script(w(1, 0), [Op::localize_async(vec![0]), push([0], 1.0)])
        .script(w(2, 0), [move_async(0, 2), push([0], 2.0)])
        .script(w(0, 0), [Op::pull(vec![0])]),
        Scenario::new(
            "long: competing relocations while the home pushes (3 nodes, 1 key)",
            3,
            1,
        )
        .script(w(1, 0), [Op::localize_async(vec![0]), push([0], 1.0)])
        .script(w(2, 0), [Op::localize_async(vec![0]), push([0], 2.0)])
        .script(w(0, 0), [push([0], 4.0), Op::pull(vec![0])]),
        Scenario {
            workers: 2,
            ..Scenario::new("long: two workers per node (2 nodes, 1 key)", 2, 1)
                .script(w(0, 0), [push([0], 1.0)])
                .script(w(0, 1), [Op::pull(vec![0])])
                .script(w(1, 0), [Op::localize_async(vec![0]), push([0], 2.0)])
                .script(w(1, 1), [Op::pull(vec![0])])
        },
        Scenario {
            caches: true,
            ..Scenario::new(
                "long: caches while the owner moves again (3 nodes, 1 key)",
                3,
                1,
            )
            .script(w(1, 0), [Op::localize(vec![0])])
            .script(
                w(2, 0),
                [Op::pull_async(vec![0]), push([0], 1.0), push([0], 2.0)],
            )
            .script(w(0, 0), [Op::localize_async(vec![0])])
        },
    ]
}

/// CI: every interleaving of the small scenarios, none cut.
#[test]
fn every_interleaving_of_small_relocation_scenarios_is_correct() {
    let cfg = ExploreConfig::from_env(200);
    let mut total_interleavings = 0u128;
    let mut checked = 0;
    for scenario in ci_scenarios() {
        let stats = scenario.explore(cfg.max_depth);
        assert_eq!(
            stats.truncated, 0,
            "{}: executions were cut at depth {}",
            scenario.name, cfg.max_depth
        );
        assert!(
            stats.executions_checked > 10,
            "{}: {stats:?}",
            scenario.name
        );
        total_interleavings += stats.interleavings;
        checked += stats.executions_checked;
    }
    eprintln!(
        "CI scenarios: {total_interleavings} interleavings covered, {checked} executions checked"
    );
}

/// Explores every interleaving of each scenario, none cut, each with more than a few.
fn explore_completely(scenarios: Vec<Scenario>) {
    let cfg = ExploreConfig::from_env(300);
    for scenario in scenarios {
        let stats = scenario.explore(cfg.max_depth);
        assert_eq!(stats.truncated, 0, "{}: cut", scenario.name);
        assert!(
            stats.executions_checked > 10,
            "{}: {stats:?}",
            scenario.name
        );
    }
}

/// CI: every interleaving of the home-move scenarios, none cut.
#[test]
fn every_interleaving_of_small_home_move_scenarios_is_correct() {
    explore_completely(home_move_scenarios());
}

/// Keys of a sparse space, created on first use, racing with relocations and accesses.
fn sparse_scenarios() -> Vec<Scenario> {
    vec![
        // Node 1 localizes a key nobody created yet while node 0 pushes to it: the creator
        // makes it once, whichever request reaches it first.
        Scenario {
            sparse: true,
            ..Scenario::new(
                "sparse key created by a racing localize and push (2 nodes, 1 key)",
                2,
                1,
            )
            .script(w(1, 0), [Op::localize_async(vec![0]), push([0], 1.0)])
            .script(w(0, 0), [push([0], 2.0), Op::pull(vec![0])])
        },
        // Two keys with different creators, a batch over both and a relocation of one.
        Scenario {
            sparse: true,
            ..Scenario::new(
                "sparse keys of two creators in one batch (2 nodes, 2 keys)",
                2,
                2,
            )
            .script(w(0, 0), [Op::localize_async(vec![1]), push([0, 1], 1.0)])
            .script(w(1, 0), [Op::pull(vec![0, 1]), push([1], 2.0)])
        },
    ]
}

/// Replicated keys mixed with a relocated one: the sync round at time 0, the deltas, the hub's
/// broadcast and the `SyncReplicas` flush race with pushes, a relocation and each other.
fn replication_scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            replicated: vec![1],

            ..Scenario::new(
                "replicated key pushed on both nodes, synced, beside a relocated key (2 nodes)",
                2,
                2,
            )
            .script(
                w(0, 0),
                [
                    Op::localize_async(vec![0]),
                    push([0, 1], 1.0),
                    Op::SyncReplicas,
                    Op::pull(vec![1]),
                ],
            )
            .script(
                w(1, 0),
                [push([1, 0], 2.0), Op::SyncReplicas, Op::pull(vec![1])],
            )
        },
        // Two workers per node, pushes on one node only: its deltas reach the key's hub (either
        // node) and come back to the other, while both nodes' workers arrive at the sync. (With
        // a read after the sync on the pushing node too it is a long-mode scenario.)
        Scenario {
            workers: 2,
            replicated: vec![0],
            ..Scenario::new(
                "replicated key pushed away from its hub by two workers (2 nodes x 2 workers)",
                2,
                1,
            )
            .script(w(0, 0), [Op::SyncReplicas, Op::pull(vec![0])])
            .script(w(0, 1), [Op::SyncReplicas])
            .script(w(1, 0), [push([0], 2.0), Op::SyncReplicas])
            .script(w(1, 1), [push([0], 3.0), Op::SyncReplicas])
        },
    ]
}

/// Replication by intent (`roam_core::share`): intents on two nodes over the same clocks.
fn sharing_scenarios() -> Vec<Scenario> {
    let intent = |start: u64, end: u64| Op::Intent {
        keys: vec![0],
        start,
        end,
    };
    vec![
        Scenario {
            shared: true,
            ..Scenario::new(
                "key wanted on both nodes at once: moved or replicated, pushed on both, \
                   flushed when the intents end (2 nodes)",
                2,
                1,
            )
            .script(w(0, 0), [intent(0, 2), push([0], 1.0), Op::AdvanceClock])
            .script(w(1, 0), [intent(0, 2), push([0], 2.0), Op::AdvanceClock])
        },
        Scenario {
            shared: true,
            ..Scenario::new(
                "shared key localized by its home: replicas revoked, then moved (3 nodes)",
                3,
                1,
            )
            .script(w(0, 0), [Op::localize(vec![0])])
            .script(w(1, 0), [intent(0, 9), push([0], 1.0)])
            .script(w(2, 0), [intent(0, 9), push([0], 2.0)])
        },
    ]
}

/// CI: every interleaving of the sharing scenarios, none cut.
#[test]
fn every_interleaving_of_small_sharing_scenarios_is_correct() {
    explore_completely(sharing_scenarios());
}

/// CI: every interleaving of the replication scenarios, none cut.
#[test]
fn every_interleaving_of_small_replication_scenarios_is_correct() {
    explore_completely(replication_scenarios());
}

/// CI: every interleaving of the sparse-key scenarios, none cut.
#[test]
fn every_interleaving_of_small_sparse_key_scenarios_is_correct() {
    explore_completely(sparse_scenarios());
}

/// Long mode only (`ROAM_SIM_EXHAUSTIVE_DEPTH=<n>`): larger scenarios, cut at depth `n`.
#[test]
fn every_interleaving_of_larger_scenarios_is_correct_in_long_mode() {
    if !ExploreConfig::long_mode() {
        eprintln!("skipped: set ROAM_SIM_EXHAUSTIVE_DEPTH=<n> to explore the larger scenarios");
        return;
    }
    let cfg = ExploreConfig::from_env(200);
    for scenario in long_scenarios() {
        scenario.explore(cfg.max_depth);
    }
}

/// The explorer itself: on a scenario small enough to count by hand it covers every
/// interleaving, whether or not equivalent states are merged, and merging saves work.
#[test]
fn the_explorer_counts_every_interleaving() {
    // One worker on each of two nodes, each doing one local (fast path) push: two events that
    // can go in either order, nothing else: exactly 2 interleavings.
    let scenario = Scenario::new("two local pushes", 2, 2)
        .script(w(0, 0), [push([0], 1.0)])
        .script(w(1, 0), [push([1], 1.0)]);
    let stats = scenario.explore(50);
    assert_eq!((stats.interleavings, stats.executions_checked), (2, 2));
    // A remote sync pull from node 1 (to node 0 and back) against a local push at node 0:
    // the push can come before the pull is issued, between issue and request delivery,
    // between delivery and reply delivery, or after: 4 interleavings.
    let scenario = Scenario::new("remote pull against local push", 2, 1)
        .script(w(0, 0), [push([0], 1.0)])
        .script(w(1, 0), [Op::pull(vec![0])]);
    let stats = scenario.explore(50);
    assert_eq!(stats.interleavings, 4, "{stats:?}");
    // Merging states covers the same interleavings with fewer executions run.
    let big = &ci_scenarios()[0];
    let expected = big.expected();
    let mut no_check = |_: &Sim, _: bool| {};
    let merged = explore(
        &|| big.build(),
        ExploreConfig {
            max_depth: 200,
            merge_states: true,
        },
        &mut no_check,
    );
    let plain = explore(
        &|| big.build(),
        ExploreConfig {
            max_depth: 200,
            merge_states: false,
        },
        &mut no_check,
    );
    assert_eq!(merged.interleavings, plain.interleavings);
    assert_eq!(plain.executions_checked as u128, plain.interleavings);
    assert!(
        merged.executions_checked < plain.executions_checked,
        "{merged:?} vs {plain:?}"
    );
    assert_eq!(expected, vec![3.0]);
    let _ = NodeId(0);
}
