#!/usr/bin/env python3
"""Per-kernel device time of the FFT convolution's passes on a few layers (torch.profiler).

    python3 benchmarks/profile_fft_conv.py [--layers L3,L4] [--tf32] [--backend fbfft] [--native]

Layers: Table 4's L1-L5, and first layers (3 input channels) F32 (32x32, k = 3) and F64 (64x64,
k = 7). The basis is the smallest fast size (cuFFT) or the next power of two (fbfft) holding the
image. Each pass's result is checked against a float64 reference first (within max(2 x
PyTorch's error, the tuner's floor), else it is reported as failed and not profiled). --native
also profiles PyTorch's call for each pass (cuDNN, benchmark mode, the same TF32 setting) and
prints x = PyTorch's device time / ours.
"""
from __future__ import annotations

import sys

import common
from common import log

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import algorithms, tuner  # noqa: E402

LAYERS = {  # S, C, K, n, k (valid)
    "L1": (128, 3, 96, 128, 11), "L2": (128, 64, 64, 64, 9), "L3": (128, 128, 128, 32, 9),
    "L4": (128, 128, 128, 16, 7), "L5": (128, 384, 384, 13, 3),
    "F32": (128, 3, 64, 32, 3), "F64": (128, 3, 64, 64, 7),
}
PASSES = (("fprop", "forward"), ("bprop", "input_grad"), ("accGrad", "weight_grad"))


def profile_calls(fn, reps):
    """Per-kernel device time of fn (us per call), sorted, as (us, name, launches per call)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) / reps
        if t > 0:
            rows.append((t, e.key[:90], e.count // reps))
    rows.sort(reverse=True)
    return rows


def main(argv=None) -> int:
    ap = common.parser(__doc__, results=False)
    ap.add_argument("--layers", default="L2,L3,L4")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--backend", default="cufft", choices=("cufft", "fbfft"))
    ap.add_argument("--native", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        log("no CUDA device: nothing to profile")
        return 0
    torch.backends.cudnn.benchmark = True
    tf32 = common.set_precision("tf32" if args.tf32 else "fp32")
    native = algorithms.parse("native")
    failed = 0
    for name in args.layers.split(","):
        S, C, K, n, k = LAYERS[name]
        x = torch.randn(S, C, n, n, device="cuda")
        w = torch.randn(K, C, k, k, device="cuda")
        gy = torch.randn(S, K, n - k + 1, n - k + 1, device="cuda")
        side = fastlayers.ops.next_pow2(n) if args.backend == "fbfft" else fastlayers.ops.good_fft_size(n)
        choice = algorithms.parse("%s:%dx%d" % ("fbfft" if args.backend == "fbfft" else "fft",
                                                side, side))
        for pname, pass_ in PASSES:
            ours = algorithms.conv2d_call(choice, pass_, (0, 0), tf32)
            theirs = algorithms.conv2d_call(native, pass_, (0, 0), tf32)
            with torch.no_grad():
                ref = theirs(x.double(), w.double(), None, gy.double())
                err_nat = common.rel_err(theirs(x, w, None, gy), ref)
                m = {"rel_err": common.rel_err(ours(x, w, None, gy), ref)}
            del ref
            tol = common.tolerance(err_nat, 2.0, tuner.error_floor(torch.float32, tf32))
            head = "== %s %s %s tf32=%d (error %.1e, tolerance %.1e)" % (
                name, pname, choice, tf32, m["rel_err"], tol)
            if not common.gate(m, tol):
                failed += 1
                log("\n%s: FAILED, not profiled" % head)
                continue
            rows = profile_calls(lambda: ours(x, w, None, gy), args.reps)
            total = sum(r[0] for r in rows)
            if args.native:
                nat = sum(r[0] for r in profile_calls(lambda: theirs(x, w, None, gy), args.reps))
                head += "; PyTorch %.1f us/call, x = %.2f" % (nat, nat / total)
            log("\n%s: %.1f us/call" % (head, total))
            for t, key, cnt in rows[:12]:
                log("  %8.1f us  %5.1f%%  x%d  %s" % (t, 100 * t / total, cnt, key))
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
