"""The README's fbfft-vs-cuFFT table from a bench_fbfft.py JSON (R2C and C2R side by side, % of the
4.16 TB/s copy anchor of BENCHMARKS.md, both also against cuFFT called directly).

    python3 benchmarks/fbfft_table.py [benchmarks/results/fbfft-nvidia-h200.json]
"""
import json
import sys
from pathlib import Path

ANCHOR_GBPS = 4160.0
TARGET_B = 16384


def main():
    path = Path(sys.argv[1] if len(sys.argv) > 1 else
                Path(__file__).resolve().parent / "results" / "fbfft-nvidia-h200.json")
    rows = json.loads(path.read_text())["rows"]
    pairs = {}
    order = []
    for r in rows:
        key = (r["dims"], r["n"], r["h"], r.get("kernel") or "", r["B"])
        if key not in pairs:
            pairs[key] = {}
            order.append(key)
        pairs[key][r["kind"]] = r
    print("| dims | n (input) | B | R2C cuFFT ms | R2C fbfft ms | x | % of 4.16 TB/s | x direct "
          "| C2R cuFFT ms | C2R fbfft ms | x | % of 4.16 TB/s | x direct |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in order:
        dims, n, h, kernel, B = key
        p = pairs[key]
        target = B == TARGET_B and 8 <= n <= 64 and dims == 2
        padded = h != n
        label = "%d%s%s" % (n, " (%d)" % h if padded else "", " " + kernel if kernel else "")
        cells = []
        for kind, goal in (("r2c", 3.0 if padded else 2.0), ("c2r", 3.0)):
            r = p.get(kind)
            if r is None:
                cells += ["", "", "", "", ""]
                continue
            x = "%.2f" % r["ratio"]
            if target and r["ratio"] >= goal:
                x = "**%s**" % x
            cells += ["%.4f" % r["cufft_graph_ms"], "%.4f" % r["fbfft_graph_ms"], x,
                      "%.0f%%" % (100 * r["fbfft_GBps"] / ANCHOR_GBPS),
                      "%.2f" % r["ratio_direct"] if "ratio_direct" in r else ""]
        print("| %d | %s | %d | %s |" % (dims, label, B, " | ".join(cells)))


if __name__ == "__main__":
    main()
