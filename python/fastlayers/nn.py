"""Drop-in modules. fastlayers.Conv2d *is* a torch.nn.Conv2d (same constructor, parameters,
initialisation, state_dict and repr); only its forward differs: each pass picks its algorithm
through the tuner, PyTorch's own path always among the candidates."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from . import tuner as _tuner
from .ops import conv_tf32_allowed

__all__ = ["Conv2d", "convert"]

_CUDA_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_CPU_DTYPES = (torch.float32, torch.float64)


def _fft_op_args(label: str, tf32: bool):
    """The ops' arguments after `padding` for an FFT label: (basis, tf32, backend, tile)."""
    basis, backend, tile = _tuner.fft_args(label)
    return basis, tf32, backend, tile


class _Conv2dFunction(torch.autograd.Function):
    """One convolution whose three passes may each use a different algorithm."""

    @staticmethod
    def run_forward(x, w, b, padding, fwd, tf32):
        if fwd == "native":
            return F.conv2d(x, w, b, 1, padding)
        y = torch.ops.fastlayers.fft_conv2d(x, w, b, padding, *_fft_op_args(fwd, tf32))
        if not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
            y = y.contiguous(memory_format=torch.channels_last)  # the layout nn.Conv2d returns
        return y

    # forward(ctx, ...) rather than a separate setup_context: apply() then skips binding the
    # arguments to a signature on every call, which costs more host time than the rest.
    @staticmethod
    def forward(ctx, x, w, b, padding, fwd, igrad, wgrad, tf32):
        ctx.save_for_backward(x, w)
        ctx.conf = (padding, igrad, wgrad, tf32, b is not None)
        return _Conv2dFunction.run_forward(x, w, b, padding, fwd, tf32)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        padding, igrad, wgrad, tf32, has_bias = ctx.conf
        gx = gw = gb = None
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        native = [need_x and igrad == "native", need_w and wgrad == "native", False]
        if any(native):  # one call for both native gradients
            gx, gw, _ = torch.ops.aten.convolution_backward(
                gy, x, w, None, [1, 1], list(padding), [1, 1], False, [0, 0], 1, native)
        if need_x and igrad != "native":
            gx = torch.ops.fastlayers.fft_conv2d_input_grad(gy, w, padding,
                                                            *_fft_op_args(igrad, tf32))
        if need_w and wgrad != "native":
            gw = torch.ops.fastlayers.fft_conv2d_weight_grad(gy, x, padding,
                                                             *_fft_op_args(wgrad, tf32))
        if has_bias and ctx.needs_input_grad[2]:
            gb = gy.sum((0, 2, 3))
        return gx, gw, gb, None, None, None, None, None


class Conv2d(nn.Conv2d):
    """torch.nn.Conv2d, tuned per shape and per pass.

    Supported by fastlayers' algorithms: stride 1, dilation 1, groups 1, any padding and padding
    mode, fp32/fp64/fp16/bf16 on CUDA and fp32/fp64 on CPU. Everything else runs nn.Conv2d's own
    path and is listed by ``fastlayers.tuner.report()`` with the reason.

    ``force_algorithms(forward=..., input_grad=..., weight_grad=...)`` pins labels ('native',
    'fft:NHxNW' for cuFFT, 'fbfft:NHxNW', either with ',tile=THxTW') on this module, bypassing the
    tuner (benchmarks, tests).
    """

    _fl_forced: Optional[Dict[str, str]] = None  # pinned labels per pass, or None (tuner)
    _fl_plans: Optional[Dict] = None  # this module's choices per input signature

    def force_algorithms(self, forward: Optional[str] = None, input_grad: Optional[str] = None,
                         weight_grad: Optional[str] = None) -> "Conv2d":
        forced = {k: v for k, v in (("forward", forward), ("input_grad", input_grad),
                                    ("weight_grad", weight_grad)) if v is not None}
        for v in forced.values():
            _tuner.parse_choice(v)
        self._fl_forced = forced or None
        return self

    def _unsupported(self, x: torch.Tensor) -> Optional[str]:
        if self.stride != (1, 1):
            return "stride %s (FFT convolution needs stride 1)" % (tuple(self.stride),)
        if self.dilation != (1, 1):
            return "dilation %s" % (tuple(self.dilation),)
        if self.groups != 1:
            return "groups=%d" % self.groups
        dev = x.device.type
        if dev != "cuda" and dev != "cpu":
            return "device %s" % dev
        if x.dtype not in (_CUDA_DTYPES if dev == "cuda" else _CPU_DTYPES):
            return "dtype %s on %s" % (x.dtype, dev)
        return None

    def _padding_pair(self, x: torch.Tensor):
        """(input, (ph, pw)) with the padding mode and asymmetric 'same' applied explicitly."""
        if self.padding_mode != "zeros":
            return F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode), (0, 0)
        if isinstance(self.padding, str):
            rp = self._reversed_padding_repeated_twice  # (left, right, top, bottom)
            if rp[0] == rp[1] and rp[2] == rp[3]:
                return x, (rp[2], rp[0])
            return F.pad(x, rp), (0, 0)
        return x, (int(self.padding[0]), int(self.padding[1]))

    def _choices(self, x, w, padding, tf32, need_backward):
        forced = self._fl_forced
        plans = self._fl_plans
        if plans is None:
            plans = {}
            if not torch.compiler.is_compiling():
                self._fl_plans = plans
        key = (tuple(x.shape), x.dtype, x.device, padding, tf32, need_backward,
               torch.are_deterministic_algorithms_enabled(),
               None if forced is None else tuple(sorted(forced.items())), _tuner.generation())
        got = plans.get(key)
        if got is not None:
            return got
        compiling = torch.compiler.is_compiling()
        if compiling and forced is None:
            # No measuring while tracing: what this module chose eagerly, else PyTorch's path.
            return ("native", "native", "native")
        p = None if compiling else _tuner.ConvProblem.from_tensors(x, w, padding, tf32)
        out = []
        for pass_ in _tuner.PASSES:
            if forced is not None and pass_ in forced:
                label = forced[pass_]
                if p is not None:
                    _tuner.record_forced(p, pass_, label)
            elif compiling or (pass_ != "forward" and not need_backward):
                label = "native"
            else:
                label = _tuner.choose_conv2d(p, pass_, x.device)
            out.append(label)
        choice = tuple(out)
        if not compiling:
            plans[key] = choice
        return choice

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.dim() not in (3, 4) or input.dtype != self.weight.dtype:
            return super().forward(input)  # nn.Conv2d's own error
        reason = self._unsupported(input)
        if reason is not None:
            if not torch.compiler.is_compiling():
                _tuner.note_fallback("conv2d(%s)" % self.extra_repr(), reason)
            return super().forward(input)
        unbatched = input.dim() == 3
        x = input.unsqueeze(0) if unbatched else input
        w, b = self.weight, self.bias
        dev = x.device.type
        if torch.is_autocast_enabled(dev):
            dt = torch.get_autocast_dtype(dev)
            x, w = x.to(dt), w.to(dt)
            b = b.to(dt) if b is not None else None
            if dev == "cpu" and dt not in _CPU_DTYPES:
                return super().forward(input)
        x, padding = self._padding_pair(x)
        if x.shape[-2] < w.shape[-2] or x.shape[-1] < w.shape[-1]:
            return super().forward(input)  # nn.Conv2d raises its own error
        tf32 = x.dtype == torch.float32 and dev == "cuda" and conv_tf32_allowed()
        need_backward = torch.is_grad_enabled() and (
            x.requires_grad or w.requires_grad or (b is not None and b.requires_grad))
        fwd, igrad, wgrad = self._choices(x, w, padding, tf32, need_backward)
        # Under autocast the operands already have the autocast dtype, so its casts are no-ops.
        if fwd == igrad == wgrad == "native":
            y = F.conv2d(x, w, b, 1, padding)
        elif not need_backward:
            y = _Conv2dFunction.run_forward(x, w, b, padding, fwd, tf32)
        else:
            y = _Conv2dFunction.apply(x, w, b, padding, fwd, igrad, wgrad, tf32)
        return y.squeeze(0) if unbatched else y


def convert(module: nn.Module) -> nn.Module:
    """Turn every torch.nn.Conv2d in `module` (itself included) into a fastlayers.Conv2d, in place.

    Parameters, buffers, hooks, device and dtype stay as they are (the objects are the same), so an
    optimizer built before the conversion keeps working. Returns `module`.
    """
    for m in module.modules():
        if type(m) is nn.Conv2d:
            m.__class__ = Conv2d
    return module
