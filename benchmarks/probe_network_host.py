#!/usr/bin/env python3
"""Is a network's training step host-bound, and where do the plain and converted steps differ?
(a diagnosis, not a result.)

    python3 benchmarks/probe_network_host.py [--nets resnet50] [--modes bf16] [--steps 3]
        [--rotate R [--rotate-steps 20]] [--native-channels C,...]

Per network and mode, for the plain model, the converted one (tuned) and the converted one with
every pass forced to PyTorch's path, interleaved over rounds (medians):
  host    ms from a step's start to its return, one step issued on an idle device (a host-bound
          step never fills the launch queue, so this is the host's own time; a device-bound one
          blocks once the queue is full, and then host nears wall)
  wall    ms per step, STEPS steps back to back to the device's completion (bench_networks' figure)
then torch.profiler tables per step: the host's ops (CPU self time, every thread) of the plain
model against the other two, and the device's kernels of plain against converted; each with its
total and the names whose time differs most.
With --rotate R, first: whole steps (--rotate-steps a trial, back to back) of those models, a
plain copy (A/A) and, with --native-channels C,..., the converted model with its 3x3 layers of
those input channels on PyTorch's path, rotated over R rounds as bench_networks rotates its
three; plain's time over each and over converted, medians with their 95% intervals.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, torch  # noqa: E402

import bench_networks as bn  # noqa: E402
import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402


def host_and_wall(step, steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    host = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return host, (time.perf_counter() - t0) * 1e3 / steps


def profile_ms(step, steps, device: bool):
    """{name: self ms per step} over `steps` steps from torch.profiler: the device's kernels
    (device=True) or the host's ops (CPU self time, every thread)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA if device else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = e.self_device_time_total if device else e.self_cpu_time_total
        if t > 0:
            out[e.key] = out.get(e.key, 0.0) + t / 1e3 / steps
    return out


def pin_native(model, which) -> None:
    """Every pass of the model's fastlayers convolutions for which `which(layer)` holds pinned to
    PyTorch's path."""
    with warnings.catch_warnings():  # (stride-2 layers: pinned but PyTorch's anyway)
        warnings.simplefilter("ignore")
        for m in model.modules():
            if isinstance(m, (fastlayers.Conv2d, fastlayers.Conv1d)) and which(m):
                m.force_algorithms("native", "native", "native")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nets", default="resnet50")
    ap.add_argument("--modes", default="bf16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rotate", type=int, default=0, help="rounds of whole steps (0: none)")
    ap.add_argument("--rotate-steps", type=int, default=20, help="steps a trial in --rotate")
    ap.add_argument("--native-channels", default="",
                    help="C,...: a model more, its 3x3 layers of these input channels native")
    args = ap.parse_args()
    native_channels = {int(c) for c in args.native_channels.split(",") if c}
    if not common.require_cuda("probe_network_host"):
        return 0
    torch.backends.cudnn.benchmark = True
    for name in args.nets.split(","):
        for mode in args.modes.split(","):
            common.set_precision("tf32" if mode == "tf32" else "fp32")
            N, side = bn.NETWORKS[name]
            torch.manual_seed(0)
            plain = bn.build(name)
            conv = fastlayers.convert(copy.deepcopy(plain))
            nat = fastlayers.convert(copy.deepcopy(plain))
            part = fastlayers.convert(copy.deepcopy(plain)) if native_channels else None
            pin_native(nat, lambda m: True)
            if part is not None:
                pin_native(part, lambda m: m.kernel_size == (3, 3) and
                           m.in_channels in native_channels)
            x = torch.randn(N, 3, side, side, device="cuda")
            target = torch.randint(0, 1000, (N,), device="cuda")
            models = {"plain": plain, "converted": conv, "all-native": nat}
            if part is not None:
                models["3x3 at %s native" % args.native_channels] = part
            if args.rotate:
                models["plain copy"] = copy.deepcopy(plain)
            steps = {k: bn.make_step(m, x, target, mode) for k, m in models.items()}
            tuner.clear()
            for s in steps.values():
                for _ in range(3):
                    s()
            torch.cuda.synchronize()
            if args.rotate:
                per = common.rotating({k: common.back_to_back(s, args.rotate_steps)
                                       for k, s in steps.items()}, lambda fn: fn(), args.rotate)
                others = [k for k in steps if k not in ("plain", "converted", "plain copy")]
                pairs = [("plain", k) for k in steps if k != "plain"] + [
                    (k, "converted") for k in others]
                for a, b in pairs:
                    r = common.ratio_of(per[a], per[b])
                    log("%-8s %-4s %s / %s x%.3f (95%% %.3f-%.3f; quartiles %.3f-%.3f), %d rounds"
                        " of %d steps" % (name, mode, a, b, r["ratio"], r["ratio_ci95"][0],
                                          r["ratio_ci95"][1], r["ratio_q1"], r["ratio_q3"],
                                          args.rotate, args.rotate_steps))
            res = {k: [] for k in steps}
            for r in range(7):  # interleaved rounds
                order = list(steps) if r % 2 == 0 else list(reversed(list(steps)))
                for k in order:
                    res[k].append(host_and_wall(steps[k], args.steps))
            for k, rows in res.items():
                log("%-8s %-4s %-10s host %6.2f ms  wall %6.2f ms" % (
                    name, mode, k, statistics.median(r[0] for r in rows),
                    statistics.median(r[1] for r in rows)))
            host_ops = {k: profile_ms(steps[k], args.steps, device=False)
                        for k in ("plain", "all-native", "converted")}
            log("host ms per step by the profiler (CPU self time, all threads): plain %.2f, "
                "all-native %.2f, converted %.2f" % tuple(sum(host_ops[k].values()) for k in
                                                          ("plain", "all-native", "converted")))
            for other in ("all-native", "converted"):
                names = set(host_ops["plain"]) | set(host_ops[other])
                diff = sorted(names, key=lambda n: -abs(host_ops[other].get(n, (0))
                                                         - host_ops["plain"].get(n, 0)))
                for n in diff[:14]:
                    log("   %-10s %+7.3f ms  plain %6.3f  %6.3f  %s" % (
                        other, host_ops[other].get(n, 0) - host_ops["plain"].get(n, 0),
                        host_ops["plain"].get(n, 0), host_ops[other].get(n, 0), n[:90]))
            dev = {k: profile_ms(steps[k], args.steps, device=True) for k in ("plain", "converted")}
            log("device ms per step: plain %.2f, converted %.2f" % (
                sum(dev["plain"].values()), sum(dev["converted"].values())))
            names = set(dev["plain"]) | set(dev["converted"])
            diff = sorted(names, key=lambda n: -abs(dev["converted"].get(n, 0)
                                                    - dev["plain"].get(n, 0)))
            for n in diff[:12]:
                log("   %+7.3f ms  plain %6.3f  converted %6.3f  %s" % (
                    dev["converted"].get(n, 0) - dev["plain"].get(n, 0), dev["plain"].get(n, 0),
                    dev["converted"].get(n, 0), n[:110]))
            for dec in tuner.decisions():
                if dec["choice"] != "native" and dec["source"] == "tuned":
                    log("   %s -> %s %s" % (dec["key"].split("|")[0:2], dec["choice"],
                                            {a: round(b, 4) for a, b in
                                             (dec.get("times_ms") or {}).items()}))
            del plain, conv, nat, steps, models
            common.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
