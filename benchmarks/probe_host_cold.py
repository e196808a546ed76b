#!/usr/bin/env python3
"""Does a layer's host time grow when other work runs between its calls, as in a network's step?
(a diagnosis, not a result.)

    python3 benchmarks/probe_host_cold.py [--rounds 15] [--calls 6] [--mode tf32] [--parts]

For ResNet-50's 14x14 and 7x7 3x3 layers (N 32), each pinned to PyTorch's path and to the
non-fused Winograd plans the tuner kept for them in ResNet-50 steps, the host's own time of one
forward + backward (a sleep kernel holds the device, so no call waits for it), in two settings
rotated round by round:
  warm    the layer's calls back to back (as the tuner's layer check times them)
  between a forward + backward of what a ResNet-50 step runs between two of its 14x14 3x3
          layers, on PyTorch's path (a layer3 bottleneck without its 3x3 convolution: two 1x1
          convolutions, batch norm, ReLU, the residual add) before each call
Each trial is common.held_host_us (its first calls untimed, the other work's time taken out). A
second nn.Conv2d (A/A) reads the noise. Medians over rounds, with the 95% interval of the median;
"between - warm" is what the other work costs the layer's host path (caches, the libraries' own
state). Trials that found the device idle are dropped.
With --parts, the same for single calls at the 14x14 layer: the pipeline's three ops (F(4x4)
forward and weight gradient, F(2x2) input gradient, as the layer's plan), cuDNN's forward and its
joint backward, torch.bmm at the pipeline's forward GEMM shape (cuBLAS's strided batched GEMM, as
the pipeline calls it) and a small torch.add (a launch and nothing more): which part of the path
runs cold.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, torch  # noqa: E402

import fastlayers  # noqa: E402

SLEEP_CYCLES = 150_000_000  # about 75 ms on an H200, several times a trial's host work


def layer_call(module, x, gy):
    def run():
        module(x).backward(gy)
    return run


def parts(tf32: bool):
    """(layer, name, call) for single calls at ResNet-50's 14x14 layer (N 32, 256 channels)."""
    import torch.nn.functional as F
    fl = torch.ops.fastlayers
    x = torch.randn(32, 256, 14, 14, device="cuda")
    w = torch.randn(256, 256, 3, 3, device="cuda")
    gy = torch.randn(32, 256, 14, 14, device="cuda")
    # The forward's GEMMs: alpha^2 = 36 products [P, C] x [C, K], P = 32 samples x 16 tiles.
    a = torch.randn(36, 512, 256, device="cuda")
    b = torch.randn(36, 256, 256, device="cuda")
    small = torch.randn(16, device="cuda")
    at = "14x14 call"

    def below(fn):
        # The module calls the ops from C++ below autograd: so here, not through their Python
        # autograd registration.
        def run():
            with torch._C._AutoDispatchBelowAutograd():
                fn()
        return run

    def bmm():
        # The pipeline's GEMMs are TF32 where the convolution allows it; matmul's own switch
        # follows for this call.
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            torch.bmm(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before

    def bwd():
        torch.ops.aten.convolution_backward(gy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0],
                                            1, [True, True, False])
    return [
        (at, "winograd_conv2d tile 4",
         below(lambda: fl.winograd_conv2d(x, w, None, [1, 1], 4, tf32))),
        (at, "winograd_conv2d_input_grad tile 2",
         below(lambda: fl.winograd_conv2d_input_grad(gy, w, [1, 1], 2, tf32))),
        (at, "winograd_conv2d_weight_grad tile 4",
         below(lambda: fl.winograd_conv2d_weight_grad(gy, x, [1, 1], 4, tf32))),
        (at, "F.conv2d (cuDNN)", lambda: F.conv2d(x, w, None, 1, 1)),
        (at, "convolution_backward (cuDNN)", bwd),
        (at, "torch.bmm 36 x [512,256]x[256,256]", bmm),
        (at, "torch.add, 16 values", lambda: torch.add(small, small)),
    ]


class Between(torch.nn.Module):
    """A layer3 bottleneck of ResNet-50 without its 3x3 convolution (1024 -> 256 -> 1024, 14x14)."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(1024, 256, 1, bias=False), nn.BatchNorm2d(256)
        self.conv3, self.bn3 = nn.Conv2d(256, 1024, 1, bias=False), nn.BatchNorm2d(1024)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn3(self.conv3(y)) + x)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=6)
    ap.add_argument("--mode", default="tf32", choices=("fp32", "tf32"))
    ap.add_argument("--parts", action="store_true", help="single calls at the 14x14 layer too")
    args = ap.parse_args()
    if not common.require_cuda("probe_host_cold"):
        return 0
    torch.backends.cudnn.benchmark = True
    common.set_precision(args.mode)
    torch.manual_seed(0)
    block = Between().cuda()
    bx = torch.randn(32, 1024, 14, 14, device="cuda", requires_grad=True)
    bgy = torch.randn(32, 1024, 14, 14, device="cuda")
    other = layer_call(block, bx, bgy)
    cases = []
    for C, side, plan in ((256, 14, ("winograd:4", "winograd:2", "winograd:4")),
                          (512, 7, ("winograd:2", "winograd:2", "winograd:4"))):
        ref = torch.nn.Conv2d(C, C, 3, padding=1, bias=False).cuda()
        x = torch.randn(32, C, side, side, device="cuda", requires_grad=True)
        gy = torch.randn(32, C, side, side, device="cuda")
        models = {
            "nn.Conv2d": ref,
            "nn.Conv2d, a copy (A/A)": copy.deepcopy(ref),
            "native": fastlayers.convert(copy.deepcopy(ref)).force_algorithms(
                "native", "native", "native"),
            "/".join(plan): fastlayers.convert(copy.deepcopy(ref)).force_algorithms(*plan),
        }
        for name, m in models.items():
            cases.append(("%dx%d C %d" % (side, side, C), name, layer_call(m, x, gy)))
    if args.parts:
        cases += parts(args.mode == "tf32")
    for _, _, fn in cases:
        for _ in range(5):
            fn()
    for _ in range(5):
        other()
    torch.cuda.synchronize()
    res = {(a, b): {"warm": [], "between": []} for a, b, _ in cases}
    unheld = 0
    for r in range(args.rounds):
        order = cases if (r // 2) % 2 == 0 else list(reversed(cases))
        for a, b, fn in order:
            for setting in (("warm", "between") if r % 2 == 0 else ("between", "warm")):
                t = common.held_host_us(fn, calls=args.calls, reps=1, warmup=0,
                                        sleep_cycles=SLEEP_CYCLES,
                                        between=other if setting == "between" else None)
                if t["held"]:
                    res[(a, b)][setting].append(t["host_us"])
                else:
                    unheld += 1
    log("host us a call, a forward + backward for the layers (%s, the device held; %d rounds of "
        "%d calls; %d trials found the device idle, dropped)" % (
            args.mode, args.rounds, args.calls, unheld))
    log("%-12s %-36s %22s %22s %9s" % ("layer", "path", "warm (95%)", "between (95%)",
                                       "between - warm"))
    for (a, b), v in res.items():
        if not v["warm"] or not v["between"]:
            log("%-12s %-36s no held trial" % (a, b))
            continue
        cells = []
        for k in ("warm", "between"):
            xs = sorted(v[k])
            lo, hi = common.median_ci(xs)
            cells.append((statistics.median(xs), lo, hi))
        log("%-12s %-36s %7.1f (%5.1f-%5.1f) %7.1f (%5.1f-%5.1f) %+9.1f" % (
            a, b, *cells[0], *cells[1], cells[1][0] - cells[0][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
