"""Drop-in modules. fastlayers.Conv2d *is* a torch.nn.Conv2d and fastlayers.Conv1d a
torch.nn.Conv1d (same constructor, parameters, initialisation, state_dict and repr); only their
forward differs: each pass picks its algorithm through the tuner, PyTorch's own path always among
the candidates. A Conv1d runs as a 2-D convolution of height 1."""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.symbolic_shapes import guard_scalar

from . import _C, algorithms
from . import tuner as _tuner
from .tuner import conv2d as _tuner_conv2d
from ._common import conv_tf32_allowed, pair, same_padding
from .algorithms import NATIVE, Choice
from .rnn import LSTM

__all__ = ["Conv1d", "Conv2d", "cached_filter_transforms", "convert", "tuned_layers"]

_CUDA_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_CPU_DTYPES = (torch.float32, torch.float64)


class _Plan(NamedTuple):
    """A module's three choices for one input signature, with their op calls bound once."""
    choices: Tuple[Choice, Choice, Choice]  # forward, input_grad, weight_grad
    native: bool     # all three PyTorch's own: nn.Conv*d's autograd runs the backward
    forward: Callable[..., torch.Tensor]   # fn(x, w, b, gy)
    grads: Callable[..., tuple]            # fn(x, w, gy, need_x, need_w) -> (gx, gw)
    # The eager call through the C++ autograd node, cpp(x, w, b, need_backward) -> y, or None
    # where a family has no C++ form (then _ConvFunction, the same node in Python).
    cpp: Optional[Callable[..., torch.Tensor]]
    # The forward's filters transformed ahead, transform(w) -> U for cpp's fifth argument, where
    # the forward's family has one and cpp is there to take it (cached_filter_transforms).
    filters: Optional[Callable[[torch.Tensor], torch.Tensor]] = None


_ALL_NATIVE = _Plan((NATIVE, NATIVE, NATIVE), True, None, None, None)
_ALL_NATIVE_LABELS = (NATIVE.label,) * 3


def _bind(labels: Tuple[str, str, str], padding: Tuple[int, int], tf32: bool,
          height_one: bool) -> _Plan:
    """The plan of `labels`; all native runs the layer's own convolution inline and binds
    nothing. With `height_one` the calls take and give 1-D tensors ([N, C, L] run as
    [N, C, 1, L])."""
    choices = tuple(algorithms.parse(v) for v in labels)
    if choices == _ALL_NATIVE.choices:
        return _ALL_NATIVE
    fwd, igrad, wgrad = choices
    forward = algorithms.conv2d_call(fwd, "forward", padding, tf32, nn_layout=not height_one)
    grads = algorithms.conv2d_grads(igrad, wgrad, padding, tf32)
    if height_one:
        forward, grads = _height_one(forward, grads)
    cpp = algorithms.conv2d_cpp_plan(choices, padding, tf32, height_one)
    filters = algorithms.conv2d_filter_transform(fwd) if cpp is not None else None
    return _Plan(choices, False, forward, grads, cpp, filters)


def _height_one(forward, grads):
    """`forward` and `grads` of a 2-D convolution on 1-D operands: x [N, C, L], w [K, C, k] and
    gy [N, K, L'] go in as height-1 views, the results come back in the operands' shapes (the
    forward's contiguous, as nn.Conv1d's, and by _unsafe_view, which autograd does not take for a
    view: _ConvFunction's output may then be changed in place, as nn.Conv1d's may)."""
    def forward_1d(x, w, b, gy):
        y = forward(x.unsqueeze(2), w.unsqueeze(2), b, None).contiguous()
        return torch.ops.aten._unsafe_view(y, (y.shape[0], y.shape[1], y.shape[3]))

    def grads_1d(x, w, gy, need_x, need_w):
        gx, gw = grads(x.unsqueeze(2), w.unsqueeze(2), gy.unsqueeze(2), need_x, need_w)
        return (None if gx is None else gx.squeeze(2), None if gw is None else gw.squeeze(2))
    return forward_1d, grads_1d


# The module's own autograd (_ConvFunction) differentiates its op calls, so they go straight to
# the device kernels: below the Autograd key, the ops' registered autograd (Python) is not entered.
# Under torch.compile the ops are traced as they are.
def _below_autograd():
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return torch._C._AutoDispatchBelowAutograd()


class _ConvFunction(torch.autograd.Function):
    """One convolution whose three passes may each use a different algorithm (a _Plan): the
    Python form of the C++ node (_Plan.cpp), for torch.compile and for families without a C++
    form."""

    # forward(ctx, ...) rather than a separate setup_context: apply() then skips binding the
    # arguments to a signature on every call.
    @staticmethod
    def forward(ctx, x, w, b, plan):
        ctx.save_for_backward(x, w)
        ctx.plan = plan
        ctx.has_bias = b is not None
        with _below_autograd():
            return plan.forward(x, w, b, None)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the ops' own autograd records them
            gx, gw = ctx.plan.grads(x, w, gy, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        else:
            with _below_autograd():
                gx, gw = ctx.plan.grads(x, w, gy, ctx.needs_input_grad[0],
                                        ctx.needs_input_grad[1])
        gb = None
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = gy.sum((0, 2, 3) if gy.dim() == 4 else (0, 2))
        return gx, gw, gb, None


def _problem(x_shape, w_shape, padding, dtype, device, layout, tf32, deterministic, transforms):
    """tuner.ConvProblem.from_tensors from the tensors' constants (x [S, C, H, W], w [K, C, kh,
    kw]): under torch.compile there are only fake tensors."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        cap = "%d.%d" % torch.cuda.get_device_capability(device)
    else:
        name, cap = device.type, "-"
    S, C, H, W = x_shape
    K, _, kh, kw = w_shape
    return _tuner.ConvProblem(S=S, C=C, K=K, H=H, W=W, kh=kh, kw=kw, ph=padding[0],
                              pw=padding[1], dtype=str(dtype).replace("torch.", ""),
                              device_type=device.type, device_name=name, capability=cap,
                              layout=layout, tf32=tf32, deterministic=deterministic,
                              transforms=transforms)


# _choose and _bound run as Python when a graph is traced; their results enter it as constants.
# So the tuner measures inputs of its own, never fake tensors, and plans (the registry's choices and
# op calls) are made outside the trace: dynamo can neither return functions as constants nor replay
# a Choice made while tracing. The traced code reads a plan back as an attribute of _Plans, which
# dynamo reads when asked (a dict it reads once per trace, before the next layer's entries).
@torch.compiler.assume_constant_result
def _choose(x_shape, w_shape, padding, dtype, device, layout, tf32, deterministic, transforms,
            need_backward, forced, bias, eager) -> Tuple[str, str, str]:
    """Each pass's label: the pinned one (`forced`, recorded for report()), else the tuner's
    (PyTorch's path for the gradients when none is needed). In an eager training step, tuned
    passes that are not all PyTorch's stay only where the layer as a whole beats PyTorch's, and
    passes left on PyTorch's path may move to their best candidates where that costs the step
    less (tuner.conv2d.check_conv2d_layer); a compiled graph runs the ops without the eager
    path's costs that the check weighs."""
    p = _problem(x_shape, w_shape, padding, dtype, device, layout, tf32, deterministic, transforms)
    out = []
    for i, pass_ in enumerate(_tuner.PASSES):
        if forced is not None and forced[i] is not None:
            algorithms.check_fits(forced[i], p, pass_)  # ValueError: the label cannot serve it
            _tuner.record_forced(p, pass_, forced[i])
            out.append(forced[i])
        elif pass_ != "forward" and not need_backward:
            out.append(NATIVE.label)
        else:
            out.append(_tuner.choose_conv2d(p, pass_, device))
    labels = tuple(out)
    if eager and need_backward and forced is None and labels != _ALL_NATIVE_LABELS:
        def run(labels_):
            plan = getattr(_Plans, _bound(labels_, padding, tf32, False))

            def step(x, w, b):
                return (plan.cpp(x, w, b, True) if plan.cpp is not None
                        else _ConvFunction.apply(x, w, b, plan))
            return step
        check = _tuner_conv2d.LayerCheck(p, labels, bias, run,
                                         _tuner_conv2d.layer_alternative(p, labels))
        labels = _tuner_conv2d.check_conv2d_layer(check, device)
    return labels


@torch.compiler.assume_constant_result
def _note_fallback_traced(kind, in_channels, out_channels, kernel_size, stride, dilation, groups,
                          reason) -> bool:
    """tuner.note_fallback when a graph is traced (a side effect the graph does not replay)."""
    _tuner.note_fallback("%s(%d, %d, kernel_size=%s, stride=%s, dilation=%s, groups=%d)" % (
        kind, in_channels, out_channels, kernel_size, stride, dilation, groups), reason)
    return True


class _Plans:
    """Every plan _bound has made, one class attribute each."""


_plan_names: Dict[tuple, str] = {}  # _bound's arguments -> the plan's attribute on _Plans
_plan_lock = threading.Lock()


@torch.compiler.assume_constant_result
def _bound(labels: Tuple[str, str, str], padding: Tuple[int, int], tf32: bool,
           height_one: bool) -> str:
    """The name on _Plans of _bind's plan for these arguments, made now if new."""
    key = (labels, padding, tf32, height_one)
    with _plan_lock:
        name = _plan_names.get(key)
        if name is None:
            name = "plan%d" % len(_plan_names)
            setattr(_Plans, name, _bind(*key))
            _plan_names[key] = name
    return name


class _TunedConv:
    """What fastlayers.Conv1d and Conv2d share: the forward, the plans and the pinned labels.
    A subclass (with nn.Conv1d or nn.Conv2d after this class) sets the class attributes below."""

    _fl_kind: str = ""                 # "conv1d", "conv2d": the layer's name in report()
    _fl_dims: int = 0                  # its spatial dimensions
    _fl_unit: Tuple[int, ...] = ()     # stride and dilation 1 in every dimension

    # The pinned label per pass (None: the tuner's), or None when nothing is pinned. Labels rather
    # than Choices: they are part of every call's plan key, and strings hash without Python code.
    _fl_forced: Optional[Tuple[Optional[str], ...]] = None
    _fl_plans: Optional[Dict] = None  # this module's plans per input signature
    _fl_warned = False  # pinned labels on a layer that cannot use them: said once

    # This layer's own switch for transform-based algorithms (FFT): False keeps it on direct ones
    # whatever the global switch (fastlayers.tuner.set_transforms) says, True allows them; None
    # follows the global switch. See docs/tuner.md, "Non-finite and wide-range inputs".
    transforms: Optional[bool] = None

    def force_algorithms(self, forward: Optional[str] = None, input_grad: Optional[str] = None,
                         weight_grad: Optional[str] = None):
        """Pins labels per pass (None: that pass stays with the tuner); ValueError naming a label
        no algorithm family knows. Returns the module."""
        forced = tuple(None if v is None else algorithms.parse(v).label
                       for v in (forward, input_grad, weight_grad))
        self._fl_forced = None if forced == (None, None, None) else forced
        self._fl_warned = False
        if self._fl_forced is not None:
            why = self._unsupported_layer()
            if why is not None:
                self._warn_forced(why)
        return self

    def _warn_forced(self, why: str) -> None:
        if not self._fl_warned:
            self._fl_warned = True
            warnings.warn("fastlayers.%s(%s): the pinned algorithms %s are not used: %s; the layer "
                          "runs PyTorch's path" % (type(self).__name__, self.extra_repr(),
                                                   self._fl_forced, why), stacklevel=3)

    def _unsupported_layer(self) -> Optional[str]:
        """Why the layer's own settings rule out fastlayers' algorithms, or None."""
        if self.stride != self._fl_unit:
            return "stride %s (the FFT and Winograd algorithms take stride 1)" % (
                tuple(self.stride),)
        if self.dilation != self._fl_unit:
            return "dilation %s" % (tuple(self.dilation),)
        if self.groups != 1:
            return "groups=%d" % self.groups
        return None

    def _unsupported(self, x: torch.Tensor) -> Optional[str]:
        why = self._unsupported_layer()
        if why is not None:
            return why
        dev = x.device.type
        if dev != "cuda" and dev != "cpu":
            return "device %s" % dev
        if x.dtype not in (_CUDA_DTYPES if dev == "cuda" else _CPU_DTYPES):
            return "dtype %s on %s" % (x.dtype, dev)
        return None

    def _pad_spec(self):
        """(pad, (ph, pw)): F.pad's arguments (pad, mode) for the padding mode and asymmetric
        'same', applied to the input first, or None; and the 2-D problem's zero padding (a
        Conv1d's is (0, p))."""
        if self.padding_mode != "zeros":
            # nn.Conv*d pads by the amounts its constructor resolved (left, right[, top, bottom])
            return (tuple(self._reversed_padding_repeated_twice), self.padding_mode), (0, 0)
        # zeros: self.padding, which nn.Conv*d reads on every call (a later change counts): an
        # int, a tuple, or 'same' / 'valid' resolved as F.conv*d does (the odd extra of an even
        # kernel's 'same' after the input)
        p = self.padding
        if isinstance(p, str):
            lo, hi = (same_padding(self.kernel_size, self.dilation) if p == "same" else
                      ([0] * len(self.kernel_size),) * 2)
            if lo != hi:
                rp = [v for side in zip(reversed(lo), reversed(hi)) for v in side]
                return (tuple(rp), "constant"), (0, 0)
            p = lo
        else:  # an int, or a tuple (of one value: every side) as nn.Conv*d takes them
            p = pair(p, "padding")
        return None, ((0, p[0]) if self._fl_dims == 1 else (p[0], p[1]))

    def _padding_pair(self, x: torch.Tensor):
        """(input, (ph, pw)): `x` with _pad_spec's padding applied, and the zero padding left."""
        pad, padding = self._pad_spec()
        return (x if pad is None else F.pad(x, *pad)), padding

    def _plan(self, x, w, padding, tf32, need_backward, bias) -> _Plan:
        """This input signature's plan: _choose's labels, bound by _bound. Kept per module
        eagerly; under torch.compile each traced graph holds its own."""
        forced = self._fl_forced
        plans = self._fl_plans
        if plans is None:
            plans = {}
            if not torch.compiler.is_compiling():
                self._fl_plans = plans
        transforms = _tuner.transforms_allowed() if self.transforms is None else bool(self.transforms)
        # is_contiguous(): channels_last and contiguous inputs are different problems to the tuner
        # the weight's shape too: a layer's weight may be replaced by one of another shape
        key = (tuple(x.shape), tuple(w.shape), x.dtype, x.device, x.is_contiguous(), padding,
               tf32, need_backward, torch.are_deterministic_algorithms_enabled(), transforms,
               forced, bias, _tuner.generation())
        got = plans.get(key)
        if got is not None:
            return got
        x4, w4 = (x.unsqueeze(2), w.unsqueeze(2)) if self._fl_dims == 1 else (x, w)
        layout = ("channels_last" if not x4.is_contiguous()
                  and x4.is_contiguous(memory_format=torch.channels_last) else "contiguous")
        # guard_scalar: the tuner decides per shape, so a dynamic size is specialised here.
        labels = _choose(tuple(guard_scalar(n) for n in x4.shape),
                         tuple(guard_scalar(n) for n in w4.shape), padding, x.dtype, x.device,
                         layout, tf32, torch.are_deterministic_algorithms_enabled(),
                         transforms, need_backward, forced, bias,
                         not torch.compiler.is_compiling())
        plan = getattr(_Plans, _bound(labels, padding, tf32, self._fl_dims == 1))
        if not torch.compiler.is_compiling():
            plans[key] = plan
        return plan

    # The eager fast path: the last call's signature and what it decided (_Route). A call whose
    # signature matches runs the route without deciding again; setting any attribute of the layer
    # (padding, stride, transforms, force_algorithms, a new weight, train/eval) forgets it.
    _fl_route: Optional[tuple] = None

    def __setattr__(self, name, value):
        if name == "transforms" and value is not None and not isinstance(value, bool):
            raise TypeError(f"fastlayers.{type(self).__name__}.transforms must be True, False or "
                            f"None (the global switch), got {value!r}")
        if name != "_fl_route":
            self.__dict__.pop("_fl_route", None)
        super().__setattr__(name, value)

    def __prepare_scriptable__(self):
        # torch.jit.script cannot compile the tuned forward; handing it an nn.Conv*d instead
        # would also put that in place of this layer in the caller's model (script replaces
        # submodules in place), a silent change of algorithm: refuse, and say what works.
        raise RuntimeError(
            "fastlayers.%s(%s) cannot be scripted with torch.jit.script: use torch.compile or "
            "torch.export, or script a model that has the torch.nn layers" % (
                type(self).__name__, self.extra_repr()))

    def __getstate__(self):
        # Plans and the route hold bound op calls (closures, which do not pickle) and are
        # rebuilt on the next call: torch.save(model) and copy.deepcopy leave them out.
        state = dict(super().__getstate__())
        state.pop("_fl_plans", None)
        state.pop("_fl_route", None)
        return state

    def _fl_kept_filters(self, plan: _Plan, weight: torch.Tensor, w: torch.Tensor):
        """The transformed filters of `w` (`weight` as the op takes it, cast under autocast) for
        `plan`, kept in this thread's cached_filter_transforms block, or None where they are not
        kept. The key (the weight itself, its version and storage, the forward's choice, the
        dtype, device and stream) changes with anything the filters depend on that PyTorch
        tracks: ``weight.data = t`` keeps the version but not the storage."""
        if (weight is not self._parameters.get("weight") or weight.is_inference()
                or (w.is_cuda and torch.cuda.is_current_stream_capturing())):
            return None
        stream = torch.cuda.current_stream(w.device).cuda_stream if w.is_cuda else None
        key = (plan.choices[0], weight._version, weight.data_ptr(), w.dtype, w.device, stream)
        kept = _kept.filters.get(self)
        if kept is not None and kept[0] is weight and kept[1] == key:
            return kept[2]
        with torch.no_grad():
            U = plan.filters(w)
        # the weight and the storage transformed held: no other tensor takes the weight's
        # address, nor new storage the old one's (weight.data = t twice would come back to it)
        _kept.filters[self] = (weight, key, U, weight.untyped_storage())
        return U

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # The parameters from their dict (Module.__getattr__ costs microseconds); a weight or bias
        # held elsewhere (parametrizations, weight_norm) through the attribute.
        params = self._parameters
        w = params.get("weight")
        if w is None:
            w = self.weight
        b = params["bias"] if "bias" in params else self.bias
        if torch.compiler.is_compiling():
            return self._fl_run(self._fl_decide(input, w, b), input, w, b, eager=False)
        # Everything _fl_decide reads that a layer attribute does not hold, in one C++ call
        # (csrc/conv_module: the input's shape, dtype, device and layout, the weight's, autocast,
        # grad mode and which operands need gradients, deterministic mode, PyTorch's TF32 switch
        # for convolution, the tuner's generation and transforms switch).
        try:
            sig = _signature(input, w, b, _tuner_state.generation, _tuner_state.transforms)
        except TypeError:  # not a tensor: nn.Conv*d's own error
            return self._conv_forward(input, w, b)
        route = self._fl_route
        if route is None or route[0] != sig:
            route = (sig, self._fl_decide(input, w, b))
            self.__dict__["_fl_route"] = route
        if route[1].plan.native:  # _fl_run's first branch, a call frame sooner
            return self._conv_forward(input, w, b)
        return self._fl_run(route[1], input, w, b, eager=True)

    def _fl_decide(self, input: torch.Tensor, w, b) -> "_Route":
        """What a call with this input does: PyTorch's own forward (a fallback, recorded for
        report()), or a plan, with the padding and batch handling around it."""
        if input.dim() != self._fl_dims + 1 and input.dim() != self._fl_dims + 2:
            return _SUPER  # nn.Conv*d's own error
        if not torch.compiler.is_compiling():
            why = _C.pytorch_only_context([input, w, b])  # (the signature flags it)
            if why is not None:
                _tuner.note_fallback("%s(%s)" % (self._fl_kind, self.extra_repr()), why)
                return _SUPER
        dev = input.device.type
        # Under autocast nn.Conv*d computes in the autocast dtype: compare the operands as cast.
        x_, w_, _ = _autocast_operands(input, w, None, dev)
        if x_.dtype != w_.dtype or x_.shape[-self._fl_dims - 1] != w_.shape[1] * self.groups:
            return _SUPER  # nn.Conv*d's own error (nothing tuned for a call that fails)
        reason = self._unsupported(x_)  # (CPU autocast to bfloat16 included, recorded)
        if reason is not None:
            if torch.compiler.is_compiling():  # (extra_repr does not trace)
                _note_fallback_traced(self._fl_kind, self.in_channels, self.out_channels,
                                      tuple(self.kernel_size), tuple(self.stride),
                                      tuple(self.dilation), self.groups, reason)
            else:
                _tuner.note_fallback("%s(%s)" % (self._fl_kind, self.extra_repr()), reason)
                if self._fl_forced is not None:
                    self._warn_forced(reason)
            return _SUPER
        unbatched = input.dim() == self._fl_dims + 1
        x = x_.unsqueeze(0) if unbatched else x_
        w = w_
        pad, padding = self._pad_spec()
        xp = x if pad is None else F.pad(x, *pad)
        # A kernel larger than the padded input (for a Conv1d, [-2] compares height 1 with 1).
        if (xp.shape[-2] + 2 * padding[0] < w.shape[-2]
                or xp.shape[-1] + 2 * padding[1] < w.shape[-1]):
            return _SUPER  # nn.Conv*d raises its own error
        if torch.compiler.is_exporting() and any(isinstance(n, torch.SymInt) for n in xp.shape):
            # The tuner decides per shape; torch.export keeps a dynamic size dynamic (it refuses
            # the specialisation torch.compile makes): PyTorch's path, which takes any size.
            _note_fallback_traced(self._fl_kind, self.in_channels, self.out_channels,
                                  tuple(self.kernel_size), tuple(self.stride),
                                  tuple(self.dilation), self.groups,
                                  "a dynamic size under torch.export")
            return _SUPER
        tf32 = x.dtype == torch.float32 and dev == "cuda" and conv_tf32_allowed()
        need_backward = torch.is_grad_enabled() and (
            x.requires_grad or w.requires_grad or (b is not None and b.requires_grad))
        plan = self._plan(xp, w, padding, tf32, need_backward, b is not None)
        return _Route(plan, pad, padding, unbatched, need_backward)

    def _fl_run(self, route: "_Route", input: torch.Tensor, w, b, eager: bool) -> torch.Tensor:
        """Runs `route`; `eager`: not traced by torch.compile (which traces the ops, not the C++
        node)."""
        if route.plan.native:
            # nn.Conv*d's own forward (a fallback, or every pass on PyTorch's path): its padding,
            # unbatched input and autocast casts in C++, at nn.Conv*d's host cost
            return self._conv_forward(input, w, b)
        x = input.unsqueeze(0) if route.unbatched else input
        weight = w
        # Under autocast the operands take the autocast dtype (its casts in the ops are then
        # no-ops); _fl_decide sent a cast dtype the device does not serve to _SUPER.
        x, w, b = _autocast_operands(x, w, b, x.device.type)
        if route.pad is not None:
            x = F.pad(x, *route.pad)
        plan = route.plan
        U = None
        if plan.filters is not None and eager and not route.need_backward and _kept.depth:
            U = self._fl_kept_filters(plan, weight, w)
        if U is not None:
            y = plan.cpp(x, w, b, False, U)
        elif eager and plan.cpp is not None:
            y = plan.cpp(x, w, b, route.need_backward)
        elif not route.need_backward:
            with _below_autograd():
                y = plan.forward(x, w, b, None)
        else:
            y = _ConvFunction.apply(x, w, b, plan)
        return y.squeeze(0) if route.unbatched else y


class _KeptFilters(threading.local):
    depth = 0       # cached_filter_transforms blocks open in this thread
    filters = None  # layer -> (weight, key, filters, storage) kept in this thread's outermost block


_kept = _KeptFilters()


@contextlib.contextmanager
def cached_filter_transforms():
    """Within it, a fastlayers.Conv2d whose forward runs Winograd convolution (non-fused) and
    needs no gradient transforms its filters once and reuses them (Lavin & Gray's FX variant:
    inference over many batches with one weight). Kept per layer for its own weight parameter
    (the same tensor, its version counter and storage, the op's dtype, the device's current
    stream), and forgotten when the outermost block ends. Inside it, change a weight only
    through PyTorch's ops on the tensor itself (which move its version) or by assigning
    ``weight.data`` a new tensor (new storage): an in-place change through ``weight.data``, or a
    fused optimizer's step, moves neither and is not seen.
    A weight that is not the layer's own parameter (a parametrization, weight_norm), an
    inference tensor, and calls during CUDA-graph capture are transformed in each call, as
    outside. Threads have their own blocks."""
    outer = _kept.depth == 0
    if outer:
        _kept.filters = {}
    _kept.depth += 1
    try:
        yield
    finally:
        _kept.depth -= 1
        if outer:
            _kept.filters = None


_AUTOCAST_DEVICES = ("cuda", "cpu")  # the devices fastlayers' algorithms serve


def _autocast_operands(x, w, b, dev: str):
    """x, w, b as autocast casts a convolution's operands on `dev`: floating tensors other than
    float64 to the autocast dtype, where autocast is on; unchanged otherwise."""
    # (autocast knows some devices only: asked of another, meta say, it raises)
    if dev not in _AUTOCAST_DEVICES or not torch.is_autocast_enabled(dev):
        return x, w, b
    dt = torch.get_autocast_dtype(dev)
    cast = lambda t: t if t is None or t.dtype == torch.float64 else t.to(dt)  # noqa: E731
    return cast(x), cast(w), cast(b)


class _Route(NamedTuple):
    """What a layer's call does for one input signature (_TunedConv._fl_decide)."""
    plan: _Plan
    pad: Optional[tuple]      # F.pad's (pad, mode) applied first (padding modes, asymmetric
    #                           'same'), or None
    padding: Tuple[int, int]  # the 2-D problem's zero padding (a Conv1d's is (0, p))
    unbatched: bool
    need_backward: bool


_SUPER = _Route(_ALL_NATIVE, None, (0, 0), False, False)  # nn.Conv*d's own forward


_signature = _C.conv_signature
_tuner_state = _tuner._state  # one object for the process; its fields change, never it


class Conv2d(_TunedConv, nn.Conv2d):
    """torch.nn.Conv2d, tuned per shape and per pass.

    Supported by fastlayers' algorithms: stride 1, dilation 1, groups 1, any padding and padding
    mode, fp32/fp64/fp16/bf16 on CUDA and fp32/fp64 on CPU. Everything else runs nn.Conv2d's own
    path and is listed by ``fastlayers.tuner.report()`` with the reason.

    ``force_algorithms(forward=..., input_grad=..., weight_grad=...)`` pins algorithm labels
    ('native', 'fft:NHxNW' for cuFFT, 'fbfft:NHxNW', either with ',tile=THxTW', 'winograd:T',
    'winograd:2,fused'; see ``fastlayers.algorithms``) on this module, bypassing the tuner
    (benchmarks, tests).
    """
    _fl_kind = "conv2d"
    _fl_dims = 2
    _fl_unit = (1, 1)


class Conv1d(_TunedConv, nn.Conv1d):
    """torch.nn.Conv1d, tuned per shape and per pass as fastlayers.Conv2d is (the same support,
    fallbacks and ``force_algorithms``).

    It runs as a 2-D convolution of height 1: input [N, C, L] as [N, C, 1, L], weight [K, C, k]
    as [K, C, 1, k], padding (0, p); labels and tuner keys are that problem's ('fft:1x64').
    """
    _fl_kind = "conv1d"
    _fl_dims = 1
    _fl_unit = (1,)


_FASTLAYERS_CLASS = {nn.Conv1d: Conv1d, nn.Conv2d: Conv2d, nn.LSTM: LSTM}


def convert(module: nn.Module) -> nn.Module:
    """Turn every torch.nn.Conv1d, torch.nn.Conv2d and torch.nn.LSTM in `module` (itself
    included) into its fastlayers class, in place (exact types: subclasses are left alone).

    Parameters, buffers, hooks, device and dtype stay as they are (the objects are the same), so an
    optimizer built before the conversion keeps working. Returns `module`.
    """
    for m in module.modules():
        cls = _FASTLAYERS_CLASS.get(type(m))
        if cls is not None:
            m.__class__ = cls
    return module


def tuned_layers(module: nn.Module):
    """The fastlayers layers in `module` (itself included), in module order: convolutions and
    LSTMs."""
    return [m for m in module.modules() if isinstance(m, (_TunedConv, LSTM))]
