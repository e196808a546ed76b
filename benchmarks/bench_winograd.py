#!/usr/bin/env python3
"""Winograd convolution against cuDNN on the VGG-E (VGG-19) 3x3 layers, pass by pass, and the
accuracy table of Lavin & Gray ("Fast Algorithms for Convolutional Neural Networks", 2015).

    python3 benchmarks/bench_winograd.py [--out DIR] [--quick] [--layers conv1_2,conv5]
        [--batches 1,8,64] [--modes fp32,tf32,fp16,bf16] [--passes fprop,bprop,accGrad]
        [--labels winograd:2,winograd:2,fused] [--sections accuracy,speed] [--trials N]

Sections (CUDA), in this order:
  accuracy  Lavin & Gray's Table 4: the max element error against a float64 direct convolution
            of the same (rounded) operands, data, filters and output gradients uniform in
            [-1, 1], N = 1, every VGG-E layer and pass; cuDNN and every tile the pass takes
            (forward and input gradient F(2x2,3x3), F(4x4,3x3), F(6x6,3x3); weight gradient
            F(3x3,2x2), F(3x3,4x4)) in fp32 (TF32 off), tf32, fp16 and bf16, the normwise
            relative error beside it. Short, and it calls every kernel once.
  speed     each distinct VGG-E 3x3 layer (pad 1) once, with its count in the network (Lavin &
            Gray's Table 1), at N = 1, 2, 4, 8, 16, 32, 64 (--quick: 1, 8, 64), passes fprop
            (forward), bprop (input gradient) and accGrad (weight gradient), the four modes:
            cuDNN (cudnn.benchmark on) and every Winograd candidate the tuner would consider
            (fastlayers.algorithms.candidates), each called through
            fastlayers.algorithms.conv2d_call and checked against float64 on the first two
            samples first. A candidate whose error exceeds max(2 x cuDNN's error, the tuner's
            floor) is recorded as failed, not timed. Each other candidate is timed interleaved
            with cuDNN (CUDA events, L2 flushed before every trial): ratio = cuDNN time /
            Winograd time, the median of per-round ratios (a candidate whose one call takes over
            20x cuDNN's time is timed by that call alone: "single_call"); effective TFLOP/s =
            direct-convolution FLOPs 2 N C K 9 oh ow / time. Network totals per mode, N and
            pass: every layer's time weighted by its count (Lavin & Gray's Tables 5 and 6), with
            the fastest Winograd candidate of each layer ("winograd") and with the faster of it
            and cuDNN ("tuned"). Loops run N outermost, so a run cut short still has
            whole-network totals for the smaller batches.

Writes DIR/winograd-<device>.json (after every configuration) and prints markdown tables
(benchmarks/make_docs.py renders the same). Without CUDA: one small layer at N = 1 in fp32 on
CPU tensors through the same code (wall-clock timer), DIR/winograd-cpu.json.
A kernel fault (an illegal address, say) leaves the CUDA context unusable: the run records it and
stops with what it measured. Exit status: 0 everything ran (out-of-memory configurations are
recorded and tolerated; the larger tiles outside tolerance, F(6x6,3x3) in every dtype on most
layers and F(4x4,3x3) in most fp32 input gradients, are recorded and counted apart, not timed), 3
a measurement failed (an error, or a tile-2 candidate outside tolerance: a broken kernel), 1 a
section crashed or a kernel fault ended the run.
"""
from __future__ import annotations

import math
import os
import re
import sys
import time

import common
from common import log

import torch  # noqa: E402  (after common: it puts the built source tree on sys.path)

import fastlayers  # noqa: E402
from fastlayers import algorithms, tuner  # noqa: E402
from fastlayers.winograd import FORWARD_TILES, WEIGHT_GRAD_TILES  # noqa: E402

# VGG network E (Lavin & Gray's Table 1): name, C, K, H = W, count of layers of that shape.
LAYERS = [("conv1_1", 3, 64, 224, 1), ("conv1_2", 64, 64, 224, 1), ("conv2_1", 64, 128, 112, 1),
          ("conv2_2", 128, 128, 112, 1), ("conv3_1", 128, 256, 56, 1),
          ("conv3_2", 256, 256, 56, 3), ("conv4_1", 256, 512, 28, 1),
          ("conv4_2", 512, 512, 28, 3), ("conv5", 512, 512, 14, 4)]
CPU_LAYERS = [("cpu-small", 16, 32, 20, 1)]
BATCHES = (1, 2, 4, 8, 16, 32, 64)
QUICK_BATCHES = (1, 8, 64)
PASSES = [("fprop", "forward"), ("bprop", "input_grad"), ("accGrad", "weight_grad")]
MODES = ("fp32", "tf32", "fp16", "bf16")
DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
         "bf16": torch.bfloat16}
PADDING = (1, 1)
NATIVE = algorithms.NATIVE
CHECK_SAMPLES = 2  # samples the correctness gate runs on, as the tuner's
ACCURACY_N = 1
SLOW = 20.0  # a candidate this many times slower than cuDNN in one call is not timed further
SECTIONS = ("accuracy", "speed")
# What a kernel fault leaves behind: every later CUDA call fails with the same error.
STICKY = ("illegal memory access", "unspecified launch failure", "misaligned address",
          "illegal instruction", "device-side assert", "launch timed out",
          "cublas_status_execution_failed", "uncorrectable ecc")


def target(mode: str, N: int):
    """The whole-network target (docs: Winograd, VGG-E): >= 2x cuDNN fp32 at N = 1..8, >= 1.5x
    above (stated at 64); >= 1.2x in tf32 and fp16; none stated for bf16."""
    if mode == "fp32":
        return 2.0 if N <= 8 else 1.5
    return 1.2 if mode in ("tf32", "fp16") else None


def flops(N, C, K, H):
    return 2.0 * N * C * K * 9 * H * H  # pad 1: oh = ow = H


def winograd_choices(plan, problem, pass_):
    """The plan's Winograd labels that serve `pass_` of `problem` (parsed, fits), whatever the
    tuner offers: this benchmark measures labels the tuner leaves out too (half precision on
    CUDA), to say why."""
    out = []
    for label in plan["labels"]:
        choice = algorithms.parse(label)
        if algorithms.fits(choice, problem, pass_) is None:
            out.append(choice)
    return out


def call(choice, pass_, tf32, x, w, gy):
    fn = algorithms.conv2d_call(choice, pass_, PADDING, tf32)
    return lambda: fn(x, w, None, gy)


def operands(C, K, H, N, device, seed):
    """x [N,C,H,H], w [K,C,3,3], gy [N,K,H,H], uniform in [-1, 1] (float32)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def u(*shape):
        return torch.rand(*shape, device=device, generator=gen).mul_(2).sub_(1)
    return u(N, C, H, H), u(K, C, 3, 3), u(N, K, H, H)


def reference(pass_, x, w, gy):
    """The float64 direct convolution of `pass_` on these operands (no cuDNN autotuning for a
    shape used once)."""
    bench = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        return call(NATIVE, pass_, False, x.double(), w.double(), gy.double())()
    finally:
        torch.backends.cudnn.benchmark = bench


def wall_ms(fn) -> float:
    """One call's wall time, the device drained before and after."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def sticky(e: BaseException) -> bool:
    return any(s in str(e).lower() for s in STICKY)


def attempt(entry: dict, stats: dict, fn) -> dict:
    """fn(entry) fills `entry`; an out-of-memory or runtime error is recorded there and counted,
    and the run goes on. A kernel fault is raised: nothing on the device can run after it."""
    try:
        fn(entry)
    except RuntimeError as e:
        entry.update(common.failure(e))
        if sticky(e):
            raise
        common.release()
        stats["oom" if entry["oom"] else "errors"] += 1
    return entry


def outside(tile: int) -> str:
    """What a candidate outside tolerance counts as: F(2x2,3x3) and F(3x3,2x2) stay within it in
    every dtype, so one outside is a broken kernel (an error); the larger tiles miss it on many
    layers (F(4x4,3x3) rounds 1.7-5.1 times cuDNN's error in fp32, F(6x6,3x3) 7-21 times) and are
    counted apart."""
    return "errors" if tile == 2 else "outside_tolerance"


def stop(res, e):
    res.doc["fatal"] = common.failure(e)["failed"]
    res.save()
    log("FATAL: %s\n  the CUDA context is lost; the run stops with what it measured"
        % res.doc["fatal"])


# ---------------------------------------------------------------------------------------------
# Accuracy (Lavin & Gray's Table 4)


@torch.no_grad()
def bench_accuracy(plan, res, timer, stats, device):
    rows = res.doc.setdefault("accuracy", [])
    try:
        for name, C, K, H, count in plan["layers"]:
            x32, w32, gy32 = operands(C, K, H, ACCURACY_N, device, 7)
            refs = {}  # (dtype, pass) -> float64 result of the rounded operands
            for mode in plan["modes"]:
                tf32 = common.set_precision(mode)
                dt = DTYPE[mode]
                x, w, gy = x32.to(dt), w32.to(dt), gy32.to(dt)
                for pname, pass_ in plan["passes"]:
                    row = {"layer": name, "C": C, "K": K, "H": H, "N": ACCURACY_N, "mode": mode,
                           "pass": pname, "op_pass": pass_, "algorithms": {}}
                    rows.append(row)
                    if (dt, pass_) not in refs:
                        refs[dt, pass_] = reference(pass_, x, w, gy)
                    ref = refs[dt, pass_]
                    row["max_abs_ref"] = ref.abs().max().item()
                    problem = tuner.ConvProblem.from_tensors(x, w, PADDING, tf32,
                                                             transforms=True)
                    labels = ["native"] + [c.label for c in
                                           winograd_choices(plan, problem, pass_)]
                    for label in labels:
                        def run(m, label=label):
                            out = call(label, pass_, tf32, x, w, gy)()
                            err = (out.double() - ref).abs().max().item()
                            m["max_err"] = err if math.isfinite(err) else math.inf
                            m["rel_err"] = common.rel_err(out, ref)
                        attempt(row["algorithms"].setdefault(label, {}), stats, run)
                    log("  %-8s %-7s %-4s max error %s" % (name, pname, mode, " | ".join(
                        "%s %s" % (lb, common.fmt(m.get("max_err"), ".1e", "failed"))
                        for lb, m in row["algorithms"].items())))
            del x32, w32, gy32, refs
            common.release()
            res.save()
    except RuntimeError as e:
        if not sticky(e):
            raise
        stop(res, e)


# ---------------------------------------------------------------------------------------------
# Speed


@torch.no_grad()
def bench_speed(plan, res, timer, stats, device):
    rows = res.doc.setdefault("speed", [])
    try:
        for N in plan["batches"]:
            for layer in plan["layers"]:
                t0 = time.perf_counter()
                speed_layer(plan, res, timer, stats, device, N, layer)
                res.doc["totals"] = totals(rows, plan)
                res.save()
                log("  (%s N=%d took %.1f s)" % (layer[0], N, time.perf_counter() - t0))
    except RuntimeError as e:
        if not sticky(e):
            raise
        if rows and "best" not in rows[-1] and "failed" not in rows[-1]:
            rows[-1]["failed"] = "cut short by a kernel fault"
        stop(res, e)
    res.doc["totals"] = totals(rows, plan)
    res.save()


def speed_layer(plan, res, timer, stats, device, N, layer):
    name, C, K, H, count = layer
    rows = res.doc["speed"]
    head = {"layer": name, "C": C, "K": K, "H": H, "count": count, "N": N}
    data = attempt({}, stats, lambda d: d.update(
        zip(("x", "w", "gy"), operands(C, K, H, N, device, 1000 + N))))
    if "failed" in data:
        rows.append({**head, "failed": data["failed"], "oom": data["oom"]})
        log("  %s N=%d: operands failed (%s)" % (name, N, data["failed"]))
        return
    refs = {}  # (dtype, pass) -> float64 result on the check samples
    for mode in plan["modes"]:
        tf32 = common.set_precision(mode)
        dt = DTYPE[mode]
        ops = attempt({}, stats, lambda d: d.update({k: v.to(dt) for k, v in data.items()}))
        if "failed" in ops:
            rows.append({**head, "mode": mode, "failed": ops["failed"], "oom": ops["oom"]})
            continue
        x, w, gy = ops["x"], ops["w"], ops["gy"]
        problem = tuner.ConvProblem.from_tensors(x, w, PADDING, tf32, transforms=True)
        for pname, pass_ in plan["passes"]:
            row = {**head, "pass": pname, "op_pass": pass_, "mode": mode, "tf32": tf32,
                   "flop": flops(N, C, K, H)}
            rows.append(row)
            speed_pass(row, plan, problem, pass_, tf32, x, w, gy, refs, timer, stats)
            res.save()
        del x, w, gy, ops
    del data, refs
    common.release()


def speed_pass(row, plan, problem, pass_, tf32, x, w, gy, refs, timer, stats):
    """cuDNN, then every Winograd candidate of `pass_`: checked on the first samples, timed
    interleaved with cuDNN."""
    n = min(x.shape[0], CHECK_SAMPLES)
    xc, gyc = x[:n], gy[:n]
    fl = row["flop"]
    key = (x.dtype, pass_)
    nat = row["cudnn"] = {}

    native = call(NATIVE, pass_, tf32, x, w, gy)

    def run_native(m):
        if key not in refs:
            refs[key] = reference(pass_, xc, w, gyc)
        m["rel_err"] = common.rel_err(call(NATIVE, pass_, tf32, xc, w, gyc)(), refs[key])
        native()  # cuDNN's autotuning of this shape, before the timer sizes its trials
        m.update(timer(native))
        m["tflops"] = fl / (m["ms"] * 1e-3) / 1e12
    attempt(nat, stats, run_native)
    floor = tuner.error_floor(x.dtype, tf32)
    row["tolerance"] = tol = common.tolerance(nat.get("rel_err", 0.0), 2.0, floor)
    cands = row["candidates"] = {}
    for choice in winograd_choices(plan, problem, pass_):
        m = cands[choice.label] = {"describe": algorithms.describe(choice)}

        def run(m, choice=choice):
            m["workspace_bytes"] = algorithms.workspace_bytes(choice, problem, pass_)
            if key not in refs:
                raise RuntimeError("no float64 reference (%s)" % nat.get("failed"))
            m["rel_err"] = common.rel_err(call(choice, pass_, tf32, xc, w, gyc)(), refs[key])
            if not common.gate(m, tol):
                stats[outside(choice.params.tile)] += 1
                return
            fn = call(choice, pass_, tf32, x, w, gy)
            fn()  # the first call at this size: allocations, cuBLAS's heuristics
            one = wall_ms(fn)
            if common.usable(nat) and one > max(SLOW * nat["ms"], 5.0):
                # far behind cuDNN: one call says so; interleaved rounds would take minutes
                m.update(ms=one, ratio=nat["ms"] / one, single_call=True)
            elif common.usable(nat):
                ab = common.interleaved(native, fn, timer, plan["rounds"])
                m.update(ms=ab["b_ms"], ab=ab, ratio=ab["ratio"])
            else:
                m.update(timer(fn), ratio=None)
            m["tflops"] = fl / (m["ms"] * 1e-3) / 1e12
            if pass_ == "forward" and not m.get("single_call"):
                speed_filters_ahead(m, choice, tf32, x, w, xc, refs[key], tol, native, plan,
                                    timer, stats)
        attempt(m, stats, run)
    ok = {lb: m for lb, m in cands.items() if common.usable(m)}
    if common.usable(nat):
        row["best"] = max(ok, key=lambda lb: ok[lb]["ratio"]) if ok else None
    else:
        row["best"] = min(ok, key=lambda lb: ok[lb]["ms"]) if ok else None
    row["ratio"] = ok[row["best"]]["ratio"] if row["best"] else None
    log("  %-8s N=%-2d %-7s %-4s cuDNN %s ms %s TFLOP/s (err %s) | %s" % (
        row["layer"], row["N"], row["pass"], row["mode"], common.fmt(nat.get("ms"), ".3f"),
        common.fmt(nat.get("tflops"), ".0f"), common.fmt(nat.get("rel_err"), ".1e"),
        " | ".join("%s %s" % (lb, "x%.2f (err %.1e)" % (m["ratio"], m["rel_err"])
                              if m.get("ratio") else m.get("failed", "timed")[:60])
                   for lb, m in cands.items()) or "no Winograd candidate"))
    if "failed" in nat:
        log("      cuDNN failed: %s" % nat["failed"])


def speed_filters_ahead(m, choice, tf32, x, w, xc, ref, tol, native, plan, timer, stats):
    """The forward with its filters transformed ahead (winograd_filter_transform, outside the
    timed calls: inference over many batches with one weight), checked as the candidate was and
    timed interleaved with cuDNN: m["fx"]."""
    transform = algorithms.conv2d_filter_transform(choice)
    if transform is None:
        return
    tile = choice.params.tile
    op = torch.ops.fastlayers.winograd_conv2d

    def forward(x, w, b, U):
        return op(x, w, b, list(PADDING), tile, tf32, False, U)
    fx = m["fx"] = {}

    def run(fx):
        U = transform(w)
        fx["rel_err"] = common.rel_err(forward(xc, w, None, U), ref)
        if not common.gate(fx, tol):
            stats[outside(tile)] += 1
            return
        fn = lambda: forward(x, w, None, U)  # noqa: E731
        fn()
        ab = common.interleaved(native, fn, timer, plan["rounds"])
        fx.update(ms=ab["b_ms"], ab=ab, ratio=ab["ratio"])
    attempt(fx, stats, run)


def totals(rows, plan) -> list:
    """The network per mode, N and pass: sum over layers of count x ms. A layer's pair of times
    comes from its fastest candidate's interleaved trials (cuDNN's own time beside a candidate
    timed once); where it has no usable candidate, cuDNN's time stands on both sides (named in
    "cudnn_only"). "tuned": per layer the faster of cuDNN and the candidate."""
    out = []
    names = [lay[0] for lay in plan["layers"]]
    for mode in plan["modes"]:
        for N in plan["batches"]:
            for pname, _ in plan["passes"]:
                rs = [r for r in rows if r.get("mode") == mode and r["N"] == N
                      and r.get("pass") == pname]
                if not rs:
                    continue
                t = {"mode": mode, "N": N, "pass": pname, "target": target(mode, N),
                     "layers": [r["layer"] for r in rs], "cudnn_only": []}
                a = b = tuned = fl = 0.0
                for r in rs:
                    nat = r.get("cudnn")
                    if "failed" in r or not common.usable(nat):
                        t["failed"] = "%s: %s" % (r["layer"], r["failed"] if "failed" in r else
                                                  "cuDNN %s" % (nat or {}).get("failed"))
                        break
                    best = (r.get("candidates") or {}).get(r.get("best")) or {}
                    ab = best.get("ab") or {"a_ms": nat["ms"], "b_ms": best.get("ms", nat["ms"])}
                    if not best:
                        t["cudnn_only"].append(r["layer"])
                    a += r["count"] * ab["a_ms"]
                    b += r["count"] * ab["b_ms"]
                    tuned += r["count"] * min(ab["a_ms"], ab["b_ms"])
                    fl += r["count"] * r["flop"]
                t["complete"] = "failed" not in t and set(t["layers"]) >= set(names) and \
                    plan["network"]
                if "failed" not in t:
                    t.update(cudnn_ms=a, winograd_ms=b, tuned_ms=tuned, ratio=a / b,
                             tuned_ratio=a / tuned, cudnn_tflops=fl / (a * 1e9),
                             winograd_tflops=fl / (b * 1e9), flop=fl)
                out.append(t)
    return out


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--layers", default="", help="comma-separated subset of " +
                    ",".join(n for n, *_ in LAYERS + CPU_LAYERS))
    ap.add_argument("--batches", default="", help="comma-separated batch sizes N (default %s; "
                    "--quick %s)" % (",".join(map(str, BATCHES)),
                                     ",".join(map(str, QUICK_BATCHES))))
    ap.add_argument("--modes", default="", help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--passes", default="", help="comma-separated subset of fprop,bprop,accGrad")
    ap.add_argument("--labels", default="", help="the Winograd labels to run (default: all, "
                    "winograd:2,winograd:4,winograd:6,winograd:2,fused)")
    ap.add_argument("--sections", default="", help="comma-separated subset of " +
                    ",".join(SECTIONS))
    ap.add_argument("--trials", type=int, default=None, help="timed trials per measurement")
    args = ap.parse_args(argv)
    known = {n: lay for lay in LAYERS + CPU_LAYERS for n in lay[:1]}
    split = lambda s: [v.strip() for v in s.split(",") if v.strip()]  # noqa: E731
    args.layers, args.modes, args.passes = split(args.layers), split(args.modes), split(args.passes)
    # (a comma before "fused" belongs to the label winograd:2,fused)
    args.labels = [v.strip() for v in re.split(r",(?!fused)", args.labels) if v.strip()]
    args.sections = split(args.sections)
    for got, allowed, what in ((args.layers, known, "layer"), (args.modes, MODES, "mode"),
                               (args.passes, [p for p, _ in PASSES], "pass"),
                               (args.sections, SECTIONS, "section")):
        bad = [v for v in got if v not in allowed]
        if bad:
            ap.error("unknown %s %s" % (what, ", ".join(bad)))
    labels = (["winograd:%d" % t for t in sorted(set(FORWARD_TILES + WEIGHT_GRAD_TILES))]
              + ["winograd:2,fused"])
    if any(lb not in labels for lb in args.labels):
        ap.error("--labels takes %s" % ",".join(labels))
    try:
        args.batches = [int(v) for v in split(args.batches)]
    except ValueError:
        ap.error("--batches takes integers")
    args.layers = [known[n] for n in args.layers]
    args.labels = args.labels or labels
    return args


def plan_of(args, cuda: bool) -> dict:
    """What this run measures (without CUDA: one small layer, N = 1, fp32)."""
    modes = args.modes or list(MODES)
    if not cuda and modes != ["fp32"]:
        log("no CUDA: mode fp32 only")
        modes = ["fp32"]
    layers = args.layers or (LAYERS if cuda else CPU_LAYERS)
    return {"layers": layers, "modes": modes,
            "batches": args.batches or list(QUICK_BATCHES if args.quick else BATCHES if cuda
                                            else (1,)),
            "passes": [p for p in PASSES if not args.passes or p[0] in args.passes],
            "labels": args.labels, "sections": args.sections or list(SECTIONS),
            "rounds": 3 if args.quick or not cuda else 4,
            # whether the totals can be the whole network's
            "network": all(lay in layers for lay in LAYERS)}


def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    cuda = torch.cuda.is_available() and fastlayers.with_cuda
    if cuda:
        torch.backends.cudnn.benchmark = True
        warmup, trials = (2, 5) if args.quick else (3, 10)
        timer = common.CudaTimer(warmup, args.trials or trials, flush=True)
        timing, device = timer.config(), "cuda"
    else:
        log("no CUDA device: a small CPU run instead (the same calls, wall-clock timer)")
        trials = args.trials or 3
        timer = lambda fn: common.cpu_ms(fn, trials, 1)  # noqa: E731
        timing = {"timer": "wall clock", "warmup": 1, "trials": trials, "l2_flush_bytes": 0}
        device = "cpu"
    plan = plan_of(args, cuda)
    doc = common.meta(
        "winograd", args, **timing, quick=bool(args.quick), cudnn_benchmark=cuda,
        layers=[{"layer": n, "C": C, "K": K, "H": H, "count": c}
                for n, C, K, H, c in plan["layers"]],
        batches=plan["batches"], modes=plan["modes"], passes=[p for p, _ in plan["passes"]],
        labels=plan["labels"], sections=plan["sections"], rounds=plan["rounds"],
        padding=list(PADDING), check_samples=CHECK_SAMPLES, accuracy_N=ACCURACY_N,
        network_complete=plan["network"],
        ratio="cuDNN ms / Winograd ms, the median of per-round ratios of interleaved trials",
        tolerance="max(2 x cuDNN's error against float64, tuner.error_floor), on the first %d "
                  "samples" % CHECK_SAMPLES,
        flop="2 N C K 9 oh ow (direct convolution)")
    res = common.Results(args.out, doc)
    res.save()
    log(common.describe_run(doc))
    stats = {"errors": 0, "oom": 0, "outside_tolerance": 0}
    ok = True
    for name, fn, title in (("accuracy", bench_accuracy, "accuracy, max element error"),
                            ("speed", bench_speed, "VGG-E layers against cuDNN")):
        if name in plan["sections"] and not doc.get("fatal"):
            ok &= common.section(doc, res, title, fn, plan, res, timer, stats, device)
    if stats["outside_tolerance"]:
        log("%d candidates outside tolerance (recorded, not timed)"
            % stats["outside_tolerance"])
    import make_docs
    return common.finish(doc, res, ok and not doc.get("fatal"), stats, t_start, make_docs.winograd)


if __name__ == "__main__":
    sys.exit(main())
