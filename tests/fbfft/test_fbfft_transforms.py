"""The four fbfft transforms on every device against torch.fft: windows, clipping, layouts,
batches, dtypes, gradients, opcheck and argument checks (fbfft_samples.check_transform: the
tolerance rule of conv_samples)."""
import functools

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from fastlayers import fbfft
from fbfft_samples import (SIZES_1D, SIZES_2D, check_transform, torch_irfft, torch_irfft2,
                           torch_rfft, torch_rfft2)

DTYPES = [torch.float32, torch.float64]


def real(*shape, dtype=torch.float32, device="cpu"):
    """Drawn in float32 on the CPU: every device sees the same values."""
    return torch.randn(*shape).to(device=device, dtype=dtype)


def spectrum(*shape, dtype=torch.float32, device="cpu"):
    """Not Hermitian: the edge bins are read as a C2R transform reads them."""
    ctype = torch.complex128 if dtype == torch.float64 else torch.complex64
    return torch.randn(*shape, dtype=torch.complex64).to(device=device, dtype=ctype)


def skip_float64_on_cuda(device, dtype):
    if device == "cuda" and dtype == torch.float64:
        pytest.skip("fbfft computes in float32 on CUDA: float64 is refused "
                    "(test_cuda_rejects_float64)")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SIZES_1D)
@pytest.mark.parametrize("offset,length", [(0, None), (-3, 5), (2, None), (0, 1)])
def test_rfft_matches_torch(device, dtype, n, offset, length):
    skip_float64_on_cuda(device, dtype)
    x = real(7, 3, n if length is None else length, dtype=dtype, device=device)
    got = fbfft.rfft(x, n, offset)
    assert got.shape == (7, 3, n // 2 + 1) and got.device == x.device
    check_transform(got, torch_rfft, x, n, offset, what="rfft n=%d offset=%d" % (n, offset))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SIZES_1D)
@pytest.mark.parametrize("out_size,offset,normalized",
                         [(None, 0, True), (3, 1, True), (5, -2, False)])
def test_irfft_matches_torch(device, dtype, n, out_size, offset, normalized):
    skip_float64_on_cuda(device, dtype)
    out = n if out_size is None else min(out_size, n)
    X = spectrum(4, n // 2 + 1, dtype=dtype, device=device)
    got = fbfft.irfft(X, n, out, offset, normalized)
    assert got.shape == (4, out)
    check_transform(got, torch_irfft, X, n, out, offset, normalized,
                    what="irfft n=%d out=%d offset=%d" % (n, out, offset))


def bins_2d(size, transposed):
    return (size[1] // 2 + 1, size[0]) if transposed else (size[0], size[1] // 2 + 1)


def every_2d_window(test):
    """Every 2-D size, layout and window offset, float32 and float64 (the latter CPU only)."""
    @functools.wraps(test)
    def run(device, dtype, size, transposed, offset):
        skip_float64_on_cuda(device, dtype)
        test(device, dtype, size, transposed, offset)
    for name, values, ids in (("offset", [(0, 0), (-1, -2), (2, 1)], str),
                              ("transposed", [False, True], None), ("size", SIZES_2D, str),
                              ("dtype", DTYPES, str)):
        run = pytest.mark.parametrize(name, values, ids=ids)(run)
    return run


@every_2d_window
def test_rfft2_matches_torch(device, dtype, size, transposed, offset):
    x = real(2, 3, max(1, size[0] - 1), size[1] + 1, dtype=dtype, device=device)
    got = fbfft.rfft2(x, size, offset, transposed)
    assert got.shape == (2, 3, *bins_2d(size, transposed)) and got.is_contiguous()
    check_transform(got, torch_rfft2, x, size, offset, transposed,
                    what="rfft2 %s offset=%s transposed=%s" % (size, offset, transposed))


@every_2d_window
def test_irfft2_matches_torch(device, dtype, size, transposed, offset):
    X = spectrum(3, 2, *bins_2d(size, transposed), dtype=dtype, device=device)
    out = (max(1, size[0] - 2), size[1])
    for normalized in (True, False):
        got = fbfft.irfft2(X, size, out, offset, transposed, normalized)
        assert got.shape == (3, 2, *out)
        check_transform(got, torch_irfft2, X, size, out, offset, transposed, normalized,
                        what="irfft2 %s offset=%s transposed=%s normalized=%s" % (
                            size, offset, transposed, normalized))


def _round_trip(x, size, transposed):
    h, w = x.shape[-2:]
    X = torch_rfft2(x, size, (-1, 0), transposed)  # one row of implicit padding in front
    return torch_irfft2(X, size, (h, w), (1, 0), transposed)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", SIZES_2D, ids=str)
@pytest.mark.parametrize("transposed", [False, True])
def test_round_trip_clips_the_valid_part(device, dtype, size, transposed):
    skip_float64_on_cuda(device, dtype)
    x = real(5, max(1, size[0] - 3), max(1, size[1] - 1), dtype=dtype, device=device)
    X = fbfft.rfft2(x, size, (-1, 0), transposed)
    y = fbfft.irfft2(X, size, x.shape[-2:], (1, 0), transposed)
    check_transform(y, _round_trip, x, size, transposed, what="round trip %s" % (size,))


@pytest.mark.parametrize("batch", [(), (1,), (4096,), (3, 5, 7)], ids=str)
def test_batch_shapes(device, batch):
    x = real(*batch, 13, 13, device=device)
    got = fbfft.rfft2(x, (16, 16), (-1, -2))
    assert got.shape == (*batch, 16, 9) and got.dtype == torch.complex64
    check_transform(got, torch_rfft2, x, (16, 16), (-1, -2), what="rfft2 batch %s" % (batch,))


# (dims, n, offset, transposed): the CPU case and the CUDA ones of the half-storage loads.
HALF_CASES = [(2, 32, 0, False), (2, 32, -2, True), (2, 128, -2, True), (1, 64, -1, False),
              (1, 256, -1, False)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dims,n,offset,transposed", HALF_CASES, ids=str)
def test_half_storage_is_computed_in_float(device, dtype, dims, n, offset, transposed):
    if dims == 2:
        x = real(64, n - 5, n - 5, dtype=dtype, device=device)
        got = fbfft.rfft2(x, (n, n), (offset, offset), transposed)
        check_transform(got, torch_rfft2, x, (n, n), (offset, offset), transposed,
                        what="rfft2 %d %s" % (n, dtype))
    else:
        x = real(300, n - 3, dtype=dtype, device=device)
        got = fbfft.rfft(x, n, offset)
        check_transform(got, torch_rfft, x, n, offset, what="rfft %d %s" % (n, dtype))
    assert got.dtype == torch.complex64


def test_window_outside_the_input_is_zero(device):
    x = real(2, 4, 4, device=device)
    assert fbfft.rfft2(x, (8, 8), (10, 0)).abs().max() == 0
    assert fbfft.irfft2(fbfft.rfft2(x, (8, 8)), (8, 8), (3, 3), (20, 0)).abs().max() == 0
    assert fbfft.rfft(x, 8, -8).abs().max() == 0


# --- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("offset", [(0, 0), (-1, 2), (2, -3)], ids=str)
def test_gradcheck_2d(transposed, offset):
    """float64, so the CPU only (CUDA computes in float32: test_gradients_match_torch)."""
    x = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda t: fbfft.rfft2(t, (8, 8), offset, transposed), (x,))
    assert gradgradcheck(lambda t: fbfft.rfft2(t, (8, 8), offset, transposed), (x,))
    shape = (2, 5, 8) if transposed else (2, 8, 5)
    X = torch.randn(*shape, dtype=torch.complex128, requires_grad=True)
    for normalized in (True, False):
        fn = lambda t: fbfft.irfft2(t, (8, 8), (6, 5), offset, transposed, normalized)  # noqa: E731
        assert gradcheck(fn, (X,))
        assert gradgradcheck(fn, (X,))


@pytest.mark.parametrize("offset", [0, -2, 3])
def test_gradcheck_1d(offset):
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda t: fbfft.rfft(t, 8, offset), (x,))
    assert gradgradcheck(lambda t: fbfft.rfft(t, 8, offset), (x,))
    X = torch.randn(3, 5, dtype=torch.complex128, requires_grad=True)
    for normalized in (True, False):
        assert gradcheck(lambda t: fbfft.irfft(t, 8, 7, offset, normalized), (X,))
        assert gradgradcheck(lambda t: fbfft.irfft(t, 8, 7, offset, normalized), (X,))


# Forward-mode AD: each transform is linear, so a result's tangent is the transform of the
# input's tangent. (transform, its torch.fft reference, a real or complex input's shape)
JVP_CASES = {
    "rfft": (lambda t: fbfft.rfft(t, 8, -1), lambda t: torch_rfft(t, 8, -1), (3, 6), False),
    "irfft": (lambda t: fbfft.irfft(t, 8, 7, 1), lambda t: torch_irfft(t, 8, 7, 1), (3, 5), True),
    "rfft2": (lambda t: fbfft.rfft2(t, (8, 8), (-1, 2), True),
              lambda t: torch_rfft2(t, (8, 8), (-1, 2), True), (2, 5, 6), False),
    "irfft2": (lambda t: fbfft.irfft2(t, (8, 8), (6, 5), (1, 0), False, False),
               lambda t: torch_irfft2(t, (8, 8), (6, 5), (1, 0), False, False), (2, 8, 5), True),
}


@pytest.mark.parametrize("how", ["forward_ad", "func.jvp", "forward_ad-with-grad"])
@pytest.mark.parametrize("name", JVP_CASES)
def test_forward_mode_ad(device, name, how):
    import torch.autograd.forward_ad as fwAD
    ours, ref, shape, complex_in = JVP_CASES[name]
    make = spectrum if complex_in else real
    x, t = make(*shape, device=device), make(*shape, device=device)
    if how == "func.jvp":
        y, tangent = torch.func.jvp(ours, (x,), (t,))
    else:
        with fwAD.dual_level():
            dual = fwAD.make_dual(x.requires_grad_(how.endswith("grad")), t)
            y, tangent = fwAD.unpack_dual(ours(dual))
    assert tangent is not None, "no tangent"
    check_transform(y, ref, x, what="%s primal" % name)
    check_transform(tangent, ref, t, what="%s tangent" % name)


def _pipeline_2d(rfft2, irfft2, x):
    X = rfft2(x, (8, 8), (-1, 1), True)
    return irfft2(X * X.abs(), (8, 8), (5, 6), (1, 0), True).square().sum()


def _pipeline_1d(rfft, irfft, x):
    X = rfft(x, 16, -2)
    return irfft(X * X.abs(), 16, 11, 1, False).square().sum()


@pytest.mark.parametrize("dims", [1, 2])
def test_gradients_match_torch(device, dims):
    """The backward of both transforms (each the other's adjoint) through a chain, in float32 on
    every device, against the same chain in torch.fft: float64 for the value, float32 for
    torch's own error. CUDA has no float64 fbfft, so this is its gradient check."""
    x = real(4, 6, 7) if dims == 2 else real(4, 13)
    ours = (lambda t: _pipeline_2d(fbfft.rfft2, fbfft.irfft2, t)) if dims == 2 else (
        lambda t: _pipeline_1d(fbfft.rfft, fbfft.irfft, t))
    ref = (lambda t: _pipeline_2d(torch_rfft2, torch_irfft2, t)) if dims == 2 else (
        lambda t: _pipeline_1d(torch_rfft, torch_irfft, t))

    def grad(fn, t):
        t = t.detach().requires_grad_()
        return torch.autograd.grad(fn(t), t)[0]

    got = grad(ours, x.to(device))
    assert got.dtype == torch.float32 and got.device.type == device
    check_transform(got, lambda t: grad(ref, t), x, what="%d-D gradient" % dims)


def test_gradient_of_half_input_has_its_dtype(device):
    x = real(2, 6, 6, dtype=torch.float16, device=device).requires_grad_()
    fbfft.rfft2(x, (8, 8)).abs().sum().backward()
    assert x.grad.dtype == torch.float16


# --- opcheck -------------------------------------------------------------------------------------

OPCHECK_CASES = [
    ("fbfft_rfft", lambda g: (torch.randn(3, 6, requires_grad=g), 8, -1)),
    ("fbfft_irfft", lambda g: (torch.randn(3, 5, dtype=torch.complex64, requires_grad=g), 8, 6,
                               1, True)),
    ("fbfft_rfft2", lambda g: (torch.randn(2, 5, 6, requires_grad=g), [8, 8], [-1, 1], True)),
    ("fbfft_irfft2", lambda g: (torch.randn(2, 8, 5, dtype=torch.complex64, requires_grad=g),
                                [8, 8], [5, 6], [1, 0], False, False)),
]
# On CUDA, as before this restructuring: the schema, fake-tensor and AOT checks.
CUDA_OPCHECK_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_static")


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name,make", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(device, name, make, grad):
    args = tuple(a.to(device).detach().requires_grad_(a.requires_grad)
                 if isinstance(a, torch.Tensor) else a for a in make(grad))
    utils = {} if device == "cpu" else {"test_utils": CUDA_OPCHECK_UTILS}
    torch.library.opcheck(getattr(torch.ops.fastlayers, name).default, args, **utils)


# --- argument checks -----------------------------------------------------------------------------

BAD_ARGUMENTS = {
    "n-not-pow2": (lambda d: fbfft.rfft(real(3, 5, device=d), 12), "`n` must be a power of two"),
    "n-too-large": (lambda d: fbfft.rfft(real(3, 5, device=d), 512),
                    "`n` must be a power of two from 2 to 256"),
    "rfft-complex": (lambda d: fbfft.rfft(spectrum(3, 5, device=d), 8), "`input` must be real"),
    "irfft-real": (lambda d: fbfft.irfft(real(3, 5, device=d), 8, 8), "`input` must be complex"),
    "irfft-bins": (lambda d: fbfft.irfft(spectrum(3, 4, device=d), 8, 8),
                   "`input` must have n/2\\+1"),
    "out-size": (lambda d: fbfft.irfft(spectrum(3, 5, device=d), 8, 0),
                 "`out_size` must be >= 1"),
    "size2d-too-large": (lambda d: fbfft.rfft2(real(3, 5, 5, device=d), (256, 256)),
                         "`size` must be a power of two from 2 to 128"),
    "rank": (lambda d: fbfft.rfft2(real(5, device=d), (8, 8)), "at least 2 dimensions"),
    "irfft2-layout": (lambda d: fbfft.irfft2(spectrum(2, 8, 5, device=d), (8, 8), (4, 4), 0,
                                             True),
                      "`input` must end in"),
    "irfft2-out-size-huge": (lambda d: fbfft.irfft2(spectrum(2, 8, 5, device=d), (8, 8),
                                                    (2 ** 31, 2 ** 31)),
                             "`out_size` .* is too large"),
    "irfft-out-size-huge": (lambda d: fbfft.irfft(spectrum(2, 5, device=d), 8, 2 ** 40),
                            "`out_size` .* is too large"),
}


@pytest.mark.parametrize("name", BAD_ARGUMENTS)
def test_bad_arguments_name_the_argument(device, name):
    call, match = BAD_ARGUMENTS[name]
    with pytest.raises(RuntimeError, match=match):
        call(device)


# The Python wrappers' pairs: an int or two ints, nothing else read as one.
BAD_PAIRS = {
    "three-values": (lambda x, X: fbfft.rfft2(x, (16, 16, 16)), "`size`"),
    "float-in-pair": (lambda x, X: fbfft.rfft2(x, (16.7, 16)), "`size`"),
    "float": (lambda x, X: fbfft.rfft2(x, 16.0), "`size`"),
    "string-offset": (lambda x, X: fbfft.rfft2(x, 16, "same"), "`offset`"),
    "out-size-none": (lambda x, X: fbfft.irfft2(X, 16, None), "`out_size`"),
}


@pytest.mark.parametrize("name", BAD_PAIRS)
def test_bad_pairs_name_the_argument(name):
    call, arg = BAD_PAIRS[name]
    with pytest.raises(ValueError, match=arg + " must be an int or a pair of ints"):
        call(real(4, 13, 13), spectrum(4, 16, 9))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("batch", [(0,), (2, 0)], ids=str)
def test_empty_batch(device, batch, dtype):
    # the shapes and dtypes of a batch of one, and gradients of the same
    calls = {"rfft2": lambda x, X: fbfft.rfft2(x, 16),
             "rfft2-transposed": lambda x, X: fbfft.rfft2(x, 16, transposed=True),
             "irfft2": lambda x, X: fbfft.irfft2(X, 16, (13, 12)),
             "rfft": lambda x, X: fbfft.rfft(x, 16),
             "irfft": lambda x, X: fbfft.irfft(X, 16, 7)}
    for name, call in calls.items():
        one = call(real(1, 13, 13, dtype=dtype, device=device), spectrum(1, 16, 9, device=device))
        x = real(*batch, 13, 13, dtype=dtype, device=device).requires_grad_()
        X = spectrum(*batch, 16, 9, device=device).requires_grad_()
        got = call(x, X)
        assert got.shape == (*batch, *one.shape[1:]) and got.dtype == one.dtype, name
        gx, gX = torch.autograd.grad(got.abs().sum(), (x, X), allow_unused=True)
        for g, t in ((gx, x), (gX, X)):
            assert g is None or (g.shape == t.shape and g.dtype == t.dtype), name


@pytest.mark.parametrize("shape", [(3, 0), (3, 0, 4), (3, 4, 0)], ids=str)
def test_empty_signal_has_an_empty_gradient(device, shape):
    # nothing is read from an input with no values along a transformed dimension: its spectrum is
    # zeros and its gradient an empty tensor of its shape (irfft takes no out_size of 0)
    x = torch.zeros(shape, device=device).requires_grad_()
    X = fbfft.rfft(x, 16) if len(shape) == 2 else fbfft.rfft2(x, 16)
    assert X.abs().max().item() == 0
    (gx,) = torch.autograd.grad(X.abs().sum() + X.real.sum(), x)
    assert gx.shape == x.shape and gx.dtype == x.dtype


def test_fbfft_size_limits_come_from_the_library():
    from fastlayers import _C
    assert (_C.FBFFT_MAX_1D, _C.FBFFT_MAX_2D) == (SIZES_1D[-1], SIZES_2D[-1][0])


@pytest.mark.gpu
def test_cuda_rejects_float64():
    with pytest.raises(RuntimeError, match="`input` is Double"):
        fbfft.rfft2(torch.randn(2, 8, 8, dtype=torch.float64, device="cuda"), (8, 8))


def test_kernel_hooks_take_cuda_tensors_only():
    """_C.testing's fbfft entry points run the CUDA kernels; a CPU tensor is a clear error."""
    from fastlayers import _C
    x, X = real(2, 8, 8), spectrum(2, 8, 5)
    for call in (lambda: _C.testing.fbfft_rfft(x, 8),
                 lambda: _C.testing.fbfft_irfft(X, 8, 8),
                 lambda: _C.testing.fbfft_rfft2(x, (8, 8)),
                 lambda: _C.testing.fbfft_irfft2(X, (8, 8), (8, 8))):
        with pytest.raises(RuntimeError, match="(?i)cuda"):
            call()
