"""fbfft transforms: typed wrappers of torch.ops.fastlayers.fbfft_*, their fake kernels and
autograd (each transform's backward is the other one, with the half-spectrum weights).

Semantics (csrc/fbfft/fbfft.h): the real side is read or written through a window, window(x)[i] =
x[i + offset] where in range and 0 elsewhere; rfft2 can return the two innermost dimensions
transposed; the inverse scales by 1/n when `normalized`.
"""
from __future__ import annotations

from typing import Sequence, Tuple, Union

import torch
from torch import Tensor

__all__ = ["rfft", "irfft", "rfft2", "irfft2"]

IntPair = Union[int, Sequence[int]]


def _pair(v: IntPair) -> Tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def rfft(input: Tensor, n: int, offset: int = 0) -> Tensor:
    """[..., w] real -> [..., n/2+1]: the FFT of input[..., offset : offset + n], zero-filled."""
    return torch.ops.fastlayers.fbfft_rfft(input, n, offset)


def irfft(input: Tensor, n: int, out_size: int, offset: int = 0, normalized: bool = True) -> Tensor:
    """[..., n/2+1] -> [..., out_size]: the inverse, read from `offset` on, zero-filled outside."""
    return torch.ops.fastlayers.fbfft_irfft(input, n, out_size, offset, normalized)


def rfft2(input: Tensor, size: IntPair, offset: IntPair = 0, transposed: bool = False) -> Tensor:
    """[..., h, w] real -> [..., nh, nw/2+1] (or [..., nw/2+1, nh] when transposed)."""
    return torch.ops.fastlayers.fbfft_rfft2(input, _pair(size), _pair(offset), transposed)


def irfft2(input: Tensor, size: IntPair, out_size: IntPair, offset: IntPair = 0,
           transposed: bool = False, normalized: bool = True) -> Tensor:
    """[..., nh, nw/2+1] (or transposed) -> [..., out_h, out_w] real, clipped from `offset`."""
    return torch.ops.fastlayers.fbfft_irfft2(input, _pair(size), _pair(out_size), _pair(offset),
                                             transposed, normalized)


def _complex_of(t: Tensor) -> torch.dtype:
    return torch.complex128 if t.dtype == torch.float64 else torch.complex64


def _real_of(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.complex128 else torch.float32


@torch.library.register_fake("fastlayers::fbfft_rfft")
def _rfft_fake(input, n, offset=0):
    return input.new_empty((*input.shape[:-1], n // 2 + 1), dtype=_complex_of(input))


@torch.library.register_fake("fastlayers::fbfft_irfft")
def _irfft_fake(input, n, out_size, offset=0, normalized=True):
    torch._check(input.shape[-1] == n // 2 + 1, lambda: "fbfft_irfft: `input` must have n/2+1 bins")
    return input.new_empty((*input.shape[:-1], out_size), dtype=_real_of(input))


@torch.library.register_fake("fastlayers::fbfft_rfft2")
def _rfft2_fake(input, size, offset=(0, 0), transposed=False):
    tail = (size[1] // 2 + 1, size[0]) if transposed else (size[0], size[1] // 2 + 1)
    return input.new_empty((*input.shape[:-2], *tail), dtype=_complex_of(input))


@torch.library.register_fake("fastlayers::fbfft_irfft2")
def _irfft2_fake(input, size, out_size, offset=(0, 0), transposed=False, normalized=True):
    return input.new_empty((*input.shape[:-2], *out_size), dtype=_real_of(input))


# --- autograd ------------------------------------------------------------------------------
# A half spectrum holds each interior bin once for two of the full spectrum. With d = 2 on the
# interior bins of the halved dimension and 1 on its DC and Nyquist bins:
#   rfft:   X = R(window(x))       ->  grad x = C(grad X / d) read back through window(-offset)
#   irfft:  y = window(C(X) / s)   ->  grad X = R(window(grad y, -offset)) * d / s
# where R is the unnormalised real FFT, C the unnormalised C2R inverse and s the scale.


def _half_spectrum_weights(bins: int, like: Tensor) -> Tensor:
    d = torch.full((bins,), 2.0, dtype=_real_of(like) if like.is_complex() else like.dtype,
                   device=like.device)
    d[0] = 1.0
    d[-1] = 1.0  # Nyquist (the sizes are even)
    return d


def _setup_forward(ctx, inputs, output):
    ctx.args = inputs[1:]
    ctx.in_shape = inputs[0].shape
    ctx.in_dtype = inputs[0].dtype


def _backward_rfft(ctx, g):
    n, offset = ctx.args
    d = _half_spectrum_weights(n // 2 + 1, g)
    gx = torch.ops.fastlayers.fbfft_irfft(g / d, n, ctx.in_shape[-1], -offset, False)
    return gx.to(ctx.in_dtype), None, None


def _backward_irfft(ctx, g):
    n, out_size, offset, normalized = ctx.args
    d = _half_spectrum_weights(n // 2 + 1, g)
    gX = torch.ops.fastlayers.fbfft_rfft(g, n, -offset) * d
    return (gX / n if normalized else gX), None, None, None, None


def _backward_rfft2(ctx, g):
    size, offset, transposed = ctx.args
    d = _half_spectrum_weights(size[1] // 2 + 1, g)
    d = d.unsqueeze(-1) if transposed else d
    out = (ctx.in_shape[-2], ctx.in_shape[-1])
    gx = torch.ops.fastlayers.fbfft_irfft2(g / d, size, out, (-offset[0], -offset[1]), transposed,
                                           False)
    return gx.to(ctx.in_dtype), None, None, None


def _backward_irfft2(ctx, g):
    size, out_size, offset, transposed, normalized = ctx.args
    d = _half_spectrum_weights(size[1] // 2 + 1, g)
    d = d.unsqueeze(-1) if transposed else d
    gX = torch.ops.fastlayers.fbfft_rfft2(g, size, (-offset[0], -offset[1]), transposed) * d
    return (gX / (size[0] * size[1]) if normalized else gX), None, None, None, None, None


torch.library.register_autograd("fastlayers::fbfft_rfft", _backward_rfft, setup_context=_setup_forward)
torch.library.register_autograd("fastlayers::fbfft_irfft", _backward_irfft,
                                setup_context=_setup_forward)
torch.library.register_autograd("fastlayers::fbfft_rfft2", _backward_rfft2,
                                setup_context=_setup_forward)
torch.library.register_autograd("fastlayers::fbfft_irfft2", _backward_irfft2,
                                setup_context=_setup_forward)
