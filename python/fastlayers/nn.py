"""Drop-in modules. fastlayers.Conv2d *is* a torch.nn.Conv2d (same constructor, parameters,
initialisation, state_dict and repr); only its forward differs: each pass picks its algorithm
through the tuner, PyTorch's own path always among the candidates."""
from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from . import algorithms
from . import tuner as _tuner
from ._common import conv_tf32_allowed
from .algorithms import NATIVE, Choice

__all__ = ["Conv2d", "convert"]

_CUDA_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_CPU_DTYPES = (torch.float32, torch.float64)


class _Plan(NamedTuple):
    """A module's three choices for one input signature, with their op calls bound once."""
    choices: Tuple[Choice, Choice, Choice]  # forward, input_grad, weight_grad
    native: bool     # all three PyTorch's own: nn.Conv2d's autograd runs the backward
    forward: Callable[..., torch.Tensor]   # fn(x, w, b, gy)
    grads: Callable[..., tuple]            # fn(x, w, gy, need_x, need_w) -> (gx, gw)


_ALL_NATIVE = _Plan((NATIVE, NATIVE, NATIVE), True, None, None)


def _bind(choices: Tuple[Choice, Choice, Choice], padding: Tuple[int, int], tf32: bool) -> _Plan:
    """The plan of `choices`; all native runs F.conv2d inline and binds nothing."""
    if choices == _ALL_NATIVE.choices:
        return _ALL_NATIVE
    fwd, igrad, wgrad = choices
    return _Plan(choices, False,
                 algorithms.conv2d_call(fwd, "forward", padding, tf32, nn_layout=True),
                 algorithms.conv2d_grads(igrad, wgrad, padding, tf32))


class _Conv2dFunction(torch.autograd.Function):
    """One convolution whose three passes may each use a different algorithm (a _Plan)."""

    # forward(ctx, ...) rather than a separate setup_context: apply() then skips binding the
    # arguments to a signature on every call.
    @staticmethod
    def forward(ctx, x, w, b, plan):
        ctx.save_for_backward(x, w)
        ctx.plan = plan
        ctx.has_bias = b is not None
        return plan.forward(x, w, b, None)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        gx, gw = ctx.plan.grads(x, w, gy, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        gb = gy.sum((0, 2, 3)) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb, None


class Conv2d(nn.Conv2d):
    """torch.nn.Conv2d, tuned per shape and per pass.

    Supported by fastlayers' algorithms: stride 1, dilation 1, groups 1, any padding and padding
    mode, fp32/fp64/fp16/bf16 on CUDA and fp32/fp64 on CPU. Everything else runs nn.Conv2d's own
    path and is listed by ``fastlayers.tuner.report()`` with the reason.

    ``force_algorithms(forward=..., input_grad=..., weight_grad=...)`` pins algorithm labels
    ('native', 'fft:NHxNW' for cuFFT, 'fbfft:NHxNW', either with ',tile=THxTW'; see
    ``fastlayers.algorithms``) on this module, bypassing the tuner (benchmarks, tests).
    """

    # The pinned label per pass (None: the tuner's), or None when nothing is pinned. Labels rather
    # than Choices: they are part of every call's plan key, and strings hash without Python code.
    _fl_forced: Optional[Tuple[Optional[str], ...]] = None
    _fl_plans: Optional[Dict] = None  # this module's plans per input signature

    def force_algorithms(self, forward: Optional[str] = None, input_grad: Optional[str] = None,
                         weight_grad: Optional[str] = None) -> "Conv2d":
        """Pins labels per pass (None: that pass stays with the tuner); ValueError naming a label
        no algorithm family knows. Returns the module."""
        forced = tuple(None if v is None else algorithms.parse(v).label
                       for v in (forward, input_grad, weight_grad))
        self._fl_forced = None if forced == (None, None, None) else forced
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

    def _plan(self, x, w, padding, tf32, need_backward) -> _Plan:
        forced = self._fl_forced
        plans = self._fl_plans
        if plans is None:
            plans = {}
            if not torch.compiler.is_compiling():
                self._fl_plans = plans
        key = (tuple(x.shape), x.dtype, x.device, padding, tf32, need_backward,
               torch.are_deterministic_algorithms_enabled(),
               forced, _tuner.generation())
        got = plans.get(key)
        if got is not None:
            return got
        compiling = torch.compiler.is_compiling()
        if compiling and forced is None:
            # No measuring while tracing: what this module chose eagerly, else PyTorch's path.
            return _ALL_NATIVE
        p = None if compiling else _tuner.ConvProblem.from_tensors(x, w, padding, tf32)
        out = []
        for i, pass_ in enumerate(_tuner.PASSES):
            if forced is not None and forced[i] is not None:
                choice = algorithms.parse(forced[i])
                if p is not None:
                    _tuner.record_forced(p, pass_, choice.label)
            elif compiling or (pass_ != "forward" and not need_backward):
                choice = NATIVE
            else:
                choice = algorithms.parse(_tuner.choose_conv2d(p, pass_, x.device))
            out.append(choice)
        plan = _bind(tuple(out), padding, tf32)
        if not compiling:
            plans[key] = plan
        return plan

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
        plan = self._plan(x, w, padding, tf32, need_backward)
        # Under autocast the operands already have the autocast dtype, so its casts are no-ops.
        if plan.native:
            y = F.conv2d(x, w, b, 1, padding)
        elif not need_backward:
            y = plan.forward(x, w, b, None)
        else:
            y = _Conv2dFunction.apply(x, w, b, plan)
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
