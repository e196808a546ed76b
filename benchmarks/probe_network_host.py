#!/usr/bin/env python3
"""Is a network's training step host-bound, and where do the plain and converted steps differ?
(a diagnosis, not a result.)

    python3 benchmarks/probe_network_host.py [--nets resnet50] [--modes bf16] [--steps 3]
        [--rotate R [--rotate-steps 20]] [--pin 'C,...=F/I/W[;...]' ...]

Per network and mode, for the plain model, the converted one (tuned) and the converted one with
every pass forced to PyTorch's path, interleaved over rounds (medians):
  host    ms from a step's start to its return, one step issued on an idle device (a host-bound
          step never fills the launch queue, so this is the host's own time; a device-bound one
          blocks once the queue is full, and then host nears wall)
  wall    ms per step, STEPS steps back to back to the device's completion (bench_networks' figure)
then torch.profiler tables per step, the plain model against each other one (a plain copy among
them, the A/A): the host's ops (CPU self time, every thread) and the device's kernels, each with
its total and the names whose time differs most, and for the device the time of the kernels both
steps call equally often; each model profiled three times in rotated order, per name the median.
The plain copy's row is the noise to read the others against.
Each --pin C,...=F/I/W[;C,...=F/I/W] adds a model (pin1, pin2, ...): the converted one with its
3x3 layers of those input channels pinned to the labels F, I and W (forward, input and weight
gradient; `native/native/native` puts them on PyTorch's path).
With --rotate R, first: whole steps (--rotate-steps a trial, back to back) of those models and a
plain copy (A/A), rotated over R rounds as bench_networks rotates its three; plain's time over
each and each's over converted, medians with their 95% intervals.
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
    """{name: (self ms per step, calls per step)} over `steps` steps from torch.profiler: the
    device's kernels (device=True) or the host's ops (CPU self time, every thread)."""
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
            ms, calls = out.get(e.key, (0.0, 0.0))
            out[e.key] = (ms + t / 1e3 / steps, calls + e.count / steps)
    return out


def profiles(steps, count, device: bool, repeats: int = 3):
    """{model: {name: (ms, calls)}}: each model's profile_ms `repeats` times, the models in an
    order rotated repeat by repeat (the first profiled reads high), per name the median."""
    names = list(steps)
    runs = {k: [] for k in names}
    for r in range(repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            runs[k].append(profile_ms(steps[k], count, device))
    out = {}
    for k, tables in runs.items():
        keys = set().union(*tables)
        out[k] = {n: (statistics.median(t.get(n, (0.0, 0.0))[0] for t in tables),
                      statistics.median(t.get(n, (0.0, 0.0))[1] for t in tables)) for n in keys}
    return out


def ms(table, name):
    return table.get(name, (0.0, 0.0))[0]


def differing(a, b, count):
    """The `count` names whose time differs most between the profile tables a and b."""
    return sorted(set(a) | set(b), key=lambda n: -abs(ms(b, n) - ms(a, n)))[:count]


def pin(model, which, labels=("native", "native", "native")) -> int:
    """The passes of the model's fastlayers convolutions for which `which(layer)` holds pinned to
    `labels` (forward, input and weight gradient); returns how many layers."""
    with warnings.catch_warnings():  # (stride-2 layers: pinned but PyTorch's anyway)
        warnings.simplefilter("ignore")
        n = 0
        for m in model.modules():
            if isinstance(m, (fastlayers.Conv2d, fastlayers.Conv1d)) and which(m):
                m.force_algorithms(*labels)
                n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nets", default="resnet50")
    ap.add_argument("--modes", default="bf16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rotate", type=int, default=0, help="rounds of whole steps (0: none)")
    ap.add_argument("--rotate-steps", type=int, default=20, help="steps a trial in --rotate")
    ap.add_argument("--pin", action="append", default=[], metavar="C,...=F/I/W[;...]",
                    help="a model more: the converted one, its 3x3 layers of these input channels "
                         "pinned to these labels (repeatable)")
    args = ap.parse_args()
    pins = []  # per --pin: [(input channels, labels), ...]
    for spec in args.pin:
        groups = []
        for group in spec.split(";"):
            chans, _, labels = group.partition("=")
            passes = tuple(labels.split("/"))
            try:
                if len(passes) != 3:
                    raise ValueError("three labels")
                for lab in passes:
                    fastlayers.algorithms.parse(lab)
                groups.append(({int(c) for c in chans.split(",")}, passes))
            except ValueError as e:
                ap.error("--pin %r: expected C,...=forward/input_grad/weight_grad[;...] (%s)"
                         % (spec, e))
        pins.append(groups)
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
            pin(nat, lambda m: True)
            x = torch.randn(N, 3, side, side, device="cuda")
            target = torch.randint(0, 1000, (N,), device="cuda")
            models = {"plain": plain, "converted": conv, "all-native": nat}
            for i, groups in enumerate(pins):
                # Layers are picked by input channels alone: a network may have several such
                # (stride-2 ones among them, which then run PyTorch's path).
                key = "pin%d" % (i + 1)
                models[key] = fastlayers.convert(copy.deepcopy(plain))
                for chans, passes in groups:
                    n = pin(models[key], lambda m: m.kernel_size == (3, 3) and
                            m.in_channels in chans, passes)
                    log("%s: %s=%s on %d layers" % (key, ",".join(map(str, sorted(chans))),
                                                    "/".join(passes), n))
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
                variants = [k for k in steps if k not in ("plain", "converted", "plain copy")]
                pairs = [("plain", k) for k in steps if k != "plain"] + [
                    (k, "converted") for k in variants]
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
            others = [k for k in steps if k != "plain"]
            host_ops = profiles(steps, args.steps, device=False)
            log("host ms per step by the profiler (CPU self time, all threads; medians of three "
                "profiles in rotated order): " + ", ".join(
                    "%s %.2f" % (k, sum(v[0] for v in t.values())) for k, t in host_ops.items()))
            for other in others:
                a, b = host_ops["plain"], host_ops[other]
                for n in differing(a, b, 10):
                    log("   %-10s %+7.3f ms  plain %6.3f  %6.3f  %s" % (
                        other, ms(b, n) - ms(a, n), ms(a, n), ms(b, n), n[:90]))
            dev = profiles(steps, args.steps, device=True)
            log("device ms per step (kernels): " + ", ".join(
                "%s %.2f" % (k, sum(v[0] for v in t.values())) for k, t in dev.items()))
            for other in others:
                a, b = dev["plain"], dev[other]
                # Kernels both steps call equally often (normalisation, activations, the 1x1
                # layers, the optimizer): per call, a slower one here is a neighbour slowed;
                # names whose call counts differ say how many calls changed, not how fast.
                same = [n for n in set(a) & set(b) if abs(a[n][1] - b[n][1]) < 0.5]
                log("   %s: kernels called as often as in plain %.3f ms against plain's %.3f "
                    "(%d names); the rest %.3f against %.3f" % (
                        other, sum(b[n][0] for n in same), sum(a[n][0] for n in same), len(same),
                        sum(v[0] for n, v in b.items() if n not in same),
                        sum(v[0] for n, v in a.items() if n not in same)))
                for n in differing(a, b, 10):
                    log("   %-10s %+7.3f ms  plain %6.3f (%g calls)  %6.3f (%g calls)  %s" % (
                        other, ms(b, n) - ms(a, n), ms(a, n), a.get(n, (0, 0))[1], ms(b, n),
                        b.get(n, (0, 0))[1], n[:100]))
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
