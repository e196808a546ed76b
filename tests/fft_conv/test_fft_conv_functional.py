"""The Python surface of FFT convolution on every device: the typed wrappers and their default
basis, the F.conv2d-like `fastlayers.ops.conv2d`, autocast, non-contiguous inputs, empty batches."""
import pytest
import torch
import torch.nn.functional as F

from fastlayers import ops
from conv_samples import (PASSES, Case, assert_within_bound, check_passes, fft_passes,
                          fft_reference, make_tensors, rel_err, torch_passes)

fl = torch.ops.fastlayers
# PyTorch's autocast dtype of each device.
AUTOCAST = {"cpu": torch.bfloat16, "cuda": torch.float16}


def test_python_wrappers_default_to_the_smallest_fast_basis(device):
    case = Case(2, 3, 4, 9, 11, 3, 5, 1, 2, ops.default_basis((9, 11), (1, 2)))
    assert case.basis == (12, 15)
    x, w, b, gy = make_tensors(case, torch.float64, device)
    expected = fft_passes(x, w, b, gy, case.padding, case.basis)
    got = (ops.fft_conv2d(x, w, b, padding=(1, 2)),
           ops.fft_conv2d_input_grad(gy, w, padding=(1, 2)),
           ops.fft_conv2d_weight_grad(gy, x, padding=(1, 2)))
    for name, e, g in zip(PASSES, expected, got):
        torch.testing.assert_close(g, e, rtol=0, atol=0, msg=name)
    check_passes(got, x, w, b, gy, case.padding, "float64", what="wrappers")


def test_python_wrappers_take_the_tile(device):
    case = Case(2, 3, 4, 20, 15, 3, 5, 1, 2, (0, 0))
    x, w, b, gy = make_tensors(case, torch.float64, device)
    got = (ops.fft_conv2d(x, w, b, padding=(1, 2), tile=(6, 4)),
           ops.fft_conv2d_input_grad(gy, w, padding=(1, 2), tile=6),
           ops.fft_conv2d_weight_grad(gy, x, padding=(1, 2), tile=(6, 4)))
    check_passes(got, x, w, b, gy, case.padding, "float64", what="tiled wrappers")
    y = ops.conv2d(x, w, b, padding="same", tile=(5, 5))
    check_passes((y, None, None), x, w, b, gy, case.padding, "float64", what="tiled conv2d")
    assert ops._basis_for((20, 15), (1, 2), None, "fbfft", (6, 4), (3, 5)) == (8, 8)
    assert ops._basis_for((20, 15), (1, 2), None, "cufft", (6, 4), (3, 5)) == (8, 8)
    assert ops._basis_for((20, 15), (1, 2), None, "cufft", (9, 7), (3, 5)) == (12, 12)


def test_conv_tf32_allowed_follows_pytorch():
    conv = torch.backends.cudnn.conv
    old = conv.fp32_precision
    try:
        conv.fp32_precision = "ieee"
        assert ops.conv_tf32_allowed() is False
        conv.fp32_precision = "tf32"
        assert ops.conv_tf32_allowed() is True
    finally:
        conv.fp32_precision = old


def test_good_fft_size():
    assert [ops.good_fft_size(n) for n in (0, 1, 7, 11, 13, 17, 97, 121)] == [
        1, 1, 7, 12, 14, 18, 98, 125]


# --- the F.conv2d-like wrapper -------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("kernel", [(1, 1), (3, 3), (5, 3), (2, 2), (4, 4), (2, 5), (6, 1)])
@pytest.mark.parametrize("padding", ["same", "valid", 0, 1, (2, 1)])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_conv2d_matches_torch(device, kernel, padding, batched):
    x = torch.randn(2, 3, 9, 10, dtype=torch.float64, device=device)
    w = torch.randn(4, 3, *kernel, dtype=torch.float64, device=device)
    b = torch.randn(4, dtype=torch.float64, device=device)
    if not batched:
        x = x[0]
    ref = F.conv2d(x, w, b, padding=padding)
    out = ops.conv2d(x, w, b, padding=padding)
    assert out.shape == ref.shape and out.device == ref.device
    assert rel_err(out, ref) <= 1e-10
    if padding == "same":
        assert out.shape[-2:] == x.shape[-2:]


def test_conv2d_explicit_basis(device):
    x = torch.randn(2, 3, 9, 10, dtype=torch.float64, device=device)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, device=device)
    ref = F.conv2d(x, w, padding=1)
    for basis in [(11, 12), 16, (32, 13)]:
        assert rel_err(ops.conv2d(x, w, padding=1, basis=basis), ref) <= 1e-10, basis
    with pytest.raises(RuntimeError, match="`basis`"):
        ops.conv2d(x, w, padding=1, basis=(10, 12))


# --- autocast ------------------------------------------------------------------------------------


def test_autocast(device):
    """Under the device's autocast dtype the three ops run in it, as F.conv2d does."""
    dtype = AUTOCAST[device]
    case = Case(2, 8, 6, 12, 10, 3, 5, 1, 2, (16, 16))
    x, w, b, gy = make_tensors(case, torch.float32, device)
    low = [t.to(dtype) for t in (x, w, b, gy)]
    with torch.autocast(device, dtype=dtype):
        ours = fft_passes(x, w, b, gy, case.padding, case.basis)
        native_forward = F.conv2d(x, w, b, padding=case.padding)
        wrapped = ops.conv2d(x, w, b, padding=case.padding)
    assert native_forward.dtype == wrapped.dtype == dtype
    torch.testing.assert_close(native_forward, torch_passes(*low, case.padding)[0], rtol=0, atol=0)
    for out in ours:
        assert out.dtype == dtype
    check_passes(ours, *low, case.padding, str(dtype).replace("torch.", ""), case.basis,
                 what="autocast")
    check_passes((wrapped, None, None), *low, case.padding, str(dtype).replace("torch.", ""),
                 what="autocast conv2d")


def test_autocast_backward(device):
    """The backward of an autocast forward: the gradient ops in the autocast dtype, the leaves'
    gradients in float32, each within the rule of that dtype (against float64; PyTorch's own
    are F.conv2d's backward under autocast and fft_reference's in the autocast dtype)."""
    dtype = AUTOCAST[device]
    precision = str(dtype).replace("torch.", "")
    case = Case(2, 4, 5, 11, 9, 3, 3, 1, 1, (13, 11))
    x, w, b, gy = make_tensors(case, torch.float32, device)
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    low = [t.detach().to(dtype).requires_grad_() for t in (x, w, b)]
    ref = torch.autograd.grad(F.conv2d(*(t.double() for t in leaves), padding=case.padding),
                              leaves, gy.double())
    with torch.autocast(device, dtype=dtype):
        ours = fl.fft_conv2d(*leaves, case.padding, case.basis)
        native = F.conv2d(*leaves, padding=case.padding)
    assert ours.dtype == native.dtype == dtype
    g_ours = torch.autograd.grad(ours, leaves, gy.to(dtype))
    g_native = torch.autograd.grad(native, leaves, gy.to(dtype))
    g_fft = torch.autograd.grad(fft_reference(0, *low, None, case.padding, case.basis), low,
                                gy.to(dtype))
    for name, go, gn, gf, r in zip(("input", "weight", "bias"), g_ours, g_native, g_fft, ref):
        assert go.dtype == torch.float32, name
        assert_within_bound(go, r, gn, gf.float(), precision, what="autocast grad " + name)


# --- layouts and edge cases ----------------------------------------------------------------------


def _relayout(t, layout):
    if layout == "transposed" and t.dim() == 4:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "strided":
        return t.repeat_interleave(2, dim=-1)[..., ::2]
    return t


@pytest.mark.parametrize("layout", ["transposed", "channels_last", "strided"])
def test_non_contiguous_inputs(device, layout):
    case = Case(3, 4, 5, 9, 12, 3, 4, 1, 2, (16, 16))
    tensors = make_tensors(case, torch.float32, device)
    moved = [_relayout(t, layout) for t in tensors]
    assert not moved[0].is_contiguous() and not moved[1].is_contiguous()
    got = fft_passes(*moved, case.padding, case.basis)
    check_passes(got, *tensors, case.padding, "float32", case.basis, what=layout)
    for name, e, g in zip(PASSES, fft_passes(*tensors, case.padding, case.basis), got):
        torch.testing.assert_close(g, e, msg=name)  # and the same as from contiguous inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("backend,tile", [("cufft", (0, 0)), ("fbfft", (0, 0)),
                                          ("cufft", (3, 3))], ids=str)
def test_empty_batch(device, dtype, backend, tile):
    case = Case(0, 3, 4, 7, 6, 3, 2, 1, 0, (16, 8))
    x, w, b, gy = make_tensors(case, dtype, device, requires_grad=True)
    y, gx, gw = fft_passes(x, w, b, gy, case.padding, case.basis, backend=backend, tile=tile)
    assert y.shape == (0, 4, 7, 5) and y.device == x.device and y.dtype == dtype
    assert gx.shape == (0, 3, 7, 6)
    assert gw.shape == (4, 3, 3, 2) and not gw.any()
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert not w.grad.any() and not b.grad.any()
    assert ops.conv2d(x.detach(), w.detach(), padding="same").shape == (0, 4, 7, 6)


@pytest.mark.parametrize("backend,tile", [("cufft", (0, 0)), ("fbfft", (0, 0)),
                                          ("cufft", (3, 3))], ids=str)
@pytest.mark.parametrize("empty", ["C", "K"])
def test_no_channels_to_sum_over(device, backend, tile, empty):
    # C = 0: the forward sums over no input channel (zeros, and the bias); K = 0: the input
    # gradient over no output channel (zeros)
    C, K = (0, 4) if empty == "C" else (3, 0)
    case = Case(2, C, K, 7, 6, 3, 2, 1, 0, (16, 8))
    x, w, b, gy = make_tensors(case, torch.float32, device)
    y, gx, gw = fft_passes(x, w, b, gy, case.padding, case.basis, backend=backend, tile=tile)
    assert y.shape == (2, K, 7, 5) and gx.shape == (2, C, 7, 6) and gw.shape == (K, C, 3, 2)
    assert torch.equal(y, b.view(1, -1, 1, 1).expand_as(y)) and not gx.any()
