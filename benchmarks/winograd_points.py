#!/usr/bin/env python3
"""The float32 error of Winograd F(m x m, 3x3) per choice of interpolation points, on the CPU
(numpy): the table of docs/winograd.md, and the search behind the points the ops use.

    PYTHONPATH=python python3 benchmarks/winograd_points.py [--search] [--tiles 2000]

Per point set: the max element error against float64 over `tiles` output tiles of 64 input
channels, data and filters uniform in [-1, 1], every stage rounded to float32 (transforms,
products, the channel sum, the inverse), beside the direct float32 convolution's error.
--search tries every set of small rationals for F(4, 3) and F(6, 3) (fewer tiles) and prints the
five best of each.
"""
import argparse
import itertools
import os
import sys
from fractions import Fraction as Fr

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "fastlayers"))
from winograd_matrices import matrices  # noqa: E402  (the generator alone: no torch needed)

C = 64


def errors(m, points, tiles, seed=0):
    """(Winograd max error, direct max error) of F(m x m, 3x3) with `points` in float32."""
    rng = np.random.default_rng(seed)
    r, a = 3, m + 2
    AT, G, BT = [np.array([[float(v) for v in row] for row in M])
                 for M in matrices(m, r, [Fr(p) for p in points])]
    g = rng.uniform(-1, 1, (C, r, r))
    d = rng.uniform(-1, 1, (tiles, C, a, a))
    ref = np.zeros((tiles, m, m))
    direct = np.zeros((tiles, m, m), np.float32)
    f = lambda x: x.astype(np.float32)  # noqa: E731
    for i in range(m):
        for j in range(m):
            ref[:, i, j] = np.einsum("tcuv,cuv->t", d[:, :, i:i + r, j:j + r], g)
            direct[:, i, j] = np.einsum("tcuv,cuv->t", f(d[:, :, i:i + r, j:j + r]), f(g))
    U = f(np.einsum("ak,ckl,bl->cab", f(G), f(g), f(G)))
    V = f(np.einsum("ai,tcij,bj->tcab", f(BT), f(d), f(BT)))
    M = f(np.einsum("cab,tcab->tab", U, V))
    Y = f(np.einsum("ia,tab,jb->tij", f(AT), M, f(AT)))
    return np.abs(Y - ref).max(), np.abs(direct - ref).max()


TABLE = [(2, (0, 1, -1)), (4, (0, 1, -1, 2, -2)), (4, (0, 1, -1, Fr(1, 2), Fr(-1, 2))),
         (4, (0, 1, -1, 2, Fr(-1, 2))), (6, (0, 1, -1, 2, -2, Fr(1, 2), Fr(-1, 2)))]
SEARCH = [Fr(1), Fr(-1), Fr(2), Fr(-2), Fr(1, 2), Fr(-1, 2), Fr(3, 2), Fr(-3, 2), Fr(2, 3),
          Fr(-2, 3), Fr(1, 4), Fr(-1, 4), Fr(3), Fr(-3)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--search", action="store_true")
    ap.add_argument("--tiles", type=int, default=2000)
    args = ap.parse_args()
    print("| F(m,3) | points (with infinity) | max error | direct |")
    print("|---|---|---|---|")
    for m, pts in TABLE:
        w, d = errors(m, pts, args.tiles)
        print("| F(%d,3) | %s | %.2g | %.2g |" % (m, ", ".join(map(str, pts)), w, d))
    if args.search:
        for m in (4, 6):
            found = []
            for rest in itertools.combinations(SEARCH, m):
                if Fr(1) in rest and Fr(-1) in rest:
                    pts = (Fr(0),) + rest
                    found.append((errors(m, pts, 300)[0], pts))
            found.sort()
            for e, pts in found[:5]:
                print("F(%d,3) %s: %.2g" % (m, ", ".join(map(str, pts)), e))


if __name__ == "__main__":
    main()
