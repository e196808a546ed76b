"""Gradients of the FFT-convolution ops: gradcheck and gradgradcheck in float64 on every device
(cuFFT pipeline), autograd against F.conv2d, and the CUDA fbfft backward, which computes in
float32 only: its first and second derivatives against F.conv2d's in float64 within the rule."""
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from fastlayers.ops import default_basis
from conv_samples import (PASSES, Case, assert_within_bound, cudnn_tf32, fbfft_cases,
                          fft_reference, make_tensors, rel_err, sample_cases)

SMALL = list(sample_cases("small"))
fl = torch.ops.fastlayers


def pass_function(pass_, case, x, w, b, gy, backend="cufft", tile=(0, 0)):
    """The op of one pass as a function of its tensor arguments, and those arguments."""
    pad, basis, tile = case.padding, case.basis, list(tile)
    if pass_ == "forward":
        return (lambda x, w, b: fl.fft_conv2d(x, w, b, pad, basis, False, backend, tile),
                (x, w, b))
    if pass_ == "input_grad":
        gx_tile = [min(tile[0], case.H), min(tile[1], case.W)]  # tiles of the input gradient
        return (lambda gy, w: fl.fft_conv2d_input_grad(gy, w, pad, basis, False, backend,
                                                       gx_tile), (gy, w))
    return (lambda gy, x: fl.fft_conv2d_weight_grad(gy, x, pad, basis, False, backend, tile),
            (gy, x))


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("case", SMALL, ids=str)
def test_gradcheck(device, pass_, case):
    fn, args = pass_function(pass_, case, *make_tensors(case, torch.float64, device, True))
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args)


# (case with the tiles' basis, tile of y): partial last tiles; the last one's tile is larger
# than H, so the input gradient's tile is cut to the input.
TILED_GRAD_CASES = [
    (Case(2, 2, 3, 5, 6, 3, 2, 1, 1, (4, 4)), (2, 3)),
    (Case(1, 2, 2, 7, 4, 2, 3, 0, 1, (4, 4)), (3, 2)),
    (Case(2, 1, 2, 4, 5, 1, 1, 2, 1, (4, 4)), (4, 3)),
]


def tiled_id(spec):
    case, tile = spec
    return "%s-t%dx%d" % (case, *tile)


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("spec", TILED_GRAD_CASES, ids=tiled_id)
def test_gradcheck_tiled(device, pass_, spec):
    case, tile = spec
    fn, args = pass_function(pass_, case, *make_tensors(case, torch.float64, device, True),
                             tile=tile)
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args)


def test_autograd_matches_pytorch(device):
    case = Case(3, 4, 5, 10, 7, 4, 3, 2, 1, (16, 12))
    x, w, b, _ = make_tensors(case, torch.float64, device, requires_grad=True)
    ours = fl.fft_conv2d(x, w, b, case.padding, case.basis)
    ref = F.conv2d(x, w, b, 1, case.padding)
    gy = torch.randn_like(ref)
    for name, g_ours, g_ref in zip("xwb", torch.autograd.grad(ours, (x, w, b), gy),
                                   torch.autograd.grad(ref, (x, w, b), gy)):
        assert rel_err(g_ours, g_ref) <= 1e-10, name


# --- the CUDA fbfft backward (float32 only) -------------------------------------------------------

FBFFT_GRAD_CASES = ([(case, (0, 0)) for case in fbfft_cases("small")]
                    + [(Case(3, 5, 6, 14, 11, 5, 3, 1, 2, (16, 16)), (0, 0)),
                       (Case(2, 6, 5, 18, 17, 3, 3, 1, 1, (32, 32)), (0, 0))]
                    + [(case._replace(basis=(4, 4)), tile) for case, tile in TILED_GRAD_CASES]
                    + [(Case(2, 3, 4, 20, 15, 3, 5, 1, 2, (16, 16)), (9, 7))])


def _first_and_second_derivatives(conv, x, w, b, gy, vx, vw):
    """d/d(x, w, b) of <conv(x, w, b), gy>, then d/d(x, w, gy) of <gx, vx> + <gw, vw>."""
    y = conv(x, w, b)
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy, create_graph=True)
    second = torch.autograd.grad((gx * vx).sum() + (gw * vw).sum(), (x, w, gy))
    return (gx, gw, gb) + second


@pytest.mark.gpu
@pytest.mark.parametrize("spec", FBFFT_GRAD_CASES, ids=tiled_id)
def test_fbfft_backward_on_cuda_within_pytorch_error(spec):
    """float64 is refused by fbfft on CUDA, so no gradcheck: the gradients its autograd formulas
    give (fbfft ops all through, first and second order) against F.conv2d's in float64, within
    the rule (PyTorch's own in float32: cuDNN's, and those of fft_reference)."""
    case, tile = spec
    pad, basis = case.padding, case.basis
    tensors = make_tensors(case, torch.float32, "cuda")
    vx, vw = torch.randn_like(tensors[0]), torch.randn_like(tensors[1])

    def run(conv, dtype):
        x, w, b, gy = (t.detach().to(dtype).requires_grad_() for t in tensors)
        return _first_and_second_derivatives(conv, x, w, b, gy, vx.to(dtype), vw.to(dtype))

    ours = run(lambda x, w, b: fl.fft_conv2d(x, w, b, pad, basis, False, "fbfft", list(tile)),
               torch.float32)
    ref = run(lambda x, w, b: F.conv2d(x, w, b, 1, pad), torch.float64)
    with cudnn_tf32(False):
        native = run(lambda x, w, b: F.conv2d(x, w, b, 1, pad), torch.float32)
    untiled = default_basis((case.H, case.W), pad)
    fft = run(lambda x, w, b: fft_reference(0, x, w, b, None, pad, untiled), torch.float32)
    names = ("grad x", "grad w", "grad b", "grad x of <gw, vw>", "grad w of <gx, vx>",
             "grad gy of <gx, vx> + <gw, vw>")
    for name, o, r, n, f in zip(names, ours, ref, native, fft):
        assert_within_bound(o, r, n, f, what="%s %s tile=%s" % (name, case, tile))
