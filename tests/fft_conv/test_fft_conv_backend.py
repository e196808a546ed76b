"""The `backend` argument of the FFT-convolution ops ("cufft", "fbfft"): defaults, plumbing
through the wrappers and autograd, workspace sizes, and the CUDA GEMMs' conjugate-row skip."""
import pytest
import torch
import torch.nn.functional as F

from fastlayers import _C, ops
from conv_samples import (DTYPES, PASSES, Case, check_passes, fft_passes, make_tensors, rel_err)

fl = torch.ops.fastlayers


def test_default_backend_is_cufft(device):
    case = Case(2, 3, 4, 9, 6, 3, 3, 1, 0, (11, 7))  # not a power of two: cuFFT only
    x, w, b, gy = make_tensors(case, torch.float32, device)
    got = (fl.fft_conv2d(x, w, b, case.padding, case.basis),
           fl.fft_conv2d_input_grad(gy, w, case.padding, case.basis),
           fl.fft_conv2d_weight_grad(gy, x, case.padding, case.basis))
    for name, g, want in zip(PASSES, got, fft_passes(x, w, b, gy, case.padding, case.basis)):
        torch.testing.assert_close(g, want, rtol=0, atol=0, msg=name)


class RecordOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the fastlayers ops that run, with their arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "fastlayers":
            self.calls.append((func._opname, args))
        return func(*args, **(kwargs or {}))


def backend_of(args):
    """The `backend` of a recorded call (trailing default arguments are not recorded)."""
    return next(a for a in args if isinstance(a, str))


def basis_of(name, args):
    return list(args[4] if name == "fft_conv2d" else args[3])


def test_python_wrappers_take_the_backend(device):
    case = Case(2, 3, 4, 9, 11, 3, 5, 1, 2, (16, 16))  # fbfft's default basis: the next power of 2
    x, w, b, gy = make_tensors(case, torch.float32, device)
    with RecordOps() as rec:
        got = (ops.fft_conv2d(x, w, b, padding=(1, 2), backend="fbfft"),
               ops.fft_conv2d_input_grad(gy, w, padding=(1, 2), backend="fbfft"),
               ops.fft_conv2d_weight_grad(gy, x, padding=(1, 2), backend="fbfft"),
               ops.conv2d(x, w, b, padding="same", backend="fbfft"),
               ops.conv2d(x, w, b, padding="same", backend="fbfft", basis=32))
    assert [(name, basis_of(name, args), backend_of(args)) for name, args in rec.calls] == [
        ("fft_conv2d", [16, 16], "fbfft"), ("fft_conv2d_input_grad", [16, 16], "fbfft"),
        ("fft_conv2d_weight_grad", [16, 16], "fbfft"), ("fft_conv2d", [16, 16], "fbfft"),
        ("fft_conv2d", [32, 32], "fbfft")]
    assert ops.BACKENDS == ("cufft", "fbfft")
    check_passes(got[:3], x, w, b, gy, case.padding, "float32", what="wrappers, fbfft")
    for y in got[3:]:  # padding "same" of a 3 x 5 kernel is (1, 2)
        check_passes((y, None, None), x, w, b, gy, case.padding, "float32", what="conv2d fbfft")


def test_backward_uses_the_same_backend():
    """The autograd formulas, first and second order, keep the forward's backend."""
    case = Case(2, 3, 4, 6, 5, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float64, requires_grad=True)
    with RecordOps() as rec:
        y = fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "fbfft")
        gx, gw = torch.autograd.grad(y, (x, w), gy, create_graph=True)
        torch.autograd.grad((gx.sum() + gw.sum()), (x, w, gy))
    names = [name for name, _ in rec.calls]
    assert set(names) == {"fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad"}
    assert len(names) >= 5
    assert all(backend_of(args) == "fbfft" for _, args in rec.calls), rec.calls


def test_fbfft_takes_float64_on_cpu():
    case = Case(1, 2, 2, 4, 4, 2, 2, 0, 0, (4, 4))
    x, w, b, gy = make_tensors(case, torch.float64)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    check_passes(ours, x, w, b, gy, case.padding, "float64", what="fbfft on the CPU")


@pytest.mark.gpu
def test_fbfft_rejects_float64_on_cuda():
    case = Case(1, 2, 2, 6, 6, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float64, "cuda")
    calls = [lambda: fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "fbfft"),
             lambda: fl.fft_conv2d_input_grad(gy, w, case.padding, case.basis, False, "fbfft"),
             lambda: fl.fft_conv2d_weight_grad(gy, x, case.padding, case.basis, False, "fbfft")]
    for call in calls:
        with pytest.raises(RuntimeError, match=r"`backend` \"fbfft\".*float64 runs with backend "
                                               r"\"cufft\""):
            call()


def test_workspace_bytes_take_the_backend():
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
        nf = basis[0] * (basis[1] // 2 + 1)
        spectra = [n * nf * 8 for n in (S * C, K * C, S * K)]
        expected = sum(align(b) for b in spectra) + (align(max(spectra)) if staged else 0)
        expected += align(3 * nf * 8) if pointers else 0
        assert _C.fft_conv2d_workspace_bytes(*args, backend="fbfft") == expected, (basis, C)


# --- the GEMMs' conjugate-row skip (CUDA) ----------------------------------------------------------

# Square even bases from 4 to 32 with GEMM products (more than 4 input channels on fbfft): the
# GEMMs may skip the conjugate rows of the DC and Nyquist columns and fill them in afterwards
# (cuda/fft_conv/layout.h). Problems this small fall under its time rule, so mode 2 forces the
# skip; mode 0 runs every frequency. Output counts odd and even (the fill's single and paired
# moves); basis 20 is cuFFT's only.
SKIP_CASES = [Case(3, 5, 7, 14, 11, 5, 3, 1, 2, (16, 16)),
              Case(3, 5, 3, 4, 4, 3, 3, 0, 0, (4, 4)),
              Case(2, 8, 5, 6, 7, 3, 3, 1, 0, (8, 8)),
              Case(2, 6, 3, 27, 30, 5, 5, 2, 1, (32, 32)),
              Case(2, 6, 5, 18, 17, 3, 3, 1, 1, (20, 20))]


def conjugate_skip_passes(x, w, b, gy, case, precision, backend, mode):
    T = _C.testing
    pad, basis, tf32 = list(case.padding), list(case.basis), precision == "tf32"
    return tuple(T.fft_conv2d_pass(i, a, bb, bias, pad, basis, tf32, backend, [0, 0],
                                   conjugate_skip=mode)
                 for i, (a, bb, bias) in enumerate(((x, w, b), (gy, w, None), (gy, x, None))))


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float32", "tf32", "float64"])
@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("case", SKIP_CASES, ids=str)
def test_conjugate_skip_matches_every_frequency(case, backend, precision):
    if backend == "fbfft" and (case.basis[0] & (case.basis[0] - 1) or precision == "float64"):
        pytest.skip("fbfft takes power-of-two bases and float32 arithmetic")
    x, w, b, gy = make_tensors(case, DTYPES[precision], "cuda")
    runs = {mode: conjugate_skip_passes(x, w, b, gy, case, precision, backend, mode)
            for mode in (0, 2)}
    for mode, ours in runs.items():
        check_passes(ours, x, w, b, gy, case.padding, precision,
                     what="%s %s conjugate_skip=%d" % (case, backend, mode))
    if precision == "float32":  # the same products, summed by other GEMM kernels
        for name, full, skipped in zip(PASSES, runs[0], runs[2]):
            assert rel_err(skipped, full.double()) <= 1e-5, name
    default = fft_passes(x, w, b, gy, case.padding, case.basis, precision == "tf32", backend)
    for name, d, one in zip(PASSES, default,
                            conjugate_skip_passes(x, w, b, gy, case, precision, backend, 1)):
        torch.testing.assert_close(one, d, rtol=0, atol=0, msg="mode 1 is the ops' " + name)


@pytest.mark.gpu
def test_conjugate_skip_mode_checked():
    case = SKIP_CASES[0]
    x, w, b, gy = make_tensors(case, torch.float32, "cuda")
    with pytest.raises(RuntimeError, match="`conjugate_skip`"):
        _C.testing.fft_conv2d_pass(0, x, w, b, list(case.padding), list(case.basis), False,
                                   "cufft", [0, 0], conjugate_skip=3)
