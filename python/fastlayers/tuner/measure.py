"""Measuring candidates: the accuracy guard, the step-cost timer, the budget loop and the win margin.

A candidate's figure is what a training step pays for it: the wall time of calls enqueued back to
back, host and device together, divided by the number of calls, plus any host time per call it
takes beyond the baseline's, plus any device time per call beyond the baseline's. Device time alone
would let a candidate with a fast kernel and a slow host path win a step it loses; wall time alone
hides host time behind the device's, which a host-bound step (small layers, autocast) pays in full,
and a small layer's device time behind its host's, which a step pays where its device is the
bottleneck (a backward, whose host issues kernels faster than a forward's).

The first candidate is the baseline (PyTorch's own path): it is always measured, its error sets
the tolerance, and another candidate replaces it only when measurably faster.

Every candidate within tolerance (and within the workspace bound) is timed at least once,
whatever the budget; the budget then buys repeated, interleaved rounds for those still in the race.
A candidate whose first figure is over DROP_FACTOR x the best first figure cannot win and gets no
more rounds, and a round times fewer calls of a slow candidate than of a fast one.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..algorithms import Choice
from .decide import Decision
from .state import _state, workspace_limit

# Relative L2 error a candidate may show against a float64 reference: at most twice PyTorch's own
# error in the same dtype, and never less than this floor, about four units of the dtype's rounding
# (2^-24, 2^-11, 2^-8), where PyTorch's own error is below its storage rounding (few terms summed).
# A floor far above PyTorch's error would admit what is less precise than the layer replaced:
# float32's was once 1e-5 (160 units), which let F(4x4,3x3) in at 2.4-7 times cuDNN's error (on
# the alpha-6 points before d86080b).
ERROR_FLOOR = {
    torch.float64: 1e-10,
    torch.float32: 2.4e-7,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}

# A candidate replaces the baseline only when its median is below this fraction of the baseline's
# (timing noise stays on the safe side).
WIN_MARGIN = 0.95

# Rounds of the race: at most ROUNDS after the first figure; a round times about ROUND_MS of calls
# of each candidate in the race (between 1 and MAX_CALLS calls).
ROUNDS = 5
ROUND_MS = 2.0
MAX_CALLS = 16
# A first figure over DROP_FACTOR x the best first figure leaves the race: noise does not halve a
# time.
DROP_FACTOR = 2.0


def error_floor(dtype: torch.dtype, tf32: bool) -> float:
    """The smallest tolerance for `dtype`; with TF32 allowed, TF32's own rounding (a 10-bit
    mantissa, as float16's)."""
    if dtype == torch.float32 and tf32:
        return ERROR_FLOOR[torch.float16]
    return ERROR_FLOOR[dtype]


# Held while a measurement has cuDNN's TF32 switch changed: two at once would put it back in the
# wrong order. Waited for at most LOCK_WAIT_S: a measurement on autograd's device thread (a
# gradient pass) must not wait forever on one whose backward needs that thread.
_precision_lock = threading.RLock()
LOCK_WAIT_S = 30.0


def _tf32_allowed(op: str) -> bool:
    from .._common import conv_tf32_allowed
    from ..lstm import rnn_tf32_allowed
    return conv_tf32_allowed() if op == "conv" else rnn_tf32_allowed()


@contextlib.contextmanager
def cudnn_tf32(op: str, on: bool):
    """cuDNN's TF32 switch for `op` ("conv" or "rnn") as `on` while the block runs: a problem is
    measured at its own precision. Where the switch already says so (a module's problems, which
    read it), nothing is touched. Otherwise PyTorch's per-operation setting
    (torch.backends.cudnn.<op>.fp32_precision) is set and then put back, as "none" where it
    inherited its value (an explicit setting equal to the inherited one comes back inheriting).
    The legacy `allow_tf32` is not used: its setter changes both operations and its getter
    raises where they disagree. The switch is the process's: other threads' calls see it
    meanwhile. RuntimeError where another thread holds it changed past LOCK_WAIT_S (the tuner
    then leaves that shape on PyTorch's path)."""
    if _tf32_allowed(op) == on:
        yield
        return
    if not _precision_lock.acquire(timeout=LOCK_WAIT_S):
        raise RuntimeError("cuDNN's TF32 switch for %s is held changed by another thread's "
                           "measurement" % op)
    try:
        if _tf32_allowed(op) == on:  # that thread's change, now undone
            yield
            return
        setting = getattr(torch.backends.cudnn, op)
        old = setting.fp32_precision
        setting.fp32_precision = "none"
        inherited = setting.fp32_precision == old
        setting.fp32_precision = "tf32" if on else "ieee"
        try:
            yield
        finally:
            setting.fp32_precision = "none" if inherited else old
    finally:
        _precision_lock.release()


def problem_precision(op: str, p):
    """cudnn_tf32(op, p.tf32) for a float32 CUDA problem `p` (a ConvProblem, op "conv"; an
    LstmProblem, op "rnn"): its key names its precision, so PyTorch's candidate (and its error,
    the tolerance's yardstick) must run at it, whatever the process's switch says. Nothing for
    other dtypes, whose results TF32 does not touch (and whose cuDNN benchmark choices PyTorch
    keys by the switch too), nor on a CPU."""
    if p.device_type != "cuda" or p.dtype != "float32":
        return contextlib.nullcontext()
    return cudnn_tf32(op, p.tf32)


def error_measure(ref: torch.Tensor) -> Callable[[torch.Tensor], Tuple[float, float]]:
    """f(out) -> (relative L2 error, largest element's error over `ref`'s largest magnitude:
    Lavin & Gray's Table 4 measure, scaled) of `out` against the float64 `ref`; both inf when
    `out` is not finite. `ref`'s norms are taken once, for every candidate measured against it,
    and each candidate's difference once, for both errors."""
    l2 = ref.norm().item()
    top = ref.abs().max().item() if ref.numel() else 0.0

    def measure(out: torch.Tensor) -> Tuple[float, float]:
        if not torch.isfinite(out).all():
            return math.inf, math.inf
        diff = out.double() - ref
        e2 = diff.norm().item()
        em = diff.abs().max().item() if diff.numel() else 0.0
        return (e2 / l2 if l2 > 0 else e2), (em / top if top > 0 else em)
    return measure


def step_timer(device: torch.device):
    """run(fn, args, calls) -> (wall, host): milliseconds per call of `calls` calls enqueued back
    to back, from an idle device to the last call's completion (host and device together), and
    to the last call's return (the host's own time: at most MAX_CALLS calls of a few launches each
    stay far below the depth of the launch queue, so no call waits for the device unless it
    synchronises, which a step pays too). On a CPU the two are the same."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def run(fn, args, calls=1):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3 / calls, (t1 - t0) * 1e3 / calls
    return run


# The device time of calls (device_timer): they are enqueued behind a kernel that holds the device
# for HOLD_FACTOR x their host time (at least HOLD_MIN_MS, at most HOLD_MAX_MS), so that they run
# back to back, and timed by events around them; at most DEVICE_CALLS calls (a device's time varies
# little). Calls that kept the device busy back to back are not timed again: their wall time is
# the device's, over it by at most the host's time before the first launch spread over the calls
# (and the device's start), so where host time / calls is under DEVICE_BOUND x the wall time (and
# the host's time under half of it: the device was the bottleneck), the error is under that share.
DEVICE_BOUND = 0.1
HOLD_FACTOR = 2.0
HOLD_MIN_MS = 0.05
HOLD_MAX_MS = 50.0
DEVICE_CALLS = 4
_sleep_cycles_per_ms: Dict[int, float] = {}


def _cycles_per_ms(index: int) -> float:
    """Clock cycles of torch.cuda._sleep per millisecond on the current device (`index`),
    measured once per process after a longer spin that wakes the clocks; the higher of two rates
    (a hold sized at a rate above the true one lasts longer, which costs time, never a figure)."""
    c = _sleep_cycles_per_ms.get(index)
    if c is None:
        torch.cuda._sleep(1 << 22)
        c = 0.0
        for _ in range(2):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(1 << 21)
            b.record()
            b.synchronize()
            c = max(c, (1 << 21) / max(a.elapsed_time(b), 1e-3))
        _sleep_cycles_per_ms[index] = c
    return c


def device_bound(host_ms: float, wall_ms: float, wall_calls: int) -> bool:
    """Whether `wall_calls` calls back to back, `host_ms` of host and `wall_ms` of wall time each,
    kept the device busy, so that their wall time is the device's within DEVICE_BOUND: the host
    took under half the wall time, and under DEVICE_BOUND x the wall time of all the calls (the
    host's time before the first launch, the figure's error, spread over them). Strictly under:
    at the bound itself the calls are timed."""
    return host_ms < min(0.5, DEVICE_BOUND * wall_calls) * wall_ms


def device_timer(device: torch.device):
    """run(fn, args, calls, host_ms, wall_ms, wall_calls) -> milliseconds of device time per call
    of `calls` calls on `device`, given the host's and the wall time per call of `wall_calls`
    calls back to back (step_timer), or None on a CPU (no device time apart from the wall time) or
    without torch.cuda._sleep. Where those calls kept the device busy (DEVICE_BOUND), their wall
    time is the device's. Otherwise the calls are enqueued behind a kernel that holds the device
    for HOLD_FACTOR x their host time, so they run back to back, as they do where a step's device
    is the bottleneck, and events around them time them. Where the hold ended before the last call
    was enqueued (a host slower than estimated), they are timed once more behind a hold of
    HOLD_FACTOR x the host time just taken (at least four times the first); where it ended early
    again (a call that synchronises with the device ends any hold), the figure, which then holds
    host time too, is taken at most at the wall time."""
    if device.type != "cuda" or not hasattr(torch.cuda, "_sleep"):
        return None

    def run(fn, args, calls, host_ms, wall_ms, wall_calls):
        if device_bound(host_ms, wall_ms, wall_calls):
            return wall_ms
        with torch.cuda.device(device):
            per_ms = _cycles_per_ms(torch.cuda.current_device())
            hold = min(HOLD_MAX_MS, max(HOLD_MIN_MS, HOLD_FACTOR * host_ms * calls))
            for _ in range(2):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                torch.cuda._sleep(int(hold * per_ms))
                start.record()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(*args)
                end.record()
                enqueued_ms = (time.perf_counter() - t0) * 1e3
                late = start.query()  # the hold over already: the device waited for the host
                end.synchronize()
                if not late:
                    return start.elapsed_time(end) / calls
                hold = min(HOLD_MAX_MS, max(4 * hold, HOLD_FACTOR * enqueued_ms))
            return min(start.elapsed_time(end) / calls, wall_ms)
    return run


def step_cost(wall: float, host: float, baseline_host: float, dev: Optional[float] = None,
              baseline_dev: Optional[float] = None) -> float:
    """What a step pays for a candidate: its wall time, plus the host time it takes beyond the
    baseline's, plus the device time beyond the baseline's (where both are given). In a step whose
    host is the bottleneck the host's excess adds in full; where the device is, it hid behind the
    device in the wall time: counting it once more keeps a candidate that wins by less than its
    extra host time on the baseline. Likewise the device's excess: a call whose host path is the
    longer one shows its wall time as the host's, and a step whose device is the bottleneck pays
    the device time it adds. Which of the two a step is, is not known here, so a candidate that
    saves host time and adds device time (or the reverse) wins only where it saves more than it
    adds, by the win margin; an excess of the bottleneck's own kind is counted twice, which only
    widens a loss."""
    extra = 0.0
    if dev is not None and baseline_dev is not None:
        extra = max(0.0, dev - baseline_dev)
    return wall + max(0.0, host - baseline_host) + extra


def round_calls(first_ms: float) -> int:
    """Calls of a round (about ROUND_MS of them, at most MAX_CALLS) of a call whose first figure
    was `first_ms`."""
    return max(1, min(MAX_CALLS, int(ROUND_MS / max(first_ms, 1e-3))))


def could_win(times: Dict[str, float], labels, baseline: str) -> List[str]:
    """The labels (but the baseline) whose figures are at most WIN_MARGIN x the baseline's: those
    that can still win once a term that only adds (the device time beyond the baseline's) is
    counted; the others cannot, and need no such term."""
    return [k for k in labels if k != baseline and times[k] <= WIN_MARGIN * times[baseline]]


def measure_candidates(choices: Sequence[Choice], call: Callable[[Choice], Callable],
                       workspace: Callable[[Choice], int], args: tuple, check_args: tuple,
                       ref: torch.Tensor, device: torch.device, floor: float,
                       check_view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
                       warmups: int = 1, max_element: bool = False) -> Decision:
    """Checks, times and ranks `choices` (the baseline first) and returns the decision.

    Accuracy: each candidate runs once on `check_args` (a small batch of the problem, or the
    problem's size holding one), and the error of `check_view` of its result against the float64
    `ref` must be at most max(2 x the baseline's error, `floor`), in relative L2 and, with
    `max_element`, in the largest element's error too (error_measure); a candidate that raises (an
    OOM, a library refusal) or misses the tolerance is skipped with the reason, as is one whose
    `workspace` exceeds the bound. Time: every other candidate is warmed up (`warmups` calls on
    `args`, the problem's size, untimed: plans, the allocator, a CUDA graph recorded on a later
    call than the first) and timed once there, then the budget buys rounds for those within
    DROP_FACTOR of the best; each candidate's figure is step_cost of its median wall and host
    times, and the lowest wins if it is below WIN_MARGIN x the baseline's. On CUDA the figures of
    those that would win so, and the baseline's, add the device time beyond the baseline's
    (device_timer: as many figures as their wall times have, interleaved, after the rounds); the
    device term only adds, so the others could not win with it and are not timed on the device."""
    t_start = time.perf_counter()
    limit = workspace_limit(device)
    run = step_timer(device)
    device_run = device_timer(device)
    error_of = error_measure(ref)
    baseline = choices[0].label
    errors: Dict[str, float] = {}
    max_errors: Dict[str, float] = {}
    skipped: Dict[str, str] = {}
    samples: Dict[str, List[float]] = {}
    hosts: Dict[str, List[float]] = {}
    runs: Dict[str, int] = {}
    fns: Dict[str, Callable] = {}
    tol = max_tol = None
    for choice in choices:
        label = choice.label
        if label != baseline:
            ws = workspace(choice)
            if ws > limit:
                skipped[label] = "workspace %.0f MiB > bound %.0f MiB" % (ws / 2**20, limit / 2**20)
                continue
        fn = call(choice)
        try:
            out = fn(*check_args)
            err, err_max = error_of(check_view(out))
            errors[label] = err
            if max_element:
                max_errors[label] = err_max
            del out
            if label == baseline:
                tol = max(2 * err, floor)
                max_tol = max(2 * max_errors.get(label, 0.0), floor)
            elif not err <= tol:
                skipped[label] = "error %.2e > tolerance %.2e" % (err, tol)
                continue
            elif max_element and not max_errors[label] <= max_tol:
                skipped[label] = "largest element's error %.2e > tolerance %.2e" % (
                    max_errors[label], max_tol)
                continue
            for _ in range(warmups):  # at the problem's size (plans, allocator, graphs)
                fn(*args)
            wall, host = run(fn, args)
            samples[label], hosts[label] = [wall], [host]
        except (RuntimeError, MemoryError) as e:  # an OOM or a library refusal: not a candidate
            why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if label == baseline:  # nothing to compare against, nor a tolerance
                raise RuntimeError("the baseline %s could not be measured: %s" % (label, why)) from e
            skipped[label] = "failed: %s" % why
            continue
        runs[label] = 1
        fns[label] = fn
    first_best = min(s[0] for s in samples.values())
    race = [lab for lab in samples if samples[lab][0] <= DROP_FACTOR * first_best]
    if baseline not in race:
        race.append(baseline)  # the yardstick of the win margin
    deadline = time.perf_counter() + _state.budget_s
    rounds = 0
    while len(race) > 1 and rounds < ROUNDS and time.perf_counter() < deadline:
        for label in race:  # interleaved: drift of the machine hits every candidate alike
            calls = round_calls(samples[label][0])
            wall, host = run(fns[label], args, calls)
            samples[label].append(wall)
            hosts[label].append(host)
            runs[label] += calls
        rounds += 1

    host_ms = {lab: statistics.median(h) for lab, h in hosts.items()}
    times = {lab: step_cost(statistics.median(s), host_ms[lab], host_ms[baseline])
             for lab, s in samples.items()}
    device_ms: Dict[str, float] = {}
    # The device term only adds to a cost: a candidate that does not win without it cannot win
    # with it, and its device time is not needed (nor PyTorch's, where none can win).
    can_win = could_win(times, race, baseline)
    if device_run is not None and can_win:
        timed = [baseline] + can_win
        devs = {lab: [] for lab in timed}
        for i in range(1 + rounds):  # a figure for each of the wall time's, interleaved
            for lab in timed:  # given that figure's host and wall time and its calls
                calls = round_calls(samples[lab][0]) if i else 1
                devs[lab].append(device_run(fns[lab], args, min(calls, DEVICE_CALLS),
                                            hosts[lab][i], samples[lab][i], calls))
        device_ms = {lab: statistics.median(d) for lab, d in devs.items()}
        times.update({lab: step_cost(statistics.median(samples[lab]), host_ms[lab],
                                     host_ms[baseline], device_ms[lab], device_ms[baseline])
                      for lab in can_win})
    best = min(race, key=times.get)
    spent = time.perf_counter() - t_start
    out_of_race = [lab for lab in samples if lab not in race]
    reason = "fastest of %d measured (%d rounds, %.2f s%s)" % (
        len(times), rounds, spent,
        "; %d timed once, over %.0fx the best" % (len(out_of_race), DROP_FACTOR) if out_of_race else "")
    if best == baseline and len(times) == 1:
        reason = "only candidate measured"
    elif best != baseline and times[best] > WIN_MARGIN * times[baseline]:
        reason = "%s within %.0f%% of %s%s: kept %s (%d rounds, %.2f s)" % (
            best, 100 * (1 - WIN_MARGIN), baseline,
            " without its device time" if device_run is not None and best not in device_ms else "",
            baseline, rounds, spent)
        best = baseline
    return Decision(choice=best, source="tuned", reason=reason, times_ms=times, errors=errors,
                    skipped=skipped, runs=runs, host_ms=host_ms, max_errors=max_errors,
                    device_ms=device_ms)
