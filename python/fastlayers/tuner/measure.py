"""Measuring candidates: the accuracy guard, the timers, the budget loop and the win margin.

The first candidate is the baseline (PyTorch's own path): it is always measured, its error sets
the tolerance, and another candidate replaces it only when measurably faster.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Dict, Sequence

import torch

from ..algorithms import Choice
from .decide import Decision
from .state import _state, workspace_limit

# Relative L2 error a candidate may show against a float64 reference: at most twice PyTorch's own
# error in the same dtype, and never less than this floor (the dtype's storage rounding and an FFT's
# log-depth accumulation, which a direct method does not have).
ERROR_FLOOR = {
    torch.float64: 1e-10,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}

# A candidate replaces the baseline only when its median is below this fraction of the baseline's
# (timing noise and per-call host cost stay on the safe side).
WIN_MARGIN = 0.95

# Timed runs per candidate after its warm-up: at most REPEATS, at least MIN_REPEATS once the budget
# is spent.
REPEATS = 25
MIN_REPEATS = 3


def error_floor(dtype: torch.dtype, tf32: bool) -> float:
    """The smallest tolerance for `dtype`; with TF32 allowed, TF32's own rounding (a 10-bit
    mantissa, as float16's)."""
    if dtype == torch.float32 and tf32:
        return ERROR_FLOOR[torch.float16]
    return ERROR_FLOOR.get(dtype, 1e-5)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative L2 error of `out` against the float64 `ref`; inf when `out` is not finite."""
    if not torch.isfinite(out).all():
        return math.inf
    den = ref.norm().item()
    diff = (out.double() - ref).norm().item()
    return diff / den if den > 0 else diff


def timer(device: torch.device):
    """run(fn, args) -> milliseconds of one call: CUDA events on the current stream, else wall time."""
    if device.type == "cuda":
        def run(fn, args):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
    else:
        def run(fn, args):
            t0 = time.perf_counter()
            fn(*args)
            return (time.perf_counter() - t0) * 1e3
    return run


def measure_candidates(choices: Sequence[Choice], call: Callable[[Choice], Callable],
                       workspace: Callable[[Choice], int], args: tuple, ref: torch.Tensor,
                       device: torch.device, floor: float) -> Decision:
    """Runs each candidate on `args` in order and returns the decision.

    A candidate other than the baseline (choices[0]) is skipped when its `workspace` exceeds the
    bound or the budget is spent; any candidate that raises (an OOM, a library refusal) or whose
    error against `ref` exceeds max(2 x the baseline's error, `floor`) is skipped with the reason.
    The others run once to warm up, then up to REPEATS times (at least MIN_REPEATS) while the
    budget lasts; the fastest median wins if below WIN_MARGIN x the baseline's."""
    limit = workspace_limit(device)
    run = timer(device)
    deadline = time.perf_counter() + _state.budget_s
    times: Dict[str, float] = {}
    errors: Dict[str, float] = {}
    skipped: Dict[str, str] = {}
    baseline = choices[0].label
    tol = None
    for choice in choices:
        label = choice.label
        if label != baseline:
            ws = workspace(choice)
            if ws > limit:
                skipped[label] = "workspace %.0f MiB > bound %.0f MiB" % (ws / 2**20, limit / 2**20)
                continue
            if time.perf_counter() > deadline:
                skipped[label] = "tuning budget spent"
                continue
        fn = call(choice)
        try:
            out = fn(*args)
            err = rel_err(out, ref)
            del out
        except (RuntimeError, MemoryError) as e:  # an OOM or a library refusal: not a candidate
            skipped[label] = "failed: %s" % str(e).splitlines()[0][:120]
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        errors[label] = err
        if label == baseline:
            tol = max(2 * err, floor)
        elif not err <= tol:
            skipped[label] = "error %.2e > tolerance %.2e" % (err, tol)
            continue
        run(fn, args)  # warm-up (plans, allocator)
        samples = []
        for _ in range(REPEATS):
            samples.append(run(fn, args))
            if len(samples) >= MIN_REPEATS and time.perf_counter() > deadline:
                break
        times[label] = statistics.median(samples)
    best = min(times, key=times.get)
    reason = "fastest of %d measured" % len(times)
    if best == baseline and len(times) == 1:
        reason = "only candidate measured"
    elif best != baseline and baseline in times and times[best] > WIN_MARGIN * times[baseline]:
        reason = "%s within %.0f%% of %s: kept %s" % (best, 100 * (1 - WIN_MARGIN), baseline, baseline)
        best = baseline
    return Decision(choice=best, source="tuned", reason=reason, times_ms=times, errors=errors,
                    skipped=skipped)
