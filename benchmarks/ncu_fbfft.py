"""One call of each fbfft kernel of interest at B = 16384, forward and inverse, for Nsight
Compute (scripts/fbfft-check runs it under ncu): 2-D n = 16, 32, 64 (register kernels), 64 and 128
(lane kernels), 1-D n = 64 and 256 (lane kernels)."""
import torch

import fastlayers  # noqa: F401
from fastlayers import _C, fbfft

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
