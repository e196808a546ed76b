#!/usr/bin/env python3
"""fbfft against cuFFT: batched real 1-D and 2-D transforms, one process, one device.

    python3 benchmarks/bench_fbfft.py [--out DIR] [--quick] [--dims 1|2] [--io]

Per case (transform size n, input side h <= n, batch B) and direction (R2C; C2R when h = n):
- fbfft (fastlayers.fbfft), cuFFT called directly (one cufftExec on a cached plan, through
  fastlayers._C.testing.cufft_direct_rfft2 / cufft_direct_irfft2_: no clone of the C2R input, no
  normalisation; a padded read pads with a copy first, as a cuFFT user must) and cuFFT through
  torch.fft (rfft2 / irfft2, rfft / irfft; its C2R clones its input and normalises in a kernel of
  its own).
- Correctness first: each result against torch.fft in float64; fbfft and the direct call must be
  within max(4 x torch.fft's own error, 1e-6), or the case is recorded as failed, with no ratio.
- Device time: CUDA-graph replays (device time only, warm cache). The headline ratio is cuFFT
  called directly / fbfft, both unnormalised for C2R, the median of per-round ratios of
  interleaved trials; the ratio against torch.fft (normalised C2R on both sides) stands beside.
- Bandwidth: B (4 h w + 8 n (n/2 + 1)) bytes (real side and complex side once each) over the
  time, as a share of a device-to-device copy of as many bytes measured in the same run (the
  faster of torch's copy_ and an element-wise copy kernel).
- Called eagerly (batch 16384, the public calls of both: fbfft.rfft2 against
  torch.fft.rfft2, ...): wall clock of calls issued back to back to the device's completion (host
  and device together, as a script calling the transform pays), fbfft, torch.fft and torch.fft
  again (A/A) in one rotation per round, the median of per-round ratios; and each call's own host
  time, issued while a sleep kernel holds the device.
--io: also each kernel with its spectrum always staged through shared memory and always moved
directly (fastlayers._C.testing's direct_io argument; the default is the measured choice).

Writes DIR/fbfft-<device>.json and prints a markdown table. Without CUDA it says so and exits 0.
Exit status: 3 when a case failed its correctness check, 0 otherwise.
"""
from __future__ import annotations

import sys
import time

import common
from common import log

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fastlayers  # noqa: E402,F401
from fastlayers import _C, fbfft  # noqa: E402

TOL_FACTOR, TOL_FLOOR = 4.0, 1e-6
IO_MODES = {"measured": 1, "staged": 0, "direct": 2}


def cases(args):
    out = []
    if args.dims in (None, 2):  # (n, h): h < n is implicit zero padding
        for n, h in [(8, 8), (16, 16), (32, 32), (64, 64), (128, 128), (16, 13), (32, 27), (64, 57)]:
            batches = [16384] if args.quick else [1024, 16384,
                                                   max(16384, (1 << 30) // (4 * n * n) // 4096 * 4096)]
            out += [(2, n, h, B) for B in sorted(set(batches))]
    if args.dims in (None, 1):
        for n in [8, 16, 32, 64, 128, 256]:
            batches = [16384] if args.quick else [1024, 16384, (1 << 30) // (4 * n)]
            out += [(1, n, n, B) for B in batches]
    return out


def graph(fn):
    return common.graph_ms(fn, calls=10, trials=9)


def fbfft_call(kind, dims, n, io, x, X, normalized=True):
    """fbfft's transform with the spectrum-movement mode `io` (the public op for the measured
    default, the testing hook otherwise)."""
    t = _C.testing
    mode = IO_MODES[io]
    if kind == "r2c":
        if dims == 2:
            return ((lambda: fbfft.rfft2(x, (n, n))) if io == "measured" else
                    (lambda: t.fbfft_rfft2(x, (n, n), (0, 0), False, mode)))
        return ((lambda: fbfft.rfft(x, n)) if io == "measured" else
                (lambda: t.fbfft_rfft(x, n, 0, mode)))
    if dims == 2:
        return ((lambda: fbfft.irfft2(X, (n, n), (n, n), normalized=normalized)) if io == "measured"
                else (lambda: t.fbfft_irfft2(X, (n, n), (n, n), (0, 0), False, normalized, mode)))
    return ((lambda: fbfft.irfft(X, n, n, normalized=normalized)) if io == "measured" else
            (lambda: t.fbfft_irfft(X, n, n, 0, normalized, mode)))


EAGER_CALLS, EAGER_ROUNDS = 100, 15


def eager(torch_fn, fb_fn) -> dict:
    """The calls as a script makes them: torch.fft / fbfft and torch.fft / torch.fft (A/A), back
    to back to the device's completion; the held host time of each call."""
    r = common.ab_aa({"torch": torch_fn, "fbfft": fb_fn, "torch_twin": torch_fn}, "torch",
                     "fbfft", "torch_twin", EAGER_CALLS, EAGER_ROUNDS)
    r["torch_us"], r["fbfft_us"] = r["ab"]["a_ms"] * 1e3, r["ab"]["b_ms"] * 1e3
    # the sleep holds the device through 20 calls of a few tens of microseconds each
    held = [common.held_host_us(fn, sleep_cycles=30_000_000) for fn in (torch_fn, fb_fn)]
    r["host_torch_us"], r["host_fbfft_us"] = (h["host_us"] for h in held)
    r["host_held"] = all(h["held"] for h in held)  # False: a figure includes waiting
    return r


def checked(fn, ref, tol=None) -> dict:
    m = {"rel_err": common.rel_err(fn(), ref)}
    if tol is None or common.gate(m, tol):
        m.update(graph(fn))
    return m


def measure(kind, dims, n, h, B, io, copy_cache) -> dict:
    shape = (B, h, h) if dims == 2 else (B, h)
    nbins = n * (n // 2 + 1) if dims == 2 else n // 2 + 1
    nbytes = B * (4 * (h * h if dims == 2 else h) + 8 * nbins)
    row = {"kind": kind, "dims": dims, "n": n, "h": h, "B": B, "bytes": nbytes, "io": io}
    x = torch.randn(*shape, device="cuda")
    s = {"s": (n, n)} if dims == 2 else {"n": n}
    rfft = torch.fft.rfft2 if dims == 2 else torch.fft.rfft
    irfft = torch.fft.irfft2 if dims == 2 else torch.fft.irfft
    nh = n if dims == 2 else 1  # the direct hook makes a 1-D plan for nh = 1
    direct = _C.testing
    X = None
    if kind == "r2c":
        ref = rfft(x.double(), **s)
        torch_fn = lambda: rfft(x, **s)  # noqa: E731
        if h == n:
            direct_fn = lambda: direct.cufft_direct_rfft2(x, nh, n)  # noqa: E731
        else:
            pad = (0, n - h, 0, n - h) if dims == 2 else (0, n - h)
            direct_fn = lambda: direct.cufft_direct_rfft2(F.pad(x, pad), nh, n)  # noqa: E731
    else:
        X = rfft(x, **s)
        ref = irfft(X.to(torch.complex128), **s)
        torch_fn = lambda: irfft(X, **s)  # noqa: E731
        scratch = X.clone()  # cuFFT's C2R overwrites its input: checked on a fresh copy first
        direct_fn = lambda: direct.cufft_direct_irfft2_(scratch, nh, n)  # noqa: E731
    row["torch_fft"] = checked(torch_fn, ref)
    tol = common.tolerance(row["torch_fft"]["rel_err"], TOL_FACTOR, TOL_FLOOR)
    row["tolerance"] = tol
    fb = fbfft_call(kind, dims, n, io, x, X)
    row["fbfft"] = checked(fb, ref, tol)
    if kind == "r2c":
        row["cufft_direct"] = checked(direct_fn, ref, tol)
        fb_headline = fb
    else:  # both unnormalised: the direct call does not scale
        scale = float(n * n if dims == 2 else n)
        ref_u = ref * scale
        m = {"rel_err": common.rel_err(direct.cufft_direct_irfft2_(X.clone(), nh, n), ref_u)}
        if common.gate(m, tol):
            m.update(graph(direct_fn))
        row["cufft_direct"] = m
        fb_headline = fbfft_call(kind, dims, n, io, x, X, normalized=False)
        row["fbfft_unnormalized"] = checked(fb_headline, ref_u, tol)
    del ref
    head = row["fbfft"] if kind == "r2c" else row["fbfft_unnormalized"]
    row["ratio_torch"] = common.ratio(row["torch_fft"], row["fbfft"])
    row["ratio_direct"] = None
    if common.usable(row["cufft_direct"]) and common.usable(head):
        row["ab_direct"] = common.interleaved(direct_fn, fb_headline, graph, 3)
        row["ratio_direct"] = row["ab_direct"]["ratio"]
    if io == "measured" and B == 16384 and common.usable(row["fbfft"]):
        row["eager"] = eager(torch_fn, fb)
    if nbytes not in copy_cache:
        copy_cache[nbytes] = copy_speed(nbytes)
    row["copy"] = copy_cache[nbytes]
    if common.usable(row["fbfft"]):
        row["fbfft_GBps"] = nbytes / row["fbfft"]["ms"] / 1e6
        row["fbfft_pct_copy"] = 100.0 * row["fbfft_GBps"] / row["copy"]["GBps"]
    return row


def copy_speed(nbytes) -> dict:
    """The faster of two device-to-device copies of nbytes / 2 (read) into nbytes / 2 (write):
    torch's copy_ (a memcpy) and an element-wise kernel (x * 1), graph replays as above."""
    src = torch.randn(max(1, nbytes // 8), device="cuda")
    dst = torch.empty_like(src)
    memcpy, kernel = graph(lambda: dst.copy_(src)), graph(lambda: torch.mul(src, 1.0, out=dst))
    best = min((memcpy, kernel), key=lambda m: m["ms"])
    return {"ms": best["ms"], "GBps": 2 * src.numel() * 4 / best["ms"] / 1e6,
            "memcpy_ms": memcpy["ms"], "kernel_ms": kernel["ms"]}


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--dims", type=int, choices=(1, 2), default=None,
                    help="only the 1-D or only the 2-D transforms")
    ap.add_argument("--io", action="store_true",
                    help="also each kernel with its spectrum always staged and always direct")
    args = ap.parse_args(argv)
    if not common.require_cuda("this benchmark compares CUDA kernels"):
        return 0
    t0 = time.perf_counter()
    doc = common.meta("fbfft", args, quick=bool(args.quick), dims=args.dims, io=bool(args.io),
                      timer="CUDA-graph replays of 10 calls, median of 9",
                      tolerance="max(%g x torch.fft's error against float64, %g)"
                                % (TOL_FACTOR, TOL_FLOOR),
                      ratio_direct="cuFFT called directly / fbfft (C2R: both unnormalised); "
                                   "median of per-round ratios of 3 interleaved rounds",
                      ratio_torch="torch.fft / fbfft (C2R: both normalised)",
                      eager="back to back, %d calls a trial, %d rounds of torch.fft / fbfft / "
                            "torch.fft rotated; host: held device" % (EAGER_CALLS, EAGER_ROUNDS))
    doc["rows"] = rows = []
    res = common.Results(args.out, doc)
    log(common.describe_run(doc))
    copy_cache, failed = {}, 0
    for dims, n, h, B in cases(args):
        for kind in ("r2c", "c2r"):
            if kind == "c2r" and h != n:
                continue  # the padded cases are forward reads
            ios = ["measured"]
            if args.io and (dims == 1 and n >= 8 or dims == 2 and n <= 64):
                ios += ["staged", "direct"]
            for io in ios:
                try:
                    r = measure(kind, dims, n, h, B, io, copy_cache)
                except torch.OutOfMemoryError as e:
                    r = {"kind": kind, "dims": dims, "n": n, "h": h, "B": B, "io": io,
                         **common.failure(e)}
                common.release()
                rows.append(r)
                bad = [k for k in ("fbfft", "fbfft_unnormalized", "cufft_direct")
                       if "failed" in r.get(k, {})] or (["run"] if "failed" in r else [])
                failed += bool(bad) and not r.get("oom")
                ea = r.get("eager", {})
                log("  %dD n=%-3d h=%-3d B=%-8d %s %-8s fbfft %s ms | direct x%s | torch.fft x%s"
                    " | %s%% of copy | eager x%s (A/A %s)%s" % (
                        dims, n, h, B, kind, io, common.fmt(r.get("fbfft", {}).get("ms"), ".4f"),
                        common.fmt(r.get("ratio_direct"), ".2f"),
                        common.fmt(r.get("ratio_torch"), ".2f"),
                        common.fmt(r.get("fbfft_pct_copy"), ".0f"),
                        common.fmt(ea.get("ratio"), ".2f"),
                        common.fmt(ea.get("aa", {}).get("ratio"), ".2f"),
                        "  FAILED: " + "; ".join(r.get(k, r).get("failed", "") for k in bad)
                        if bad else ""))
                res.save()
    doc["elapsed_s"] = time.perf_counter() - t0
    res.save()
    import make_docs
    log("")
    log(make_docs.fbfft(doc))
    log("wrote %s (%.0f s; %d failed cases)" % (res.path, doc["elapsed_s"], failed))
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
