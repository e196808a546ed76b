#!/usr/bin/env python3
"""Where a layer's host time goes (a diagnosis, not a result): per call, the host's own time with a
sleep kernel holding the device (no call waits for it), beside the drained and enqueue times, for
raw ops (from Python and below autograd), nn.Conv2d and fastlayers.Conv2d (tuned, all-native,
fbfft); then a torch.profiler table (host-side rows, CUDA runtime calls among them) of forward + backward for the ResNet 3x3 layer.

    python3 benchmarks/probe_host.py
"""
import copy, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (puts python/ on the path)
import torch
import torch.nn.functional as F
from torch import nn
import fastlayers
from fastlayers import tuner

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = False
fl = torch.ops.fastlayers


def pure_host(fn, calls=40, reps=9):  # the host alone (common.held_host_us)
    return common.held_host_us(fn, calls=calls, reps=reps)["host_us"]


def drained(fn, calls=40, reps=9):
    r = common.host_us(fn, calls=calls, reps=reps, warmup=5)
    return r["us"], r["enqueue_us"]


def layer(S, C, K, n):
    torch.manual_seed(0)
    ref = nn.Conv2d(C, K, 3, padding=1).cuda()
    x = torch.randn(S, C, n, n, device="cuda", requires_grad=True)
    gy = torch.randn(S, K, n, n, device="cuda")
    tuned = fastlayers.convert(copy.deepcopy(ref))
    nat = fastlayers.convert(copy.deepcopy(ref)).force_algorithms("native", "native", "native")
    fb = fastlayers.convert(copy.deepcopy(ref)).force_algorithms("fbfft:16x16", "fbfft:16x16", "fbfft:16x16") if n <= 14 else None
    tuned(x).backward(gy)
    print("choices", [(d["key"].split("|")[0], d["choice"]) for d in tuner.decisions()
                      if "C=%d,K=%d,H=%d" % (C, K, n) in d["key"]])
    xd, w, b = x.detach(), ref.weight.detach(), ref.bias.detach()
    rows = {}
    rows["null add"] = lambda: torch.add(xd, 1.0)
    rows["F.conv2d nograd"] = lambda: F.conv2d(xd, w, b, 1, 1)
    rows["aten conv bwd (cudnn)"] = lambda: torch.ops.aten.convolution_backward(
        gy, xd, w, [K], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    if n <= 14:
        rows["fl fbfft fwd raw"] = lambda: fl.fft_conv2d(xd, w, b, [1, 1], [16, 16], False, "fbfft", [0, 0])
        rows["fl fbfft igrad raw"] = lambda: fl.fft_conv2d_input_grad(gy, w, [1, 1], [16, 16], False, "fbfft", [0, 0])
        rows["fl fbfft wgrad raw"] = lambda: fl.fft_conv2d_weight_grad(gy, xd, [1, 1], [16, 16], False, "fbfft", [0, 0])
        rows["fl cufft fwd raw"] = lambda: fl.fft_conv2d(xd, w, b, [1, 1], [16, 16], False, "cufft", [0, 0])
    def below(f):
        def g():
            with torch._C._AutoDispatchBelowAutograd():
                f()
        return g
    rows["fl wino4 fwd raw belowAD"] = below(lambda: fl.winograd_conv2d(xd, w, b, [1, 1], 4, False))
    rows["F.conv2d nograd belowAD"] = below(lambda: F.conv2d(xd, w, b, 1, 1))
    rows["fl wino2 fwd raw"] = lambda: fl.winograd_conv2d(xd, w, b, [1, 1], 2, False)
    rows["fl wino4 fwd raw"] = lambda: fl.winograd_conv2d(xd, w, b, [1, 1], 4, False)
    rows["fl wino4 igrad raw"] = lambda: fl.winograd_conv2d_input_grad(gy, w, [1, 1], 4, False)
    rows["fl wino wgrad raw"] = lambda: fl.winograd_conv2d_weight_grad(gy, xd, [1, 1], 2, False)
    def nograd(m):
        def f():
            with torch.no_grad():
                m(xd)
        return f
    rows["nn fwd nograd"] = nograd(ref)
    rows["fl tuned fwd nograd"] = nograd(tuned)
    rows["fl native fwd nograd"] = nograd(nat)
    def fb_(m):
        def f():
            m(x).backward(gy)
        return f
    rows["nn fwd+bwd"] = fb_(ref)
    rows["fl tuned fwd+bwd"] = fb_(tuned)
    rows["fl native fwd+bwd"] = fb_(nat)
    if fb is not None:
        rows["fl fbfft3 fwd+bwd"] = fb_(fb)
    print("%-26s %10s %10s %10s" % ("S%d C%d K%d %dx%d" % (S, C, K, n, n), "pure host", "drained", "enqueue"))
    for k, f in rows.items():
        h = pure_host(f)
        d, e = drained(f)
        print("%-26s %10.1f %10.1f %10.1f" % (k, h, d, e))
    from torch.profiler import profile, ProfilerActivity
    if S != 32 or C != 256:
        return
    for label, f in (("nn", rows["nn fwd+bwd"]), ("tuned", rows["fl tuned fwd+bwd"])):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(int(3e8))
            for _ in range(20):
                f()
        torch.cuda.synchronize()
        print("=====", label, "20 calls")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=34,
                                        max_name_column_width=55))


for shape in [(32, 256, 256, 14), (8, 16, 16, 16), (32, 64, 64, 56)]:
    layer(*shape)
