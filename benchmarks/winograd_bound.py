#!/usr/bin/env python3
"""The fused Winograd kernel's shared-memory bound against cuDNN, from a bench_winograd result:
the table and network totals of docs/winograd.md ("What bounds it").

    python3 benchmarks/winograd_bound.py [benchmarks/results/winograd-nvidia-h100-80gb-hbm3.json]
        [--clock-ghz 1.83] [--batches 8,64]

Per chunk of reduction channels (16 in 16 bits, 8 in TF32) an SM's shared memory moves U (its
bulk copy in, ldmatrix out: 32 + 32 KB), V (the transform's stores, read by both warps of a row
of points: 16 + 32 KB), the input patch (11 KB by TMA or 6.25 KB by 4-byte copies, and the
transform's 16 KB of reads), and at each item's end the exchange of the rows' Z (128 KB over the
item's chunks), at 128 bytes a cycle. Items are 64 result channels x 4 x 8 tiles of one sample;
the grid is one block an SM (at most one per item). The bound is that traffic's time for the
busiest SM; "kernel at" is the bound over the fused candidate's measured time. The network
total at the bound takes, per layer, the faster of cuDNN and the bound (the measured best
Winograd candidate where the fused kernel does not apply: conv1_1's 3 channels, TF32 widths
not a multiple of 4), each layer times its count, as bench_winograd's totals.
"""
import argparse
import json
import math
import sys
from pathlib import Path

SMS_DEFAULT = 132
ITEM_M, ITEM_ROWS, ITEM_COLS = 64, 4, 8  # fused.cuh: kBM, kTR, kTC
BANK_BYTES_PER_CYCLE = 128
KB = 1024


def chunk_channels(mode):
    return 8 if mode == "tf32" else 16


def fused_applies(mode, C, H):
    return C >= 64 and (mode != "tf32" or H % 4 == 0)


def bound_ms(mode, N, C, K, H, sms, clock_hz):
    """The shared-memory bound of the fused F(2x2,3x3) forward (pad 1, stride 1), ms."""
    tiles = H // 2
    items = N * math.ceil(tiles / ITEM_ROWS) * math.ceil(tiles / ITEM_COLS) * math.ceil(K / ITEM_M)
    chunks_per_item = math.ceil(C / chunk_channels(mode))
    per_sm = math.ceil(items / min(sms, items)) * chunks_per_item
    tma = H % (4 if mode == "tf32" else 8) == 0  # a row a multiple of 16 bytes
    patch = 11 * KB if tma else 6400
    per_chunk = (32 + 32) * KB + (16 + 32) * KB + patch + 16 * KB + 128 * KB / chunks_per_item
    return per_sm * per_chunk / BANK_BYTES_PER_CYCLE / clock_hz * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="?",
                    default=str(Path(__file__).parent / "results" /
                                "winograd-nvidia-h100-80gb-hbm3.json"))
    ap.add_argument("--clock-ghz", type=float, default=1.83)
    ap.add_argument("--batches", default="8,64")
    args = ap.parse_args(argv)
    doc = json.load(open(args.results))
    sms = doc.get("device", {}).get("sm_count") or SMS_DEFAULT
    clock = args.clock_ghz * 1e9
    count = {lay["layer"]: lay.get("count", 1) for lay in doc["config"]["layers"]}
    rows = {(r["layer"], r["mode"], r["N"]): r for r in doc["speed"]
            if r.get("pass") == "fprop" and "cudnn" in r}
    shown = [int(n) for n in args.batches.split(",")]
    modes = [m for m in ("tf32", "fp16", "bf16") if any(k[1] == m for k in rows)]
    print("| layer | N | " + " | ".join("%s: cuDNN / bound | kernel at" % m for m in modes) + " |")
    print("|---|---|" + "---|---|" * len(modes))
    for lay in doc["config"]["layers"]:
        name, C, K, H = lay["layer"], lay["C"], lay["K"], lay["H"]
        cells = []
        for m in modes:
            got = [rows.get((name, m, n)) for n in shown]
            if not fused_applies(m, C, H) or not all(got):
                cells += ["-", "-"]
                continue
            b = [bound_ms(m, n, C, K, H, sms, clock) for n in shown]
            cells.append(" / ".join("%.2f" % (r["cudnn"]["ms"] / x) for r, x in zip(got, b)))
            fused = [r["candidates"].get("winograd:2,fused", {}).get("ms") for r in got]
            cells.append(" / ".join("%.0f%%" % (100 * x / f) if f else "-" for f, x in zip(fused, b)))
        if any(c != "-" for c in cells):
            print("| %s %d→%d, %d | %s | %s |" % (name, C, K, H, " / ".join(map(str, shown)),
                                                " | ".join(cells)))
    print()
    for m in modes:
        out = []
        for n in doc["config"]["batches"]:
            a = at_bound = tuned = 0.0
            for lay in doc["config"]["layers"]:
                r = rows.get((lay["layer"], m, n))
                if r is None:
                    break
                cu, c = r["cudnn"]["ms"], count[lay["layer"]]
                best = cu / r["ratio"] if r.get("ratio") else cu
                b = (bound_ms(m, n, lay["C"], lay["K"], lay["H"], sms, clock)
                     if fused_applies(m, lay["C"], lay["H"]) else best)
                a += cu * c
                at_bound += min(cu, b) * c
                tuned += min(cu, best) * c
            else:
                out.append("N=%d %.2f (measured %.2f)" % (n, a / at_bound, a / tuned))
        print("%s network forward over cuDNN at the bound (tuned with cuDNN): %s" % (
            m, "; ".join(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
