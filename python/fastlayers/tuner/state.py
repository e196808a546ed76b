"""The tuner's process state: mode, measuring budget, workspace bound, whether CPU tensors are
timed, whether transform-based algorithms are allowed, and the decisions made so far. Read from
the environment at import."""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Any, Callable, Dict, Optional, Set, Tuple

import torch

MODES = ("tune", "cache", "off")


def _transforms_from_env() -> bool:
    text = os.environ.get("FASTLAYERS_TRANSFORMS", "1").strip().lower()
    if text in ("0", "false", "off", "no"):
        return False
    if text not in ("", "1", "true", "on", "yes"):
        warnings.warn(f"fastlayers: FASTLAYERS_TRANSFORMS={text!r} is not 0 or 1; allowing "
                      "transforms")
    return True


def _parse_bytes(text: str) -> int:
    """'512', '4K', '1.5M', '2GiB', '1gb' -> bytes."""
    text = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(float(text))


class _State:
    def __init__(self):
        self.lock = threading.RLock()
        self.mode = os.environ.get("FASTLAYERS_TUNER_MODE", "tune")
        if self.mode not in MODES:
            warnings.warn(f"fastlayers: FASTLAYERS_TUNER_MODE={self.mode!r} is not one of {MODES}; "
                          "using 'tune'")
            self.mode = "tune"
        self.budget_s = float(os.environ.get("FASTLAYERS_TUNER_BUDGET", "2"))
        lim = os.environ.get("FASTLAYERS_WORKSPACE_LIMIT")
        self.workspace_limit: Optional[int] = _parse_bytes(lim) if lim else None
        self.tune_cpu = os.environ.get("FASTLAYERS_TUNE_CPU", "0") not in ("", "0", "false")
        self.transforms = _transforms_from_env()
        self.memory: Dict[str, object] = {}  # key -> Decision
        self.file_entries: Optional[Dict[str, dict]] = None  # loaded lazily
        self.fallbacks: Dict[str, str] = {}
        self.observers: list = []  # decide.observing's callbacks
        self.rejected: Set[Tuple[str, str]] = set()  # (key, label) of file entries warned about
        self.generation = 0


_state = _State()


def generation() -> int:
    """Changes whenever cached choices may have become stale (mode switch, clear)."""
    return _state.generation


def set_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"tuner mode must be one of {MODES}, got {mode!r}")
    with _state.lock:
        _state.mode = mode
        _state.memory.clear()  # decisions made under the old mode are re-made under the new one
        _state.generation += 1


def get_mode() -> str:
    return _state.mode


@contextlib.contextmanager
def _for_block(get: Callable[[], Any], set_: Callable[[Any], None], value: Any):
    """Sets a process-wide setting to `value` for a block, then back to what it was."""
    old = get()
    set_(value)
    try:
        yield
    finally:
        set_(old)


def mode(m: str):
    """Temporarily switch the tuner's mode (a context manager)."""
    return _for_block(get_mode, set_mode, m)


def set_transforms(allowed: bool) -> None:
    """Allow (True, the default) or forbid transform-based algorithms (FFT, Winograd) for every
    layer without its own setting. The switch is part of each decision's key: decisions made with
    transforms allowed are not used while they are off."""
    if not isinstance(allowed, bool):
        raise TypeError(f"set_transforms: `allowed` must be a bool, got {allowed!r}")
    with _state.lock:
        _state.transforms = allowed
        _state.generation += 1  # modules plan again, under keys with the new switch


def transforms_allowed() -> bool:
    """The global switch: whether layers without their own setting may use transform-based
    algorithms."""
    return _state.transforms


def transforms(allowed: bool):
    """Temporarily set the global transforms switch (a context manager; process-wide, like
    mode())."""
    return _for_block(transforms_allowed, set_transforms, allowed)


def set_budget(seconds: float) -> None:
    _state.budget_s = float(seconds)


def set_workspace_limit(nbytes: Optional[int]) -> None:
    """Bytes of workspace a candidate may use; None restores the default bound."""
    _state.workspace_limit = None if nbytes is None else int(nbytes)


def workspace_limit(device: torch.device) -> int:
    """The bound in force: the one set, else the smaller of 1 GiB and a quarter of the device's
    free memory (1 GiB on CPU)."""
    if _state.workspace_limit is not None:
        return _state.workspace_limit
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return min(1 << 30, free // 4)
    return 1 << 30
