"""Argument helpers shared by the op wrappers: int pairs and PyTorch's TF32 switch for convolution."""
from __future__ import annotations

import operator
from typing import Sequence, Tuple, Union

import torch

IntPair = Union[int, Sequence[int]]


def pair(v: IntPair, name: str) -> Tuple[int, int]:
    """(v, v) for an int or a 1-sequence, the pair for a 2-sequence; ValueError naming `name` for
    anything else (a float, a string such as 'same', another length)."""
    try:
        if not isinstance(v, (str, bytes)) and (
                not hasattr(v, "__len__") or isinstance(v, torch.Tensor) and v.dim() == 0):
            n = operator.index(v)
            return (n, n)
        t = tuple(operator.index(x) for x in v) if not isinstance(v, (str, bytes)) else ()
    except TypeError:
        t = ()
    if len(t) == 1:
        return (t[0], t[0])
    if len(t) != 2:
        raise ValueError(f"`{name}` must be an int or a pair of ints, got {v!r}")
    return t  # type: ignore[return-value]


def conv_tf32_allowed() -> bool:
    """Whether PyTorch currently allows TF32 for fp32 convolution (cuDNN's switch, through either
    `torch.backends.cudnn.allow_tf32` or `torch.backends.cudnn.conv.fp32_precision`).

    Under torch.compile the value is read once, when the graph is traced."""
    return _conv_tf32_allowed()


@torch.compiler.assume_constant_result
def _conv_tf32_allowed() -> bool:
    from . import _C
    return bool(_C.conv_tf32_allowed())


def same_padding(kernel, dilation=None) -> Tuple[list, list]:
    """'same' padding as F.conv*d resolves it, per spatial dimension: (before, after), the odd
    extra of an even window after the input."""
    dilation = dilation or (1,) * len(kernel)
    total = [d * (k - 1) for d, k in zip(dilation, kernel)]
    return [t // 2 for t in total], [t - t // 2 for t in total]


def max_plane() -> int:
    """Elements per side and per plane the convolution ops and fbfft's inverses take."""
    from . import _C
    return int(_C.FFT_CONV_MAX_PLANE)


def check_fake_conv(op: str, padding, sizes) -> None:
    """What the convolution ops check of `padding` and of their result's spatial `sizes`, for
    their fake kernels: a traced call then fails as the eager one does, with the argument named,
    not later on a negative or overflowing size."""
    limit = max_plane()
    for p in padding:
        torch._check(p >= 0, lambda: f"{op}: `padding` must be >= 0, got {list(padding)}")
        torch._check(p <= limit, lambda: f"{op}: `padding` {list(padding)} is too large: the ops "
                                         f"take at most {limit} elements per side")
    for n in sizes:
        torch._check(n >= 1, lambda: f"{op}: the result would be empty (spatial size "
                                     f"{list(sizes)}): the kernel is larger than the padded "
                                     f"input, or `padding` too large for grad_output")


# C++'s names of the scalar types, which the ops' messages print.
_SCALAR_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
                 torch.bfloat16: "BFloat16", torch.int8: "Char", torch.uint8: "Byte",
                 torch.int16: "Short", torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool",
                 torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}
_OPERAND_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def scalar_name(dtype: torch.dtype) -> str:
    return _SCALAR_NAMES.get(dtype, str(dtype))


def _check_fake_operand(op: str, name: str, t) -> None:
    torch._check(t.dim() == 4, lambda: f"{op}: `{name}` must be 4-D, got {t.dim()}-D tensor of "
                                       f"shape {list(t.shape)}")
    torch._check(t.dtype in _OPERAND_DTYPES,
                 lambda: f"{op}: `{name}` has dtype {scalar_name(t.dtype)}; supported: float32, "
                         f"float64, float16, bfloat16")
    h, w, limit = t.shape[2], t.shape[3], max_plane()
    for ok in (h <= limit, w <= limit, h * w <= limit):
        torch._check(ok, lambda: f"{op}: `{name}` has spatial size ({h}, {w}); the ops take at "
                                 f"most {limit} elements per plane")


def check_fake_operands(op: str, a, a_name: str, b, b_name: str) -> None:
    """What every convolution family's ops check of their two operands first (csrc/common/
    conv_checks.h, then the family's check): each 4-D, floating, within the plane bound; one
    dtype; one device. The same messages, for the fake kernels."""
    _check_fake_operand(op, a_name, a)
    _check_fake_operand(op, b_name, b)
    torch._check(a.dtype == b.dtype,
                 lambda: f"{op}: `{a_name}` ({scalar_name(a.dtype)}) and `{b_name}` "
                         f"({scalar_name(b.dtype)}) must have the same dtype")
    torch._check(a.device == b.device,
                 lambda: f"{op}: `{a_name}` is on {a.device} but `{b_name}` is on {b.device}")


def check_fake_bias(op: str, forward: bool, bias, K, input) -> None:
    """conv_checks.h's check_conv_bias for the fake kernels: only the forward takes a bias, [K],
    of the input's dtype and device."""
    if bias is None:
        return
    torch._check(forward, lambda: f"{op}: takes no bias")
    torch._check(bias.dim() == 1 and bias.shape[0] == K,
                 lambda: f"{op}: `bias` must have shape [{K}], got {list(bias.shape)}")
    torch._check(bias.dtype == input.dtype, lambda: f"{op}: `bias` has dtype "
                 f"{scalar_name(bias.dtype)} but `input` has {scalar_name(input.dtype)}")
    torch._check(bias.device == input.device,
                 lambda: f"{op}: `bias` is on {bias.device} but `input` is on {input.device}")
