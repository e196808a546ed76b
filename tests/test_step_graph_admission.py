"""The step-graph cache's rule for recording a key (cuda/common/recent_keys.h: Admission), plain
C++ tested here on any machine: a key is recorded on its second call; a key whose graph was pushed
out of the cache max_evictions times (before it paid for its recording) is recorded no more; each
set remembers `limit` keys. The last tests run the rule beside a model of step_graph::prepare's
least-recently-used cache, which reports an eviction only for a graph launched fewer than
kPaidLaunches times: keys coming back in turn, more than the cache holds, must stop being
recorded, and a program's phases taking the cache in turn must keep their graphs."""
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
    assert not a.record("z") and not a.record("z")  # z's is remembered: recorded no more


MAX_EVICTIONS = _C.testing.STEP_GRAPH_MAX_EVICTIONS
PAID = _C.testing.STEP_GRAPH_PAID_LAUNCHES


def _rounds(rounds, capacity=256, max_evictions=MAX_EVICTIONS, paid=PAID, limit=1024):
    """(recordings, graph launches) per round, each round a list of keys called in turn, with a
    cache of `capacity` graphs that drops the least recently used and reports the eviction of a
    graph launched fewer than `paid` times (a model of step_graph::prepare)."""
    a = Admission(limit=limit, max_evictions=max_evictions)
    cache = OrderedDict()   # key -> launches, least recent first
    out = []
    for keys in rounds:
        recorded = launched = 0
        for key in keys:
            if key not in cache:
                if not a.record(key):
                    continue
                recorded += 1
                cache[key] = 0
                while len(cache) > capacity:
                    old, launches = cache.popitem(last=False)
                    if launches < paid:
                        a.evicted(old)
            cache.move_to_end(key)
            cache[key] += 1
            launched += 1
        out.append((recorded, launched))
    return out


def _keys(tag, n):
    return ["%s%d" % (tag, i) for i in range(n)]


def test_keys_in_turn_beyond_the_capacity_stop_being_recorded():
    per_round = [r for r, _ in _rounds([_keys("k", 296)] * 16)]
    assert sum(per_round) <= MAX_EVICTIONS * 296
    assert per_round[-4:] == [0, 0, 0, 0], per_round
    # Within the capacity every key is recorded once, on its second round.
    assert _rounds([_keys("k", 200)] * 6) == [(0, 0), (200, 200)] + [(0, 200)] * 4


def test_without_the_limit_keys_beyond_the_capacity_are_recorded_every_round():
    # What the rule prevents: a cache too small for the keys in turn records again and again.
    per_round = [r for r, _ in _rounds([_keys("k", 296)] * 16, max_evictions=1 << 30)]
    assert min(per_round[3:]) > 0, per_round


def test_phases_that_take_the_cache_in_turn_keep_their_graphs():
    # Training (200 keys, 40 steps an epoch) and evaluation (200 other keys, 4 batches) in turn:
    # the cache holds either, not both. Each phase's graphs, used long before being pushed out,
    # are recorded again when it returns, and from the third epoch on nearly every training call
    # launches a graph.
    train, evaluation = _keys("t", 200), _keys("e", 200)
    epochs = 6
    rounds = ([train] * 40 + [evaluation] * 4) * epochs
    out = _rounds(rounds)
    per_epoch = len(rounds) // epochs
    late = [launched for (_, launched), keys in zip(out[2 * per_epoch:], rounds[2 * per_epoch:])
            if keys is train]
    assert sum(late) >= 0.95 * len(late) * len(train), late
    # Counting every eviction instead (a graph never paid), training's keys are barred and run
    # launch by launch.
    out = _rounds(rounds, paid=1 << 62)
    late = [launched for (_, launched), keys in zip(out[2 * per_epoch:], rounds[2 * per_epoch:])
            if keys is train]
    assert sum(late) < 0.8 * len(late) * len(train)
