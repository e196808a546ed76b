"""The Winograd (Toom-Cook) transform matrices, exact, from their interpolation points.

F(m, r) computes m outputs of a correlation with an r-tap filter, y_i = sum_k g_k d_(i+k), from
alpha = m + r - 1 inputs with alpha multiplications (Lavin & Gray, "Fast Algorithms for
Convolutional Neural Networks", 2015):

    y = A^T [(G g) * (B^T d)]            1-D
    Y = A^T [(G g G^T) * (B^T d B)] A    2-D, nested

It is the transpose of the Toom-Cook algorithm for the linear convolution of a degree r-1 and a
degree m-1 polynomial: both are evaluated at alpha - 1 finite points a_j and at infinity (the
leading coefficient), multiplied point-wise, and the product interpolated back. With
N_j(x) = prod_(l != j) (x - a_l) over the finite points, M(x) = prod_l (x - a_l) and
f_j = N_j(a_j):

    A^T[i][j] = a_j^i                      (m x alpha; column infinity: 1 in the last row)
    G[j][k]   = a_j^k / f_j                (alpha x r; row infinity: 1 in the last column)
    B^T[j][i] = coefficient of x^i in N_j  (alpha x alpha; row infinity: the coefficients of M)

Every matrix is exact here (fractions); `python3 -m fastlayers.winograd_matrices` writes them as
the C++ header the kernels include (cuda/winograd/matrices.h), and `--check` verifies that header.

Points (POINTS): 0, 1, -1 for alpha 4; 0, -3/2, 2/3, -2/3, 4/3 for alpha 6 (F(4, 3) and F(3, 4));
0, +-1, +-2, +-1/2 for alpha 8. The tensor-core passes (TF32, float16, bfloat16) round the
transformed operands to 10 or 7 significand bits, and the tuner's guard reads that rounding in
relative L2: that alpha 6 set gives F(4, 3) about 0.74 times the error of {0, 1, -1, 2, -1/2}
(the set kept before for its float32 max error) and a smaller float32 max error as well; a search
over small rationals finds a set about 8% better still in 16 bits (benchmarks/winograd_points.py,
docs/winograd.md). Dyadic points would keep every entry exact in binary floating point; these
entries round in float32 at about 6e-8, far below what the products lose. Barabasz et al. ("Error
Analysis and Improving the Accuracy of Winograd Convolution for Deep Neural Networks", 2018) found
that reciprocal pairs beat larger integers. The tests prove every set exact in float64.
"""
from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction
from typing import Dict, List, Sequence, Tuple

Matrix = List[List[Fraction]]

# The finite interpolation points of each alpha (alpha - 1 of them; infinity is the last point).
POINTS: Dict[int, Tuple[Fraction, ...]] = {
    4: (Fraction(0), Fraction(1), Fraction(-1)),
    6: (Fraction(0), Fraction(-3, 2), Fraction(2, 3), Fraction(-2, 3), Fraction(4, 3)),
    8: (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2),
        Fraction(-1, 2)),
}

# The (m, r) the ops use: F(2,3), F(4,3), F(6,3) for the forward and input gradient (r = 3, the
# filter), F(3,2) and F(3,4) for the weight gradient (m = 3, the filter gradient; r, the
# grad_output tile).
VARIANTS: Tuple[Tuple[int, int], ...] = ((2, 3), (4, 3), (6, 3), (3, 2), (3, 4))


def _poly_mul(p: Sequence[Fraction], q: Sequence[Fraction]) -> List[Fraction]:
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            out[i + j] += a * b
    return out


def _prod_linear(points: Sequence[Fraction]) -> List[Fraction]:
    """Coefficients (lowest first) of prod (x - a) over `points`."""
    out = [Fraction(1)]
    for a in points:
        out = _poly_mul(out, [-a, Fraction(1)])
    return out


def matrices(m: int, r: int, points: Sequence[Fraction] = ()) -> Tuple[Matrix, Matrix, Matrix]:
    """(A^T [m x alpha], G [alpha x r], B^T [alpha x alpha]) of F(m, r), exact; `points` the
    alpha - 1 finite points (default POINTS[alpha]), distinct."""
    alpha = m + r - 1
    pts = [Fraction(p) for p in (points or POINTS[alpha])]
    if len(pts) != alpha - 1 or len(set(pts)) != len(pts):
        raise ValueError("F(%d, %d) needs %d distinct finite points, got %r" % (m, r, alpha - 1,
                                                                               pts))
    n = alpha - 1
    AT = [[pts[j] ** i for j in range(n)] + [Fraction(int(i == m - 1))] for i in range(m)]
    G, BT = [], []
    for j in range(n):
        others = pts[:j] + pts[j + 1:]
        f = Fraction(1)
        for a in others:
            f *= pts[j] - a
        G.append([pts[j] ** k / f for k in range(r)])
        BT.append(_prod_linear(others) + [Fraction(0)])
    G.append([Fraction(int(k == r - 1)) for k in range(r)])
    BT.append(_prod_linear(pts))
    return AT, G, BT


# --- the C++ header ------------------------------------------------------------------------------

HEADER = os.path.join("cuda", "winograd", "matrices.h")


def _literal(v: Fraction) -> str:
    if v.denominator == 1:
        return "%d.0" % v.numerator
    return "%d.0 / %d.0" % (v.numerator, v.denominator)


def header() -> str:
    """The text of cuda/winograd/matrices.h: per F(m, r) a struct whose AT(i, j), G(j, k) and
    BT(j, i) are constexpr functions, so that fully unrolled device code folds every entry into an
    immediate operand (a static array member would not be readable in device code)."""
    out = [
        "// Generated by `python3 -m fastlayers.winograd_matrices` (python/fastlayers/"
        "winograd_matrices.py),",
        "// which derives them exactly from the interpolation points; do not edit.",
        "// Winograd F(m, r): y = A^T [(G g) * (B^T d)], alpha = m + r - 1; AT is m x alpha, G",
        "// alpha x r, BT alpha x alpha, each entry a constexpr function of its (row, column).",
        "#pragma once",
        "",
        "#ifdef __CUDACC__",
        "#define FL_WINOGRAD_HD __host__ __device__",
        "#else",
        "#define FL_WINOGRAD_HD",
        "#endif",
        "",
        "namespace fastlayers {",
        "namespace winograd {",
        "",
        "template <int M, int R> struct Matrices;",
        "",
    ]
    for m, r in VARIANTS:
        mats = matrices(m, r)
        pts = ", ".join(str(p) for p in POINTS[m + r - 1]) + ", inf"
        out.append("// F(%d, %d), alpha %d, points %s" % (m, r, m + r - 1, pts))
        out.append("template <> struct Matrices<%d, %d> {" % (m, r))
        out.append("  static constexpr int kM = %d, kR = %d, kAlpha = %d;" % (m, r, m + r - 1))
        for name, mat in zip(("AT", "G", "BT"), mats):
            rows = ",\n".join("        {" + ", ".join(_literal(v) for v in row) + "}"
                              for row in mat)
            out.append("  FL_WINOGRAD_HD static constexpr double %s(int i, int j) {" % name)
            out.append("    constexpr double v[%d][%d] = {\n%s};" % (len(mat), len(mat[0]), rows))
            out.append("    return v[i][j];")
            out.append("  }")
        out.append("};")
        out.append("")
    out += ["}  // namespace winograd", "}  // namespace fastlayers", "",
            "#undef FL_WINOGRAD_HD", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="verify the header instead of writing")
    ap.add_argument("--root", default=".", help="the repository root")
    args = ap.parse_args(argv)
    path = os.path.join(args.root, HEADER)
    text = header()
    if args.check:
        with open(path) as f:
            if f.read() != text:
                print("%s is out of date: run python3 -m fastlayers.winograd_matrices" % path)
                return 1
        return 0
    with open(path, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
