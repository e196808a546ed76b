"""The fbfft backend and tiling of the FFT-convolution ops on CUDA (fp32, TF32, fp16, bf16)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import gradcheck, gradgradcheck

import fastlayers
from fastlayers import ops, tuner
from conv_samples import (TF32_FLOOR, Case, assert_within_bound, cudnn_tf32, fbfft_cases,
                          fft_passes, make_tensors, opcheck_tiled, rel_err, torch_passes)

pytestmark = pytest.mark.gpu

FBFFT = list(fbfft_cases("full"))
PASSES = ("forward", "input_grad", "weight_grad")
fl = torch.ops.fastlayers




def cuda_tensors(case, dtype=torch.float32, requires_grad=False):
    tensors = [t.to(dtype) for t in make_tensors(case, torch.float32, "cuda")]
    return [t.requires_grad_(requires_grad) for t in tensors]


def tiled_passes(x, w, b, gy, case, tile, backend, tf32=False):
    """The three passes tiled: `tile` for y (forward, weight grad), cut to x for the input grad."""
    pad, basis = case.padding, case.basis
    gx_tile = [min(tile[0], case.H), min(tile[1], case.W)]
    return (fl.fft_conv2d(x, w, b, pad, basis, tf32, backend, tile),
            fl.fft_conv2d_input_grad(gy, w, pad, basis, tf32, backend, gx_tile),
            fl.fft_conv2d_weight_grad(gy, x, pad, basis, tf32, backend, tile))


# --- the fbfft backend -----------------------------------------------------------------------------


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
@pytest.mark.parametrize("case", FBFFT, ids=str)
def test_fbfft_float32_within_pytorch_error(case, tf32):
    x, w, b, gy = cuda_tensors(case)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, case.padding)
        ours = fft_passes(x, w, b, gy, case.padding, case.basis, tf32=tf32, backend="fbfft")
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert_within_bound(out, r, n, floor=TF32_FLOOR if tf32 else None, what=name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FBFFT, ids=str)
def test_fbfft_half_precision_within_pytorch_error(case, dtype):
    x, w, b, gy = cuda_tensors(case, dtype)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    native = torch_passes(x, w, b, gy, case.padding)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert out.dtype == dtype, name
        assert_within_bound(out, r, n, what=name)


@pytest.fixture(params=[False, True], ids=["registers64", "lanes64"])
def lanes64(request):
    """Whether 64 x 64 runs on the lane kernels (as 128 x 128 always does)."""
    from fastlayers import _C
    before = _C._fbfft_lanes_2d_min()
    _C._fbfft_set_lanes_2d_min(64 if request.param else 128)
    yield request.param
    _C._fbfft_set_lanes_2d_min(before)


# Bases 64 and 128 on the fbfft lane kernels: the frequency-major layout of the GEMMs, windows
# past the input, partial last tiles of the clipped inverse, bias in every storage type. At 128,
# C <= 4 takes the small-channel products on row-major spectra (batches and output channels
# that leave partial blocks of 4), C > 4 the staged transposes around the GEMMs.
LANE_CASES = [Case(2, 3, 4, 70, 61, 3, 5, 1, 2, (128, 128)),
              Case(3, 2, 5, 50, 64, 3, 3, 1, 0, (64, 64)),
              Case(1, 4, 3, 97, 100, 7, 5, 3, 2, (128, 128)),
              Case(5, 1, 6, 33, 40, 4, 3, 1, 0, (128, 128)),
              Case(6, 2, 9, 21, 30, 11, 11, 5, 5, (64, 128)),
              Case(2, 6, 5, 70, 61, 3, 5, 1, 2, (128, 128))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("case", LANE_CASES, ids=str)
def test_fbfft_lane_kernels_within_pytorch_error(case, dtype, lanes64):
    x, w, b, gy = cuda_tensors(case, dtype)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    with cudnn_tf32(False):
        native = torch_passes(x, w, b, gy, case.padding)
        ours = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert out.dtype == dtype, name
        assert_within_bound(out, r, n, what=name)


def test_fbfft_cuda_matches_cpu():
    case = Case(3, 5, 6, 14, 11, 5, 3, 1, 2, (16, 16))
    tensors = make_tensors(case, torch.float32)
    cpu = fft_passes(*(t.double() for t in tensors), case.padding, case.basis, backend="fbfft")
    cuda = fft_passes(*(t.cuda() for t in tensors), case.padding, case.basis, backend="fbfft")
    for name, c, g in zip(PASSES, cpu, cuda):
        assert g.device.type == "cuda" and g.dtype == torch.float32
        assert rel_err(g.cpu(), c) <= 1e-5, name


def test_fbfft_rejects_float64_on_cuda():
    case = Case(1, 2, 2, 6, 6, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = cuda_tensors(case, torch.float64)
    calls = [lambda: fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "fbfft"),
             lambda: fl.fft_conv2d_input_grad(gy, w, case.padding, case.basis, False, "fbfft"),
             lambda: fl.fft_conv2d_weight_grad(gy, x, case.padding, case.basis, False, "fbfft")]
    for call in calls:
        with pytest.raises(RuntimeError, match=r"`backend` \"fbfft\".*float64 runs with backend "
                                               r"\"cufft\""):
            call()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fbfft_opcheck(dtype):
    case = Case(2, 2, 3, 5, 4, 3, 2, 1, 1, (8, 8))
    x, w, b, gy = cuda_tensors(case, dtype, requires_grad=True)
    pad, basis = list(case.padding), list(case.basis)
    torch.library.opcheck(fl.fft_conv2d.default, (x, w, b, pad, basis, False, "fbfft"))
    torch.library.opcheck(fl.fft_conv2d_input_grad.default, (gy, w, pad, basis, False, "fbfft"))
    torch.library.opcheck(fl.fft_conv2d_weight_grad.default, (gy, x, pad, basis, False, "fbfft"))


def test_fbfft_empty_batch():
    case = Case(0, 3, 4, 7, 6, 3, 2, 1, 0, (16, 8))
    x, w, b, gy = cuda_tensors(case)
    y, gx, gw = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    assert y.shape == (0, 4, 7, 5) and gx.shape == (0, 3, 7, 6)
    assert gw.shape == (4, 3, 3, 2) and not gw.any()


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


@pytest.fixture
def conjugate_skip():
    from fastlayers import _C
    assert _C._fft_conv_conjugate_skip() == 1  # the default: where it pays
    yield _C._fft_conv_set_conjugate_skip
    _C._fft_conv_set_conjugate_skip(1)


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("case", SKIP_CASES, ids=str)
def test_conjugate_skip_matches_every_frequency(case, backend, tf32, conjugate_skip):
    if backend == "fbfft" and case.basis[0] & (case.basis[0] - 1):
        pytest.skip("fbfft takes power-of-two bases")
    x, w, b, gy = cuda_tensors(case)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, case.padding)
    runs = {}
    for mode in (0, 2):
        conjugate_skip(mode)
        runs[mode] = fft_passes(x, w, b, gy, case.padding, case.basis, tf32=tf32, backend=backend)
    for name, full, skipped, r, n in zip(PASSES, runs[0], runs[2], ref, native):
        assert_within_bound(skipped, r, n, floor=TF32_FLOOR if tf32 else None, what=name)
        if not tf32:  # the same products, summed by other GEMM kernels
            assert rel_err(skipped, full.double()) <= 1e-5, name


def test_conjugate_skip_float64_on_cufft(conjugate_skip):
    case = SKIP_CASES[0]
    x, w, b, gy = (t.double() for t in cuda_tensors(case))
    ref = torch_passes(x, w, b, gy, case.padding)
    conjugate_skip(2)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis, backend="cufft")
    for name, out, r in zip(PASSES, ours, ref):
        assert out.dtype == torch.float64 and rel_err(out, r) <= 1e-10, name


def test_conjugate_skip_mode_checked():
    from fastlayers import _C
    with pytest.raises(RuntimeError, match=r"_fft_conv_set_conjugate_skip: `mode` must be 0, 1 or "
                                           r"2, got 3"):
        _C._fft_conv_set_conjugate_skip(3)
    assert _C._fft_conv_conjugate_skip() == 1


# --- tiling ----------------------------------------------------------------------------------------

# (case with the basis of the tiles, tile of y): partial last tiles, padding, rectangles.
TILED = [
    (Case(4, 16, 8, 27, 21, 3, 5, 1, 2, (16, 16)), (14, 12)),
    (Case(2, 8, 12, 33, 19, 5, 3, 2, 1, (8, 8)), (4, 6)),
    (Case(3, 6, 5, 13, 13, 3, 3, 0, 0, (8, 8)), (6, 6)),
    (Case(2, 4, 4, 40, 40, 7, 7, 3, 3, (32, 16)), (26, 10)),
    (Case(5, 3, 6, 9, 30, 2, 4, 1, 0, (8, 16)), (7, 13)),
]


def tiled_id(spec):
    case, tile = spec
    return "%s-t%dx%d" % (case, *tile)


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
@pytest.mark.parametrize("spec", TILED, ids=tiled_id)
def test_tiled_float32_within_pytorch_error(spec, tf32, backend):
    case, tile = spec
    x, w, b, gy = cuda_tensors(case)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, case.padding)
        ours = tiled_passes(x, w, b, gy, case, tile, backend, tf32)
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert_within_bound(out, r, n, floor=TF32_FLOOR if tf32 else None, what=name)


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("spec", TILED, ids=tiled_id)
def test_tiled_half_precision_within_pytorch_error(spec, dtype, backend):
    case, tile = spec
    x, w, b, gy = cuda_tensors(case, dtype)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    native = torch_passes(x, w, b, gy, case.padding)
    ours = tiled_passes(x, w, b, gy, case, tile, backend)
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert out.dtype == dtype, name
        assert_within_bound(out, r, n, what=name)


@pytest.mark.parametrize("spec", TILED, ids=tiled_id)
def test_tiled_float64_cufft_matches_pytorch(spec):
    case, tile = spec
    x, w, b, gy = cuda_tensors(case, torch.float64)
    ref = torch_passes(x, w, b, gy, case.padding)
    for name, out, r in zip(PASSES, tiled_passes(x, w, b, gy, case, tile, "cufft"), ref):
        assert rel_err(out, r) <= 1e-10, name


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
def test_tiled_cuda_matches_cpu_and_chunks(backend):
    case, tile = TILED[1]
    tensors = make_tensors(case, torch.float32)
    cpu = tiled_passes(*(t.double() for t in tensors), case, tile, "cufft")
    cuda = tiled_passes(*(t.cuda() for t in tensors), case, tile, backend)
    with ops._tile_chunk_limit(1):  # one sample per chunk
        chunked = tiled_passes(*(t.cuda() for t in tensors), case, tile, backend)
    for name, c, g, k in zip(PASSES, cpu, cuda, chunked):
        assert rel_err(g.cpu(), c) <= 1e-5, name
        assert rel_err(k.cpu(), c) <= 1e-5, name


def test_tiled_gradcheck_cufft_float64():
    case = Case(2, 2, 3, 5, 6, 3, 2, 1, 1, (4, 4))
    x, w, b, gy = cuda_tensors(case, torch.float64, requires_grad=True)
    pad, basis = case.padding, case.basis
    checks = [
        (lambda x, w, b: fl.fft_conv2d(x, w, b, pad, basis, False, "cufft", [2, 3]), (x, w, b)),
        (lambda gy, w: fl.fft_conv2d_input_grad(gy, w, pad, basis, False, "cufft", [2, 3]),
         (gy, w)),
        (lambda gy, x: fl.fft_conv2d_weight_grad(gy, x, pad, basis, False, "cufft", [2, 3]),
         (gy, x)),
    ]
    for fn, args in checks:
        assert gradcheck(fn, args)
        assert gradgradcheck(fn, args)


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
def test_tiled_opcheck(backend):
    case = Case(2, 2, 3, 7, 6, 3, 2, 1, 1, (8, 8))
    x, w, b, gy = cuda_tensors(case, requires_grad=True)
    opcheck_tiled(x, w, b, gy, case, backend)


# --- the module and the tuner ---------------------------------------------------------------------


@pytest.mark.parametrize("labels", [
    ("fbfft:32x32",) * 3,
    ("fbfft:16x16,tile=14x14", "fft:16x16,tile=14x14", "fbfft:8x8,tile=6x6"),
])
def test_module_with_fbfft_and_tiles_matches_nn_conv2d(labels):
    ref = nn.Conv2d(8, 6, 3, padding=1).cuda()
    m = fastlayers.Conv2d(8, 6, 3, padding=1).cuda()
    m.load_state_dict(ref.state_dict())
    m.force_algorithms(*labels)
    x = torch.randn(4, 8, 30, 27, device="cuda", requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    with cudnn_tf32(False):
        y = m(x)
        yr = ref(xr)
        gy = torch.randn_like(yr)
        y.backward(gy)
        yr.backward(gy)
    y64 = F.conv2d(x.double(), ref.weight.double(), ref.bias.double(), padding=1)
    assert_within_bound(y, y64, yr)
    g64 = torch.autograd.grad(y64, x, gy.double())[0]
    assert_within_bound(x.grad, g64, xr.grad)
    assert rel_err(m.weight.grad, ref.weight.grad) <= 1e-4


def test_tuner_candidates_on_cuda():
    x = torch.randn(2, 4, 40, 40, device="cuda")
    w = torch.randn(4, 4, 3, 3, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False)
    cands = tuner.candidates_conv2d(p, "forward")
    assert "fbfft:64x64" in cands and "fbfft:32x32,tile=30x30" in cands
    p64 = tuner.ConvProblem.from_tensors(x.double(), w.double(), (1, 1))
    assert not any(c.startswith("fbfft") for c in tuner.candidates_conv2d(p64, "forward"))
    assert "fft:32x32,tile=30x30" in tuner.candidates_conv2d(p64, "forward")


def test_tuner_measures_fbfft_and_tiles_on_gpu():
    tuner.set_budget(10.0)
    x = torch.randn(16, 32, 60, 60, device="cuda")
    w = torch.randn(32, 32, 3, 3, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False)
    for pass_ in tuner.PASSES:
        label = tuner.choose_conv2d(p, pass_)
        row = {r["key"]: r for r in tuner.decisions()}[p.key(pass_)]
        assert row["source"] == "tuned" and label in row["times_ms"]
        measured = set(row["times_ms"]) | set(row["skipped"])
        assert measured == set(tuner.candidates_conv2d(p, pass_))
        assert any("tile=" in c for c in row["times_ms"]), row
