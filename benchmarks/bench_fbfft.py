"""fbfft against cuFFT, batched real 1-D and 2-D transforms, one process, one device.

    python3 benchmarks/bench_fbfft.py [--out DIR] [--quick] [--ab] [--dims 1|2]

Method:
- cuFFT runs through torch.fft (rfft2/irfft2, rfft/irfft); with implicit padding (an h x h input
  read as an n x n transform) torch pads with a copy first, which is what a cuFFT user does.
- C2R is timed a second way, unscaled on both sides: torch.fft's normalized inverse scales in a
  kernel of its own after cuFFT's, which a program calling cuFFT directly (unnormalized C2R) does
  not run; torch.fft.irfft2 / irfft with norm="forward" leaves the inverse unscaled, and fbfft
  runs with normalized=False. "x unscaled" is that pair's ratio.
- cuFFT is also called directly ("x direct"): one cufftExec on a cached plan (fastlayers' plan
  cache, the one its cuFFT convolution uses), no framework around it and nothing torch adds: no
  clone of the C2R input (torch clones it because cuFFT's C2R overwrites its input; the direct
  call lets it), no normalization kernel. Both sides unnormalized for C2R; a padded read pads
  with a copy first, as a cuFFT user must. The overwritten spectrum holds garbage after the first
  call, which costs a transform the same time (checked against torch.fft on a fresh copy first).
- Every candidate is timed twice: "eager" (one call between two CUDA events, median of trials,
  host overhead included when the kernel is shorter than the launch path) and "graph" (ten calls
  captured in a CUDA graph and replayed, median per call: device time only, as if cuFFT were called
  directly without the framework around it). Ratios use the graph times.
- GB/s count the real side read and the complex side written (R2C), or the reverse (C2R):
  B (4 h w + 8 n (n/2 + 1)). Copy bandwidth: a device-to-device copy of the same number of bytes,
  measured in the same run (read + write).
- Inputs of the large batches exceed the L2 cache; small ones (B = 1024, n <= 16) fit in it and are
  marked as such by their sizes.
"""
import argparse
import json
import statistics
from pathlib import Path

import torch

import fastlayers  # noqa: F401
from fastlayers import _C, fbfft


def time_eager(fn, trials=25):
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


def time_graph(fn, calls=10, trials=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    del g
    return statistics.median(times)


def copy_gbps(nbytes):
    """Device-to-device copy bandwidth (read + write) for a buffer of nbytes / 2 each way."""
    n = max(1, nbytes // 8)
    src = torch.empty(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = time_graph(lambda: dst.copy_(src))
    return 2 * n * 4 / ms / 1e6


def pair_2d(kind, n, x, X):
    """(cuFFT, fbfft) callables of the 2-D n x n transform: R2C of x, or C2R of X."""
    if kind == "r2c":
        return (lambda: torch.fft.rfft2(x, s=(n, n)), lambda: fbfft.rfft2(x, (n, n)))
    return (lambda: torch.fft.irfft2(X, s=(n, n)), lambda: fbfft.irfft2(X, (n, n), (n, n)))


def measure(kind, dims, n, h, B, copy_cache):
    shape = (B, h, h) if dims == 2 else (B, h)
    nbins = n * (n // 2 + 1) if dims == 2 else n // 2 + 1
    real_elems = h * h if dims == 2 else h
    nbytes = B * (4 * real_elems + 8 * nbins)
    x = torch.randn(*shape, device="cuda")
    if dims == 2:
        X = torch.fft.rfft2(x, s=(n, n))
        cu, fb = pair_2d(kind, n, x, X)
    else:
        X = torch.fft.rfft(x, n=n)
        if kind == "r2c":
            cu = lambda: torch.fft.rfft(x, n=n)  # noqa: E731
            fb = lambda: fbfft.rfft(x, n)  # noqa: E731
        else:
            cu = lambda: torch.fft.irfft(X, n=n)  # noqa: E731
            fb = lambda: fbfft.irfft(X, n, n)  # noqa: E731
    # Same answer first (the benchmark does not time a wrong kernel).
    ref, got = cu(), fb()
    err = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    row = {"kind": kind, "dims": dims, "n": n, "h": h, "B": B, "bytes": nbytes, "max_rel_err": err}
    row["cufft_eager_ms"] = time_eager(cu)
    row["fbfft_eager_ms"] = time_eager(fb)
    row["cufft_graph_ms"] = time_graph(cu)
    row["fbfft_graph_ms"] = time_graph(fb)
    if kind == "c2r":
        if dims == 2:
            cu_u = lambda: torch.fft.irfft2(X, s=(n, n), norm="forward")  # noqa: E731
            fb_u = lambda: fbfft.irfft2(X, (n, n), (n, n), normalized=False)  # noqa: E731
        else:
            cu_u = lambda: torch.fft.irfft(X, n=n, norm="forward")  # noqa: E731
            fb_u = lambda: fbfft.irfft(X, n, n, normalized=False)  # noqa: E731
        ref_u, got_u = cu_u(), fb_u()
        row["max_rel_err_unscaled"] = (
            (got_u - ref_u).abs().max() / ref_u.abs().max().clamp_min(1e-30)).item()
        row["cufft_unscaled_graph_ms"] = time_graph(cu_u)
        row["fbfft_unscaled_graph_ms"] = time_graph(fb_u)
        row["ratio_unscaled"] = row["cufft_unscaled_graph_ms"] / row["fbfft_unscaled_graph_ms"]
    # cuFFT called directly (nh = 1: a 1-D plan)
    nh = n if dims == 2 else 1
    if kind == "r2c":
        if h == n:
            cu_d = lambda: _C._cufft_direct_rfft2(x, nh, n)  # noqa: E731
        else:
            pad = (0, n - h, 0, n - h) if dims == 2 else (0, n - h)
            cu_d = lambda: _C._cufft_direct_rfft2(  # noqa: E731
                torch.nn.functional.pad(x, pad), nh, n)
        got_d, ref_d = cu_d(), ref
    else:
        got_d = _C._cufft_direct_irfft2_(X.clone(), nh, n)
        ref_d = ref_u
        X_scratch = X.clone()  # overwritten by every call
        cu_d = lambda: _C._cufft_direct_irfft2_(X_scratch, nh, n)  # noqa: E731
    err_d = ((got_d - ref_d).abs().max() / ref_d.abs().max().clamp_min(1e-30)).item()
    assert err_d < 1e-5, ("cuFFT called directly disagrees with torch.fft", kind, dims, n, h, err_d)
    row["cufft_direct_graph_ms"] = time_graph(cu_d)
    row["ratio_direct"] = row["cufft_direct_graph_ms"] / (
        row["fbfft_graph_ms"] if kind == "r2c" else row["fbfft_unscaled_graph_ms"])
    if nbytes not in copy_cache:
        copy_cache[nbytes] = copy_gbps(nbytes)
    row["copy_GBps"] = copy_cache[nbytes]
    row["ratio"] = row["cufft_graph_ms"] / row["fbfft_graph_ms"]
    row["fbfft_GBps"] = nbytes / row["fbfft_graph_ms"] / 1e6
    row["cufft_GBps"] = nbytes / row["cufft_graph_ms"] / 1e6
    row["fbfft_pct_copy"] = 100.0 * row["fbfft_GBps"] / row["copy_GBps"]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="B = 16384 only")
    ap.add_argument("--ab", action="store_true",
                    help="also time each kernel with its spectrum always staged through shared "
                         "memory and always moved directly")
    ap.add_argument("--dims", type=int, choices=(1, 2), default=None,
                    help="only the 1-D or only the 2-D transforms")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: the fbfft benchmark compares CUDA kernels and has nothing to run")
        return
    dev = torch.cuda.get_device_name()
    cases = []
    # 2-D: (n, h): h < n is implicit padding.
    for n, h in [(8, 8), (16, 16), (32, 32), (64, 64), (128, 128), (16, 13), (32, 27), (64, 57)]:
        batches = [16384] if args.quick else [1024, 16384]
        if not args.quick:
            batches.append(max(16384, (1 << 30) // (4 * n * n) // 4096 * 4096))  # ~1 GiB input
        for B in sorted(set(batches)):
            cases.append((2, n, h, B))
    for n in [8, 16, 32, 64, 128, 256]:
        batches = [16384] if args.quick else [1024, 16384, (1 << 30) // (4 * n)]
        for B in batches:
            cases.append((1, n, n, B))
    rows, copy_cache = [], {}
    print("fbfft vs cuFFT (torch.fft), %s, torch %s" % (dev, torch.__version__))
    print("ratio x = cuFFT time / fbfft time (CUDA-graph replay, device time); "
          "%copy = fbfft GB/s / device-to-device copy GB/s of the same bytes")
    print("| dims | n (input) | B | kind | cuFFT ms | fbfft ms | x | fbfft GB/s | % copy | "
          "eager cuFFT ms | eager fbfft ms | max rel err | x unscaled | cuFFT direct ms | "
          "x direct |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cases = [c for c in cases if args.dims is None or c[0] == args.dims]
    for dims, n, h, B in cases:
        for kind in ("r2c", "c2r"):
            if kind == "c2r" and h != n:
                continue  # the padded cases are forward reads
            # 64 x 64 has two kernels (registers: the default; lanes: as 128 x 128): both timed.
            # --ab: also the spectrum always staged through shared memory, and always moved
            # directly (the default moves it directly where that measured faster).
            kernels = ["registers", "lanes"] if dims == 2 and n == 64 else [None]
            if args.ab and (dims == 1 and n >= 8 or dims == 2 and n <= 64):
                kernels += [(k or "") + io for k in kernels if k != "lanes"
                            for io in ("+staged", "+direct")]
            for kernel in kernels:
                _C._fbfft_set_lanes_2d_min(64 if kernel == "lanes" else 128)
                io = (kernel or "").split("+")[-1]
                _C._fbfft_set_direct_io({"staged": 0, "direct": 2}.get(io, 1))
                try:
                    r = measure(kind, dims, n, h, B, copy_cache)
                except torch.OutOfMemoryError:
                    print("| %d | %d (%d) | %d | %s | out of memory |" % (dims, n, h, B, kind))
                    torch.cuda.empty_cache()
                    continue
                finally:
                    _C._fbfft_set_lanes_2d_min(128)
                    _C._fbfft_set_direct_io(1)
                if kernel:
                    r["kernel"] = kernel
                rows.append(r)
                unscaled = "%.2f" % r["ratio_unscaled"] if "ratio_unscaled" in r else ""
                print("| %d | %d (%d)%s | %d | %s | %.4f | %.4f | %.2f | %.0f | %.0f | %.4f | "
                      "%.4f | %.1e | %s | %.4f | %.2f |" % (
                          dims, n, h, " " + kernel if kernel else "", B, kind,
                          r["cufft_graph_ms"], r["fbfft_graph_ms"], r["ratio"], r["fbfft_GBps"],
                          r["fbfft_pct_copy"], r["cufft_eager_ms"], r["fbfft_eager_ms"],
                          r["max_rel_err"], unscaled, r["cufft_direct_graph_ms"],
                          r["ratio_direct"]))
                torch.cuda.empty_cache()
    if args.out:
        path = Path(args.out) / "fbfft-bench.json"
        path.write_text(json.dumps({"device": dev, "torch": torch.__version__, "rows": rows},
                                   indent=1))


if __name__ == "__main__":
    main()
