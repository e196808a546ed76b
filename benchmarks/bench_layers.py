#!/usr/bin/env python3
"""Layer shapes beyond the Table 4 and VGG-E sets, as a user swaps them in: fastlayers.Conv2d
(tuned) against nn.Conv2d in whole training steps, per dtype.

    python3 benchmarks/bench_layers.py [--out DIR] [--quick] [--layers a,b] [--modes fp32,tf32]
                                       [--rounds R] [--best-of K]

Per layer and mode (fp32: TF32 off; tf32: PyTorch's convolution default; fp16, bf16: module and
input in that dtype, TF32 off), with cudnn.benchmark on:
  first step  wall time of fastlayers' first training step on a fresh tuner cache (its tuning)
  check       output and the three gradients of one forward + backward against a float64
              nn.Conv2d: fastlayers gets a ratio only within max(2 x nn.Conv2d's error, the
              tuner's floor) in every one
  steps       forward, backward (input, weight and bias gradients) and an SGD step with
              momentum, back to back for about 25 ms a trial (wall clock to the last step's
              completion, host and device together); nn.Conv2d, fastlayers and a second
              nn.Conv2d in an order rotated round by round, each round K rotations with each
              module's least trial kept; x = nn.Conv2d / fastlayers, the median of per-round
              ratios with its quartiles, and nn.Conv2d / its twin from the same rounds (A/A)
The summary counts the rows below 0.97x and 0.93x, and those whose median's 95% interval
(order statistics, common.median_ci) lies wholly below 0.97x. Writes DIR/layers-<device>.json.
"""
from __future__ import annotations

import copy
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, torch  # noqa: E402
from torch import nn  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402

# name, S, C, K, H, W, k, padding, stride: ResNet stages (3x3 at every size, a 1x1, a strided
# 3x3), AlexNet's and OverFeat's middle layers, odd channel counts on a rectangular image, a
# large kernel, and a small layer where host time is all there is.
LAYERS = [("resnet-3x3-56", 32, 64, 64, 56, 56, 3, 1, 1),
          ("resnet-3x3-28", 32, 128, 128, 28, 28, 3, 1, 1),
          ("resnet-3x3-14", 32, 256, 256, 14, 14, 3, 1, 1),
          ("resnet-3x3-7", 32, 512, 512, 7, 7, 3, 1, 1),
          ("resnet-1x1-56", 32, 256, 64, 56, 56, 1, 0, 1),
          ("resnet-3x3-s2", 32, 128, 128, 56, 56, 3, 1, 2),
          ("alexnet-conv2", 128, 64, 192, 27, 27, 5, 2, 1),
          ("overfeat-conv2", 64, 96, 256, 24, 24, 5, 0, 1),
          ("overfeat-conv4", 64, 512, 1024, 12, 12, 3, 1, 1),
          ("odd-rect-5x5", 16, 48, 80, 37, 29, 5, 2, 1),
          ("large-13x13", 16, 32, 32, 64, 64, 13, 6, 1),
          ("small", 8, 16, 16, 16, 16, 3, 1, 1)]
MODES = ("fp32", "tf32", "fp16", "bf16")
DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
         "bf16": torch.bfloat16}
TRIAL_MS = 25.0


def make_step(m, x, gy):
    opt = torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        x.grad = None
        m(x).backward(gy)
        opt.step()

    # the same step in its phases, for benchmarks/probe_noise.py --phases
    out = []

    def zero():
        opt.zero_grad(set_to_none=True)
        x.grad = None

    def fwd():
        out[:] = [m(x)]

    def bwd():
        out.pop().backward(gy)
    step.phases = (zero, fwd, bwd, opt.step)
    return step


def modules(layer, mode):
    """(tf32, ref, ours, x, gy, steps) for `layer` in `mode`: nn.Conv2d, a fastlayers copy and a
    second nn.Conv2d (steps "nn", "fastlayers", "twin", each a make_step), precision set."""
    name, S, C, K, H, W, k, pad, stride = layer
    tf32 = common.set_precision("tf32" if mode == "tf32" else "fp32")
    dtype = DTYPE[mode]
    torch.manual_seed(0)
    ref = nn.Conv2d(C, K, k, padding=pad, stride=stride).cuda().to(dtype)
    twin = copy.deepcopy(ref)
    ours = fastlayers.convert(copy.deepcopy(ref))
    x = torch.randn(S, C, H, W, device="cuda", dtype=dtype, requires_grad=True)
    with torch.no_grad():
        gy = torch.randn_like(ref(x))
    steps = {"nn": make_step(ref, x, gy), "fastlayers": make_step(ours, x, gy),
             "twin": make_step(twin, x, gy)}
    return tf32, ref, ours, x, gy, steps


def steps_per_trial(step) -> int:
    """Steps of `step` that fill about TRIAL_MS back to back (2..200), from a short pilot."""
    pilot = min(common.back_to_back(step, 3)() for _ in range(3))
    return max(2, min(200, math.ceil(TRIAL_MS / max(pilot, 1e-3))))


def run_layer(doc, res, stats, layer, mode, args):
    name, S, C, K, H, W, k, pad, stride = layer
    row = {"layer": name, "mode": mode, "S": S, "C": C, "K": K, "H": H, "W": W, "k": k,
           "padding": pad, "stride": stride}
    doc["rows"].append(row)
    with common.guard(row, stats, res, "%s %s" % (name, mode)):
        tf32, ref, ours, x, gy, steps = modules(layer, mode)
        for key in ("nn", "twin"):  # cuDNN's benchmark of this shape, before fastlayers' first
            steps[key]()
        before = {d["key"] for d in tuner.decisions()}
        row["first_step_s"] = common.first_call_s(steps["fastlayers"])
        row["choices"] = {d["key"].split("|")[0]: d["choice"] for d in tuner.decisions()
                          if d["key"] not in before}
        from bench_modules import check_module
        ours.load_state_dict(ref.state_dict())
        row["check"] = chk = check_module(ref, ours, x.detach(), gy, tf32)
        if not chk["within_tolerance"]:
            row["failed"] = "outside tolerance: %s" % ", ".join(chk["outside"])
            stats["errors"] += 1
            log("  %-15s %-4s %s" % (name, mode, row["failed"]))
            return
        for s in steps.values():
            for _ in range(3):
                s()
        n_steps = steps_per_trial(steps["nn"])
        row["steps_per_trial"], row["best_of"] = n_steps, args.best_of
        row.update(common.ab_aa(steps, "nn", "fastlayers", "twin", n_steps, args.rounds,
                                args.best_of))
        log("  %-15s %-4s nn %.3f ms, fastlayers %.3f ms: x%.3f (q %.3f-%.3f; 95%% %.3f-%.3f); "
            "A/A x%.3f (q %.3f-%.3f); first step %.2f s; %s" % (
                name, mode, row["ab"]["a_ms"], row["ab"]["b_ms"], row["ratio"],
                row["ab"]["ratio_q1"], row["ab"]["ratio_q3"], *row["ab"]["ratio_ci95"],
                row["aa"]["ratio"],
                row["aa"]["ratio_q1"], row["aa"]["ratio_q3"], row["first_step_s"],
                " / ".join(row["choices"].values()) or "-"))


def summarize(doc) -> dict:
    rows = [r for r in doc["rows"] if "ratio" in r]
    ratios = [r["ratio"] for r in rows]
    if not ratios:
        return {}
    worst = min(rows, key=lambda r: r["ratio"])
    return {"rows": len(doc["rows"]), "measured": len(rows),
            "below_0.97": sum(x < 0.97 for x in ratios), "below_0.93": sum(x < 0.93 for x in ratios),
            "aa_below_0.97": sum(r["aa"]["ratio"] < 0.97 for r in rows),
            # rows whose median's 95% interval (common.median_ci) lies wholly below 0.97x:
            # below it beyond what the rounds' spread explains
            "ci_below_0.97": sum("ratio_ci95" in r["ab"] and r["ab"]["ratio_ci95"][1] < 0.97
                                 for r in rows),
            "min_ratio": worst["ratio"], "worst": "%s %s" % (worst["layer"], worst["mode"]),
            "geomean": common.geomean(ratios),
            "aa_span": [min(r["aa"]["ratio"] for r in rows), max(r["aa"]["ratio"] for r in rows)]}


def render(doc) -> str:
    import make_docs
    return make_docs.layers(doc)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--layers", default="", help="comma-separated names (default: all): "
                    + ", ".join(r[0] for r in LAYERS))
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--rounds", type=int, default=None, help="rotated rounds (default 15, quick 5)")
    ap.add_argument("--best-of", type=int, default=3,
                    help="rotations per round, each module's least trial kept (default 3)")
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (5 if args.quick else 15)
    wanted = [n for n in args.layers.split(",") if n]
    unknown = set(wanted) - {r[0] for r in LAYERS}
    if unknown:
        ap.error("--layers: unknown %s" % ", ".join(sorted(unknown)))
    if not common.require_cuda("layer training steps"):
        return 0
    os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-bench-layers-")
    tuner.clear()
    torch.backends.cudnn.benchmark = True
    t_start = time.perf_counter()
    doc = common.meta("layers", args, rounds=args.rounds, best_of=args.best_of,
                      trial_ms=TRIAL_MS, quick=args.quick, cudnn_benchmark=True,
                      timer="wall clock, steps back to back")
    doc["rows"] = []
    res = common.Results(args.out, doc)
    stats = {"errors": 0, "oom": 0}
    ok = True
    for layer in LAYERS:
        if wanted and layer[0] not in wanted:
            continue
        for mode in args.modes.split(","):
            ok &= common.section(doc, res, "%s %s" % (layer[0], mode), run_layer, doc, res, stats,
                                 layer, mode, args)
    doc["summary"] = summarize(doc)
    log("summary: %s" % doc["summary"])
    return common.finish(doc, res, ok, stats, t_start, render)


if __name__ == "__main__":
    sys.exit(main())
