"""Winograd convolution: typed wrappers of torch.ops.fastlayers.winograd_conv2d{,_input_grad,
_weight_grad}, their fake kernels and autograd formulas (each pass's backward is made of the other
passes).

3x3 filters, stride 1. `tile` is the output tile m of F(m x m, 3x3) for the forward and input
gradient (2, 4 or 6), and the grad_output tile r of F(3x3, r x r) for the weight gradient (2 or 4).
`fused` (tile 2, on CUDA: float16, bfloat16 and float32; in the forward and input gradient float32
data whose width is a multiple of 4) runs a fused kernel: the transforms, the products (on tensor
cores; in float32 without `tf32` as TF32 products of split values, hi + lo) and the inverse
transform in one kernel (the weight gradient's sum over runs of tiles and its inverse transform
in a second one).
Every op is a pure function of its arguments: the tile, the TF32 switch and the kernel are
explicit.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
from torch import Tensor

from ._common import (IntPair, check_fake_bias, check_fake_conv, check_fake_operands,
                      conv_tf32_allowed, max_plane, pair, scalar_name)

__all__ = [
    "winograd_conv2d", "winograd_conv2d_input_grad", "winograd_conv2d_weight_grad",
    "winograd_filter_transform",
    "FORWARD_TILES", "WEIGHT_GRAD_TILES",
]

# The tiles each pass takes (cuda/winograd/layout.h).
FORWARD_TILES = (2, 4, 6)      # forward and input gradient: F(m x m, 3x3)
WEIGHT_GRAD_TILES = (2, 4)     # weight gradient: F(3x3, r x r)
KERNEL = 3
# the fused kernels' F(2x2, 3x3) and F(3x3, 2x2) (cuda/winograd/layout.h: kFusedTile)
FUSED_TILE = 2


def winograd_conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                    padding: IntPair = 0, tile: int = 2, tf32: Optional[bool] = None,
                    fused: bool = False, transformed_weight: Optional[Tensor] = None) -> Tensor:
    """Forward Winograd convolution (cross-correlation, stride 1) with F(tile x tile, 3x3):
    [S,C,H,W] x [K,C,3,3] -> [S,K,H+2ph-2,W+2pw-2]. `tf32` None: PyTorch's switch for
    convolution. `fused`: the fused kernel (tile 2, CUDA; float16/bfloat16, or float32 with
    `input`'s width a multiple of 4).
    `transformed_weight`: winograd_filter_transform(weight, tile), detached, which the op reads
    instead of transforming `weight` again (the filters of a layer called many times with one
    weight); the gradients remain `weight`'s."""
    tf32 = conv_tf32_allowed() if tf32 is None else bool(tf32)
    return torch.ops.fastlayers.winograd_conv2d(input, weight, bias, pair(padding, "padding"),
                                                int(tile), tf32, bool(fused), transformed_weight)


def winograd_filter_transform(weight: Tensor, tile: int = 2) -> Tensor:
    """[K,C,3,3] -> [alpha^2,K,C], alpha = tile + 2: G w G^T of F(tile x tile, 3x3) for every
    filter, in the weight's dtype (as the forward stores them), for winograd_conv2d's
    `transformed_weight`."""
    return torch.ops.fastlayers.winograd_filter_transform(weight, int(tile))


def winograd_conv2d_input_grad(grad_output: Tensor, weight: Tensor, padding: IntPair = 0,
                               tile: int = 2, tf32: Optional[bool] = None,
                               fused: bool = False) -> Tensor:
    """Gradient of winograd_conv2d with respect to its input, F(tile x tile, 3x3) on grad_output
    with the filters turned 180 degrees: [S,K,oh,ow] x [K,C,3,3] -> [S,C,oh+2-2ph,ow+2-2pw].
    `fused`: the fused kernel (tile 2, CUDA; float16/bfloat16, or float32 with `grad_output`'s
    width a multiple of 4)."""
    tf32 = conv_tf32_allowed() if tf32 is None else bool(tf32)
    return torch.ops.fastlayers.winograd_conv2d_input_grad(
        grad_output, weight, pair(padding, "padding"), int(tile), tf32, bool(fused))


def winograd_conv2d_weight_grad(grad_output: Tensor, input: Tensor, padding: IntPair = 0,
                                tile: int = 2, tf32: Optional[bool] = None,
                                fused: bool = False) -> Tensor:
    """Gradient of winograd_conv2d with respect to its weight, F(3x3, tile x tile) over
    grad_output tiles summed over tiles and samples: [S,K,oh,ow] x [S,C,H,W] -> [K,C,3,3].
    `fused`: the fused kernel (tile 2, CUDA; float16/bfloat16/float32)."""
    tf32 = conv_tf32_allowed() if tf32 is None else bool(tf32)
    return torch.ops.fastlayers.winograd_conv2d_weight_grad(
        grad_output, input, pair(padding, "padding"), int(tile), tf32, bool(fused))


# ---------------------------------------------------------------------------------------------
# Fake kernels: the ops' argument checks, then the result's shape.


_OPS = ("winograd_conv2d", "winograd_conv2d_input_grad", "winograd_conv2d_weight_grad")


def _check_fake(pass_: int, a: Tensor, b: Tensor, bias: Optional[Tensor], padding, tile: int,
                fused: bool):
    """The checks the ops make (csrc/winograd/winograd_common.cpp, check), in their order and
    with their messages, for the fake kernels: a traced call fails as the eager one does. Returns
    (S, C, K, H, W, oh, ow) of pass `pass_` (0 forward, 1 input gradient, 2 weight gradient)."""
    op = _OPS[pass_]
    an = "input" if pass_ == 0 else "grad_output"
    bn = "input" if pass_ == 2 else "weight"
    check_fake_operands(op, a, an, b, bn)
    torch._check(len(padding) == 2,
                 lambda: f"{op}: `padding` must have 2 values (ph, pw), got {list(padding)}")
    check_fake_conv(op, padding, ())
    tiles = WEIGHT_GRAD_TILES if pass_ == 2 else FORWARD_TILES
    torch._check(tile in tiles, lambda: f"{op}: `tile` must be " + (
        "2 or 4 (grad_output tiles of F(3x3, tile x tile))" if pass_ == 2
        else "2, 4 or 6 (output tiles of F(tile x tile, 3x3))") + f", got {tile}")
    if fused:
        torch._check(tile == FUSED_TILE, lambda: f"{op}: `fused` takes `tile` {FUSED_TILE} (the "
                     f"fused kernels compute {'F(3x3, 2x2)' if pass_ == 2 else 'F(2x2, 3x3)'}), "
                     f"got {tile}")
        torch._check(a.device.type in ("cuda", "meta"), lambda: f"{op}: `fused` runs on CUDA "
                     f"tensors, got {a.device} (pass fused=False)")
        torch._check(a.dtype in (torch.float16, torch.bfloat16, torch.float32),
                     lambda: f"{op}: `fused` takes float16, bfloat16 and float32, got "
                             f"{scalar_name(a.dtype)} (pass fused=False)")
        if a.dtype == torch.float32 and pass_ != 2:
            torch._check(a.shape[3] % 4 == 0, lambda: f"{op}: `fused` in float32 takes `{an}` of "
                         f"a width that is a multiple of 4, got {a.shape[3]} (pass fused=False)")
    ph, pw = padding
    k = KERNEL
    three = " (Winograd convolution here takes 3x3 filters)"
    if pass_ == 2:
        S, K, C, H, W = a.shape[0], a.shape[1], b.shape[1], b.shape[2], b.shape[3]
        torch._check(b.shape[0] == S,
                     lambda: f"{op}: `input` has batch {b.shape[0]} but `grad_output` has {S}")
        oh, ow = H + 2 * ph - k + 1, W + 2 * pw - k + 1
        for ok in (oh == a.shape[2], ow == a.shape[3]):
            torch._check(ok, lambda: f"{op}: `grad_output` has spatial size ({a.shape[2]}, "
                         f"{a.shape[3]}) but a 3x3 kernel over `input` ({H}, {W}) with `padding` "
                         f"{list(padding)} gives ({oh}, {ow})" + three)
    else:
        for ok in (b.shape[2] == k, b.shape[3] == k):
            torch._check(ok, lambda: f"{op}: `weight` must be 3x3, got {b.shape[2]}x{b.shape[3]}"
                         + three)
        if pass_ == 0:
            S, C, H, W, K = a.shape[0], a.shape[1], a.shape[2], a.shape[3], b.shape[0]
            torch._check(b.shape[1] == C, lambda: f"{op}: `weight` has {b.shape[1]} input "
                         f"channels but `input` has {C} (groups are not supported)")
        else:
            S, K, C = a.shape[0], a.shape[1], b.shape[1]
            torch._check(b.shape[0] == K, lambda: f"{op}: `weight` has {b.shape[0]} output "
                         f"channels but `grad_output` has {K}")
            H, W = a.shape[2] + k - 1 - 2 * ph, a.shape[3] + k - 1 - 2 * pw
            for ok in (H >= 1, W >= 1):
                torch._check(ok, lambda: f"{op}: `grad_output` of spatial size ({a.shape[2]}, "
                             f"{a.shape[3]}) with a 3x3 kernel and `padding` {list(padding)} "
                             f"implies an input of size ({H}, {W}), which is empty")
        oh, ow = H + 2 * ph - k + 1, W + 2 * pw - k + 1
    for ok in (H >= 1, W >= 1):
        torch._check(ok, lambda: f"{op}: input spatial size must be >= 1, got ({H}, {W})")
    for ok in (oh >= 1, ow >= 1):
        torch._check(ok, lambda: f"{op}: the 3x3 kernel is larger than the padded input "
                                 f"({H + 2 * ph}, {W + 2 * pw})")
    limit = max_plane()
    for ok in (H + 2 * ph <= limit, W + 2 * pw <= limit):
        torch._check(ok, lambda: f"{op}: the padded input ({H + 2 * ph}, {W + 2 * pw}) is too "
                                 f"large: the ops take at most {limit} elements per side")
    check_fake_bias(op, pass_ == 0, bias, K, a)
    return S, C, K, H, W, oh, ow


@torch.library.register_fake("fastlayers::winograd_conv2d")
def _forward_fake(input, weight, bias, padding, tile=2, tf32=False, fused=False,
                  transformed_weight=None):
    S, C, K, _, _, oh, ow = _check_fake(0, input, weight, bias, padding, tile, fused)
    if transformed_weight is not None:
        u, op, alpha = transformed_weight, "winograd_conv2d", tile + KERNEL - 1
        torch._check(not fused, lambda: f"{op}: `transformed_weight` serves the non-fused "
                                        f"pipeline (fused=False)")
        torch._check(u.dim() == 3 and tuple(u.shape) == (alpha * alpha, K, C),
                     lambda: f"{op}: `transformed_weight` must be [alpha^2, K, C] = "
                             f"[{alpha * alpha}, {K}, {C}] (winograd_filter_transform of "
                             f"`weight` at tile {tile}), got {list(u.shape)}")
        torch._check(u.dtype == weight.dtype and u.device == weight.device,
                     lambda: f"{op}: `transformed_weight` must have `weight`'s dtype and device "
                             f"({scalar_name(weight.dtype)} on {weight.device}), got "
                             f"{scalar_name(u.dtype)} on {u.device}")
    return input.new_empty((S, K, oh, ow))


@torch.library.register_fake("fastlayers::winograd_conv2d_input_grad")
def _input_grad_fake(grad_output, weight, padding, tile=2, tf32=False, fused=False):
    S, C, _, H, W, _, _ = _check_fake(1, grad_output, weight, None, padding, tile, fused)
    return grad_output.new_empty((S, C, H, W))


@torch.library.register_fake("fastlayers::winograd_conv2d_weight_grad")
def _weight_grad_fake(grad_output, input, padding, tile=2, tf32=False, fused=False):
    _, C, K, _, _, _, _ = _check_fake(2, grad_output, input, None, padding, tile, fused)
    return grad_output.new_empty((K, C, KERNEL, KERNEL))


@torch.library.register_fake("fastlayers::winograd_filter_transform")
def _filter_transform_fake(weight, tile=2):
    torch._check(weight.dim() == 4, lambda: "winograd_filter_transform: `weight` must be 4-D")
    torch._check(tuple(weight.shape[2:]) == (KERNEL, KERNEL),
                 lambda: "winograd_filter_transform: `weight` must be 3x3")
    torch._check(tile in FORWARD_TILES,
                 lambda: f"winograd_filter_transform: `tile` must be 2, 4 or 6, got {tile}")
    alpha = tile + KERNEL - 1
    return weight.new_empty((alpha * alpha, weight.shape[0], weight.shape[1]))


# ---------------------------------------------------------------------------------------------
# Autograd. The three passes are each other's adjoints, so every backward is made of the ops. A
# forward-type pass (forward, input gradient) hands its tile on to the other forward-type pass;
# weight gradients use WEIGHT_GRAD_TILES[0], and a weight gradient's backward the smallest forward
# tile (its own tile names another algorithm's); `fused` passes on to every backward op (tile 2
# either way).


def _fused_on(data: Tensor, fused: bool) -> bool:
    """`fused` for a backward's forward-type op on `data`: float32's fused kernel takes widths that
    are multiples of 4, and elsewhere the non-fused pipeline (products of the same precision)
    runs."""
    return fused and (data.dtype != torch.float32 or data.shape[-1] % 4 == 0)


def _setup_fwd(ctx, inputs, output):
    input, weight, bias, padding, tile, tf32, fused = inputs[:7]
    # Here, where autograd records (gradients on, some input wanting one), not in the kernel: under
    # no_grad or inference_mode a transform made with gradients on serves as a detached one.
    if inputs[7] is not None and inputs[7].requires_grad:
        raise RuntimeError("winograd_conv2d: `transformed_weight` takes no gradient (the "
                           "gradients are `weight`'s): pass it detached")
    ctx.save_for_backward(input, weight)
    ctx.args = (padding, tile, tf32, fused)
    ctx.has_bias = bias is not None


def _backward_fwd(ctx, grad):
    input, weight = ctx.saved_tensors
    padding, tile, tf32, fused = ctx.args
    fl = torch.ops.fastlayers
    gi = gw = gb = None
    if ctx.needs_input_grad[0]:
        gi = fl.winograd_conv2d_input_grad(grad, weight, padding, tile, tf32,
                                           _fused_on(grad, fused))
    if ctx.needs_input_grad[1]:
        gw = fl.winograd_conv2d_weight_grad(grad, input, padding, WEIGHT_GRAD_TILES[0], tf32,
                                            fused)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        gb = grad.sum((0, 2, 3))
    # none for transformed_weight: _setup_fwd refuses one that wants a gradient
    return gi, gw, gb, None, None, None, None, None


def _setup_input_grad(ctx, inputs, output):
    a, b, padding, tile, tf32, fused = inputs
    ctx.save_for_backward(a, b)
    ctx.args = (padding, tile, tf32, fused)


def _backward_input_grad(ctx, gg):
    # gx = IG(gy, w):  <gg, IG(gy, w)> = <F(gg, w), gy>
    grad_output, weight = ctx.saved_tensors
    padding, tile, tf32, fused = ctx.args
    fl = torch.ops.fastlayers
    d_gy = d_w = None
    if ctx.needs_input_grad[0]:
        d_gy = fl.winograd_conv2d(gg, weight, None, padding, tile, tf32, _fused_on(gg, fused))
    if ctx.needs_input_grad[1]:
        d_w = fl.winograd_conv2d_weight_grad(grad_output, gg, padding, WEIGHT_GRAD_TILES[0], tf32,
                                             fused)
    return d_gy, d_w, None, None, None, None


def _setup_grad(ctx, inputs, output):
    a, b, padding, tile, tf32, fused = inputs
    ctx.save_for_backward(a, b)
    ctx.args = (padding, tile, tf32, fused)


def _backward_weight_grad(ctx, gg):
    # gw = WG(gy, x):  <gg, WG(gy, x)> = <F(x, gg), gy>
    grad_output, input = ctx.saved_tensors
    padding, tile, tf32, fused = ctx.args
    fl = torch.ops.fastlayers
    d_gy = d_x = None
    if ctx.needs_input_grad[0]:
        d_gy = fl.winograd_conv2d(input, gg, None, padding, FORWARD_TILES[0], tf32,
                                  _fused_on(input, fused))
    if ctx.needs_input_grad[1]:
        d_x = fl.winograd_conv2d_input_grad(grad_output, gg, padding, FORWARD_TILES[0], tf32,
                                            _fused_on(grad_output, fused))
    return d_gy, d_x, None, None, None, None


def _setup_filters(ctx, inputs, output):
    ctx.tile = inputs[1] if len(inputs) > 1 else 2
    ctx.shape = inputs[0].shape


@functools.lru_cache(maxsize=None)
def _filter_matrix(tile: int):
    """G of F(tile x tile, 3x3) as floats (exact from the matrices' fractions)."""
    from .winograd_matrices import matrices
    return tuple(tuple(float(v) for v in row) for row in matrices(tile, KERNEL)[1])


def _backward_filters(ctx, gU):
    # U[a, b, k, c] = sum_ij G[a, i] w[k, c, i, j] G[b, j]  ->  grad w = G^T gU G per filter
    alpha = ctx.tile + KERNEL - 1
    G = torch.tensor(_filter_matrix(ctx.tile), dtype=gU.dtype, device=gU.device)
    K, C = ctx.shape[0], ctx.shape[1]
    return torch.einsum("ai,abkc,bj->kcij", G, gU.reshape(alpha, alpha, K, C), G), None


torch.library.register_autograd("fastlayers::winograd_conv2d", _backward_fwd,
                                setup_context=_setup_fwd)
torch.library.register_autograd("fastlayers::winograd_filter_transform", _backward_filters,
                                setup_context=_setup_filters)
torch.library.register_autograd("fastlayers::winograd_conv2d_input_grad", _backward_input_grad,
                                setup_context=_setup_input_grad)
torch.library.register_autograd("fastlayers::winograd_conv2d_weight_grad", _backward_weight_grad,
                                setup_context=_setup_grad)
