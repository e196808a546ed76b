"""What a module does with choices it cannot use: pinned labels that do not fit the shape, pinned
labels on a layer fastlayers does not serve, and the layer's own switch off transform-based
algorithms."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import fastlayers
from fastlayers import tuner
from conv_samples import RecordOps, pass_decisions


@pytest.fixture
def measuring(monkeypatch):
    """The tuner measures CPU tensors too, each candidate once (no budget for rounds)."""
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0)


def test_a_pinned_label_too_small_for_the_shape_is_refused_naming_it(device):
    m = fastlayers.Conv2d(3, 4, 3, padding=1, device=device).force_algorithms(forward="fft:4x4")
    with pytest.raises(ValueError, match=r"'fft:4x4'.*forward"):
        m(torch.randn(2, 3, 9, 11, device=device))


@pytest.mark.parametrize("kwargs,why", [(dict(stride=2), "stride"), (dict(dilation=2), "dilation"),
                                        (dict(groups=3), "groups")])
def test_pinned_labels_on_a_layer_fastlayers_does_not_serve_warn(kwargs, why, device):
    m = fastlayers.Conv2d(3, 6, 3, padding=1, device=device, **kwargs)
    with pytest.warns(UserWarning, match=why):
        m.force_algorithms("fft:16x16", "fft:16x16", "fft:16x16")
    x = torch.randn(2, 3, 9, 11, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, at force_algorithms
        y = m(x)
    torch.testing.assert_close(y, F.conv2d(x, m.weight, m.bias, m.stride, m.padding, m.dilation,
                                           m.groups))
    assert why in tuner.report()


def test_pinned_labels_on_an_input_fastlayers_does_not_serve_warn_once():
    m = fastlayers.Conv2d(3, 4, 3, padding=1, dtype=torch.float16)
    m.force_algorithms("fft:16x16")
    x = torch.randn(1, 3, 9, 11, dtype=torch.float16)  # half precision on the CPU
    with pytest.warns(UserWarning, match="dtype torch.float16 on cpu"):
        m(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x)


def test_the_layer_switch_keeps_it_off_transforms(device, measuring):
    off = fastlayers.Conv2d(3, 4, 5, padding=2, device=device)
    off.transforms = False
    x = torch.randn(2, 3, 20, 20, device=device, requires_grad=True)
    with RecordOps() as rec:
        off(x).sum().backward()
    assert rec.calls == []
    rows = [r for r in tuner.decisions() if "transforms=0" in r["key"]]
    assert len(rows) == 3 and all(r["choice"] == "native" for r in rows)
    assert all("transforms off" in r["reason"] for r in rows)
    # a transform-based label pinned on it is refused, naming the label
    off.force_algorithms(forward="fft:24x24")
    with pytest.raises(ValueError, match="'fft:24x24'"):
        off(x)


def test_the_layer_switch_overrides_the_global_one(device, measuring):
    on = fastlayers.Conv2d(3, 4, 5, padding=2, device=device)
    on.transforms = True
    x = torch.randn(2, 3, 20, 20, device=device)
    with tuner.transforms(False):
        on(x)
        other = fastlayers.Conv2d(3, 4, 5, padding=2, device=device)
        other(x)
    rows = {r["key"]: r for r in pass_decisions()}
    allowed = [r for k, r in rows.items() if "transforms=1" in k]
    assert len(allowed) == 3  # the three passes (the weight needs its gradient)
    assert all(len(r["times_ms"]) > 1 for r in allowed)  # FFT candidates were measured
    assert any("transforms=0" in k for k in rows)


def test_a_channels_last_input_is_planned_apart(device, measuring):
    m = fastlayers.Conv2d(3, 4, 3, padding=1, device=device)
    x = torch.randn(2, 3, 9, 11, device=device)
    m(x)
    y = m(x.contiguous(memory_format=torch.channels_last))
    layouts = {r["key"].split("|")[3] for r in tuner.decisions()}
    assert layouts == {"contiguous", "channels_last"}
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, F.conv2d(x, m.weight, m.bias, 1, 1))
