//! Unit tests of intent signaling (`intent.rs`): when intents are acted on, the late check,
//! back-pressure, interest release, and the measured action window.

use super::*;
use crate::keyspace::KeySpace;

fn setup() -> (Store, Intents, Arc<NodeCounters>) {
    let counters = Arc::new(NodeCounters::default());
    let space = KeySpace::uniform(1 << 21, 1).unwrap();
    let interest = Arc::new(Interest::new(&space));
    let intents = Intents::new(IntentTiming::Timed, interest, counters.clone());
    (Store::new(space), intents, counters)
}

/// Ticks `n` times, `ns_per_tick` apart from `*now`, collecting what falls due.
fn tick(intents: &mut Intents, store: &Store, now: &mut u64, ns_per_tick: u64, n: u64) -> Vec<Key> {
    let mut out = Actions::default();
    for _ in 0..n {
        *now += ns_per_tick;
        intents.advance(Time(*now), store, &mut out);
    }
    out.due
}

/// Signals `keys` for `start..start + 1`, returning the keys due now.
fn signal(intents: &mut Intents, store: &Store, keys: &[Key], start: u64) -> Vec<Key> {
    let mut out = Actions::default();
    intents.signal(store, keys, start, start + 1, &mut out);
    out.due
}

#[test]
fn intents_are_acted_on_once_their_start_is_within_the_window() {
    let (store, mut intents, _) = setup();
    let window = intents.window();
    assert_eq!(window, 39, "the first estimate: 10 clocks");
    let due = signal(&mut intents, &store, &[1, 2], window);
    assert_eq!(due, [1, 2], "within the window: acted on at once");
    assert!(signal(&mut intents, &store, &[3], window + 5).is_empty());
    assert_eq!(intents.pending_keys(), 1);
    let mut now = 0;
    assert!(tick(&mut intents, &store, &mut now, 1_000, 4).is_empty());
    assert_eq!(tick(&mut intents, &store, &mut now, 1_000, 1), [3]);
    assert_eq!(intents.pending_keys(), 0);
}

#[test]
fn keys_here_are_not_moved_and_absent_keys_at_the_start_are_late() {
    let (store, mut intents, _) = setup();
    store.insert(5, &[0.0]);
    let due = signal(&mut intents, &store, &[5, 6], 3);
    assert_eq!(due, [6], "key 5 is here already");
    let mut now = 0;
    tick(&mut intents, &store, &mut now, 1_000, 2);
    assert_eq!(intents.tally().late, 0, "not at the start yet");
    store.insert(6, &[0.0]);
    tick(&mut intents, &store, &mut now, 1_000, 1);
    assert_eq!(intents.tally().late, 0, "key 6 arrived before clock 3");
    signal(&mut intents, &store, &[7], 5);
    tick(&mut intents, &store, &mut now, 1_000, 2);
    assert_eq!(intents.tally().late, 1, "key 7 never arrived");
    // Signalled at its start with the key away: late at once.
    signal(&mut intents, &store, &[8], 5);
    assert_eq!(intents.tally().late, 2);
    // And at its start with every key here: on time, nothing moved.
    assert!(signal(&mut intents, &store, &[5], 5).is_empty());
    assert_eq!(intents.tally().late, 2);
    assert_eq!(intents.tally().intents, 4);
}

#[test]
fn a_batch_reports_its_shortest_use_not_its_span() {
    let (store, mut intents, _) = setup();
    let mut now = 0;
    // 1 µs a clock: measured after a span.
    tick(&mut intents, &store, &mut now, 1_000, 2 * SPAN_NS / 1_000);
    let clock = intents.clock;
    let mut out = Actions::default();
    intents.signal(&store, &[1], clock, clock + 1, &mut out);
    intents.signal(&store, &[2], clock, clock + 50_000, &mut out);
    assert_eq!(out.due, [1, 2]);
    assert_eq!(out.shortest_use_ns, 1_000, "the one-clock intent");
    assert_eq!(out.need.lead_ns, 0, "due now");
    assert_eq!(out.need.hold_ns, 50_000_000, "the long one's end");
    // Not measured yet: no use is known.
    let (store, mut fresh, _) = setup();
    let mut out = Actions::default();
    fresh.signal(&store, &[1], 0, 1, &mut out);
    assert_eq!(out.shortest_use_ns, u64::MAX);
}

#[test]
fn back_pressure_acts_on_the_earliest_intents_early_and_loses_none() {
    let (store, mut intents, _) = setup();
    let half = MAX_PENDING_KEYS / 2;
    let keys: Vec<Key> = (0..half as Key - 1).collect();
    assert!(signal(&mut intents, &store, &keys, 1_000_000).is_empty());
    assert!(signal(&mut intents, &store, &keys, 500_000).is_empty());
    assert_eq!(intents.pending_keys(), 2 * keys.len());
    // Over the bound: the earliest (start 500,000) goes now, the other stays.
    let due = signal(&mut intents, &store, &[0, 1, 2], 2_000_000);
    assert_eq!(due, keys);
    assert_eq!(intents.pending_keys(), keys.len() + 3);
}

#[test]
fn acted_intents_hold_interest_until_their_end_and_release_unwanted_replicas() {
    let counters = Arc::new(NodeCounters::default());
    let space = KeySpace::uniform(100, 1).unwrap();
    let interest = Arc::new(Interest::new(&space));
    let mut intents = Intents::new(IntentTiming::Timed, interest.clone(), counters);
    let store = Store::new(space);
    store.insert_replica(4, &[0.0]);
    let mut out = Actions::default();
    intents.signal(&store, &[4, 5], 2, 4, &mut out);
    intents.signal(&store, &[4], 3, 6, &mut out);
    assert_eq!(out.due, [5], "key 4 is replicated here: not asked for");
    out.due.clear();
    assert!(interest.wanted(4) && interest.wanted(5));
    let mut now = 0;
    for clock in 1..=5 {
        now += 1_000;
        intents.advance(Time(now), &store, &mut out);
        assert!(out.unwanted.is_empty(), "clock {clock}: key 4 still wanted");
    }
    assert!(!interest.wanted(5) && interest.wanted(4));
    intents.advance(Time(now + 1_000), &store, &mut out);
    assert_eq!(out.unwanted, [4], "the last intent on key 4 ended");
    assert!(!interest.wanted(4));
    assert_eq!(intents.active_keys(), 0);
    // A finished worker releases what it still holds, and drops what it never acted on.
    out.clear();
    intents.signal(&store, &[4], 8, 20, &mut out);
    intents.signal(&store, &[6], 1_000, 1_001, &mut out);
    assert!(interest.wanted(4));
    intents.finish(&store, &mut out);
    assert_eq!(out.unwanted, [4]);
    assert!(!interest.wanted(4) && !interest.wanted(6));
    assert_eq!((intents.pending_keys(), intents.active_keys()), (0, 0));
    assert_eq!(
        intents.tally().unchecked,
        0,
        "never started: neither late nor unchecked"
    );
}

#[test]
fn the_window_follows_the_measured_relocation_time_in_clocks() {
    let (store, mut intents, counters) = setup();
    let mut now = 0;
    // 1 µs per tick; keys take 50 µs to arrive: 50 clocks per action.
    for _ in 0..20 {
        add_arrivals(&counters, 10, 50_000);
        tick(&mut intents, &store, &mut now, 1_000, 1_000);
    }
    assert!(
        (intents.estimate() - 50.0).abs() < 1.0,
        "{}",
        intents.estimate()
    );
    assert_eq!(intents.window(), poisson_quantile(100.0, WINDOW_QUANTILE));
    // The worker slows down to 10 µs per tick: 5 clocks per action, the window shrinks.
    for _ in 0..100 {
        add_arrivals(&counters, 10, 50_000);
        tick(&mut intents, &store, &mut now, 10_000, 100);
    }
    assert!(
        (intents.estimate() - 5.0).abs() < 0.5,
        "{}",
        intents.estimate()
    );
    let space = KeySpace::uniform(1, 1).unwrap();
    let interest = Arc::new(Interest::new(&space));
    let immediate = Intents::new(IntentTiming::Immediate, interest, counters);
    assert_eq!(immediate.window(), u64::MAX);
}

fn add_arrivals(counters: &NodeCounters, keys: u64, ns_each: u64) {
    crate::stats::add(&counters.relocations_in, keys);
    crate::stats::add(&counters.relocation_wait_ns, keys * ns_each);
}

#[test]
fn poisson_quantiles_match_known_values() {
    assert_eq!(poisson_quantile(0.0, WINDOW_QUANTILE), 0);
    // P(X ≤ k) for Poisson(1): 0.3679, 0.7358, 0.9197, 0.9810, 0.9963, 0.9994, 0.99992.
    assert_eq!(poisson_quantile(1.0, 0.99), 4);
    assert_eq!(poisson_quantile(1.0, WINDOW_QUANTILE), 6);
    // Poisson(20): the 0.9999 quantile is 39 (the normal approximation would say 37).
    assert_eq!(poisson_quantile(20.0, WINDOW_QUANTILE), 39);
    let big = poisson_quantile(10_000.0, WINDOW_QUANTILE);
    assert!((10_371..=10_373).contains(&big), "{big}");
}

/// A worker whose clock rate is measured (1 µs a tick, past the first span), on a space of 100
/// keys of `len` floats with key 4 replicated here; returns the time of its last tick.
fn measured(len: u32) -> (Store, Intents, Arc<Interest>, Arc<NodeCounters>, u64) {
    let counters = Arc::new(NodeCounters::default());
    let space = KeySpace::uniform(100, len).unwrap();
    let interest = Arc::new(Interest::new(&space));
    let mut intents = Intents::new(IntentTiming::Timed, interest.clone(), counters.clone());
    let store = Store::new(space);
    assert!(store.insert_replica(4, &vec![0.0; len as usize]));
    let mut now = 0;
    tick(&mut intents, &store, &mut now, 1_000, 2_000);
    (store, intents, interest, counters, now)
}

/// Signals a one-clock intent on `key` starting at the next clock and ticks past its end;
/// returns the keys handed on as unwanted meanwhile.
fn short_use(intents: &mut Intents, store: &Store, key: Key, now: &mut u64) -> Vec<Key> {
    let clock = intents.clock();
    let mut out = Actions::default();
    intents.signal(store, &[key], clock + 1, clock + 2, &mut out);
    let mut out = Actions::default();
    for _ in 0..4 {
        *now += 1_000;
        intents.advance(Time(*now), store, &mut out);
    }
    out.unwanted
}

/// Runs `rounds` share-sync rounds of the node, then one tick; returns what it released.
fn rounds_pass(
    intents: &mut Intents,
    store: &Store,
    counters: &NodeCounters,
    now: &mut u64,
    rounds: u64,
) -> Vec<Key> {
    crate::stats::add(&counters.share_rounds, rounds);
    *now += 1_000;
    let mut out = Actions::default();
    intents.advance(Time(*now), store, &mut out);
    out.unwanted
}

#[test]
fn break_even_rounds_weigh_a_reacquisition_against_a_value_per_round() {
    // 5 frames of 1,300 bytes' cost and two values, against one value a round.
    assert_eq!(break_even_rounds(400, 1.0), 2 + 17);
    assert_eq!(break_even_rounds(400, 2.0), 2 + 9);
    // Thousands of keys asked for at once share the frames: two values are the price.
    assert_eq!(break_even_rounds(40, 5_000.0), 3);
    // Never below two rounds, never a division by zero.
    assert_eq!(break_even_rounds(0, 0.0), 2 + 6_500);
    assert_eq!(break_even_rounds(1 << 20, 1.0), 3);
}

#[test]
fn after_a_short_use_a_replica_lingers_for_its_break_even_rounds() {
    let (store, mut intents, interest, counters, mut now) = measured(100);
    let clock = intents.clock();
    let mut out = Actions::default();
    intents.signal(&store, &[4], clock + 1, clock + 2, &mut out);
    assert!(out.due.is_empty(), "replicated here");
    let released = tick(&mut intents, &store, &mut now, 1_000, 5);
    assert!(released.is_empty());
    let rounds = break_even_rounds(400, 1.0);
    assert!(
        interest.wanted(4) && interest.lingering(4),
        "kept past its intent"
    );
    assert_eq!(interest.until(4), None, "no intent active: no known use");
    assert_eq!(intents.lingering_keys(), 1);
    assert!(rounds_pass(&mut intents, &store, &counters, &mut now, rounds - 1).is_empty());
    assert!(interest.wanted(4), "one round short of break-even");
    assert_eq!(
        rounds_pass(&mut intents, &store, &counters, &mut now, 1),
        [4],
        "break-even reached: the replica is handed on"
    );
    assert!(!interest.wanted(4) && !interest.lingering(4));
    assert_eq!(intents.lingering_keys(), 0);
    assert_eq!(
        intents.linger_reuse(),
        1.0 - 0.01,
        "one linger that did not pay"
    );
}

#[test]
fn a_key_used_again_while_it_lingers_is_kept_from_its_latest_use() {
    let (store, mut intents, interest, counters, mut now) = measured(100);
    let rounds = break_even_rounds(400, 1.0);
    let mut out = Actions::default();
    let clock = intents.clock();
    intents.signal(&store, &[4], clock + 1, clock + 2, &mut out);
    tick(&mut intents, &store, &mut now, 1_000, 3);
    // Used again, by a short intent, 10 rounds into the linger: kept for `rounds` from its end.
    assert!(rounds_pass(&mut intents, &store, &counters, &mut now, 10).is_empty());
    let clock = intents.clock();
    intents.signal(&store, &[4], clock + 1, clock + 2, &mut out);
    tick(&mut intents, &store, &mut now, 1_000, 3);
    assert!(out.unwanted.is_empty());
    assert!(rounds_pass(&mut intents, &store, &counters, &mut now, rounds - 1).is_empty());
    assert!(interest.lingering(4), "restarted at its second use");
    assert_eq!(
        rounds_pass(&mut intents, &store, &counters, &mut now, 1),
        [4]
    );
    assert!(!interest.wanted(4));
    // A reuse (1 stays 1), then the expiry.
    assert_eq!(intents.linger_reuse(), 1.0 - 0.01);
}

#[test]
fn long_uses_deferred_keys_and_the_ablation_do_not_linger() {
    // A use longer than a sync round (10 ms at 1 µs a clock: 20,000 clocks).
    let (store, mut intents, interest, _, mut now) = measured(1);
    let mut out = Actions::default();
    let clock = intents.clock();
    intents.signal(&store, &[4], clock + 1, clock + 20_001, &mut out);
    let released = tick(&mut intents, &store, &mut now, 1_000, 20_005);
    assert!(released.is_empty());
    let mut out = Actions::default();
    intents.advance(Time(now + 1_000), &store, &mut out);
    assert!(!interest.wanted(4), "a long use ends with its intent");
    // A key whose deferred offer waits for this node's use to end.
    let (store, mut intents, interest, _, mut now) = measured(1);
    interest.watch(7, true);
    interest.watch_additions(7, true);
    let released = short_use(&mut intents, &store, 7, &mut now);
    assert_eq!(released, [7], "the watched end is reported at once");
    assert!(!interest.wanted(7) && !interest.lingering(7));
    // The ablation.
    let (store, mut intents, interest, _, mut now) = measured(1);
    intents.set_linger(false);
    assert!(!intents.lingers());
    assert_eq!(short_use(&mut intents, &store, 4, &mut now), [4]);
    assert!(!interest.wanted(4));
}

#[test]
fn lingering_stops_while_it_does_not_pay_and_a_finished_worker_lets_go() {
    let (store, mut intents, interest, counters, mut now) = measured(100);
    let rounds = break_even_rounds(400, 1.0);
    // Key 4 used once and never again, a hundred times over: each linger expires unused.
    let mut lingered = 0;
    for _ in 0..100 {
        let clock = intents.clock();
        let mut out = Actions::default();
        intents.signal(&store, &[4], clock + 1, clock + 2, &mut out);
        tick(&mut intents, &store, &mut now, 1_000, 3);
        lingered += usize::from(interest.lingering(4));
        rounds_pass(&mut intents, &store, &counters, &mut now, rounds);
        assert!(!interest.wanted(4));
    }
    // From 1 by 1 % of the gap per outcome: below one half after 69 outcomes.
    assert_eq!(
        lingered, 69,
        "lingers while the share of reuse is at least a half"
    );
    assert!(intents.linger_reuse() < 0.5);
    // Keys are still watched: outcomes keep coming and can turn the estimate back.
    let (store, mut intents, interest, _, mut now) = measured(100);
    let clock = intents.clock();
    let mut out = Actions::default();
    intents.signal(&store, &[4, 5], clock + 1, clock + 2, &mut out);
    tick(&mut intents, &store, &mut now, 1_000, 3);
    assert!(interest.lingering(4) && interest.lingering(5));
    let mut out = Actions::default();
    intents.finish(&store, &mut out);
    assert_eq!(
        out.unwanted,
        [4],
        "key 5 is neither replicated nor watched here"
    );
    assert!(!interest.wanted(4) && !interest.wanted(5));
    assert_eq!(intents.lingering_keys(), 0);
}

#[test]
fn with_no_rounds_running_a_linger_ends_after_its_rounds_in_time() {
    // No share-sync round runs (nothing shared with or by the node): the clock goes by a
    // typical round's time (the default 10 ms) instead of stopping.
    let (store, mut intents, interest, _, mut now) = measured(100);
    let rounds = break_even_rounds(400, 1.0);
    assert!(short_use(&mut intents, &store, 4, &mut now).is_empty());
    assert!(interest.lingering(4));
    let round_ns = crate::share::ShareSync::default().typical_gap_ns();
    let mut out = Actions::default();
    // As with real rounds, the clock counts whole rounds: the linger lasts between one round
    // short of its rounds' time and that time.
    let end = now + rounds * round_ns;
    while now + round_ns + 1_000_000 < end {
        now += 1_000_000;
        intents.advance(Time(now), &store, &mut out);
    }
    assert!(out.unwanted.is_empty() && interest.lingering(4), "not yet");
    now = end + 1_000_000;
    intents.advance(Time(now), &store, &mut out);
    assert_eq!(out.unwanted, [4], "its rounds' time is up");
    assert!(!interest.wanted(4));
    assert_eq!(intents.lingering_keys(), 0);
}

#[test]
fn a_key_watched_without_a_hold_takes_one_when_used_again() {
    let (store, mut intents, interest, _, mut now) = measured(1);
    // The first use ends while an offer waits for exactly that end: watched, not held.
    interest.watch(7, true);
    interest.watch_additions(7, true);
    assert_eq!(short_use(&mut intents, &store, 7, &mut now), [7]);
    assert!(!interest.lingering(7));
    interest.watch_additions(7, false);
    interest.watch(7, false);
    // Used again within its time: now it lingers.
    assert!(short_use(&mut intents, &store, 7, &mut now).is_empty());
    assert!(interest.wanted(7) && interest.lingering(7));
    assert_eq!(intents.lingering_keys(), 1);
    let mut out = Actions::default();
    intents.finish(&store, &mut out);
    assert!(!interest.wanted(7));
    assert_eq!(intents.lingering_keys(), 0);
}

#[test]
fn rounds_that_run_late_are_not_counted_twice() {
    // Rounds every 1.5 typical rounds' time: each late round follows one counted by time,
    // so the clock counts one a round, not two (the linger lasts its rounds, not half).
    let (store, mut intents, interest, counters, mut now) = measured(100);
    let rounds = break_even_rounds(400, 1.0);
    let round_ns = crate::share::ShareSync::default().typical_gap_ns();
    assert!(short_use(&mut intents, &store, 4, &mut now).is_empty());
    let mut out = Actions::default();
    let mut ran = 0;
    while out.unwanted.is_empty() {
        for _ in 0..3 {
            now += round_ns / 2;
            intents.advance(Time(now), &store, &mut out);
        }
        crate::stats::add(&counters.share_rounds, 1);
        ran += 1;
        assert!(ran <= rounds + 1, "still lingering after {ran} rounds");
    }
    assert!(
        ran >= rounds - 1,
        "ended after {ran} rounds, break-even {rounds}"
    );
    assert!(!interest.wanted(4));
}

#[test]
fn dense_and_hashed_linger_tables_agree() {
    // The same workload on two workers, one watching keys in a slot per key and one in a
    // hash map: every call hands on the same keys, and the interest reads the same.
    let (store_a, mut dense, interest_a, counters_a, mut now_a) = measured(100);
    let (store_b, mut hashed, interest_b, counters_b, mut now_b) = measured(100);
    hashed.hash_linger_table();
    let mut state = 7u64;
    let mut next = |below: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % below
    };
    let (mut held_most, mut least_reuse) = (0, 1.0f64);
    for step in 0..4_000 {
        let (mut out_a, mut out_b) = (Actions::default(), Actions::default());
        match next(10) {
            0..=5 => {
                let keys: Vec<Key> = (0..1 + next(4)).map(|_| next(100)).collect();
                let start = dense.clock() + 1 + next(3);
                // Now and then a use longer than a sync round (20,000 clocks), which
                // starts no linger.
                let end = start + if next(20) == 0 { 20_000 } else { 1 };
                dense.signal(&store_a, &keys, start, end, &mut out_a);
                hashed.signal(&store_b, &keys, start, end, &mut out_b);
                for _ in 0..next(4) {
                    now_a += 1_000;
                    now_b += 1_000;
                    dense.advance(Time(now_a), &store_a, &mut out_a);
                    hashed.advance(Time(now_b), &store_b, &mut out_b);
                }
            }
            6..=7 => {
                let rounds = next(30);
                out_a.unwanted = rounds_pass(&mut dense, &store_a, &counters_a, &mut now_a, rounds);
                out_b.unwanted =
                    rounds_pass(&mut hashed, &store_b, &counters_b, &mut now_b, rounds);
            }
            8 => {
                let (key, on) = (next(100), next(2) == 0);
                interest_a.watch_additions(key, on);
                interest_b.watch_additions(key, on);
            }
            _ => {
                let key = next(100);
                store_a.insert_replica(key, &[0.0; 100]);
                store_b.insert_replica(key, &[0.0; 100]);
            }
        }
        assert_eq!(out_a.due, out_b.due, "step {step}");
        assert_eq!(out_a.unwanted, out_b.unwanted, "step {step}");
        assert_eq!(out_a.extended, out_b.extended, "step {step}");
        assert_eq!(dense.tally(), hashed.tally(), "step {step}");
        assert_eq!(
            dense.lingering_keys(),
            hashed.lingering_keys(),
            "step {step}"
        );
        assert_eq!(dense.linger_reuse(), hashed.linger_reuse(), "step {step}");
        for key in 0..100 {
            assert_eq!(
                interest_a.wanted(key),
                interest_b.wanted(key),
                "step {step}"
            );
            assert_eq!(
                interest_a.lingering(key),
                interest_b.lingering(key),
                "step {step}"
            );
        }
        held_most = held_most.max(dense.lingering_keys());
        least_reuse = least_reuse.min(dense.linger_reuse());
    }
    assert!(held_most > 10, "keys lingered ({held_most} at most)");
    assert!(
        least_reuse < 0.5,
        "lingering stopped paying at times ({least_reuse})"
    );
    let (mut out_a, mut out_b) = (Actions::default(), Actions::default());
    dense.finish(&store_a, &mut out_a);
    hashed.finish(&store_b, &mut out_b);
    assert_eq!(out_a.unwanted, out_b.unwanted);
    assert_eq!(dense.lingering_keys(), 0);
    assert_eq!(hashed.lingering_keys(), 0);
    for key in 0..100 {
        assert!(!interest_a.wanted(key) && !interest_b.wanted(key));
    }
}
