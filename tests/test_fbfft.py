"""fbfft transforms (CPU kernels) against torch.fft: windows, clipping, layouts, gradients."""
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from fastlayers import fbfft

SIZES_1D = [2, 4, 8, 16, 32, 64, 128, 256]
SIZES_2D = [(2, 2), (4, 8), (8, 8), (16, 16), (32, 16), (32, 32), (64, 64), (128, 128)]


def window_ref(x, offset, n):
    """x[..., i + offset] for i < n over the last len(n) dims, zeros outside."""
    out = torch.zeros(*x.shape[:-len(n)], *n, dtype=x.dtype)
    src = [slice(None)] * (x.dim() - len(n))
    dst = list(src)
    for o, m, length in zip(offset, n, x.shape[-len(n):]):
        lo, hi = max(0, o), min(length, o + m)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - o, hi - o))
    out[tuple(dst)] = x[tuple(src)]
    return out


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("n", SIZES_1D)
@pytest.mark.parametrize("offset,length", [(0, None), (-3, 5), (2, None), (0, 1)])
def test_rfft_matches_torch(n, offset, length):
    w = n if length is None else length
    x = torch.randn(7, 3, w, dtype=torch.float64)
    got = fbfft.rfft(x, n, offset)
    ref = torch.fft.rfft(window_ref(x, (offset,), (n,)), n)
    assert got.shape == (7, 3, n // 2 + 1) and got.dtype == torch.complex128
    assert rel(got, ref) <= 1e-12


@pytest.mark.parametrize("n", SIZES_1D)
@pytest.mark.parametrize("out_size,offset,normalized", [(None, 0, True), (3, 1, True), (5, -2, False)])
def test_irfft_matches_torch(n, out_size, offset, normalized):
    out = n if out_size is None else min(out_size, n)
    X = torch.fft.rfft(torch.randn(4, n, dtype=torch.float64))
    got = fbfft.irfft(X, n, out, offset, normalized)
    full = torch.fft.irfft(X, n, norm="backward" if normalized else "forward")
    assert got.shape == (4, out)
    assert rel(got, window_ref(full, (offset,), (out,))) <= 1e-12


@pytest.mark.parametrize("size", SIZES_2D, ids=str)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("offset", [(0, 0), (-1, -2), (2, 1)], ids=str)
def test_rfft2_matches_torch(size, transposed, offset):
    x = torch.randn(2, 3, max(1, size[0] - 1), size[1] + 1, dtype=torch.float64)
    got = fbfft.rfft2(x, size, offset, transposed)
    ref = torch.fft.rfft2(window_ref(x, offset, size))
    if transposed:
        ref = ref.transpose(-1, -2)
    assert got.shape == ref.shape and got.is_contiguous()
    assert rel(got, ref) <= 1e-12


@pytest.mark.parametrize("size", SIZES_2D, ids=str)
@pytest.mark.parametrize("transposed", [False, True])
def test_round_trip_clips_the_valid_part(size, transposed):
    h, w = max(1, size[0] - 3), max(1, size[1] - 1)
    x = torch.randn(5, h, w, dtype=torch.float64)
    X = fbfft.rfft2(x, size, (-1, 0), transposed)  # one row of implicit padding in front
    y = fbfft.irfft2(X, size, (h, w), (1, 0), transposed)
    assert rel(y, x) <= 1e-12


@pytest.mark.parametrize("batch", [(), (1,), (4096,), (3, 5, 7)], ids=str)
def test_batch_shapes(batch):
    x = torch.randn(*batch, 13, 13)
    got = fbfft.rfft2(x, (16, 16), (-1, -2))
    ref = torch.fft.rfft2(window_ref(x.double(), (-1, -2), (16, 16)))
    assert got.shape == (*batch, 16, 9) and got.dtype == torch.complex64
    assert rel(got.to(torch.complex128), ref) <= 1e-5


def test_half_storage_is_computed_in_float():
    x = torch.randn(4, 27, 27).half()
    got = fbfft.rfft2(x, (32, 32))
    assert got.dtype == torch.complex64
    assert rel(got.to(torch.complex128), torch.fft.rfft2(window_ref(x.double(), (0, 0), (32, 32)))) <= 1e-5


def test_window_outside_the_input_is_zero():
    x = torch.randn(2, 4, 4)
    assert fbfft.rfft2(x, (8, 8), (10, 0)).abs().max() == 0
    assert fbfft.irfft2(fbfft.rfft2(x, (8, 8)), (8, 8), (3, 3), (20, 0)).abs().max() == 0


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("offset", [(0, 0), (-1, 2), (2, -3)], ids=str)
def test_gradients_2d(transposed, offset):
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
def test_gradients_1d(offset):
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda t: fbfft.rfft(t, 8, offset), (x,))
    X = torch.randn(3, 5, dtype=torch.complex128, requires_grad=True)
    for normalized in (True, False):
        assert gradcheck(lambda t: fbfft.irfft(t, 8, 7, offset, normalized), (X,))


def test_gradient_of_half_input_has_its_dtype():
    x = torch.randn(2, 6, 6).half().requires_grad_()
    fbfft.rfft2(x, (8, 8)).abs().sum().backward()
    assert x.grad.dtype == torch.float16


OPCHECK_CASES = [
    ("fbfft_rfft", lambda g: (torch.randn(3, 6, requires_grad=g), 8, -1)),
    ("fbfft_irfft", lambda g: (torch.randn(3, 5, dtype=torch.complex64, requires_grad=g), 8, 6, 1, True)),
    ("fbfft_rfft2", lambda g: (torch.randn(2, 5, 6, requires_grad=g), [8, 8], [-1, 1], True)),
    ("fbfft_irfft2", lambda g: (torch.randn(2, 8, 5, dtype=torch.complex64, requires_grad=g),
                                [8, 8], [5, 6], [1, 0], False, False)),
]


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name,make", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(name, make, grad):
    torch.library.opcheck(getattr(torch.ops.fastlayers, name).default, make(grad))


@pytest.mark.parametrize("call,match", [
    (lambda: fbfft.rfft(torch.randn(3, 5), 12), "`n` must be a power of two"),
    (lambda: fbfft.rfft(torch.randn(3, 5), 512), "`n` must be a power of two from 2 to 256"),
    (lambda: fbfft.rfft(torch.randn(3, 5, dtype=torch.complex64), 8), "`input` must be real"),
    (lambda: fbfft.irfft(torch.randn(3, 5), 8, 8), "`input` must be complex"),
    (lambda: fbfft.irfft(torch.randn(3, 4, dtype=torch.complex64), 8, 8), "`input` must have n/2\\+1"),
    (lambda: fbfft.irfft(torch.randn(3, 5, dtype=torch.complex64), 8, 0), "`out_size` must be >= 1"),
    (lambda: fbfft.rfft2(torch.randn(3, 5, 5), (256, 256)), "`size` must be a power of two from 2 to 128"),
    (lambda: fbfft.rfft2(torch.randn(5), (8, 8)), "at least 2 dimensions"),
    (lambda: fbfft.irfft2(torch.randn(2, 8, 5, dtype=torch.complex64), (8, 8), (4, 4), 0, True),
     "`input` must end in"),
], ids=["n-not-pow2", "n-too-large", "rfft-complex", "irfft-real", "irfft-bins", "out-size",
        "size2d-too-large", "rank", "irfft2-layout"])
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


# --- CUDA: the same semantics as the CPU kernels ---------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES_1D)
@pytest.mark.parametrize("batch", [1, 16384])
def test_cuda_rfft_irfft_1d(n, batch):
    x = torch.randn(batch, max(1, n - 3), dtype=torch.float64)
    got = fbfft.rfft(x.float().cuda(), n, -1)
    ref = fbfft.rfft(x, n, -1)
    assert got.dtype == torch.complex64 and rel(got.cpu().to(torch.complex128), ref) <= 1e-5
    X = torch.randn(batch, n // 2 + 1, dtype=torch.complex128)
    for normalized in (True, False):
        got = fbfft.irfft(X.to(torch.complex64).cuda(), n, n - 1, 1, normalized)
        ref = fbfft.irfft(X, n, n - 1, 1, normalized)
        assert got.dtype == torch.float32 and rel(got.cpu().double(), ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES_2D, ids=str)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("offset", [(0, 0), (-1, -2), (2, 1)], ids=str)
def test_cuda_rfft2_irfft2(size, transposed, offset):
    x = torch.randn(3, 2, max(1, size[0] - 1), size[1] + 1, dtype=torch.float64)
    got = fbfft.rfft2(x.float().cuda(), size, offset, transposed)
    ref = fbfft.rfft2(x, size, offset, transposed)
    assert got.shape == ref.shape and rel(got.cpu().to(torch.complex128), ref) <= 1e-5
    X = torch.randn(*ref.shape, dtype=torch.complex128)  # not Hermitian: edge bins as C2R reads them
    for normalized in (True, False):
        out = (max(1, size[0] - 2), size[1])
        got = fbfft.irfft2(X.to(torch.complex64).cuda(), size, out, offset, transposed, normalized)
        ref = fbfft.irfft2(X, size, out, offset, transposed, normalized)
        assert got.shape == ref.shape and rel(got.cpu().double(), ref) <= 1e-5


def check_fast_kernel(n, batch, dims):
    size, offset = ((n, n), (-1, 1)) if dims == 2 else ((n,), (-1,))
    shape = (batch, n + 1, n - 1) if dims == 2 else (batch, n + 1)
    x = torch.randn(*shape, dtype=torch.float64)
    for transposed in ((False, True) if dims == 2 else (False,)):
        if dims == 2:
            got = fbfft.rfft2(x.float().cuda(), size, offset, transposed)
            ref = fbfft.rfft2(x, size, offset, transposed)
        else:
            got = fbfft.rfft(x.float().cuda(), n, offset[0])
            ref = fbfft.rfft(x, n, offset[0])
        assert rel(got.cpu().to(torch.complex128), ref) <= 1e-5
        X = torch.randn(*ref.shape, dtype=torch.complex128)
        # unaligned windows (element stores), and 4-aligned ones (16-byte stores) that reach
        # past the basis on both sides
        for out, off in (((n - 1, n + 2), (1, -1)), ((n + 1, n + 8), (-1, -4))):
            if dims == 2:
                got = fbfft.irfft2(X.to(torch.complex64).cuda(), size, out, off, transposed)
                ref = fbfft.irfft2(X, size, out, off, transposed)
            else:
                got = fbfft.irfft(X.to(torch.complex64).cuda(), n, out[1], off[1])
                ref = fbfft.irfft(X, n, out[1], off[1])
            assert got.shape == ref.shape and rel(got.cpu().double(), ref) <= 1e-5


@pytest.fixture(params=[1, 0, 2], ids=["measured", "staged", "direct"])
def direct_io(request):
    """Row-major spectra moved between registers and global memory directly where that measured
    faster (the default), always staged through shared memory as the other layouts are, or
    always directly."""
    from fastlayers import _C
    _C._fbfft_set_direct_io(request.param)
    yield request.param
    _C._fbfft_set_direct_io(1)


@pytest.mark.gpu
@pytest.mark.parametrize("n,dims", [(n, 1) for n in (2, 4, 8, 16, 32, 64, 128, 256)]
                         + [(n, 2) for n in (2, 4, 8, 16, 32, 64, 128)], ids=str)
@pytest.mark.parametrize("batch", [1, 3, 129, 1000])
def test_cuda_fast_kernels_every_batch_tail(n, dims, batch, direct_io):
    """The register kernels hold several images per block and pair rows across images; the lane
    kernels spread lines over lanes (1-D: several line pairs per block): batches that leave
    partial blocks and odd pairs, every layout, both directions, windows that cross the input."""
    check_fast_kernel(n, batch, dims)


def check_whole_images(n, batch):
    """float32 windows that are the whole image (no offset, h = w = n): the span loads and stores,
    at 8 x 8 the row pairs read straight from global memory and the warp-local steps; both
    directions, scaled and not, and an inverse whose spectrum starts 8 bytes past a 16-byte
    boundary."""
    x = torch.randn(batch, n, n, dtype=torch.float64)
    got = fbfft.rfft2(x.float().cuda(), (n, n))
    ref = fbfft.rfft2(x, (n, n))
    assert got.shape == ref.shape and rel(got.cpu().to(torch.complex128), ref) <= 1e-5
    X = torch.randn(*ref.shape, dtype=torch.complex128)
    flat = torch.empty(X.numel() + 1, dtype=torch.complex64, device="cuda")
    shifted = flat[1:].view(X.shape)
    shifted.copy_(X.to(torch.complex64))
    for spectrum in (X.to(torch.complex64).cuda(), shifted):
        for normalized in (True, False):
            got = fbfft.irfft2(spectrum, (n, n), (n, n), (0, 0), False, normalized)
            ref = fbfft.irfft2(X, (n, n), (n, n), (0, 0), False, normalized)
            assert got.shape == ref.shape and rel(got.cpu().double(), ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("batch", [1, 3, 9, 129, 1000])
def test_cuda_whole_images(n, batch, direct_io):
    check_whole_images(n, batch)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [8, 16, 32, 64, 128, 256])
@pytest.mark.parametrize("batch", [1, 3, 129, 1000, 16389])
def test_cuda_whole_lines(n, batch, direct_io):
    """1-D whole lines below 2^20 (the lane kernels' span stores), scaled and not, and a spectrum
    that starts 8 bytes past a 16-byte boundary."""
    X = torch.randn(batch, n // 2 + 1, dtype=torch.complex128)
    flat = torch.empty(X.numel() + 1, dtype=torch.complex64, device="cuda")
    shifted = flat[1:].view(X.shape)
    shifted.copy_(X.to(torch.complex64))
    for spectrum in (X.to(torch.complex64).cuda(), shifted):
        for normalized in (True, False):
            got = fbfft.irfft(spectrum, n, n, 0, normalized)
            ref = fbfft.irfft(X, n, n, 0, normalized)
            assert got.shape == ref.shape and rel(got.cpu().double(), ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("n", [8, 16, 32, 64])
def test_cuda_whole_lines_large_batch(n):
    """1-D whole lines from 2^20 on (the register kernels, both ways), an odd batch."""
    x = torch.randn((1 << 20) + 3, n, dtype=torch.float64)
    got = fbfft.rfft(x.float().cuda(), n)
    ref = fbfft.rfft(x, n)
    assert rel(got.cpu().to(torch.complex128), ref) <= 1e-5
    X = torch.randn(*ref.shape, dtype=torch.complex128)
    got = fbfft.irfft(X.to(torch.complex64).cuda(), n, n)
    assert rel(got.cpu().double(), fbfft.irfft(X, n, n)) <= 1e-5
    # clipped at an offset, unnormalized
    got = fbfft.irfft(X.to(torch.complex64).cuda(), n, n - 3, 2, False)
    assert rel(got.cpu().double(), fbfft.irfft(X, n, n - 3, 2, False)) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("batch", [1, 3, 129])
def test_cuda_input_inside_the_window(n, batch, direct_io):
    """An input wholly inside the window (implicit zero padding, the convolution's case) is
    copied in as one contiguous span per block: batch tails, every layout, 1-D and 2-D."""
    x = torch.randn(batch, max(1, n - 3), max(1, n - 1), dtype=torch.float64)
    for transposed in (False, True):
        got = fbfft.rfft2(x.float().cuda(), (n, n), (-1, 0), transposed)
        ref = fbfft.rfft2(x, (n, n), (-1, 0), transposed)
        assert rel(got.cpu().to(torch.complex128), ref) <= 1e-5
    got = fbfft.rfft(x.float().cuda(), n, -1)
    ref = fbfft.rfft(x, n, -1)
    assert rel(got.cpu().to(torch.complex128), ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 64, 128, 256])
@pytest.mark.parametrize("n", [8, 16, 32, 64])
def test_cuda_register_kernels_every_block_size(n, threads, direct_io):
    """Each block size of the 2-D register kernels that this build has (1 to 128 images per
    block): batch tails, every layout, both directions. The frequency-major layout of the
    convolution is covered through fft_conv tests."""
    from fastlayers import _C
    _C._fbfft_set_block_threads(threads)
    try:
        try:
            fbfft.rfft2(torch.randn(1, n, n, device="cuda"), (n, n))
        except RuntimeError as e:
            if "are not built with" in str(e):
                pytest.skip("%d threads per block not built (FASTLAYERS_FBFFT_BLOCK_SWEEP=1)"
                            % threads)
            raise
        for batch in (1, 3, 129):
            check_fast_kernel(n, batch, 2)
            check_whole_images(n, batch)
            x = torch.randn(batch, n - 3, n - 2, dtype=torch.float64)  # inside the window
            got = fbfft.rfft2(x.float().cuda(), (n, n), (-2, -1))
            assert rel(got.cpu().to(torch.complex128), fbfft.rfft2(x, (n, n), (-2, -1))) <= 1e-5
    finally:
        _C._fbfft_set_block_threads(0)


@pytest.fixture
def lanes_64x64():
    """64 x 64 on the lane kernels (as 128 x 128) instead of the register kernels."""
    from fastlayers import _C
    before = _C._fbfft_lanes_2d_min()
    _C._fbfft_set_lanes_2d_min(64)
    yield
    _C._fbfft_set_lanes_2d_min(before)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_cuda_lane_kernel_64x64(batch, lanes_64x64):
    check_fast_kernel(64, batch, 2)


@pytest.fixture(params=[128, 64], ids=["128", "64-on-lanes"])
def lane_size(request):
    """128 x 128, and 64 x 64 routed to the same lane kernels."""
    from fastlayers import _C
    before = _C._fbfft_lanes_2d_min()
    _C._fbfft_set_lanes_2d_min(request.param)
    yield request.param
    _C._fbfft_set_lanes_2d_min(before)


@pytest.mark.gpu
@pytest.mark.parametrize("side", [0, 1], ids=["even", "odd"])
def test_cuda_lane_kernels_row_widths(lane_size, side):
    """The lane kernels read and write rows 4, 2 or 1 floats at a time, by the row width and the
    window offset: rows and offsets that are multiples of 4, even ones (float pairs) and odd ones,
    windows that cross the input on either side, both directions."""
    n = lane_size
    h = n - 10 + side  # 118 (L1's gradient), 117; 54, 55
    x = torch.randn(3, h, h, dtype=torch.float64)
    for offset in [(0, 0), (-2, -2), (2, 4), (-4, 6), (1, -1)]:
        got = fbfft.rfft2(x.float().cuda(), (n, n), offset)
        assert rel(got.cpu().to(torch.complex128), fbfft.rfft2(x, (n, n), offset)) <= 1e-5
    X = torch.randn(3, n, n // 2 + 1, dtype=torch.complex128)
    for out, offset in [((h, h), (0, 0)), ((h, h), (10, 10)), ((h, h), (2, 6)),
                        ((h, h), (-2, -4)), ((h, h), (1, 3)), ((n, n), (0, 0))]:
        got = fbfft.irfft2(X.to(torch.complex64).cuda(), (n, n), out, offset)
        ref = fbfft.irfft2(X, (n, n), out, offset)
        assert rel(got.cpu().to(torch.float64), ref) <= 1e-5


@pytest.mark.gpu
def test_kernel_switches_reject_bad_values():
    from fastlayers import _C
    with pytest.raises(RuntimeError, match="`n` must be 64 or 128"):
        _C._fbfft_set_lanes_2d_min(32)
    assert _C._fbfft_lanes_2d_min() == 128
    with pytest.raises(RuntimeError, match="`mode` must be 0, 1 or 2"):
        _C._fbfft_set_direct_io(3)
    assert _C._fbfft_direct_io() == 1
    with pytest.raises(RuntimeError, match="`threads` must be 0, 32, 64, 128 or 256"):
        _C._fbfft_set_block_threads(96)
    assert _C._fbfft_block_threads() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("n", [8, 64])
def test_cuda_rfft_1d_large_batch(n):
    """From 2^20 lines the 1-D forward runs on the register kernels (a line pair per thread):
    an odd batch past the threshold, a window that starts before the input."""
    x = torch.randn((1 << 20) + 3, n - 1, dtype=torch.float64)
    got = fbfft.rfft(x.float().cuda(), n, -1)
    ref = fbfft.rfft(x, n, -1)
    assert rel(got.cpu().to(torch.complex128), ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("n,h", [(16, 13), (32, 27), (64, 57)])
def test_cuda_implicit_padding_large_batch(n, h):
    x = torch.randn(16384, h, h, device="cuda")
    got = fbfft.rfft2(x, (n, n))
    ref = torch.fft.rfft2(x, s=(n, n))
    assert rel(got, ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [32, 128])
def test_cuda_half_storage(dtype, n):
    x = torch.randn(64, n - 5, n - 5, device="cuda").to(dtype)
    got = fbfft.rfft2(x, (n, n), (-2, -2), True)
    ref = fbfft.rfft2(x.cpu().double(), (n, n), (-2, -2), True)
    assert got.dtype == torch.complex64 and rel(got.cpu().to(torch.complex128), ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [64, 256])
def test_cuda_half_storage_1d(dtype, n):
    x = torch.randn(300, n - 3, device="cuda").to(dtype)
    got = fbfft.rfft(x, n, -1)
    ref = fbfft.rfft(x.cpu().double(), n, -1)
    assert got.dtype == torch.complex64 and rel(got.cpu().to(torch.complex128), ref) <= 1e-5


@pytest.mark.gpu
def test_cuda_gradients_match_cpu():
    x = torch.randn(4, 6, 7, dtype=torch.float64)
    grads = []
    for t in (x.clone().requires_grad_(), x.float().cuda().requires_grad_()):
        X = fbfft.rfft2(t, (8, 8), (-1, 1), True)
        y = fbfft.irfft2(X * X.abs(), (8, 8), (5, 6), (1, 0), True)
        y.square().sum().backward()
        grads.append(t.grad.cpu().double())
    assert rel(grads[1], grads[0]) <= 1e-4


@pytest.mark.gpu
def test_cuda_rejects_float64():
    with pytest.raises(RuntimeError, match="`input` is Double"):
        fbfft.rfft2(torch.randn(2, 8, 8, dtype=torch.float64, device="cuda"), (8, 8))


@pytest.mark.gpu
@pytest.mark.parametrize("name,make", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_cuda_opcheck(name, make):
    args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in make(False))
    torch.library.opcheck(getattr(torch.ops.fastlayers, name).default, args,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


# --- The benchmark's reference: cuFFT called directly -----------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("nh,nw", [(1, 8), (1, 256), (8, 8), (16, 16), (64, 64), (16, 32)])
def test_cuda_cufft_direct_matches_torch(nh, nw):
    from fastlayers import _C

    shape = (37, nw) if nh == 1 else (37, nh, nw)
    dims = (-1,) if nh == 1 else (-2, -1)
    x = torch.randn(*shape, device="cuda")
    ref = torch.fft.rfftn(x, dim=dims)
    assert rel(_C._cufft_direct_rfft2(x, nh, nw), ref) <= 1e-5
    X = ref.clone()
    y = _C._cufft_direct_irfft2_(X, nh, nw)  # unnormalized; overwrites X
    assert rel(y, torch.fft.irfftn(ref, s=shape[1:], dim=dims, norm="forward")) <= 1e-5


@pytest.mark.gpu
def test_cuda_cufft_direct_bad_arguments():
    from fastlayers import _C

    with pytest.raises(RuntimeError, match="`x` must be \\[B, 8, 8\\]"):
        _C._cufft_direct_rfft2(torch.randn(4, 8, 6, device="cuda"), 8, 8)
    with pytest.raises(RuntimeError, match="`spectrum` must be a CUDA ComplexFloat"):
        _C._cufft_direct_irfft2_(torch.randn(4, 8, 5, device="cuda"), 8, 8)
    with pytest.raises(RuntimeError, match="`nh` must be >= 1 and `nw` >= 2"):
        _C._cufft_direct_rfft2(torch.randn(4, 8, 8, device="cuda"), 0, 8)
