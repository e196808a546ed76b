#!/usr/bin/env python3
"""Large kernels: fastlayers.Conv2d / Conv1d (tuned) against nn.Conv2d / nn.Conv1d (cuDNN) and
fft-conv-pytorch (a pure-PyTorch FFT convolution on PyPI), forward + backward.

    python3 benchmarks/bench_large_kernels.py [--out DIR] [--quick] [--cases img-k31,seq16k-k1023]
                                              [--cudnn-heuristic]

Cases: images with k = 15, 31, 63 (S 16, C = K = 32, 128 x 128, 'same' padding k // 2) and 1-D
kernels 255, 1023, 4095 over 16384 and 65536 samples (S 16, C = K = 16, padding k // 2); fp32
with TF32 off, cudnn.benchmark on. Per case:
  first   wall time of the first forward + backward of nn.Conv*d (cuDNN's benchmark) and then of
          fastlayers' (the tuner measures every candidate of every pass there)
  check   outputs and the gradients of input, weight and bias of each module against a float64
          nn.Conv*d on the first two samples; a module outside max(2 x nn.Conv*d's error, the
          tuner's floor) gets no ratio
  time    forward + backward (autograd of the input, weight and bias) of calls back to back, wall
          clock to the device's completion; the three modules in rotating order round by round,
          each ratio the median of per-round ratios (> 1: fastlayers faster)
With --cudnn-heuristic, cudnn.benchmark is off (cuDNN's heuristic algorithm, for nn.Conv*d and the
tuner's native candidate alike; each row records which): cuDNN's search for a 4095-tap kernel over
65536 samples did not end within 9 minutes on an H100.
fft-conv-pytorch runs when installed (to a GPU machine without a network it travels as a wheel:
`pip download --no-deps fft-conv-pytorch==1.2.0`, pure Python); otherwise its column is empty.
Writes DIR/large-kernels-<device>.json.
"""
from __future__ import annotations

import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, torch  # noqa: E402
from torch import nn  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402
from bench_modules import check_module  # noqa: E402

try:
    import fft_conv_pytorch
except ImportError:  # the peer is optional
    fft_conv_pytorch = None

# name: (dims, S, C, K, length (image side or samples), k)
CASES = {
    "img-k15": (2, 16, 32, 32, 128, 15),
    "img-k31": (2, 16, 32, 32, 128, 31),
    "img-k63": (2, 16, 32, 32, 128, 63),
    "seq16k-k255": (1, 16, 16, 16, 16384, 255),
    "seq16k-k1023": (1, 16, 16, 16, 16384, 1023),
    "seq16k-k4095": (1, 16, 16, 16, 16384, 4095),
    "seq64k-k1023": (1, 16, 16, 16, 65536, 1023),
    "seq64k-k4095": (1, 16, 16, 16, 65536, 4095),
}
QUICK = ("img-k31", "seq16k-k1023", "seq64k-k4095")
CHECK_SAMPLES = 2


def _peer_version() -> str:
    try:
        from importlib.metadata import version
        return version("fft-conv-pytorch")
    except Exception:  # noqa: BLE001 - a version is a label here, not a requirement
        return "?"


class PeerConv(nn.Module):
    """fft-conv-pytorch's convolution with an nn.Conv*d's parameters (the same weight and bias)."""

    def __init__(self, ref: nn.Module):
        super().__init__()
        self.weight = nn.Parameter(ref.weight.detach().clone())
        self.bias = nn.Parameter(ref.bias.detach().clone())
        self.padding = ref.padding[0]

    def forward(self, x):
        return fft_conv_pytorch.fft_conv(x, self.weight, self.bias, padding=self.padding)


def make(case):
    dims, S, C, K, n, k = case
    torch.manual_seed(0)
    cls = nn.Conv2d if dims == 2 else nn.Conv1d
    ref = cls(C, K, k, padding=k // 2).cuda()
    fl = fastlayers.convert(copy.deepcopy(ref))
    gen = torch.Generator(device="cuda").manual_seed(7)
    shape = (S, C, n, n) if dims == 2 else (S, C, n)
    x = torch.randn(*shape, device="cuda", generator=gen)
    gy = torch.randn(*((S, K) + shape[2:]), device="cuda", generator=gen)
    return ref, fl, x, gy


def step_fn(m, x, gy):
    xg = x.clone().requires_grad_()

    def step():
        torch.autograd.grad(m(xg), (xg, m.weight, m.bias), gy)
    return step


def time_calls(calls):
    """ms per call of `calls` calls back to back, to the device's completion (common.host_us)."""
    return lambda fn: common.host_us(fn, calls=calls, reps=1, warmup=0)["us"] / 1e3


def rotating(fns: dict, time_one, rounds: int) -> dict:
    """common.rotating; per function the median ms, and per other function its median per-round
    ratio over 'fastlayers'."""
    per = common.rotating(fns, time_one, rounds)
    out = {n: {"ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v)}
           for n, v in per.items()}
    for n in per:
        if n != "fastlayers":
            r = common.ratio_of(per[n], per["fastlayers"])
            out[n].update(ratio=r["ratio"], ratio_min=r["ratio_min"], ratio_max=r["ratio_max"])
    return out


def run_case(doc, res, stats, name, args):
    case = CASES[name]
    dims, S, C, K, n, k = case
    row = {"case": name, "dims": dims, "S": S, "C": C, "K": K, "n": n, "k": k, "mode": "fp32",
           "cudnn_benchmark": torch.backends.cudnn.benchmark}
    doc["rows"].append(row)
    with common.guard(row, stats, res, name):
        common.set_precision("fp32")
        ref, fl, x, gy = make(case)
        tuner.clear()
        # First calls: nn.Conv*d's pays cuDNN's benchmark (cudnn.benchmark on); fastlayers' after
        # it finds cuDNN's choices made (as in a converted network after a plain one) and pays the
        # tuner: every candidate of every pass measured.
        for label, m in (("nn", ref), ("fastlayers", fl)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step_fn(m, x, gy)()
            torch.cuda.synchronize()
            row["first_call_s" if label == "nn" else "tune_s"] = time.perf_counter() - t0
        log("  %-14s first calls: nn.Conv*d %.1f s (cuDNN's %s), fastlayers %.1f s (tuning)"
            % (name, row["first_call_s"], "search" if row["cudnn_benchmark"] else "heuristic",
               row["tune_s"]))
        row["choices"] = {d["key"].split("|")[0]: d["choice"] for d in tuner.decisions()
                          if d["source"] in ("tuned", "file", "forced")}
        xs, gys = x[:CHECK_SAMPLES], gy[:CHECK_SAMPLES]
        modules = {"nn": ref, "fastlayers": fl}
        if fft_conv_pytorch is not None:
            modules["fft-conv-pytorch"] = PeerConv(ref)
        row["check"] = {}
        for label, m in modules.items():
            if m is ref:
                continue
            chk = check_module(ref, m, xs, gys, False)
            row["check"][label] = chk
            if not chk["within_tolerance"]:
                row.setdefault("failed_modules", {})[label] = "outside tolerance: %s" % (
                    ", ".join(chk["outside"]))
                log("  %-14s %s outside tolerance: %s" % (name, label, ", ".join(chk["outside"])))
        if "fastlayers" in row.get("failed_modules", {}):
            row["failed"] = row["failed_modules"]["fastlayers"]
            stats["errors"] += 1
            return
        fns = {label: step_fn(m, x, gy) for label, m in modules.items()
               if label not in row.get("failed_modules", {})}
        for f in fns.values():  # warm: plans, allocator, cuDNN's choices
            f()
        single = time_calls(1)(fns["nn"])
        calls = max(1, min(5, int(200 / max(single, 1e-3))))
        row["calls"], row["rounds"] = calls, (3 if args.quick else 5)
        row["time"] = t = rotating(fns, time_calls(calls), row["rounds"])
        log("  %-14s nn %.2f ms, fastlayers %.2f ms (x%.2f)%s | tune %.1f s | %s" % (
            name, t["nn"]["ms"], t["fastlayers"]["ms"], t["nn"]["ratio"],
            "" if "fft-conv-pytorch" not in t else ", fft-conv-pytorch %.2f ms (x%.2f)" % (
                t["fft-conv-pytorch"]["ms"], t["fft-conv-pytorch"]["ratio"]),
            row["tune_s"], " / ".join(row["choices"].values())))
        del ref, fl, x, gy, modules, fns


def render(doc) -> str:
    import make_docs
    return make_docs.large_kernels(doc)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--cases", default=None, help="comma-separated case names")
    ap.add_argument("--cudnn-heuristic", action="store_true",
                    help="cudnn.benchmark off: cuDNN's heuristic algorithm, no search")
    args = ap.parse_args(argv)
    if not common.require_cuda("large-kernel convolutions on CUDA"):
        return 0
    t_start = time.perf_counter()
    torch.backends.cudnn.benchmark = not args.cudnn_heuristic
    names = args.cases.split(",") if args.cases else (QUICK if args.quick else tuple(CASES))
    doc = common.meta("large-kernels", args, quick=args.quick, cases=list(names),
                      check_samples=CHECK_SAMPLES,
                      peer=None if fft_conv_pytorch is None else "fft-conv-pytorch %s" % (
                          _peer_version()))
    if fft_conv_pytorch is None:
        log("fft-conv-pytorch is not installed: its column stays empty")
    doc["rows"] = []
    res = common.Results(args.out, doc)
    stats = {"errors": 0, "oom": 0}
    ok = True
    for name in names:
        ok &= common.section(doc, res, name, run_case, doc, res, stats, name, args)
    return common.finish(doc, res, ok, stats, t_start, render)


if __name__ == "__main__":
    sys.exit(main())
