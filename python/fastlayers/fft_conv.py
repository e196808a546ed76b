"""FFT convolution: typed wrappers of torch.ops.fastlayers.fft_conv2d{,_input_grad,_weight_grad},
their fake kernels and autograd formulas (each pass's backward is made of the other passes).

Every op is a pure function of its arguments: the Fourier basis, the TF32 switch, the transform
backend and the tile are explicit.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _C
from ._common import (IntPair, check_fake_bias, check_fake_conv, check_fake_operands,
                      conv_tf32_allowed, max_plane, pair, same_padding)

__all__ = [
    "fft_conv2d",
    "fft_conv2d_input_grad",
    "fft_conv2d_weight_grad",
    "conv2d",
    "good_fft_size",
    "default_basis",
    "next_pow2",
    "BACKENDS",
    "FBFFT_MAX_BASIS",
]

# The transform backends of FFT convolution: cuFFT (any basis) and fbfft (power-of-two basis sides
# 2..FBFFT_MAX_BASIS; float32 arithmetic, so not float64 on CUDA). On CPU both run one pipeline.
BACKENDS = ("cufft", "fbfft")
# fbfft's largest 2-D size, from the extension's one definition (cuda/fbfft/limits.h).
FBFFT_MAX_BASIS = int(_C.FBFFT_MAX_2D)
# The ops' size bound, elements per side and per plane (csrc/fft_conv/module_api.h): checked here
# before a default basis is derived from a size, and by the ops.
MAX_PLANE = max_plane()


def good_fft_size(n: int) -> int:
    """Smallest 2^a 3^b 5^c 7^d >= n: the sizes cuFFT and pocketfft transform fastest.

    Built from the 3^b 5^c 7^d below the next power of two (a few hundred even for huge n), each
    with the smallest power of two that reaches n: no search over n, n + 1, ..."""
    n = max(int(n), 1)
    best = 1 << (n - 1).bit_length()
    p7 = 1
    while p7 < best:
        p5 = p7
        while p5 < best:
            p3 = p5
            while p3 < best:
                best = min(best, p3 << (-(-n // p3) - 1).bit_length())
                p3 *= 3
            p5 *= 5
        p7 *= 7
    return best


def default_basis(input_hw: Sequence[int], padding: IntPair) -> Tuple[int, int]:
    """The smallest fast basis that holds the padded input of spatial size `input_hw`."""
    ph, pw = pair(padding, "padding")
    return (good_fft_size(input_hw[0] + 2 * ph), good_fft_size(input_hw[1] + 2 * pw))


def _input_hw_of_grad(grad_output: Tensor, weight: Tensor, padding) -> Tuple[int, int]:
    ph, pw = padding
    return (grad_output.shape[2] + weight.shape[2] - 1 - 2 * ph,
            grad_output.shape[3] + weight.shape[3] - 1 - 2 * pw)


def _bounded(v: Tuple[int, int], name: str) -> Tuple[int, int]:
    """`v` if both sides are at most MAX_PLANE (larger ones would overflow the ops' int64
    arguments or reach sizes they refuse); ValueError naming `name` otherwise."""
    if v[0] > MAX_PLANE or v[1] > MAX_PLANE:
        raise ValueError(f"fastlayers.ops: `{name}` {list(v)} is too large: the ops take at most "
                         f"{MAX_PLANE} elements per side and plane")
    return v


def _pad(padding: IntPair) -> Tuple[int, int]:
    return _bounded(pair(padding, "padding"), "padding")


def _tile(tile: Optional[IntPair]) -> Tuple[int, int]:
    return (0, 0) if tile is None else _bounded(pair(tile, "tile"), "tile")


def _basis_for(hw: Sequence[int], padding: Tuple[int, int], basis: Optional[IntPair],
               backend: str, tile: Tuple[int, int] = (0, 0),
               kernel: Sequence[int] = (1, 1)) -> Tuple[int, int]:
    """The explicit basis, or the default one for the backend: the smallest fast size (cuFFT) or
    the next power of two (fbfft) holding the padded input, or tile + kernel - 1 when tiled.
    ValueError naming `padding` or `tile` when what the basis must hold exceeds MAX_PLANE."""
    if basis is not None:
        return _bounded(pair(basis, "basis"), "basis")
    if tile[0] > 0 and tile[1] > 0:
        need = (tile[0] + kernel[0] - 1, tile[1] + kernel[1] - 1)
        what = "`tile` %s + kernel - 1" % list(tile)
    else:
        need = (hw[0] + 2 * padding[0], hw[1] + 2 * padding[1])
        what = "the input %s padded by `padding` %s" % (list(hw), list(padding))
    if need[0] > MAX_PLANE or need[1] > MAX_PLANE:
        raise ValueError(f"fastlayers.ops: {what} needs a basis of {list(need)}; the ops take at "
                         f"most {MAX_PLANE} elements per side and plane")
    fit = next_pow2 if backend == "fbfft" else good_fft_size
    return (fit(need[0]), fit(need[1]))


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (and >= 2: fbfft's smallest size)."""
    return max(2, 1 << (max(int(n), 1) - 1).bit_length())


def fft_conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
               padding: IntPair = 0, basis: Optional[IntPair] = None,
               tf32: Optional[bool] = None, backend: str = "cufft",
               tile: Optional[IntPair] = None) -> Tensor:
    """Forward FFT convolution (cross-correlation, stride 1): [S,C,H,W] x [K,C,kh,kw] -> [S,K,oh,ow].

    `backend` "cufft" or "fbfft"; `tile` (th, tw) tiles of the output (overlap-save), None or
    (0, 0) for none. The default basis is the smallest fast size (cuFFT) or the next power of two
    (fbfft) that holds the padded input, or tile + kernel - 1 when tiled."""
    padding, tile = _pad(padding), _tile(tile)
    basis = _basis_for(input.shape[-2:], padding, basis, backend, tile, weight.shape[-2:])
    tf32 = conv_tf32_allowed() if tf32 is None else bool(tf32)
    return torch.ops.fastlayers.fft_conv2d(input, weight, bias, padding, basis, tf32, backend,
                                           tile)


def fft_conv2d_input_grad(grad_output: Tensor, weight: Tensor, padding: IntPair = 0,
                          basis: Optional[IntPair] = None, tf32: Optional[bool] = None,
                          backend: str = "cufft", tile: Optional[IntPair] = None) -> Tensor:
    """Gradient of fft_conv2d with respect to its input: [S,K,oh,ow] x [K,C,kh,kw] -> [S,C,H,W].

    `tile`: tiles of the input gradient [H, W]."""
    padding, tile = _pad(padding), _tile(tile)
    basis = _basis_for(_input_hw_of_grad(grad_output, weight, padding), padding, basis, backend,
                       tile, weight.shape[-2:])
    tf32 = conv_tf32_allowed() if tf32 is None else bool(tf32)
    return torch.ops.fastlayers.fft_conv2d_input_grad(grad_output, weight, padding, basis, tf32,
                                                      backend, tile)


def fft_conv2d_weight_grad(grad_output: Tensor, input: Tensor, padding: IntPair = 0,
                           basis: Optional[IntPair] = None, tf32: Optional[bool] = None,
                           backend: str = "cufft", tile: Optional[IntPair] = None) -> Tensor:
    """Gradient of fft_conv2d with respect to its weight: [S,K,oh,ow] x [S,C,H,W] -> [K,C,kh,kw].

    `tile`: tiles of the output [oh, ow] (grad_output's size), summed over."""
    padding, tile = _pad(padding), _tile(tile)
    kernel = (input.shape[2] + 2 * padding[0] - grad_output.shape[2] + 1,
              input.shape[3] + 2 * padding[1] - grad_output.shape[3] + 1)
    basis = _basis_for(input.shape[-2:], padding, basis, backend, tile, kernel)
    tf32 = conv_tf32_allowed() if tf32 is None else bool(tf32)
    return torch.ops.fastlayers.fft_conv2d_weight_grad(grad_output, input, padding, basis, tf32,
                                                       backend, tile)


def conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntPair = 1,
           padding: Union[IntPair, str] = 0, dilation: IntPair = 1, groups: int = 1, *,
           basis: Optional[IntPair] = None, tf32: Optional[bool] = None,
           backend: str = "cufft", tile: Optional[IntPair] = None) -> Tensor:
    """torch.nn.functional.conv2d's signature on FFT convolution; unsupported arguments raise."""
    if pair(stride, "stride") != (1, 1):
        raise ValueError(f"fastlayers.ops.conv2d: `stride` must be 1 for FFT convolution, got {stride!r}")
    if pair(dilation, "dilation") != (1, 1):
        raise ValueError(f"fastlayers.ops.conv2d: `dilation` must be 1 for FFT convolution, got {dilation!r}")
    if groups != 1:
        raise ValueError(f"fastlayers.ops.conv2d: `groups` must be 1 for FFT convolution, got {groups!r}")
    unbatched = input.dim() == 3
    if unbatched:
        input = input.unsqueeze(0)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            lo, hi = same_padding(weight.shape[-2:])
            if lo != hi:  # asymmetric: pad explicitly (left/top gets the smaller half, as PyTorch)
                input = torch.nn.functional.pad(input, (lo[1], hi[1], lo[0], hi[0]))
                lo = [0, 0]
            padding = tuple(lo)
        else:
            raise ValueError(f"fastlayers.ops.conv2d: `padding` string must be 'same' or 'valid', got {padding!r}")
    out = fft_conv2d(input, weight, bias, padding, basis, tf32, backend, tile)
    return out.squeeze(0) if unbatched else out


# ---------------------------------------------------------------------------------------------
# Fake kernels: the checks every convolution family makes of its operands (and the forward of
# its bias), then the result's shape. (The FFT ops' checks of basis, backend and tile run on real
# tensors only.)


def _fake_result(op: str, a: Tensor, a_name: str, b: Tensor, b_name: str, shape) -> Tensor:
    """An empty result of shape `shape()` after check_fake_operands."""
    check_fake_operands(op, a, a_name, b, b_name)
    return a.new_empty(shape())


@torch.library.register_fake("fastlayers::fft_conv2d")
def _fft_conv2d_fake(input, weight, bias, padding, basis, tf32=False, backend="cufft",
                     tile=(0, 0)):
    def shape():
        torch._check(weight.shape[1] == input.shape[1],
                     lambda: f"fft_conv2d: `weight` has {weight.shape[1]} input channels but "
                             f"`input` has {input.shape[1]}")
        ph, pw = padding
        hw = (input.shape[2] + 2 * ph - weight.shape[2] + 1,
              input.shape[3] + 2 * pw - weight.shape[3] + 1)
        check_fake_conv("fft_conv2d", padding, hw)
        check_fake_bias("fft_conv2d", True, bias, weight.shape[0], input)
        return (input.shape[0], weight.shape[0], *hw)
    return _fake_result("fft_conv2d", input, "input", weight, "weight", shape)


@torch.library.register_fake("fastlayers::fft_conv2d_input_grad")
def _fft_conv2d_input_grad_fake(grad_output, weight, padding, basis, tf32=False,
                                backend="cufft", tile=(0, 0)):
    def shape():
        hw = _input_hw_of_grad(grad_output, weight, padding)
        check_fake_conv("fft_conv2d_input_grad", padding, hw)
        return (grad_output.shape[0], weight.shape[1], *hw)
    return _fake_result("fft_conv2d_input_grad", grad_output, "grad_output", weight, "weight",
                        shape)


@torch.library.register_fake("fastlayers::fft_conv2d_weight_grad")
def _fft_conv2d_weight_grad_fake(grad_output, input, padding, basis, tf32=False,
                                 backend="cufft", tile=(0, 0)):
    def shape():
        ph, pw = padding
        hw = (input.shape[2] + 2 * ph - grad_output.shape[2] + 1,
              input.shape[3] + 2 * pw - grad_output.shape[3] + 1)
        check_fake_conv("fft_conv2d_weight_grad", padding, hw)
        return (grad_output.shape[1], input.shape[1], *hw)
    return _fake_result("fft_conv2d_weight_grad", grad_output, "grad_output", input, "input",
                        shape)


# ---------------------------------------------------------------------------------------------
# Autograd. The three passes are each other's adjoints, so every backward is made of the ops.


def _fit_tile(tile, hw):
    """A pass's tile, reused by another pass whose large result is `hw`: untiled stays untiled, a
    tile larger than that result is cut to it (the basis still holds tile + kernel - 1)."""
    if tile[0] == 0:
        return tile
    return [torch.sym_min(tile[0], hw[0]), torch.sym_min(tile[1], hw[1])]


def _setup_fwd(ctx, inputs, output):
    input, weight, bias, padding, basis, tf32, backend, tile = inputs
    ctx.save_for_backward(input, weight)
    ctx.args = (padding, basis, tf32, backend, tile)
    ctx.has_bias = bias is not None


def _backward_fwd(ctx, grad):
    # The forward's tile divides y: the weight gradient's tile is the same, the input gradient's
    # divides x.
    input, weight = ctx.saved_tensors
    padding, basis, tf32, backend, tile = ctx.args
    fl = torch.ops.fastlayers
    gi = gw = gb = None
    if ctx.needs_input_grad[0]:
        gi = fl.fft_conv2d_input_grad(grad, weight, padding, basis, tf32, backend,
                                      _fit_tile(tile, input.shape[2:]))
    if ctx.needs_input_grad[1]:
        gw = fl.fft_conv2d_weight_grad(grad, input, padding, basis, tf32, backend, tile)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        gb = grad.sum((0, 2, 3))
    return gi, gw, gb, None, None, None, None, None


def _setup_grad(ctx, inputs, output):
    a, b, padding, basis, tf32, backend, tile = inputs
    ctx.save_for_backward(a, b)
    ctx.args = (padding, basis, tf32, backend, tile)


def _backward_input_grad(ctx, gg):
    # gx = IG(gy, w):  <gg, IG(gy, w)> = <F(gg, w), gy>
    grad_output, weight = ctx.saved_tensors
    padding, basis, tf32, backend, tile = ctx.args
    fl = torch.ops.fastlayers
    y_tile = _fit_tile(tile, grad_output.shape[2:])
    d_gy = d_w = None
    if ctx.needs_input_grad[0]:
        d_gy = fl.fft_conv2d(gg, weight, None, padding, basis, tf32, backend, y_tile)
    if ctx.needs_input_grad[1]:
        d_w = fl.fft_conv2d_weight_grad(grad_output, gg, padding, basis, tf32, backend, y_tile)
    return d_gy, d_w, None, None, None, None, None


def _backward_weight_grad(ctx, gg):
    # gw = WG(gy, x):  <gg, WG(gy, x)> = <F(x, gg), gy>
    grad_output, input = ctx.saved_tensors
    padding, basis, tf32, backend, tile = ctx.args
    fl = torch.ops.fastlayers
    d_gy = d_x = None
    if ctx.needs_input_grad[0]:
        d_gy = fl.fft_conv2d(input, gg, None, padding, basis, tf32, backend, tile)
    if ctx.needs_input_grad[1]:
        d_x = fl.fft_conv2d_input_grad(grad_output, gg, padding, basis, tf32, backend,
                                       _fit_tile(tile, input.shape[2:]))
    return d_gy, d_x, None, None, None, None, None


torch.library.register_autograd("fastlayers::fft_conv2d", _backward_fwd, setup_context=_setup_fwd)
torch.library.register_autograd("fastlayers::fft_conv2d_input_grad", _backward_input_grad,
                                setup_context=_setup_grad)
torch.library.register_autograd("fastlayers::fft_conv2d_weight_grad", _backward_weight_grad,
                                setup_context=_setup_grad)
