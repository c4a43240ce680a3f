//! Barrier wait warnings in virtual time (`Warning::BarrierWait`): a barrier that waits longer
//! than the interval names exactly the workers (node, worker id) it still waits for — at the node
//! whose worker is missing — and, at the coordinator, the members that have not arrived; it
//! repeats after every further interval and stops once the barrier is released. Retired workers
//! are never named. Seeds: `ROAM_SIM_SEEDS=N`, one seed `ROAM_SIM_SEED=S`.

use roam_core::{KeySpace, NodeId, Warning, WorkerId};
use roam_sim::{Op, Sim, SimConfig, WorkerRef, for_each_seed};

const MS: u64 = 1_000_000;
const EVERY: u64 = 10 * MS;

/// 2 nodes × `workers`, warnings every 10 ms, link delays 10-50 µs.
fn sim(seed: u64, workers: u32) -> Sim {
    Sim::new(
        SimConfig::new(2, workers, KeySpace::uniform(4, 1).unwrap())
            .with_seed(seed)
            .with_delay(10_000, 50_000)
            .with_think(0, 0)
            .with_barrier_warning(EVERY),
    )
}

/// One barrier wait warning: generation, waited ns, workers named, nodes named.
type Wait = (u64, u64, Vec<(NodeId, WorkerId)>, Vec<NodeId>);

/// The barrier wait warnings of `node`.
fn waits(sim: &Sim, node: u32) -> Vec<Wait> {
    sim.warnings()
        .iter()
        .filter(|w| w.node == NodeId(node))
        .filter_map(|w| match &w.core {
            Some(Warning::BarrierWait {
                generation,
                waited_ns,
                workers,
                nodes,
            }) => Some((*generation, *waited_ns, workers.clone(), nodes.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_waiting_barrier_names_exactly_the_missing_workers_and_repeats() {
    for_each_seed(30, |seed| {
        let mut sim = sim(seed, 3);
        // Worker 2 of node 1 reaches the first barrier 25 ms late; everyone else at once.
        // The second barrier is reached by all without delay.
        for node in 0..2 {
            for w in 0..3 {
                let late = node == 1 && w == 2;
                let mut script = Vec::new();
                if late {
                    script.push(Op::Sleep(25 * MS));
                }
                script.extend([Op::Barrier, Op::Barrier]);
                sim.add_script(WorkerRef::new(node, w), script);
            }
        }
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty(), "seed {seed}");
        let late = vec![(NodeId(1), WorkerId(2))];
        assert_eq!(
            waits(&sim, 1),
            [
                (0, EVERY, late.clone(), vec![]),
                (0, 2 * EVERY, late, vec![])
            ],
            "seed {seed}: node 1 names its missing worker at 10 and 20 ms, then it arrives"
        );
        assert_eq!(
            waits(&sim, 0),
            [
                (0, EVERY, vec![], vec![NodeId(1)]),
                (0, 2 * EVERY, vec![], vec![NodeId(1)])
            ],
            "seed {seed}: the coordinator names the member that has not arrived"
        );
        // Warnings come when due, not before.
        for w in sim.warnings() {
            if let Some(Warning::BarrierWait { waited_ns, .. }) = &w.core {
                assert!(w.at.0 >= *waited_ns, "seed {seed}: {w:?}");
            }
        }
        // No other warning: the waits are not anomalies.
        assert_eq!(sim.warnings().len(), 4, "seed {seed}: {:?}", sim.warnings());
        let texts: Vec<&str> = sim.warnings().iter().map(|w| w.message.as_str()).collect();
        assert!(
            texts.contains(&"barrier 0 has waited 20ms; still waiting for worker 2 of node 1")
                && texts.contains(
                    &"barrier 0 has waited 10ms; still waiting for node 1 (no arrival yet)"
                ),
            "seed {seed}: {texts:?}"
        );
    });
}

#[test]
fn workers_that_finished_are_not_waited_for_nor_named() {
    for_each_seed(30, |seed| {
        let mut sim = sim(seed, 3);
        // On node 1, worker 0 arrives at once, worker 1 retires (its handle is dropped) and
        // worker 2 is 15 ms late.
        for w in 0..3 {
            sim.add_script(WorkerRef::new(0, w), [Op::Barrier]);
        }
        sim.add_script(WorkerRef::new(1, 0), [Op::Barrier]);
        sim.add_script(WorkerRef::new(1, 1), [Op::Retire]);
        sim.add_script(WorkerRef::new(1, 2), [Op::Sleep(15 * MS), Op::Barrier]);
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty(), "seed {seed}");
        assert_eq!(
            waits(&sim, 1),
            [(0, EVERY, vec![(NodeId(1), WorkerId(2))], vec![])],
            "seed {seed}: the retired worker 1 is not named"
        );
        assert_eq!(
            waits(&sim, 0),
            [(0, EVERY, vec![], vec![NodeId(1)])],
            "seed {seed}"
        );
    });
}
