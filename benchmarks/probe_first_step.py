#!/usr/bin/env python3
"""Where fresh tuning's first training step goes (a diagnosis, not a result): the converted
network's first step on an empty tuner cache, after the plain one's, with the time spent in the
candidates' measurements (measure_candidates), the layer checks (measure_layer), the float64
references, and the device timer split into the calls it timed behind its hold and those the
device-bound condition took at their wall time (measure.device_bound), each with its count.

    python3 benchmarks/probe_first_step.py vgg16:fp32 [resnet50:bf16 ...]

Networks and batches as bench_networks.py; the timings synchronise the device around each timer
call, so the step itself runs a little longer than in bench_networks.
"""
import collections
import copy
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_networks as bn  # noqa: E402
import common  # noqa: E402
import torch  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402
from fastlayers.tuner import conv2d as tc  # noqa: E402
from fastlayers.tuner import measure  # noqa: E402

spent = collections.defaultdict(float)
count = collections.Counter()
device_timer = measure.device_timer


def timed_device_timer(device):
    run = device_timer(device)
    if run is None:
        return None

    def wrapped(fn, args, calls, host_ms, wall_ms, wall_calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = run(fn, args, calls, host_ms, wall_ms, wall_calls)
        torch.cuda.synchronize()
        kind = "timer, wall time taken" if measure.device_bound(host_ms, wall_ms, wall_calls) \
            else "timer, timed behind the hold"
        spent[kind] += time.perf_counter() - t0
        count[kind] += 1
        return r
    return wrapped


def timed(name, fn):
    def wrapped(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[name] += time.perf_counter() - t0
            count[name] += 1
    return wrapped


def main(argv):
    if not common.require_cuda("first steps"):
        return 0
    measure.device_timer = tc.device_timer = timed_device_timer
    tc.measure_candidates = timed("measure_candidates", tc.measure_candidates)
    tc.measure_layer = timed("measure_layer", tc.measure_layer)
    tc.reference = timed("reference", tc.reference)
    os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-probe-first-step-")
    torch.backends.cudnn.benchmark = True
    for arg in argv or ["vgg16:fp32"]:
        name, mode = arg.split(":")
        spent.clear()
        count.clear()
        N, side = bn.NETWORKS[name]
        common.set_precision("tf32" if mode == "tf32" else "fp32")
        torch.manual_seed(0)
        plain = bn.build(name)
        conv = fastlayers.convert(copy.deepcopy(plain))
        x = torch.randn(N, 3, side, side, device="cuda")
        target = torch.randint(0, 1000, (N,), device="cuda")
        tuner.clear(file=True)  # each network on a fresh cache, a repeated one too
        t_plain = common.first_call_s(bn.make_step(plain, x, target, mode))
        t_conv = common.first_call_s(bn.make_step(conv, x, target, mode))
        print("%s %s N=%d: first step plain %.2f s, converted %.2f s; %s" % (
            name, mode, N, t_plain, t_conv,
            "; ".join("%s %.2f s (%d)" % (k, spent[k], count[k]) for k in sorted(spent))),
            flush=True)
        del plain, conv, x, target
        common.release()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
