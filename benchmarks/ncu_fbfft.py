"""One call of each register kernel at B = 16384 (n = 16, 32, 64, forward and inverse), for
Nsight Compute: scripts/fbfft-check runs it under ncu."""
import torch

import fastlayers  # noqa: F401
from fastlayers import fbfft

for n in (16, 32, 64):
    x = torch.randn(16384, n, n, device="cuda")
    X = fbfft.rfft2(x, (n, n))
    fbfft.irfft2(X, (n, n), (n, n))
torch.cuda.synchronize()
