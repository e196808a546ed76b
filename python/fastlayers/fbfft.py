"""fbfft transforms: typed wrappers of torch.ops.fastlayers.fbfft_* and their fake kernels (their
autograd, each transform's backward the other one, is registered in C++:
csrc/fbfft/fbfft_autograd.cpp).

Semantics (csrc/fbfft/fbfft.h): the real side is read or written through a window, window(x)[i] =
x[i + offset] where in range and 0 elsewhere; rfft2 can return the two innermost dimensions
transposed; the inverse scales by 1/n when `normalized`.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._common import IntPair, max_plane, pair

__all__ = ["rfft", "irfft", "rfft2", "irfft2"]


def rfft(input: Tensor, n: int, offset: int = 0) -> Tensor:
    """[..., w] real -> [..., n/2+1]: the FFT of input[..., offset : offset + n], zero-filled."""
    return torch.ops.fastlayers.fbfft_rfft(input, n, offset)


def irfft(input: Tensor, n: int, out_size: int, offset: int = 0, normalized: bool = True) -> Tensor:
    """[..., n/2+1] -> [..., out_size]: the inverse, read from `offset` on, zero-filled outside."""
    return torch.ops.fastlayers.fbfft_irfft(input, n, out_size, offset, normalized)


def rfft2(input: Tensor, size: IntPair, offset: IntPair = 0, transposed: bool = False) -> Tensor:
    """[..., h, w] real -> [..., nh, nw/2+1] (or [..., nw/2+1, nh] when transposed)."""
    return torch.ops.fastlayers.fbfft_rfft2(input, pair(size, "size"), pair(offset, "offset"),
                                            transposed)


def irfft2(input: Tensor, size: IntPair, out_size: IntPair, offset: IntPair = 0,
           transposed: bool = False, normalized: bool = True) -> Tensor:
    """[..., nh, nw/2+1] (or transposed) -> [..., out_h, out_w] real, clipped from `offset`."""
    return torch.ops.fastlayers.fbfft_irfft2(input, pair(size, "size"), pair(out_size, "out_size"),
                                             pair(offset, "offset"), transposed, normalized)


def _complex_of(t: Tensor) -> torch.dtype:
    return torch.complex128 if t.dtype == torch.float64 else torch.complex64


def _real_of(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.complex128 else torch.float32


@torch.library.register_fake("fastlayers::fbfft_rfft")
def _rfft_fake(input, n, offset=0):
    return input.new_empty((*input.shape[:-1], n // 2 + 1), dtype=_complex_of(input))


def _check_out_size(op, out_size):
    """The ops' bound on `out_size`, for the fake kernels (csrc/fbfft/fbfft_common.cpp)."""
    limit = max_plane()
    plane = 1
    for n in out_size:
        torch._check(n >= 1, lambda: f"{op}: `out_size` must be >= 1, got {list(out_size)}")
        plane = plane * n
    torch._check(plane <= limit, lambda: f"{op}: `out_size` {list(out_size)} is too large: at "
                                         f"most {limit} elements per transform")


@torch.library.register_fake("fastlayers::fbfft_irfft")
def _irfft_fake(input, n, out_size, offset=0, normalized=True):
    torch._check(input.shape[-1] == n // 2 + 1, lambda: "fbfft_irfft: `input` must have n/2+1 bins")
    _check_out_size("fbfft_irfft", (out_size,))
    return input.new_empty((*input.shape[:-1], out_size), dtype=_real_of(input))


@torch.library.register_fake("fastlayers::fbfft_rfft2")
def _rfft2_fake(input, size, offset=(0, 0), transposed=False):
    tail = (size[1] // 2 + 1, size[0]) if transposed else (size[0], size[1] // 2 + 1)
    return input.new_empty((*input.shape[:-2], *tail), dtype=_complex_of(input))


@torch.library.register_fake("fastlayers::fbfft_irfft2")
def _irfft2_fake(input, size, out_size, offset=(0, 0), transposed=False, normalized=True):
    _check_out_size("fbfft_irfft2", out_size)
    return input.new_empty((*input.shape[:-2], *out_size), dtype=_real_of(input))

