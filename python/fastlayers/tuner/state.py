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


def _flag_from_env(name: str, default: bool) -> bool:
    """An on/off variable: 0/false/off/no or 1/true/on/yes in any case; empty or unset is the
    default, anything else is reported and the default."""
    text = os.environ.get(name, "").strip().lower()
    if text in ("0", "false", "off", "no"):
        return False
    if text in ("1", "true", "on", "yes"):
        return True
    if text:
        warnings.warn(f"fastlayers: {name}={text!r} is not 0 or 1; using {int(default)}")
    return default


def _finite(value, parse=float):
    """parse(value) if that is a finite number >= 0 (a budget, a byte count), else ValueError."""
    try:
        got = parse(value)
    except (TypeError, ValueError, OverflowError):
        got = float("nan")
    if not 0 <= got < float("inf"):
        raise ValueError("not a finite number >= 0")
    return got


def _number_from_env(name: str, default, parse):
    """_finite of the variable's text; unset is the default, anything else is reported and the
    default."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return _finite(text, parse)
    except ValueError as e:
        warnings.warn(f"fastlayers: {name}={text!r} is not understood ({e}); using the default")
        return default


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
        self.budget_s = _number_from_env("FASTLAYERS_TUNER_BUDGET", 2.0, float)
        self.workspace_limit: Optional[int] = _number_from_env("FASTLAYERS_WORKSPACE_LIMIT",
                                                               None, _parse_bytes)
        self.tune_cpu = _flag_from_env("FASTLAYERS_TUNE_CPU", False)
        self.transforms = _flag_from_env("FASTLAYERS_TRANSFORMS", True)
        # key -> Decision, one table per mode (a decision belongs to the mode it was made in:
        # a mode switch and back finds its decisions again, as the modules' plans do)
        self.memories: Dict[str, Dict[str, object]] = {}
        self.file_entries: Optional[Dict[str, dict]] = None  # loaded lazily
        self.fallbacks: Dict[str, str] = {}
        self.observers: list = []  # decide.observing's callbacks
        self.rejected: Set[Tuple[str, str]] = set()  # (key, label) of file entries warned about
        self.clears = 0  # clear() calls
        # One number per state the modules' plans depend on (mode, transforms switch, clears),
        # the same again when a state returns (a switch for a block and back): plans made in it,
        # and torch.compile's graphs guarded on it, serve again.
        self.generations: Dict[Tuple[str, bool, int], int] = {}
        self.generation = 0
        regenerate(self)

    @property
    def memory(self) -> Dict[str, object]:
        """The decisions of the mode in force."""
        return self.memories.setdefault(self.mode, {})


def regenerate(state: "_State") -> None:
    """Sets state.generation from the state (under state.lock where others may change it)."""
    key = (state.mode, state.transforms, state.clears)
    state.generation = state.generations.setdefault(key, len(state.generations))


_state = _State()


def new_generation() -> None:
    """A generation not seen before: every layer asks the tuner again (its decisions stay, in
    memory and in the file)."""
    with _state.lock:
        _state.clears += 1
        regenerate(_state)


def generation() -> int:
    """Changes whenever cached choices may have become stale (mode switch, transforms switch,
    clear), and returns to its earlier value when the mode and switch do (clear() excepted)."""
    return _state.generation


def set_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"tuner mode must be one of {MODES}, got {mode!r}")
    with _state.lock:
        if mode == _state.mode:
            return
        _state.mode = mode
        regenerate(_state)


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
        regenerate(_state)  # modules plan again, under keys with the new switch


def transforms_allowed() -> bool:
    """The global switch: whether layers without their own setting may use transform-based
    algorithms."""
    return _state.transforms


def transforms(allowed: bool):
    """Temporarily set the global transforms switch (a context manager; process-wide, like
    mode())."""
    return _for_block(transforms_allowed, set_transforms, allowed)


def set_budget(seconds: float) -> None:
    """Seconds of measuring per decision beyond each candidate's first measurement (>= 0)."""
    try:
        _state.budget_s = _finite(seconds)
    except ValueError:
        raise ValueError(f"set_budget: `seconds` must be a finite number >= 0, "
                         f"got {seconds!r}") from None


def set_workspace_limit(nbytes) -> None:
    """Bytes of workspace a candidate may use (an int, or text as FASTLAYERS_WORKSPACE_LIMIT
    takes it: '512M', '2GiB'); None restores the default bound."""
    if nbytes is None:
        _state.workspace_limit = None
        return
    try:
        _state.workspace_limit = _finite(nbytes, _parse_bytes if isinstance(nbytes, str) else int)
    except ValueError:
        raise ValueError(f"set_workspace_limit: `nbytes` must be a byte count >= 0 (or text such "
                         f"as '512M'), got {nbytes!r}") from None


def workspace_limit(device: torch.device) -> int:
    """The bound in force: the one set, else the smaller of 1 GiB and a quarter of the device's
    free memory (1 GiB on CPU)."""
    if _state.workspace_limit is not None:
        return _state.workspace_limit
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return min(1 << 30, free // 4)
    return 1 << 30
