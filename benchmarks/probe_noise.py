#!/usr/bin/env python3
"""How much of a host-bound training step's A/A spread is the host's own doing? (a diagnosis of
the timing method, not a result.)

    python3 benchmarks/probe_noise.py [--layers small,resnet-1x1-56] [--modes fp32,bf16]
                                      [--rounds 20] [--configs free,gc,pin1,pin2]

Per layer and mode, nn.Conv2d, fastlayers.Conv2d and a second nn.Conv2d are timed as
bench_layers times them (common.ab_aa) under each host configuration in turn, then again in the
reverse order:
  free   as bench_layers runs today
  gc     Python's collector off while timing (collected first)
  pin1   gc, and every thread of the process on one CPU (the autograd thread shares the core
         with the main thread, which waits for it)
  pin2   gc, the main thread on one CPU and every other thread on a second
For each: the A/A and A/B medians and quartile widths (q3 - q1 of the per-round ratios).
With --phases, instead: the host time of each phase of a step (zero_grad, forward, backward,
optimizer), the three modules' steps interleaved one by one (pin1), medians in us.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, torch  # noqa: E402

import bench_layers as bl  # noqa: E402



def build(layer, mode):
    steps = bl.modules(layer, mode)[-1]
    for s in steps.values():
        for _ in range(4):
            s()
    return steps, bl.steps_per_trial(steps["nn"])


def phases(lname, mode, steps, n):
    import statistics
    import time
    names = list(steps)
    got = {k: [[], [], [], []] for k in names}
    with common.quiet_host("pin1"):
        torch.cuda.synchronize()
        for i in range(n):
            for k in names[i % 3:] + names[:i % 3]:
                ph = steps[k].phases
                ts = [time.perf_counter_ns()]
                for f in ph:
                    f()
                    ts.append(time.perf_counter_ns())
                for j in range(4):
                    got[k][j].append((ts[j + 1] - ts[j]) / 1e3)
            if i % 20 == 19:
                torch.cuda.synchronize()
    log("%s %s: host us per phase (zero_grad, forward, backward, optimizer), medians of %d" % (
        lname, mode, n))
    for k in names:
        log("  %-10s %s" % (k, "  ".join("%7.1f" % statistics.median(v) for v in got[k])))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--layers", default="small,resnet-1x1-56,resnet-3x3-14")
    ap.add_argument("--modes", default="fp32,bf16")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--best-of", type=int, default=3)
    ap.add_argument("--configs", default="free,gc,pin1,pin2")
    ap.add_argument("--phases", type=int, default=0, help="steps per module for --phases mode")
    args = ap.parse_args(argv)
    if not common.require_cuda("the noise probe"):
        return 0
    os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-probe-noise-")
    torch.backends.cudnn.benchmark = True
    log("allowed CPUs: %s" % sorted(os.sched_getaffinity(0)))
    configs = args.configs.split(",")
    layers = {r[0]: r for r in bl.LAYERS}
    for lname in args.layers.split(","):
        for mode in args.modes.split(","):
            steps, n = build(layers[lname], mode)
            if args.phases:
                phases(lname, mode, steps, args.phases)
                continue
            log("%s %s: %d steps a trial" % (lname, mode, n))
            for cfg in configs + configs[::-1]:
                with common.quiet_host(cfg):
                    r = common.ab_aa(steps, "nn", "fastlayers", "twin", n, args.rounds,
                                     args.best_of)
                ab, aa = r["ab"], r["aa"]
                log("  %-5s nn %.3f ms  A/B %.3f (iqr %.3f)  A/A %.3f (iqr %.3f, %.3f-%.3f)" % (
                    cfg, ab["a_ms"], ab["ratio"], ab["ratio_q3"] - ab["ratio_q1"], aa["ratio"],
                    aa["ratio_q3"] - aa["ratio_q1"], aa["ratio_min"], aa["ratio_max"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
