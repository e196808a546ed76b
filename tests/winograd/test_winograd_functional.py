"""The Winograd ops in PyTorch's machinery on every device: torch.compile(fullgraph=True), memory
layouts (channels_last, transposed, strided views give the contiguous inputs' results), autocast
(the ops run in the autocast dtype, forward and backward, within that dtype's rule)."""
import pytest
import torch
import torch.nn.functional as F

from conv_samples import RecordOps, assert_within_bound, precision_of, torch_passes
from winograd_samples import (PASS_NAMES, float64_passes, recorded_tiles, run_pass, tensors,
                              winograd_passes, winograd_reference)

fl = torch.ops.fastlayers
# PyTorch's autocast dtype of each device.
AUTOCAST = {"cpu": torch.bfloat16, "cuda": torch.float16}


# --- torch.compile -------------------------------------------------------------------------------


def _three_passes(x, w, b, gy):
    """The three ops in one function, at tiles other than the default."""
    return (fl.winograd_conv2d(x, w, b, [1, 2], 6, False),
            fl.winograd_conv2d_input_grad(gy, w, [1, 2], 4, False),
            fl.winograd_conv2d_weight_grad(gy, x, [1, 2], 4, False))


def test_compile_fullgraph(device):
    """inductor (the default backend) compiles the three ops into one graph, fake kernels giving
    the shapes; its results are eager's."""
    x, w, b, gy = tensors((2, 3, 4, 7, 6, 1, 2), torch.float32, device)
    torch._dynamo.reset()
    compiled = torch.compile(_three_passes, fullgraph=True)
    for name, got, want in zip(PASS_NAMES, compiled(x, w, b, gy), _three_passes(x, w, b, gy)):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)


def test_compile_fullgraph_backward(device):
    """Autograd through a compiled forward: the backward graph holds the two gradient ops, and
    the gradients are eager's."""
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    x, w, b, _ = tensors((2, 3, 4, 8, 5, 1, 1), torch.float32, device)

    def net(x, w, b):
        return fl.winograd_conv2d(x, w, b, [1, 1], 4, False).tanh().sum()

    def grads(fn):
        leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
        return torch.autograd.grad(fn(*leaves), leaves)

    torch._dynamo.reset()
    backend = AotEagerAndRecordGraphs()
    got = grads(torch.compile(net, fullgraph=True, backend=backend))
    forward = "\n".join(g.code for g in backend.fw_graphs)
    backward = "\n".join(g.code for g in backend.bw_graphs)
    assert "fastlayers.winograd_conv2d.default" in forward
    assert "fastlayers.winograd_conv2d_input_grad.default" in backward
    assert "fastlayers.winograd_conv2d_weight_grad.default" in backward
    for name, g, e in zip("xwb", got, grads(net)):
        torch.testing.assert_close(g, e, rtol=0, atol=0, msg=name)


# --- layouts -------------------------------------------------------------------------------------


def _relayout(t, layout):
    if layout == "transposed" and t.dim() == 4:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "strided":  # every other element of a larger tensor, and a storage offset
        return t.repeat_interleave(2, dim=-1)[..., 1::2]
    return t


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "strided"])
def test_layouts_give_the_contiguous_result(device, layout):
    """Each op and tile gives the same values (bit for bit) from non-contiguous operands, and a
    contiguous result."""
    shape = (2, 4, 3, 9, 7, 1, 2)
    tensors_ = tensors(shape, torch.float32, device)
    moved = [_relayout(t, layout) for t in tensors_]
    assert not moved[0].is_contiguous() and not moved[1].is_contiguous()
    assert not moved[3].is_contiguous()
    for pass_, tile in ((0, 2), (0, 6), (1, 4), (2, 2), (2, 4)):
        want = run_pass(pass_, *tensors_, shape[5:], tile)
        got = run_pass(pass_, *moved, shape[5:], tile)
        assert got.is_contiguous()
        torch.testing.assert_close(got, want, rtol=0, atol=0,
                                   msg="%s tile %d" % (PASS_NAMES[pass_], tile))


# --- autocast ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tiles", [(2, 2, 2), (4, 6, 4)], ids=lambda t: "t%d-%d-%d" % t)
def test_autocast(device, tiles):
    """Under the device's autocast dtype the three ops take float32 operands and run in it, as
    F.conv2d does: results in the autocast dtype, each within that dtype's rule (measured on the
    operands cast to it; PyTorch's own: F.conv2d there and the Winograd reference)."""
    dtype = AUTOCAST[device]
    shape = (2, 8, 6, 12, 10, 1, 2)
    x, w, b, gy = tensors(shape, torch.float32, device)
    low = [t.to(dtype) for t in (x, w, b, gy)]
    with torch.autocast(device, dtype=dtype):
        ours = winograd_passes(x, w, b, gy, shape[5:], tiles)
        native_forward = F.conv2d(x, w, b, padding=shape[5:])
    assert native_forward.dtype == dtype
    ref = float64_passes(*low, shape[5:])
    native = torch_passes(*low, shape[5:])
    for pass_, out in enumerate(ours):
        assert out.dtype == dtype and out.device == x.device, PASS_NAMES[pass_]
        # the ops on operands cast by hand compute the same
        torch.testing.assert_close(out, run_pass(pass_, *low, shape[5:], tiles[pass_]),
                                   rtol=0, atol=0)
        same = winograd_reference(pass_, *low, shape[5:], tiles[pass_], kernels=device).cpu()
        assert_within_bound(out.cpu(), ref[pass_].cpu(), native[pass_].cpu(), same,
                            precision_of(dtype), what="autocast %s tile %d" % (
                                PASS_NAMES[pass_], tiles[pass_]))


def test_autocast_backward(device):
    """The backward of an autocast forward: the gradient ops in the autocast dtype (recorded, with
    their tiles), the leaves' gradients in float32, each within the rule of that dtype (against
    float64; PyTorch's own: F.conv2d's backward under autocast, and the reference of the tile the
    backward ran)."""
    dtype = AUTOCAST[device]
    precision = precision_of(dtype)
    shape = (2, 4, 5, 11, 9, 1, 1)
    x, w, b, gy = tensors(shape, torch.float32, device)
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    low = [t.detach().to(dtype) for t in (x, w, b, gy)]
    ref = torch.autograd.grad(F.conv2d(*(t.double() for t in leaves), padding=shape[5:]),
                              leaves, gy.double())
    with torch.autocast(device, dtype=dtype):
        ours = fl.winograd_conv2d(*leaves, list(shape[5:]), 4, False)
        native = F.conv2d(*leaves, padding=shape[5:])
    assert ours.dtype == native.dtype == dtype
    with RecordOps() as rec:
        g_ours = torch.autograd.grad(ours, leaves, gy.to(dtype))
    for name, args in rec.calls:
        assert all(a.dtype == dtype for a in args if isinstance(a, torch.Tensor)), name
    tiles = recorded_tiles(rec.calls)
    g_native = torch.autograd.grad(native, leaves, gy.to(dtype))
    same = (winograd_reference(1, *low, shape[5:], tiles["winograd_conv2d_input_grad"][0],
                               kernels=device).float().cpu(),
            winograd_reference(2, *low, shape[5:], tiles["winograd_conv2d_weight_grad"][0],
                               kernels=device).float().cpu(),
            None)  # the bias gradient: the same reduction as PyTorch's
    for name, go, gn, gs, r in zip(("input", "weight", "bias"), g_ours, g_native, same, ref):
        assert go.dtype == torch.float32, name
        assert_within_bound(go.cpu(), r.cpu(), gn.cpu(), gs, precision,
                            what="autocast grad " + name)
