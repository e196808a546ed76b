"""The benchmarks' A/B method: the order in which rotated trials run (benchmarks/common.py)."""
import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import common  # noqa: E402


@pytest.mark.parametrize("n", range(1, 8))
def test_every_item_takes_every_place_and_follows_every_other_equally_often(n):
    rows = common.balanced_orders(n)
    assert all(sorted(r) == list(range(n)) for r in rows)
    places = collections.Counter((r[i], i) for r in rows for i in range(n))
    after = collections.Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    assert len(places) == n * n and len(set(places.values())) == 1
    assert len(after) == n * (n - 1) and len(set(after.values())) <= 1


def test_rotating_runs_the_balanced_orders_round_by_round():
    seen = []
    per = common.rotating({k: k for k in "abc"}, lambda k: seen.append(k) or 1.0, rounds=7)
    assert per == {k: [1.0] * 7 for k in "abc"}
    orders = ["".join(seen[i:i + 3]) for i in range(0, len(seen), 3)]
    design = ["".join("abc"[i] for i in row) for row in common.balanced_orders(3)]
    assert orders == design + design[:1]
