#!/usr/bin/env python3
"""A tiny run of every fastlayers CUDA kernel: the three FFT-convolution passes, the fbfft
transforms, the Winograd passes and the LSTM (fp32, Winograd and LSTM fp16 too; small shapes),
checked against PyTorch on the CPU. Meant to run under
compute-sanitizer (scripts/gpu-check: memcheck, initcheck, racecheck): it touches cuDNN nowhere,
so the sanitizer sees only fastlayers' kernels, cuFFT and cuBLAS. The passes run through
fastlayers._C.testing with the GEMMs' conjugate skip forced wherever the basis allows, and the
fbfft transforms with each spectrum movement, so that every kernel path runs.

    python3 scripts/kernels_smoke.py [--device cuda|cpu]
"""
import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fastlayers  # noqa: E402,F401
from fastlayers import _C  # noqa: E402

testing = _C.testing

# S, C, K, H, W, kh, kw, padding, basis (None: the default basis)
CASES = [
    (2, 3, 4, 9, 9, 3, 3, (0, 0), None),
    (2, 3, 4, 9, 9, 3, 3, (1, 1), (16, 16)),
    (1, 2, 3, 7, 10, 4, 3, (1, 2), (12, 14)),
    (3, 5, 2, 13, 13, 5, 5, (2, 2), (17, 20)),
    (2, 4, 4, 16, 16, 7, 7, (0, 0), (16, 16)),
]


def conv_pass(pass_, a, b, bias, padding, basis, backend="cufft"):
    """One pass as its op computes it, the GEMMs without the conjugate rows wherever the basis
    allows (square, even, 4..32), regardless of the time rule that keeps these tiny problems off
    it: the sanitizers then see the pointer and fill kernels (cuFFT) and the inverse that takes the
    rows as implied (fbfft)."""
    return testing.fft_conv2d_pass(pass_, a, b, bias, list(padding), list(basis), False, backend,
                                   [0, 0], conjugate_skip=2)


def fbfft_cases(dev):
    """Each fbfft transform once per size class, with padding, windows and both layouts; the
    convolution on fbfft at bases 32, 64 and 128 (the frequency-major layout, the clipped inverse
    with bias)."""
    from fastlayers import fbfft
    worst = 0.0
    g = torch.Generator().manual_seed(1)
    for n in (2, 4, 8, 16, 32, 64, 128):
        x = torch.randn(3, max(1, n - 3), n + 1, generator=g, dtype=torch.float64)
        for transposed in (False, True):
            X = fbfft.rfft2(x, (n, n), (-1, 1), transposed)
            y = fbfft.irfft2(X, (n, n), (max(1, n - 2), n), (1, 0), transposed)
            X1 = fbfft.rfft(x, 2 * n, -2)
            y1 = fbfft.irfft(X1, 2 * n, n, 1)
            xd = x.float().to(dev)
            got = [fbfft.rfft2(xd, (n, n), (-1, 1), transposed),
                   fbfft.irfft2(X.to(torch.complex64).to(dev), (n, n), (max(1, n - 2), n), (1, 0),
                                transposed),
                   fbfft.rfft(xd, 2 * n, -2), fbfft.irfft(X1.to(torch.complex64).to(dev), 2 * n, n, 1)]
            for out, ref in zip(got, (X, y, X1, y1)):
                out = out.cpu().to(ref.dtype)
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                worst = max(worst, err)
        print("fbfft n=%d: worst relative error so far %.2e" % (n, worst), flush=True)
    if dev == "cuda":  # spectra always staged through shared memory (0), always direct (2)
        for mode in (0, 2):
            for n in (8, 16, 64, 256):
                x = torch.randn(5, n - 1, generator=g, dtype=torch.float64)
                X1 = fbfft.rfft(x, n, -1)
                y1 = fbfft.irfft(X1, n, n - 2, 1)
                got = [testing.fbfft_rfft(x.float().to(dev), n, -1, direct_io=mode),
                       testing.fbfft_irfft(X1.to(torch.complex64).to(dev), n, n - 2, 1,
                                           direct_io=mode)]
                refs = [X1, y1]
                if n <= 64:  # 2-D, a 16-byte aligned window
                    x2 = torch.randn(3, n, n + 4, generator=g, dtype=torch.float64)
                    X2 = fbfft.rfft2(x2, (n, n), (0, 4))
                    refs += [X2, fbfft.irfft2(X2, (n, n), (n, n + 4), (0, -4))]
                    got += [testing.fbfft_rfft2(x2.float().to(dev), (n, n), (0, 4),
                                                direct_io=mode),
                            testing.fbfft_irfft2(X2.to(torch.complex64).to(dev), (n, n),
                                                 (n, n + 4), (0, -4), direct_io=mode)]
                for out, ref in zip(got, refs):
                    out = out.cpu().to(ref.dtype)
                    worst = max(worst, ((out - ref).abs().max() / ref.abs().max()).item())
            print("fbfft, spectra %s: worst relative error so far %.2e"
                  % ("staged" if mode == 0 else "direct", worst), flush=True)
        # inputs wholly inside the window (implicit zero padding), row-major spectra
        for n in (8, 16, 32, 64):
            x = torch.randn(3, n - 3, n - 5, generator=g, dtype=torch.float64)
            ref = fbfft.rfft2(x, (n, n), (-1, -2))
            out = fbfft.rfft2(x.float().to(dev), (n, n), (-1, -2)).cpu().to(ref.dtype)
            worst = max(worst, ((out - ref).abs().max() / ref.abs().max()).item())
        print("fbfft, inputs inside the window: worst relative error so far %.2e" % worst,
              flush=True)
        # 1-D forward and clipped inverse at a batch that takes the register kernels
        x = torch.randn((1 << 20) + 1, 7, generator=g, dtype=torch.float64)
        ref = fbfft.rfft(x, 8, -1)
        out = fbfft.rfft(x.float().to(dev), 8, -1).cpu().to(ref.dtype)
        worst = max(worst, ((out - ref).abs().max() / ref.abs().max()).item())
        y_ref = fbfft.irfft(ref, 8, 5, 1)
        y = fbfft.irfft(ref.to(torch.complex64).to(dev), 8, 5, 1).cpu().to(y_ref.dtype)
        worst = max(worst, ((y - y_ref).abs().max() / y_ref.abs().max()).item())
        print("fbfft 1-D, 2^20 + 1 lines: worst relative error so far %.2e" % worst, flush=True)
    # C = 3: the small-channel products on row-major spectra (128 x 1 threads at 128 x 128, 32 x 8
    # with shared-memory sums below); C = 6 at 128 x 128 and 32 x 64: staged transposes + GEMMs;
    # C = 6 at 32 x 32: GEMMs over the frequencies without the conjugate rows, which the inverse
    # takes as implied.
    for basis, C in ((128, 3), (64, 3), (128, 6), ((32, 64), 6), ((32, 64), 2), (32, 6)):
        x = torch.randn(2, C, 30, 27, generator=g, dtype=torch.float64)
        w = torch.randn(4, C, 3, 5, generator=g, dtype=torch.float64)
        b = torch.randn(4, generator=g, dtype=torch.float64)
        gy = torch.randn(2, 4, 30, 27, generator=g, dtype=torch.float64)
        ref = (F.conv2d(x, w, b, 1, (1, 2)),) + tuple(torch.ops.aten.convolution_backward(
            gy, x, w, None, [1, 1], [1, 2], [1, 1], False, [0, 0], 1, [True, True, False])[:2])
        xd, wd, bd, gyd = (t.float().to(dev) for t in (x, w, b, gy))
        nb = list(basis) if isinstance(basis, tuple) else [basis, basis]
        got = (conv_pass(0, xd, wd, bd, (1, 2), nb, "fbfft"),
               conv_pass(1, gyd, wd, None, (1, 2), nb, "fbfft"),
               conv_pass(2, gyd, xd, None, (1, 2), nb, "fbfft"))
        for out, r in zip(got, ref):
            out = out.double().cpu()
            worst = max(worst, ((out - r).norm() / r.norm()).item())
        print("fbfft convolution at %dx%d, C = %d: worst relative error so far %.2e"
              % (nb[0], nb[1], C, worst), flush=True)
    return worst


def conv3x3_problem(g, S, C, K, H, W, pad):
    """x, w, b, gy of a 3x3 convolution in float64 from generator g, and PyTorch's three passes
    (output, input gradient, weight gradient)."""
    x = torch.randn(S, C, H, W, generator=g, dtype=torch.float64)
    w = torch.randn(K, C, 3, 3, generator=g, dtype=torch.float64)
    b = torch.randn(K, generator=g, dtype=torch.float64)
    gy = torch.randn(S, K, H + 2 * pad[0] - 2, W + 2 * pad[1] - 2, generator=g,
                     dtype=torch.float64)
    ref = (F.conv2d(x, w, b, 1, pad),) + tuple(torch.ops.aten.convolution_backward(
        gy, x, w, None, [1, 1], list(pad), [1, 1], False, [0, 0], 1, [True, True, False])[:2])
    return x, w, b, gy, ref


def winograd_cases(dev):
    """Every Winograd tile of every pass, fp32 and fp16 (the float-product GEMM), with padding 0..3
    (3: the input gradient's windows start inside grad_y), one chunk and several (the weight
    gradient's accumulation); on CUDA run directly, recorded and replayed as a graph."""
    worst = 0.0
    reps = 3 if dev == "cuda" else 1
    replays = _C.step_graph_replays() if dev == "cuda" else 0
    g = torch.Generator().manual_seed(2)
    for S, C, K, H, W, pad in ((2, 3, 4, 9, 7, (1, 1)), (3, 5, 2, 6, 11, (0, 3)),
                               (1, 2, 3, 2, 3, (2, 1))):
        x, w, b, gy, ref = conv3x3_problem(g, S, C, K, H, W, pad)
        # fp16: a loose bound (F(6x6,3x3) rounds its fp16 transforms coarsely); accuracy is
        # tests/winograd's business, this run is for the sanitizers.
        for dtype, bound in ((torch.float32, 1e-5), (torch.float16, 5e-2)):
            xd, wd, bd, gyd = (t.to(dev, dtype) for t in (x, w, b, gy))
            operands = ((xd, wd, bd), (gyd, wd, None), (gyd, xd, None))
            for pass_ in range(3):
                for tile in ((2, 4) if pass_ == 2 else (2, 4, 6)):
                    # the ops' bound; one sample per chunk. On CUDA each call three times: run
                    # directly, recorded into a graph, replayed (the result's memory reused).
                    for chunk_bytes, _ in itertools.product((0, 1), range(reps)):
                        out = testing.winograd_conv2d_pass(pass_, *operands[pass_], list(pad),
                                                           tile, False, chunk_bytes)
                        r = ref[pass_]
                        err = ((out.double().cpu() - r).norm() / r.norm()).item()
                        del out
                        worst = max(worst, err / bound * 1e-5)  # in units of the fp32 bound
                        if err > bound:
                            print("winograd pass %d tile %d %s: rel err %.2e > %.0e"
                                  % (pass_, tile, dtype, err, bound), flush=True)
            for tile in (2, 4, 6):  # the forward with its filters transformed ahead
                fl = torch.ops.fastlayers
                U = fl.winograd_filter_transform(wd, tile)
                out = fl.winograd_conv2d(xd, wd, bd, list(pad), tile, False, False, U)
                err = ((out.double().cpu() - ref[0]).norm() / ref[0].norm()).item()
                worst = max(worst, err / bound * 1e-5)
                if err > bound:
                    print("winograd filters ahead tile %d %s: rel err %.2e > %.0e"
                          % (tile, dtype, err, bound), flush=True)
        print("winograd S=%d C=%d K=%d %dx%d pad=%s: worst (scaled to fp32) so far %.2e"
              % (S, C, K, H, W, pad, worst), flush=True)
    if dev == "cuda":
        worst = max(worst, winograd_tf32_input_grad_cases(g))
        if replays == _C.step_graph_replays():
            print("winograd: no pipeline call replayed a graph", flush=True)
            worst = float("inf")
        worst = max(worst, winograd_fused_cases(g))
    return worst


def winograd_tf32_input_grad_cases(g):
    """The TF32 input gradient, whose turned filters go through shared memory in tiles of 32 k x 8
    c (TurnedFilterJob): one tile, partial, and several in both directions, each partial, in one
    chunk and several."""
    worst = 0.0
    for S, C, K, H, W, pad in ((2, 3, 4, 9, 7, (1, 1)), (2, 17, 33, 5, 6, (1, 1))):
        x, w, b, gy, ref = conv3x3_problem(g, S, C, K, H, W, pad)
        bound = 5e-2  # loose, as fp16's above: this run is for the sanitizers
        gyd, wd = gy.to("cuda", torch.float32), w.to("cuda", torch.float32)
        for tile, chunk_bytes in itertools.product((2, 4, 6), (0, 1)):
            out = testing.winograd_conv2d_pass(1, gyd, wd, None, list(pad), tile, True,
                                               chunk_bytes)
            err = ((out.double().cpu() - ref[1]).norm() / ref[1].norm()).item()
            worst = max(worst, err / bound * 1e-5)
            if err > bound:
                print("winograd tf32 input gradient tile %d: rel err %.2e > %.0e"
                      % (tile, err, bound), flush=True)
        print("winograd tf32 input gradient S=%d C=%d K=%d %dx%d: worst (scaled to fp32) so far "
              "%.2e" % (S, C, K, H, W, worst), flush=True)
    return worst


def winograd_fused_cases(g):
    """The fused kernel (forward and input gradient, fp16 and bf16, and fp32 with TF32 and with
    split TF32 products where the data's width is a multiple of 4): partial blocks of result
    channels, tile rectangles and reduction chunks, padding 0..4, odd widths (patches through
    registers), even ones (by 4-byte cp.async, windows at odd and even columns) and multiples of 8
    (by TMA, windows 0..3 words into the box's rows), and on an H100 2-3 items a block (a stream
    that crosses items, reuses each U stage and refills the stage an exchange used)."""
    worst = 0.0
    fl = torch.ops.fastlayers
    for S, C, K, H, W, pad in ((2, 17, 65, 9, 7, (1, 1)), (3, 33, 18, 6, 11, (0, 3)),
                               (1, 2, 3, 2, 3, (2, 1)), (8, 96, 130, 30, 34, (1, 1)),
                               (2, 24, 70, 16, 18, (2, 2)), (2, 16, 16, 7, 12, (3, 3)),
                               (8, 96, 130, 30, 32, (1, 1)), (2, 24, 20, 9, 18, (2, 4))):
        x, w, b, gy, ref = conv3x3_problem(g, S, C, K, H, W, pad)
        for dtype, tf32, bound in ((torch.float16, False, 5e-3), (torch.bfloat16, False, 4e-2),
                                   (torch.float32, True, 2e-3), (torch.float32, False, 1e-5)):
            xd, wd, bd, gyd = (t.to("cuda", dtype) for t in (x, w, b, gy))
            f32 = dtype == torch.float32  # (fused float32: widths of 4 k)
            outs = (fl.winograd_conv2d(xd, wd, bd, list(pad), 2, tf32, True)
                    if not f32 or W % 4 == 0 else None,
                    fl.winograd_conv2d_input_grad(gyd, wd, list(pad), 2, tf32, True)
                    if not f32 or gy.shape[3] % 4 == 0 else None)
            for pass_, (out, r) in enumerate(zip(outs, ref)):
                if out is None:
                    continue
                err = ((out.double().cpu() - r).norm() / r.norm()).item()
                worst = max(worst, err / bound * 1e-5)
                if err > bound:
                    print("winograd fused pass %d %s%s: rel err %.2e > %.0e"
                          % (pass_, dtype, " tf32" if tf32 else "", err, bound), flush=True)
        print("winograd fused S=%d C=%d K=%d %dx%d pad=%s: worst (scaled to fp32) so far %.2e"
              % (S, C, K, H, W, pad, worst), flush=True)
    return worst


def lstm_cases(dev):
    """The LSTM op forward and backward, padded and packed, both directions, with and without a
    projection, fp32 and fp16, against the CPU op in float64 (itself checked against nn.LSTM by
    tests/lstm); lstm_persistent's results and reserve, and lstm_backward_persistent's gradients,
    against the step-wise ops' where they run."""
    worst = 0.0
    g = torch.Generator().manual_seed(3)
    fl = torch.ops.fastlayers
    for T, B, I, H, R, lengths, reverse in ((4, 3, 5, 6, 0, None, False),
                                            (5, 3, 4, 8, 3, (5, 3, 1), True),
                                            (3, 2, 2, 4, 0, (3, 2), True),
                                            (1, 1, 3, 5, 2, None, False),
                                            # batch > 4: the persistent kernel's tensor cores
                                            # (fp16), H padded to 16
                                            (3, 17, 4, 12, 0, None, True),
                                            # the persistent backward (batches up to 16)
                                            (3, 9, 4, 12, 0, None, False),
                                            # fp16: each forward step one kernel (H 128),
                                            # padded and packed
                                            (3, 20, 5, 128, 0, None, False),
                                            (3, 18, 5, 128, 0, (3,) * 10 + (2,) * 6 + (1,) * 2,
                                             True),
                                            # fp16: the persistent forward and backward on
                                            # clusters (H 128, 256, 512: 4, 8 and 16 blocks;
                                            # one cluster, several, and at B 100 H 512 two
                                            # n-tiles a cluster)
                                            (3, 9, 5, 128, 0, None, True),
                                            (2, 3, 4, 256, 0, None, False),
                                            (2, 10, 4, 512, 0, None, True),
                                            (2, 100, 4, 512, 0, None, False)):
        # (fp32 inputs of I = 4 are 16-byte rows: there the input GEMM runs in chunks. No fp16
        # case has such rows: initcheck reports a cuBLAS fp16 tensor-core GEMM's whole result as
        # uninitialized when read, torch.mm's alone included, so it would drown what it finds.)
        x = torch.randn(T, B, I, generator=g, dtype=torch.float64)
        Rr = R or H
        args = [torch.randn(B, Rr, generator=g, dtype=torch.float64),
                torch.randn(B, H, generator=g, dtype=torch.float64),
                torch.randn(4 * H, I, generator=g, dtype=torch.float64) * 0.5,
                torch.randn(4 * H, Rr, generator=g, dtype=torch.float64) * 0.5,
                torch.randn(4 * H, generator=g, dtype=torch.float64),
                torch.randn(4 * H, generator=g, dtype=torch.float64),
                torch.randn(R, H, generator=g, dtype=torch.float64) * 0.5 if R else None]
        bs = None
        if lengths is not None:
            packed = torch.nn.utils.rnn.pack_padded_sequence(x, list(lengths))
            x, bs = packed.data, packed.batch_sizes
        ref = fl.lstm(x, *args, bs, reverse, False)
        dy = torch.randn(ref[0].shape, generator=g, dtype=torch.float64)
        dh = torch.randn(ref[1].shape, generator=g, dtype=torch.float64)
        ref_g = fl.lstm_backward(dy, dh, None, x, args[0], args[1], args[2], args[3], args[6], bs,
                                 ref[3], ref[4], reverse, False, True, True)
        for dtype, bound in ((torch.float32, 1e-5), (torch.float16, 5e-2)):
            cast = [a.to(dev, dtype) if a is not None else None for a in [x] + args]
            # twice: a key's first call runs the step loop directly, its second records and
            # replays the graph (the input GEMM's chunks, where its rows are 16-byte aligned, on
            # the graph's second branch)
            out = fl.lstm(*cast, bs, reverse, False)
            out = fl.lstm(*cast, bs, reverse, False)
            if bs is None and not R:  # the persistent kernel's forward (padded, no projection)
                outp = fl.lstm_persistent(*cast, bs, reverse, False)
                for got, r in zip(outp, out):
                    err = ((got.double() - r.double()).norm() / r.double().norm()).item()
                    if not err <= bound:
                        print("lstm_persistent T=%d B=%d H=%d %s: rel err %.2e against lstm > %.0e"
                              % (T, B, H, dtype, err, bound), flush=True)
                    worst = max(worst, err / bound * 1e-5)
            bargs = (dy.to(dev, dtype), dh.to(dev, dtype), None, cast[0], cast[1], cast[2],
                     cast[3], cast[4], cast[7], bs, out[3], out[4], reverse, False, True, True)
            grads = fl.lstm_backward(*bargs)
            if bs is None and not R and fastlayers.lstm.persistent_fits(B, H, dtype, dev, True):
                for got, r in zip(fl.lstm_backward_persistent(*bargs), grads):
                    if r.numel() == 0:
                        continue
                    err = ((got.double() - r.double()).norm() / r.double().norm()).item()
                    if not err <= bound:
                        print("lstm_backward_persistent T=%d B=%d H=%d %s: rel err %.2e against "
                              "lstm_backward > %.0e" % (T, B, H, dtype, err, bound), flush=True)
                    worst = max(worst, err / bound * 1e-5)
            for got, r in list(zip(out[:3], ref[:3])) + list(zip(grads, ref_g)):
                if r.numel() == 0:
                    continue
                err = ((got.double().cpu() - r).norm() / r.norm()).item()
                worst = max(worst, err / bound * 1e-5)
                if err > bound:
                    print("lstm T=%d B=%d H=%d R=%d %s: rel err %.2e > %.0e"
                          % (T, B, H, R, dtype, err, bound), flush=True)
        print("lstm T=%d B=%d I=%d H=%d R=%d lengths=%s reverse=%s: worst (scaled to fp32) so far "
              "%.2e" % (T, B, I, H, R, lengths, reverse, worst), flush=True)
    # lstm_stack (the wavefront) against the CPU op in float64, with more layers than steps
    for T, B, I, H, L in ((4, 3, 5, 6, 3), (2, 5, 3, 12, 4)):
        x = torch.randn(T, B, I, generator=g, dtype=torch.float64)
        h0, c0 = (torch.randn(L, B, H, generator=g, dtype=torch.float64) for _ in range(2))
        w = []
        for layer in range(L):
            w += [torch.randn(4 * H, I if layer == 0 else H, generator=g, dtype=torch.float64) *
                  0.5, torch.randn(4 * H, H, generator=g, dtype=torch.float64) * 0.5,
                  torch.randn(4 * H, generator=g, dtype=torch.float64),
                  torch.randn(4 * H, generator=g, dtype=torch.float64)]
        ref = fl.lstm_stack(x, h0, c0, w, True)
        for dtype, bound in ((torch.float32, 1e-5), (torch.float16, 5e-2)):
            out = fl.lstm_stack(x.to(dev, dtype), h0.to(dev, dtype), c0.to(dev, dtype),
                                [t.to(dev, dtype) for t in w], True)
            for got, r in zip(out, ref):
                if r.numel() == 0:
                    continue
                err = ((got.double().cpu() - r).norm() / r.norm()).item()
                worst = max(worst, err / bound * 1e-5)
                if err > bound:
                    print("lstm_stack T=%d B=%d H=%d L=%d %s: rel err %.2e > %.0e"
                          % (T, B, H, L, dtype, err, bound), flush=True)
        print("lstm_stack T=%d B=%d H=%d L=%d: worst (scaled to fp32) so far %.2e"
              % (T, B, H, L, worst), flush=True)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", choices=("conv", "fbfft", "winograd", "lstm"), default=None,
                    help="run one family of kernels")
    args = ap.parse_args()
    dev = args.device
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    worst = 0.0
    for S, C, K, H, W, kh, kw, pad, basis in (CASES if args.only in (None, "conv") else ()):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(S, C, H, W, generator=g, dtype=torch.float64)
        w = torch.randn(K, C, kh, kw, generator=g, dtype=torch.float64)
        b = torch.randn(K, generator=g, dtype=torch.float64)
        oh, ow = H + 2 * pad[0] - kh + 1, W + 2 * pad[1] - kw + 1
        gy = torch.randn(S, K, oh, ow, generator=g, dtype=torch.float64)
        if basis is None:
            basis = fastlayers.ops.default_basis((H, W), pad)
        ref_y = F.conv2d(x, w, b, 1, pad)
        ref_gx, ref_gw, _ = torch.ops.aten.convolution_backward(
            gy, x, w, None, [1, 1], list(pad), [1, 1], False, [0, 0], 1, [True, True, False])
        xd, wd, bd, gyd = (t.float().to(dev) for t in (x, w, b, gy))
        got = {
            "fft_conv2d": (conv_pass(0, xd, wd, bd, pad, basis), ref_y),
            "fft_conv2d_input_grad": (conv_pass(1, gyd, wd, None, pad, basis), ref_gx),
            "fft_conv2d_weight_grad": (conv_pass(2, gyd, xd, None, pad, basis), ref_gw),
        }
        if dev == "cuda":
            torch.cuda.synchronize()
        for name, (out, ref) in got.items():
            out = out.double().cpu()
            assert out.shape == ref.shape, (name, out.shape, ref.shape)
            err = ((out - ref).norm() / ref.norm()).item()
            worst = max(worst, err)
            print("%-24s S=%d C=%d K=%d %dx%d k=%dx%d pad=%s basis=%s: rel err %.2e"
                  % (name, S, C, K, H, W, kh, kw, pad, tuple(basis), err), flush=True)
    if args.only in (None, "fbfft"):
        worst = max(worst, fbfft_cases(dev))
    if args.only in (None, "winograd"):
        worst = max(worst, winograd_cases(dev))
    if args.only in (None, "lstm"):
        worst = max(worst, lstm_cases(dev))
    ok = worst < 1e-5
    print("kernels_smoke on %s: worst relative error %.2e -> %s" % (dev, worst, "OK" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
