"""What every benchmark shares: timers, statistics, correctness gates, run metadata, the JSON writer.

Rules (docs/benchmarks.md, "Method"):
- A ratio is computed only from measurements whose results passed a correctness check in the same
  run (`gate`); a measurement outside its tolerance is recorded as failed and gets no ratio.
- Device time: CUDA events around each trial with L2 flushed before it (`CudaTimer`), or CUDA-graph
  replays (`graph_ms`) for kernels shorter than the launch path. Host time: wall clock of calls
  issued back to back (`host_us`). Medians of trials; geometric means over configurations.
- An A/B ratio is the median of per-round ratios of interleaved trials (`interleaved`), so a
  drift of clocks or of a neighbour's load hits both sides alike.
- Errors: normwise relative error against a float64 reference (`rel_err`).
- Every JSON document records the device, the versions, the git commit and whether the tree was
  clean (`meta`); benchmarks/make_docs.py refuses to publish a dirty or unknown tree's results
  unless told to, and then marks them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# The source tree's package when it holds a built extension (setup.py build_ext --inplace);
# otherwise the installed fastlayers, which an unbuilt source copy must not shadow.
if any((ROOT / "python" / "fastlayers").glob("_C*.so")) and str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

FLUSH_BYTES = 256 << 20  # larger than the L2 of any current GPU (H100 50 MB, H200 60 MB)


def log(*a):
    print(*a, flush=True)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def fmt(v, spec=".3g", none="-"):
    return none if v is None else format(v, spec)


# ---------------------------------------------------------------------------------------------
# Statistics


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(ts) -> dict:
    """Median, min, max and count of a list of times in ms."""
    return {"ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts), "trials": len(ts)}


# ---------------------------------------------------------------------------------------------
# Correctness


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| (float64 arithmetic; complex tensors too); inf when out is not
    finite."""
    if not bool(torch.isfinite(out).all()):
        return math.inf
    ref = ref.to(torch.complex128 if ref.is_complex() else torch.float64)
    out = out.to(ref.dtype)
    den = torch.linalg.vector_norm(ref).item()
    diff = torch.linalg.vector_norm(out - ref).item()
    return diff / den if den > 0 else diff


def tolerance(ref_err: float, factor: float = 2.0, floor: float = 0.0) -> float:
    """What a candidate's error may be: `factor` times the reference implementation's own error
    against float64 (the same rule as the tuner and the tests), never below `floor`."""
    return max(factor * ref_err, floor)


def gate(entry: dict, tol: float) -> bool:
    """Marks a measurement dict (holding "rel_err") within or outside `tol`; one outside is turned
    into a failure: its time stays for the record, and no ratio may use it (`ratio`)."""
    entry["tolerance"] = tol
    ok = "rel_err" in entry and entry["rel_err"] <= tol
    entry["within_tolerance"] = ok
    if not ok and "failed" not in entry:
        entry["failed"] = "error %.2e > tolerance %.2e" % (entry.get("rel_err", math.inf), tol)
    return ok


def usable(entry) -> bool:
    """A measurement a ratio may use: timed, and not failed (a failed gate included)."""
    return bool(entry) and "ms" in entry and "failed" not in entry


def ratio(a: dict, b: dict):
    """a's time over b's (> 1: b is faster), or None unless both are usable."""
    return a["ms"] / b["ms"] if usable(a) and usable(b) else None


def is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def failure(e: BaseException) -> dict:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return {"failed": "%s: %s" % (type(e).__name__, first[:300]), "oom": is_oom(e)}


class guard:
    """`with guard(row, stats, res, label):` runs one measurement; an out-of-memory or runtime
    error is recorded in `row` and counted in `stats`, the run goes on, and the document is saved
    either way."""

    def __init__(self, row: dict, stats: dict, res, label: str):
        self.row, self.stats, self.res, self.label = row, stats, res, label

    def __enter__(self):
        return self.row

    def __exit__(self, kind, e, tb):
        caught = kind is not None and issubclass(kind, (torch.cuda.OutOfMemoryError, RuntimeError))
        if caught:
            self.row.update(failure(e))
            self.stats["oom" if self.row["oom"] else "errors"] += 1
            log("  %s failed: %s" % (self.label, self.row["failed"]))
        release()
        self.res.save()
        return caught


def release():
    """After a failure on CUDA: let the queue drain and return cached blocks."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# Timers


def _sleep_cycles_per_ms() -> float:
    """Calibrates torch.cuda._sleep (a spin kernel counting clock cycles)."""
    try:
        torch.cuda._sleep(1000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(2_000_000)
        b.record()
        b.synchronize()
        return 2_000_000 / max(a.elapsed_time(b), 1e-3)
    except Exception:  # noqa: BLE001 - no _sleep: trials start without a head start
        return 0.0


class CudaTimer:
    """Device time of one call: CUDA events around each trial, L2 flushed before each trial (a
    write of FLUSH_BYTES), the median reported. The trials queue behind a spin kernel long enough
    for the host to enqueue them all, so host latency does not show up as device idle time inside
    the events (host cost is measured apart, with `host_us`). A slow call gets fewer trials (never
    fewer than 3) so that one measurement stays under `max_s`."""

    def __init__(self, warmup: int = 3, trials: int = 15, flush: bool = True, max_s: float = 2.0):
        self.warmup = warmup
        self.trials = trials
        self.max_s = max_s
        self.flush_buf = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if flush else None
        self.cycles_per_ms = _sleep_cycles_per_ms()

    def config(self) -> dict:
        return {"timer": "cuda-events", "warmup": self.warmup, "trials": self.trials,
                "l2_flush_bytes": FLUSH_BYTES if self.flush_buf is not None else 0}

    def __call__(self, fn, trials=None) -> dict:
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(max(1, self.warmup - 1)):
            fn()
        host_ms = (time.perf_counter() - t0) * 1e3 / max(1, self.warmup - 1)
        torch.cuda.synchronize()
        trials = trials or self.trials
        if first_s * trials > self.max_s:
            trials = max(3, min(trials, int(self.max_s / max(first_s, 1e-6))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
        if self.cycles_per_ms > 0:
            torch.cuda._sleep(int(min(50.0, 1.5 * trials * host_ms + 0.5) * self.cycles_per_ms))
        for i in range(trials):
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        out = summary([s.elapsed_time(e) for s, e in zip(starts, ends)])
        out["l2_flushed"] = self.flush_buf is not None
        return out


def graph_ms(fn, calls: int = 10, trials: int = 15) -> dict:
    """Device time per call of `calls` calls captured in one CUDA graph and replayed (no host
    launch path; warm cache), median over `trials` replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    del g
    out = summary(times)
    out["graph_calls"] = calls
    return out


def host_us(fn, calls: int = 100, reps: int = 5, warmup: int = 20) -> dict:
    """Wall clock per call of `calls` calls issued back to back, median of `reps`, in
    microseconds: "us" with the device drained at the end (host and device overlapped), and
    "enqueue_us" up to the last call's return (the host's own cost when the device keeps up)."""
    for _ in range(warmup):
        fn()
    _sync()
    total, enqueue = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        _sync()
        t2 = time.perf_counter()
        enqueue.append((t1 - t0) / calls * 1e6)
        total.append((t2 - t0) / calls * 1e6)
    return {"us": statistics.median(total), "enqueue_us": statistics.median(enqueue),
            "calls": calls, "reps": reps}


def held_host_us(fn, calls: int = 20, reps: int = 5, warmup: int = 5,
                 sleep_cycles: int = 300_000_000, lead: int = 2, between=None) -> dict:
    """The host's own microseconds per call: `calls` calls issued while a sleep kernel queued
    first holds the device (about 0.2 s on an H100), so no call waits for the device to catch up
    (which the enqueue time of host_us does once the queue is deep). Each trial's first `lead`
    calls go untimed: the first call after a synchronisation costs several times a later one, in
    every module alike, and would only blur the comparison. `between`, if given, runs untimed
    before every call (other work, as a network runs between two calls of a layer), its time
    taken out. Median of `reps`; "held" is False if the device was found idle after
    any trial, or a trial's calls took half the sleep or more (a call that waits for the device,
    at its start or its end: the figure then includes waiting)."""
    for _ in range(warmup):
        fn()
    _sync()
    sleep_s = _sleep_seconds(sleep_cycles)
    ts, held = [], True
    for _ in range(reps):
        torch.cuda._sleep(sleep_cycles)
        t_lead = time.perf_counter()
        for _ in range(lead):
            if between is not None:
                between()
            fn()
        other = 0.0  # seconds in `between`, taken out of the trial's
        t0 = time.perf_counter()
        for _ in range(calls):
            if between is not None:
                b0 = time.perf_counter()
                between()
                other += time.perf_counter() - b0
            fn()
        t1 = time.perf_counter()
        ts.append((t1 - t0 - other) / calls * 1e6)
        held &= not torch.cuda.current_stream().query() and t1 - t_lead < 0.5 * sleep_s
        _sync()
    return {"host_us": statistics.median(ts), "held": held, "calls": calls, "reps": reps}


_SLEEP_RATE = {}


def _sleep_seconds(cycles: int) -> float:
    """How long torch.cuda._sleep(cycles) holds the current device (_sleep_cycles_per_ms, once a
    device); infinite where it cannot be calibrated (no trial is then marked for its length)."""
    device = torch.cuda.current_device()
    if device not in _SLEEP_RATE:
        _SLEEP_RATE[device] = _sleep_cycles_per_ms()
    per_ms = _SLEEP_RATE[device]
    return cycles / per_ms / 1e3 if per_ms > 0 else float("inf")


def cpu_ms(fn, trials: int = 7, warmup: int = 1) -> dict:
    """Wall clock of single calls (CPU tensors), median of trials."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return summary(ts)


def _sync():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def back_to_back(step, steps: int):
    """fn() -> ms per call of `steps` calls of `step` issued back to back, wall clock from a
    drained device to the last call's completion (host and device together: a training step)."""
    def run():
        _sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync()
        return (time.perf_counter() - t0) * 1e3 / steps
    return run


class quiet_host:
    """A context for timing host-bound steps with less of the host's own noise. `how`:
    "free" changes nothing; "gc" turns Python's collector off (after a collection); "pin1" also
    puts every thread of the process on one CPU (the autograd worker then shares the core with
    the main thread, which waits for it, so no wake-up crosses cores); "pin2" puts the main thread
    on one CPU and every other thread on a second. Affinities and the collector are restored on
    exit. Linux only for pinning (elsewhere it is "gc")."""

    def __init__(self, how: str = "pin1"):
        if how not in ("free", "gc", "pin1", "pin2"):
            raise ValueError("quiet_host: how must be free, gc, pin1 or pin2, not %r" % (how,))
        # what it does here: pinning needs Linux's affinities, elsewhere it is "gc"
        pins = how in ("pin1", "pin2")
        self.how = "gc" if pins and not hasattr(os, "sched_setaffinity") else how
        self.saved = {}

    @staticmethod
    def _threads():
        try:
            return [int(t) for t in os.listdir("/proc/self/task")]
        except OSError:
            return []

    def __enter__(self):
        import gc
        import threading
        self.gc_was = gc.isenabled()
        if self.how == "free":
            return self
        gc.collect()
        gc.disable()
        if self.how in ("pin1", "pin2"):
            cpus = sorted(os.sched_getaffinity(0))
            main = threading.get_native_id()
            for tid in self._threads():
                try:
                    self.saved[tid] = os.sched_getaffinity(tid)
                    other = cpus[-2] if self.how == "pin2" and len(cpus) > 1 else cpus[-1]
                    os.sched_setaffinity(tid, {cpus[-1] if tid == main else other})
                except OSError:  # a thread that ended meanwhile
                    pass
        return self

    def __exit__(self, *exc):
        import gc
        for tid, mask in self.saved.items():
            try:
                os.sched_setaffinity(tid, mask)
            except OSError:
                pass
        self.saved = {}
        if self.gc_was:
            gc.enable()
        return False


def first_call_s(step) -> float:
    """Seconds of one call of `step`, from a drained device to its completion."""
    _sync()
    t0 = time.perf_counter()
    step()
    _sync()
    return time.perf_counter() - t0


def interleaved(a, b, time_one, rounds: int = 5) -> dict:
    """A/B: `rounds` rounds of (time a, time b) in alternating order; the ratio is the median of
    the per-round ratios a / b (> 1: b faster). `time_one(fn)` returns a measurement dict."""
    ta, tb, rs = [], [], []
    for i in range(rounds):
        if i % 2 == 0:
            ma, mb = time_one(a), time_one(b)
        else:
            mb, ma = time_one(b), time_one(a)
        ta.append(ma["ms"])
        tb.append(mb["ms"])
        rs.append(ma["ms"] / mb["ms"])
    return {"a_ms": statistics.median(ta), "b_ms": statistics.median(tb),
            "ratio": statistics.median(rs), "ratio_min": min(rs), "ratio_max": max(rs),
            "rounds": rounds}


def balanced_orders(n: int) -> list:
    """A Williams design for n items: rows of range(n) in which every item takes every position
    equally often and follows every other item equally often (n rows for an even n, 2 n for an
    odd one: the rows and their mirrors). A cyclic rotation alone always puts an item after the
    same neighbour, so whatever one item leaves behind for the next (the allocator's state, the
    caches, the clocks) would fall on one side of a comparison."""
    base = [0]
    lo, hi = 1, n - 1
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    rows = [[(b + k) % n for b in base] for k in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def rotating(fns: dict, time_one, rounds: int, best_of: int = 1) -> dict:
    """Each round times every function once, in an order that changes round by round
    (balanced_orders: every function takes every position, and follows every other function,
    equally often), so pairs compared afterwards saw the same conditions. With best_of = k, a
    round is k such orders and each function's figure for the round is the least of its k: on a
    shared host, noise only adds time. `time_one(fn)` returns ms. Returns name -> list of
    per-round ms (see ratio_of)."""
    names = list(fns)
    orders = balanced_orders(len(names))
    per = {n: [] for n in names}
    turn = 0
    for r in range(rounds):
        best = {n: math.inf for n in names}
        for _ in range(best_of):
            order = [names[i] for i in orders[turn % len(orders)]]
            turn += 1
            for n in order:
                best[n] = min(best[n], time_one(fns[n]))
        for n in names:
            per[n].append(best[n])
    return per


def ab_aa(steps: dict, base: str, ours: str, twin: str, calls: int, rounds: int,
          best_of: int = 1) -> dict:
    """`steps` (name -> step function) timed back to back, `calls` a trial, in one rotation
    (see rotating): {"ab": base / ours, "aa": base / twin, "ratio": the A/B median}, each a
    ratio_of. A/B and A/A come from the same rounds, so the A/A spread is the noise the A/B
    ratio saw."""
    per = rotating({k: back_to_back(s, calls) for k, s in steps.items()}, lambda fn: fn(),
                   rounds, best_of)
    ab = ratio_of(per[base], per[ours])
    return {"ab": ab, "aa": ratio_of(per[base], per[twin]), "ratio": ab["ratio"]}


def median_ci(sorted_xs, level: float = 0.95):
    """A distribution-free confidence interval for the median of the population `sorted_xs`
    (ascending) was drawn from: the order statistics x_(k) and x_(n+1-k) with the largest k for
    which P(Binomial(n, 1/2) < k) <= (1 - level) / 2. With fewer than 6 values no such k exists
    at 95%; then the whole range."""
    n = len(sorted_xs)
    tail, k, cdf = (1 - level) / 2, 0, 0.0
    while k < n:
        nxt = cdf + math.comb(n, k) / 2 ** n  # P(B <= k)
        if nxt > tail:
            break
        cdf, k = nxt, k + 1
    k = max(k, 1)
    return sorted_xs[k - 1], sorted_xs[n - k]


def ratio_of(num, den) -> dict:
    """Per-round ratios num / den of two lists of ms from the same rounds: their median, min, max,
    quartiles and the median's 95% confidence interval (median_ci), and each side's median ms."""
    rs = sorted(a / b for a, b in zip(num, den))
    q = statistics.quantiles(rs, n=4) if len(rs) > 1 else [rs[0]] * 3
    lo, hi = median_ci(rs)
    return {"a_ms": statistics.median(num), "b_ms": statistics.median(den),
            "ratio": statistics.median(rs), "ratio_min": rs[0], "ratio_max": rs[-1],
            "ratio_q1": q[0], "ratio_q3": q[2], "ratio_ci95": [lo, hi], "rounds": len(rs)}


# ---------------------------------------------------------------------------------------------
# Precision modes


def set_precision(mode: str) -> bool:
    """fp32: TF32 off for cuDNN and matmul; tf32: cuDNN's convolution switch on (PyTorch's default
    for convolution), matmul's off. Returns whether fastlayers sees TF32 allowed."""
    import fastlayers
    tf = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = tf
    torch.backends.cuda.matmul.allow_tf32 = False
    allowed = fastlayers.ops.conv_tf32_allowed()
    if allowed != tf:
        raise RuntimeError("fastlayers.ops.conv_tf32_allowed() = %s after setting %s" % (allowed, mode))
    return allowed


# ---------------------------------------------------------------------------------------------
# Run metadata


# A copy of the tree without its .git (a GPU machine gets the files alone) proves its commit with
# this file, written beside the files by scripts/source-manifest: the commit, then the git blob
# hash and path of every tracked file.
MANIFEST = ROOT / ".source-manifest"


def _blob_sha(path: Path) -> str:
    import hashlib
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def manifest_state() -> dict:
    """The commit of MANIFEST and whether any tracked file differs from it (outside
    benchmarks/results/), by content."""
    lines = MANIFEST.read_text().splitlines()
    commit = lines[0].split()[1]
    changed = []
    for line in lines[1:]:
        sha, path = line.split(" ", 1)
        if path.startswith("benchmarks/results/"):
            continue
        f = ROOT / path
        if not f.is_file() or _blob_sha(f) != sha:
            changed.append(path)
    return {"commit": commit, "dirty": bool(changed), "changed": changed[:20],
            "n_changed": len(changed), "note": "checked against .source-manifest (no .git)"}


def git_state() -> dict:
    """The commit and whether the tree differs from it. Benchmark outputs (benchmarks/results/)
    do not count; file modes do not count (copies to other machines lose them). Without a git
    checkout, or where MANIFEST names another commit than .git's HEAD, MANIFEST decides."""
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=20)
        if head.returncode != 0 or not head.stdout.strip():
            if MANIFEST.is_file():
                return manifest_state()
            return {"commit": None, "dirty": None, "note": "not a git checkout"}
        if MANIFEST.is_file() and MANIFEST.read_text().split(None, 2)[1] != head.stdout.strip():
            # a copy whose .git is older than its files (a GPU machine's): the manifest, written
            # with the files, names their commit
            return manifest_state()
        st = subprocess.run(["git", "-c", "core.fileMode=false", "status", "--porcelain", "--",
                             ".", ":(exclude)benchmarks/results"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
        changed = [line[3:] for line in st.stdout.splitlines() if line.strip()]
        return {"commit": head.stdout.strip(), "dirty": bool(changed), "changed": changed[:20],
                "n_changed": len(changed)}
    except FileNotFoundError:  # no git on the machine
        if MANIFEST.is_file():
            return manifest_state()
        return {"commit": None, "dirty": None, "note": "git unavailable"}
    except Exception as e:  # noqa: BLE001
        return {"commit": None, "dirty": None, "note": "git failed: %s" % e}


def versions() -> dict:
    import fastlayers
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "cuda": torch.version.cuda, "cudnn": None, "cufft": None,
         "fastlayers": getattr(fastlayers, "__version__", None),
         "fastlayers_with_cuda": bool(getattr(fastlayers, "with_cuda", False))}
    try:
        v["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        pass
    fn = getattr(fastlayers._C, "cufft_version", None)
    if fn is not None:
        try:
            v["cufft"] = fn()
        except Exception as e:  # noqa: BLE001
            v["cufft"] = "unavailable: %s" % e
    return v


def device_info() -> dict:
    if not torch.cuda.is_available():
        return {"name": platform.processor() or platform.machine(), "type": "cpu",
                "threads": torch.get_num_threads()}
    p = torch.cuda.get_device_properties(0)
    return {"name": torch.cuda.get_device_name(0), "type": "cuda",
            "capability": "%d.%d" % torch.cuda.get_device_capability(0),
            "total_memory": p.total_memory, "sm_count": p.multi_processor_count,
            "l2_cache_bytes": getattr(p, "L2_cache_size", None)}


def meta(kind: str, args: argparse.Namespace, **config) -> dict:
    """The head of a results document; warns loudly when the tree is not a clean commit."""
    git = git_state()
    doc = {"kind": kind,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "device": device_info(), "versions": versions(), "git": git,
           "argv": sys.argv[1:], "config": config}
    if git.get("dirty") is not False:
        why = ("%d changed paths: %s" % (git["n_changed"], ", ".join(git["changed"][:5]))
               if git.get("dirty") else git.get("note", "commit unknown"))
        log("WARNING: not a clean commit (%s). The results record it; benchmarks/make_docs.py "
            "will not publish them without --allow-dirty." % why)
    return doc


def describe_run(doc: dict) -> str:
    v, g = doc["versions"], doc["git"]
    state = "clean" if g.get("dirty") is False else ("DIRTY" if g.get("dirty") else "UNKNOWN")
    return "%s; torch %s, CUDA %s, cuDNN %s, cuFFT %s, fastlayers %s; git %s (%s)" % (
        doc["device"]["name"], v["torch"], v["cuda"], v["cudnn"], v["cufft"], v["fastlayers"],
        (g.get("commit") or "?")[:10], state)


class Results:
    """A results document, written atomically after every section, so that a run cut short still
    leaves what it measured: OUT/<kind>-<device>.json."""

    def __init__(self, out_dir, doc: dict):
        self.doc = doc
        dev = doc["device"]
        self.path = Path(out_dir) / ("%s-%s.json" % (
            doc["kind"], "cpu" if dev.get("type") == "cpu" else slug(dev["name"])))

    def save(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1, default=str)
        os.replace(tmp, self.path)


def parser(doc: str, results: bool = True) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark that writes results has."""
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    if results:
        ap.add_argument("--out", default=str(RESULTS),
                        help="folder for the results JSON (default: benchmarks/results)")
        ap.add_argument("--quick", action="store_true", help="a smaller run")
    return ap


def require_cuda(what: str) -> bool:
    """Whether CUDA and a CUDA build are there; if not, says why `what` has nothing to run."""
    import fastlayers
    if torch.cuda.is_available() and fastlayers.with_cuda:
        return True
    log("no CUDA device (or a CPU-only build): %s; nothing to run" % what)
    return False


def finish(doc: dict, res: Results, ok: bool, stats: dict, t_start: float, render) -> int:
    """The end of a run: PyTorch's TF32 default back, the tuner's report, counts and time saved;
    the tables printed (`render(doc)`); the exit status (1 a section crashed, 3 a measurement
    failed, 0 otherwise)."""
    from fastlayers import tuner
    torch.backends.cudnn.allow_tf32 = True
    doc["tuner_report"] = tuner.report()
    doc["stats"] = stats
    doc["elapsed_s"] = time.perf_counter() - t_start
    res.save()
    log("")
    log(render(doc))
    log("")
    log("wrote %s (%.0f s; %d failed measurements, %d out of memory)"
        % (res.path, doc["elapsed_s"], stats["errors"], stats["oom"]))
    if not ok:
        return 1
    return 3 if stats["errors"] else 0


def section(doc: dict, res: Results, name: str, fn, *a) -> bool:
    """Runs one section; an exception is recorded in doc["sections"] and the run goes on."""
    import traceback
    t0 = time.perf_counter()
    log("")
    log("== %s ==" % name)
    ok = True
    try:
        fn(*a)
        doc.setdefault("sections", {})[name] = {"ok": True, "s": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - record, go on with the next section
        traceback.print_exc()
        ok = False
        doc.setdefault("sections", {})[name] = {"ok": False, "s": time.perf_counter() - t0,
                                                "error": "%s: %s" % (type(e).__name__, e)}
        release()
    res.save()
    return ok
