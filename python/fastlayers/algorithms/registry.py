"""The registry of algorithm families and the typed choice a label parses into.

A label names a family, then that family's parameters: ``native``, ``fft:16x16``,
``fbfft:16x16,tile=14x14``. ``parse`` turns it into a ``Choice`` once; everything else (the op
call for a pass, candidates, whether a choice fits a problem, workspace, description,
determinism) asks the family that registered the label's name.

Candidates and fitting differ: ``candidates`` is the short list the tuner measures, ``fits`` every
choice that can serve a problem. A label from elsewhere (a cache file, ``force_algorithms``) must
fit, not be a candidate: the list changes between versions, a fitting choice stays correct.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch._prims_common import suggest_memory_format

from .. import _C

__all__ = [
    "Choice", "Family", "CONV2D_PASSES", "LSTM_PASSES", "PASSES", "parse", "register", "unregister", "families",
    "candidates", "fits", "check_fits", "conv2d_call", "conv2d_grads", "conv2d_cpp_plan",
    "conv2d_filter_transform",
    "workspace_bytes",
    "describe", "deterministic",
]

# The passes of a convolution, each its own op and its own choice.
CONV2D_PASSES = ("forward", "input_grad", "weight_grad")
# What one choice of an LSTM layer stack serves: its forward alone (no gradient needed), or its
# forward and backward together (a backward reads what its own forward saved).
LSTM_PASSES = ("forward", "training")
# The passes of each layer kind.
PASSES = {"conv2d": CONV2D_PASSES, "lstm": LSTM_PASSES}

# fn(x, w, b, gy) -> Tensor: forward reads x, w, b; input_grad gy, w (x for its shape); weight_grad
# gy, x (w for its shape).
Conv2dCall = Callable[..., torch.Tensor]
# fn(x, w, gy, need_x, need_w) -> (grad x or None, grad w or None)
Conv2dGrads = Callable[..., Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]]


@dataclass(frozen=True)
class Choice:
    """One algorithm with its parameters. Equal and hashed by (family, params); ``label`` is the
    family's canonical text for them, so ``parse(choice.label) == choice``."""
    family: str
    params: Any  # the family's NamedTuple (FFT: FftParams(backend, basis, tile)); () for none
    label: str = field(compare=False)

    def __str__(self) -> str:
        return self.label

    def __repr__(self) -> str:
        return "Choice(%r)" % self.label


class Family:
    """An algorithm family: every answer the package needs about its choices, in one object.

    Subclasses set ``names`` (the label prefixes they own, before ``:``) and ``kinds`` (the layer
    kinds they serve: ``"conv2d"``), and override what they support.
    """
    names: Tuple[str, ...] = ()
    kinds: Tuple[str, ...] = ()
    # Whether a forward call returns the memory format nn.Conv2d returns for its input (channels_last
    # in, channels_last out); when not, ``conv2d_call(..., nn_layout=True)`` converts.
    keeps_input_layout = False
    # Whether the algorithm computes through a transform of the input (FFT: of each image;
    # Winograd: of each tile), so that one non-finite or huge input value spreads beyond the
    # outputs whose window holds it (docs/tuner.md). A problem with ``transforms`` False
    # (fastlayers.tuner.set_transforms, a layer's own setting) gets none of its choices.
    transform_based = False

    def parse(self, name: str, params: str, label: str) -> Any:
        """The parameters of `label` (its text after ``name:``, or "" when it has no colon);
        ValueError naming `label` when they are malformed."""
        raise NotImplementedError

    def format(self, name: str, params: Any) -> str:
        """The canonical label of (name, params); parse(format(...)) gives params back."""
        raise NotImplementedError

    def choice(self, name: str, params: Any) -> Choice:
        """The Choice of (name, params), under its canonical label."""
        return Choice(name, params, self.format(name, params))

    def candidates(self, problem, pass_: str) -> Iterable[Choice]:
        """The choices that support `problem` (of a kind in ``kinds``) in `pass_`, in the order the
        tuner measures them."""
        return ()

    def fits(self, choice: Choice, problem, pass_: str) -> Optional[str]:
        """None when `choice` can serve `problem` in `pass_` (its op accepts that shape), else the
        reason in words. This default accepts only the family's own candidates; a family whose
        choices take parameters should state the rule."""
        if choice in self.candidates(problem, pass_):
            return None
        return "not one of %s's candidates for this problem" % choice.family

    def conv2d_call(self, choice: Choice, pass_: str, padding: Tuple[int, int],
                    tf32: bool) -> Conv2dCall:
        """The op call of `pass_`, fn(x, w, b, gy) -> Tensor (see registry.conv2d_call)."""
        raise ValueError(f"{choice.label!r} is not a conv2d algorithm")

    def conv2d_grads(self, igrad: Choice, wgrad: Choice, padding: Tuple[int, int],
                     tf32: bool) -> Optional[Conv2dGrads]:
        """Both gradients in one call, where the family has one; None: the two pass calls."""
        return None

    def conv2d_filter_transform(self, choice: Choice) -> Optional[Callable]:
        """Where the forward can take its filters transformed ahead of the call (Winograd's FX
        variant; the modules' C++ node passes them on): transform(w) -> U; None where it
        cannot."""
        return None

    def cpp_pass(self, choice: Choice, pass_: str) -> Optional[tuple]:
        """How the modules' C++ autograd node (csrc/conv_module) runs `pass_` with `choice`:
        (algo, backend, basis, tile), algo 0 PyTorch's convolution, 1 the FFT ops, 2 the Winograd
        ops (tile[0] their tile); None where it cannot, and a module using the choice keeps its
        Python node."""
        return None

    def workspace_bytes(self, choice: Choice, problem, pass_: str) -> int:
        """Device bytes the call allocates beyond its inputs and output."""
        return 0

    def describe(self, choice: Choice) -> str:
        """The choice in words, for report()."""
        return choice.label

    def deterministic(self, choice: Choice) -> bool:
        """Whether results are bitwise identical run to run (no atomics, no order-dependent sums)."""
        return False


_lock = threading.Lock()
_families: Dict[str, Family] = {}   # label name -> family, in registration order
_parsed: Dict[str, Choice] = {}     # label -> its choice
_calls: Dict[tuple, Conv2dCall] = {}   # conv2d_call's arguments -> the bound call
_grads: Dict[tuple, Conv2dGrads] = {}  # conv2d_grads' arguments -> the bound backward


def register(family: Family) -> Family:
    """Adds `family` under each of its names (ValueError if a name is taken). Candidates come in
    registration order, so the baseline (native) is registered first."""
    with _lock:
        taken = [n for n in family.names if n in _families]
        if taken or not family.names:
            raise ValueError(f"algorithm family names {taken or family.names!r} are taken or empty")
        for name in family.names:
            _families[name] = family
        _forget()
    return family


def unregister(family: Family) -> None:
    """Removes `family` and every name it registered."""
    with _lock:
        for name in [n for n, f in _families.items() if f is family]:
            del _families[name]
        _forget()


def _forget() -> None:
    """Drops parsed labels and bound calls (the families behind them changed)."""
    _parsed.clear()
    _calls.clear()
    _grads.clear()


def families() -> List[Family]:
    """The registered families, once each, in registration order."""
    out: List[Family] = []
    for f in _families.values():
        if f not in out:
            out.append(f)
    return out


def parse(label: Union[str, Choice]) -> Choice:
    """The choice a label names; ValueError naming the label when no family knows it or its
    parameters are malformed. A Choice is returned as it is."""
    if isinstance(label, Choice):
        return label
    got = _parsed.get(label)
    if got is not None:
        return got
    name, _, params = str(label).partition(":")
    family = _families.get(name)
    if family is None:
        raise ValueError(f"unknown algorithm label {label!r}")
    got = family.choice(name, family.parse(name, params, label))
    _parsed[label] = got
    return got


def _family(choice: Choice) -> Family:
    family = _families.get(choice.family)
    if family is None:
        raise ValueError(f"algorithm family {choice.family!r} of {choice.label!r} is not registered")
    return family


def _transforms_allowed(problem) -> bool:
    return getattr(problem, "transforms", True)


def candidates(problem, pass_: str) -> List[Choice]:
    """Every registered choice that supports `problem` in `pass_`, native first; when
    ``problem.deterministic`` (torch.use_deterministic_algorithms), only deterministic ones; when
    not ``problem.transforms``, none of a transform-based family.

    `problem` names its layer kind in ``problem.kind`` (``tuner.ConvProblem``: "conv2d"); the
    families whose ``kinds`` hold it are asked, in registration order."""
    out: List[Choice] = []
    for family in families():
        if problem.kind in family.kinds and (
                _transforms_allowed(problem) or not family.transform_based):
            out.extend(family.candidates(problem, pass_))
    if problem.deterministic:
        out = [c for c in out if _family(c).deterministic(c)]
    return out


def fits(choice: Union[Choice, str], problem, pass_: str) -> Optional[str]:
    """None when `choice` can serve `problem` in `pass_`, else why not: its family does not serve
    the problem's kind, the problem's policy excludes it (deterministic mode and a
    nondeterministic choice; transforms off and a transform-based one), or the family's own rule
    (a basis too small for the shape, say). ValueError for a label no family knows or a bad
    pass."""
    choice = parse(choice)
    passes = PASSES.get(problem.kind, ())
    if pass_ not in passes:
        raise ValueError(f"pass must be one of {passes}, got {pass_!r}")
    family = _family(choice)
    if problem.kind not in family.kinds:
        return "%s does not serve %s layers" % (choice.family, problem.kind)
    if problem.deterministic and not family.deterministic(choice):
        return "not deterministic, and torch.use_deterministic_algorithms is on"
    if family.transform_based and not _transforms_allowed(problem):
        return "transform-based, and transforms are off for this layer"
    return family.fits(choice, problem, pass_)


def check_fits(label: Union[Choice, str], problem, pass_: str) -> Choice:
    """The choice `label` names, when it can serve `problem` in `pass_` (see ``fits``); otherwise
    ValueError naming the label, the pass, the problem and the reason. For labels set by hand
    (``force_algorithms``), checked when a shape is first planned."""
    choice = parse(label)
    why = fits(choice, problem, pass_)
    if why is not None:
        what = problem.describe() if hasattr(problem, "describe") else repr(problem)
        raise ValueError(f"algorithm {choice.label!r} cannot serve the {pass_} pass of {what}: "
                         f"{why}")
    return choice


def _pad(padding: Sequence[int]) -> Tuple[int, int]:
    return (int(padding[0]), int(padding[1]))


def conv2d_call(choice: Union[Choice, str], pass_: str, padding: Sequence[int], tf32: bool,
                nn_layout: bool = False) -> Conv2dCall:
    """The op call of one convolution pass, bound once: fn(x, w, b, gy) -> Tensor. The forward
    reads x, w, b (bias may be None); input_grad gy and w (x for its shape); weight_grad gy and x
    (w for its shape). `tf32` is the TF32 switch for fp32 inputs; with `nn_layout` the forward's
    result has the memory format nn.Conv2d gives for its input. Calls are cached: binding the
    same arguments again costs a dictionary look-up."""
    choice = parse(choice)
    key = (choice, pass_, _pad(padding), bool(tf32), bool(nn_layout))
    call = _calls.get(key)
    if call is None:
        if pass_ not in CONV2D_PASSES:
            raise ValueError(f"pass must be one of {CONV2D_PASSES}, got {pass_!r}")
        family = _family(choice)
        call = family.conv2d_call(choice, pass_, key[2], key[3])
        if pass_ == "forward" and nn_layout and not family.keeps_input_layout:
            call = _in_input_layout(call)
        _calls[key] = call
    return call


def _channels_last(t: torch.Tensor) -> bool:
    """Whether PyTorch's convolution reads `t` as channels_last: by its strides, also where both
    formats fit them (one channel, a 1x1 kernel). Eagerly the C++ reading the modules' node
    uses; in a traced graph PyTorch's own Python form of it (dynamo does not trace _C)."""
    if torch.compiler.is_compiling():
        return suggest_memory_format(t) == torch.channels_last
    return _C.channels_last(t)


def _in_input_layout(call: Conv2dCall) -> Conv2dCall:
    """`call` with nn.Conv2d's result layout: channels_last where the input or the weight is,
    except float64 on CUDA (cuDNN has no channels_last for it, so PyTorch returns contiguous)."""
    def forward(x, w, b, gy):
        y = call(x, w, b, gy)
        if (_channels_last(x) or _channels_last(w)) and not (
                x.dtype == torch.float64 and x.is_cuda):
            y = y.contiguous(memory_format=torch.channels_last)
        return y
    return forward


def conv2d_filter_transform(choice: Union[Choice, str]) -> Optional[Callable]:
    """The transform of the filters that the forward of `choice` can take ahead of its call
    (Family.conv2d_filter_transform), transform(w) -> U, or None."""
    choice = parse(choice)
    return _family(choice).conv2d_filter_transform(choice)


def conv2d_grads(igrad: Union[Choice, str], wgrad: Union[Choice, str], padding: Sequence[int],
                 tf32: bool) -> Conv2dGrads:
    """The backward of a convolution whose input and weight gradients use `igrad` and `wgrad`,
    bound once: fn(x, w, gy, need_x, need_w) -> (grad x or None, grad w or None). One call where
    both choices are of a family that computes both gradients at once, else the two pass calls."""
    igrad, wgrad = parse(igrad), parse(wgrad)
    key = (igrad, wgrad, _pad(padding), bool(tf32))
    grads = _grads.get(key)
    if grads is None:
        family = _family(igrad)
        if family is _family(wgrad):
            grads = family.conv2d_grads(igrad, wgrad, key[2], key[3])
        if grads is None:
            grads = _two_calls(conv2d_call(igrad, "input_grad", key[2], key[3]),
                               conv2d_call(wgrad, "weight_grad", key[2], key[3]))
        _grads[key] = grads
    return grads


def _two_calls(input_grad: Conv2dCall, weight_grad: Conv2dCall) -> Conv2dGrads:
    def grads(x, w, gy, need_x, need_w):
        gx = input_grad(x, w, None, gy) if need_x else None
        gw = weight_grad(x, w, None, gy) if need_w else None
        return gx, gw
    return grads


def conv2d_cpp_plan(choices: Sequence[Union[Choice, str]], padding: Sequence[int], tf32: bool,
                    height_one: bool):
    """The three passes (forward, input_grad, weight_grad) bound for the modules' C++ autograd
    node: a callable plan(x, w, b, need_backward) -> y (fastlayers._C.Conv2dPlan's fast_call),
    whose forward returns nn.Conv2d's layout and whose `height_one` operands are 1-D; None where a
    family cannot run its pass there (Family.cpp_pass)."""
    from .. import _C
    specs = []
    for choice, pass_ in zip(choices, CONV2D_PASSES):
        choice = parse(choice)
        spec = _family(choice).cpp_pass(choice, pass_)
        if spec is None:
            return None
        specs.append(spec)
    return _C.Conv2dPlan(*specs, _pad(padding), bool(tf32), bool(height_one)).fast_call()


def workspace_bytes(choice: Union[Choice, str], problem, pass_: str) -> int:
    """Device bytes `choice` allocates in `pass_` of `problem` beyond its inputs and output."""
    choice = parse(choice)
    return _family(choice).workspace_bytes(choice, problem, pass_)


def describe(choice: Union[Choice, str]) -> str:
    """The choice in words ('PyTorch (native)', 'FFT, backend fbfft, basis 16x16, tiles 14x14');
    a label no family knows is returned as it is."""
    try:
        choice = parse(choice)
        return _family(choice).describe(choice)
    except ValueError:
        return str(choice)


def deterministic(choice: Union[Choice, str]) -> bool:
    """Whether `choice` gives bitwise-identical results run to run."""
    choice = parse(choice)
    return _family(choice).deterministic(choice)
