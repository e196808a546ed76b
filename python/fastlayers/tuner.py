"""The tuner: per shape and per pass, the fastest candidate whose error is within tolerance.

Candidates are PyTorch's own implementation (``native``, always present) and every fastlayers
algorithm that supports the case. Decisions live in memory and in a JSON file; choosing a cached
decision costs a dictionary look-up.

Environment:
  FASTLAYERS_TUNER_MODE       ``tune`` (measure on first sight; default), ``cache`` (use cached
                              decisions, otherwise the heuristic), ``off`` (heuristic only)
  FASTLAYERS_CACHE_DIR        folder of the decision file (default: $XDG_CACHE_HOME/fastlayers,
                              else ~/.cache/fastlayers)
  FASTLAYERS_TUNER_BUDGET     seconds of measuring per pass and shape (default 2)
  FASTLAYERS_WORKSPACE_LIMIT  bytes a candidate's workspace may take (suffixes K, M, G allowed;
                              default: the smaller of 1 GiB and a quarter of free device memory)
  FASTLAYERS_TUNE_CPU         1 to measure on CPU tensors too (default: CPU uses the heuristic)
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import ops as _ops

__all__ = [
    "ConvProblem", "Decision", "PASSES", "choose_conv2d", "candidates_conv2d", "report",
    "decisions", "set_mode", "get_mode", "clear", "cache_file", "set_workspace_limit",
    "workspace_limit", "set_budget", "note_fallback",
]

FORMAT = 2  # 2: labels name the transform backend and the tile
PASSES = ("forward", "input_grad", "weight_grad")
MODES = ("tune", "cache", "off")
from ._version import __version__ as _VERSION
try:  # the digest of the sources and flags the extension was built from (setup.py writes it)
    from ._build_info import SOURCES as _SOURCES
except ImportError:  # a tree whose extension was not built by setup.py
    _SOURCES = "unknown"

# Relative L2 error a candidate may show against a float64 reference: at most twice PyTorch's own
# error in the same dtype, and never less than this floor (the dtype's storage rounding and an FFT's
# log-depth accumulation, which a direct method does not have).
ERROR_FLOOR = {
    torch.float64: 1e-10,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}


# A fastlayers candidate replaces PyTorch's path only when it is measurably faster: its median
# must be below this fraction of native's (timing noise and per-call host cost stay on the safe side).
WIN_MARGIN = 0.95


def error_floor(dtype: torch.dtype, tf32: bool) -> float:
    """The smallest tolerance for `dtype`; with TF32 allowed, TF32's own rounding (a 10-bit
    mantissa, as float16's)."""
    if dtype == torch.float32 and tf32:
        return ERROR_FLOOR[torch.float16]
    return ERROR_FLOOR.get(dtype, 1e-5)


def _parse_bytes(text: str) -> int:
    text = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(float(text))


@dataclass(frozen=True)
class ConvProblem:
    """Everything that changes the answer for a stride-1 convolution."""
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

    @staticmethod
    def from_tensors(input: torch.Tensor, weight: torch.Tensor, padding: Sequence[int],
                     tf32: Optional[bool] = None) -> "ConvProblem":
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
            tf32=(dev.type == "cuda" and _ops.conv_tf32_allowed()) if tf32 is None else bool(tf32),
            deterministic=torch.are_deterministic_algorithms_enabled(),
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
        versions = "torch=%s,cuda=%s,cudnn=%s,fastlayers=%s+%s" % (
            torch.__version__, torch.version.cuda, _cudnn_version(), _VERSION, _SOURCES)
        return ("conv2d.%s|S=%d,C=%d,K=%d,H=%d,W=%d,k=%dx%d,pad=%d,%d|%s|%s|%s|sm%s|tf32=%d|det=%d|%s"
                % (pass_, self.S, self.C, self.K, self.H, self.W, self.kh, self.kw, self.ph, self.pw,
                   self.dtype, self.layout, self.device_name, self.capability, self.tf32,
                   self.deterministic, versions))

    def describe(self) -> str:
        return "S=%d C=%d K=%d %dx%d k=%dx%d pad=%d,%d %s %s%s" % (
            self.S, self.C, self.K, self.H, self.W, self.kh, self.kw, self.ph, self.pw, self.dtype,
            self.device_type, " tf32" if self.tf32 and self.dtype == "float32" else "")


def _cudnn_version():
    try:
        return torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - no cuDNN in this build
        return None


@dataclass
class Decision:
    choice: str                      # "native" or an FFT label ("fbfft:16x16,tile=14x14")
    source: str                      # tuned, file, heuristic, forced
    reason: str = ""
    times_ms: Dict[str, float] = field(default_factory=dict)
    errors: Dict[str, float] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"choice": self.choice, "reason": self.reason, "times_ms": self.times_ms,
                "errors": self.errors, "skipped": self.skipped}

    @staticmethod
    def from_json(d: dict) -> "Decision":
        return Decision(choice=str(d["choice"]), source="file", reason=str(d.get("reason", "")),
                        times_ms=dict(d.get("times_ms", {})), errors=dict(d.get("errors", {})),
                        skipped=dict(d.get("skipped", {})))


# FFT labels: the algorithm names the transform backend ("fft" is cuFFT), then the basis.
_FFT_BACKEND = {"fft": "cufft", "fbfft": "fbfft"}
_ALGO = {"cufft": "fft", "fbfft": "fbfft"}


def _size(text: str, label: str) -> Tuple[int, int]:
    h, sep, w = text.partition("x")
    try:
        if sep and int(h) > 0 and int(w) > 0:
            return (int(h), int(w))
    except ValueError:
        pass
    raise ValueError(f"bad size {text!r} in algorithm label {label!r}")


def _parse_fft(label: str):
    algo, _, params = label.partition(":")
    if algo not in _FFT_BACKEND:
        raise ValueError(f"unknown algorithm label {label!r}")
    basis, sep, tile = params.partition(",tile=")
    return algo, _size(basis, label), (_size(tile, label) if sep else (0, 0))


def parse_choice(label: str) -> Tuple[str, Optional[Tuple[int, int]]]:
    """'native' -> ('native', None); 'fft:16x12' -> ('fft', (16, 12)) (cuFFT);
    'fbfft:16x16' -> ('fbfft', (16, 16)); 'fft:16x16,tile=14x14' -> ('fft', (16, 16))."""
    if label == "native":
        return "native", None
    algo, basis, _ = _parse_fft(label)
    return algo, basis


def fft_args(label: str) -> Tuple[Tuple[int, int], str, Tuple[int, int]]:
    """(basis, backend, tile) of an FFT label: 'fbfft:16x16,tile=14x14' -> ((16, 16), 'fbfft',
    (14, 14)); tile (0, 0) when untiled."""
    if label == "native":
        raise ValueError(f"{label!r} is not an FFT label")
    algo, basis, tile = _parse_fft(label)
    return basis, _FFT_BACKEND[algo], tile


def fft_label(basis: Tuple[int, int], backend: str = "cufft",
              tile: Tuple[int, int] = (0, 0)) -> str:
    """The label of an FFT candidate: 'fft:NHxNW' (cuFFT), 'fbfft:NHxNW', ',tile=THxTW' tiled."""
    algo = _ALGO[backend]
    label = "%s:%dx%d" % (algo, basis[0], basis[1])
    if tile[0] > 0:
        label += ",tile=%dx%d" % (tile[0], tile[1])
    return label


# --------------------------------------------------------------------------------------------
# State


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
        self.memory: Dict[str, Decision] = {}
        self.file_entries: Optional[Dict[str, dict]] = None  # loaded lazily
        self.fallbacks: Dict[str, str] = {}
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
def mode(m: str):
    """Temporarily switch the tuner's mode."""
    old = get_mode()
    set_mode(m)
    try:
        yield
    finally:
        set_mode(old)


def set_budget(seconds: float) -> None:
    _state.budget_s = float(seconds)


def set_workspace_limit(nbytes: Optional[int]) -> None:
    """Bytes of workspace a candidate may use; None restores the default bound."""
    _state.workspace_limit = None if nbytes is None else int(nbytes)


def workspace_limit(device: torch.device) -> int:
    if _state.workspace_limit is not None:
        return _state.workspace_limit
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return min(1 << 30, free // 4)
    return 1 << 30


def cache_file() -> Path:
    d = os.environ.get("FASTLAYERS_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "fastlayers")
    return Path(d) / ("tuner-v%d.json" % FORMAT)


def clear(memory: bool = True, file: bool = False) -> None:
    """Forget decisions: those in memory, and (file=True) the cache file too."""
    with _state.lock:
        if memory:
            _state.memory.clear()
            _state.fallbacks.clear()
        if file:
            with contextlib.suppress(FileNotFoundError):
                cache_file().unlink()
        _state.file_entries = None
        _state.generation += 1


# --------------------------------------------------------------------------------------------
# The file: {"format": 1, "entries": {key: decision}}. Read once per process; written with a lock,
# merged with what other processes wrote, replaced atomically.


def _read_file(path: Path) -> Dict[str, dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        warnings.warn(f"fastlayers: tuner cache {path} could not be read ({e}); ignoring it")
        return {}
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
            raise ValueError("not a fastlayers tuner cache")
    except ValueError as e:
        warnings.warn(f"fastlayers: tuner cache {path} is corrupt ({e}); ignoring it")
        return {}
    if data.get("format") != FORMAT:
        warnings.warn(f"fastlayers: tuner cache {path} has format {data.get('format')!r}, "
                      f"this version reads {FORMAT}; ignoring it")
        return {}
    return {k: v for k, v in data["entries"].items() if isinstance(v, dict) and "choice" in v}


def _file_entries() -> Dict[str, dict]:
    if _state.file_entries is None:
        _state.file_entries = _read_file(cache_file())
    return _state.file_entries


@contextlib.contextmanager
def _file_lock(path: Path):
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(str(path) + ".lock", "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _write_entry(key: str, decision: Decision) -> None:
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(path):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a bad file was reported when first read
                entries = _read_file(path)
            entries[key] = decision.to_json()
            fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=str(path.parent))
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({"format": FORMAT, "entries": entries}, f, indent=1, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        _state.file_entries = entries
    except OSError as e:
        warnings.warn(f"fastlayers: could not write tuner cache {path} ({e}); decisions stay in memory")


# --------------------------------------------------------------------------------------------
# Candidates and measurement


# Whether each algorithm gives bitwise-identical results run to run (no atomics, no
# order-dependent reductions): FFT convolution uses cuFFT or fbfft, cuBLAS and kernels without
# atomics; tiled weight gradients sum their chunks in a fixed order.
DETERMINISTIC = {"native": True, "fft": True, "fbfft": True}

# Bases of tiled candidates: tile + kernel - 1 is one of these powers of two (square).
TILE_BASES = (8, 16, 32, 64)


def _fbfft_basis_ok(nh: int, nw: int) -> bool:
    ok = lambda n: 2 <= n <= _ops.FBFFT_MAX_BASIS and n & (n - 1) == 0  # noqa: E731
    return ok(nh) and ok(nw)


def candidates_conv2d(p: ConvProblem, pass_: str) -> List[str]:
    """Labels of every algorithm that supports the problem, `native` first; under
    torch.use_deterministic_algorithms(True) only deterministic ones.

    cuFFT ('fft:NHxNW') at the smallest fast basis and the next power of two holding the padded
    input; fbfft ('fbfft:NHxNW') at that power of two when both sides are at most 128 (not float64
    on CUDA); tiled, either backend (',tile=THxTW'), where tile + kernel - 1 is 8, 16, 32 or 64
    and the tile is smaller than the pass's large result (y; grad_input for the input grad)."""
    out = ["native"]
    hp, wp = p.H + 2 * p.ph, p.W + 2 * p.pw
    backends = ["cufft"]
    if not (p.device_type == "cuda" and p.dtype == "float64"):
        backends.append("fbfft")
    if p.deterministic:
        backends = [b for b in backends if DETERMINISTIC[_ALGO[b]]]
    if "cufft" in backends:
        bases = {(_ops.good_fft_size(hp), _ops.good_fft_size(wp)),
                 (_ops.next_pow2(hp), _ops.next_pow2(wp))}
        for basis in sorted(bases):
            out.append(fft_label(basis))
    pow2 = (_ops.next_pow2(hp), _ops.next_pow2(wp))
    if "fbfft" in backends and _fbfft_basis_ok(*pow2):
        out.append(fft_label(pow2, "fbfft"))
    rh, rw = (p.H, p.W) if pass_ == "input_grad" else (p.oh, p.ow)
    for n in TILE_BASES:
        tile = (min(n - p.kh + 1, rh), min(n - p.kw + 1, rw))
        if tile[0] < 1 or tile[1] < 1 or (tile[0] == rh and tile[1] == rw):
            continue  # the kernel does not fit, or one tile would be the whole result
        for backend in backends:
            out.append(fft_label((n, n), backend, tile))
    return out


def fft_workspace_bytes(p: ConvProblem, pass_: str, label: str) -> int:
    """Device bytes an FFT candidate (a label) allocates beyond its inputs and output: the
    backend's buffers, or for a tiled candidate those of one chunk of tiles with the tile copies
    (chunks stay under the extension's chunk bound)."""
    from . import _C
    basis, backend, tile = fft_args(label)
    real_bytes = 8 if p.dtype == "float64" else 4
    ws = _C.fft_conv2d_workspace_bytes(PASSES.index(pass_), p.S, p.C, p.K, p.H, p.W, p.kh, p.kw,
                                       p.ph, p.pw, basis[0], basis[1], real_bytes, backend,
                                       tile[0], tile[1])
    return int(ws * 1.1)  # cuFFT's work areas, not counted above


def _pass_fn(label: str, pass_: str, p: ConvProblem) -> Callable[..., torch.Tensor]:
    algo, _ = parse_choice(label)
    pad = [p.ph, p.pw]
    if algo == "native":
        if pass_ == "forward":
            return lambda x, w, gy: F.conv2d(x, w, None, 1, pad)
        mask = [True, False, False] if pass_ == "input_grad" else [False, True, False]
        idx = 0 if pass_ == "input_grad" else 1
        return lambda x, w, gy: torch.ops.aten.convolution_backward(
            gy, x, w, None, [1, 1], pad, [1, 1], False, [0, 0], 1, mask)[idx]
    tf32 = p.tf32
    basis, backend, tile = fft_args(label)
    fl = torch.ops.fastlayers
    if pass_ == "forward":
        return lambda x, w, gy: fl.fft_conv2d(x, w, None, pad, basis, tf32, backend, tile)
    if pass_ == "input_grad":
        return lambda x, w, gy: fl.fft_conv2d_input_grad(gy, w, pad, basis, tf32, backend, tile)
    return lambda x, w, gy: fl.fft_conv2d_weight_grad(gy, x, pad, basis, tf32, backend, tile)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not torch.isfinite(out).all():
        return math.inf
    den = ref.norm().item()
    diff = (out.double() - ref).norm().item()
    return diff / den if den > 0 else diff


def _timer(device: torch.device):
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


def _measure(p: ConvProblem, pass_: str, device: torch.device) -> Decision:
    dt = p.torch_dtype
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(p.S, p.C, p.H, p.W, device=device, dtype=dt, generator=gen)
    w = torch.randn(p.K, p.C, p.kh, p.kw, device=device, dtype=dt, generator=gen)
    gy = torch.randn(p.S, p.K, p.oh, p.ow, device=device, dtype=dt, generator=gen)
    if p.layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad(), torch.autocast(device.type, enabled=False):
        ref = _pass_fn("native", pass_, p)(x.double(), w.double(), gy.double())
        return _measure_candidates(p, pass_, device, x, w, gy, ref)


def _measure_candidates(p, pass_, device, x, w, gy, ref) -> Decision:
    dt = p.torch_dtype
    limit = workspace_limit(device)
    timer = _timer(device)
    deadline = time.perf_counter() + _state.budget_s
    times: Dict[str, float] = {}
    errors: Dict[str, float] = {}
    skipped: Dict[str, str] = {}
    tol = None
    for label in candidates_conv2d(p, pass_):
        if label != "native":
            ws = fft_workspace_bytes(p, pass_, label)
            if ws > limit:
                skipped[label] = "workspace %.0f MiB > bound %.0f MiB" % (ws / 2**20, limit / 2**20)
                continue
            if time.perf_counter() > deadline:
                skipped[label] = "tuning budget spent"
                continue
        fn = _pass_fn(label, pass_, p)
        args = (x, w, gy)
        try:
            out = fn(*args)
            err = _rel_err(out, ref)
            del out
        except (RuntimeError, MemoryError) as e:  # an OOM or a library refusal: not a candidate
            skipped[label] = "failed: %s" % str(e).splitlines()[0][:120]
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        errors[label] = err
        if label == "native":
            tol = max(2 * err, error_floor(dt, p.tf32))
        elif not err <= tol:
            skipped[label] = "error %.2e > tolerance %.2e" % (err, tol)
            continue
        timer(fn, args)  # warm-up (plans, allocator)
        samples = []
        for _ in range(25):
            samples.append(timer(fn, args))
            if len(samples) >= 3 and time.perf_counter() > deadline:
                break
        times[label] = statistics.median(samples)
    best = min(times, key=times.get)
    reason = "fastest of %d measured" % len(times)
    if best == "native" and len(times) == 1:
        reason = "only candidate measured"
    elif best != "native" and "native" in times and times[best] > WIN_MARGIN * times["native"]:
        reason = "%s within %.0f%% of native: kept native" % (best, 100 * (1 - WIN_MARGIN))
        best = "native"
    return Decision(choice=best, source="tuned", reason=reason, times_ms=times, errors=errors,
                    skipped=skipped)


def _measure_or_native(p: ConvProblem, pass_: str, device: torch.device) -> Decision:
    """Measures, unless that cannot be done now; then PyTorch's path, with the reason (kept in
    memory for this process, not written to the file)."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return Decision(choice="native", source="heuristic",
                        reason="first seen during CUDA graph capture: not measured")
    try:
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            return _measure(p, pass_, device)
    except (RuntimeError, MemoryError) as e:  # out of memory for the reference, say
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return Decision(choice="native", source="heuristic",
                        reason="measuring failed: %s" % str(e).splitlines()[0][:160])


def choose_conv2d(p: ConvProblem, pass_: str, device: Optional[torch.device] = None) -> str:
    """The algorithm label for one pass of `p`: 'native' or an FFT label ('fft:NHxNW',
    'fbfft:NHxNW', either with ',tile=THxTW'). A new shape is measured on `device` (default: the
    current CUDA device, or the CPU)."""
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    key = p.key(pass_)
    d = _state.memory.get(key)
    if d is not None:
        return d.choice
    with _state.lock:
        d = _state.memory.get(key)
        if d is not None:
            return d.choice
        if _state.mode != "off":
            entry = _file_entries().get(key)
            if entry is not None:
                d = Decision.from_json(entry)
        if d is None:
            measurable = p.device_type == "cuda" or (p.device_type == "cpu" and _state.tune_cpu)
            if _state.mode == "tune" and measurable:
                if device is None:
                    device = (torch.device("cuda", torch.cuda.current_device())
                              if p.device_type == "cuda" else torch.device("cpu"))
                d = _measure_or_native(p, pass_, device)
                if d.source == "tuned":
                    _write_entry(key, d)
            else:
                why = {"off": "tuner off", "cache": "not in cache (mode 'cache')"}.get(_state.mode)
                if why is None:
                    why = "CPU tensors are not timed (FASTLAYERS_TUNE_CPU=1 to time them)"
                d = Decision(choice="native", source="heuristic", reason=why)
        _state.memory[key] = d
        return d.choice


def record_forced(p: ConvProblem, pass_: str, label: str) -> None:
    with _state.lock:
        _state.memory.setdefault("forced|" + p.key(pass_) + "|" + label,
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
                         "skipped": dict(d.skipped)})
        for what, reason in _state.fallbacks.items():
            rows.append({"key": what, "choice": "native", "source": "unsupported", "reason": reason,
                         "times_ms": {}, "errors": {}, "skipped": {}})
    return rows


def describe_choice(label: str) -> str:
    """In words: 'PyTorch (native)', 'FFT, backend fbfft, basis 16x16, tiles 14x14'."""
    if label == "native":
        return "PyTorch (native)"
    try:
        basis, backend, tile = fft_args(label)
    except ValueError:
        return label
    return "FFT, backend %s, basis %dx%d, %s" % (
        backend, basis[0], basis[1], "tiles %dx%d" % tile if tile[0] > 0 else "untiled")


def report() -> str:
    """A readable table of what was chosen (backend, basis, tile), for which shape and pass, and
    why."""
    lines = ["fastlayers tuner: mode=%s, cache=%s" % (_state.mode, cache_file())]
    rows = decisions()
    if not rows:
        lines.append("  (no decisions yet)")
    for r in rows:
        key = r["key"]
        if key.startswith("forced|"):
            key = key[len("forced|"):]
        head = key.split("|torch=")[0]
        lines.append("  %-12s %-11s %s" % (r["choice"], r["source"], head))
        lines.append("      use: %s" % describe_choice(r["choice"]))
        if r["reason"]:
            lines.append("      why: %s" % r["reason"])
        if r["times_ms"]:
            lines.append("      ms:  " + ", ".join("%s %.4g" % kv for kv in r["times_ms"].items()))
        if r["errors"]:
            lines.append("      err: " + ", ".join("%s %.2e" % kv for kv in r["errors"].items()))
        for label, why in r["skipped"].items():
            lines.append("      skipped %s: %s" % (label, why))
    return "\n".join(lines)
