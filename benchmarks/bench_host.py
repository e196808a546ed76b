#!/usr/bin/env python3
"""Host time of a swapped-in layer: fastlayers.Conv2d (tuned, and with every pass on PyTorch's
path) against nn.Conv2d, forward + backward.

    python3 benchmarks/bench_host.py [--out DIR] [--quick] [--rounds R] [--host HOW]

Per layer (fp32, TF32 off), after tuning and a warm-up:
  host      the host's own microseconds per forward + backward: calls issued back to back while
            a sleep kernel holds the device, so that no call waits for it, the first two of each
            trial untimed (common.held_host_us), the least of 3 trials per round
  step      microseconds per forward + backward back to back with the device drained at the end
            (host and device together: what a training step sees)
nn.Conv2d, a second nn.Conv2d, the tuned and the all-native fastlayers.Conv2d in one rotation per
measure (common.rotating: 25 rounds, each of 3 rotations, each module's least trial kept); each
fastlayers variant's ratio is the median of per-round ratios to nn.Conv2d (> 1: fastlayers
cheaper) with its 95% interval, and nn.Conv2d against the second nn.Conv2d beside (A/A). Outputs
and gradients are checked against a float64 nn.Conv2d first. --host gc|pin1|pin2 times under
common.quiet_host (the collector off; threads pinned) to see how much of the spread is the host's.
Writes DIR/host-<device>.json, each module's per-round figures included.
"""
from __future__ import annotations

import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, torch  # noqa: E402
from torch import nn  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402

# name, S, C, K, H (= W), k, padding: the layers issue 15 names, a 3x3 layer of VGG's first
# widths (64 channels, 112 wide; not one of VGG-16's own shapes) whose passes the fused Winograd
# kernel can take (issue 16's host-time target), and a small one.
LAYERS = [("resnet-3x3", 32, 256, 256, 14, 3, 1),
          ("resnet-first-3x3", 32, 64, 64, 56, 3, 1),
          ("vgg-3x3", 8, 64, 64, 112, 3, 1),
          ("small", 8, 16, 16, 16, 3, 1)]


BEST_OF = 3  # rotations per round; each module's least trial of the round kept


def fwd_bwd(m, x, gy):
    def call():
        y = m(x)
        y.backward(gy)
    return call


def timer(calls, what, sleep_cycles):
    sleep = [sleep_cycles]  # grows for good where a trial outlasts it (a slow or busy host)

    def time_one(fn):
        if what == "host_us":
            for _ in range(4):
                r = common.held_host_us(fn, calls=calls, reps=1, warmup=2, sleep_cycles=sleep[0])
                if r["held"]:
                    break
                # the device went idle, or the calls took half the sleep: either they outlasted
                # it or one of them waited for the device; again, longer
                sleep[0] *= 2
            else:
                raise RuntimeError("the sleep kernel did not hold the device through %d calls, "
                                   "even at %d cycles (or a call waits for the device)" % (
                                       calls, sleep[0] // 2))
        else:
            r = common.host_us(fn, calls=calls, reps=1, warmup=2)
        return r[what]
    return time_one


def run_layer(doc, res, stats, layer, args):
    name, S, C, K, n, k, pad = layer
    row = {"layer": name, "S": S, "C": C, "K": K, "n": n, "k": k, "padding": pad}
    doc["rows"].append(row)
    with common.guard(row, stats, res, name):
        common.set_precision("fp32")
        torch.manual_seed(0)
        ref = nn.Conv2d(C, K, k, padding=pad).cuda()
        twin = copy.deepcopy(ref)
        tuned = fastlayers.convert(copy.deepcopy(ref))
        native = fastlayers.convert(copy.deepcopy(ref)).force_algorithms("native", "native", "native")
        x = torch.randn(S, C, n, n, device="cuda", requires_grad=True)
        gy = torch.randn(S, K, n + 2 * pad - k + 1, n + 2 * pad - k + 1, device="cuda")
        fwd_bwd(tuned, x, gy)()  # tunes the three passes
        row["choices"] = {d["key"].split("|")[0]: d["choice"] for d in tuner.decisions()
                          if "S=%d,C=%d,K=%d,H=%d" % (S, C, K, n) in d["key"]}
        # correctness against float64 first
        from bench_modules import check_module
        row["check"] = chk = check_module(ref, tuned, x.detach(), gy, False)
        if not chk["within_tolerance"]:
            row["failed"] = "outside tolerance: %s" % ", ".join(chk["outside"])
            stats["errors"] += 1
            return
        calls = 10 if args.quick else 20
        rounds = args.rounds or (5 if args.quick else 25)
        fns = {k_: fwd_bwd(m, x, gy) for k_, m in
               (("nn", ref), ("twin", twin), ("tuned", tuned), ("native", native))}
        # the sleep holding the device: 20 ms or three times the calls' device time, whichever is
        # longer (a trial's cost is mostly this wait)
        per_ms = common._sleep_cycles_per_ms()
        step_ms = min(common.back_to_back(fns["nn"], 5)() for _ in range(3))
        sleep_cycles = int(per_ms * max(20.0, 3 * (calls + 2) * step_ms))
        row["rounds"], row["best_of"] = rounds, BEST_OF
        row["per_round_us"] = {}
        for what in ("host_us", "us"):
            with common.quiet_host(args.host):
                per = common.rotating(fns, timer(calls, what, sleep_cycles), rounds, BEST_OF)
            row[what] = {v: common.ratio_of(per["nn"], per[v]) for v in ("tuned", "native", "twin")}
            row["per_round_us"][what] = per
        h = row["host_us"]
        log("  %-18s host us: nn %.0f, tuned %.0f (x%.2f), native-forced %.0f (x%.2f), A/A x%.2f | "
            "step us: nn %.0f, tuned %.0f (x%.2f), A/A x%.2f | %s" % (
                name, h["tuned"]["a_ms"], h["tuned"]["b_ms"], h["tuned"]["ratio"],
                h["native"]["b_ms"], h["native"]["ratio"], h["twin"]["ratio"],
                row["us"]["tuned"]["a_ms"], row["us"]["tuned"]["b_ms"], row["us"]["tuned"]["ratio"],
                row["us"]["twin"]["ratio"], " / ".join(row["choices"].values())))


def render(doc) -> str:
    import make_docs
    return make_docs.host(doc)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 25, quick 5)")
    ap.add_argument("--host", default="free", choices=("free", "gc", "pin1", "pin2"),
                    help="the host's configuration while timing (common.quiet_host; default free: "
                         "as a user's process runs)")
    args = ap.parse_args(argv)
    if not common.require_cuda("host time of CUDA layers"):
        return 0
    t_start = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    doc = common.meta("host", args, quick=args.quick, host=common.quiet_host(args.host).how)
    doc["rows"] = []
    res = common.Results(args.out, doc)
    stats = {"errors": 0, "oom": 0}
    ok = True
    for layer in LAYERS:
        ok &= common.section(doc, res, layer[0], run_layer, doc, res, stats, layer, args)
    return common.finish(doc, res, ok, stats, t_start, render)


if __name__ == "__main__":
    sys.exit(main())
