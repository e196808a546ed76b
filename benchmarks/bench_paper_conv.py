#!/usr/bin/env python3
"""The fbfft paper's convolution experiment (Vasilache et al., "Fast Convolutional Nets with
fbfft", ICLR 2015): 3x3 kernels, square images of x = h = w in {13, 16, 27, 32, 57, 64},
S = f = f' in {16, 32, 64, 128}, valid convolution, fp32 (TF32 off), the three passes.

    python3 benchmarks/bench_paper_conv.py [--out DIR] [--quick] [--trials N]

Per configuration and pass: the FFT convolution on fbfft ('fbfft:NxN') and on cuFFT ('fft:NxN')
at the same basis (the next power of two of the image, as in the paper), and cuDNN
(cudnn.benchmark on), all three called through fastlayers.algorithms.conv2d_call. Each result is
checked against a float64 reference first: an FFT result outside max(2 x cuDNN's error, the
tuner's fp32 floor) is recorded as failed and enters no ratio. Times: CUDA events, L2 flushed,
median of the trials. Ratios: cuDNN / fbfft and cuFFT convolution / fbfft convolution (> 1:
fbfft faster).

Writes DIR/paper-conv-<device>.json and prints a markdown table. Without CUDA it says so and exits
0. Exit status: 3 when a measurement failed (a correctness gate included), 0 otherwise.
"""
from __future__ import annotations

import sys
import time

import common
from common import log

import torch  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import algorithms, tuner  # noqa: E402

SIZES = (13, 16, 27, 32, 57, 64)
BATCHES = (16, 32, 64, 128)  # S = f = f'
KERNEL = 3
PASSES = (("fprop", "forward"), ("bprop", "input_grad"), ("accGrad", "weight_grad"))
IMPLS = ("fbfft", "cufft", "cudnn")


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def choices(basis):
    nb = "%dx%d" % basis
    return {"fbfft": algorithms.parse("fbfft:" + nb), "cufft": algorithms.parse("fft:" + nb),
            "cudnn": algorithms.parse("native")}


def measure(fn, ref, timer, tol=None) -> dict:
    try:
        with torch.no_grad():
            m = {"rel_err": common.rel_err(fn(), ref)}
            if tol is None or common.gate(m, tol):
                m.update(timer(fn))
        return m
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
        common.release()
        return common.failure(e)


def run(args, doc, res):
    torch.backends.cudnn.benchmark = True
    common.set_precision("fp32")
    timer = common.CudaTimer(args.warmup, args.trials, flush=True)
    floor = tuner.error_floor(torch.float32, False)
    for n in doc["config"]["sizes"]:
        basis = (next_pow2(n), next_pow2(n))
        calls = choices(basis)
        for S in doc["config"]["batches"]:
            gen = torch.Generator(device="cuda").manual_seed(7)
            x = torch.randn(S, S, n, n, device="cuda", generator=gen)
            w = torch.randn(S, S, KERNEL, KERNEL, device="cuda", generator=gen)
            gy = torch.randn(S, S, n - KERNEL + 1, n - KERNEL + 1, device="cuda", generator=gen)
            for pname, pass_ in PASSES:
                fns = {impl: algorithms.conv2d_call(c, pass_, (0, 0), False)
                       for impl, c in calls.items()}
                with torch.no_grad():
                    ref = fns["cudnn"](x.double(), w.double(), None, gy.double())
                row = {"n": n, "S": S, "f": S, "f_out": S, "k": KERNEL, "basis": list(basis),
                       "pass": pname}
                row["cudnn"] = measure(lambda: fns["cudnn"](x, w, None, gy), ref, timer)
                for impl in ("fbfft", "cufft"):
                    if not common.usable(row["cudnn"]):
                        row[impl] = {"failed": "no tolerance: cuDNN's own call failed"}
                        continue
                    tol = common.tolerance(row["cudnn"]["rel_err"], 2.0, floor)
                    row[impl] = measure(lambda f=fns[impl]: f(x, w, None, gy), ref, timer, tol)
                row["cudnn_over_fbfft"] = common.ratio(row["cudnn"], row["fbfft"])
                row["cufft_over_fbfft"] = common.ratio(row["cufft"], row["fbfft"])
                doc["rows"].append(row)
                del ref
                log("  n=%-2d S=f=f'=%-3d %-7s %s" % (n, S, pname, " | ".join(
                    "%s %s" % (i, common.fmt(row[i].get("ms"), ".3f") + " ms"
                               if common.usable(row[i]) else "FAILED: " + row[i]["failed"])
                    for i in IMPLS)))
            del x, w, gy
            common.release()
            res.save()
    rows = doc["rows"]
    doc["geomean"] = {
        pname: {key: common.geomean([r[key] for r in rows if r["pass"] == pname])
                for key in ("cudnn_over_fbfft", "cufft_over_fbfft")}
        for pname, _ in PASSES}
    doc["failures"] = sorted({"%s n=%d S=%d %s: %s" % (i, r["n"], r["S"], r["pass"], r[i]["failed"])
                              for r in rows for i in IMPLS if "failed" in r[i]})


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--trials", type=int, default=15)
    args = ap.parse_args(argv)
    if not common.require_cuda("the paper's experiment compares CUDA implementations (fbfft, cuFFT, cuDNN)"):
        return 0
    t0 = time.perf_counter()
    doc = common.meta("paper-conv", args, kernel=KERNEL,
                      sizes=list(SIZES[:2] if args.quick else SIZES),
                      batches=list(BATCHES[:2] if args.quick else BATCHES), warmup=args.warmup,
                      trials=args.trials, tf32=False, l2_flush_bytes=common.FLUSH_BYTES,
                      basis="next power of two of the image (valid convolution)",
                      tolerance="max(2 x cuDNN's error against float64, the tuner's fp32 floor)",
                      ratio="cudnn_over_fbfft = cuDNN ms / fbfft ms; cufft_over_fbfft = cuFFT "
                            "ms / fbfft ms (> 1: fbfft faster)")
    doc["rows"] = []
    res = common.Results(args.out, doc)
    log(common.describe_run(doc))
    run(args, doc, res)
    doc["elapsed_s"] = time.perf_counter() - t0
    res.save()
    import make_docs
    log("")
    log(make_docs.paper_conv(doc))
    log("wrote %s" % res.path)
    return 3 if doc["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
