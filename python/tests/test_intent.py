"""Intent signaling (AdaPM) on a single in-process node: clock, validation, counters, config.

The multi-node behaviour (intended keys move here) is in test_cluster.py (`intent-*` modes).
"""

import numpy as np
import pytest

import roam

INTENT_COUNTERS = ("intents", "intent_keys", "intent_actions", "late_intents", "intents_unchecked")


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


@pytest.fixture(params=["static-range", "dynamic"])
def w(request):
    with roam.Node(num_keys=100, value_lengths=4, allocation=request.param) as node:
        yield node.worker(0)


def test_clock_starts_at_zero_and_advances(w):
    assert w.current_clock() == 0
    assert [w.advance_clock() for _ in range(5)] == [1, 2, 3, 4, 5]
    assert w.current_clock() == 5


def test_counters_report_the_intents(w):
    # The stats sum the counters over the node's workers: this node has one.
    assert w.workers_per_node == 1
    c = w.stats()
    for name in INTENT_COUNTERS:
        assert c[name] == 0, (name, c)
    # Everything is local on one node: counted, nothing to move, never late.
    w.intent(u64(1, 2, 3), 2, 4)
    w.intent([4, 5], 3)
    w.intent(np.array([6], dtype=np.int64), 0, 10)
    while w.current_clock() <= 10:
        w.advance_clock()
    w.wait_all()
    c = w.stats()
    assert (c["intents"], c["intent_keys"]) == (3, 6), c
    assert (c["intent_actions"], c["late_intents"], c["intents_unchecked"]) == (0, 0, 0), c


def test_empty_clock_range_raises_naming_both_clocks(w):
    for start, end in [(5, 5), (7, 3)]:
        with pytest.raises(roam.AccessError) as e:
            w.intent(u64(1), start, end)
        assert f"{start}..{end}" in str(e.value), e.value
        assert isinstance(e.value, ValueError)
    assert w.stats()["intents"] == 0, "nothing recorded"


def test_out_of_range_key_raises_naming_the_key(w):
    with pytest.raises(roam.AccessError, match=r"key 100 is out of range"):
        w.intent(u64(3, 100), 1, 2)
    # Signed keys are reported as given.
    with pytest.raises(roam.AccessError, match=r"key -5 is out of range"):
        w.intent(np.array([1, -5], dtype=np.int64), 1)
    with pytest.raises(roam.AccessError, match=r"key 250 is out of range"):
        w.intent([250], 1)
    assert w.stats()["intents"] == 0, "nothing recorded"
    with pytest.raises(TypeError):
        w.intent(["a"], 1)


def test_end_defaults_to_start_plus_one(w):
    # A one-clock intent: accepted at any start, including clocks already passed.
    w.intent(u64(1), 0)
    w.intent(u64(2), 7)
    w.intent(u64(3), 7, None)
    assert w.stats()["intents"] == 3
    # start + 1 must exist.
    last = 2**64 - 1
    with pytest.raises(ValueError, match=f"{last} has no next clock"):
        w.intent(u64(1), last)
    w.intent(u64(1), last - 1)
    with pytest.raises(OverflowError):
        w.intent(u64(1), -1)
    assert w.stats()["intents"] == 4


def test_intent_window_by_timing():
    with roam.Node(num_keys=10, value_lengths=1, allocation="dynamic") as node:
        window = node.worker(0).intent_window()
        assert 0 < window < 2**32, window
    with roam.Node(num_keys=10, value_lengths=1, allocation="dynamic",
                   intent_timing="immediate") as node:
        assert node.worker(0).intent_window() == 2**64 - 1


def test_bad_intent_timing_names_the_value_and_the_choices():
    with pytest.raises(ValueError) as e:
        roam.Node(num_keys=10, value_lengths=1, intent_timing="eager")
    msg = str(e.value)
    assert "'eager'" in msg or '"eager"' in msg, msg
    assert "timed" in msg and "immediate" in msg, msg


def test_intents_after_shutdown_raise():
    node = roam.Node(num_keys=10, value_lengths=1)
    w = node.worker(0)
    w.advance_clock()
    node.shutdown()
    with pytest.raises(roam.OpError):
        w.intent([1], 3)
    with pytest.raises(roam.OpError):
        w.advance_clock()
    assert w.current_clock() == 1


@pytest.mark.parametrize("allocation", ["static-range", "dynamic"])
def test_prepare_sample_for_clocks_signals_an_intent_for_the_drawn_keys(allocation):
    samplers = [roam.Sampler.uniform(0, 100, scheme="preloc")]
    with roam.Node(
        num_keys=100, value_lengths=4, allocation=allocation, samplers=samplers
    ) as node:
        w = node.worker(0)
        with pytest.raises(roam.AccessError, match=r"9\.\.9"):
            w.prepare_sample(0, 8, 9, 9)
        with pytest.raises(ValueError, match="end=5 given without start"):
            w.prepare_sample(0, 8, end=5)
        sample = w.prepare_sample(0, 8, 3)
        keys, vals = w.pull_sample(sample)
        assert keys.shape == (8,) and vals.shape == (8, 4)
        w.finish_sample(sample)
        c = w.stats()
        # The drawn keys are one intent (under static allocation only counted, like any).
        assert (c["intents"], c["intent_keys"]) == (1, 8), c
        assert c["intents_acted"] == (1 if allocation == "dynamic" else 0), c


def test_bad_intent_techniques_name_the_value_and_the_choices():
    with pytest.raises(ValueError) as e:
        roam.Node(num_keys=10, value_lengths=1, intent_techniques="both")
    msg = str(e.value)
    assert "both" in msg, msg
    assert "relocate-only" in msg and "replicate-only" in msg, msg
