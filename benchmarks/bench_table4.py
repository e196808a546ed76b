#!/usr/bin/env python3
"""FFT convolution against cuDNN, pass by pass: the fbfft paper's Table 4 layers.

    python3 benchmarks/bench_table4.py [--out DIR] [--quick] [--layers L1,L2] [--modes fp32,tf32]

For each layer (S = 128, valid), pass (fprop = forward, bprop = input gradient, accGrad = weight
gradient) and precision mode (fp32: TF32 off; tf32: cuDNN's TF32 switch on, and the FFT ops told
so explicitly):
- cuDNN (cudnn.benchmark on) and every FFT candidate the tuner would consider
  (fastlayers.algorithms.candidates: cuFFT and fbfft bases, tiled ones), each called through
  fastlayers.algorithms.conv2d_call and checked against a float64 reference first. A candidate
  whose error exceeds max(2 x cuDNN's error, the tuner's floor) is recorded as failed, not timed.
- The fastest candidate within tolerance against cuDNN: ratio = cuDNN time / FFT time, the median
  of per-round ratios of interleaved trials (CUDA events, L2 flushed before every trial).
- Under tf32, where cuDNN's result is fp32-accurate (its error within the fp32 floor), the FFT's
  fp32 figure beside the TF32 one: cuDNN's time against the fastest FFT candidate with TF32 off.
- The tuner's own choice (it measures on its own tensors) and its ratio.

Writes DIR/table4-<device>.json; prints a markdown table (benchmarks/make_docs.py renders the
same). Without CUDA: a small CPU comparison through the same calls, DIR/table4-cpu.json.
Exit status: 0 when everything ran (out-of-memory configurations are recorded and tolerated),
3 when a measurement failed for another reason (a correctness gate included), 1 when a section
crashed.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import common
from common import log

import torch  # noqa: E402  (after common: it puts the built source tree on sys.path)
import torch.nn.functional as F  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import algorithms, tuner  # noqa: E402

S = 128
# name, f (in channels), f' (out channels), n (input size), k (kernel size)
LAYERS = [("L1", 3, 96, 128, 11), ("L2", 64, 64, 64, 9), ("L3", 128, 128, 32, 9),
          ("L4", 128, 128, 16, 7), ("L5", 384, 384, 13, 3)]
PASSES = [("fprop", "forward"), ("bprop", "input_grad"), ("accGrad", "weight_grad")]
MODES = ("fp32", "tf32")
TARGET_GEOMEAN = {"fp32": 3.0, "tf32": 1.5}  # the targets (docs/benchmarks.md, Method)
PADDING = (0, 0)
NATIVE = algorithms.parse("native")


def flops(C, K, kh, kw, oh, ow, batch=S):
    return 2.0 * batch * C * K * kh * kw * oh * ow


def call(choice, pass_, tf32, x, w, gy):
    fn = algorithms.conv2d_call(choice, pass_, PADDING, tf32)
    return lambda: fn(x, w, None, gy)


def peak_extra_bytes(fn):
    """(output, peak device bytes allocated by one call beyond what was allocated before it)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - before


def checked(fn, timer, ref, fl, tol=None) -> dict:
    """Error against `ref` first; timed only when within `tol` (None: no gate, the reference
    implementation itself)."""
    try:
        with torch.no_grad():
            out, peak = peak_extra_bytes(fn)
            m = {"rel_err": common.rel_err(out, ref), "peak_extra_bytes": int(peak),
                 "output_bytes": out.numel() * out.element_size()}
            del out
            if tol is not None and not common.gate(m, tol):
                return m
            m.update(timer(fn))
        m["tflops"] = fl / (m["ms"] * 1e-3) / 1e12
        return m
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        common.release()
        return common.failure(e)


def fastest(problem, pass_, tf32, x, w, gy, ref, fl, tol, timer):
    """Every FFT candidate, checked and timed: ({label: measurement}, fastest usable label)."""
    cands = {}
    for choice in algorithms.candidates(problem, pass_):
        if choice == NATIVE:
            continue
        m = checked(call(choice, pass_, tf32, x, w, gy), timer, ref, fl, tol)
        m["describe"] = algorithms.describe(choice)
        cands[str(choice)] = m
    ok = [lb for lb, m in cands.items() if common.usable(m)]
    return cands, (min(ok, key=lambda lb: cands[lb]["ms"]) if ok else None)


def against(native, label, pass_, tf32, x, w, gy, timer, rounds) -> dict:
    """cuDNN against the candidate `label`: interleaved trials, the median of per-round ratios."""
    return common.interleaved(native, call(algorithms.parse(label), pass_, tf32, x, w, gy), timer,
                              rounds)


def tuner_decision(problem, pass_):
    key = problem.key(pass_)
    for r in tuner.decisions():
        if r["key"] == key:
            return {k: r[k] for k in ("choice", "source", "reason", "times_ms", "errors", "skipped")}
    return None


def bench_layers(args, res, timer, stats):
    rows = res.doc.setdefault("layers", [])
    rounds = 3 if args.quick else 5
    for name, C, K, n, k in LAYERS:
        if args.layers and name not in args.layers:
            continue
        t_layer = time.perf_counter()
        oh = n - k + 1
        fl = flops(C, K, k, k, oh, oh)
        gen = torch.Generator(device="cuda").manual_seed(1234)
        x = torch.randn(S, C, n, n, device="cuda", generator=gen)
        w = torch.randn(K, C, k, k, device="cuda", generator=gen)
        gy = torch.randn(S, K, oh, oh, device="cuda", generator=gen)
        try:
            with torch.no_grad():
                x64, w64, gy64 = x.double(), w.double(), gy.double()
                refs = {p: call(NATIVE, p, False, x64, w64, gy64)() for _, p in PASSES}
                del x64, w64, gy64
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            log("  %s: float64 reference failed (%s); skipping the layer" % (name, e))
            rows.append({"layer": name, **common.failure(e)})
            stats["errors"] += 1
            continue
        common.release()
        for mode in MODES:
            if args.modes and mode not in args.modes:
                continue
            tf32 = common.set_precision(mode)
            problem = tuner.ConvProblem.from_tensors(x, w, PADDING, tf32)
            for pname, pass_ in PASSES:
                row = {"layer": name, "C": C, "K": K, "n": n, "k": k, "S": S, "pass": pname,
                       "op_pass": pass_, "mode": mode, "tf32": tf32, "flop": fl}
                rows.append(row)
                ref = refs[pass_]
                native = call(NATIVE, pass_, tf32, x, w, gy)
                row["cudnn"] = nat = checked(native, timer, ref, fl)
                if not common.usable(nat):
                    stats["oom" if nat.get("oom") else "errors"] += 1
                    log("  %-3s %-7s %-4s cuDNN failed: %s" % (name, pname, mode, nat["failed"]))
                    res.save()
                    continue
                tol = common.tolerance(nat["rel_err"], 2.0, tuner.error_floor(torch.float32, tf32))
                row["tolerance"] = tol
                cands, best = fastest(problem, pass_, tf32, x, w, gy, ref, fl, tol, timer)
                row["fft_candidates"] = cands
                for c in cands.values():
                    if "failed" in c:
                        stats["oom" if c.get("oom") else "errors"] += 1
                row["fft_best"] = best
                row["fft"] = cands.get(best)
                row["ratio"] = None
                if best:
                    row["ab"] = against(native, best, pass_, tf32, x, w, gy, timer, rounds)
                    row["ratio"] = row["ab"]["ratio"]
                if tf32:
                    fp32_beside(row, rows, problem, pass_, x, w, gy, ref, fl, timer, native, rounds)
                try:  # the tuner's own decision (it measures again, on its own tensors)
                    choice = tuner.choose_conv2d(problem, pass_)
                    row["tuner_choice"] = choice
                    row["tuner_decision"] = tuner_decision(problem, pass_)
                    chosen = nat if choice == "native" else cands.get(choice)
                    row["tuned_ratio"] = common.ratio(nat, chosen) if chosen else None
                except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                    common.release()
                    row.update(tuner_choice=None, tuner_decision=common.failure(e), tuned_ratio=None)
                    stats["errors"] += 1
                fr = row["fft"] or {}
                log("  %-3s %-7s %-4s cuDNN %s ms (err %s) | %s %s ms (err %s) | x%s%s | tuner %s"
                    % (name, pname, mode, common.fmt(nat["ms"], ".3f"),
                       common.fmt(nat["rel_err"], ".1e"), best or "no FFT candidate",
                       common.fmt(fr.get("ms"), ".3f"), common.fmt(fr.get("rel_err"), ".1e"),
                       common.fmt(row["ratio"], ".2f"),
                       " (fp32 FFT x%s)" % common.fmt(row.get("ratio_fp32_fft"), ".2f")
                       if row.get("cudnn_fp32_accurate") else "", row["tuner_choice"]))
                for label, c in cands.items():
                    if "failed" in c:
                        log("      %s failed: %s" % (label, c["failed"]))
                res.save()
        del x, w, gy, refs
        common.release()
        log("  (%s took %.1f s)" % (name, time.perf_counter() - t_layer))
    summ = {}
    for mode in MODES:
        rs = [r for r in rows if r.get("mode") == mode]
        summ[mode] = {"geomean_ratio": common.geomean([r.get("ratio") for r in rs]),
                      "geomean_tuned_ratio": common.geomean([r.get("tuned_ratio") for r in rs]),
                      "n": len(rs), "n_ratio": sum(1 for r in rs if r.get("ratio")),
                      "target": TARGET_GEOMEAN[mode]}
        if mode == "tf32":
            # each pass at the accuracy cuDNN delivered: the fp32 FFT where cuDNN was fp32-accurate
            summ[mode]["geomean_ratio_same_accuracy"] = common.geomean(
                [r.get("ratio_fp32_fft") if r.get("cudnn_fp32_accurate") else r.get("ratio")
                 for r in rs])
            summ[mode]["n_cudnn_fp32_accurate"] = sum(1 for r in rs if r.get("cudnn_fp32_accurate"))
    res.doc["layers_summary"] = summ
    res.save()


# cuDNN's TF32 result counts as float32-accurate below this error: float32's errors here are
# 1e-7 to 2e-6, TF32's rounding unit alone 4.9e-4 (a classification, not a tolerance).
FP32_ACCURATE = 1e-5


def fp32_beside(row, rows, problem, pass_, x, w, gy, ref, fl, timer, native, rounds):
    """Under tf32: when cuDNN's result is as accurate as fp32, the FFT's ratio with TF32 off too
    (its fastest fp32 candidate, from the fp32 row of this run, else measured here)."""
    nat = row["cudnn"]
    row["cudnn_fp32_accurate"] = nat["rel_err"] <= FP32_ACCURATE
    if not row["cudnn_fp32_accurate"]:
        return
    same = [r for r in rows if r.get("mode") == "fp32" and r.get("layer") == row["layer"]
            and r.get("pass") == row["pass"]]
    best = same[0].get("fft_best") if same else None
    if not same:
        tol = common.tolerance(nat["rel_err"], 2.0, tuner.error_floor(torch.float32, False))
        fp32_problem = tuner.ConvProblem.from_tensors(x, w, PADDING, False)
        _, best = fastest(fp32_problem, pass_, False, x, w, gy, ref, fl, tol, timer)
    row["fp32_fft_best"] = best
    if best:
        row["ab_fp32_fft"] = against(native, best, pass_, False, x, w, gy, timer, rounds)
        row["ratio_fp32_fft"] = row["ab_fp32_fft"]["ratio"]


# ---------------------------------------------------------------------------------------------
# Without CUDA


def cpu_main(args) -> int:
    log("no CUDA device: a small CPU comparison instead (same registry calls, wall-clock timer)")
    shapes = [("small-k7", 4, 16, 16, 32, 7), ("L1-like", 2, 3, 16, 64, 11), ("k3", 8, 32, 32, 16, 3)]
    trials = 3 if args.quick else 7
    doc = common.meta("table4", args, trials=trials, quick=bool(args.quick), timer="wall clock")
    doc["cpu"] = []
    res = common.Results(args.out, doc)
    bad = 0
    for name, bs, C, K, n, k in shapes:
        torch.manual_seed(0)
        x = torch.randn(bs, C, n, n)
        w = torch.randn(K, C, k, k)
        oh = n - k + 1
        row = {"shape": name, "S": bs, "C": C, "K": K, "n": n, "k": k,
               "flop": flops(C, K, k, k, oh, oh, bs)}
        problem = tuner.ConvProblem.from_tensors(x, w, PADDING, False)
        with torch.no_grad():
            ref = F.conv2d(x.double(), w.double())
            fn = call(NATIVE, "forward", False, x, w, None)
            row["torch"] = nat = {"rel_err": common.rel_err(fn(), ref), **common.cpu_ms(fn, trials)}
            tol = common.tolerance(nat["rel_err"], 2.0, tuner.error_floor(torch.float32, False))
            row["candidates"] = {}
            for choice in algorithms.candidates(problem, "forward"):
                if choice == NATIVE:
                    continue
                fn = call(choice, "forward", False, x, w, None)
                try:
                    m = {"rel_err": common.rel_err(fn(), ref)}
                    if common.gate(m, tol):
                        m.update(common.cpu_ms(fn, trials))
                except RuntimeError as e:
                    m = common.failure(e)
                row["candidates"][str(choice)] = m
                bad += "failed" in m
        ok = {lb: m for lb, m in row["candidates"].items() if common.usable(m)}
        row["best"] = min(ok, key=lambda lb: ok[lb]["ms"]) if ok else None
        row["ratio"] = common.ratio(nat, ok[row["best"]]) if ok else None
        doc["cpu"].append(row)
        res.save()
        log("  %-8s torch %.3f ms | %s %s ms | x%s" % (
            name, nat["ms"], row["best"], common.fmt(ok.get(row["best"], {}).get("ms"), ".3f"),
            common.fmt(row["ratio"], ".2f")))
    log("wrote %s" % res.path)
    return 3 if bad else 0


def layer_parser(doc: str):
    """The arguments of the benchmarks over Table 4's layers (this one and bench_modules.py)."""
    ap = common.parser(doc)
    ap.add_argument("--layers", default="", help="comma-separated subset of L1..L5")
    ap.add_argument("--modes", default="", help="comma-separated subset of fp32,tf32")
    return ap


def parse_layer_args(ap, argv):
    args = ap.parse_args(argv)
    args.layers = [s.strip() for s in args.layers.split(",") if s.strip()]
    args.modes = [s.strip() for s in args.modes.split(",") if s.strip()]
    return args


def parse_args(argv=None):
    ap = layer_parser(__doc__)
    ap.add_argument("--trials", type=int, default=None, help="timed trials per measurement")
    ap.add_argument("--keep-tuner-cache", action="store_true",
                    help="use the user's tuner cache file instead of a fresh temporary one")
    return parse_layer_args(ap, argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        return cpu_main(args)
    t_start = time.perf_counter()
    if not args.keep_tuner_cache:
        os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-bench-tuner-")
    budget = 1.0 if args.quick else 3.0
    tuner.clear(memory=True)
    tuner.set_mode("tune")
    tuner.set_workspace_limit(8 << 30)
    tuner.set_budget(budget)
    torch.backends.cudnn.benchmark = True
    warmup, trials = (2, 5) if args.quick else (3, 15)
    timer = common.CudaTimer(warmup, args.trials or trials, flush=True)
    doc = common.meta("table4", args, S=S, **timer.config(), quick=bool(args.quick),
                      cudnn_benchmark=True, tuner_budget_s=budget, tuner_workspace_limit=8 << 30,
                      layers=args.layers or [n for n, *_ in LAYERS], modes=args.modes or list(MODES),
                      ratio="cuDNN ms / ms of the fastest FFT candidate within tolerance; median "
                            "of per-round ratios of interleaved trials",
                      tolerance="max(2 x cuDNN's error against float64, tuner.error_floor)")
    res = common.Results(args.out, doc)
    res.save()
    log(common.describe_run(doc))
    stats = {"errors": 0, "oom": 0}
    ok = common.section(doc, res, "Table 4 layers, ops vs cuDNN", bench_layers, args, res, timer,
                        stats)
    import make_docs
    return common.finish(doc, res, ok, stats, t_start, make_docs.table4)


if __name__ == "__main__":
    sys.exit(main())
