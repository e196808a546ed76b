"""Deciding: a Decision (what was chosen for a key, by whom and why) and the choice itself:
memory, then the file, then measuring, else PyTorch's path, as the mode says. A file entry is
used only when its label can serve the problem it is filed under."""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import torch

from .. import algorithms
from . import cache
from .state import _state


@dataclass
class Decision:
    choice: str                      # an algorithm label ("native", "fbfft:16x16,tile=14x14")
    source: str                      # tuned, file, heuristic, forced
    reason: str = ""
    times_ms: Dict[str, float] = field(default_factory=dict)
    errors: Dict[str, float] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    runs: Dict[str, int] = field(default_factory=dict)  # calls timed per candidate
    host_ms: Dict[str, float] = field(default_factory=dict)  # the host's own time per call
    max_errors: Dict[str, float] = field(default_factory=dict)  # the largest element's, scaled
    device_ms: Dict[str, float] = field(default_factory=dict)  # per call (measure.device_timer)

    def to_json(self) -> dict:
        return {"choice": self.choice, "reason": self.reason, "times_ms": self.times_ms,
                "errors": self.errors, "skipped": self.skipped, "runs": self.runs,
                "host_ms": self.host_ms, "max_errors": self.max_errors,
                "device_ms": self.device_ms}

    @staticmethod
    def from_json(d: dict) -> "Decision":
        """ValueError (TypeError) for an entry not of this form: measurements are numbers."""
        def numbers(name):
            out = dict(d.get(name, {}))
            for label, v in out.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ValueError("%s[%r] is %r, not a number" % (name, label, v))
            return out
        return Decision(choice=str(d["choice"]), source="file", reason=str(d.get("reason", "")),
                        times_ms=numbers("times_ms"), errors=numbers("errors"),
                        skipped={str(k): str(v) for k, v in dict(d.get("skipped", {})).items()},
                        runs=numbers("runs"), host_ms=numbers("host_ms"),
                        max_errors=numbers("max_errors"), device_ms=numbers("device_ms"))


Measure = Callable[[object, str, torch.device], Decision]


def _measure_or_native(measure: Measure, problem, pass_: str, device: torch.device) -> Decision:
    """Measures, unless that cannot be done now; then PyTorch's path, with the reason (kept in
    memory for this process, not written to the file)."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return Decision(choice="native", source="heuristic",
                        reason="first seen during CUDA graph capture: not measured")
    try:
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            return measure(problem, pass_, device)
    except (RuntimeError, MemoryError) as e:  # out of memory for the reference, say
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return Decision(choice="native", source="heuristic",
                        reason="measuring failed: %s" % str(e).splitlines()[0][:160])


def _from_file(key: str, entry: dict, problem, pass_: str) -> Tuple[Optional[Decision], str]:
    """The file's decision for `key`, or (None, why) when its label cannot serve `problem` in
    `pass_` (valid JSON, but no family knows the label, or its basis does not hold the shape: an
    edited or foreign file). Such an entry is reported once and decided again, as if missing."""
    label = entry.get("choice")
    try:
        d = Decision.from_json(entry)
    except (TypeError, ValueError, AttributeError) as e:  # times, errors or skipped not dicts
        d, why = None, "malformed entry (%s)" % e
    else:
        try:
            fits = getattr(problem, "fits", None)  # a problem with answers of its own
            why = (fits(d.choice, pass_) if fits is not None
                   else algorithms.fits(d.choice, problem, pass_))
        except ValueError as e:  # a label no family knows, or malformed parameters
            why = str(e)
    if why is None:
        return d, ""
    if (key, str(label)) not in _state.rejected:
        _state.rejected.add((key, str(label)))
        warnings.warn(f"fastlayers: tuner cache {cache.cache_file()}: the entry for "
                      f"{key.split('|torch=')[0]} names {label!r}, which cannot serve it ({why}); "
                      "ignoring the entry and deciding again")
    return None, "ignored the file's %r: %s" % (label, why)


def choose(problem, pass_: str, device: Optional[torch.device], measure: Measure,
           fixed: Optional[Decision] = None, observed: bool = True,
           default: Optional[str] = None) -> str:
    """The label for `pass_` of `problem` (anything with ``key(pass_)`` and ``device_type``): from
    memory, else `fixed` (the decision when there is nothing to choose from; kept in memory only),
    else (mode not 'off') the file, when its entry fits the problem, else measured with `measure`
    (mode 'tune', on CUDA, or on CPU when CPU tuning is on) and written to the file, else 'native'
    with the reason; with `default`, that answer instead, neither kept nor reported. A new problem
    is measured on `device` (default: the current CUDA device, or the CPU). `observed`: the
    observers (tune()'s progress) are told."""
    key = problem.key(pass_)
    d = _state.memory.get(key)
    if d is None:
        d = _decide(key, problem, pass_, device, measure, fixed, default)
    if observed:  # (tune()'s progress counts passes)
        for watch in _state.observers:
            watch(problem, pass_, d)
    return d.choice


def decision(problem, pass_: str) -> Optional[Decision]:
    """The decision in memory for `pass_` of `problem`, if made (choose makes it)."""
    with _state.lock:
        return _state.memory.get(problem.key(pass_))


@contextlib.contextmanager
def observing(callback: Callable[[object, str, Decision], None]):
    """Within the block, callback(problem, pass_, decision) after every choice (a memory hit too):
    fastlayers.tune's progress bar."""
    _state.observers.append(callback)
    try:
        yield
    finally:
        _state.observers.remove(callback)


def _decide(key, problem, pass_, device, measure, fixed, default=None) -> Decision:
    with _state.lock:
        d = _state.memory.get(key)
        if d is not None:
            return d
        d = fixed
        rejected = ""
        if d is None and _state.mode != "off":
            entry = cache.file_entries().get(key)
            if entry is not None:
                d, rejected = _from_file(key, entry, problem, pass_)
        if d is None:
            measurable = problem.device_type == "cuda" or (
                problem.device_type == "cpu" and _state.tune_cpu)
            if not (_state.mode == "tune" and measurable):
                if default is not None:
                    return Decision(choice=default, source="heuristic", reason="not measured")
                why = {"off": "tuner off", "cache": "not in cache (mode 'cache')"}.get(_state.mode)
                if why is None:
                    why = "CPU tensors are not timed (FASTLAYERS_TUNE_CPU=1 to time them)"
                d = Decision(choice="native", source="heuristic",
                             reason="%s; %s" % (rejected, why) if rejected else why)
        if d is not None:
            _state.memory[key] = d
            return d
        generation = _state.generation
        if device is None:
            device = (torch.device("cuda", torch.cuda.current_device())
                      if problem.device_type == "cuda" else torch.device("cpu"))
    # Measured without the lock: a gradient pass is measured on autograd's device thread, which
    # may be running another thread's backward that asks the tuner (a recomputed forward), and
    # the lock held across the wait would deadlock the two. Two threads asking for the same new
    # problem at once both measure it; the first decision stored is the one kept.
    d = _measure_or_native(measure, problem, pass_, device)
    with _state.lock:
        kept = _state.memory.get(key)
        if kept is not None:
            return kept
        if _state.generation != generation:  # a switch or clear() while measuring (a
            return d  # switch and back again leaves the decision as valid as it was)
        if d.source == "tuned":
            cache.write_entry(key, d.to_json())
        _state.memory[key] = d
        return d
