"""Gradients of the Winograd ops (their autograd formulas are made of the other ops):
gradcheck and gradgradcheck in float64 through each op and tile, all differentiable inputs; the
forward's gradients, first and second order, against F.conv2d's; and the ops and tiles the
backward runs."""
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from conv_samples import RecordOps, rel_err
from winograd_samples import (PASS_NAMES, PASS_TILES, SMALL_SHAPES, pass_tile_id,
                              recorded_tiles, shape_id, tensors)

fl = torch.ops.fastlayers


def pass_function(pass_, tile, padding, x, w, b, gy, bias=True):
    """The op of one pass as a function of all its differentiable tensors, and those tensors."""
    pad = list(padding)
    if pass_ == 0:
        if bias:
            return (lambda x, w, b: fl.winograd_conv2d(x, w, b, pad, tile, False)), (x, w, b)
        return (lambda x, w: fl.winograd_conv2d(x, w, None, pad, tile, False)), (x, w)
    if pass_ == 1:
        return (lambda gy, w: fl.winograd_conv2d_input_grad(gy, w, pad, tile, False)), (gy, w)
    return (lambda gy, x: fl.winograd_conv2d_weight_grad(gy, x, pad, tile, False)), (gy, x)


@pytest.mark.parametrize("spec", PASS_TILES, ids=pass_tile_id)
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=shape_id)
def test_gradcheck(device, shape, spec):
    """Full Jacobians of first derivatives everywhere; of second derivatives on the smallest
    shape (padding 3), elsewhere gradgradcheck's fast mode (random projections of the Jacobian:
    the full one costs ~0.3-0.9 s a case)."""
    pass_, tile = spec
    tensors_ = [t.requires_grad_() for t in tensors(shape, torch.float64, device)]
    fn, args = pass_function(pass_, tile, shape[5:], *tensors_)
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args, fast_mode=shape != SMALL_SHAPES[-1])


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_gradcheck_forward_without_bias(device, tile):
    shape = SMALL_SHAPES[-1]
    tensors_ = [t.requires_grad_() for t in tensors(shape, torch.float64, device)]
    fn, args = pass_function(0, tile, shape[5:], *tensors_, bias=False)
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args)


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_autograd_matches_pytorch(device, tile):
    """First and second derivatives of the forward against F.conv2d's, float64, padding 3 > 2:
    d/d(x, w, b) of <y, gy>, then d/d(x, w, gy) of <gx, vx> + <gw, vw>."""
    shape = (3, 4, 5, 7, 6, 3, 1)
    leaves = tensors(shape, torch.float64, device)
    vx, vw = torch.randn_like(leaves[0]), torch.randn_like(leaves[1])

    def derivatives(conv):
        x, w, b, gy = (t.detach().clone().requires_grad_() for t in leaves)
        gx, gw, gb = torch.autograd.grad(conv(x, w, b), (x, w, b), gy, create_graph=True)
        return (gx, gw, gb) + torch.autograd.grad((gx * vx).sum() + (gw * vw).sum(), (x, w, gy))

    ours = derivatives(lambda x, w, b: fl.winograd_conv2d(x, w, b, list(shape[5:]), tile, False))
    ref = derivatives(lambda x, w, b: F.conv2d(x, w, b, 1, shape[5:]))
    names = ("grad x", "grad w", "grad b", "grad x of <gw, vw>", "grad w of <gx, vx>",
             "grad gy of <gx, vx> + <gw, vw>")
    for name, o, r in zip(names, ours, ref):
        assert o.shape == r.shape and rel_err(o, r) <= 1e-10, (name, rel_err(o, r))


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_backward_runs_the_winograd_ops(tile):
    """The forward's backward is Winograd all through: the input gradient at the forward's tile,
    the weight gradient at one of its own tiles, no other op of fastlayers."""
    x, w, b, _ = (t.requires_grad_() for t in tensors(SMALL_SHAPES[0], torch.float32))
    y = fl.winograd_conv2d(x, w, b, [1, 1], tile, False)
    with RecordOps() as rec:
        y.backward(torch.randn_like(y))
    tiles = recorded_tiles(rec.calls)
    assert [name for name, _ in rec.calls] == [n for n in tiles for _ in tiles[n]]
    assert tiles["winograd_conv2d_input_grad"] == [tile]
    assert len(tiles["winograd_conv2d_weight_grad"]) == 1
    assert tiles["winograd_conv2d_weight_grad"][0] in (2, 4)
    assert "winograd_conv2d" not in tiles


def test_backward_computes_only_the_needed_gradients():
    x, w, b, gy = tensors(SMALL_SHAPES[0], torch.float32)
    for needs, ops in (("x", {"winograd_conv2d_input_grad"}),
                       ("w", {"winograd_conv2d_weight_grad"}), ("b", set())):
        leaves = {"x": x.clone(), "w": w.clone(), "b": b.clone()}
        leaves[needs].requires_grad_()
        y = fl.winograd_conv2d(leaves["x"], leaves["w"], leaves["b"], [1, 1], 4, False)
        with RecordOps() as rec:
            (g,) = torch.autograd.grad(y, leaves[needs], torch.ones_like(y))
        assert {name for name, _ in rec.calls} == ops, needs
        assert g.shape == leaves[needs].shape
