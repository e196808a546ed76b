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
