"""Sample problems and reference helpers shared by the correctness, gradient and opcheck tests."""
import contextlib
from typing import Iterator, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F

from fastlayers.ops import conv_tf32_allowed, default_basis, good_fft_size
from fastlayers.tuner import ERROR_FLOOR, error_floor

# Relative L2 error a result may have against a float64 reference: at most twice PyTorch's own
# error in the same dtype, and never held below the dtype's floor; the tuner applies the same rule.
TF32_FLOOR = error_floor(torch.float32, True)


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


def make_tensors(case: Case, dtype=torch.float32, device="cpu", requires_grad=False):
    """x [S,C,H,W], w [K,C,kh,kw], b [K], gy [S,K,oh,ow]."""
    def t(*shape):
        return torch.randn(*shape, dtype=dtype, device=device, requires_grad=requires_grad)
    return (t(case.S, case.C, case.H, case.W), t(case.K, case.C, case.kh, case.kw), t(case.K),
            t(case.S, case.K, *case.out_hw))


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


def opcheck_args(variant, case, dtype, grads, device="cpu"):
    """The op and its arguments; `first` makes the op's first tensor need a gradient."""
    x, w, b, gy = make_tensors(case, dtype, device)
    if grads != "none":
        x.requires_grad_(), gy.requires_grad_()
    if grads == "all":
        w.requires_grad_(), b.requires_grad_()
    pad, basis = list(case.padding), list(case.basis)
    fl = torch.ops.fastlayers
    return {
        "forward": (fl.fft_conv2d.default, (x, w, b, pad, basis, False)),
        "forward-nobias-tf32": (fl.fft_conv2d.default, (x, w, None, pad, basis, True)),
        "input_grad": (fl.fft_conv2d_input_grad.default, (gy, w, pad, basis, False)),
        "weight_grad": (fl.fft_conv2d_weight_grad.default, (gy, x, pad, basis, False)),
    }[variant]


def module_fft_label(m, hw) -> str:
    """'fft:NHxNW', the smallest fast basis holding a Conv2d module's padded input of size hw."""
    left, right, top, bottom = m._reversed_padding_repeated_twice
    return "fft:%dx%d" % default_basis((hw[0] + top + bottom, hw[1] + left + right), 0)


def torch_passes(x, w, b, gy, padding):
    """PyTorch's own forward (with bias), input gradient and weight gradient."""
    pad = list(padding)
    y = F.conv2d(x, w, b, 1, pad)
    gx, gw, _ = torch.ops.aten.convolution_backward(gy, x, w, None, [1, 1], pad, [1, 1], False,
                                                    [0, 0], 1, [True, True, False])
    return y, gx, gw


def fft_passes(x, w, b, gy, padding, basis, tf32=False, backend="cufft"):
    ops = torch.ops.fastlayers
    return (ops.fft_conv2d(x, w, b, padding, basis, tf32, backend),
            ops.fft_conv2d_input_grad(gy, w, padding, basis, tf32, backend),
            ops.fft_conv2d_weight_grad(gy, x, padding, basis, tf32, backend))


def opcheck_tiled(x, w, b, gy, case: Case, backend: str) -> None:
    """torch.library.opcheck of the three ops tiled (tiles 3x4, 4x3 and 2x5), on x's device."""
    fl = torch.ops.fastlayers
    pad, basis = list(case.padding), list(case.basis)
    torch.library.opcheck(fl.fft_conv2d.default, (x, w, b, pad, basis, False, backend, [3, 4]))
    torch.library.opcheck(fl.fft_conv2d_input_grad.default,
                          (gy, w, pad, basis, False, backend, [4, 3]))
    torch.library.opcheck(fl.fft_conv2d_weight_grad.default,
                          (gy, x, pad, basis, False, backend, [2, 5]))


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


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative L2 error of `out` against a float64 `ref`."""
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm()).item()


def error_bound(dtype: torch.dtype, torch_err: float, floor: Optional[float] = None) -> float:
    return max(2 * torch_err, ERROR_FLOOR[dtype] if floor is None else floor)


def assert_within_bound(out, ref, native, floor=None, what=""):
    """`out` is at most twice as far from the float64 `ref` as PyTorch's `native` result."""
    assert out.dtype == native.dtype, what
    assert out.shape == ref.shape, what
    err, torch_err = rel_err(out, ref), rel_err(native, ref)
    bound = error_bound(native.dtype, torch_err, floor)
    assert err <= bound, "%s: relative error %.3e > bound %.3e (PyTorch's own %.3e)" % (
        what, err, bound, torch_err)


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
