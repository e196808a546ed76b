"""The LSTM ops: typed wrappers of torch.ops.fastlayers.lstm, lstm_backward and lstm_cell, their
fake kernels and autograd (lstm's backward is the lstm_backward op, lstm_persistent's
lstm_backward_persistent).

One layer, one direction per call; the module (fastlayers.LSTM) stacks layers and directions.
Semantics and shapes: csrc/fastlayers.cpp and docs/ops.md.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["lstm", "lstm_cell", "persistent_fits", "persistent_kernel", "rnn_tf32_allowed"]


def rnn_tf32_allowed() -> bool:
    """Whether PyTorch allows TF32 in cuDNN's RNNs (the switch nn.LSTM obeys; on by default).
    Under torch.compile the value is read once, when the graph is traced."""
    return _rnn_tf32_allowed()


@torch.compiler.assume_constant_result
def _rnn_tf32_allowed() -> bool:
    from . import _C
    return bool(_C.rnn_tf32_allowed())


def lstm(input: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor, w_hh: Tensor,
         b_ih: Optional[Tensor] = None, b_hh: Optional[Tensor] = None,
         w_hr: Optional[Tensor] = None, batch_sizes: Optional[Tensor] = None,
         reverse: bool = False, tf32: Optional[bool] = None
         ) -> Tuple[Tensor, Tensor, Tensor]:
    """One LSTM layer over a sequence: (output, h_n, c_n). `input` [T, B, I], or packed [N, I]
    with `batch_sizes` [T] (PackedSequence's); `tf32` None: PyTorch's switch for cuDNN RNNs."""
    tf32 = rnn_tf32_allowed() if tf32 is None else bool(tf32)
    out, h_n, c_n, _, _ = torch.ops.fastlayers.lstm(input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr,
                                                    batch_sizes, reverse, tf32)
    return out, h_n, c_n


def _sizes(batch, hidden, dtype, device, backward):
    """The arguments of _C's lstm_persistent_* queries: (batch, hidden, dtype's name, device
    index, backward)."""
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return int(batch), int(hidden), str(dtype).replace("torch.", ""), index, bool(backward)


def persistent_fits(batch: int, hidden: int, dtype: torch.dtype,
                    device: torch.device, backward: bool = False) -> bool:
    """Whether the persistent kernel (the lstm_persistent op on CUDA) serves `batch` sequences of
    `hidden` units in `dtype` on `device`: float32, float16 or bfloat16, the layer's rows of w_hh
    and the batch's h_{t-1} within a block's shared memory, every block resident at once.
    `backward`: whether the persistent backward (lstm_backward_persistent) serves them too
    (batches up to 16, and on clusters above; lstm_persistent's gradient is lstm_backward's
    elsewhere)."""
    device = torch.device(device)
    if (device.type != "cuda" or dtype not in (torch.float32, torch.float16, torch.bfloat16)
            or not torch.cuda.is_available()):
        return False
    from . import _C
    fits = getattr(_C, "lstm_persistent_fits", None)
    return bool(fits is not None and fits(*_sizes(batch, hidden, dtype, device, backward)))


def persistent_kernel(batch: int, hidden: int, dtype: torch.dtype,
                      device: torch.device, backward: bool = False) -> Optional[str]:
    """The kernel lstm_persistent's forward runs for `batch` sequences of `hidden` units in
    `dtype` on `device`: "cluster" (float16 and bfloat16 at hidden 128, 256 or 512 on compute
    capability 9.0 and later: thread-block clusters, a few batch rows each, exchanging h_t
    through distributed shared memory; up to 16 rows a cluster on the clusters the device holds
    at once), "grid-registers" (float32 at hidden 128, 256 or 512 on most
    GPUs: a cooperative kernel over the SMs holding w_hh in registers), "grid" (a cooperative
    kernel over the SMs, w_hh in shared memory), or None where
    persistent_fits is false. `backward`: the kernel of lstm_backward_persistent (the same
    rule; the cluster exchanges each block's partial products of dh), None where it does not
    serve (persistent_fits(..., backward=True) false)."""
    if not persistent_fits(batch, hidden, dtype, device, backward):
        return None
    from . import _C
    return _C.lstm_persistent_kernel(*_sizes(batch, hidden, dtype, device, backward)) or None


def _persistent_path(batch: int, hidden: int, dtype: torch.dtype, device: torch.device,
                     backward: bool = False) -> Tuple[Optional[str], int]:
    """What decides the arithmetic lstm_persistent (`backward`: its backward) runs for these
    sizes, besides the batch's own branches: the kernel (persistent_kernel) and, on clusters, the
    n-tiles of 8 rows a cluster (1 or 2; 0 elsewhere). The number of clusters does not: a row's
    arithmetic is the same on any of them."""
    kernel = persistent_kernel(batch, hidden, dtype, device, backward)
    if kernel != "cluster":
        return kernel, 0
    from . import _C
    return kernel, int(_C.lstm_persistent_clusters(
        *_sizes(batch, hidden, dtype, device, backward))[1])


def lstm_cell(input: Tensor, hx: Tensor, cx: Tensor, w_ih: Tensor, w_hh: Tensor,
              b_ih: Optional[Tensor] = None, b_hh: Optional[Tensor] = None,
              w_hr: Optional[Tensor] = None, tf32: Optional[bool] = None
              ) -> Tuple[Tensor, Tensor]:
    """One fused LSTM step: input [B, I], hx [B, R], cx [B, H] -> (h [B, R], c [B, H])."""
    tf32 = rnn_tf32_allowed() if tf32 is None else bool(tf32)
    return torch.ops.fastlayers.lstm_cell(input, hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr, tf32)


# ---------------------------------------------------------------------------------------------
# Fake kernels: shapes only (the ops' own checks run on real tensors). The packed row count is
# the input's, so no data-dependent size arises.


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


@torch.library.register_fake("fastlayers::lstm_persistent")
@torch.library.register_fake("fastlayers::lstm")
def _lstm_fake(input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, reverse=False,
               tf32=False):
    torch._check(w_ih.dim() == 2, lambda: "lstm: `w_ih` must be 2-D")
    H = w_ih.shape[0] // 4
    R = w_hr.shape[0] if w_hr is not None else H
    packed = batch_sizes is not None
    torch._check(input.dim() == (2 if packed else 3), lambda: "lstm: `input` has the wrong rank")
    N = input.shape[0] if packed else input.shape[0] * input.shape[1]
    out = input.new_empty((N, R) if packed else (input.shape[0], input.shape[1], R))
    reserve = input.new_empty((N, 5 * H), dtype=_acc(input.dtype))
    reserve_h = input.new_empty((N, R + (H if w_hr is not None else 0)))
    return out, h0.new_empty(h0.shape), c0.new_empty(c0.shape), reserve, reserve_h


@torch.library.register_fake("fastlayers::lstm_stack")
def _lstm_stack_fake(input, h0, c0, weights, has_biases, tf32=False):
    torch._check(input.dim() == 3, lambda: "lstm_stack: `input` must be 3-D [T, B, I]")
    L, T, B, H = h0.shape[0], input.shape[0], input.shape[1], h0.shape[2]
    return (input.new_empty((T, B, H)), h0.new_empty(h0.shape), c0.new_empty(c0.shape),
            input.new_empty((L - 1, T, B, H)),
            input.new_empty((L, T * B, 5 * H), dtype=_acc(input.dtype)),
            input.new_empty((L, T * B, H)))


@torch.library.register_fake("fastlayers::lstm_backward_persistent")
@torch.library.register_fake("fastlayers::lstm_backward")
def _lstm_backward_fake(grad_output, grad_h_n, grad_c_n, input, h0, c0, w_ih, w_hh, w_hr,
                        batch_sizes, reserve, reserve_h, reverse=False, tf32=False,
                        need_input=True, need_weights=True):
    def like(t, need):
        return t.new_empty(t.shape) if need else input.new_empty((0,))
    return (like(input, need_input), h0.new_empty(h0.shape), c0.new_empty(c0.shape),
            like(w_ih, need_weights), like(w_hh, need_weights),
            input.new_empty((w_ih.shape[0],) if need_weights else (0,)),
            like(w_hr, need_weights) if w_hr is not None else input.new_empty((0,)))


# ---------------------------------------------------------------------------------------------
# Autograd: lstm's backward is lstm_backward (not itself differentiable: no double backward, as
# with nn.LSTM on cuDNN). The reserve outputs carry no gradient.


def _setup_lstm(ctx, inputs, output):
    input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, reverse, tf32 = inputs
    _, _, _, reserve, reserve_h = output
    ctx.save_for_backward(input, h0, c0, w_ih, w_hh, w_hr, batch_sizes, reserve, reserve_h)
    ctx.flags = (reverse, tf32, b_ih is not None, b_hh is not None)
    ctx.mark_non_differentiable(reserve, reserve_h)


def _backward_lstm(ctx, g_out, g_h, g_c, _g_reserve, _g_reserve_h,
                   op=torch.ops.fastlayers.lstm_backward):
    input, h0, c0, w_ih, w_hh, w_hr, batch_sizes, reserve, reserve_h = ctx.saved_tensors
    reverse, tf32, has_b_ih, has_b_hh = ctx.flags
    need = ctx.needs_input_grad
    need_weights = any(need[3:8])
    if g_out is None:
        g_out = torch.zeros_like(input[..., :1]).expand(
            *input.shape[:-1], w_hr.shape[0] if w_hr is not None else w_hh.shape[1])
    gx, gh0, gc0, gw_ih, gw_hh, gb, gw_hr = op(
        g_out.contiguous(), g_h, g_c, input, h0, c0, w_ih, w_hh, w_hr, batch_sizes, reserve,
        reserve_h, reverse, tf32, need[0], need_weights)
    gb_ih = gb if has_b_ih and need[5] else None
    gb_hh = _second(gb, gb_ih) if has_b_hh and need[6] else None
    return (gx if need[0] else None, gh0 if need[1] else None, gc0 if need[2] else None,
            gw_ih if need[3] else None, gw_hh if need[4] else None, gb_ih, gb_hh,
            gw_hr if w_hr is not None and need[7] else None, None, None, None)


def _second(gb, first):
    """The two biases' gradients are equal: the second is a tensor of its own where the first
    is returned too (one object for both would let an in-place change of one alter the other)."""
    return gb.clone() if first is not None else gb


def _backward_lstm_persistent(ctx, *grads):
    # The persistent backward where it fits (on the grid, batches up to 16: above, every block
    # reading the gates' gradients of the whole batch each step costs more than the step-wise
    # GEMMs; on clusters, where they fit).
    input, w_hh = ctx.saved_tensors[0], ctx.saved_tensors[4]
    batched = ctx.saved_tensors[6] is None and input.dim() == 3 and ctx.saved_tensors[5] is None
    fits = (batched and input.is_cuda and
            persistent_fits(input.shape[1], w_hh.shape[1], input.dtype, input.device, True))
    op = torch.ops.fastlayers.lstm_backward_persistent if fits else \
        torch.ops.fastlayers.lstm_backward
    return _backward_lstm(ctx, *grads, op=op)


def _setup_lstm_stack(ctx, inputs, output):
    input, h0, c0, weights, has_biases, tf32 = inputs
    _, _, _, inner, reserve, reserve_h = output
    ctx.save_for_backward(input, h0, c0, inner, reserve, reserve_h, *weights)
    ctx.flags = (has_biases, tf32)
    ctx.mark_non_differentiable(inner, reserve, reserve_h)


def _backward_lstm_stack(ctx, g_out, g_h, g_c, _g_inner, _g_reserve, _g_reserve_h):
    # Layer by layer from the top: each layer's lstm_backward on its slices of what the stack
    # saved; a layer's input gradient is the gradient of the layer below's output.
    input, h0, c0, inner, reserve, reserve_h, *weights = ctx.saved_tensors
    has_biases, tf32 = ctx.flags
    need = ctx.needs_input_grad
    per = 4 if has_biases else 2
    L = h0.shape[0]
    gw = [None] * len(weights)
    gh0, gc0 = [None] * L, [None] * L
    g = g_out if g_out is not None else torch.zeros_like(input[..., :1]).expand(
        *input.shape[:-1], h0.shape[2])
    for layer in reversed(range(L)):
        x = input if layer == 0 else inner[layer - 1]
        w_ih, w_hh = weights[per * layer], weights[per * layer + 1]
        gx, gh0[layer], gc0[layer], gw_ih, gw_hh, gb, _ = torch.ops.fastlayers.lstm_backward(
            g.contiguous(), None if g_h is None else g_h[layer],
            None if g_c is None else g_c[layer], x, h0[layer], c0[layer], w_ih, w_hh, None,
            None, reserve[layer], reserve_h[layer], False, tf32, layer > 0 or need[0],
            any(need[3]))
        mine = [gw_ih, gw_hh] + ([gb, gb] if has_biases else [])
        for k, grad in enumerate(mine):
            gw[per * layer + k] = grad if need[3][per * layer + k] else None
        if has_biases and gw[per * layer + 3] is not None:
            gw[per * layer + 3] = _second(gb, gw[per * layer + 2])
        g = gx
    # the weights' gradients as a list of theirs (None where not needed), as autograd expects
    # for a list input, even where none is needed
    grads = (g if need[0] else None, torch.stack(gh0) if need[1] else None,
             torch.stack(gc0) if need[2] else None, gw, None, None)
    # as many as the call passed (the dispatcher drops trailing arguments left at their
    # defaults; with a list among the inputs the count must match)
    return grads[:len(need)]


def _backward_lstm_backward(ctx, *grads):
    raise RuntimeError("fastlayers.lstm: double backward is not supported (lstm_backward is not "
                       "differentiable, as nn.LSTM on cuDNN)")


def _setup_nothing(ctx, inputs, output):
    pass


torch.library.register_autograd("fastlayers::lstm", _backward_lstm, setup_context=_setup_lstm)
torch.library.register_autograd("fastlayers::lstm_persistent", _backward_lstm_persistent,
                                setup_context=_setup_lstm)
torch.library.register_autograd("fastlayers::lstm_stack", _backward_lstm_stack,
                                setup_context=_setup_lstm_stack)
# Without an autograd kernel of its own, lstm_backward would be differentiated through the ATen
# ops it runs, which do not see how the reserve depends on the inputs: a wrong second derivative.
torch.library.register_autograd("fastlayers::lstm_backward", _backward_lstm_backward,
                                setup_context=_setup_nothing)
torch.library.register_autograd("fastlayers::lstm_backward_persistent", _backward_lstm_backward,
                                setup_context=_setup_nothing)
