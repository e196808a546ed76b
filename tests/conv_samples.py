"""Sample problems, PyTorch references and the tolerance rule shared by every test folder
(tests/fbfft, tests/fft_conv, and the module and tuner tests). Importable from any of them: the
folder of conftest.py is on sys.path."""
import contextlib
from typing import Iterator, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from fastlayers import tuner
from fastlayers.ops import conv_tf32_allowed, default_basis, good_fft_size

PASSES = ("forward", "input_grad", "weight_grad")

# --- The tolerance rule --------------------------------------------------------------------------
#
# A result's relative L2 error against the float64 result may be at most ERROR_FACTOR[precision]
# times the error of PyTorch's own computation in the same precision (DESIGN.md, "Precision
# contract"; flash-attention's rule). PyTorch's own error is the larger of two references': the
# direct convolution (F.conv2d and its backward) and the same FFT algorithm written in torch
# (`fft_reference`: torch.fft and a complex GEMM at the same basis). Both are needed: a short
# reduction (a 1x1 kernel) is one rounding in a direct convolution but a few per transform in any
# FFT, so FFT / direct reaches 7.8 on the shape matrix (fp32, CPU); a long reduction makes the
# direct error grow (to 1.6e-6) and not the FFT's. Against the larger of the two the FFT
# convolution's error is at most 1.05x (fp32) and 1.00x (fp16, bf16) over the matrix on CPU.
#
# Factors: 2 for float32 and TF32 (margin 1.9 on CPU, for GPU transforms and GEMMs that round in
# another order); 1.25 for float16 and bfloat16 (computed in float and rounded once, so a hair from
# the correctly rounded result, which no reference beats). Small enough that an output scaled by
# MUTATION[precision] fails every comparison of the matrix (fft_conv/test_fft_conv_values.py
# checks that in every case); with the direct reference alone no factor does both (the real
# output needs k >= 8, a k above 3 accepts the scaled fp32 output in some comparisons).
#
# No floor, except where every reference is exact (error 0, e.g. small integer-valued problems):
# then EXACT_FLOOR_ULPS ulps of the precision.
#
# The fbfft transforms follow the same rule against torch.fft (pocketfft, float32, on the CPU, whose
# reading of non-Hermitian edge bins fbfft shares) with TRANSFORM_FACTOR: pocketfft's mixed radices
# round fewer times than a GPU's radix-2 stages; fbfft and cuFFT differ by up to 1.5x pocketfft's
# own error on the benchmark's sizes.
#
# float64 results have no wider reference: they must match float64 PyTorch to FLOAT64_BOUND,
# thousands of times below any float32 error, so a float32 path or a wrong term cannot hide.
ERROR_FACTOR = {"float32": 2.0, "tf32": 2.0, "float16": 1.25, "bfloat16": 1.25}
TRANSFORM_FACTOR = 3.0
EXACT_FLOOR_ULPS = 4
FLOAT64_BOUND = 1e-10
# The wrong kernels the rule must reject: outputs scaled by (1 + MUTATION[precision]).
MUTATION = {"float32": 5e-6, "float16": 1.5e-3, "bfloat16": 1e-2}
# Unit in the last place at 1.0 (TF32 keeps 10 mantissa bits, as float16).
ULP = {"float32": 2.0 ** -23, "tf32": 2.0 ** -10, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7,
       "float64": 2.0 ** -52}
DTYPES = {"float32": torch.float32, "tf32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "float64": torch.float64}


def precision_of(dtype: torch.dtype, tf32: bool = False) -> str:
    name = str(dtype).replace("torch.", "")
    return "tf32" if tf32 and name == "float32" else name


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative L2 error of `out` against a float64 `ref` (a zero `ref`: 0 or infinity)."""
    ref = ref.double()
    diff, norm = (out.double() - ref).norm().item(), ref.norm().item()
    return diff / norm if norm > 0 else (0.0 if diff == 0 else float("inf"))


def error_bound(precision: str, reference_errors: Sequence[float],
                factor: Optional[float] = None) -> float:
    """The rule: factor x the largest same-precision reference error; a few ulps where all are 0."""
    worst = max(reference_errors)
    if worst == 0:
        return EXACT_FLOOR_ULPS * ULP[precision]
    return (ERROR_FACTOR[precision] if factor is None else factor) * worst


def assert_within_bound(out, ref, native, same_algorithm=None, precision: Optional[str] = None,
                        factor: Optional[float] = None, what: str = "",
                        floor: Optional[float] = None) -> float:
    """`out` is within the rule against the float64 `ref`. PyTorch's own results in the same
    precision: `native`, the direct computation (F.conv2d, convolution_backward), and optionally
    `same_algorithm`, PyTorch's computation by `out`'s algorithm (fft_reference for FFT
    convolution; the same reduction for a bias gradient). Returns the bound. `floor` raises the
    bound for callers that still pass one; the op tests pass none."""
    precision = precision or precision_of(native.dtype)
    assert out.dtype == native.dtype, "%s: dtype %s, PyTorch's %s" % (what, out.dtype, native.dtype)
    assert out.shape == ref.shape, "%s: shape %s, expected %s" % (what, tuple(out.shape),
                                                                  tuple(ref.shape))
    errors = [rel_err(native, ref)]
    if same_algorithm is not None:
        errors.append(rel_err(same_algorithm, ref))
    bound = max(error_bound(precision, errors, factor), floor or 0.0)
    err = rel_err(out, ref)
    assert err <= bound, (
        "%s (%s): relative error %.3e > bound %.3e; PyTorch's own: direct %.3e%s" % (
            what, precision, err, bound, errors[0],
            "" if len(errors) == 1 else ", same algorithm %.3e" % errors[1]))
    return bound


def assert_mutation_rejected(out, ref, bound: float, precision: str, what: str = "") -> None:
    """The rule's bound rejects `out` scaled by (1 + MUTATION[precision]), rounded to its dtype:
    a kernel that wrong cannot pass where the real one does."""
    scaled = (out.double() * (1 + MUTATION[precision])).to(out.dtype)
    err = rel_err(scaled, ref)
    assert err > bound, ("%s (%s): the output scaled by (1 + %g) has relative error %.3e, within "
                         "the bound %.3e: the rule cannot tell that kernel from the real one" % (
                             what, precision, MUTATION[precision], err, bound))


def assert_float64_matches(out, ref, what: str = "") -> None:
    assert out.dtype == torch.float64 and out.shape == ref.shape, (what, out.dtype, out.shape)
    err = rel_err(out, ref)
    assert err <= FLOAT64_BOUND, "%s (float64): relative error %.3e > %.0e" % (
        what, err, FLOAT64_BOUND)


@contextlib.contextmanager
def cudnn_tf32(enabled: bool):
    """PyTorch's TF32 switch for cuDNN convolution, which the FFT ops follow, set for a block."""
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        assert conv_tf32_allowed() == enabled
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


# --- Sample problems -----------------------------------------------------------------------------


class Case(NamedTuple):
    S: int
    C: int
    K: int
    H: int
    W: int
    kh: int
    kw: int
    ph: int
    pw: int
    basis: Tuple[int, int]

    @property
    def padding(self) -> Tuple[int, int]:
        return (self.ph, self.pw)

    @property
    def out_hw(self) -> Tuple[int, int]:
        return (self.H + 2 * self.ph - self.kh + 1, self.W + 2 * self.pw - self.kw + 1)

    def __str__(self) -> str:
        return "S%d-C%d-K%d-%dx%d-k%dx%d-p%dx%d-b%dx%d" % (tuple(self[:9]) + tuple(self.basis))


# S, C, K, H, W, kh, kw, ph, pw: every kernel size 1..13, padding 0..k-1, odd and even and
# rectangular images and kernels, channels 1..64, batch 1..8.
SHAPES = [
    (1, 1, 1, 1, 1, 1, 1, 0, 0),
    (1, 1, 1, 5, 5, 1, 1, 0, 0),
    (2, 3, 2, 40, 36, 1, 1, 0, 0),
    (1, 1, 1, 7, 7, 2, 2, 1, 1),
    (3, 2, 5, 6, 9, 2, 3, 0, 2),
    (2, 3, 4, 8, 8, 3, 3, 1, 1),
    (4, 5, 3, 9, 7, 3, 3, 0, 0),
    (1, 3, 2, 3, 3, 3, 3, 2, 2),
    (2, 4, 6, 10, 15, 4, 4, 3, 0),
    (8, 2, 3, 12, 11, 4, 2, 2, 1),
    (5, 6, 7, 16, 16, 5, 5, 2, 2),
    (1, 1, 8, 11, 20, 5, 3, 4, 1),
    (2, 16, 16, 14, 14, 6, 6, 0, 5),
    (3, 8, 1, 13, 17, 7, 7, 3, 3),
    (1, 4, 4, 7, 7, 7, 7, 0, 0),
    (2, 5, 3, 20, 9, 7, 1, 6, 0),
    (1, 3, 3, 9, 22, 1, 7, 0, 3),
    (6, 12, 24, 15, 16, 8, 8, 4, 7),
    (2, 7, 9, 24, 18, 9, 9, 4, 4),
    (1, 2, 2, 9, 9, 9, 9, 8, 8),
    (3, 32, 16, 18, 21, 10, 10, 5, 0),
    (1, 9, 5, 16, 28, 11, 11, 5, 10),
    (2, 1, 64, 16, 16, 11, 5, 0, 2),
    (1, 4, 8, 13, 13, 12, 12, 11, 6),
    (2, 6, 6, 25, 19, 13, 13, 6, 6),
    (1, 1, 1, 13, 13, 13, 13, 12, 12),
    (4, 64, 64, 16, 16, 3, 3, 1, 1),
    (2, 64, 32, 12, 12, 5, 5, 2, 2),
    (1, 32, 64, 20, 20, 13, 13, 6, 6),
    (7, 3, 10, 32, 32, 3, 3, 1, 1),
    (1, 2, 3, 1, 30, 1, 5, 0, 2),
    (2, 3, 2, 30, 1, 6, 1, 3, 0),
    (3, 5, 5, 10, 10, 12, 4, 1, 0),
    (1, 8, 16, 31, 33, 2, 4, 1, 3),
    (5, 10, 12, 17, 6, 8, 3, 7, 2),
    (8, 16, 8, 9, 9, 5, 5, 4, 4),
    (3, 48, 40, 11, 13, 3, 5, 2, 4),
]

# Small problems for gradcheck, gradgradcheck and opcheck.
SMALL_SHAPES = [
    (2, 2, 3, 5, 4, 3, 2, 1, 1),
    (1, 3, 2, 4, 6, 2, 3, 0, 2),
    (2, 1, 1, 3, 3, 3, 3, 2, 2),
]


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def bases(H: int, W: int, ph: int, pw: int):
    """The minimum (padded input), the fast size, the next power of two, and something larger."""
    hp, wp = H + 2 * ph, W + 2 * pw
    out = []
    for b in ((hp, wp), (good_fft_size(hp), good_fft_size(wp)), (_pow2(hp), _pow2(wp)),
              (_pow2(hp) + 5, 2 * _pow2(wp) + 3)):
        if b not in out:
            out.append(b)
    return out


def sample_cases(size: str = "full") -> Iterator[Case]:
    """Every sample problem: `full` for the correctness matrix, `small` for the gradient checks."""
    shapes = {"full": SHAPES, "small": SMALL_SHAPES}[size]
    for shape in shapes:
        all_bases = bases(*shape[3:5], *shape[7:9])
        for basis in all_bases if size == "full" else (all_bases[0], all_bases[-1]):
            yield Case(*shape, basis)


def pow2_basis(case: Case) -> Tuple[int, int]:
    """The smallest power-of-two basis (fbfft's sizes) holding the case's padded input."""
    return (max(2, _pow2(case.H + 2 * case.ph)), max(2, _pow2(case.W + 2 * case.pw)))


def fbfft_cases(size: str = "full") -> Iterator[Case]:
    """The sample problems whose power-of-two basis fbfft takes (sides up to 128), at that basis."""
    seen = set()
    for case in sample_cases(size):
        c = case._replace(basis=pow2_basis(case))
        if max(c.basis) <= 128 and c not in seen:
            seen.add(c)
            yield c


def make_tensors(case: Case, dtype=torch.float32, device="cpu", requires_grad=False):
    """x [S,C,H,W], w [K,C,kh,kw], b [K], gy [S,K,oh,ow]: drawn in float32 on the CPU, so every
    device and dtype sees the same values (rounded to the dtype)."""
    def t(*shape):
        v = torch.randn(*shape).to(device=device, dtype=dtype)
        return v.requires_grad_(requires_grad)
    return (t(case.S, case.C, case.H, case.W), t(case.K, case.C, case.kh, case.kw), t(case.K),
            t(case.S, case.K, *case.out_hw))


def skip_unless_supported(device: str, precision: str, backend: str = "cufft") -> None:
    """Skip the (device, precision, backend) combinations the ops or this suite do not run."""
    import pytest
    if device == "cpu" and precision == "tf32":
        pytest.skip("TF32 is a CUDA mode (the CPU kernel ignores `tf32`)")
    if device == "cpu" and precision in ("float16", "bfloat16"):
        pytest.skip("the half-precision matrix runs on CUDA (the CPU computes half in float; "
                    "tiled and autocast tests cover it there)")
    if device == "cuda" and precision == "float64" and backend == "fbfft":
        pytest.skip("fbfft computes in float32: float64 is refused on CUDA "
                    "(test_fbfft_rejects_float64_on_cuda)")


# --- PyTorch references --------------------------------------------------------------------------


def torch_passes(x, w, b, gy, padding):
    """PyTorch's own forward (with bias), input gradient and weight gradient."""
    pad = list(padding)
    y = F.conv2d(x, w, b, 1, pad)
    gx, gw, _ = torch.ops.aten.convolution_backward(gy, x, w, None, [1, 1], pad, [1, 1], False,
                                                    [0, 0], 1, [True, True, False])
    return y, gx, gw


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 values cut to TF32's 10 mantissa bits (truncation: the coarser of the conversions a
    TF32 GEMM may use)."""
    return (t.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def _spectral_gemm(equation, a, b, tf32):
    if tf32:  # (a conjugated view has no real view: resolve it first)
        a = torch.view_as_complex(round_tf32(torch.view_as_real(a.resolve_conj())))
        b = torch.view_as_complex(round_tf32(torch.view_as_real(b.resolve_conj())))
    return torch.einsum(equation, a, b)


def fft_reference(pass_: int, x, w, b, gy, padding, basis, tf32: bool = False):
    """One pass of the convolution by FFT, in torch only (torch.fft, a complex GEMM per frequency):
    PyTorch's computation of the same algorithm, in the precision of the inputs (half types are
    computed in float and rounded once, as the ops do; `tf32` rounds the GEMM operands). Uses x's
    and w's shapes for every pass; differentiable, so its gradients serve as references too."""
    dtype = x.dtype
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    ph, pw = padding
    H, W = x.shape[-2:]
    kh, kw = w.shape[-2:]
    oh, ow = H + 2 * ph - kh + 1, W + 2 * pw - kw + 1
    s = tuple(basis)

    def spectrum(t, pad=False):
        t = t.to(ct)
        return torch.fft.rfft2(F.pad(t, (pw, pw, ph, ph)) if pad else t, s=s)

    if pass_ == 0:
        Y = _spectral_gemm("scij,kcij->skij", spectrum(x, True), spectrum(w).conj(), tf32)
        y = torch.fft.irfft2(Y, s=s)[..., :oh, :ow]
        if b is not None:
            y = y + b.to(ct)[:, None, None]
        return y.to(dtype)
    if pass_ == 1:
        GX = _spectral_gemm("skij,kcij->scij", spectrum(gy), spectrum(w), tf32)
        return torch.fft.irfft2(GX, s=s)[..., ph:ph + H, pw:pw + W].to(dtype)
    GW = _spectral_gemm("skij,scij->kcij", spectrum(gy).conj(), spectrum(x, True), tf32)
    return torch.fft.irfft2(GW, s=s)[..., :kh, :kw].to(dtype)


def fft_reference_passes(x, w, b, gy, padding, basis=None, tf32=False):
    """fft_reference's three passes; `basis` defaults to the smallest fast one."""
    basis = basis or default_basis(x.shape[-2:], padding)
    return tuple(fft_reference(i, x, w, b, gy, padding, basis, tf32) for i in range(3))


def fft_passes(x, w, b, gy, padding, basis, tf32=False, backend="cufft", tile=(0, 0)):
    """The three ops, forward / input grad / weight grad (`tile`, cut to x for the input grad)."""
    ops = torch.ops.fastlayers
    H, W = x.shape[-2:]
    gx_tile = [min(tile[0], H), min(tile[1], W)]
    return (ops.fft_conv2d(x, w, b, padding, basis, tf32, backend, list(tile)),
            ops.fft_conv2d_input_grad(gy, w, padding, basis, tf32, backend, gx_tile),
            ops.fft_conv2d_weight_grad(gy, x, padding, basis, tf32, backend, list(tile)))


def check_passes(ours, x, w, b, gy, padding, precision: str, basis=None, mutation=False,
                 what: str = "") -> None:
    """Each of `ours` (forward, input grad, weight grad of x, w, b, gy; None: not checked) against
    float64 PyTorch within the rule; with `mutation`, also that the rule rejects each one scaled
    by MUTATION[precision]. `basis`: fft_reference's (default: the smallest fast one)."""
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), padding)
    if precision == "float64":
        for name, out, r in zip(PASSES, ours, ref):
            if out is not None:
                assert_float64_matches(out, r, "%s %s on %s" % (what, name, out.device.type))
        return
    tf32 = precision == "tf32"
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, padding)
    basis = basis or default_basis(x.shape[-2:], padding)
    for i, (name, out, r, n) in enumerate(zip(PASSES, ours, ref, native)):
        if out is None:
            continue
        f = fft_reference(i, x, w, b, gy, padding, basis, tf32)
        where = "%s %s on %s" % (what, name, out.device.type)
        bound = assert_within_bound(out, r, n, f, precision, what=where)
        if mutation:
            assert_mutation_rejected(out, r, bound, precision, where)


# --- recording op calls --------------------------------------------------------------------------


class RecordOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the fastlayers ops that run: (name, args); trailing default arguments are not
    recorded, so read them with backend_of / tile_of. names_only: (name, None), so that no
    tensor of a call outlives it (kept arguments move the allocator's later blocks, and with them
    the addresses a cached graph's key holds)."""

    def __init__(self, names_only=False):
        super().__init__()
        self.calls = []
        self.names_only = names_only

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "fastlayers":
            self.calls.append((func._opname, None if self.names_only else args))
        return func(*args, **(kwargs or {}))


def python_autograd_calls(fn) -> list:
    """The functions of torch.library's Python autograd (torch/_library/autograd.py) that fn()
    enters on this thread: what a module's eager C++ node must not go through."""
    import sys
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("_library/autograd.py"):
            seen.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def ops_of(fn):
    """fn()'s result and the names of the fastlayers ops it ran, in order (RecordOps)."""
    with RecordOps() as rec:
        out = fn()
    return out, [name for name, _ in rec.calls]


def backend_of(args) -> str:
    return next((a for a in args if isinstance(a, str)), "cufft")


def tile_of(args):
    i = next((i for i, a in enumerate(args) if isinstance(a, str)), None)
    return list(args[i + 1]) if i is not None and i + 1 < len(args) else [0, 0]


def case_tile_id(spec) -> str:
    case, tile = spec
    return "%s-t%dx%d" % (case, *tile)


# --- opcheck -------------------------------------------------------------------------------------


def opcheck_specs(dtypes=(torch.float32,)):
    """(variant, case, dtype, grads) for torch.library.opcheck; see opcheck_args."""
    for case in list(sample_cases("small"))[::2]:
        for dtype in dtypes:
            for grads in ("none", "first", "all"):
                for variant in ("forward", "forward-nobias-tf32", "input_grad", "weight_grad"):
                    yield variant, case, dtype, grads


def opcheck_id(spec) -> str:
    variant, case, dtype, grads = spec
    return "%s-%s-%s-grad=%s" % (variant, case, str(dtype).replace("torch.", ""), grads)


def opcheck_args(variant, case, dtype, grads, device="cpu", backend="cufft", tile=(0, 0)):
    """The op and its arguments; `first` makes the op's first tensor need a gradient."""
    x, w, b, gy = make_tensors(case, dtype, device)
    if grads != "none":
        x.requires_grad_(), gy.requires_grad_()
    if grads == "all":
        w.requires_grad_(), b.requires_grad_()
    pad, basis, tile = list(case.padding), list(case.basis), list(tile)
    fl = torch.ops.fastlayers
    return {
        "forward": (fl.fft_conv2d.default, (x, w, b, pad, basis, False, backend, tile)),
        "forward-nobias-tf32": (fl.fft_conv2d.default, (x, w, None, pad, basis, True, backend,
                                                        tile)),
        "input_grad": (fl.fft_conv2d_input_grad.default, (gy, w, pad, basis, False, backend,
                                                          tile)),
        "weight_grad": (fl.fft_conv2d_weight_grad.default, (gy, x, pad, basis, False, backend,
                                                            tile)),
    }[variant]


# --- modules -------------------------------------------------------------------------------------


def module_fft_label(m, hw) -> str:
    """'fft:NHxNW', the smallest fast basis holding a Conv2d module's padded input of size hw."""
    left, right, top, bottom = m._reversed_padding_repeated_twice
    return "fft:%dx%d" % default_basis((hw[0] + top + bottom, hw[1] + left + right), 0)


def assert_training_matches(ref, fast, batch, hw, device="cpu", steps=5):
    """SGD steps on `ref` (nn.Conv2d) and `fast` (fastlayers) side by side: same losses and
    parameters, to float32 accuracy."""
    import pytest
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    opt_fast = torch.optim.SGD(fast.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x = torch.randn(batch, 3, *hw, device=device)
        target = torch.randint(0, 5, (batch,), device=device)
        losses = []
        for model, opt in ((ref, opt_ref), (fast, opt_fast)):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-4), step
    for (name, p), q in zip(fast.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


# --- measuring the rule --------------------------------------------------------------------------


def measure(device: str = "cpu", precisions=("float32",), backend: str = "cufft") -> None:
    """Prints, per precision over the shape matrix, how the FFT ops' errors compare with PyTorch's
    own (what ERROR_FACTOR rests on) and whether the rule rejects the scaled outputs:
    `PYTHONPATH=python:tests python3 tests/conv_samples.py cuda float16 bfloat16 float32 tf32`."""
    cases = list(fbfft_cases("full") if backend == "fbfft" else sample_cases("full"))
    for precision in precisions:
        rows = []
        for case in cases:
            x, w, b, gy = make_tensors(case, DTYPES[precision], device)
            tf32 = precision == "tf32"
            ours = fft_passes(x, w, b, gy, case.padding, case.basis, tf32, backend)
            ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
            with cudnn_tf32(tf32):
                native = torch_passes(x, w, b, gy, case.padding)
            for i, (o, r, n) in enumerate(zip(ours, ref, native)):
                f = fft_reference(i, x, w, b, gy, case.padding, case.basis, tf32)
                errs = [rel_err(n, r), rel_err(f, r)]
                bound = error_bound(precision, errs)
                row = dict(what="%s %s" % (case, PASSES[i]), ours=rel_err(o, r), direct=errs[0],
                           fft=errs[1], bound=bound)
                if precision in MUTATION:
                    scaled = (o.double() * (1 + MUTATION[precision])).to(o.dtype)
                    row["scaled"] = rel_err(scaled, r)
                rows.append(row)

        def stats(values):
            values = sorted(values)
            return "median %.3g, p99 %.3g, max %.3g" % (
                values[len(values) // 2], values[min(len(values) - 1, int(0.99 * len(values)))],
                values[-1])

        print("%s %s %s: %d comparisons" % (device, backend, precision, len(rows)))
        print("  ours / direct:             " + stats([r["ours"] / max(r["direct"], 1e-300)
                                                       for r in rows]))
        print("  ours / max(direct, fft):   " + stats([r["ours"] / max(r["direct"], r["fft"],
                                                                       1e-300) for r in rows]))
        print("  direct error:              " + stats([r["direct"] for r in rows]))
        failed = [r for r in rows if r["ours"] > r["bound"]]
        print("  real output over the bound: %d" % len(failed))
        for r in failed[:10]:
            print("    %(what)s: %(ours).3e > %(bound).3e (direct %(direct).3e, fft %(fft).3e)" % r)
        if precision in MUTATION:
            passed = [r for r in rows if r["ours"] <= r["bound"]]
            kept = [r for r in passed if r["scaled"] <= r["bound"]]
            print("  scaled by (1 + %g): rejected in %d of %d comparisons the real output passes;"
                  " smallest scaled error / bound %.2f" % (
                      MUTATION[precision], len(passed) - len(kept), len(passed),
                      min(r["scaled"] / r["bound"] for r in passed)))


if __name__ == "__main__":
    import sys
    args = sys.argv[1:] or ["cpu"]
    device, rest = args[0], args[1:]
    backend = "fbfft" if "fbfft" in rest else "cufft"
    torch.manual_seed(0)
    measure(device, [p for p in rest if p != "fbfft"] or ["float32"], backend)


def pass_decisions():
    """The tuner's decisions for single passes: its layer checks (tuner.conv2d.LayerCheck, made
    in an eager training step whose tuned passes are not all PyTorch's) left out."""
    return [r for r in tuner.decisions() if ".layer|" not in r["key"]]
