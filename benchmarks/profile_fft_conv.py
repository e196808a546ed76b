"""Per-kernel device time of the FFT convolution passes on a few layers (torch.profiler).

    python3 benchmarks/profile_fft_conv.py [--layers L3,L4] [--tf32] [--backend fbfft] [--native]

Layers: Table 4's L1-L5, and first layers (3 input channels) F32 (32x32, k = 3) and F64 (64x64,
k = 7). --native also profiles PyTorch's op for each pass (cuDNN, benchmark mode, the same TF32
setting) for the device time beside.
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import fastlayers

LAYERS = {  # S, C, K, n, k (valid)
    "L1": (128, 3, 96, 128, 11), "L2": (128, 64, 64, 64, 9), "L3": (128, 128, 128, 32, 9),
    "L4": (128, 128, 128, 16, 7), "L5": (128, 384, 384, 13, 3),
    "F32": (128, 3, 64, 32, 3), "F64": (128, 3, 64, 64, 7),
}


def profile_calls(fn, reps):
    """Per-kernel device time of fn (us per call), sorted, as (us, name, launches per call)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0:
            t = getattr(e, "self_device_time_total", 0) / reps
            if t > 0:
                rows.append((t, e.key[:90], e.count // reps))
    rows.sort(reverse=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="L2,L3,L4")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--backend", default="cufft", choices=("cufft", "fbfft"))
    ap.add_argument("--native", action="store_true")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    for name in args.layers.split(","):
        S, C, K, n, k = LAYERS[name]
        x = torch.randn(S, C, n, n, device=dev)
        w = torch.randn(K, C, k, k, device=dev)
        gy = torch.randn(S, K, n - k + 1, n - k + 1, device=dev)
        basis = fastlayers.ops.default_basis((n, n), 0)
        if args.backend == "fbfft":
            basis = [1 << (n - 1).bit_length()] * 2
        be, ops = args.backend, torch.ops.fastlayers
        fns = {
            "fprop": lambda: ops.fft_conv2d(x, w, None, [0, 0], basis, args.tf32, be),
            "bprop": lambda: ops.fft_conv2d_input_grad(gy, w, [0, 0], basis, args.tf32, be),
            "accGrad": lambda: ops.fft_conv2d_weight_grad(gy, x, [0, 0], basis, args.tf32, be),
        }
        native = {
            "fprop": lambda: torch.nn.functional.conv2d(x, w),
            "bprop": lambda: torch.nn.grad.conv2d_input(x.shape, w, gy),
            "accGrad": lambda: torch.nn.grad.conv2d_weight(x, w.shape, gy),
        }
        for pname, fn in fns.items():
            rows = profile_calls(fn, args.reps)
            total = sum(r[0] for r in rows)
            if args.native:
                nat = sum(r[0] for r in profile_calls(native[pname], args.reps))
                print("\n== %s %s PyTorch (cuDNN) tf32=%d: %.1f us/call; x = %.2f"
                      % (name, pname, args.tf32, nat, nat / total))
            print("\n== %s %s %s basis %s tf32=%d: %.1f us/call"
                  % (name, pname, args.backend, basis, args.tf32, total))
            for t, key, cnt in rows[:12]:
                print("  %8.1f us  %5.1f%%  x%d  %s" % (t, 100 * t / total, cnt, key))


if __name__ == "__main__":
    main()
