"""benchmarks/probe_held_passes.py --choices-from: a bench_networks row's recorded decisions,
written into the tuner's cache for this build, are the decisions a converted model then takes."""
import json
import os
import sys

import pytest
import torch

import fastlayers
from fastlayers import tuner

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import probe_held_passes  # noqa: E402


def step(m):
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    m(x).square().sum().backward()


def test_a_rows_choices_are_the_decisions_taken(tmp_path, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    monkeypatch.setattr(tuner.conv2d, "LAYER_ROUNDS", 1)  # the layer checks' answers: not looked at
    tuner.set_budget(0)
    step(fastlayers.Conv2d(3, 4, 3, padding=1))  # tuned: the keys, as bench_networks records them
    keys = [d["key"].split("|torch=")[0] for d in tuner.decisions() if ".layer|" not in d["key"]]
    assert len(keys) == 3, keys  # the passes' (a layer check too where one is off PyTorch's path)
    wanted = dict(zip(keys, ["winograd:2", "native", "winograd:4"]))
    results = tmp_path / "networks.json"

    def replayed(choices):
        rows = [{"network": "net", "mode": "fp32", "choices": choices},
                {"network": "net", "mode": "bf16", "choices": {k: "native" for k in keys}},
                {"network": "net", "mode": "tf32"}]  # a row that failed before its choices
        results.write_text(json.dumps({"rows": rows}))
        tuner.clear(file=True)
        assert probe_held_passes.replay_choices(str(results), "net", "fp32") == len(choices)
        tuner.clear()
        step(fastlayers.Conv2d(3, 4, 3, padding=1))
        return {d["key"].split("|torch=")[0]: (d["choice"], d["source"])
                for d in tuner.decisions()}
    got = replayed(wanted)
    layer = [k for k in got if ".layer|" in k]  # that plan's layer check, not in the row: tuned
    assert len(layer) == 1 and got[layer[0]][1] == "tuned"
    wanted[layer[0]] = "winograd:2/native/native"  # the row's layer check, replayed too
    assert replayed(wanted) == {k: (v, "file") for k, v in wanted.items()}
    with pytest.raises(ValueError, match="0 rows for net fp16"):
        probe_held_passes.replay_choices(str(results), "net", "fp16")
    with pytest.raises(ValueError, match="records no choices"):
        probe_held_passes.replay_choices(str(results), "net", "tf32")


def test_only_passes_on_fastlayers_are_held(monkeypatch):
    # '*' holds every pass on fastlayers and pins no layer whose passes all run PyTorch's path
    # (a stride-2 layer among them, whose pins would go unused with a warning).
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    import warnings
    from torch import nn

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1),
                             nn.Conv2d(4, 4, 3, padding=1, stride=2))
    plans = [("winograd:2", "native", "winograd:4"), ("native",) * 3, None]
    converted = fastlayers.convert(net())
    for m, plan in zip(converted, plans):
        if plan is not None:
            m.force_algorithms(*plan)
    step(converted)
    assert [probe_held_passes.plan_labels(m) for m in converted][:2] == [list(p) for p in plans[:2]]

    def held_by(pattern):
        held = fastlayers.convert(net())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no pin may go unused
            n = probe_held_passes.hold(converted, held, pattern)
        return n, [m._fl_forced for m in held]
    assert held_by("*") == (2, [("native",) * 3, None, None])
    assert held_by("winograd:4") == (1, [("winograd:2", "native", "native"), None, None])
    assert held_by("native") == (0, [None] * 3)
    assert held_by("fft*") == (0, [None] * 3)
