"""winograd_bound's products bound of the float32 fused kernel: a layer's bound from its items
and chunks, the input gradient's result and reduction channels swapped, and the report run on
the committed results."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import winograd_bound  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                       "results", "winograd-nvidia-h200.json")


def test_products_bound_counts_items_and_chunks():
    # 28 x 28 tiles (56 wide): 7 x 4 item places a sample and result block; N 8 and 128 result
    # channels make 8 * 28 * 2 = 448 items, 4 rounds on 132 SMs (the busiest SM), each 32
    # chunks of 8 reduction channels; a chunk is 64 x 32 tiles x 16 points x 8 x 2 flops.
    ms = winograd_bound.products_bound_ms(8, 128, 256, 56, 132, 1e9, 2.0)
    assert ms == pytest.approx(4 * 32 * 524288 / 2.0 / 1e9 * 1e3)
    # the result channels round up to the item's 64, the reduction to the chunk's 8
    assert winograd_bound.products_bound_ms(8, 65, 9, 56, 132, 1e9, 2.0) == pytest.approx(
        4 * 2 * 524288 / 2.0 / 1e9 * 1e3)


@pytest.mark.skipif(not os.path.exists(RESULTS), reason="no committed winograd results")
def test_report_runs_on_the_committed_results(capsys):
    assert winograd_bound.main([RESULTS, "--batches", "32,64"]) == 0
    out = capsys.readouterr().out
    # the totals docs/winograd.md quotes: every layer, weighted by its count, at the least of
    # cuDNN, the measured candidates and the bound, the input gradient's channels swapped
    totals = [line for line in out.splitlines()
              if line.startswith("fp32 network input gradient over cuDNN at the products' bound")]
    assert len(totals) == 1
    assert "N=32 1.51 (measured 1.30)" in totals[0] and "N=64 1.36 (measured 1.25)" in totals[0]
    # conv3_1 (128 -> 256): the input gradient has 128 result channels and reduces 256, the
    # forward the other way round; each cell is cuDNN's time over that bound
    doc = json.load(open(RESULTS))
    cudnn = {(r["pass"], r["N"]): r["cudnn"]["ms"] for r in doc["speed"]
             if r["layer"] == "conv3_1" and r["mode"] == "fp32"}
    row = [line for line in out.splitlines() if line.startswith("| conv3_1")][-1].split("|")
    for cell, ps, (m, r) in ((row[2], "fprop", (256, 128)), (row[4], "bprop", (128, 256))):
        want = ["%.2f" % (cudnn[ps, n] / winograd_bound.products_bound_ms(
            n, m, r, 56, doc["device"]["sm_count"], 1.83e9, 271.0)) for n in (32, 64)]
        assert cell.strip() == " ; ".join(want)
