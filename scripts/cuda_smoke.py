"""Quick CUDA check of the FFT convolution ops against PyTorch: relative L2 errors vs float64,
per pass and dtype, next to PyTorch's own error. Prints one line per case; exits 1 on a failure."""
import sys

import torch
import torch.nn.functional as F

import fastlayers
from fastlayers.tuner import error_floor


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def passes(x, w, gy, pad):
    p = list(pad)
    cb = lambda m: torch.ops.aten.convolution_backward(gy, x, w, None, [1, 1], p, [1, 1], False,
                                                       [0, 0], 1, m)
    return (F.conv2d(x, w, None, 1, p), cb([True, False, False])[0], cb([False, True, False])[1])


def main():
    dev = torch.device("cuda")
    torch.manual_seed(0)
    bad = 0
    cases = [(2, 3, 4, 9, 11, 3, 5, 1, 2), (8, 16, 32, 16, 16, 3, 3, 1, 1),
             (4, 64, 64, 32, 32, 9, 9, 0, 0), (3, 5, 7, 13, 8, 13, 1, 6, 0)]
    for S, C, K, H, W, kh, kw, ph, pw in cases:
        pad = (ph, pw)
        basis = fastlayers.ops.default_basis((H, W), pad)
        x = torch.randn(S, C, H, W, device=dev)
        w = torch.randn(K, C, kh, kw, device=dev)
        gy = torch.randn(S, K, H + 2 * ph - kh + 1, W + 2 * pw - kw + 1, device=dev)
        ref = passes(x.double(), w.double(), gy.double(), pad)
        for dt, tf32 in ((torch.float64, False), (torch.float32, False), (torch.float32, True),
                         (torch.float16, False), (torch.bfloat16, False)):
            torch.backends.cudnn.allow_tf32 = tf32
            xd, wd, gd = x.to(dt), w.to(dt), gy.to(dt)
            native = passes(xd, wd, gd, pad)
            ours = (torch.ops.fastlayers.fft_conv2d(xd, wd, None, pad, basis, tf32),
                    torch.ops.fastlayers.fft_conv2d_input_grad(gd, wd, pad, basis, tf32),
                    torch.ops.fastlayers.fft_conv2d_weight_grad(gd, xd, pad, basis, tf32))
            for name, o, n, r in zip(("fwd", "igrad", "wgrad"), ours, native, ref):
                eo, en = rel(o, r), rel(n, r)
                tol = max(2 * en, error_floor(dt, tf32))
                ok = o.dtype == dt and o.shape == r.shape and eo <= tol
                bad += not ok
                print("%-5s %-9s tf32=%d %-30s ours %.2e  torch %.2e  %s" % (
                    name, str(dt)[6:], tf32, (S, C, K, H, W, kh, kw, ph, pw), eo, en,
                    "ok" if ok else "FAIL"))
    print("smoke:", "FAILED %d" % bad if bad else "all ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
