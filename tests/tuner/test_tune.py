"""fastlayers.tune(model, *inputs): every layer of a model tuned ahead, from one forward and
backward, with a progress bar; the model left as it was."""
import json

import pytest
import torch
from torch import nn

import fastlayers
from conv_samples import pass_decisions
from fastlayers import tuner


def model(device):
    return nn.Sequential(nn.Conv2d(3, 8, 5, padding=2), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),  # the same shape again
                         nn.Conv2d(8, 8, 3, stride=2), nn.Flatten(), nn.LazyLinear(3)).to(device)


def test_tune_decides_every_layer_and_leaves_the_model_as_it_was(device, monkeypatch, capsys):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0)
    tuner.set_mode("cache")  # tune() measures whatever the mode, and puts it back
    m = fastlayers.convert(model(device))
    x = torch.randn(2, 3, 16, 16, device=device)
    m(x)  # LazyLinear's shape; under mode 'cache' nothing is measured
    tuner.clear()
    bn = m[1]
    stats = (bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone())
    report = fastlayers.tune(m, x)
    assert tuner.get_mode() == "cache"
    assert all(p.grad is None for p in m.parameters())
    for a, b in zip(stats, (bn.running_mean, bn.running_var, bn.num_batches_tracked)):
        assert torch.equal(a, b)
    entries = json.loads(tuner.cache_file().read_text())["entries"]
    # two distinct stride-1 shapes (the repeated one shares its decisions), every pass each (and
    # a layer check for a shape whose passes are not all PyTorch's)
    passes = {k: e for k, e in entries.items() if ".layer|" not in k}
    assert len(passes) == 6 and all(e["times_ms"] for e in entries.values())
    assert "stride" in report  # the stride-2 layer falls back, with the reason
    assert sum(line.startswith(("  native ", "  fft", "  fbfft", "  winograd"))
               for line in report.splitlines()) >= 6  # every decision, though the mode went back
    err = capsys.readouterr().err
    # the bar: 4 layers x 3 passes at the start; 9 passes decided (the third layer's shape from
    # memory), the stride-2 layer none
    assert "fastlayers.tune" in err and "/12" in err and "9/9" in err

    # a later process (here: a cleared memory) finds every decision in the file
    tuner.clear()
    monkeypatch.setattr("fastlayers.tuner.conv2d.measure",
                        lambda *a: pytest.fail("measured again after tune()"))
    m(x).sum().backward()
    assert {r["source"] for r in tuner.decisions() if r["source"] != "unsupported"} == {"file"}


def test_tune_leaves_the_random_generators_as_they_were(device):
    # the model's dropout draws during tune(): a seeded run sees the same numbers after it
    m = fastlayers.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Dropout(0.5)))
    m = m.to(device)
    x = torch.randn(2, 3, 8, 8, device=device)
    torch.manual_seed(0)
    expected = (torch.rand(3), torch.rand(3, device=device))
    torch.manual_seed(0)
    fastlayers.tune(m, x, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(expected, (torch.rand(3),
                                                            torch.rand(3, device=device))))


def test_tune_after_a_mode_switch_and_back_reports_every_pass(monkeypatch):
    # decided in mode 'tune', then 'off', then tune(): the layers' plans and decisions return
    # with the mode, and tune() still walks (and reports) every pass
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0)
    m = fastlayers.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1)))
    x = torch.randn(2, 3, 8, 8)
    m(x).sum().backward()
    assert len(pass_decisions()) == 3
    tuner.set_mode("off")
    seen = []
    with tuner.observing(lambda p, pass_, d: seen.append(pass_)):
        report = fastlayers.tune(m, x, progress=False)
    assert sorted(seen) == sorted(tuner.PASSES)
    assert tuner.get_mode() == "off"
    assert report.count("conv2d") >= 3 and "no decisions yet" not in report


def test_tune_without_gradients_decides_the_forward():
    tuner.set_budget(0)
    tuner._state.tune_cpu = True
    m = fastlayers.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1))).requires_grad_(False)
    fastlayers.tune(m, torch.randn(1, 3, 8, 8), progress=False)
    assert {r["key"].split("|")[0] for r in tuner.decisions()} == {"conv2d.forward"}


class Tagger(nn.Module):
    """An embedding, an LSTM and a 1-D convolution: tune() counts the LSTM's one decision."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.rnn = nn.LSTM(6, 8, batch_first=True)
        self.conv = nn.Conv1d(8, 4, 3, padding=1)

    def forward(self, tokens):
        return self.conv(self.rnn(self.emb(tokens))[0].transpose(1, 2))


def test_tune_decides_lstm_layers_too(capsys):
    tuner.set_budget(0)
    tuner._state.tune_cpu = True
    m = fastlayers.convert(Tagger())
    assert [type(layer).__name__ for layer in fastlayers.nn.tuned_layers(m)] == ["LSTM", "Conv1d"]
    fastlayers.tune(m, torch.randint(0, 20, (2, 7)))
    kinds = sorted(r["key"].split("|")[0] for r in pass_decisions())
    assert kinds == ["conv2d.forward", "conv2d.input_grad", "conv2d.weight_grad", "lstm.training"]
    assert "4/4" in capsys.readouterr().err  # three conv passes and the LSTM's one
