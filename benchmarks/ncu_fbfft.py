#!/usr/bin/env python3
"""One call of each fbfft kernel of interest at B = 16384, forward and inverse, for Nsight Compute
(scripts/fbfft-check runs it under ncu): 2-D n = 16, 32, 64 (register kernels) and 128 (lane
kernel), 1-D n = 64 and 256 (lane kernels).

    python3 benchmarks/ncu_fbfft.py [--registers 8,16,64] [--cufft]

--registers: only the 2-D register kernels of these sizes.
--cufft: also torch.fft.rfft2 / irfft2 (cuFFT) on the same images, for the kernel times beside.
"""
from __future__ import annotations

import common

import torch  # noqa: E402

import fastlayers  # noqa: E402,F401
from fastlayers import fbfft  # noqa: E402


def ints(s):
    return [int(v) for v in s.split(",") if v]


def main(argv=None):
    ap = common.parser(__doc__, results=False)
    ap.add_argument("--registers", type=ints, default=None)
    ap.add_argument("--cufft", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        common.log("no CUDA device: nothing to profile")
        return
    for n in args.registers or (16, 32, 64, 128):
        x = torch.randn(16384, n, n, device="cuda")
        fbfft.irfft2(fbfft.rfft2(x, (n, n)), (n, n), (n, n))
        if args.cufft:
            torch.fft.irfft2(torch.fft.rfft2(x), s=(n, n))
    if not args.registers:
        for n in (64, 256):
            x = torch.randn(16384, n, device="cuda")
            fbfft.irfft(fbfft.rfft(x, n), n, n)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
