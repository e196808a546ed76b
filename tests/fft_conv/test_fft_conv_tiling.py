"""Tiled FFT convolution (overlap-save): the `tile` argument of the three ops on every device,
tiles run in chunks of samples (_C.testing's explicit chunk bound), against PyTorch."""
import pytest
import torch
import torch.nn.functional as F

from fastlayers import _C, ops
from conv_samples import DTYPES, PASSES, Case, check_passes, make_tensors, rel_err

fl = torch.ops.fastlayers

# S, C, K, H, W, kh, kw, ph, pw: odd and even images that leave partial tiles, rectangular
# kernels, padding smaller than, equal to and larger than (k - 1) / 2.
SHAPES = [
    (2, 3, 4, 11, 9, 3, 3, 1, 1),
    (1, 2, 3, 13, 10, 5, 3, 2, 0),
    (3, 2, 2, 7, 12, 2, 4, 0, 3),
    (2, 4, 3, 9, 7, 1, 1, 0, 0),
    (1, 2, 2, 6, 5, 4, 3, 3, 2),
    (2, 3, 2, 17, 5, 7, 2, 0, 1),
]


def result_hw(case, pass_):
    """The large result `tile` divides: grad_input for input_grad, y otherwise."""
    return (case.H, case.W) if pass_ == "input_grad" else case.out_hw


def tiles_for(case, pass_):
    """Tile sizes from 1 up to the whole result, square and not, partial last tiles included."""
    rh, rw = result_hw(case, pass_)
    out = []
    for t in [(1, 1), (2, 3), (3, 2), (4, 4), (5, 3), (rh - 1, rw - 1), (rh, rw), (rh, 1)]:
        t = (min(max(t[0], 1), rh), min(max(t[1], 1), rw))
        if t not in out:
            out.append(t)
    return out


def min_basis(case, tile):
    return (tile[0] + case.kh - 1, tile[1] + case.kw - 1)


def pow2_basis(case, tile):
    return tuple(ops.next_pow2(n) for n in min_basis(case, tile))


def run_pass(pass_, x, w, b, gy, case, basis, tile, backend="cufft", tf32=False):
    """One pass with `tile` dividing its result (see result_hw)."""
    pad, basis, tile = case.padding, list(basis), list(tile)
    if pass_ == "forward":
        return fl.fft_conv2d(x, w, b, pad, basis, tf32, backend, tile)
    if pass_ == "input_grad":
        return fl.fft_conv2d_input_grad(gy, w, pad, basis, tf32, backend, tile)
    return fl.fft_conv2d_weight_grad(gy, x, pad, basis, tf32, backend, tile)


def only(pass_, out):
    """`out` in its pass's place of a (forward, input grad, weight grad) triple."""
    return tuple(out if p == pass_ else None for p in PASSES)


TILED = [(Case(*shape, (0, 0)), pass_, tile)
         for shape in SHAPES for pass_ in PASSES for tile in tiles_for(Case(*shape, (0, 0)), pass_)]


def tiled_id(spec):
    case, pass_, tile = spec
    return "%s-%s-t%dx%d" % (pass_, "S%d-C%d-K%d-%dx%d-k%dx%d-p%dx%d" % tuple(case[:9]), *tile)


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("spec", TILED, ids=tiled_id)
def test_every_tile_matches_pytorch(device, backend, spec):
    """Every tile size of every pass at the smallest basis and the power of two above it: cuFFT
    in float64 (the mathematics), fbfft on CUDA in float32 within the rule."""
    if device == "cpu" and backend == "fbfft":
        pytest.skip("the CPU runs one pipeline for both backends (test_cpu_runs_one_pipeline)")
    case, pass_, tile = spec
    precision = "float64" if backend == "cufft" else "float32"
    x, w, b, gy = make_tensors(case, DTYPES[precision], device)
    bases = [min_basis(case, tile), pow2_basis(case, tile)]
    if backend == "fbfft":
        bases = [bases[1]] if max(bases[1]) <= ops.FBFFT_MAX_BASIS and min(bases[1]) >= 2 else []
    for basis in bases:
        out = run_pass(pass_, x, w, b, gy, case, basis, tile, backend)
        assert out.device == x.device
        check_passes(only(pass_, out), x, w, b, gy, case.padding, precision,
                     what="%s basis=%s tile=%s %s" % (case, basis, tile, backend))


# (case with the basis of the tiles, tile of y): partial last tiles, padding, rectangles; the
# last one small enough for PyTorch's half-precision convolution on the CPU.
TILED_PRECISION = [
    (Case(4, 16, 8, 27, 21, 3, 5, 1, 2, (16, 16)), (14, 12)),
    (Case(2, 8, 12, 33, 19, 5, 3, 2, 1, (8, 8)), (4, 6)),
    (Case(3, 6, 5, 13, 13, 3, 3, 0, 0, (8, 8)), (6, 6)),
    (Case(2, 4, 4, 40, 40, 7, 7, 3, 3, (32, 16)), (26, 10)),
    (Case(5, 3, 6, 9, 30, 2, 4, 1, 0, (8, 16)), (7, 13)),
    (Case(2, 4, 3, 12, 10, 3, 3, 1, 1, (8, 8)), (6, 6)),
]


def precision_id(spec):
    case, tile = spec
    return "%s-t%dx%d" % (case, *tile)


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("precision", ["float32", "tf32", "float16", "bfloat16"])
@pytest.mark.parametrize("spec", TILED_PRECISION, ids=precision_id)
def test_tiled_within_pytorch_error(device, precision, backend, spec):
    case, tile = spec
    if device == "cpu":
        if backend == "fbfft" or precision == "tf32":
            pytest.skip("the CPU runs one pipeline for every backend and tf32 "
                        "(test_cpu_runs_one_pipeline)")
        if precision != "float32" and spec != TILED_PRECISION[-1]:
            pytest.skip("PyTorch's CPU convolution in half precision is slow: the small case "
                        "covers the CPU's half storage")
    x, w, b, gy = make_tensors(case, DTYPES[precision], device)
    tf32 = precision == "tf32"
    ours = (run_pass("forward", x, w, b, gy, case, case.basis, tile, backend, tf32),
            run_pass("input_grad", x, w, b, gy, case, case.basis,
                     (min(tile[0], case.H), min(tile[1], case.W)), backend, tf32),
            run_pass("weight_grad", x, w, b, gy, case, case.basis, tile, backend, tf32))
    check_passes(ours, x, w, b, gy, case.padding, precision,
                 what="%s tile=%s %s" % (case, tile, backend))


def test_empty_batch_tiled(device):
    case = Case(0, 3, 4, 7, 6, 3, 2, 1, 0, (8, 8))
    x, w, b, gy = make_tensors(case, device=device)
    y = fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "cufft", [3, 3])
    gx = fl.fft_conv2d_input_grad(gy, w, case.padding, case.basis, False, "cufft", [3, 3])
    gw = fl.fft_conv2d_weight_grad(gy, x, case.padding, case.basis, False, "cufft", [3, 3])
    assert y.shape == (0, 4, 7, 5) and gx.shape == (0, 3, 7, 6)
    assert gw.shape == (4, 3, 3, 2) and not gw.any()


def test_backward_keeps_backend_and_tile():
    """The autograd formulas call the other passes with the forward's backend and tile."""
    case = Case(2, 2, 3, 9, 8, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float64, requires_grad=True)
    seen = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "fastlayers":
                seen.append((func._opname, args[-2], list(args[-1])))
            return func(*args, **(kwargs or {}))

    with Record():
        y = fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "fbfft", [6, 5])
        gx, gw = torch.autograd.grad(y, (x, w), gy)
    assert sorted(seen) == sorted([("fft_conv2d", "fbfft", [6, 5]),
                                   ("fft_conv2d_input_grad", "fbfft", [6, 5]),
                                   ("fft_conv2d_weight_grad", "fbfft", [6, 5])])
    ref = torch.autograd.grad(F.conv2d(x, w, b, padding=case.padding), (x, w), gy)
    assert rel_err(gx, ref[0]) <= 1e-10 and rel_err(gw, ref[1]) <= 1e-10


# --- chunks of samples -----------------------------------------------------------------------------


def testing():
    return _C.testing


CHUNK_CASE = Case(5, 3, 4, 13, 11, 3, 2, 1, 0, (8, 8))
CHUNK_TILE = (5, 6)


def chunk_geometry(pass_index, case, tile, real_bytes):
    return (pass_index, case.S, case.C, case.K, case.H, case.W, case.kh, case.kw, case.ph,
            case.pw, case.basis[0], case.basis[1], real_bytes, tile[0], tile[1])


@pytest.mark.parametrize("backend,precision", [("cufft", "float64"), ("cufft", "float32"),
                                               ("fbfft", "float32")], ids=str)
@pytest.mark.parametrize("pass_", PASSES)
def test_chunks_match_pytorch(device, pass_, backend, precision):
    """A tiled pass bounds the bytes of a chunk of samples: one sample per chunk, two, and one
    just below two, each against PyTorch, and equal to the pass in one chunk (the same
    arithmetic per sample; the weight gradient sums the chunks in another order)."""
    if device == "cpu" and backend == "fbfft":
        pytest.skip("the CPU runs one pipeline for both backends (test_cpu_runs_one_pipeline)")
    T = testing()
    case, tile, i = CHUNK_CASE, CHUNK_TILE, PASSES.index(pass_)
    x, w, b, gy = make_tensors(case, DTYPES[precision], device)
    a, bb, bias = {"forward": (x, w, b), "input_grad": (gy, w, None),
                   "weight_grad": (gy, x, None)}[pass_]
    real_bytes = 8 if precision == "float64" else 4
    geometry = chunk_geometry(i, case, tile, real_bytes)
    assert T.TILE_CHUNK_BYTES == 512 << 20
    assert T.tile_chunk_samples(*geometry) == case.S  # everything in one chunk by default

    def run(limit):
        return T.fft_conv2d_pass(i, a, bb, bias, list(case.padding), list(case.basis), False,
                                 backend, list(tile), tile_chunk_bytes=limit)

    whole = run(0)
    torch.testing.assert_close(whole, run_pass(pass_, x, w, b, gy, case, case.basis, tile,
                                               backend), rtol=0, atol=0)
    # The bytes of a chunk of two samples: those of the same pass with a batch of two
    # (tile_chunk_samples counts with cuFFT's buffers, fbfft's are smaller).
    two = _C.fft_conv2d_workspace_bytes(i, 2, *geometry[2:13], "cufft", *tile)
    for limit, samples in ((1, 1), (two, 2), (two - 1, 1)):
        assert T.tile_chunk_samples(*geometry, tile_chunk_bytes=limit) == samples, limit
        chunked = run(limit)
        check_passes(only(pass_, chunked), x, w, b, gy, case.padding, precision,
                     what="%s, chunks bounded by %d bytes" % (backend, limit))
        if pass_ == "weight_grad":  # summed over chunks: another order of addition
            assert rel_err(chunked, whole) <= (1e-12 if precision == "float64" else 1e-6)
        else:  # every sample's tiles see the same arithmetic
            torch.testing.assert_close(chunked, whole, rtol=0, atol=0)


def test_chunked_weight_grad_accumulates_half_precision_in_float(device):
    case = Case(6, 2, 3, 10, 10, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.bfloat16, device)
    out = testing().fft_conv2d_pass(2, gy, x, None, list(case.padding), list(case.basis), False,
                                    "cufft", [6, 6], tile_chunk_bytes=1)
    assert out.dtype == torch.bfloat16
    check_passes(only("weight_grad", out), x, w, b, gy, case.padding, "bfloat16",
                 what="weight grad, one sample per chunk")


def test_workspace_bytes_of_a_tiled_pass():
    """A large image tiled needs far less than untiled, one chunk at most the bound; a smaller
    bound gives chunks of fewer samples whose bytes stay under it."""
    T = testing()
    args = (0, 64, 32, 32, 256, 256, 3, 3, 1, 1)
    untiled = _C.fft_conv2d_workspace_bytes(*args, 256, 256, 4)
    tiled = _C.fft_conv2d_workspace_bytes(*args, 32, 32, 4, "fbfft", 30, 30)
    assert tiled <= T.TILE_CHUNK_BYTES < untiled
    samples = T.tile_chunk_samples(*args, 32, 32, 4, 30, 30, tile_chunk_bytes=tiled // 4)
    assert 1 <= samples < 64
    chunk = _C.fft_conv2d_workspace_bytes(0, samples, *args[2:], 32, 32, 4, "cufft", 30, 30)
    assert chunk <= tiled // 4


def test_untiled_needs_the_padded_input_in_the_basis(device):
    x, w = torch.randn(1, 3, 9, 9, device=device), torch.randn(2, 3, 3, 3, device=device)
    with pytest.raises(RuntimeError, match="must be at least the padded input size"):
        fl.fft_conv2d(x, w, None, [1, 1], [8, 8], False, "cufft", [0, 0])

