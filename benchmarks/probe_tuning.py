#!/usr/bin/env python3
"""Where a layer's first-call tuning time goes (a diagnosis, not a result): nn.Conv2d's first
forward + backward (cuDNN's search under cudnn.benchmark), then fastlayers.Conv2d's with every
candidate call of the tuner timed to the device's completion, summed per pass, candidate and phase
(check: the few-sample accuracy call; full: warm-up and timed calls at the problem's size), and
the float64 reference per pass.

    python3 benchmarks/probe_tuning.py [--case img-k63] [--no-nn-first]
"""
import argparse, collections, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402,F401  (puts python/ on the path)
import torch
from torch import nn
import fastlayers
from fastlayers.tuner import conv2d as tc
from bench_large_kernels import CASES

ap = argparse.ArgumentParser()
ap.add_argument("--case", default="img-k63")
ap.add_argument("--no-nn-first", action="store_true")
args = ap.parse_args()
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = False
dims, S, C, K, n, k = CASES[args.case]
assert dims == 2
spent = collections.defaultdict(float)
count = collections.Counter()
current = {"pass": "?"}


def synced(f):
    torch.cuda.synchronize(); t0 = time.perf_counter(); r = f(); torch.cuda.synchronize()
    return time.perf_counter() - t0, r


orig_measure, orig_ref, orig_mc = tc.measure, tc.reference, tc.measure_candidates


def measure(p, pass_, device):
    current["pass"] = pass_
    s, r = synced(lambda: orig_measure(p, pass_, device))
    spent[(pass_, "TOTAL", "")] += s
    return r


def reference(pass_, pad, *a):
    s, r = synced(lambda: orig_ref(pass_, pad, *a))
    spent[(pass_, "float64 reference", "")] += s
    return r


def measure_candidates(choices, call, *a, **kw):
    def timed_call(choice):
        fn = call(choice)

        def run(*xs):
            phase = "check" if xs[0 if xs[0] is not None else 1].shape[0] < S else "full"
            s, r = synced(lambda: fn(*xs))
            spent[(current["pass"], choice.label, phase)] += s
            count[(current["pass"], choice.label, phase)] += 1
            return r
        return run
    return orig_mc(choices, timed_call, *a, **kw)


tc.measure, tc.reference, tc.measure_candidates = measure, reference, measure_candidates
torch.manual_seed(0)
ref = nn.Conv2d(C, K, k, padding=k // 2).cuda()
fl = fastlayers.convert(nn.Conv2d(C, K, k, padding=k // 2).cuda())
x = torch.randn(S, C, n, n, device="cuda", requires_grad=True)
for label, m in ((() if args.no_nn_first else (("nn.Conv2d", ref),)) + (("fastlayers", fl),)):
    s, _ = synced(lambda: m(x).sum().backward())
    print("%-10s first call %.1f s" % (label, s), flush=True)
for (pass_, label, phase), s in sorted(spent.items(), key=lambda kv: -kv[1]):
    if s >= 0.05:
        print("  %-12s %-34s %-5s %8.2f s  (%d calls)" % (pass_, label, phase, s, count[(pass_, label, phase)]))
print(fastlayers.tuner.report())
