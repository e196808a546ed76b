#!/usr/bin/env python3
"""The error of Winograd F(m x m, 3x3) per choice of interpolation points, on the CPU (numpy): the
table of docs/winograd.md, and the search behind the points the ops use.

    PYTHONPATH=python python3 benchmarks/winograd_points.py [--search] [--tiles 2000]

Per point set, over `tiles` output tiles of 64 input channels, data and filters uniform in
[-1, 1] (a second table: the weight gradient's F(3, 4) on the alpha-6 sets, weight_grad_errors):
- float32: the max element error against float64, every stage rounded to float32 (transforms,
  products, the channel sum, the inverse), beside the direct float32 convolution's;
- 16 bits: the relative L2 error (the tuner's guard's measure) with the data and filters in
  float16, their transforms rounded to float16 (10 significand bits, as TF32's), the products,
  sums and inverse exact and the result rounded to float16: the rounding of the tensor-core
  passes, where the transformed operands are what loses.
--search tries every set of small rationals: for F(4, 3) (alpha 6) by the 16-bit error, the
sets of four from +-{1, 2, 1/2, 3/2, 2/3, 4/3, 3/4, 5/4, 4/5, 5/3, 3/5, 1/3, 3, 5/2, 2/5} (a set
and its negation err alike: one of each pair; fewer tiles and channels, the best 40 measured
again as the table does), and for F(6, 3) by the float32 error over a smaller list. Minutes.
"""
import argparse
import itertools
import os
import sys
from fractions import Fraction as Fr

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "fastlayers"))
from winograd_matrices import POINTS, matrices  # noqa: E402  (the generator alone: no torch)

C = 64


def _f32(x):
    return x.astype(np.float32)


def _f16(x):
    """x rounded to float16, kept in float64."""
    return x.astype(np.float16).astype(np.float64)


def _float64(m, points, r=3):
    return [np.array([[float(v) for v in row] for row in M])
            for M in matrices(m, r, [Fr(p) for p in points])]


def _windows(rng, m, tiles, channels):
    r, a = 3, m + 2
    return rng.uniform(-1, 1, (channels, r, r)), rng.uniform(-1, 1, (tiles, channels, a, a))


def _direct(g, d, m, cast=lambda x: x):
    out = np.zeros((d.shape[0], m, m), np.result_type(cast(d[:1])))
    for i in range(m):
        for j in range(m):
            out[:, i, j] = np.einsum("tcuv,cuv->t", cast(d[:, :, i:i + 3, j:j + 3]), cast(g))
    return out


def errors(m, points, tiles, seed=0):
    """(Winograd max error, direct max error) of F(m x m, 3x3) with `points` in float32."""
    AT, G, BT = _float64(m, points)
    g, d = _windows(np.random.default_rng(seed), m, tiles, C)
    ref = _direct(g, d, m)
    f = _f32
    direct = _direct(g, d, m, f)
    U = f(np.einsum("ak,ckl,bl->cab", f(G), f(g), f(G)))
    V = f(np.einsum("ai,tcij,bj->tcab", f(BT), f(d), f(BT)))
    M = f(np.einsum("cab,tcab->tab", U, V))
    Y = f(np.einsum("ia,tab,jb->tij", f(AT), M, f(AT)))
    return np.abs(Y - ref).max(), np.abs(direct - ref).max()


def half_error(m, points, tiles, seed=0, channels=C):
    """The relative L2 error of F(m x m, 3x3) with `points` as the 16-bit passes round it."""
    AT, G, BT = _float64(m, points)
    h = _f16
    g, d = (h(x) for x in _windows(np.random.default_rng(seed), m, tiles, channels))
    ref = _direct(g, d, m)
    with np.errstate(over="ignore", invalid="ignore"):  # leaving float16's range: inf, or nan
        U = h(np.einsum("ak,ckl,bl->cab", G, g, G))
        V = h(np.einsum("ai,tcij,bj->tcab", BT, d, BT))
        Y = h(np.einsum("ia,tab,jb->tij", AT, np.einsum("cab,tcab->tab", U, V), AT))
    if not np.isfinite(Y).all():  # such a set ranks last (a nan would unorder the sort)
        return np.inf
    return np.linalg.norm(Y - ref) / np.linalg.norm(ref)


def weight_grad_errors(points, tiles=2048, trials=24, seed=2):
    """(float32, 16-bit) relative L2 errors of the weight gradient's F(3x3, 4x4) with `points`:
    each of `trials` filter gradients a sum over `tiles` tile pairs (6x6 data, 4x4 grad_output),
    uniform in [-1, 1]. float32: every stage rounded, the sum in float32 in blocks of 256 tiles;
    16 bits: as half_error (the operands in float16, their transforms rounded, the products, sum
    and inverse exact, the result rounded to float16)."""
    m, r, a = 3, 4, 6
    AT, G, BT = _float64(m, points, r)
    rng = np.random.default_rng(seed)
    f = _f32
    h = _f16
    e32 = n32 = e16 = n16 = 0.0
    for _ in range(trials):
        gy, d = rng.uniform(-1, 1, (tiles, r, r)), rng.uniform(-1, 1, (tiles, a, a))
        gy32, d32 = f(gy).astype(np.float64), f(d).astype(np.float64)
        ref = np.array([[np.einsum("puv,puv->", d32[:, i:i + r, j:j + r], gy32)
                         for j in range(m)] for i in range(m)])
        U = f(np.einsum("ak,pkl,bl->pab", f(G), f(gy32), f(G)))
        V = f(np.einsum("ai,pij,bj->pab", f(BT), f(d32), f(BT)))
        M = np.zeros((a, a), np.float32)
        for p in range(0, tiles, 256):
            M = f(M + f((U[p:p + 256] * V[p:p + 256]).sum(0)))
        y32 = f(np.einsum("ia,ab,jb->ij", f(AT), M, f(AT)))
        gh, dh = h(gy), h(d)
        ref16 = np.array([[np.einsum("puv,puv->", dh[:, i:i + r, j:j + r], gh)
                           for j in range(m)] for i in range(m)])
        Mh = (h(np.einsum("ak,pkl,bl->pab", G, gh, G)) * h(np.einsum("ai,pij,bj->pab", BT, dh,
                                                                         BT))).sum(0)
        y16 = h(AT @ Mh @ AT.T)
        e32, n32 = e32 + ((y32 - ref) ** 2).sum(), n32 + (ref ** 2).sum()
        e16, n16 = e16 + ((y16 - ref16) ** 2).sum(), n16 + (ref16 ** 2).sum()
    return np.sqrt(e32 / n32), np.sqrt(e16 / n16)


OLD_6 = (0, 1, -1, 2, Fr(-1, 2))  # the alpha-6 set before d86080b
NEW_6 = POINTS[6]  # the set in use (since d86080b)
TABLE = [(2, (0, 1, -1)), (4, (0, 1, -1, 2, -2)), (4, (0, 1, -1, Fr(1, 2), Fr(-1, 2))),
         (4, OLD_6), (4, NEW_6),
         (6, (0, 1, -1, 2, -2, Fr(1, 2), Fr(-1, 2)))]
SEARCH = [Fr(1), Fr(-1), Fr(2), Fr(-2), Fr(1, 2), Fr(-1, 2), Fr(3, 2), Fr(-3, 2), Fr(2, 3),
          Fr(-2, 3), Fr(1, 4), Fr(-1, 4), Fr(3), Fr(-3)]
SEARCH_4 = sorted({s * Fr(v) for v in ("1", "2", "1/2", "3/2", "2/3", "4/3", "3/4", "5/4", "4/5",
                                       "5/3", "3/5", "1/3", "3", "5/2", "2/5") for s in (1, -1)})


def _sets_4():
    """Every 4-subset of SEARCH_4, one of each set and its negation."""
    seen = set()
    for rest in itertools.combinations(SEARCH_4, 4):
        if tuple(sorted(-x for x in rest)) not in seen:
            seen.add(rest)
            yield (Fr(0),) + rest


def _half_error_again(points):
    """half_error of F(4, 3) as the search measures its best sets again: 3 x 1000 tiles."""
    return np.mean([half_error(4, points, 1000, seed=s) for s in (11, 12, 13)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--search", action="store_true")
    ap.add_argument("--tiles", type=int, default=2000)
    args = ap.parse_args()
    print("| F(m,3) | points (with infinity) | float32 max error | direct convolution | 16-bit "
          "relative L2 |")
    print("|---|---|---|---|---|")
    for m, pts in TABLE:
        w, d = errors(m, pts, args.tiles)
        print("| F(%d,3) | %s | %.1e | %.1e | %.1e |" % (
            m, ", ".join(map(str, pts)), w, d, half_error(m, pts, args.tiles)))
    print()
    print("| F(3,4) | float32 relative L2 | 16-bit relative L2 |")
    print("|---|---|---|")
    for pts in (OLD_6, NEW_6):  # filter gradients summed over 2048 tile pairs
        print("| %s | %.2e | %.2e |" % ((", ".join(map(str, pts)),) + weight_grad_errors(pts)))
    if args.search:
        first = sorted((half_error(4, p, 150, seed=3, channels=32), p) for p in _sets_4())
        again = sorted((_half_error_again(p), p) for _, p in first[:40])
        f32 = {p: errors(4, p, 2000)[0] for p in [p for _, p in again] + [OLD_6]}
        for e, pts in again[:5] + [(_half_error_again(OLD_6), OLD_6)]:
            print("F(4,3) %s: 16-bit L2 %.3g, float32 max error %.2e" % (
                ", ".join(map(str, pts)), e, f32[pts]))
        in_use = ({Fr(v) for v in NEW_6}, {-Fr(v) for v in NEW_6})  # a set errs as its negation
        print("the best 40: 16-bit L2 %.3g-%.3g; %s" % (again[0][0], again[-1][0], next(
            ("the set in use ranks %d (%.3g)" % (i + 1, e) for i, (e, p) in enumerate(again)
             if set(p) in in_use), "the set in use is not among them")))
        by_max = sorted((f32[p], p) for _, p in again)
        sixteen = {p: e for e, p in again}
        for e, pts in by_max[:3]:
            print("F(4,3) %s: float32 max error %.2e, 16-bit L2 %.3g (of the best 40)" % (
                ", ".join(map(str, pts)), e, sixteen[pts]))
        found = []
        for rest in itertools.combinations(SEARCH, 6):
            if Fr(1) in rest and Fr(-1) in rest:
                pts = (Fr(0),) + rest
                found.append((errors(6, pts, 300)[0], pts))
        found.sort()
        for e, pts in found[:5]:
            print("F(6,3) %s: float32 max error %.2g" % (", ".join(map(str, pts)), e))


if __name__ == "__main__":
    main()
