"""The `backend` argument of the FFT-convolution ops: "cufft" and "fbfft" (CPU: one pipeline)."""
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

import fastlayers
from fastlayers import ops
from conv_samples import (Case, fbfft_cases, fft_passes, make_tensors, pow2_basis, rel_err,
                          torch_passes)

FBFFT = list(fbfft_cases("full"))
FBFFT_SMALL = list(fbfft_cases("small"))
PASSES = ("forward", "input_grad", "weight_grad")
fl = torch.ops.fastlayers


@pytest.mark.parametrize("case", FBFFT, ids=str)
def test_fbfft_equals_cufft_and_pytorch(case):
    x, w, b, gy = make_tensors(case, torch.float64)
    ref = torch_passes(x, w, b, gy, case.padding)
    cufft = fft_passes(x, w, b, gy, case.padding, case.basis, backend="cufft")
    fbfft = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    for name, f, c, r in zip(PASSES, fbfft, cufft, ref):
        torch.testing.assert_close(f, c, rtol=0, atol=0, msg=name)  # the same CPU pipeline
        assert rel_err(f, r) <= 1e-10, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fbfft_equals_cufft_in_other_dtypes(dtype):
    case = Case(3, 4, 5, 10, 7, 3, 2, 1, 2, (16, 16))
    x, w, b, gy = (t.to(dtype) for t in make_tensors(case))
    cufft = fft_passes(x, w, b, gy, case.padding, case.basis, backend="cufft")
    fbfft = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    for name, f, c in zip(PASSES, fbfft, cufft):
        assert f.dtype == dtype, name
        torch.testing.assert_close(f, c, rtol=0, atol=0, msg=name)


def test_default_backend_is_cufft():
    case = Case(2, 3, 4, 9, 6, 3, 3, 1, 0, (11, 7))  # not a power of two: cuFFT only
    x, w, b, gy = make_tensors(case, torch.float64)
    for name, got, want in zip(PASSES, (fl.fft_conv2d(x, w, b, case.padding, case.basis),
                                        fl.fft_conv2d_input_grad(gy, w, case.padding, case.basis),
                                        fl.fft_conv2d_weight_grad(gy, x, case.padding, case.basis)),
                               fft_passes(x, w, b, gy, case.padding, case.basis)):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)


def test_python_wrappers_take_the_backend():
    case = Case(2, 3, 4, 9, 11, 3, 5, 1, 2, (16, 16))  # fbfft's default basis: the next power of 2
    x, w, b, gy = make_tensors(case, torch.float64)
    expected = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    got = (ops.fft_conv2d(x, w, b, padding=(1, 2), backend="fbfft"),
           ops.fft_conv2d_input_grad(gy, w, padding=(1, 2), backend="fbfft"),
           ops.fft_conv2d_weight_grad(gy, x, padding=(1, 2), backend="fbfft"))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert ops.BACKENDS == ("cufft", "fbfft")
    ref = F.conv2d(x, w, b, padding="same")
    assert rel_err(ops.conv2d(x, w, b, padding="same", backend="fbfft"), ref) <= 1e-10
    assert rel_err(ops.conv2d(x, w, b, padding="same", backend="fbfft", basis=32), ref) <= 1e-10


@pytest.mark.parametrize("case", FBFFT_SMALL, ids=str)
def test_gradcheck_fbfft(case):
    x, w, b, gy = make_tensors(case, torch.float64, requires_grad=True)
    pad, basis = case.padding, case.basis
    checks = [
        (lambda x, w, b: fl.fft_conv2d(x, w, b, pad, basis, False, "fbfft"), (x, w, b)),
        (lambda gy, w: fl.fft_conv2d_input_grad(gy, w, pad, basis, False, "fbfft"), (gy, w)),
        (lambda gy, x: fl.fft_conv2d_weight_grad(gy, x, pad, basis, False, "fbfft"), (gy, x)),
    ]
    for fn, args in checks:
        assert gradcheck(fn, args)
        assert gradgradcheck(fn, args)


class RecordOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the fastlayers ops that run, with their arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "fastlayers":
            self.calls.append((func._opname, args))
        return func(*args, **(kwargs or {}))


def test_backward_uses_the_same_backend():
    case = Case(2, 3, 4, 6, 5, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float64, requires_grad=True)
    with RecordOps() as rec:
        y = fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "fbfft")
        gx, gw = torch.autograd.grad(y, (x, w), gy, create_graph=True)
        torch.autograd.grad((gx.sum() + gw.sum()), (x, w, gy))
    names = [name for name, _ in rec.calls]
    assert set(names) == {"fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad"}
    assert len(names) >= 5
    assert all(args[-1] == "fbfft" for _, args in rec.calls), rec.calls


def test_module_runs_fbfft_labels():
    ref = torch.nn.Conv2d(3, 4, 3, padding=1).double()
    m = fastlayers.Conv2d(3, 4, 3, padding=1).double()
    m.load_state_dict(ref.state_dict())
    m.force_algorithms(forward="fbfft:16x16", input_grad="fbfft:16x16", weight_grad="fbfft:16x16")
    x = torch.randn(2, 3, 9, 11, dtype=torch.float64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    with RecordOps() as rec:
        y = m(x)
        y.backward(torch.ones_like(y))
    yr = ref(xr)
    yr.backward(torch.ones_like(yr))
    assert {name for name, _ in rec.calls} == {"fft_conv2d", "fft_conv2d_input_grad",
                                               "fft_conv2d_weight_grad"}
    assert all(args[-1] == "fbfft" for _, args in rec.calls)
    assert rel_err(y, yr) <= 1e-10 and rel_err(x.grad, xr.grad) <= 1e-10
    assert rel_err(m.weight.grad, ref.weight.grad) <= 1e-10


def test_opcheck_fbfft():
    case = Case(2, 2, 3, 5, 4, 3, 2, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float32)
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), gy.requires_grad_()
    pad, basis = list(case.padding), list(case.basis)
    torch.library.opcheck(fl.fft_conv2d.default, (x, w, b, pad, basis, False, "fbfft"))
    torch.library.opcheck(fl.fft_conv2d_input_grad.default, (gy, w, pad, basis, False, "fbfft"))
    torch.library.opcheck(fl.fft_conv2d_weight_grad.default, (gy, x, pad, basis, False, "fbfft"))


def test_workspace_bytes_take_the_backend():
    from fastlayers import _C
    args = (0, 8, 16, 32, 14, 14, 3, 3, 1, 1, 16, 16, 4)
    cufft = _C.fft_conv2d_workspace_bytes(*args)
    assert cufft == _C.fft_conv2d_workspace_bytes(*args, "cufft")
    fbfft = _C.fft_conv2d_workspace_bytes(*args, backend="fbfft")
    assert 0 < fbfft < cufft  # fbfft needs no padded copies or transposes
    with pytest.raises(RuntimeError, match="`backend`"):
        _C.fft_conv2d_workspace_bytes(*args, "vkfft")


def test_fbfft_workspace_stages_one_image_per_block_bases():
    """128 x 128 and non-square bases go through a row-major staging buffer (the largest of the
    three spectra) and a transpose; square bases up to 64 write the frequency-major layout; with
    at most 4 input channels every basis keeps row-major spectra and needs no staging. Square
    bases from 4 to 32 on the GEMM path add the GEMMs' operand pointers (3 per frequency: the
    GEMMs skip the conjugate rows of the DC and Nyquist columns)."""
    from fastlayers import _C

    def align(v):
        return (v + 255) // 256 * 256

    S, K = 8, 32
    for basis, C, staged, pointers in (
            ((128, 128), 16, True, False), ((64, 64), 16, False, False),
            ((32, 64), 16, True, False), ((128, 128), 4, False, False),
            ((32, 64), 3, False, False), ((128, 128), 5, True, False),
            ((16, 16), 2, False, False), ((32, 32), 16, False, True),
            ((16, 16), 5, False, True), ((4, 4), 8, False, True), ((2, 2), 8, False, False)):
        args = (0, S, C, K, 30, 30, 3, 3, 1, 1, *basis, 4)
        F = basis[0] * (basis[1] // 2 + 1)
        spectra = [n * F * 8 for n in (S * C, K * C, S * K)]
        expected = sum(align(b) for b in spectra) + (align(max(spectra)) if staged else 0)
        expected += align(3 * F * 8) if pointers else 0
        assert _C.fft_conv2d_workspace_bytes(*args, backend="fbfft") == expected, (basis, C)


# --- errors --------------------------------------------------------------------------------------


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


BAD = {
    "backend": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3, 3), None, [0, 0], [8, 8], False,
                                      "vkfft"),
                r"fft_conv2d: `backend` must be \"cufft\" or \"fbfft\", got \"vkfft\""),
    "backend-case": (lambda: fl.fft_conv2d_input_grad(_t(1, 2, 3, 3), _t(2, 3, 3, 3), [0, 0],
                                                      [8, 8], False, "FBFFT"),
                     r"fft_conv2d_input_grad: `backend` must be \"cufft\" or \"fbfft\""),
    "backend-weight_grad": (lambda: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3), _t(2, 3, 5, 5),
                                                              [0, 0], [8, 8], False, ""),
                            r"fft_conv2d_weight_grad: `backend` must be"),
    "fbfft-basis-not-pow2": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3, 3), None, [1, 1],
                                                   [12, 16], False, "fbfft"),
                             r"`basis` \[12, 16\] is not supported by `backend` \"fbfft\""),
    "fbfft-basis-too-large": (lambda: fl.fft_conv2d_input_grad(_t(1, 2, 70, 3), _t(2, 3, 3, 3),
                                                               [0, 0], [256, 8], False, "fbfft"),
                              r"`basis` \[256, 8\] is not supported by `backend` \"fbfft\".*"
                              r"from 2 to 128"),
    "fbfft-basis-weight_grad": (lambda: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3),
                                                                  _t(2, 3, 5, 5), [0, 0], [5, 8],
                                                                  False, "fbfft"),
                                r"`basis` \[5, 8\] is not supported by `backend` \"fbfft\""),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_backend_arguments_name_the_argument(name):
    call, message = BAD[name]
    with pytest.raises(RuntimeError, match=message):
        call()


def test_fbfft_takes_float64_on_cpu():
    case = Case(1, 2, 2, 4, 4, 2, 2, 0, 0, (4, 4))
    x, w, b, gy = make_tensors(case, torch.float64)
    y = fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "fbfft")
    assert y.dtype == torch.float64 and rel_err(y, F.conv2d(x, w, b)) <= 1e-12
    assert pow2_basis(case) == (4, 4)
