"""One call of each fbfft kernel of interest at B = 16384, forward and inverse, for Nsight
Compute (scripts/fbfft-check runs it under ncu): 2-D n = 16, 32, 64 (register kernels), 64 and 128
(lane kernels), 1-D n = 64 and 256 (lane kernels).

    python3 benchmarks/ncu_fbfft.py [--registers 8,16,64] [--threads 128,32]

--registers: only the 2-D register kernels of these sizes, once per block size in --threads
(block sizes other than 128 need a FASTLAYERS_FBFFT_BLOCK_SWEEP=1 build).
--cufft: also torch.fft.rfft2 / irfft2 (cuFFT) on the same images, for the kernel times beside.
"""
import argparse

import torch

import fastlayers  # noqa: F401
from fastlayers import _C, fbfft


def ints(s):
    return [int(v) for v in s.split(",") if v]


ap = argparse.ArgumentParser()
ap.add_argument("--registers", type=ints, default=None)
ap.add_argument("--threads", type=ints, default=[0])
ap.add_argument("--cufft", action="store_true")
args = ap.parse_args()

if args.registers:
    for n in args.registers:
        x = torch.randn(16384, n, n, device="cuda")
        for t in args.threads:
            _C._fbfft_set_block_threads(t)
            X = fbfft.rfft2(x, (n, n))
            fbfft.irfft2(X, (n, n), (n, n))
        _C._fbfft_set_block_threads(0)
        if args.cufft:
            torch.fft.irfft2(torch.fft.rfft2(x), s=(n, n))
else:
    for n, lanes in ((16, False), (32, False), (64, False), (64, True), (128, True)):
        _C._fbfft_set_lanes_2d_min(64 if lanes else 128)
        x = torch.randn(16384, n, n, device="cuda")
        X = fbfft.rfft2(x, (n, n))
        fbfft.irfft2(X, (n, n), (n, n))
    _C._fbfft_set_lanes_2d_min(128)
    for n in (64, 256):
        x = torch.randn(16384, n, device="cuda")
        fbfft.irfft(fbfft.rfft(x, n), n, n)
torch.cuda.synchronize()
