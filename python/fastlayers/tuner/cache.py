"""The decision file: {"format": FORMAT, "entries": {key: decision}}, one per format under the
user's cache folder. Read once per process; written under a file lock, merged with what other
processes wrote, and replaced atomically. A file that cannot be read or has another format is
reported and ignored."""
from __future__ import annotations

import contextlib
import json
import os
import uuid
import warnings
from pathlib import Path
from typing import Dict

import torch

from .._version import __version__
from .state import _state

# 2: labels name the transform backend and the tile; 3: convolution decisions also bound the
# largest element's error (measure.error_measure), on uniform data; 4: the layer check counts host
# time after other work (conv2d.measure_layer); 5: step costs count device time beyond PyTorch's
# (measure.device_timer). The file's name carries the format, so a new one measures every
# decision again.
FORMAT = 5

try:  # the digest of the sources and flags the extension was built from (setup.py writes it)
    from .._build_info import SOURCES as _SOURCES
except ImportError:  # a tree whose extension was not built by setup.py
    _SOURCES = "unknown"


def _cudnn_version():
    try:
        return torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - no cuDNN in this build
        return None


def versions() -> str:
    """The tail of every key: the library versions a decision was measured with."""
    return "torch=%s,cuda=%s,cudnn=%s,fastlayers=%s+%s" % (
        torch.__version__, torch.version.cuda, _cudnn_version(), __version__, _SOURCES)


def cache_file() -> Path:
    """$FASTLAYERS_CACHE_DIR, else $XDG_CACHE_HOME/fastlayers, else ~/.cache/fastlayers; the file
    name carries FORMAT."""
    d = os.environ.get("FASTLAYERS_CACHE_DIR")
    if d:
        d = os.path.expanduser(d)
    else:
        # a relative XDG_CACHE_HOME is ignored, as the XDG specification says
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"),
                                                                   ".cache")
        d = os.path.join(base, "fastlayers")
    return Path(d) / ("tuner-v%d.json" % FORMAT)


def _read_file(path: Path) -> Dict[str, dict]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        warnings.warn(f"fastlayers: tuner cache {path} could not be read ({e}); ignoring it")
        return {}
    try:  # (bytes that are not UTF-8, and nesting too deep for the parser, are corruption too)
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
            raise ValueError("not a fastlayers tuner cache")
    except (ValueError, RecursionError) as e:
        warnings.warn(f"fastlayers: tuner cache {path} is corrupt ({type(e).__name__}: "
                      f"{str(e)[:200]}); ignoring it")
        return {}
    if data.get("format") != FORMAT:
        warnings.warn(f"fastlayers: tuner cache {path} has format {data.get('format')!r}, "
                      f"this version reads {FORMAT}; ignoring it")
        return {}
    return {k: v for k, v in data["entries"].items() if isinstance(v, dict) and "choice" in v}


def file_entries() -> Dict[str, dict]:
    """The file's entries, read on first use."""
    if _state.file_entries is None:
        _state.file_entries = _read_file(cache_file())
    return _state.file_entries


@contextlib.contextmanager
def file_lock(path: Path):
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


def write_entry(key: str, entry: dict) -> None:
    """Adds `entry` under `key` to the file; a file that cannot be written is reported and the
    decision stays in memory."""
    write_entries({key: entry})


def write_entries(new: Dict[str, dict]) -> None:
    """Adds the entries of `new` (key -> entry) to the file in one write; as write_entry."""
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a bad file was reported when first read
                entries = _read_file(path)
            entries.update(new)
            # the temporary file is created as open() creates one (the umask's permissions, which
            # mkstemp's 0600 is not), and then takes the file's own where there is one (a cache
            # shared by a team stays readable)
            tmp = str(path.parent / ("%s.%d.%s.tmp" % (path.name, os.getpid(), uuid.uuid4().hex)))
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(tmp, path.stat().st_mode & 0o7777)
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
