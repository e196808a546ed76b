#!/usr/bin/env python3
"""A shared-memory model of the fused Winograd kernel against cuDNN, from a bench_winograd
result: the table and network totals of docs/winograd.md ("A bound from shared memory").

    python3 benchmarks/winograd_bound.py [RESULTS.json] [--clock-ghz 1.83] [--batches 8,64]

The model counts, per chunk of reduction channels (16 in 16 bits, 8 in TF32) of one block, the
shared-memory wavefronts (128 bytes, a cycle each at best) of the kernel's data flow, forward,
F(2x2,3x3), every access conflict-free but where measured otherwise:
  through the LSU: ldmatrix of U (32 KB, each value once) and of V (2 x 16 KB: both warps of a
  row of points read it), the transform's V stores (16 KB) and patch reads (16-bit: 32 KB where
  the windows start at an odd column, each fragment word two reads joined; 16 KB at even
  starts; TF32: 12 reads of 2 wavefronts a warp at odd starts, 8 at even), the 4-byte patch
  copies where no tensor map takes the data (16 bits, widths not a multiple of 8: about 340
  wavefronts a chunk by ncu, 6.8 a warp instruction, as the kernel before d159f36 copied them,
  a patch row a thread: COPY4_WAVES; the results' kernel copies along rows, not yet counted),
  and the item's exchange of the rows' Z (512 + 512 wavefronts an item, over its chunks);
  asynchronous writes: U's bulk copy (32 KB) and the patch's tensor copy (11 KB).
Whether the asynchronous writes take the same bandwidth is not known here, so the bound is
given both ways: "lsu" (without them) and "all". Items are 64 result channels x 4 x 8 tiles of
one sample, the grid one block an SM, items round-robin; the bound is the busiest SM's time at
the clock given (1.83 GHz: the clock behind the published 989 TFLOP/s of dense fp16 of the H100
SXM and the H200; both boost to 1.98). "kernel at" is the bound over the fused candidate's
measured time. The network totals at the bound take per layer the fastest of cuDNN, the measured
Winograd candidates and the bound, each layer times its count, cuDNN's time as each row's
`cudnn.ms`; "measured" is the result's own tuned total (bench_winograd's `tuned_ratio`).

A second model bounds the float32 kernel (TF32 off: split TF32, three mma a product) by its
products alone, forward and input gradient: a block's chunk (8 reduction channels) is 64 result
channels x 32 tiles x 16 points, 524288 flops, and an SM delivers at most --split-rate flops a
cycle that way (benchmarks/micro/mma_rate.cu, "split3 from smem": a warp's point as the kernel
multiplies it, 4 ldmatrix, 16 splits, 24 mma and 32 FADD, nothing else; 271 with the kernel's 8
warps an SM on an H200, 303 with 16). Items as above; the input gradient's result channels are
the layer's C and its reduction K.
"""
import argparse
import json
import math
import sys
from pathlib import Path

SMS_DEFAULT = 132
ITEM_M, ITEM_ROWS, ITEM_COLS = 64, 4, 8  # fused.cuh: kBM, kTR, kTC
WAVE = 128  # bytes a shared-memory wavefront
# The 4-byte patch copies a chunk, a patch row a thread, as the kernel before d159f36 copied them
# (ncu, conv4_2 N 8 fp16). The results' kernel copies along rows (as few as 50 if
# conflict-free), not yet counted: on its 4-byte-copy layers this overstates the bound.
COPY4_WAVES = 340
FUSED = "winograd:2,fused"


def chunk_channels(mode):
    return 8 if mode == "tf32" else 16


def fused_ran(row):
    """Whether the run offered the fused kernel on this row (the op's own terms decide)."""
    return FUSED in row["candidates"]


def waves_per_chunk(mode, C, H, odd):
    """(LSU wavefronts, asynchronous-write wavefronts) of one chunk."""
    chunks_per_item = math.ceil(C / chunk_channels(mode))
    tma = H % (4 if mode == "tf32" else 8) == 0  # a row a multiple of 16 bytes
    reads = (192 if odd else 128) if mode == "tf32" else (256 if odd else 128)
    lsu = 256 + 256 + 128 + reads + (0 if tma else COPY4_WAVES) + 1024 / chunks_per_item
    return lsu, 256 + (88 if tma else 0)


def bound_ms(mode, N, C, K, H, odd, sms, clock_hz):
    """(lsu, all) bounds of the fused forward (pad 1, stride 1), ms."""
    tiles = H // 2
    items = N * math.ceil(tiles / ITEM_ROWS) * math.ceil(tiles / ITEM_COLS) * math.ceil(K / ITEM_M)
    per_sm = math.ceil(items / min(sms, items)) * math.ceil(C / chunk_channels(mode))
    lsu, asynchronous = waves_per_chunk(mode, C, H, odd)
    ms = lambda w: per_sm * w / clock_hz * 1e3  # noqa: E731
    return ms(lsu), ms(lsu + asynchronous)


def products_bound_ms(N, M, R, H, sms, clock_hz, rate):
    """The split-TF32 products' bound of the float32 fused kernel, ms: M result channels, R
    reduction channels, H x H image (pad 1, stride 1)."""
    tiles = H // 2
    items = N * math.ceil(tiles / ITEM_ROWS) * math.ceil(tiles / ITEM_COLS) * math.ceil(M / ITEM_M)
    per_sm = math.ceil(items / min(sms, items)) * math.ceil(R / 8)
    flops = ITEM_M * ITEM_ROWS * ITEM_COLS * 16 * 8 * 2  # a block's chunk
    return per_sm * flops / rate / clock_hz * 1e3


def roles(pass_, lay):
    """The fused kernel's result and reduction channels for a pass of the layer: the forward's
    K and C, the input gradient's C and K."""
    return (lay["K"], lay["C"]) if pass_ == "fprop" else (lay["C"], lay["K"])


def network_at_bounds(cfg, got, bounds, k):
    """cuDNN's network time over the network's with each layer at the least of cuDNN, the
    measured Winograd candidates (the row's tuned ratio) and each of the k bounds(layer) in turn,
    the layers weighted by their count; where the fused kernel did not run, no bound counts.
    `got`: each layer's row, in cfg["layers"] order. A tuple of k ratios."""
    cudnn, at = 0.0, [0.0] * k
    for lay, r in zip(cfg["layers"], got):
        cu, c = r["cudnn"]["ms"], lay.get("count", 1)
        best = cu / r["ratio"] if r.get("ratio") else cu
        bs = bounds(lay) if fused_ran(r) else (best,) * k
        cudnn += cu * c
        at = [t + min(cu, best, b) * c for t, b in zip(at, bs)]
    return tuple(cudnn / t for t in at)


def products_report(doc, sms, clock, rate, shown):
    """The products' bound of the float32 kernel, forward and input gradient."""
    cfg = doc["config"]
    rows = {(r["layer"], r["pass"], r["N"]): r for r in doc["speed"]
            if r.get("mode") == "fp32" and "ms" in r.get("cudnn", {})}
    totals = {(t["pass"], t["N"]): t for t in doc.get("totals", []) if t["mode"] == "fp32"}
    print()
    print("float32 (split TF32), the products alone at %g flops a cycle an SM: cuDNN ms over the "
          "bound, and the bound over the kernel's ms, N = %s:"
          % (rate, " / ".join(map(str, shown))))
    print()
    passes = (("fprop", "forward"), ("bprop", "input gradient"))
    print("| layer | " + " | ".join("%s: cuDNN / bound | kernel at" % p for _, p in passes) + " |")
    print("|---|" + "---|---|" * len(passes))
    for lay in cfg["layers"]:
        name, C, K, H = lay["layer"], lay["C"], lay["K"], lay["H"]
        cells = []
        for ps, _ in passes:
            got = [rows.get((name, ps, n)) for n in shown]
            if not all(got) or not all(fused_ran(r) for r in got):
                cells += ["-", "-"]
                continue
            b = [products_bound_ms(n, *roles(ps, lay), H, sms, clock, rate) for n in shown]
            cells.append(" ; ".join("%.2f" % (r["cudnn"]["ms"] / x) for r, x in zip(got, b)))
            fused = [r["candidates"][FUSED].get("ms") for r in got]
            cells.append(" ; ".join("%.0f%%" % (100 * x / f) if f else "-"
                                    for f, x in zip(fused, b)))
        if any(c != "-" for c in cells):
            print("| %s %d→%d, %d | %s |" % (name, C, K, H, " | ".join(cells)))
    print()
    for ps, label in passes:
        out = []
        for n in cfg["batches"]:
            got = [rows.get((lay["layer"], ps, n)) for lay in cfg["layers"]]
            if not all(got):
                out.append("N=%d (a layer missing)" % n)
                continue
            ratio, = network_at_bounds(cfg, got, lambda lay: (products_bound_ms(
                n, *roles(ps, lay), lay["H"], sms, clock, rate),), 1)
            t = totals.get((ps, n), {})
            out.append("N=%d %.2f (measured %s)" % (
                n, ratio, "%.2f" % t["tuned_ratio"] if t.get("tuned_ratio") else "-"))
        print("fp32 network %s over cuDNN at the products' bound: %s" % (label, "; ".join(out)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="?",
                    default=str(Path(__file__).parent / "results" /
                                "winograd-nvidia-h200.json"))
    ap.add_argument("--clock-ghz", type=float, default=1.83)
    ap.add_argument("--batches", default="8,64")
    ap.add_argument("--split-rate", type=float, default=271.0,
                    help="flops a cycle an SM of the split-TF32 products (mma_rate.cu)")
    args = ap.parse_args(argv)
    doc = json.load(open(args.results))
    cfg = doc["config"]
    sms = doc.get("device", {}).get("sm_count") or SMS_DEFAULT
    clock = args.clock_ghz * 1e9
    odd = cfg.get("padding", [1, 1])[1] % 2 == 1  # the windows' first column, 2 tx0 - pad
    rows = {(r["layer"], r["mode"], r["N"]): r for r in doc["speed"]
            if r.get("pass") == "fprop" and "ms" in r.get("cudnn", {})}
    totals = {(t["mode"], t["N"]): t for t in doc.get("totals", []) if t["pass"] == "fprop"}
    shown = [int(n) for n in args.batches.split(",")]
    modes = [m for m in ("tf32", "fp16", "bf16") if any(k[1] == m for k in rows)]
    print("cuDNN ms over the bound (lsu / all), and the bound over the kernel's ms (lsu-all), "
          "N = %s:" % " / ".join(map(str, shown)))
    print()
    print("| layer | " + " | ".join("%s: cuDNN / bound | kernel at" % m for m in modes) + " |")
    print("|---|" + "---|---|" * len(modes))
    for lay in cfg["layers"]:
        name, C, K, H = lay["layer"], lay["C"], lay["K"], lay["H"]
        cells = []
        for m in modes:
            got = [rows.get((name, m, n)) for n in shown]
            if not all(got) or not all(fused_ran(r) for r in got):
                cells += ["-", "-"]
                continue
            b = [bound_ms(m, n, C, K, H, odd, sms, clock) for n in shown]
            cells.append(" ; ".join("%.2f / %.2f" % (r["cudnn"]["ms"] / lo, r["cudnn"]["ms"] / hi)
                                    for r, (lo, hi) in zip(got, b)))
            fused = [r["candidates"][FUSED].get("ms") for r in got]
            cells.append(" ; ".join("%.0f-%.0f%%" % (100 * lo / f, 100 * hi / f) if f else "-"
                                    for f, (lo, hi) in zip(fused, b)))
        if any(c != "-" for c in cells):
            print("| %s %d→%d, %d | %s |" % (name, C, K, H, " | ".join(cells)))
    print()
    for m in modes:
        out = []
        for n in cfg["batches"]:
            got = [rows.get((lay["layer"], m, n)) for lay in cfg["layers"]]
            if not all(got):
                out.append("N=%d (a layer missing)" % n)
                continue
            lo, hi = network_at_bounds(cfg, got, lambda lay: bound_ms(
                m, n, lay["C"], lay["K"], lay["H"], odd, sms, clock), 2)
            t = totals.get((m, n), {})
            out.append("N=%d %.2f / %.2f (measured %s)" % (
                n, lo, hi, "%.2f" % t["tuned_ratio"] if t.get("tuned_ratio") else "-"))
        print("%s network forward over cuDNN at the bound (lsu / all): %s" % (m, "; ".join(out)))
    if any(r.get("mode") == "fp32" for r in doc["speed"]):
        products_report(doc, sms, clock, args.split_rate, shown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
