"""Threads per block of the 2-D fbfft register kernels: every built block size against cuFFT, in
one process (needs a build with FASTLAYERS_FBFFT_BLOCK_SWEEP=1, which builds 32, 64, 128 and 256).

    python3 benchmarks/sweep_fbfft_blocks.py [--out DIR] [--conv-only] [--io]

Rows: 2-D R2C and C2R, row-major spectra, n = 8..64 and the padded reads 13, 27, 57, at
B = 16384 and at a batch of about 256 MiB of input; then the fbfft convolution's forward pass
(frequency-major spectra, images adjacent) at three of the paper's shapes. Times are CUDA-graph
replays as in bench_fbfft.py; x = cuFFT time / fbfft time.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fastlayers  # noqa: E402,F401
from fastlayers import _C  # noqa: E402
from bench_fbfft import pair_2d, time_graph  # noqa: E402

THREADS = (32, 64, 128, 256)
MEASURED_IO = [("", 1)]  # (name, direct-io mode)
ALL_IO = MEASURED_IO + [("_staged", 0), ("_direct", 2)]  # --io: also always staged, always direct


def transforms(rows, io_modes):
    print("| n (input) | B | kind | cuFFT ms | " +
          " | ".join("x @%d (%s)" % (t, " / ".join(io or "measured" for io, _ in io_modes))
                     for t in THREADS) + " |")
    print("|---|---|---|---|" + "---|" * len(THREADS))
    for n, h in [(8, 8), (16, 16), (32, 32), (64, 64), (16, 13), (32, 27), (64, 57)]:
        for B in (16384, max(65536, (1 << 28) // (4 * n * n) // 4096 * 4096)):
            x = torch.randn(B, h, h, device="cuda")
            X = torch.fft.rfft2(x, s=(n, n))
            for kind in ("r2c", "c2r"):
                if kind == "c2r" and h != n:
                    continue
                cu, fb = pair_2d(kind, n, x, X)
                ref = cu()
                row = {"n": n, "h": h, "B": B, "kind": kind, "cufft_ms": time_graph(cu)}
                cells = []
                for t in THREADS:
                    cell = []
                    for io, mode in io_modes:
                        _C._fbfft_set_block_threads(t)
                        _C._fbfft_set_direct_io(mode)
                        try:
                            got = fb()
                            err = ((got - ref).abs().max() / ref.abs().max()).item()
                            assert err < 1e-5, (n, h, B, kind, t, io, err)
                            row["ms_%d%s" % (t, io)] = ms = time_graph(fb)
                        finally:
                            _C._fbfft_set_block_threads(0)
                            _C._fbfft_set_direct_io(1)
                        cell.append("%.2f" % (row["cufft_ms"] / ms))
                    cells.append(" / ".join(cell))
                rows.append(row)
                print("| %d (%d) | %d | %s | %.4f | %s |" % (n, h, B, kind, row["cufft_ms"],
                                                             " | ".join(cells)))
            del x, X
            torch.cuda.empty_cache()


def convolutions(rows):
    fl = torch.ops.fastlayers
    print()
    print("fbfft convolution forward (fp32), ms per block size")
    print("| x (basis) | S = f = f' | " + " | ".join("ms @%d" % t for t in THREADS) + " |")
    print("|---|---|" + "---|" * len(THREADS))
    # fp32 GEMMs: the convolution allows TF32 only where PyTorch allows it for convolutions
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for n, S in ((13, 128), (27, 128), (57, 64)):
        basis = [1 << (n - 1).bit_length()] * 2
        x = torch.randn(S, S, n, n, device="cuda")
        w = torch.randn(S, S, 3, 3, device="cuda")
        ref = torch.nn.functional.conv2d(x, w)
        row = {"conv_n": n, "S": S, "basis": basis}
        for t in THREADS:
            _C._fbfft_set_block_threads(t)
            try:
                fn = lambda: fl.fft_conv2d(x, w, None, [0, 0], basis, False, "fbfft")  # noqa: E731
                err = ((fn() - ref).abs().max() / ref.abs().max()).item()
                assert err < 1e-4, (n, S, t, err)
                row["ms_%d" % t] = time_graph(fn)
            finally:
                _C._fbfft_set_block_threads(0)
        rows.append(row)
        print("| %d (%d) | %d | %s |" % (n, basis[0], S,
                                        " | ".join("%.4f" % row["ms_%d" % t] for t in THREADS)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--conv-only", action="store_true")
    ap.add_argument("--io", action="store_true",
                    help="each block size also with the spectrum staged and moved directly")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to sweep")
        return
    print("fbfft register kernels, threads per block, %s, torch %s"
          % (torch.cuda.get_device_name(), torch.__version__))
    rows = []
    if not args.conv_only:
        transforms(rows, ALL_IO if args.io else MEASURED_IO)
    convolutions(rows)
    if args.out:
        (Path(args.out) / "fbfft-block-sweep.json").write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
