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
