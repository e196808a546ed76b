"""The mathematics under the Winograd ops: the generator's exact matrices compute the correlation
exactly (fractions) for every variant, the nested 2-D form matches direct correlation in float64,
the C++ header is the generator's, and the pure-torch reference of the tests (winograd_samples)
is itself exact in float64 for every pass and tile, without calling any fastlayers op."""
import os
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from fastlayers import winograd_matrices
from conv_samples import RecordOps, assert_float64_matches, rel_err
from winograd_samples import (PASS_NAMES, PASS_TILES, float64_passes, pass_tile_id, shape_id,
                              tensors, winograd_reference)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANT_IDS = ["F%d-%d" % v for v in winograd_matrices.VARIANTS]


def _float64(mats):
    return [torch.tensor([[float(v) for v in row] for row in M], dtype=torch.float64)
            for M in mats]


@pytest.mark.parametrize("m, r", winograd_matrices.VARIANTS, ids=VARIANT_IDS)
def test_matrices_compute_the_correlation_exactly(m, r):
    """y = A^T [(G g) * (B^T d)] is sum_k g_k d_(i+k), in fractions: for random rationals, and
    for every pair of unit vectors (so each bilinear coefficient is exactly 0 or 1)."""
    AT, G, BT = winograd_matrices.matrices(m, r)
    alpha = m + r - 1
    assert (len(AT), len(AT[0]), len(G), len(G[0]), len(BT), len(BT[0])) == (
        m, alpha, alpha, r, alpha, alpha)

    def winograd(g, d):
        Gg = [sum(G[j][k] * g[k] for k in range(r)) for j in range(alpha)]
        Bd = [sum(BT[j][i] * d[i] for i in range(alpha)) for j in range(alpha)]
        return [sum(AT[i][j] * Gg[j] * Bd[j] for j in range(alpha)) for i in range(m)]

    def direct(g, d):
        return [sum(g[k] * d[i + k] for k in range(r)) for i in range(m)]

    for seed in range(4):
        g = [Fraction((seed * 7 + 3 * k) % 11 - 5, 1 + (seed + k) % 4) for k in range(r)]
        d = [Fraction((seed * 5 + 2 * i) % 13 - 6, 1 + i % 3) for i in range(alpha)]
        assert winograd(g, d) == direct(g, d), seed
    unit = lambda n, i: [Fraction(int(j == i)) for j in range(n)]  # noqa: E731
    for k in range(r):
        for i in range(alpha):
            assert winograd(unit(r, k), unit(alpha, i)) == direct(unit(r, k), unit(alpha, i))


@pytest.mark.parametrize("m, r", winograd_matrices.VARIANTS, ids=VARIANT_IDS)
def test_nested_2d_form_matches_direct_correlation_in_float64(m, r):
    AT, G, BT = _float64(winograd_matrices.matrices(m, r))
    alpha = m + r - 1
    gen = torch.Generator().manual_seed(m * 10 + r)
    for _ in range(8):
        g = torch.randn(r, r, dtype=torch.float64, generator=gen)
        d = torch.randn(alpha, alpha, dtype=torch.float64, generator=gen)
        y = AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T
        ref = F.conv2d(d[None, None], g[None, None])[0, 0]
        assert y.shape == (m, m)
        assert rel_err(y, ref) < 1e-13 and (y - ref).abs().max().item() < 1e-13


def test_points_are_distinct_and_bad_ones_refused():
    for alpha, points in winograd_matrices.POINTS.items():
        assert len(points) == alpha - 1 and len(set(points)) == len(points), alpha
    with pytest.raises(ValueError, match="distinct"):
        winograd_matrices.matrices(2, 3, [0, 1, 1])
    with pytest.raises(ValueError, match="needs 3"):
        winograd_matrices.matrices(2, 3, [0, 1])


def test_other_points_give_other_exact_matrices():
    """The generator derives from any distinct points (Lavin & Gray's {0, +-1, +-2} for F(4,3)),
    and those are exact too: the derivation, not a table, is what the tests check."""
    pts = [Fraction(v) for v in (0, 1, -1, 2, -2)]
    AT, G, BT = winograd_matrices.matrices(4, 3, pts)
    assert (AT, G, BT) != winograd_matrices.matrices(4, 3)
    g, d = [Fraction(3), Fraction(-1, 2), Fraction(2)], [Fraction(i * i - 3, 2) for i in range(6)]
    Gg = [sum(G[j][k] * g[k] for k in range(3)) for j in range(6)]
    Bd = [sum(BT[j][i] * d[i] for i in range(6)) for j in range(6)]
    assert [sum(AT[i][j] * Gg[j] * Bd[j] for j in range(6)) for i in range(4)] == [
        sum(g[k] * d[i + k] for k in range(3)) for i in range(4)]


def test_the_header_is_the_generators():
    assert winograd_matrices.main(["--check", "--root", ROOT]) == 0
    with open(os.path.join(ROOT, winograd_matrices.HEADER)) as f:
        assert f.read() == winograd_matrices.header()


def test_the_header_check_refuses_a_stale_header(tmp_path):
    header = tmp_path / winograd_matrices.HEADER
    header.parent.mkdir(parents=True)
    header.write_text(winograd_matrices.header().replace("-1.0 / 2.0", "-1.0 / 3.0", 1))
    assert winograd_matrices.main(["--check", "--root", str(tmp_path)]) == 1
    assert winograd_matrices.main(["--root", str(tmp_path)]) == 0  # rewrites it
    assert winograd_matrices.main(["--check", "--root", str(tmp_path)]) == 0


# --- the reference -------------------------------------------------------------------------------

REFERENCE_SHAPES = [(2, 3, 4, 8, 7, 1, 2), (1, 2, 3, 1, 1, 1, 1), (2, 3, 2, 2, 5, 4, 3),
                    (1, 2, 2, 3, 3, 0, 0)]


@pytest.mark.parametrize("spec", PASS_TILES, ids=pass_tile_id)
def test_reference_is_exact_in_float64(spec):
    """The tolerance rule's same-algorithm reference is right: in float64 it is PyTorch's pass to
    rounding, on shapes with tiles cut at the edges, images smaller than a tile and padding above
    2; recording dispatch shows it runs no fastlayers op (it is independent of the kernels)."""
    pass_, tile = spec
    for shape in REFERENCE_SHAPES:
        x, w, b, gy = tensors(shape, torch.float64)
        with RecordOps() as rec:
            out = winograd_reference(pass_, x, w, b, gy, shape[5:], tile)
        assert rec.calls == []
        assert_float64_matches(out, float64_passes(x, w, b, gy, shape[5:])[pass_],
                               "reference %s tile %d %s" % (PASS_NAMES[pass_], tile,
                                                            shape_id(shape)))


@pytest.mark.parametrize("spec", PASS_TILES, ids=pass_tile_id)
def test_reference_in_cuda_arithmetic_is_the_same_algorithm(spec):
    """The reference's float32 transforms in the CUDA kernels' order (kernels='cuda', one FMA
    at a time) compute the same pass: within float32 rounding of float64 PyTorch (a misplaced
    index or term would be off by O(1)), and, for tiles above 2, not bit-equal to the
    matrix-product order (so the order is really another one; F(2,3) and F(3,2) add and halve
    exactly, the same in any order); the products' reduction summed from its last term
    (reverse=True, which the CUDA value tests may take) likewise, and not bit-equal to the first
    order."""
    pass_, tile = spec
    for shape in REFERENCE_SHAPES:
        x, w, b, gy = tensors(shape, torch.float32)
        ref = float64_passes(x, w, b, gy, shape[5:])[pass_]
        cuda = winograd_reference(pass_, x, w, b, gy, shape[5:], tile, kernels="cuda")
        cpu = winograd_reference(pass_, x, w, b, gy, shape[5:], tile, kernels="cpu")
        # the products' reduction summed from its last term (the CUDA value tests take the larger
        # error of the two orders, so this one must be the same pass too)
        rev = winograd_reference(pass_, x, w, b, gy, shape[5:], tile, kernels="cuda",
                                 reverse=True)
        what = "%s tile %d %s" % (PASS_NAMES[pass_], tile, shape_id(shape))
        assert cuda.dtype == torch.float32 and cuda.shape == ref.shape, what
        assert rel_err(cuda, ref) < 1e-4, (what, rel_err(cuda, ref))
        assert rev.dtype == torch.float32 and rev.shape == ref.shape, what
        assert rel_err(rev, ref) < 1e-4, (what, rel_err(rev, ref))
        if tile > 2 and shape == REFERENCE_SHAPES[0]:
            assert not torch.equal(cuda, cpu), what
        if shape == REFERENCE_SHAPES[0]:  # reversing really changes the order
            assert not torch.equal(rev, cuda), what
