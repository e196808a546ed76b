"""Deciding: a Decision (what was chosen for a key, by whom and why) and the choice itself:
memory, then the file, then measuring, else PyTorch's path, as the mode says."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import torch

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

    def to_json(self) -> dict:
        return {"choice": self.choice, "reason": self.reason, "times_ms": self.times_ms,
                "errors": self.errors, "skipped": self.skipped, "runs": self.runs}

    @staticmethod
    def from_json(d: dict) -> "Decision":
        return Decision(choice=str(d["choice"]), source="file", reason=str(d.get("reason", "")),
                        times_ms=dict(d.get("times_ms", {})), errors=dict(d.get("errors", {})),
                        skipped=dict(d.get("skipped", {})), runs=dict(d.get("runs", {})))


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


def choose(problem, pass_: str, device: Optional[torch.device], measure: Measure) -> str:
    """The label for `pass_` of `problem` (anything with ``key(pass_)`` and ``device_type``): from
    memory, else (mode not 'off') the file, else measured with `measure` (mode 'tune', on CUDA, or
    on CPU when CPU tuning is on) and written to the file, else 'native' with the reason. A new
    problem is measured on `device` (default: the current CUDA device, or the CPU)."""
    key = problem.key(pass_)
    d = _state.memory.get(key)
    if d is not None:
        return d.choice
    with _state.lock:
        d = _state.memory.get(key)
        if d is not None:
            return d.choice
        if _state.mode != "off":
            entry = cache.file_entries().get(key)
            if entry is not None:
                d = Decision.from_json(entry)
        if d is None:
            measurable = problem.device_type == "cuda" or (
                problem.device_type == "cpu" and _state.tune_cpu)
            if _state.mode == "tune" and measurable:
                if device is None:
                    device = (torch.device("cuda", torch.cuda.current_device())
                              if problem.device_type == "cuda" else torch.device("cpu"))
                d = _measure_or_native(measure, problem, pass_, device)
                if d.source == "tuned":
                    cache.write_entry(key, d.to_json())
            else:
                why = {"off": "tuner off", "cache": "not in cache (mode 'cache')"}.get(_state.mode)
                if why is None:
                    why = "CPU tensors are not timed (FASTLAYERS_TUNE_CPU=1 to time them)"
                d = Decision(choice="native", source="heuristic", reason=why)
        _state.memory[key] = d
        return d.choice
