#!/usr/bin/env python3
"""The fbfft paper's convolution experiment (Vasilache et al., "Fast Convolutional Nets with
fbfft", ICLR 2015): 3x3 kernels, square images of x = h = w in {13, 16, 27, 32, 57, 64},
S = f = f' in {16, 32, 64, 128}, valid convolution, fp32 (TF32 off), three passes: fprop
(forward), bprop (input gradient), accGrad (weight gradient).

    python3 benchmarks/bench_paper_conv.py [--out DIR] [--print-json] [--quick]

Per configuration and pass: fastlayers FFT convolution with the fbfft backend and with the cuFFT
backend at the same basis (the next power of two of the image, as in the paper), and cuDNN
(torch.nn.functional.conv2d / torch.ops.aten.convolution_backward, cudnn.benchmark on). Median
of CUDA-event timings after a warm-up; relative L2 error against a float64 reference. Prints a
Markdown table of ratios (cuDNN time / fbfft time, cuFFT time / fbfft time; > 1: fbfft faster);
with --out writes DIR/paper-conv-<device>.json and .png; --print-json prints the JSON document
instead (scripts/gpu-check keeps it in its log). Without CUDA it says so and exits 0.

Exit status: 0 when every measurement ran or failed with a recorded reason (the fbfft backend
not being available on this build, out of memory), 1 when the script itself failed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fastlayers  # noqa: E402

SIZES = (13, 16, 27, 32, 57, 64)
BATCHES = (16, 32, 64, 128)  # S = f = f'
KERNEL = 3
PASSES = (("fprop", "forward"), ("bprop", "input_grad"), ("accGrad", "weight_grad"))
IMPLS = ("fbfft", "cufft", "cudnn")


def log(*a):
    print(*a, flush=True)


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def time_ms(fn, warmup: int, trials: int) -> dict:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return {"ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "trials": trials}


def pass_fn(impl: str, pass_: str, x, w, gy, basis):
    if impl == "cudnn":
        if pass_ == "forward":
            return lambda: F.conv2d(x, w)
        mask = [pass_ == "input_grad", pass_ == "weight_grad", False]
        idx = 0 if pass_ == "input_grad" else 1
        return lambda: torch.ops.aten.convolution_backward(
            gy, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask)[idx]
    fl, b = torch.ops.fastlayers, list(basis)
    if pass_ == "forward":
        return lambda: fl.fft_conv2d(x, w, None, [0, 0], b, False, impl)
    if pass_ == "input_grad":
        return lambda: fl.fft_conv2d_input_grad(gy, w, [0, 0], b, False, impl)
    return lambda: fl.fft_conv2d_weight_grad(gy, x, [0, 0], b, False, impl)


def rel_err(out, ref) -> float:
    if not bool(torch.isfinite(out).all()):
        return math.inf
    return ((out.double() - ref).norm() / ref.norm()).item()


def measure(fn, ref, warmup, trials) -> dict:
    try:
        with torch.no_grad():
            err = rel_err(fn(), ref)
            t = time_ms(fn, warmup, trials)
        t["rel_err"] = err
        return t
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return {"failed": "%s: %s" % (type(e).__name__, first[:300])}


def ratio(a: dict, b: dict):
    return a["ms"] / b["ms"] if "ms" in a and "ms" in b else None


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def run(args) -> dict:
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    sizes = SIZES[:2] if args.quick else SIZES
    batches = BATCHES[:2] if args.quick else BATCHES
    doc = {"benchmark": "fbfft paper convolution (3x3, valid, fp32)",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "config": {"kernel": KERNEL, "sizes": list(sizes), "batches": list(batches),
                      "warmup": args.warmup, "trials": args.trials, "tf32": False,
                      "basis": "next power of two of the image (valid convolution)",
                      "ratio_note": "cudnn_over_fbfft = cuDNN ms / fbfft ms; cufft_over_fbfft = "
                                    "cuFFT ms / fbfft ms (> 1: fbfft faster)"},
           "rows": []}
    for n in sizes:
        basis = (next_pow2(n), next_pow2(n))
        for S in batches:
            gen = torch.Generator(device="cuda").manual_seed(7)
            x = torch.randn(S, S, n, n, device="cuda", generator=gen)
            w = torch.randn(S, S, KERNEL, KERNEL, device="cuda", generator=gen)
            gy = torch.randn(S, S, n - KERNEL + 1, n - KERNEL + 1, device="cuda", generator=gen)
            for pname, pass_ in PASSES:
                with torch.no_grad():
                    ref = pass_fn("cudnn", pass_, x.double(), w.double(), gy.double(), None)()
                row = {"n": n, "S": S, "f": S, "f_out": S, "k": KERNEL, "basis": list(basis),
                       "pass": pname}
                for impl in IMPLS:
                    row[impl] = measure(pass_fn(impl, pass_, x, w, gy, basis), ref, args.warmup,
                                        args.trials)
                row["cudnn_over_fbfft"] = ratio(row["cudnn"], row["fbfft"])
                row["cufft_over_fbfft"] = ratio(row["cufft"], row["fbfft"])
                doc["rows"].append(row)
                del ref
                log("  n=%-2d S=f=f'=%-3d %-7s fbfft %s ms | cuFFT %s ms | cuDNN %s ms"
                    % (n, S, pname, *(fmt(row[i].get("ms"), ".3f") if "ms" in row[i]
                                      else "failed" for i in IMPLS)))
            del x, w, gy
            torch.cuda.empty_cache()
    doc["geomean"] = {
        pname: {"cudnn_over_fbfft": geomean([r["cudnn_over_fbfft"] for r in doc["rows"]
                                             if r["pass"] == pname]),
                "cufft_over_fbfft": geomean([r["cufft_over_fbfft"] for r in doc["rows"]
                                             if r["pass"] == pname])}
        for pname, _ in PASSES}
    failures = sorted({r[i]["failed"] for r in doc["rows"] for i in IMPLS if "failed" in r[i]})
    doc["failures"] = failures
    return doc


def markdown(doc: dict) -> str:
    out = ["fbfft paper convolution experiment, %s (torch %s, CUDA %s, cuDNN %s): 3x3, valid, "
           "fp32; cells: cuDNN ms / fbfft ms (cuFFT ms / fbfft ms); > 1 means fbfft is faster."
           % (doc["device"], doc["torch"], doc["cuda"], doc["cudnn"]), ""]
    batches = doc["config"]["batches"]
    out.append("| pass | x = h = w [basis] | " + " | ".join("S=f=f'=%d" % s for s in batches) + " |")
    out.append("|---|---|" + "---|" * len(batches))
    for pname, _ in PASSES:
        for n in doc["config"]["sizes"]:
            rs = {r["S"]: r for r in doc["rows"] if r["pass"] == pname and r["n"] == n}
            if not rs:
                continue
            basis = next(iter(rs.values()))["basis"]
            cells = ["%s (%s)" % (fmt(rs[s]["cudnn_over_fbfft"]), fmt(rs[s]["cufft_over_fbfft"]))
                     if s in rs else "-" for s in batches]
            out.append("| %s | %d [%dx%d] | %s |" % (pname, n, basis[0], basis[1],
                                                      " | ".join(cells)))
    gm = doc.get("geomean", {})
    out.append("")
    out.append("Geometric means, cuDNN / fbfft (cuFFT / fbfft): " + ", ".join(
        "%s %s (%s)" % (p, fmt(g.get("cudnn_over_fbfft")), fmt(g.get("cufft_over_fbfft")))
        for p, g in gm.items()))
    if doc.get("failures"):
        out.append("")
        out.append("Failed measurements: " + "; ".join(doc["failures"]))
    return "\n".join(out)


def plot(doc: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("(matplotlib not installed: no plot)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, (pname, _) in zip(axes, PASSES):
        for S in doc["config"]["batches"]:
            rs = [r for r in doc["rows"] if r["pass"] == pname and r["S"] == S]
            xs = [r["n"] for r in rs if r["cudnn_over_fbfft"]]
            ys = [r["cudnn_over_fbfft"] for r in rs if r["cudnn_over_fbfft"]]
            if xs:
                ax.plot(xs, ys, marker="o", label="S=f=f'=%d" % S)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(doc["config"]["sizes"], [str(n) for n in doc["config"]["sizes"]])
        ax.set_title("%s: cuDNN time / fbfft time" % pname)
        ax.set_xlabel("x = h = w (3x3 kernel)")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("speedup of fbfft (> 1: faster)")
    fig.suptitle("fbfft FFT convolution vs cuDNN, fp32, %s" % doc["device"])
    fig.tight_layout()
    tmp = path.with_suffix(".png.tmp")
    fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    tmp.replace(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for the JSON and PNG")
    ap.add_argument("--print-json", action="store_true", help="print the JSON document")
    ap.add_argument("--quick", action="store_true", help="the two smallest sizes and batches")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--trials", type=int, default=15)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        log("no CUDA device: the paper's convolution benchmark compares CUDA implementations "
            "(fbfft, cuFFT, cuDNN) and needs a GPU; nothing to run")
        return 0
    if not fastlayers.with_cuda:
        log("fastlayers was built without CUDA: rebuild with a CUDA toolkit to run this benchmark")
        return 0
    doc = run(args)
    log("")
    log(markdown(doc))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^a-z0-9]+", "-", doc["device"].lower()).strip("-") or "gpu"
        path = out / ("paper-conv-%s.json" % slug)
        path.write_text(json.dumps(doc, indent=1))
        plot(doc, path.with_suffix(".png"))
        log("wrote %s and %s" % (path, path.with_suffix(".png")))
    if args.print_json:
        log("paper-conv JSON:")
        log(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
