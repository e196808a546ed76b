#!/usr/bin/env python3
"""The float64 references of a 63x63 layer's passes on the tuner's few check samples, with
cudnn.benchmark off as the tuner runs them: seconds per call of cuDNN's heuristic algorithm, and
the input gradient also as the tuner now computes it, a forward convolution (flipped,
transposed weight), with the two forms' agreement. A diagnosis of the 63x63 layer's tuning time, not a result.

    python3 benchmarks/probe_fp64_reference.py
"""
import time, torch, torch.nn.functional as F
from fastlayers.tuner.conv2d import reference
torch.backends.cudnn.benchmark = False
def t(f):
    torch.cuda.synchronize(); t0 = time.perf_counter(); r = f(); torch.cuda.synchronize(); return time.perf_counter() - t0, r
for S, C in ((1, 8), (2, 32)):
    k, p, n = 63, 31, 128
    x = torch.randn(S, C, n, n, device="cuda", dtype=torch.float64)
    w = torch.randn(C, C, k, k, device="cuda", dtype=torch.float64)
    gy = torch.randn(S, C, n, n, device="cuda", dtype=torch.float64)
    bwd = lambda: torch.ops.aten.convolution_backward(gy, x, w, None, [1, 1], [p, p], [1, 1], False, [0, 0], 1, [True, False, False])[0]
    fwd_form = lambda: reference("input_grad", (p, p), x, w, gy)
    wg = lambda: torch.ops.aten.convolution_backward(gy, x, w, None, [1, 1], [p, p], [1, 1], False, [0, 0], 1, [False, True, False])[1]
    fw = lambda: F.conv2d(x, w, None, 1, p)
    res = {}
    for name, f in (("fwd", fw), ("igrad via forward", fwd_form), ("wgrad", wg), ("igrad convolution_backward", bwd)):
        if name == "fwd":
            f()  # the first call pays cuDNN's and the allocator's start; the others run once
        s, r = t(f); res[name] = r
        print("S=%d C=%d %-28s %.3f s" % (S, C, name, s), flush=True)
    print("  igrad forms agree: %.2e" % ((res["igrad via forward"] - res["igrad convolution_backward"]).abs().max() / res["igrad convolution_backward"].abs().max()))
