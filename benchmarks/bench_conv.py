#!/usr/bin/env python3
"""FFT convolution against cuDNN: the fbfft paper's Table 4 layers, Conv2d through the tuner, and a
small whole-network training step.

    python3 benchmarks/bench_conv.py [--out DIR] [--quick]

On CUDA (the same process measures PyTorch right beside us):
  a. Table 4 layers (S = 128, valid), every pass (fprop = forward, bprop = input grad, accGrad =
     weight grad), fp32 (TF32 off) and tf32 (cuDNN's TF32 on, passed to our ops explicitly):
     cuDNN (cudnn.benchmark = True) vs torch.ops.fastlayers.fft_conv2d* at every candidate the
     tuner would consider (cuFFT and fbfft bases, tiled ones of either backend; the fastest within
     the error tolerance is reported and named), plus the tuner's own choice. CUDA events, L2
     flushed before every trial, median of the trials. Peak extra device memory of one call (output
     included), relative L2 error against a float64 reference, effective TFLOP/s
     (2 S f f' kh kw oh ow / time). Ratio = cuDNN time / ours (> 1: we are faster).
  b. fastlayers.Conv2d (tuned) vs nn.Conv2d on the same layers: forward and forward+backward,
     and the module's host overhead (module forward minus the chosen op called directly).
  c. (not with --quick) small VGG-ish and AlexNet-ish training steps: fastlayers.convert(model)
     vs the same model with nn.Conv2d.

Writes DIR/conv-<device>.json (every measurement) and DIR/conv-<device>.png (speedups), and
prints markdown tables. Without CUDA it runs a small CPU comparison instead and writes
DIR/conv-cpu.json.

Exit status: 0 when everything ran (out-of-memory configurations are recorded and tolerated),
3 when some measurement failed for another reason, 1 when a whole section crashed.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402

S = 128
# name, f (in channels), f' (out channels), n (input size), k (kernel size)
LAYERS = [
    ("L1", 3, 96, 128, 11),
    ("L2", 64, 64, 64, 9),
    ("L3", 128, 128, 32, 9),
    ("L4", 128, 128, 16, 7),
    ("L5", 384, 384, 13, 3),
]
PASSES = [("fprop", "forward"), ("bprop", "input_grad"), ("accGrad", "weight_grad")]
MODES = ("fp32", "tf32")

# cuDNN times (ms) measured on an NVIDIA H200, PyTorch 2.11.0+cu130, cuDNN 9.19 (BENCHMARKS.md).
ANCHORS_H200_MS = {
    "L1": {"fp32": (1.80, 2.69, 2.25), "tf32": (1.81, 8.58, 2.17)},
    "L2": {"fp32": (1.00, 0.82, 0.95), "tf32": (1.00, 1.83, 0.95)},
    "L3": {"fp32": (5.63, 1.00, 0.37), "tf32": (0.94, 1.53, 0.37)},
    "L4": {"fp32": (0.83, 0.84, 0.12), "tf32": (0.15, 0.26, 0.12)},
    "L5": {"fp32": (0.68, 1.26, 0.36), "tf32": (0.16, 0.24, 0.32)},
}
TARGET_GEOMEAN = {"fp32": 3.0, "tf32": 1.5}

FLUSH_BYTES = 256 << 20  # larger than the L2 of any current GPU (H100 50 MB, H200 60 MB)


# ---------------------------------------------------------------------------------------------
# Small helpers


def log(*a):
    print(*a, flush=True)


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "unknown"


def flops(C, K, kh, kw, oh, ow, batch=S):
    return 2.0 * batch * C * K * kh * kw * oh * ow


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not bool(torch.isfinite(out).all()):
        return math.inf
    den = ref.norm().item()
    diff = (out.double() - ref).norm().item()
    return diff / den if den > 0 else diff


def is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def failure(e: BaseException) -> dict:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return {"failed": "%s: %s" % (type(e).__name__, first[:300]), "oom": is_oom(e)}


def count_failure(stats: dict, f: dict) -> None:
    stats["oom" if f["oom"] else "errors"] += 1


def record_failure(row: dict, e: BaseException, stats: dict) -> None:
    row.update(failure(e))
    count_failure(stats, row)


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(v, spec=".3g", none="-"):
    return none if v is None else format(v, spec)


def git_info():
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0 or not head.stdout.strip():
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return {"commit": head.stdout.strip(), "dirty": bool(dirty)}
    except Exception:  # noqa: BLE001 - no git on the machine
        return {"commit": None, "dirty": None}


def versions() -> dict:
    v = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "cufft": None,
        "fastlayers": getattr(fastlayers, "__version__", None),
        "fastlayers_with_cuda": bool(getattr(fastlayers, "with_cuda", False)),
    }
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


class Results:
    """The JSON document, written after every section (and atomically) so that a run cut short
    still leaves what it measured."""

    def __init__(self, path: Path, doc: dict):
        self.path = path
        self.doc = doc

    def save(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1, default=str)
        os.replace(tmp, self.path)


# ---------------------------------------------------------------------------------------------
# CUDA measurement


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


class GpuTimer:
    """Device time of one call: CUDA events around each trial, L2 flushed before each trial, the
    median reported. The trials are queued behind a spin kernel long enough for the host to enqueue
    them all, so host-side latency (Python, launches) does not show up as device idle time inside
    the events; host cost is measured separately (module overhead, `loop` times)."""

    def __init__(self, warmup: int, trials: int, flush: bool = True, max_s: float = 2.0):
        self.warmup = warmup
        self.trials = trials
        self.max_s = max_s
        self.flush_buf = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if flush else None
        self.cycles_per_ms = _sleep_cycles_per_ms()

    def __call__(self, fn, flush=None) -> dict:
        """Median over trials of one call of fn, CUDA events, L2 flushed before each trial."""
        flush = self.flush_buf is not None if flush is None else flush
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(max(1, self.warmup - 1)):
            fn()
        host_ms = (time.perf_counter() - t0) * 1e3 / max(1, self.warmup - 1)  # upper bound when GPU-bound
        torch.cuda.synchronize()
        # a slow configuration gets fewer trials (never fewer than 3) to keep the run short
        trials = self.trials
        if first_s * trials > self.max_s:
            trials = max(3, min(trials, int(self.max_s / max(first_s, 1e-6))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
        if self.cycles_per_ms > 0:
            head_ms = min(50.0, 1.5 * trials * host_ms + 0.5)
            torch.cuda._sleep(int(head_ms * self.cycles_per_ms))
        for i in range(trials):
            if flush:
                self.flush_buf.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        ts = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        return {"ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts), "trials": trials,
                "l2_flushed": bool(flush)}


def peak_extra_bytes(fn):
    """(output, peak device bytes allocated by one call beyond what was allocated before it)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - before


def set_precision(mode: str) -> bool:
    tf = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = tf
    torch.backends.cuda.matmul.allow_tf32 = False
    allowed = fastlayers.ops.conv_tf32_allowed()
    if allowed != tf:
        raise RuntimeError("fastlayers.ops.conv_tf32_allowed() = %s after setting %s" % (allowed, mode))
    return allowed


def native_fn(pass_, x, w, gy):
    if pass_ == "forward":
        return lambda: F.conv2d(x, w)
    mask = [True, False, False] if pass_ == "input_grad" else [False, True, False]
    idx = 0 if pass_ == "input_grad" else 1
    return lambda: torch.ops.aten.convolution_backward(
        gy, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask)[idx]


def fft_fn(pass_, x, w, gy, label, tf32):
    """One pass of an FFT candidate label ('fft:NHxNW', 'fbfft:NHxNW', ',tile=THxTW')."""
    basis, backend, tile = tuner.fft_args(label)
    basis, tile = list(basis), list(tile)
    fl = torch.ops.fastlayers
    if pass_ == "forward":
        return lambda: fl.fft_conv2d(x, w, None, [0, 0], basis, tf32, backend, tile)
    if pass_ == "input_grad":
        return lambda: fl.fft_conv2d_input_grad(gy, w, [0, 0], basis, tf32, backend, tile)
    return lambda: fl.fft_conv2d_weight_grad(gy, x, [0, 0], basis, tf32, backend, tile)


def measure(fn, timer: GpuTimer, ref: torch.Tensor, fl: float) -> dict:
    try:
        with torch.no_grad():
            out, peak = peak_extra_bytes(fn)
            err = rel_err(out, ref)
            out_bytes = out.numel() * out.element_size()
            del out
            t = timer(fn)
        t.update(peak_extra_bytes=int(peak), output_bytes=int(out_bytes), rel_err=err,
                 tflops=fl / (t["ms"] * 1e-3) / 1e12)
        return t
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return failure(e)


def tuner_decision(problem, pass_):
    key = problem.key(pass_)
    for r in tuner.decisions():
        if r["key"] == key:
            return {k: r[k] for k in ("choice", "source", "reason", "times_ms", "errors", "skipped")}
    return None


def bench_layers(args, res: Results, timer: GpuTimer, stats: dict):
    rows = res.doc.setdefault("layers", [])
    for name, C, K, n, k in LAYERS:
        if args.layers and name not in args.layers:
            continue
        t_layer = time.perf_counter()
        oh = ow = n - k + 1
        fl = flops(C, K, k, k, oh, ow)
        gen = torch.Generator(device="cuda").manual_seed(1234)
        x = torch.randn(S, C, n, n, device="cuda", generator=gen)
        w = torch.randn(K, C, k, k, device="cuda", generator=gen)
        gy = torch.randn(S, K, oh, ow, device="cuda", generator=gen)
        refs = {}
        try:
            with torch.no_grad():
                x64, w64, gy64 = x.double(), w.double(), gy.double()
                for _, pass_ in PASSES:
                    refs[pass_] = native_fn(pass_, x64, w64, gy64)()
                del x64, w64, gy64
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            log("  %s: float64 reference failed (%s); skipping the layer" % (name, e))
            rows.append({"layer": name, **failure(e)})
            stats["errors"] += 1
            continue
        torch.cuda.empty_cache()
        for mode in MODES:
            if args.modes and mode not in args.modes:
                continue
            tf32 = set_precision(mode)
            problem = tuner.ConvProblem.from_tensors(x, w, (0, 0), tf32)
            for pname, pass_ in PASSES:
                row = {"layer": name, "C": C, "K": K, "n": n, "k": k, "S": S, "pass": pname,
                       "op_pass": pass_, "mode": mode, "tf32": tf32, "flop": fl}
                ref = refs[pass_]
                row["cudnn"] = measure(native_fn(pass_, x, w, gy), timer, ref, fl)
                labels = [lb for lb in tuner.candidates_conv2d(problem, pass_) if lb != "native"]
                cands = {}
                for label in labels:  # cuFFT, fbfft and tiled candidates, as the tuner has them
                    basis, backend, tile = tuner.fft_args(label)
                    cands[label] = measure(fft_fn(pass_, x, w, gy, label, tf32), timer, ref, fl)
                    cands[label].update(basis=list(basis), backend=backend, tile=list(tile))
                row["fft_candidates"] = cands
                # as the tuner: a candidate counts only within its error tolerance
                tol = None
                if "rel_err" in row["cudnn"]:
                    tol = max(2 * row["cudnn"]["rel_err"], tuner.error_floor(torch.float32, tf32))
                row["tolerance"] = tol
                for c in cands.values():
                    if "ms" in c:
                        c["within_tolerance"] = tol is None or c["rel_err"] <= tol
                measured = {lb: c for lb, c in cands.items() if "ms" in c}
                ok = {lb: c for lb, c in measured.items() if c["within_tolerance"]}
                fastest_any = min(measured, key=lambda lb: measured[lb]["ms"]) if measured else None
                if fastest_any and fastest_any not in ok:
                    row["ratio_ignoring_tolerance"] = (row["cudnn"].get("ms") or 0) / measured[fastest_any]["ms"]
                    log("      note: fastest candidate %s is outside the error tolerance (%.1e > %.1e)"
                        % (fastest_any, measured[fastest_any]["rel_err"], tol))
                for c in list(cands.values()) + [row["cudnn"]]:
                    if "failed" in c:
                        count_failure(stats, c)
                best = min(ok, key=lambda lb: ok[lb]["ms"]) if ok else None
                row["fft_best"] = best
                row["fft"] = ok.get(best) if best else None
                cud = row["cudnn"].get("ms")
                row["ratio"] = cud / ok[best]["ms"] if (best and cud) else None
                # the tuner's own decision (it measures again, on its own tensors)
                try:
                    choice = tuner.choose_conv2d(problem, pass_)
                    row["tuner_choice"] = choice
                    row["tuner_decision"] = tuner_decision(problem, pass_)
                    chosen_ms = cud if choice == "native" else ok.get(choice, {}).get("ms")
                    row["tuned_ratio"] = cud / chosen_ms if (cud and chosen_ms) else None
                except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                    torch.cuda.empty_cache()
                    row["tuner_choice"] = None
                    row["tuner_decision"] = failure(e)
                    row["tuned_ratio"] = None
                    stats["errors"] += 1
                anchor = ANCHORS_H200_MS[name][mode][[p for p, _ in PASSES].index(pname)]
                row["anchor_h200_cudnn_ms"] = anchor
                rows.append(row)
                fr = row["fft"]
                log("  %-3s %-7s %-4s cuDNN %s ms (%s TF/s, err %s, +%s MiB) | fft %s %s ms "
                    "(%s TF/s, err %s, +%s MiB) | x%s | tuner %s"
                    % (name, pname, mode, fmt(cud, ".3f"), fmt(row["cudnn"].get("tflops"), ".0f"),
                       fmt(row["cudnn"].get("rel_err"), ".1e"),
                       fmt(row["cudnn"].get("peak_extra_bytes", 0) / 2**20, ".0f")
                       if "ms" in row["cudnn"] else row["cudnn"].get("failed"),
                       best or "-", fmt(fr and fr["ms"], ".3f"), fmt(fr and fr["tflops"], ".0f"),
                       fmt(fr and fr["rel_err"], ".1e"),
                       fmt(fr and fr["peak_extra_bytes"] / 2**20, ".0f"),
                       fmt(row["ratio"], ".2f"), row["tuner_choice"]))
                for label, c in cands.items():
                    if "failed" in c:
                        log("      %s failed: %s" % (label, c["failed"]))
                res.save()
        del x, w, gy, refs
        torch.cuda.empty_cache()
        log("  (%s took %.1f s)" % (name, time.perf_counter() - t_layer))
    summ = {}
    for mode in MODES:
        rs = [r for r in rows if r.get("mode") == mode]
        summ[mode] = {
            "geomean_ratio_fft_best": geomean([r.get("ratio") for r in rs]),
            "geomean_ratio_tuned": geomean([r.get("tuned_ratio") for r in rs]),
            "n": len(rs),
            "n_ratio": sum(1 for r in rs if r.get("ratio")),
            "target": TARGET_GEOMEAN[mode],
        }
    res.doc["layers_summary"] = summ
    res.save()


# ---------------------------------------------------------------------------------------------
# b. Conv2d through the tuner


def host_us_per_call(fn, calls: int, reps: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def make_pair(C, K, k, padding=0):
    torch.manual_seed(0)
    ref = nn.Conv2d(C, K, k, padding=padding).cuda()
    ours = fastlayers.Conv2d(C, K, k, padding=padding).cuda()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def module_choices(m, x):
    tf32 = fastlayers.ops.conv_tf32_allowed() and x.dtype == torch.float32
    p = tuner.ConvProblem.from_tensors(x, m.weight, tuple(int(v) for v in m.padding), tf32)
    out = {}
    for _, pass_ in PASSES:
        d = tuner.decisions()
        key = p.key(pass_)
        hit = [r for r in d if r["key"] == key]
        out[pass_] = hit[0]["choice"] if hit else None
    return out


def bench_modules(args, res: Results, timer: GpuTimer, stats: dict):
    rows = res.doc.setdefault("modules", [])
    loop_calls = 10 if args.quick else 20
    for name, C, K, n, k in LAYERS:
        if args.layers and name not in args.layers:
            continue
        for mode in MODES:
            if args.modes and mode not in args.modes:
                continue
            set_precision(mode)
            row = {"layer": name, "mode": mode, "S": S, "C": C, "K": K, "n": n, "k": k}
            try:
                ref_m, fl_m = make_pair(C, K, k)
                gen = torch.Generator(device="cuda").manual_seed(7)
                x = torch.randn(S, C, n, n, device="cuda", generator=gen)
                gy = torch.randn(S, K, n - k + 1, n - k + 1, device="cuda", generator=gen)
                with torch.no_grad():
                    y_ref, y_fl = ref_m(x), fl_m(x)  # first call tunes the forward pass
                    row["forward_rel_diff"] = rel_err(y_fl, y_ref.double())
                    del y_ref, y_fl
                    row["fwd_nn"] = timer(lambda: ref_m(x))
                    row["fwd_fl"] = timer(lambda: fl_m(x))
                    # wall clock per call, calls back to back (host and device overlapped)
                    row["fwd_nn_loop_ms"] = host_us_per_call(lambda: ref_m(x), loop_calls, 3) / 1e3
                    row["fwd_fl_loop_ms"] = host_us_per_call(lambda: fl_m(x), loop_calls, 3) / 1e3
                xg = x.clone().requires_grad_()

                def step(m):
                    y = m(xg)
                    torch.autograd.grad(y, (xg, m.weight, m.bias), gy)

                step(fl_m)  # tunes all three passes
                row["fwdbwd_nn"] = timer(lambda: step(ref_m))
                row["fwdbwd_fl"] = timer(lambda: step(fl_m))
                row["fwdbwd_nn_loop_ms"] = host_us_per_call(lambda: step(ref_m), loop_calls, 3) / 1e3
                row["fwdbwd_fl_loop_ms"] = host_us_per_call(lambda: step(fl_m), loop_calls, 3) / 1e3
                row["fwdbwd_loop_ratio"] = row["fwdbwd_nn_loop_ms"] / row["fwdbwd_fl_loop_ms"]
                row["choices"] = module_choices(fl_m, x)
                row["fwd_ratio"] = row["fwd_nn"]["ms"] / row["fwd_fl"]["ms"]
                row["fwdbwd_ratio"] = row["fwdbwd_nn"]["ms"] / row["fwdbwd_fl"]["ms"]
                log("  %-3s %-4s forward nn %.3f ms, fastlayers %.3f ms (x%.2f) | fwd+bwd nn %.3f ms, "
                    "fastlayers %.3f ms (x%.2f; back to back x%.2f) | %s"
                    % (name, mode, row["fwd_nn"]["ms"], row["fwd_fl"]["ms"], row["fwd_ratio"],
                       row["fwdbwd_nn"]["ms"], row["fwdbwd_fl"]["ms"], row["fwdbwd_ratio"],
                       row["fwdbwd_loop_ratio"], "/".join(str(v) for v in row["choices"].values())))
                del x, gy, xg, ref_m, fl_m
            except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                record_failure(row, e, stats)
                log("  %-3s %-4s failed: %s" % (name, mode, row["failed"]))
            torch.cuda.empty_cache()
            rows.append(row)
            res.save()
    gm = {}
    for mode in MODES:
        rs = [r for r in rows if r.get("mode") == mode]
        gm[mode] = {"geomean_fwd_ratio": geomean([r.get("fwd_ratio") for r in rs]),
                    "geomean_fwdbwd_ratio": geomean([r.get("fwdbwd_ratio") for r in rs]),
                    "min_fwd_ratio": min([r["fwd_ratio"] for r in rs if r.get("fwd_ratio")], default=None),
                    "min_fwdbwd_ratio": min([r["fwdbwd_ratio"] for r in rs if r.get("fwdbwd_ratio")],
                                            default=None)}
    res.doc["modules_summary"] = gm
    res.save()


def bench_overhead(args, res: Results, stats: dict):
    """Host cost of fastlayers.Conv2d.forward on a warm tuner cache: module forward minus the
    chosen op called directly, both timed as back-to-back calls (wall clock per call)."""
    rows = res.doc.setdefault("overhead", [])
    calls, reps = (100, 5) if args.quick else (300, 7)
    shapes = [("small", 1, 8, 8, 16, 3), ("L4", S, 128, 128, 16, 7)]
    set_precision("fp32")
    for label, bs, C, K, n, k in shapes:
        row = {"shape": label, "S": bs, "C": C, "K": K, "n": n, "k": k, "mode": "fp32"}
        try:
            ref_m, fl_m = make_pair(C, K, k)
            x = torch.randn(bs, C, n, n, device="cuda")
            w, b = fl_m.weight, fl_m.bias
            with torch.no_grad():
                fl_m(x)  # tunes (or hits the cache)
            choice = module_choices(fl_m, x)["forward"]
            row["choice_forward"] = choice
            if choice in (None, "native"):
                def direct():
                    return F.conv2d(x, w, b)
            else:
                basis, backend, tile = tuner.fft_args(choice)

                def direct():
                    return torch.ops.fastlayers.fft_conv2d(x, w, b, [0, 0], list(basis), False,
                                                           backend, list(tile))
            with torch.no_grad():
                row["us_module_nograd"] = host_us_per_call(lambda: fl_m(x), calls, reps)
                row["us_direct_nograd"] = host_us_per_call(direct, calls, reps)
                row["us_nn_module_nograd"] = host_us_per_call(lambda: ref_m(x), calls, reps)
                row["us_F_conv2d_nograd"] = host_us_per_call(lambda: F.conv2d(x, w, b), calls, reps)
            # with autograd recording (parameters require grad): the forward of a training step
            fl_m(x)  # plans with need_backward=True (tunes the backward passes on first sight)
            row["us_module_grad"] = host_us_per_call(lambda: fl_m(x), calls, reps)
            row["us_direct_grad"] = host_us_per_call(direct, calls, reps)
            row["us_nn_module_grad"] = host_us_per_call(lambda: ref_m(x), calls, reps)
            row["overhead_us_nograd"] = row["us_module_nograd"] - row["us_direct_nograd"]
            row["overhead_us_grad"] = row["us_module_grad"] - row["us_direct_grad"]
            row["nn_overhead_us_nograd"] = row["us_nn_module_nograd"] - row["us_F_conv2d_nograd"]
            log("  %-5s forward=%s: module %.1f us/call, direct op %.1f us -> overhead %.1f us (no_grad); "
                "%.1f us with autograd | nn.Conv2d %.1f us vs F.conv2d %.1f us"
                % (label, choice, row["us_module_nograd"], row["us_direct_nograd"],
                   row["overhead_us_nograd"], row["overhead_us_grad"], row["us_nn_module_nograd"],
                   row["us_F_conv2d_nograd"]))
            del ref_m, fl_m, x
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            record_failure(row, e, stats)
            log("  %s failed: %s" % (label, row["failed"]))
        torch.cuda.empty_cache()
        rows.append(row)
        res.save()


# ---------------------------------------------------------------------------------------------
# c. whole networks


def vgg_ish():
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, "M"]
    layers, c = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
            c = v
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * 4 * 4, 256), nn.ReLU(inplace=True),
                         nn.Linear(256, 10)), (64, 3, 64, 64)


def alexnet_ish():
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Linear(256 * 6 * 6, 1024), nn.ReLU(inplace=True), nn.Linear(1024, 10),
    ), (64, 3, 224, 224)


def network_choices(model):
    """forward/input_grad/weight_grad labels per fastlayers.Conv2d (from the module's plan cache, a
    private detail: best effort)."""
    out = []
    for m in model.modules():
        if isinstance(m, fastlayers.Conv2d):
            try:
                plans = m.__dict__.get("_fl_plans") or {}
                # the training-step plan (need_backward=True) is the one timed
                train = [v for kk, v in plans.items() if kk[5]]
                out.append("/".join(train[-1]) if train else "native (unsupported)")
            except Exception:  # noqa: BLE001
                out.append("?")
    return out


def bench_networks(args, res: Results, stats: dict):
    rows = res.doc.setdefault("networks", [])
    timer = GpuTimer(warmup=3, trials=10, flush=False, max_s=3.0)
    for net_name, make in (("vgg-ish", vgg_ish), ("alexnet-ish", alexnet_ish)):
        for mode in MODES:
            if args.modes and mode not in args.modes:
                continue
            set_precision(mode)
            row = {"net": net_name, "mode": mode}
            try:
                torch.manual_seed(0)
                base, shape = make()
                base = base.cuda()
                ours = fastlayers.convert(copy.deepcopy(base))
                row["input"] = list(shape)
                x = torch.randn(*shape, device="cuda")
                target = torch.randint(0, 10, (shape[0],), device="cuda")
                with torch.no_grad():
                    row["logits_rel_diff"] = rel_err(ours(x), base(x).double())

                def make_step(model):
                    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

                    def step():
                        opt.zero_grad(set_to_none=True)
                        F.cross_entropy(model(x), target).backward()
                        opt.step()
                    return step

                t0 = time.perf_counter()
                step_ours = make_step(ours)
                step_ours()  # tunes every layer and pass
                torch.cuda.synchronize()
                row["first_step_s_fastlayers"] = time.perf_counter() - t0
                row["step_nn"] = timer(make_step(base))
                row["step_fl"] = timer(step_ours)
                row["ratio"] = row["step_nn"]["ms"] / row["step_fl"]["ms"]
                row["choices"] = choices = network_choices(ours)
                log("  %-11s %-4s train step nn %.2f ms, fastlayers %.2f ms (x%.2f); first step %.1f s; %s"
                    % (net_name, mode, row["step_nn"]["ms"], row["step_fl"]["ms"], row["ratio"],
                       row["first_step_s_fastlayers"], ", ".join(choices)))
                del base, ours, x, target
            except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                record_failure(row, e, stats)
                log("  %s %s failed: %s" % (net_name, mode, row["failed"]))
            torch.cuda.empty_cache()
            rows.append(row)
            res.save()


# ---------------------------------------------------------------------------------------------
# Output


def _log_ratio_axis(ax):
    """Log y axis with plain tick labels at powers of two, always showing 1.0 and every bar."""
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullLocator
    ys = [p.get_height() for p in ax.patches if p.get_height() > 0]
    lo = min([0.5] + [y / 1.3 for y in ys])
    hi = max([2.0] + [y * 1.3 for y in ys])
    ax.set_ylim(lo, hi)
    ticks = [2.0 ** e for e in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.grid(axis="y", alpha=0.3)


def plot(res: Results, path: Path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        log("(no plot: %s)" % e)
        return None
    rows = res.doc.get("layers", [])
    mods = res.doc.get("modules", [])
    groups = [(n, p) for n, *_ in LAYERS for p, _ in PASSES
              if any(r.get("layer") == n and r.get("pass") == p for r in rows)]
    if not groups:
        return None
    fig, axes = plt.subplots(1, 2 if mods else 1, figsize=(15 if mods else 10, 4.8),
                             gridspec_kw={"width_ratios": [3, 1]} if mods else None, squeeze=False)
    ax = axes[0][0]
    width = 0.38
    colors = {"fp32": "#1f77b4", "tf32": "#ff7f0e"}
    for i, mode in enumerate(MODES):
        xs, ys = [], []
        for g, (n, p) in enumerate(groups):
            r = next((r for r in rows if r.get("layer") == n and r.get("pass") == p
                      and r.get("mode") == mode), None)
            if r and r.get("ratio"):
                xs.append(g + (i - 0.5) * width)
                ys.append(r["ratio"])
        gm = res.doc.get("layers_summary", {}).get(mode, {}).get("geomean_ratio_fft_best")
        ax.bar(xs, ys, width, color=colors[mode],
               label="%s (geomean %s)" % (mode, fmt(gm, ".2f") + "x" if gm else "-"))
        for xv, yv in zip(xs, ys):
            ax.text(xv, yv, "%.2g" % yv, ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(["%s\n%s" % g for g in groups], fontsize=7)
    ax.set_ylabel("speedup vs cuDNN (cuDNN time / FFT time)")
    ax.set_title("FFT convolution vs cuDNN, fbfft Table 4 layers (S=128)\n%s"
                 % res.doc.get("device", {}).get("name", ""), fontsize=9)
    ax.legend(fontsize=8)
    if mods:
        ax2 = axes[0][1]
        names = [n for n, *_ in LAYERS if any(r.get("layer") == n for r in mods)]
        k = 0
        for mode in MODES:
            for what, hatch in (("fwd_ratio", ""), ("fwdbwd_ratio", "//")):
                xs, ys = [], []
                for g, n in enumerate(names):
                    r = next((r for r in mods if r.get("layer") == n and r.get("mode") == mode), None)
                    if r and r.get(what):
                        xs.append(g + (k - 1.5) * 0.2)
                        ys.append(r[what])
                ax2.bar(xs, ys, 0.2, color=colors[mode], hatch=hatch,
                        label="%s %s" % (mode, "fwd" if what == "fwd_ratio" else "fwd+bwd"))
                k += 1
        ax2.axhline(1.0, color="black", linewidth=1)
        ax2.set_yscale("log")
        ax2.set_xticks(range(len(names)))
        ax2.set_xticklabels(names, fontsize=8)
        ax2.set_title("fastlayers.Conv2d (tuned) vs nn.Conv2d", fontsize=9)
        ax2.legend(fontsize=7)
    for row in axes:
        for a in row:
            _log_ratio_axis(a)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".png.tmp")
    fig.savefig(tmp, dpi=130, format="png")
    plt.close(fig)
    os.replace(tmp, path)
    return str(path)


def markdown(res: Results) -> str:
    d = res.doc
    out = []
    dev = d.get("device", {}).get("name", "?")
    v = d.get("versions", {})
    out.append("FFT convolution vs cuDNN, fbfft Table 4 layers (S = 128, valid): ms (effective "
               "TFLOP/s); x = cuDNN time / FFT time. %s, torch %s, CUDA %s, cuDNN %s, cuFFT %s. "
               "L2 flushed, median of %s trials."
               % (dev, v.get("torch"), v.get("cuda"), v.get("cudnn"), v.get("cufft"),
                  d.get("config", {}).get("trials")))
    out.append("")
    out.append("| layer | pass | fp32 cuDNN | fp32 FFT [best candidate] | fp32 x | tf32 cuDNN "
               "| tf32 FFT [best candidate] | tf32 x | tuner fp32 / tf32 |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    rows = d.get("layers", [])

    def cell(m):
        if not m or "ms" not in m:
            return "failed" if m and "failed" in m else "-"
        return "%.3f (%.0f)" % (m["ms"], m["tflops"])

    for name, C, K, n, k in LAYERS:
        for pname, _ in PASSES:
            rr = {r["mode"]: r for r in rows if r.get("layer") == name and r.get("pass") == pname}
            if not rr:
                continue
            cells = []
            for mode in MODES:
                r = rr.get(mode)
                if r is None:
                    cells += ["-", "-", "-"]
                    continue
                best = r.get("fft_best") or ""  # e.g. fbfft:16x16,tile=14x14
                cells += [cell(r["cudnn"]), cell(r.get("fft")) + (" [%s]" % best if best else ""),
                          fmt(r.get("ratio"), ".2f")]
            tun = " / ".join(str(rr[m].get("tuner_choice")) if m in rr else "-" for m in MODES)
            out.append("| %s | %s | %s | %s |" % (
                "%s %d→%d, %d, %d" % (name, C, K, n, k) if pname == "fprop" else "", pname,
                " | ".join(cells), tun))
    summ = d.get("layers_summary", {})
    out.append("| **geomean** | | | | **%s** | | | **%s** | tuned: %s / %s |" % (
        fmt(summ.get("fp32", {}).get("geomean_ratio_fft_best"), ".2f"),
        fmt(summ.get("tf32", {}).get("geomean_ratio_fft_best"), ".2f"),
        fmt(summ.get("fp32", {}).get("geomean_ratio_tuned"), ".2f"),
        fmt(summ.get("tf32", {}).get("geomean_ratio_tuned"), ".2f")))
    out.append("")
    out.append("Targets: geomean >= %.1fx (fp32), >= %.1fx (tf32)." % (TARGET_GEOMEAN["fp32"],
                                                                      TARGET_GEOMEAN["tf32"]))
    mods = d.get("modules", [])
    if mods:
        out.append("")
        out.append("fastlayers.Conv2d (tuned) vs nn.Conv2d, same layers (ms; x = nn / fastlayers; "
                   "choices = forward/input_grad/weight_grad):")
        out.append("")
        out.append("| layer | mode | fwd nn | fwd fastlayers | x | fwd+bwd nn | fwd+bwd fastlayers | x "
                   "| x back to back | choices |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in mods:
            if "failed" in r:
                out.append("| %s | %s | failed: %s ||||||||" % (r["layer"], r["mode"], r["failed"][:60]))
                continue
            out.append("| %s | %s | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f | %.2f | %s |" % (
                r["layer"], r["mode"], r["fwd_nn"]["ms"], r["fwd_fl"]["ms"], r["fwd_ratio"],
                r["fwdbwd_nn"]["ms"], r["fwdbwd_fl"]["ms"], r["fwdbwd_ratio"], r["fwdbwd_loop_ratio"],
                " / ".join(str(c) for c in r["choices"].values())))
        out.append("")
        out.append("(x back to back: forward+backward wall clock per call over calls issued back to "
                   "back, host cost included; the other columns are device time per call.)")
    ov = d.get("overhead", [])
    if ov:
        out.append("")
        for r in ov:
            if "failed" in r:
                out.append("- module overhead, %s: failed (%s)" % (r["shape"], r["failed"]))
                continue
            out.append("- module overhead, %s (S=%d, %d→%d, %dx%d, k=%d; forward=%s): %+.1f us/call "
                       "without grad, %+.1f us/call with autograd (nn.Conv2d over F.conv2d: %+.1f us)"
                       % (r["shape"], r["S"], r["C"], r["K"], r["n"], r["n"], r["k"], r["choice_forward"],
                          r["overhead_us_nograd"], r["overhead_us_grad"], r["nn_overhead_us_nograd"]))
    nets = d.get("networks", [])
    if nets:
        out.append("")
        out.append("| network (input) | mode | train step nn ms | fastlayers ms | x |")
        out.append("|---|---|---|---|---|")
        for r in nets:
            if "failed" in r:
                out.append("| %s | %s | failed: %s | | |" % (r["net"], r["mode"], r["failed"][:60]))
                continue
            out.append("| %s (%s) | %s | %.2f | %.2f | %.2f |" % (
                r["net"], "x".join(str(s) for s in r["input"]), r["mode"], r["step_nn"]["ms"],
                r["step_fl"]["ms"], r["ratio"]))
    return "\n".join(out)


def print_anchors():
    log("Anchors (BENCHMARKS.md; cuDNN ms on an NVIDIA H200, PyTorch 2.11.0+cu130, cuDNN 9.19):")
    for name, mm in ANCHORS_H200_MS.items():
        log("  %s  fp32 fprop/bprop/accGrad %s   tf32 %s" % (
            name, "/".join("%.2f" % t for t in mm["fp32"]), "/".join("%.2f" % t for t in mm["tf32"])))


# ---------------------------------------------------------------------------------------------
# Without CUDA


def cpu_main(args, out_dir: Path) -> int:
    log("no CUDA device: running a small CPU comparison instead")
    shapes = [("small-k7", 4, 16, 16, 32, 7), ("L1-like", 2, 3, 16, 64, 11), ("k3", 8, 32, 32, 16, 3)]
    trials = 3 if args.quick else 7
    doc = {
        "kind": "cpu-fallback",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"name": platform.processor() or platform.machine(), "type": "cpu",
                   "threads": torch.get_num_threads()},
        "versions": versions(),
        "git": git_info(),
        "config": {"trials": trials, "quick": bool(args.quick)},
        "cpu": [],
    }
    res = Results(out_dir / "conv-cpu.json", doc)
    for name, bs, C, K, n, k in shapes:
        torch.manual_seed(0)
        x = torch.randn(bs, C, n, n)
        w = torch.randn(K, C, k, k)
        oh = n - k + 1
        basis = fastlayers.ops.default_basis((n, n), 0)
        row = {"shape": name, "S": bs, "C": C, "K": K, "n": n, "k": k, "basis": list(basis),
               "flop": flops(C, K, k, k, oh, oh, bs)}
        with torch.no_grad():
            ref = F.conv2d(x.double(), w.double())
            for label, fn in (("torch", lambda: F.conv2d(x, w)),
                              ("fft", lambda: torch.ops.fastlayers.fft_conv2d(
                                  x, w, None, [0, 0], list(basis), False))):
                try:
                    out = fn()
                    err = rel_err(out, ref)
                    ts = []
                    for _ in range(trials):
                        t0 = time.perf_counter()
                        fn()
                        ts.append((time.perf_counter() - t0) * 1e3)
                    row[label] = {"ms": statistics.median(ts), "rel_err": err, "trials": trials}
                except RuntimeError as e:
                    row[label] = failure(e)
        if "ms" in row["torch"] and "ms" in row["fft"]:
            row["ratio"] = row["torch"]["ms"] / row["fft"]["ms"]
        doc["cpu"].append(row)
        res.save()
    log("")
    log("| shape | S, f→f', n, k | F.conv2d ms | fft_conv2d ms [basis] | x | fft rel err |")
    log("|---|---|---|---|---|---|")
    bad = 0
    for r in doc["cpu"]:
        t, f = r["torch"], r["fft"]
        if "ms" not in t or "ms" not in f:
            bad += 1
            log("| %s | | %s | %s | | |" % (r["shape"], t.get("failed", "ok"), f.get("failed", "ok")))
            continue
        log("| %s | %d, %d→%d, %d, %d | %.3f | %.3f [%dx%d] | %.2f | %.1e |" % (
            r["shape"], r["S"], r["C"], r["K"], r["n"], r["k"], t["ms"], f["ms"], r["basis"][0],
            r["basis"][1], r["ratio"], f["rel_err"]))
    log("")
    log("wrote %s" % res.path)
    return 3 if bad else 0


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                    help="folder for the JSON and the PNG (default: benchmarks/results)")
    ap.add_argument("--quick", action="store_true", help="fewer trials, no whole-network section")
    ap.add_argument("--layers", default="", help="comma-separated subset of L1..L5")
    ap.add_argument("--modes", default="", help="comma-separated subset of fp32,tf32")
    ap.add_argument("--trials", type=int, default=None, help="timed trials per measurement")
    ap.add_argument("--no-networks", action="store_true", help="skip the whole-network section")
    ap.add_argument("--keep-tuner-cache", action="store_true",
                    help="use the user's tuner cache file instead of a fresh temporary one")
    args = ap.parse_args(argv)
    args.layers = [s.strip() for s in args.layers.split(",") if s.strip()]
    args.modes = [s.strip() for s in args.modes.split(",") if s.strip()]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        return cpu_main(args, out_dir)

    t_start = time.perf_counter()
    if not args.keep_tuner_cache:
        os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-bench-tuner-")
    tuner.clear(memory=True)
    tuner.set_mode("tune")
    tuner.set_workspace_limit(8 << 30)
    tuner.set_budget(1.0 if args.quick else 3.0)
    torch.backends.cudnn.benchmark = True
    warmup, trials = (2, 5) if args.quick else (3, 15)
    if args.trials:
        trials = args.trials

    props = torch.cuda.get_device_properties(0)
    dev_name = torch.cuda.get_device_name(0)
    doc = {
        "kind": "conv",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"name": dev_name, "capability": "%d.%d" % torch.cuda.get_device_capability(0),
                   "total_memory": props.total_memory, "sm_count": props.multi_processor_count,
                   "l2_cache_bytes": getattr(props, "L2_cache_size", None)},
        "versions": versions(),
        "git": git_info(),
        "config": {"S": S, "warmup": warmup, "trials": trials, "quick": bool(args.quick),
                   "l2_flush_bytes": FLUSH_BYTES, "cudnn_benchmark": True,
                   "tuner_budget_s": 1.0 if args.quick else 3.0, "tuner_workspace_limit": 8 << 30,
                   "layers": args.layers or [n for n, *_ in LAYERS], "modes": args.modes or list(MODES),
                   "memory_note": "peak_extra_bytes = max_memory_allocated during one call minus "
                                  "memory_allocated before it (output included; output_bytes beside it)",
                   "ratio_note": "ratio = cuDNN ms / fastest FFT candidate ms (cuFFT, fbfft, tiled; "
                                 "within the error tolerance); tuned_ratio = cuDNN ms / "
                                 "ms of the tuner's choice (1.0 when it chose native)"},
        "anchors_h200_cudnn_ms": {n: {m: dict(zip([p for p, _ in PASSES], v)) for m, v in mm.items()}
                                  for n, mm in ANCHORS_H200_MS.items()},
        "sections": {},
    }
    res = Results(out_dir / ("conv-%s.json" % slug(dev_name)), doc)
    res.save()
    v = doc["versions"]
    log("device: %s (sm %s, %d SMs, %.0f GiB)" % (dev_name, doc["device"]["capability"],
                                                  props.multi_processor_count, props.total_memory / 2**30))
    log("torch %s, CUDA %s, cuDNN %s, cuFFT %s, fastlayers %s (git %s%s)" % (
        v["torch"], v["cuda"], v["cudnn"], v["cufft"], v["fastlayers"], doc["git"]["commit"],
        " dirty" if doc["git"]["dirty"] else ""))
    print_anchors()

    stats = {"errors": 0, "oom": 0}
    crashed = []
    timer = GpuTimer(warmup, trials, flush=True)

    def section(name, fn, *a):
        t0 = time.perf_counter()
        log("")
        log("== %s ==" % name)
        try:
            fn(*a)
            doc["sections"][name] = {"ok": True, "s": time.perf_counter() - t0}
        except Exception as e:  # noqa: BLE001 - record, go on with the next section
            traceback.print_exc()
            crashed.append(name)
            doc["sections"][name] = {"ok": False, "s": time.perf_counter() - t0,
                                     "error": "%s: %s" % (type(e).__name__, e)}
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        res.save()

    section("a. Table 4 layers, ops vs cuDNN", bench_layers, args, res, timer, stats)
    section("b. Conv2d through the tuner vs nn.Conv2d", bench_modules, args, res, timer, stats)
    section("b. module overhead", bench_overhead, args, res, stats)
    elapsed = time.perf_counter() - t_start
    if args.quick or args.no_networks:
        log("\n(whole-network section skipped: %s)" % ("--quick" if args.quick else "--no-networks"))
    elif elapsed > 170:
        log("\n(whole-network section skipped: %.0f s spent already)" % elapsed)
        doc["sections"]["c. networks"] = {"ok": True, "skipped": "time (%.0f s spent)" % elapsed}
    else:
        section("c. networks", bench_networks, args, res, stats)

    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default again
    doc["tuner_report"] = tuner.report()
    doc["stats"] = stats
    doc["elapsed_s"] = time.perf_counter() - t_start
    doc["plot"] = None
    try:
        doc["plot"] = plot(res, out_dir / ("conv-%s.png" % slug(dev_name)))
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        crashed.append("plot")
    res.save()

    log("")
    log(markdown(res))
    log("")
    log("wrote %s%s  (%.0f s; %d failed measurements, %d out of memory%s)" % (
        res.path, (" and " + doc["plot"]) if doc["plot"] else "", doc["elapsed_s"], stats["errors"],
        stats["oom"], ("; crashed: " + ", ".join(crashed)) if crashed else ""))
    if crashed:
        return 1
    return 3 if stats["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
