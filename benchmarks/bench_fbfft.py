"""fbfft against cuFFT (torch.fft) for batched 2-D real transforms, same process, CUDA events,
median of trials, warm L2 disclosed (inputs of B = 16384 are 4 MiB..1 GiB).

    python3 benchmarks/bench_fbfft.py [--batch 16384] [--out DIR]

GB/s count the real input read and the complex output written (R2C), or the reverse (C2R).
"""
import argparse
import json
import statistics
from pathlib import Path

import torch

import fastlayers  # noqa: F401
from fastlayers import fbfft


def time_ms(fn, trials=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: the fbfft benchmark compares CUDA kernels and has nothing to run")
        return
    B = args.batch
    rows = []
    print("fbfft vs cuFFT (torch.fft), B = %d, %s" % (B, torch.cuda.get_device_name()))
    print("| n (input) | R2C cuFFT ms | R2C fbfft ms | x | fbfft GB/s | C2R cuFFT ms | C2R fbfft ms | x |")
    print("|---|---|---|---|---|---|---|---|")
    for n, h in [(8, 8), (16, 16), (32, 32), (64, 64), (128, 128), (16, 13), (32, 27), (64, 57)]:
        x = torch.randn(B, h, h, device="cuda")
        X = torch.fft.rfft2(x, s=(n, n))
        r2c_cufft = time_ms(lambda: torch.fft.rfft2(x, s=(n, n)))
        r2c_fb = time_ms(lambda: fbfft.rfft2(x, (n, n)))
        c2r_cufft = time_ms(lambda: torch.fft.irfft2(X, s=(n, n)))
        c2r_fb = time_ms(lambda: fbfft.irfft2(X, (n, n), (n, n)))
        nbytes = B * (h * h * 4 + n * (n // 2 + 1) * 8)
        row = {"n": n, "h": h, "B": B, "r2c_cufft_ms": r2c_cufft, "r2c_fbfft_ms": r2c_fb,
               "c2r_cufft_ms": c2r_cufft, "c2r_fbfft_ms": c2r_fb,
               "r2c_fbfft_GBps": nbytes / r2c_fb / 1e6}
        rows.append(row)
        print("| %d (%d) | %.3f | %.3f | %.2f | %.0f | %.3f | %.3f | %.2f |" % (
            n, h, r2c_cufft, r2c_fb, r2c_cufft / r2c_fb, row["r2c_fbfft_GBps"], c2r_cufft, c2r_fb,
            c2r_cufft / c2r_fb))
    if args.out:
        path = Path(args.out) / "fbfft-bench.json"
        path.write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                    "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
