"""Tiled FFT convolution (overlap-save): the `tile` argument of the three ops, on the CPU."""
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

import fastlayers
from fastlayers import _C, ops, tuner
from conv_samples import (Case, assert_within_bound, make_tensors, opcheck_tiled, rel_err,
                          torch_passes)

PASSES = ("forward", "input_grad", "weight_grad")
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
    pad = case.padding
    if pass_ == "forward":
        return fl.fft_conv2d(x, w, b, pad, basis, tf32, backend, tile)
    if pass_ == "input_grad":
        return fl.fft_conv2d_input_grad(gy, w, pad, basis, tf32, backend, tile)
    return fl.fft_conv2d_weight_grad(gy, x, pad, basis, tf32, backend, tile)


TILED = [(Case(*shape, (0, 0)), pass_, tile)
         for shape in SHAPES for pass_ in PASSES for tile in tiles_for(Case(*shape, (0, 0)), pass_)]


def tiled_id(spec):
    case, pass_, tile = spec
    return "%s-%s-t%dx%d" % (pass_, "S%d-C%d-K%d-%dx%d-k%dx%d-p%dx%d" % tuple(case[:9]), *tile)


@pytest.mark.parametrize("spec", TILED, ids=tiled_id)
def test_tiled_equals_untiled_and_pytorch(spec):
    case, pass_, tile = spec
    x, w, b, gy = make_tensors(case, torch.float64)
    ref = torch_passes(x, w, b, gy, case.padding)[PASSES.index(pass_)]
    untiled = run_pass(pass_, x, w, b, gy, case, ops.default_basis((case.H, case.W), case.padding),
                       (0, 0))
    for basis in (min_basis(case, tile), pow2_basis(case, tile)):
        for backend in ("cufft", "fbfft") if max(basis) <= ops.FBFFT_MAX_BASIS \
                and basis == pow2_basis(case, tile) \
                else ("cufft",):
            if backend == "fbfft" and min(basis) < 2:
                continue
            out = run_pass(pass_, x, w, b, gy, case, basis, tile, backend)
            assert out.shape == ref.shape and out.dtype == torch.float64
            assert rel_err(out, ref) <= 1e-10, (basis, backend)
            assert rel_err(out, untiled) <= 1e-10, (basis, backend)


@pytest.mark.parametrize("pass_", PASSES)
def test_tiled_float32_within_pytorch_error(pass_):
    case = Case(4, 16, 8, 27, 21, 3, 5, 1, 2, (16, 16))
    tile = (14, 12)
    x, w, b, gy = make_tensors(case, torch.float32)
    i = PASSES.index(pass_)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)[i]
    native = torch_passes(x, w, b, gy, case.padding)[i]
    for backend in ("cufft", "fbfft"):
        out = run_pass(pass_, x, w, b, gy, case, case.basis, tile, backend)
        assert_within_bound(out, ref, native, what="%s %s" % (pass_, backend))


def test_tiled_fbfft_equals_tiled_cufft():
    case = Case(3, 4, 5, 19, 14, 3, 4, 1, 2, (16, 16))
    x, w, b, gy = make_tensors(case, torch.float64)
    for pass_ in PASSES:
        tile = (10, 9)
        a = run_pass(pass_, x, w, b, gy, case, case.basis, tile, "cufft")
        f = run_pass(pass_, x, w, b, gy, case, case.basis, tile, "fbfft")
        torch.testing.assert_close(f, a, rtol=0, atol=0, msg=pass_)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiled_half_precision_on_cpu(dtype):
    case = Case(2, 4, 3, 12, 10, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float32)
    for i, pass_ in enumerate(PASSES):
        ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)[i]
        low = [t.to(dtype) for t in (x, w, b, gy)]
        native = torch_passes(*low, case.padding)[i]
        out = run_pass(pass_, *low, case, case.basis, (6, 6))
        assert out.dtype == dtype
        assert_within_bound(out, ref, native, what=pass_)


# --- chunking ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pass_", PASSES)
def test_chunks_give_the_same_result(pass_):
    case = Case(5, 3, 4, 13, 11, 3, 2, 1, 0, (8, 8))
    tile = (5, 6)
    x, w, b, gy = make_tensors(case, torch.float64)
    whole = run_pass(pass_, x, w, b, gy, case, case.basis, tile)
    i = PASSES.index(pass_)
    args = (i, case.S, case.C, case.K, case.H, case.W, case.kh, case.kw, case.ph, case.pw,
            case.basis[0], case.basis[1], 8, tile[0], tile[1])
    assert _C._tile_chunk_samples(*args) == case.S  # everything in one chunk by default
    # The bytes of a chunk of two samples: those of the same pass with a batch of two.
    two = _C.fft_conv2d_workspace_bytes(i, 2, *args[2:13], "cufft", *tile)
    for limit, samples in ((1, 1), (two, 2), (two - 1, 1)):
        with ops._tile_chunk_limit(limit):
            assert _C._tile_chunk_bytes() == limit
            assert _C._tile_chunk_samples(*args) == samples
            chunked = run_pass(pass_, x, w, b, gy, case, case.basis, tile)
        assert chunked.shape == whole.shape
        if pass_ == "weight_grad":  # summed over chunks: another order of addition
            torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=1e-12)
        else:  # every sample's tiles see the same arithmetic
            torch.testing.assert_close(chunked, whole, rtol=0, atol=0)
    assert _C._tile_chunk_bytes() == 512 << 20


def test_chunked_weight_grad_accumulates_half_precision_in_float():
    case = Case(6, 2, 3, 10, 10, 3, 3, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float32)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)[2]
    xb, gyb = x.bfloat16(), gy.bfloat16()
    native = torch_passes(xb, w.bfloat16(), b.bfloat16(), gyb, case.padding)[2]
    with ops._tile_chunk_limit(1):
        out = fl.fft_conv2d_weight_grad(gyb, xb, case.padding, case.basis, False, "cufft", [6, 6])
    assert out.dtype == torch.bfloat16
    assert_within_bound(out, ref, native)


def test_workspace_bytes_of_a_tiled_pass():
    # A large image tiled needs far less than untiled, and one chunk at most the bound.
    args = (0, 64, 32, 32, 256, 256, 3, 3, 1, 1)
    untiled = _C.fft_conv2d_workspace_bytes(*args, 256, 256, 4)
    tiled = _C.fft_conv2d_workspace_bytes(*args, 32, 32, 4, "fbfft", 30, 30)
    assert tiled <= _C._tile_chunk_bytes() < untiled
    with ops._tile_chunk_limit(tiled // 4):
        assert _C.fft_conv2d_workspace_bytes(*args, 32, 32, 4, "fbfft", 30, 30) <= tiled // 4


def test_empty_batch_tiled():
    case = Case(0, 3, 4, 7, 6, 3, 2, 1, 0, (8, 8))
    x, w, b, gy = make_tensors(case)
    y = fl.fft_conv2d(x, w, b, case.padding, case.basis, False, "cufft", [3, 3])
    gx = fl.fft_conv2d_input_grad(gy, w, case.padding, case.basis, False, "cufft", [3, 3])
    gw = fl.fft_conv2d_weight_grad(gy, x, case.padding, case.basis, False, "cufft", [3, 3])
    assert y.shape == (0, 4, 7, 5) and gx.shape == (0, 3, 7, 6)
    assert gw.shape == (4, 3, 3, 2) and not gw.any()


# --- gradients -----------------------------------------------------------------------------------

GRAD_CASES = [
    (Case(2, 2, 3, 5, 6, 3, 2, 1, 1, (4, 4)), (2, 3), "cufft"),
    (Case(1, 2, 2, 7, 4, 2, 3, 0, 1, (4, 4)), (3, 2), "fbfft"),
    (Case(2, 1, 2, 4, 5, 1, 1, 2, 1, (4, 4)), (4, 3), "fbfft"),  # tile > H: cut for input grad
]


@pytest.mark.parametrize("spec", GRAD_CASES, ids=lambda s: "%s-t%dx%d-%s" % (s[0], *s[1], s[2]))
def test_gradcheck_tiled(spec):
    case, tile, backend = spec
    x, w, b, gy = make_tensors(case, torch.float64, requires_grad=True)
    pad, basis = case.padding, case.basis
    gx_tile = (min(tile[0], case.H), min(tile[1], case.W))
    checks = [
        (lambda x, w, b: fl.fft_conv2d(x, w, b, pad, basis, False, backend, tile), (x, w, b)),
        (lambda gy, w: fl.fft_conv2d_input_grad(gy, w, pad, basis, False, backend, gx_tile),
         (gy, w)),
        (lambda gy, x: fl.fft_conv2d_weight_grad(gy, x, pad, basis, False, backend, tile),
         (gy, x)),
    ]
    for fn, args in checks:
        assert gradcheck(fn, args)
        assert gradgradcheck(fn, args)


def test_backward_keeps_backend_and_tile():
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
    assert seen == [("fft_conv2d", "fbfft", [6, 5]),
                    ("fft_conv2d_input_grad", "fbfft", [6, 5]),
                    ("fft_conv2d_weight_grad", "fbfft", [6, 5])] or sorted(seen) == sorted(
        [("fft_conv2d", "fbfft", [6, 5]), ("fft_conv2d_input_grad", "fbfft", [6, 5]),
         ("fft_conv2d_weight_grad", "fbfft", [6, 5])])
    ref = torch.autograd.grad(F.conv2d(x, w, b, padding=case.padding), (x, w), gy)
    assert rel_err(gx, ref[0]) <= 1e-10 and rel_err(gw, ref[1]) <= 1e-10


# --- opcheck -------------------------------------------------------------------------------------


@pytest.mark.parametrize("grads", ["none", "all"])
@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
def test_opcheck_tiled(backend, grads):
    case = Case(2, 2, 3, 7, 6, 3, 2, 1, 1, (8, 8))
    x, w, b, gy = make_tensors(case, torch.float32)
    if grads == "all":
        for t in (x, w, b, gy):
            t.requires_grad_()
    opcheck_tiled(x, w, b, gy, case, backend)


# --- wrappers and the module -----------------------------------------------------------------------


def test_python_wrappers_take_the_tile():
    case = Case(2, 3, 4, 20, 15, 3, 5, 1, 2, (0, 0))
    x, w, b, gy = make_tensors(case, torch.float64)
    ref = torch_passes(x, w, b, gy, case.padding)
    got = (ops.fft_conv2d(x, w, b, padding=(1, 2), tile=(6, 4)),
           ops.fft_conv2d_input_grad(gy, w, padding=(1, 2), tile=6, backend="fbfft"),
           ops.fft_conv2d_weight_grad(gy, x, padding=(1, 2), tile=(6, 4)))
    for g, r in zip(got, ref):
        assert rel_err(g, r) <= 1e-10
    assert rel_err(ops.conv2d(x, w, b, padding="same", tile=(5, 5), backend="fbfft"),
                   F.conv2d(x, w, b, padding="same")) <= 1e-10
    assert ops._basis_for((20, 15), (1, 2), None, "fbfft", (6, 4), (3, 5)) == (8, 8)
    assert ops._basis_for((20, 15), (1, 2), None, "cufft", (6, 4), (3, 5)) == (8, 8)
    assert ops._basis_for((20, 15), (1, 2), None, "cufft", (9, 7), (3, 5)) == (12, 12)


@pytest.mark.parametrize("labels", [
    ("fft:8x8,tile=6x6",) * 3,
    ("fbfft:8x8,tile=6x6", "fft:16x16,tile=13x9", "fbfft:16x16,tile=14x14"),
    ("fbfft:8x8,tile=6x6", "native", "fft:8x8,tile=6x6"),
])
def test_module_runs_tiled_labels(labels):
    ref = torch.nn.Conv2d(3, 4, 3, padding=1).double()
    m = fastlayers.Conv2d(3, 4, 3, padding=1).double()
    m.load_state_dict(ref.state_dict())
    m.force_algorithms(*labels)
    x = torch.randn(2, 3, 17, 14, dtype=torch.float64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    y = m(x)
    yr = ref(xr)
    gy = torch.randn_like(yr)
    y.backward(gy)
    yr.backward(gy)
    assert rel_err(y, yr) <= 1e-10 and rel_err(x.grad, xr.grad) <= 1e-10
    assert rel_err(m.weight.grad, ref.weight.grad) <= 1e-10


def test_labels_round_trip():
    for basis, backend, tile in itertools.product([(8, 8), (16, 12)], ("cufft", "fbfft"),
                                                  [(0, 0), (6, 5)]):
        label = tuner.fft_label(basis, backend, tile)
        assert tuner.fft_args(label) == (basis, backend, tile)
    assert tuner.fft_label((16, 16)) == "fft:16x16"
    assert tuner.fft_label((16, 16), "fbfft", (14, 13)) == "fbfft:16x16,tile=14x13"
    for bad in ("fft:16x16,tile=", "fft:16x16,tile=0x4", "fbfft:8", "fft:16x16,tiles=4x4"):
        with pytest.raises(ValueError):
            tuner.fft_args(bad)
    with pytest.raises(ValueError):
        fastlayers.Conv2d(3, 4, 3).force_algorithms(forward="fft:8x8,tile=axb")


def test_compile_fullgraph_tiled():
    torch._dynamo.reset()
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    m.force_algorithms("fbfft:8x8,tile=6x6", "fft:8x8,tile=6x6", "fbfft:16x16,tile=10x9")
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 3, 13, 11)

    def run(fn):
        m.zero_grad()
        xi = x.clone().requires_grad_()
        y = fn(xi)
        y.pow(2).sum().backward()
        return [y.detach(), xi.grad, m.weight.grad.clone(), m.bias.grad.clone()]

    for e, g in zip(run(m), run(compiled)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


# --- errors --------------------------------------------------------------------------------------


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


X, Wt, GY = (1, 3, 9, 9), (2, 3, 3, 3), (1, 2, 7, 7)
BAD = {
    "negative": (lambda: fl.fft_conv2d(_t(*X), _t(*Wt), None, [0, 0], [8, 8], False, "cufft",
                                       [-1, 4]),
                 r"fft_conv2d: `tile` must be >= 0, got \[-1, 4\]"),
    "one-zero": (lambda: fl.fft_conv2d(_t(*X), _t(*Wt), None, [0, 0], [8, 8], False, "cufft",
                                       [0, 4]),
                 r"`tile` must be \[0, 0\] \(untiled\) or have both sides positive, got \[0, 4\]"),
    "one-zero-input_grad": (lambda: fl.fft_conv2d_input_grad(_t(*GY), _t(*Wt), [0, 0], [8, 8],
                                                             False, "cufft", [3, 0]),
                            r"fft_conv2d_input_grad: `tile` must be \[0, 0\]"),
    "larger-than-output": (lambda: fl.fft_conv2d(_t(*X), _t(*Wt), None, [0, 0], [16, 16], False,
                                                 "cufft", [8, 7]),
                           r"`tile` \[8, 7\] is larger than the output \(7, 7\)"),
    "larger-than-input-grad": (lambda: fl.fft_conv2d_input_grad(_t(*GY), _t(*Wt), [0, 0],
                                                                [16, 16], False, "cufft", [9, 10]),
                               r"`tile` \[9, 10\] is larger than the input gradient \(9, 9\)"),
    "larger-than-output-weight_grad": (lambda: fl.fft_conv2d_weight_grad(
        _t(*GY), _t(*X), [0, 0], [16, 16], False, "cufft", [2, 8]),
        r"fft_conv2d_weight_grad: `tile` \[2, 8\] is larger than the output \(7, 7\)"),
    "basis-below-tile": (lambda: fl.fft_conv2d(_t(*X), _t(*Wt), None, [0, 0], [8, 6], False,
                                               "cufft", [5, 5]),
                         r"`basis` \[8, 6\] must be at least `tile` \+ kernel - 1 \(7, 7\)"),
    "basis-below-tile-input_grad": (lambda: fl.fft_conv2d_input_grad(
        _t(*GY), _t(*Wt), [0, 0], [7, 6], False, "cufft", [5, 5]),
        r"fft_conv2d_input_grad: `basis` \[7, 6\] must be at least `tile` \+ kernel - 1"),
    "fbfft-basis-tiled": (lambda: fl.fft_conv2d(_t(*X), _t(*Wt), None, [0, 0], [7, 7], False,
                                                "fbfft", [5, 5]),
                          r"`basis` \[7, 7\] is not supported by `backend` \"fbfft\""),
    "length": (lambda: fl.fft_conv2d(_t(*X), _t(*Wt), None, [0, 0], [8, 8], False, "cufft",
                                     [2, 2, 2]),
               r"tile"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_tiles_name_the_argument(name):
    call, message = BAD[name]
    with pytest.raises(RuntimeError, match=message):
        call()


def test_untiled_still_needs_the_padded_input_in_the_basis():
    with pytest.raises(RuntimeError, match="must be at least the padded input size"):
        fl.fft_conv2d(_t(*X), _t(*Wt), None, [1, 1], [8, 8], False, "cufft", [0, 0])
