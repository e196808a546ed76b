"""The CUDA kernel paths of the fbfft transforms, each reached on purpose: batches that leave
partial blocks, spectra moved directly or staged through shared memory (`direct_io` of the
_C.testing entry points), whole images and lines, windows inside the input, large batches, the
lane kernels' row widths; and the cuFFT-direct benchmark references. Values against torch.fft
(fbfft_samples.check_transform)."""
import pytest
import torch

from fastlayers import fbfft
from fbfft_samples import check_transform, torch_irfft, torch_irfft2, torch_rfft, torch_rfft2

pytestmark = pytest.mark.gpu


def testing():
    from fastlayers import _C
    return _C.testing


def real(*shape):
    return torch.randn(*shape).cuda()


def spectrum(*shape):
    return torch.randn(*shape, dtype=torch.complex64).cuda()


def shifted_copy(X):
    """X in a buffer that starts 8 bytes past a 16-byte boundary."""
    flat = torch.empty(X.numel() + 1, dtype=X.dtype, device=X.device)
    out = flat[1:].view(X.shape)
    out.copy_(X)
    return out


# 0: spectra always staged through shared memory, 1: moved directly where measured faster (the
# ops' behaviour), 2: always directly.
@pytest.fixture(params=[1, 0, 2], ids=["measured", "staged", "direct"])
def direct_io(request):
    return request.param


@pytest.mark.parametrize("n,dims", [(n, 1) for n in (2, 4, 8, 16, 32, 64, 128, 256)]
                         + [(n, 2) for n in (2, 4, 8, 16, 32, 64, 128)], ids=str)
@pytest.mark.parametrize("batch", [1, 3, 129, 1000])
def test_fast_kernels_every_batch_tail(n, dims, batch, direct_io):
    """The register kernels hold several images per block and pair rows across images; the lane
    kernels spread lines over lanes (1-D: several line pairs per block): batches that leave
    partial blocks and odd pairs, every layout, both directions, windows that cross the input."""
    T = testing()
    size, offset = ((n, n), (-1, 1)) if dims == 2 else ((n,), (-1,))
    x = real(batch, n + 1, n - 1) if dims == 2 else real(batch, n + 1)
    what = "n=%d dims=%d batch=%d direct_io=%d" % (n, dims, batch, direct_io)
    for transposed in ((False, True) if dims == 2 else (False,)):
        if dims == 2:
            got = T.fbfft_rfft2(x, size, offset, transposed, direct_io=direct_io)
            check_transform(got, torch_rfft2, x, size, offset, transposed, what="rfft2 " + what)
        else:
            got = T.fbfft_rfft(x, n, offset[0], direct_io=direct_io)
            check_transform(got, torch_rfft, x, n, offset[0], what="rfft " + what)
        X = spectrum(*got.shape)
        # unaligned windows (element stores), and 4-aligned ones (16-byte stores) that reach
        # past the basis on both sides
        for out, off in (((n - 1, n + 2), (1, -1)), ((n + 1, n + 8), (-1, -4))):
            if dims == 2:
                got = T.fbfft_irfft2(X, size, out, off, transposed, True, direct_io=direct_io)
                check_transform(got, torch_irfft2, X, size, out, off, transposed,
                                what="irfft2 out=%s offset=%s %s" % (out, off, what))
            else:
                got = T.fbfft_irfft(X, n, out[1], off[1], True, direct_io=direct_io)
                check_transform(got, torch_irfft, X, n, out[1], off[1],
                                what="irfft out=%d offset=%d %s" % (out[1], off[1], what))


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("batch", [1, 3, 9, 129, 1000])
def test_whole_images(n, batch, direct_io):
    """float32 windows that are the whole image (no offset, h = w = n): the span loads and stores,
    at 8 x 8 the row pairs read straight from global memory and the warp-local steps; both
    directions, scaled and not, and an inverse whose spectrum starts 8 bytes past a 16-byte
    boundary."""
    T = testing()
    what = "%dx%d batch=%d direct_io=%d" % (n, n, batch, direct_io)
    x = real(batch, n, n)
    got = T.fbfft_rfft2(x, (n, n), (0, 0), False, direct_io=direct_io)
    check_transform(got, torch_rfft2, x, (n, n), what="rfft2 " + what)
    X = spectrum(*got.shape)
    for name, spec in (("aligned", X), ("shifted", shifted_copy(X))):
        for normalized in (True, False):
            got = T.fbfft_irfft2(spec, (n, n), (n, n), (0, 0), False, normalized,
                                 direct_io=direct_io)
            check_transform(got, torch_irfft2, spec, (n, n), (n, n), (0, 0), False, normalized,
                            what="irfft2 %s normalized=%s %s" % (name, normalized, what))


@pytest.mark.parametrize("n", [8, 16, 32, 64, 128, 256])
@pytest.mark.parametrize("batch", [1, 3, 129, 1000, 16389])
def test_whole_lines(n, batch, direct_io):
    """1-D whole lines below 2^20 (the lane kernels' span stores), scaled and not, and a spectrum
    that starts 8 bytes past a 16-byte boundary."""
    T = testing()
    X = spectrum(batch, n // 2 + 1)
    for name, spec in (("aligned", X), ("shifted", shifted_copy(X))):
        for normalized in (True, False):
            got = T.fbfft_irfft(spec, n, n, 0, normalized, direct_io=direct_io)
            check_transform(got, torch_irfft, spec, n, n, 0, normalized,
                            what="irfft %s n=%d batch=%d normalized=%s direct_io=%d" % (
                                name, n, batch, normalized, direct_io))


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("batch", [1, 3, 129])
def test_input_inside_the_window(n, batch, direct_io):
    """An input wholly inside the window (implicit zero padding, the convolution's case) is
    copied in as one contiguous span per block: batch tails, every layout, 1-D and 2-D."""
    T = testing()
    what = "n=%d batch=%d direct_io=%d" % (n, batch, direct_io)
    x = real(batch, max(1, n - 3), max(1, n - 1))
    for transposed in (False, True):
        got = T.fbfft_rfft2(x, (n, n), (-1, 0), transposed, direct_io=direct_io)
        check_transform(got, torch_rfft2, x, (n, n), (-1, 0), transposed,
                        what="rfft2 transposed=%s %s" % (transposed, what))
    got = T.fbfft_rfft(x, n, -1, direct_io=direct_io)
    check_transform(got, torch_rfft, x, n, -1, what="rfft " + what)


def test_direct_io_mode_checked():
    T = testing()
    x, X = real(2, 8, 8), spectrum(2, 8, 5)
    for call in (lambda: T.fbfft_rfft(x, 8, 0, direct_io=3),
                 lambda: T.fbfft_irfft(X, 8, 8, 0, True, direct_io=-1),
                 lambda: T.fbfft_rfft2(x, (8, 8), (0, 0), False, direct_io=3),
                 lambda: T.fbfft_irfft2(X, (8, 8), (8, 8), (0, 0), False, True, direct_io=3)):
        with pytest.raises(RuntimeError, match="`direct_io`"):
            call()


@pytest.mark.parametrize("side", [0, 1], ids=["even", "odd"])
def test_lane_kernels_row_widths(side):
    """128 x 128 runs on the lane kernels, which read and write rows 4, 2 or 1 floats at a time by
    the row width and the window offset: rows and offsets that are multiples of 4, even ones and
    odd ones, windows that cross the input on either side, both directions."""
    n = 128
    h = n - 10 + side  # 118 (L1's gradient), 117
    x = real(3, h, h)
    for offset in [(0, 0), (-2, -2), (2, 4), (-4, 6), (1, -1)]:
        check_transform(fbfft.rfft2(x, (n, n), offset), torch_rfft2, x, (n, n), offset,
                        what="rfft2 h=%d offset=%s" % (h, offset))
    X = spectrum(3, n, n // 2 + 1)
    for out, offset in [((h, h), (0, 0)), ((h, h), (10, 10)), ((h, h), (2, 6)),
                        ((h, h), (-2, -4)), ((h, h), (1, 3)), ((n, n), (0, 0))]:
        check_transform(fbfft.irfft2(X, (n, n), out, offset), torch_irfft2, X, (n, n), out,
                        offset, what="irfft2 out=%s offset=%s" % (out, offset))


# --- large batches (the ops' default kernels) ------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64, 128, 256])
def test_rfft_irfft_1d_batch_16384(n):
    x = real(16384, max(1, n - 3))
    check_transform(fbfft.rfft(x, n, -1), torch_rfft, x, n, -1, what="rfft n=%d" % n)
    X = spectrum(16384, n // 2 + 1)
    for normalized in (True, False):
        check_transform(fbfft.irfft(X, n, n - 1, 1, normalized), torch_irfft, X, n, n - 1, 1,
                        normalized, what="irfft n=%d normalized=%s" % (n, normalized))


@pytest.mark.parametrize("n", [8, 16, 32, 64])
def test_whole_lines_large_batch(n):
    """1-D whole lines from 2^20 on (the register kernels, both ways), an odd batch."""
    x = real((1 << 20) + 3, n)
    check_transform(fbfft.rfft(x, n), torch_rfft, x, n, what="rfft n=%d" % n)
    X = spectrum((1 << 20) + 3, n // 2 + 1)
    check_transform(fbfft.irfft(X, n, n), torch_irfft, X, n, n, what="irfft n=%d" % n)
    # clipped at an offset, unnormalized
    check_transform(fbfft.irfft(X, n, n - 3, 2, False), torch_irfft, X, n, n - 3, 2, False,
                    what="irfft clipped n=%d" % n)


@pytest.mark.parametrize("n", [8, 64])
def test_rfft_1d_large_batch(n):
    """From 2^20 lines the 1-D forward runs on the register kernels (a line pair per thread):
    an odd batch past the threshold, a window that starts before the input."""
    x = real((1 << 20) + 3, n - 1)
    check_transform(fbfft.rfft(x, n, -1), torch_rfft, x, n, -1, what="rfft n=%d" % n)


@pytest.mark.parametrize("n,h", [(16, 13), (32, 27), (64, 57)])
def test_implicit_padding_large_batch(n, h):
    x = real(16384, h, h)
    check_transform(fbfft.rfft2(x, (n, n)), torch_rfft2, x, (n, n), what="rfft2 %d from %d" % (n, h))


# --- cuFFT called directly: the benchmarks' reference ----------------------------------------------


@pytest.mark.parametrize("nh,nw", [(1, 8), (1, 256), (8, 8), (16, 16), (64, 64), (16, 32)])
def test_cufft_direct_matches_torch(nh, nw):
    T = testing()
    shape = (37, nw) if nh == 1 else (37, nh, nw)
    dims = (-1,) if nh == 1 else (-2, -1)
    x = real(*shape)
    check_transform(T.cufft_direct_rfft2(x, nh, nw), lambda t: torch.fft.rfftn(t, dim=dims), x,
                    what="cufft_direct_rfft2 %dx%d" % (nh, nw))
    X = torch.fft.rfftn(x, dim=dims)
    spec = X.clone()
    y = T.cufft_direct_irfft2_(spec, nh, nw)  # unnormalized; overwrites its input
    check_transform(y, lambda t: torch.fft.irfftn(t, s=shape[1:], dim=dims, norm="forward"), X,
                    what="cufft_direct_irfft2_ %dx%d" % (nh, nw))


def test_cufft_direct_bad_arguments():
    T = testing()
    with pytest.raises(RuntimeError, match="`x` must be \\[B, 8, 8\\]"):
        T.cufft_direct_rfft2(real(4, 8, 6), 8, 8)
    with pytest.raises(RuntimeError, match="`spectrum` must be a CUDA ComplexFloat"):
        T.cufft_direct_irfft2_(real(4, 8, 5), 8, 8)
    with pytest.raises(RuntimeError, match="`nh` must be >= 1 and `nw` >= 2"):
        T.cufft_direct_rfft2(real(4, 8, 8), 0, 8)
