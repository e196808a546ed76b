"""The step-graph cache's rule for recording a key (cuda/common/recent_keys.h: Admission), plain
C++ tested here on any machine: a key is recorded on its second call; a key whose graph was pushed
out of the cache max_evictions times is recorded no more; each set remembers `limit` keys. The
last test runs the rule beside a least-recently-used cache, as step_graph.cu keeps one, with keys
coming back in turn: more keys than the cache holds must stop being recorded."""
from collections import OrderedDict

from fastlayers import _C

Admission = _C.testing.GraphAdmission


def test_recorded_on_the_second_call():
    a = Admission(limit=8, max_evictions=2)
    assert not a.record("k")
    assert a.record("k")
    assert not a.record("j")            # another key's first call
    # Pushed out once: seen anew, then recorded again.
    a.evicted("k")
    assert not a.record("k")
    assert a.record("k")


def test_pushed_out_max_evictions_times_runs_directly():
    a = Admission(limit=8, max_evictions=2)
    for _ in range(2):
        assert not a.record("k")
        assert a.record("k")
        a.evicted("k")
    for _ in range(4):
        assert not a.record("k")
    assert not a.record("j") and a.record("j")  # other keys as before


def test_each_set_forgets_the_oldest_beyond_its_limit():
    a = Admission(limit=3, max_evictions=1)
    for k in "abcd":                    # a's first call is forgotten under the later three
        assert not a.record(k)
    assert not a.record("a")
    assert a.record("d")
    a.evicted("d")
    for k in "wxyz":                    # d's eviction is forgotten under three later ones
        a.evicted(k)
    assert not a.record("d") and a.record("d")
    a.evicted("z")                      # remembered (most recent): z is recorded no more
    assert not a.record("z") and not a.record("z")


def _rounds(n_keys, capacity, rounds, max_evictions, limit=1024):
    """Recordings per round of n_keys keys called in turn, with a cache of `capacity` graphs that
    drops the least recently used (as step_graph::prepare does)."""
    a = Admission(limit=limit, max_evictions=max_evictions)
    cache = OrderedDict()
    out = []
    for _ in range(rounds):
        recorded = 0
        for key in map(str, range(n_keys)):
            if key in cache:
                cache.move_to_end(key)
                continue
            if not a.record(key):
                continue
            recorded += 1
            cache[key] = True
            while len(cache) > capacity:
                a.evicted(cache.popitem(last=False)[0])
        out.append(recorded)
    return out


def test_keys_in_turn_beyond_the_capacity_stop_being_recorded():
    per_round = _rounds(n_keys=296, capacity=256, rounds=16,
                        max_evictions=_C.testing.STEP_GRAPH_MAX_EVICTIONS)
    assert sum(per_round) <= _C.testing.STEP_GRAPH_MAX_EVICTIONS * 296
    assert per_round[-4:] == [0, 0, 0, 0], per_round
    # Within the capacity every key is recorded once, on its second round.
    assert _rounds(n_keys=200, capacity=256, rounds=6, max_evictions=2) == [0, 200, 0, 0, 0, 0]


def test_without_the_limit_keys_beyond_the_capacity_are_recorded_every_round():
    # What the rule prevents: a cache too small for the keys in turn records again and again.
    per_round = _rounds(n_keys=296, capacity=256, rounds=16, max_evictions=1 << 30)
    assert min(per_round[2:]) > 0, per_round
