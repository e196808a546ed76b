"""Records: forced choices and unsupported layers, every decision as rows, clear(), report()."""
from __future__ import annotations

import warnings
from typing import List

from .. import algorithms
from . import cache
from .conv2d import LAYER, LAYER_ANSWERS
from .decide import Decision
from .state import _state, new_generation


def record_forced(problem, pass_: str, label: str) -> None:
    """Record that a module pinned `label` for `pass_` of `problem` (shown by report())."""
    with _state.lock:
        _state.memory.setdefault("forced|" + problem.key(pass_) + "|" + label,
                                 Decision(choice=label, source="forced", reason="set on the module"))


def note_fallback(what: str, reason: str) -> None:
    """Record that a layer ran PyTorch's path because fastlayers does not support the case."""
    with _state.lock:
        _state.fallbacks[what] = reason


def decisions() -> List[dict]:
    """Every decision made or loaded in this process, and every fallback, as dicts."""
    rows = []
    with _state.lock:
        for key, d in _state.memory.items():
            rows.append({"key": key, "choice": d.choice, "source": d.source, "reason": d.reason,
                         "times_ms": dict(d.times_ms), "errors": dict(d.errors),
                         "skipped": dict(d.skipped), "runs": dict(d.runs),
                         "host_ms": dict(d.host_ms), "max_errors": dict(d.max_errors),
                         "device_ms": dict(d.device_ms)})
        for what, reason in _state.fallbacks.items():
            rows.append({"key": what, "choice": "native", "source": "unsupported", "reason": reason,
                         "times_ms": {}, "errors": {}, "skipped": {}, "runs": {},
                         "host_ms": {}, "max_errors": {}, "device_ms": {}})
    return rows


def clear(memory: bool = True, file: bool = False) -> None:
    """Forget decisions: those in memory, and (file=True) the cache file too."""
    with _state.lock:
        if memory:
            for table in _state.memories.values():
                table.clear()
            _state.fallbacks.clear()
            _state.rejected.clear()
        if file:
            path = cache.cache_file()
            try:
                with cache.file_lock(path):
                    path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:  # a read-only file system, say: the memory is cleared anyway
                warnings.warn(f"fastlayers: could not remove tuner cache {path} ({e})")
        _state.file_entries = None
        new_generation()


def report() -> str:
    """A readable table of what was chosen (algorithm and its parameters), for which shape and
    pass, and why: times, errors and skipped candidates with their reasons."""
    lines = ["fastlayers tuner: mode=%s, cache=%s" % (_state.mode, cache.cache_file())]
    rows = decisions()
    if not rows:
        lines.append("  (no decisions yet)")
    for r in rows:
        key = r["key"]
        if key.startswith("forced|"):
            key = key[len("forced|"):]
        head = key.split("|torch=")[0]
        lines.append("  %-12s %-11s %s" % (r["choice"], r["source"], head))
        lines.append("      use: %s" % (LAYER_ANSWERS.get(r["choice"], r["choice"])
                                         if head.startswith("conv2d.%s|" % LAYER)
                                         else algorithms.describe(r["choice"])))
        if r["reason"]:
            lines.append("      why: %s" % r["reason"])
        if r["times_ms"]:
            # per call: the step cost (back to back, plus host time beyond native's, and device
            # time beyond native's where the device was timed), the calls timed, the host's own
            # time (a layer check's: after other work) and the device's where timed
            lines.append("      ms:  " + ", ".join(
                "%s %.4g (%s%s%s)" % (k, v, r["runs"].get(k, "?"),
                                      ", host %.3g" % r["host_ms"][k] if k in r["host_ms"] else "",
                                      ", device %.3g" % r["device_ms"][k]
                                      if k in r["device_ms"] else "")
                for k, v in r["times_ms"].items()))
        if r["errors"]:
            lines.append("      err: " + ", ".join("%s %.2e" % kv for kv in r["errors"].items()))
        if r["max_errors"]:
            lines.append("      max: " + ", ".join("%s %.2e" % kv
                                                   for kv in r["max_errors"].items()))
        for label, why in r["skipped"].items():
            lines.append("      skipped %s: %s" % (label, why))
    return "\n".join(lines)
