"""The Winograd ops: the matrices, values of every pass and tile against PyTorch per device and
precision (the tolerance rule, with the pure-torch Winograd reference as the same-algorithm
reference), gradients, opcheck, torch.compile, layouts, empty sizes and bad arguments."""
import os
from fractions import Fraction

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from fastlayers import winograd_matrices
from conv_samples import (DTYPES, MUTATION, assert_float64_matches, assert_mutation_rejected,
                          assert_within_bound, cudnn_tf32, precision_of, rel_err,
                          skip_unless_supported, torch_passes)
from winograd_samples import (SHAPES, SMALL_SHAPES, tensors, tiles_of, winograd_passes,
                              winograd_reference)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASS_NAMES = ("forward", "input_grad", "weight_grad")


# --- the matrices ----------------------------------------------------------------------------

@pytest.mark.parametrize("m, r", winograd_matrices.VARIANTS)
def test_matrices_compute_the_correlation_exactly(m, r):
    AT, G, BT = winograd_matrices.matrices(m, r)
    alpha = m + r - 1
    for seed in range(4):
        g = [Fraction((seed * 7 + 3 * k) % 11 - 5) for k in range(r)]
        d = [Fraction((seed * 5 + 2 * i) % 13 - 6, 1 + i % 3) for i in range(alpha)]
        Gg = [sum(G[j][k] * g[k] for k in range(r)) for j in range(alpha)]
        Bd = [sum(BT[j][i] * d[i] for i in range(alpha)) for j in range(alpha)]
        y = [sum(AT[i][j] * Gg[j] * Bd[j] for j in range(alpha)) for i in range(m)]
        assert y == [sum(g[k] * d[i + k] for k in range(r)) for i in range(m)]


@pytest.mark.parametrize("m, r", winograd_matrices.VARIANTS)
def test_nested_2d_form_matches_direct_correlation_in_float64(m, r):
    AT, G, BT = [torch.tensor([[float(v) for v in row] for row in M], dtype=torch.float64)
                 for M in winograd_matrices.matrices(m, r)]
    alpha = m + r - 1
    gen = torch.Generator().manual_seed(m * 10 + r)
    g = torch.randn(r, r, dtype=torch.float64, generator=gen)
    d = torch.randn(alpha, alpha, dtype=torch.float64, generator=gen)
    y = AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T
    ref = torch.nn.functional.conv2d(d[None, None], g[None, None])[0, 0]
    assert (y - ref).abs().max().item() < 1e-12


def test_points_are_distinct_and_bad_ones_refused():
    with pytest.raises(ValueError, match="distinct"):
        winograd_matrices.matrices(2, 3, [0, 1, 1])
    with pytest.raises(ValueError, match="needs 3"):
        winograd_matrices.matrices(2, 3, [0, 1])


def test_the_header_is_the_generators():
    assert winograd_matrices.main(["--check", "--root", ROOT]) == 0


# --- values ----------------------------------------------------------------------------------

def shape_id(shape):
    return "S%d-C%d-K%d-%dx%d-p%dx%d" % shape


@pytest.mark.parametrize("precision", ["float32", "float64", "tf32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_every_pass_and_tile_matches_pytorch(device, shape, precision):
    skip_unless_supported(device, precision)
    dtype = DTYPES[precision]
    padding = shape[5:]
    x, w, b, gy = tensors(shape, dtype, device)
    ref = torch_passes(*(t.double() for t in (x, w, b, gy)), padding)
    tf32 = precision == "tf32"
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, padding) if precision != "float64" else None
    for pass_ in range(3):
        for tile in tiles_of(pass_):
            if precision == "float16" and tile + 2 > 6:
                continue  # F(6x6,3x3) is not offered in float16 (its tiles overflow there)
            tiles = [2, 2, 2]
            tiles[pass_] = tile
            out = winograd_passes(x, w, b, gy, padding, tiles, tf32)[pass_]
            what = "%s %s tile %d on %s" % (shape_id(shape), PASS_NAMES[pass_], tile, device)
            if precision == "float64":
                assert_float64_matches(out, ref[pass_], what)
                continue
            same = winograd_reference(pass_, x, w, b, gy, padding, tile, tf32)
            bound = assert_within_bound(out.cpu(), ref[pass_].cpu(), native[pass_].cpu(),
                                        same.cpu(), precision_of(dtype, tf32), what=what)
            # A kernel off by MUTATION is rejected wherever the algorithm's own error leaves room
            # (F(2x2,3x3) and F(3x3,2x2) everywhere; larger tiles round more than MUTATION).
            if tile == 2 and precision in MUTATION:
                assert_mutation_rejected(out.cpu(), ref[pass_].cpu(), bound, precision, what)


def test_larger_tiles_round_more_but_stay_close(device):
    # F(6x6,3x3)'s error is larger than F(2x2,3x3)'s, within a small factor of the direct one
    shape = (2, 32, 32, 12, 12, 1, 1)
    x, w, b, gy = tensors(shape, torch.float32, device)
    ref = torch_passes(*(t.double() for t in (x, w, b, gy)), (1, 1))[0]
    errs = {t: rel_err(winograd_passes(x, w, b, gy, (1, 1), [t, 2, 2])[0].cpu(), ref)
            for t in (2, 4, 6)}
    assert errs[2] < errs[6] < 50 * errs[2], errs


# --- gradients -------------------------------------------------------------------------------

@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=shape_id)
def test_gradcheck(device, shape, tile):
    x, w, b, gy = (t.requires_grad_() for t in tensors(shape, torch.float64, device))
    fl = torch.ops.fastlayers
    pad = list(shape[5:])
    assert gradcheck(lambda x, w, b: fl.winograd_conv2d(x, w, b, pad, tile, False), (x, w, b))
    assert gradcheck(lambda gy, w: fl.winograd_conv2d_input_grad(gy, w, pad, tile, False),
                     (gy, w))
    assert gradcheck(lambda gy, x: fl.winograd_conv2d_weight_grad(gy, x, pad, tile, False),
                     (gy, x))
    assert gradgradcheck(lambda x, w: fl.winograd_conv2d(x, w, None, pad, tile, False), (x, w))


@pytest.mark.parametrize("grads", ["none", "first", "all"])
@pytest.mark.parametrize("variant", ["forward", "input_grad", "weight_grad"])
def test_opcheck(device, variant, grads):
    shape = SMALL_SHAPES[0]
    x, w, b, gy = tensors(shape, torch.float32, device)
    if grads != "none":
        x.requires_grad_(), gy.requires_grad_()
    if grads == "all":
        w.requires_grad_(), b.requires_grad_()
    fl, pad = torch.ops.fastlayers, list(shape[5:])
    op, args = {
        "forward": (fl.winograd_conv2d.default, (x, w, b, pad, 4, False)),
        "input_grad": (fl.winograd_conv2d_input_grad.default, (gy, w, pad, 2, False)),
        "weight_grad": (fl.winograd_conv2d_weight_grad.default, (gy, x, pad, 4, False)),
    }[variant]
    torch.library.opcheck(op, args)


def test_compile_fullgraph(device):
    shape = (2, 3, 4, 7, 6, 1, 1)
    x, w, b, gy = tensors(shape, torch.float32, device)

    def three(x, w, b, gy):
        return winograd_passes(x, w, b, gy, (1, 1), (4, 2, 2))

    torch._dynamo.reset()
    got = torch.compile(three, fullgraph=True, backend="aot_eager")(x, w, b, gy)
    for a, e in zip(got, three(x, w, b, gy)):
        torch.testing.assert_close(a, e)


# --- layouts, empty sizes, autocast ----------------------------------------------------------

def test_layouts_give_the_same_result(device):
    shape = (2, 4, 3, 9, 7, 1, 2)
    x, w, b, gy = tensors(shape, torch.float32, device)
    want = winograd_passes(x, w, b, gy, shape[5:], (4, 4, 4))
    cl = lambda t: t.contiguous(memory_format=torch.channels_last)  # noqa: E731
    nc = lambda t: t.transpose(2, 3).contiguous().transpose(2, 3)  # noqa: E731
    for f in (cl, nc):
        got = winograd_passes(f(x), f(w), b, f(gy), shape[5:], (4, 4, 4))
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, rtol=0, atol=0)


@pytest.mark.parametrize("empty", ["S", "C", "K"])
def test_empty_sizes(device, empty):
    S, C, K = {"S": (0, 3, 4), "C": (2, 0, 4), "K": (2, 3, 0)}[empty]
    x, w, b = torch.randn(S, C, 5, 5), torch.randn(K, C, 3, 3), torch.randn(K)
    x, w, b = x.to(device), w.to(device), b.to(device)
    gy = torch.randn(S, K, 5, 5, device=device)
    y, gx, gw = winograd_passes(x, w, b, gy, (1, 1), (2, 2, 2))
    assert y.shape == (S, K, 5, 5) and gx.shape == (S, C, 5, 5) and gw.shape == (K, C, 3, 3)
    # no input channel: the bias alone; otherwise empty, or zeros (PyTorch's own convolution
    # refuses some of these sizes)
    torch.testing.assert_close(y, b[:, None, None].expand(S, K, 5, 5))
    assert not gx.any() and not gw.any()


def test_autocast(device):
    x, w, b, gy = tensors((2, 3, 4, 6, 6, 1, 1), torch.float32, device)
    dt = torch.bfloat16 if device == "cpu" else torch.float16
    with torch.autocast(device, dtype=dt):
        y = torch.ops.fastlayers.winograd_conv2d(x, w, b, [1, 1], 2, False)
    assert y.dtype == dt


# --- bad arguments ---------------------------------------------------------------------------

def bad_calls():
    fl = torch.ops.fastlayers
    x, w, b, gy = tensors((2, 3, 4, 6, 6, 1, 1), torch.float32)
    return [
        ("3x3", lambda: fl.winograd_conv2d(x, torch.randn(4, 3, 5, 5), None, [1, 1], 2, False)),
        ("`tile`", lambda: fl.winograd_conv2d(x, w, None, [1, 1], 3, False)),
        ("`tile`", lambda: fl.winograd_conv2d_weight_grad(gy, x, [1, 1], 6, False)),
        ("`padding`", lambda: fl.winograd_conv2d(x, w, None, [-1, 1], 2, False)),
        ("`padding`", lambda: fl.winograd_conv2d(x, w, None, [2 ** 40, 1], 2, False)),
        ("same dtype", lambda: fl.winograd_conv2d(x, w.double(), None, [1, 1], 2, False)),
        ("input channels", lambda: fl.winograd_conv2d(x, torch.randn(4, 2, 3, 3), None, [1, 1],
                                                      2, False)),
        ("4-D", lambda: fl.winograd_conv2d(x[0], w, None, [1, 1], 2, False)),
        ("`bias`", lambda: fl.winograd_conv2d(x, w, torch.randn(5), [1, 1], 2, False)),
        ("`grad_output` has spatial size", lambda: fl.winograd_conv2d_weight_grad(
            gy[..., :5], x, [1, 1], 2, False)),
        ("larger than the padded input", lambda: fl.winograd_conv2d(
            torch.randn(1, 3, 2, 2), w, None, [0, 0], 2, False)),
        ("output channels", lambda: fl.winograd_conv2d_input_grad(
            torch.randn(2, 5, 6, 6), w, [1, 1], 2, False)),
        ("dtype", lambda: fl.winograd_conv2d(x.int(), w.int(), None, [1, 1], 2, False)),
    ]


@pytest.mark.parametrize("i", range(len(bad_calls())))
def test_bad_arguments_name_themselves(i):
    what, call = bad_calls()[i]
    with pytest.raises(RuntimeError, match=what.replace("(", r"\(")):
        call()
