"""The conv2d layer kind: its problem (everything that changes the answer), its candidates (from
the algorithm registry's conv2d families), its measuring inputs and float64 reference, and the
choice per pass."""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .. import algorithms
from .._common import conv_tf32_allowed
from ..algorithms import CONV2D_PASSES as PASSES
from ..algorithms import NATIVE
from . import decide
from .cache import versions
from .measure import (DEVICE_CALLS, WIN_MARGIN, could_win, device_timer, error_floor,
                      measure_candidates, problem_precision, step_cost, step_timer)
from .state import transforms_allowed


@dataclass(frozen=True)
class ConvProblem:
    """Everything that changes the answer for a stride-1 convolution."""
    kind: ClassVar[str] = "conv2d"

    S: int
    C: int
    K: int
    H: int
    W: int
    kh: int
    kw: int
    ph: int
    pw: int
    dtype: str
    device_type: str
    device_name: str
    capability: str
    layout: str
    tf32: bool
    deterministic: bool
    transforms: bool  # transform-based algorithms allowed (tuner.set_transforms, per module)

    @staticmethod
    def from_tensors(input: torch.Tensor, weight: torch.Tensor, padding: Sequence[int],
                     tf32: Optional[bool] = None,
                     transforms: Optional[bool] = None) -> "ConvProblem":
        """The problem of `input` and `weight` at `padding`. `tf32` None: PyTorch's switch for
        convolution (CUDA); `transforms` None: the global switch (tuner.transforms_allowed()),
        else a layer's own setting."""
        dev = input.device
        if dev.type == "cuda":
            name = torch.cuda.get_device_name(dev)
            cap = "%d.%d" % torch.cuda.get_device_capability(dev)
        else:
            name, cap = dev.type, "-"
        layout = ("channels_last" if input.dim() == 4 and not input.is_contiguous()
                  and input.is_contiguous(memory_format=torch.channels_last) else "contiguous")
        return ConvProblem(
            S=input.shape[0], C=input.shape[1], K=weight.shape[0], H=input.shape[2], W=input.shape[3],
            kh=weight.shape[2], kw=weight.shape[3], ph=int(padding[0]), pw=int(padding[1]),
            dtype=str(input.dtype).replace("torch.", ""), device_type=dev.type, device_name=name,
            capability=cap, layout=layout,
            tf32=(dev.type == "cuda" and conv_tf32_allowed()) if tf32 is None else bool(tf32),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            transforms=transforms_allowed() if transforms is None else bool(transforms),
        )

    @property
    def oh(self) -> int:
        return self.H + 2 * self.ph - self.kh + 1

    @property
    def ow(self) -> int:
        return self.W + 2 * self.pw - self.kw + 1

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def key(self, pass_: str) -> str:
        return ("conv2d.%s|S=%d,C=%d,K=%d,H=%d,W=%d,k=%dx%d,pad=%d,%d|%s|%s|%s|sm%s|tf32=%d|det=%d"
                "|transforms=%d|%s"
                % (pass_, self.S, self.C, self.K, self.H, self.W, self.kh, self.kw, self.ph, self.pw,
                   self.dtype, self.layout, self.device_name, self.capability, self.tf32,
                   self.deterministic, self.transforms, versions()))

    def describe(self) -> str:
        return "S=%d C=%d K=%d %dx%d k=%dx%d pad=%d,%d %s %s%s%s" % (
            self.S, self.C, self.K, self.H, self.W, self.kh, self.kw, self.ph, self.pw, self.dtype,
            self.device_type, " tf32" if self.tf32 and self.dtype == "float32" else "",
            "" if self.transforms else " transforms-off")


def candidates_conv2d(p: ConvProblem, pass_: str) -> List[str]:
    """Labels of every registered algorithm that supports the problem, `native` first; under
    torch.use_deterministic_algorithms(True) only deterministic ones; with transforms off no
    transform-based ones."""
    return [c.label for c in algorithms.candidates(p, pass_)]


def inputs(p: ConvProblem, device: torch.device):
    """x [S,C,H,W] (in the problem's layout), w [K,C,kh,kw], gy [S,K,oh,ow]: seeded samples,
    uniform in [-1, 1] (the data of Lavin & Gray's Table 4, whose measure the accuracy check
    applies). RuntimeError where the problem's sizes cannot be made (the tuner then leaves the
    layer to PyTorch's path, whose own call says what is wrong)."""
    dt = p.torch_dtype
    gen = torch.Generator(device=device).manual_seed(0)

    def uniform(*shape):
        return torch.rand(*shape, device=device, dtype=dt, generator=gen).mul_(2).sub_(1)
    try:
        x = uniform(p.S, p.C, p.H, p.W)
        w = uniform(p.K, p.C, p.kh, p.kw)
        gy = uniform(p.S, p.K, p.oh, p.ow)
    except (TypeError, ValueError, OverflowError) as e:  # sizes beyond a tensor's
        raise RuntimeError("the problem's sizes cannot be measured (%s)" % e) from e
    if p.layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    return x, w, gy


# Samples of the batch that the accuracy check compares: an error is a property of each sample's
# arithmetic, and the float64 reference of a whole large batch can cost more than the timing.
CHECK_SAMPLES = 2


def _first_samples(t: torch.Tensor, n: int) -> torch.Tensor:
    """`t` with every sample past the first `n` zero."""
    out = torch.zeros_like(t)
    out[:n] = t[:n]
    return out


def measure(p: ConvProblem, pass_: str, device: torch.device) -> decide.Decision:
    """Every candidate of `pass_` checked against PyTorch's path in float64 on a few samples (its
    relative L2 error and its largest element's, each within twice PyTorch's or the floor) and
    timed at the problem's size on `device`."""
    x, w, gy = inputs(p, device)
    pad = (p.ph, p.pw)
    n = min(p.S, CHECK_SAMPLES)
    # The candidates' accuracy is checked at the problem's size, every sample past the first n
    # zero, against a float64 reference of those n: libraries pick kernels by size (cuBLAS's
    # TF32 GEMMs, say, from some size up), so a smaller batch could take a more accurate path
    # than the problem's. Zero samples add exact zeros to every sum, so the first n samples'
    # results, and a weight gradient, are those of the n samples alone.
    xc, gyc = _first_samples(x, n), _first_samples(gy, n)
    # Below autograd, as the module runs its passes (its C++ node calls the ops there): from
    # Python above it, every fastlayers op would enter its Python autograd kernel first, host
    # time a step does not pay.
    with torch.no_grad(), torch.autocast(device.type, enabled=False), \
            torch._C._AutoDispatchBelowAutograd(), problem_precision("conv", p):
        # The float64 reference runs with cudnn.benchmark off: under it cuDNN would first time
        # every float64 algorithm of this extra shape, minutes for large kernels. The checks
        # run at the problem's shape with the user's setting, so PyTorch's error is that of the
        # algorithm its timing (and the user's layer) runs.
        with _cudnn_benchmark(False):
            ref = reference(pass_, pad, x[:n].double(), w.double(), gy[:n].double())
        d = measure_candidates(
            algorithms.candidates(p, pass_),
            call=lambda c: pass_call(c, pass_, pad, p.tf32),
            workspace=lambda c: algorithms.workspace_bytes(c, p, pass_),
            args=(x, w, None, gy), check_args=(xc, w, None, gyc), ref=ref, device=device,
            floor=error_floor(p.torch_dtype, p.tf32),
            check_view=(lambda t: t) if pass_ == "weight_grad" else (lambda t: t[:n]),
            max_element=True)
        del xc, gyc
    if pass_ != "forward":
        d.reason += "; timed with the other gradient on PyTorch's path, as a backward runs them"
    return d


def pass_call(choice, pass_: str, pad, tf32: bool):
    """The call the tuner times for one pass: the forward by itself; a gradient as a layer's
    backward pays for it, beside the other gradient on PyTorch's path. PyTorch computes both
    gradients in one convolution_backward, so a candidate that takes over one of them leaves the
    other to a call of its own, which a step whose host is the bottleneck pays in full; timed
    against PyTorch's gradient alone, a candidate would be credited with host time it does not
    save. The call returns the pass's result, for the accuracy check."""
    if pass_ == "forward":
        return algorithms.conv2d_call(choice, pass_, pad, tf32)
    if pass_ == "input_grad":
        grads, i = algorithms.conv2d_grads(choice, NATIVE, pad, tf32), 0
    else:
        grads, i = algorithms.conv2d_grads(NATIVE, choice, pad, tf32), 1
    return lambda x, w, b, gy: grads(x, w, gy, True, True)[i]


def reference(pass_: str, pad, x, w, gy) -> torch.Tensor:
    """PyTorch's result of one stride-1 pass (float64 operands for the accuracy check). The input
    gradient is computed as the forward correlation of grad_output with the flipped, transposed
    weight (padding kh-1-ph, negative: a crop), the same sum: cuDNN's heuristic float64
    backward-data algorithm for large kernels is far slower than its forward one."""
    if pass_ != "input_grad":
        return algorithms.conv2d_call(NATIVE, pass_, pad, False)(x, w, None, gy)
    kh, kw = w.shape[2], w.shape[3]
    qh, qw = kh - 1 - pad[0], kw - 1 - pad[1]
    g = F.pad(gy, (min(qw, 0), min(qw, 0), min(qh, 0), min(qh, 0)))
    return F.conv2d(g, w.transpose(0, 1).flip(2, 3), None, 1, (max(qh, 0), max(qw, 0)))


@contextlib.contextmanager
def _cudnn_benchmark(on: bool):
    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = old


class _InBackward(torch.autograd.Function):
    """Identity whose backward calls ctx.fn() and appends its result to ctx.out."""

    @staticmethod
    def forward(ctx, t, fn, out):
        ctx.fn, ctx.out = fn, out
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        ctx.out.append(ctx.fn())
        return g, None, None


def _measure_gradient_pass(p: ConvProblem, pass_: str, device: torch.device) -> decide.Decision:
    """measure() of a gradient pass on the thread that runs `device`'s backward passes. cuDNN's
    benchmark choices are kept per thread (PyTorch's cache of cuDNN frontend plans is
    thread-local), and autograd runs a CUDA device's backward on a thread of its own: measured on
    the caller's thread, the native candidate would pay cuDNN's search again, and the training
    step's backward once more after it. Under torch.compile, inference mode and torch.func's
    transforms, where this backward cannot run, it is measured where it is called."""
    if (torch.compiler.is_compiling() or torch.is_inference_mode_enabled()
            or torch._C._are_functorch_transforms_active()):
        return measure(p, pass_, device)
    out: list = []
    t = torch.zeros((), device=device, requires_grad=True)
    with torch.enable_grad():
        _InBackward.apply(t, lambda: measure(p, pass_, device), out).backward()
    return out[0]


def choose_conv2d(p: ConvProblem, pass_: str, device: Optional[torch.device] = None) -> str:
    """The algorithm label for one pass of `p` ('native', 'fft:NHxNW', 'fbfft:NHxNW,tile=THxTW',
    ...). A new shape is measured on `device` (default: the current CUDA device, or the CPU)."""
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    fixed = None
    if not p.transforms:
        only = algorithms.candidates(p, pass_)
        if len(only) == 1:  # nothing left to measure against
            fixed = decide.Decision(
                choice=only[0].label, source="heuristic",
                reason="transforms off: FFT and other transform-based algorithms are not "
                       "candidates (tuner.set_transforms, FASTLAYERS_TRANSFORMS, or the layer's "
                       "own switch)")
    return decide.choose(p, pass_, device,
                         measure if pass_ == "forward" else _measure_gradient_pass, fixed)



# The layer check: a training step's last word on a layer whose tuned passes are not all
# PyTorch's. Each pass was timed by itself; leaving PyTorch's own layer costs a step what no
# single pass pays (the module's autograd node, the bias gradient's reduction by itself), and a
# step whose host is the bottleneck pays it in full. So the layer's forward and backward with
# its tuned passes are timed against PyTorch's own, and the passes stay only where the layer
# as a whole is cheaper by the win margin. The passes were also chosen one by one, each beside
# PyTorch's path for the others: a gradient pass off PyTorch's path leaves the other gradient
# a convolution_backward call of its own, whose host cost PyTorch's joint call of both had
# shared. So the check also times the plan with every pass that stayed on PyTorch's path moved
# to its best measured candidate (layer_alternative), and the cheapest plan wins.
LAYER = "layer"
LAYER_ANSWERS = {"tuned": "the passes as tuned", "native": "every pass on PyTorch's path"}
LAYER_ROUNDS = 9
LAYER_TRIAL_MS = 4.0
# Host time counts as a network's step pays it: there a layer's calls come between other layers',
# whose work pushes the layer's host path out of the CPU's caches, while back to back its calls
# find it warm (a plan of several launches and library calls can tie PyTorch's host time warm and
# lose to it cold). So each round also times the host's own time of COLD_CALLS calls of a plan,
# each after a small block on PyTorch's path (other_work), and the least of them is its host time.
COLD_CALLS = 2

Labels = Tuple[str, str, str]


@dataclass(frozen=True)
class LayerCheck:
    """One layer's check: its problem, its tuned labels (forward, input grad, weight grad),
    whether it has a bias, and run(labels) -> its step with those labels, f(x, w, b) -> y (the
    module's own call; not part of the key). `alternative`: labels the check times beside the
    tuned ones (layer_alternative), or None; it follows from the passes' decisions, which the
    key's labels stand for."""
    kind: ClassVar[str] = "conv2d"

    problem: ConvProblem
    labels: Labels
    bias: bool
    run: Callable = field(compare=False, hash=False, repr=False)
    alternative: Optional[Labels] = field(default=None, compare=False, hash=False)

    @property
    def device_type(self) -> str:
        return self.problem.device_type

    def key(self, pass_: str) -> str:
        head, _, tail = self.problem.key(pass_).partition("|torch=")
        return "%s|bias=%d|plan=%s|torch=%s" % (head, self.bias, "/".join(self.labels), tail)

    def describe(self) -> str:
        return "%s, plan %s" % (self.problem.describe(), "/".join(self.labels))

    def fits(self, label: str, pass_: str) -> Optional[str]:
        """For a file entry: None when `label` is an answer of the check ('tuned', 'native', or
        a plan 'forward/input_grad/weight_grad' whose labels serve their passes)."""
        if label in LAYER_ANSWERS:
            return None
        labels = label.split("/")
        if len(labels) != len(PASSES):
            return "not an answer of the layer check"
        for lab, p in zip(labels, PASSES):
            why = algorithms.fits(lab, self.problem, p)
            if why is not None:
                return "%s: %s" % (p, why)
        return None


def layer_labels(c: LayerCheck, answer: str) -> Labels:
    """The labels a layer check's answer stands for."""
    if answer == "tuned":
        return c.labels
    if answer == "native":
        return (NATIVE.label,) * len(PASSES)
    return tuple(answer.split("/"))


def layer_alternative(p: ConvProblem, labels: Labels) -> Optional[Labels]:
    """`labels` with each pass on PyTorch's path moved to the fastest other candidate its
    decision measured within tolerance; None when no pass moves or none is off PyTorch's path
    (nothing to share then)."""
    if all(lab == NATIVE.label for lab in labels):
        return None
    out = list(labels)
    for i, (lab, pass_) in enumerate(zip(labels, PASSES)):
        if lab != NATIVE.label:
            continue
        d = decide.decision(p, pass_)
        others = {k: v for k, v in (d.times_ms if d is not None else {}).items()
                  if k != NATIVE.label}
        if others:
            out[i] = min(others, key=others.get)
    alt = tuple(out)
    return alt if alt != tuple(labels) else None


def other_work(device: torch.device) -> Callable[[], None]:
    """A call of what a network's step runs between two of its layers, on PyTorch's path and
    small enough that the device's share is negligible: a 1x1 convolution (a network's other
    layers include PyTorch's own convolutions, so its path is not cold after them either), batch
    norm, ReLU and a residual add, forward and backward (float32, seeded: no generator of the
    process moves)."""
    g = torch.Generator(device=device).manual_seed(2)
    f32 = dict(device=device, dtype=torch.float32)
    x = torch.randn(2, 16, 8, 8, generator=g, **f32).requires_grad_()
    w = torch.randn(16, 16, 1, 1, generator=g, **f32).requires_grad_()
    gamma = torch.ones(16, requires_grad=True, **f32)
    beta = torch.zeros(16, requires_grad=True, **f32)

    def run():
        y = F.conv2d(x, w)
        y = F.relu(F.batch_norm(y, None, None, gamma, beta, training=True)) + x
        torch.autograd.grad(y.sum(), (x, w, gamma, beta))
    return run


def measure_layer(c: LayerCheck, pass_: str, device: torch.device) -> decide.Decision:
    """The layer's forward and backward with its tuned passes (and the alternative, if any)
    against PyTorch's (F.conv2d and its autograd): LAYER_ROUNDS rounds of about LAYER_TRIAL_MS
    of calls back to back per plan, in an order rotated round by round, and COLD_CALLS calls
    after other work (the host's own time), and (on CUDA, below) the device's own time of a few
    calls (device_timer). A plan's cost in a round is step_cost of its wall time back to back, its
    host time after other work (host time beyond PyTorch's counts once more: a step whose host is
    the bottleneck pays it, as a network's step makes the calls) and its device time (device time
    beyond PyTorch's counts once more: back to back, a layer whose host takes longer than its
    device shows the host's time, and a step whose device is the bottleneck pays the device's),
    over PyTorch's wall time in the same round; its figure is the median of those ratios times
    PyTorch's median. Ratios within a round cancel the host's drift, which a host-bound layer's
    separate medians did not. The device term only adds to a round's cost, so a plan whose figure
    without it is above WIN_MARGIN x PyTorch's cannot be kept with it: only the others, and
    PyTorch's layer beside them, are timed on the device, after the rounds, one figure per round
    (given that round's wall and host time of the plan), in that round's rotated order."""
    p = c.problem
    x, w, gy = inputs(p, device)
    # seeded as inputs() is: tuning leaves the process's random generators as they were
    b = (torch.randn(p.K, device=device, dtype=p.torch_dtype,
                     generator=torch.Generator(device=device).manual_seed(1)) if c.bias else None)
    leaves = tuple(t.requires_grad_() for t in (x, w, b) if t is not None)
    pad = [p.ph, p.pw]

    def step(fn):
        return lambda: torch.autograd.grad(fn(x, w, b), leaves, gy)
    steps = {"native": lambda: torch.autograd.grad(F.conv2d(x, w, b, 1, pad), leaves, gy),
             "tuned": step(c.run(c.labels))}
    if c.alternative is not None:
        steps["/".join(c.alternative)] = step(c.run(c.alternative))
    run = step_timer(device)
    device_run = device_timer(device)
    names = list(steps)
    walls = {k: [] for k in steps}
    warms = {k: [] for k in steps}
    hosts = {k: [] for k in steps}

    def rotated(keys, r):
        return keys[r % len(keys):] + keys[:r % len(keys)]

    def ratios(k, dev=None):
        """A plan's cost over PyTorch's wall time, round by round (with the device term where
        `dev` holds both its figures and PyTorch's)."""
        return [step_cost(walls[k][r], hosts[k][r], hosts["native"][r],
                          *((dev[k][r], dev["native"][r]) if dev else (None, None)))
                / walls["native"][r] for r in range(LAYER_ROUNDS)]
    with torch.autocast(device.type, enabled=False), torch.enable_grad(), \
            problem_precision("conv", p):
        other = other_work(device)

        def cold(fn):
            least = float("inf")
            for _ in range(COLD_CALLS):
                other()
                t0 = time.perf_counter()
                fn()
                least = min(least, (time.perf_counter() - t0) * 1e3)
            return least
        for fn in steps.values():
            fn()  # warm-up
        other()
        first = max(run(fn, (), 2)[0] for fn in steps.values())
        calls = max(3, min(32, int(LAYER_TRIAL_MS / max(first, 1e-3))))
        for r in range(LAYER_ROUNDS):
            for k in rotated(names, r):
                wall, warm = run(steps[k], (), calls)
                walls[k].append(wall)
                warms[k].append(warm)
                hosts[k].append(cold(steps[k]))
        times = {"native": statistics.median(walls["native"])}
        times.update({k: statistics.median(ratios(k)) * times["native"] for k in names[1:]})
        can_win = could_win(times, names, "native")
        devs: Dict[str, List[float]] = {}
        if device_run is not None and can_win:
            timed = ["native"] + can_win
            devs = {k: [] for k in timed}
            for r in range(LAYER_ROUNDS):
                for k in rotated(timed, r):
                    devs[k].append(device_run(steps[k], (), min(calls, DEVICE_CALLS),
                                              warms[k][r], walls[k][r], calls))
            times.update({k: statistics.median(ratios(k, devs)) * times["native"]
                          for k in can_win})
    host = {k: statistics.median(v) for k, v in hosts.items()}
    dev_ms = {k: statistics.median(v) for k, v in devs.items()}
    best = min((k for k in steps if k != "native"), key=times.get)
    keep = times[best] <= WIN_MARGIN * times["native"]
    plan = "/".join(layer_labels(c, best))
    untimed = " (its device time not timed)" if device_run is not None else ""
    reason = ("the layer's forward + backward with %s (%s) costs %.2fx PyTorch's%s: %s (win "
              "margin %.0f%%; host time after other work %.3g ms against PyTorch's %.3g%s; %d "
              "rounds of %d calls%s)" % (
                "its passes as tuned" if best == "tuned" else "the plan", plan,
                times[best] / times["native"], "" if best in dev_ms else untimed,
                "kept" if keep else "PyTorch's path instead",
                100 * (1 - WIN_MARGIN), host[best], host["native"],
                "; device time %.3g ms against %.3g" % (dev_ms[best], dev_ms["native"])
                if best in dev_ms else "", LAYER_ROUNDS, calls,
                "" if c.alternative is None else "; also timed: %s" % ", ".join(
                    "%s %.2fx%s" % ("/".join(layer_labels(c, k)), times[k] / times["native"],
                                    "" if k in dev_ms else untimed)
                    for k in steps if k not in ("native", best))))
    return decide.Decision(choice=best if keep else "native", source="tuned", reason=reason,
                           times_ms=times,
                           runs={k: LAYER_ROUNDS * (calls + COLD_CALLS) for k in steps},
                           host_ms=host, device_ms=dev_ms)


def check_conv2d_layer(c: LayerCheck, device: Optional[torch.device] = None) -> Labels:
    """The labels a training step runs the layer with: the tuned ones, the alternative, or every
    pass on PyTorch's path; decided once per key and kept with the tuner's other decisions.
    Where the tuner does not measure (its mode, a CPU), a decision in the file stands, else the
    passes as tuned; so too under inference mode and torch.func's transforms, where the check's
    backward cannot run."""
    if torch.is_inference_mode_enabled() or torch._C._are_functorch_transforms_active():
        return c.labels
    return layer_labels(c, decide.choose(c, LAYER, device, measure_layer, observed=False,
                                         default="tuned"))
