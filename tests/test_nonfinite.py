"""Non-finite and wide-range inputs (docs/tuner.md): an FFT convolution mixes every pixel of a
sample into every output pixel of that sample, so one NaN, inf or huge value spoils the whole
sample, where the direct convolution spoils only the pixels whose window holds it; and the switch
that keeps layers off transform-based algorithms."""
import pytest
import torch
import torch.nn.functional as F

from fastlayers import algorithms, tuner
from fastlayers.ops import default_basis, next_pow2
from fastlayers.tuner import conv2d as tuner_conv2d

fl = torch.ops.fastlayers

# x [2, 3, 16, 16], w [4, 3, 3, 3], padding 1; the odd value sits in sample 0 at SPOT.
PAD = 1
SPOT = (0, 1, 5, 7)


def _tensors(device, value=None):
    x = torch.randn(2, 3, 16, 16)
    w = torch.randn(4, 3, 3, 3)
    b = torch.randn(4)
    if value is not None:
        x[SPOT] = value
    return x.to(device), w.to(device), b.to(device)


def _fft(x, w, b, backend):
    hw = (x.shape[2] + 2 * PAD, x.shape[3] + 2 * PAD)
    basis = [next_pow2(n) for n in hw] if backend == "fbfft" else list(default_basis(hw, 0))
    return fl.fft_conv2d(x, w, b, [PAD, PAD], basis, False, backend, [0, 0])


def _direct(x, w, b):
    # The direct convolution. On CUDA with cuDNN off: cuDNN's own FFT and Winograd algorithms,
    # which its heuristics may pick, spread a value beyond the window too.
    with torch.backends.cudnn.flags(enabled=False):
        return F.conv2d(x, w, b, padding=PAD)


def _touched(shape):
    """The output pixels of sample 0 whose 3 x 3 window (padding 1) holds input pixel SPOT."""
    mask = torch.zeros(shape, dtype=torch.bool)
    _, _, i, j = SPOT
    mask[0, :, i - 1:i + 2, j - 1:j + 2] = True
    return mask


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_one_non_finite_pixel_spoils_the_whole_sample_under_fft(device, backend, value):
    x, w, b = _tensors(device, value)
    fft = _fft(x, w, b, backend).cpu()
    direct = _direct(x, w, b).cpu()
    touched = _touched(direct.shape)
    assert not torch.isfinite(fft[0]).any()           # every pixel of the sample
    assert torch.isfinite(fft[1]).all()                # the other sample is untouched
    assert torch.equal(~torch.isfinite(direct), touched)  # only the window's pixels


@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
def test_a_huge_value_drowns_the_sample_under_fft(device, backend):
    x, w, b = _tensors(device, 1e30)
    ref = F.conv2d(x.cpu().double(), w.cpu().double(), b.cpu().double(), padding=PAD)
    away = ~_touched(ref.shape)
    away[1] = False  # sample 0, away from the spike
    fft_err = (_fft(x, w, b, backend).cpu().double() - ref)[away].abs()
    direct_err = (_direct(x, w, b).cpu().double() - ref)[away].abs().max().item()
    assert ref[away].abs().max().item() < 100        # values of order 1 there
    assert direct_err < 1e-4                          # float32 rounding of those
    assert fft_err.median().item() > 1e18             # the spike's rounding, across the sample
    # The other sample keeps float32 accuracy under both.
    other = _fft(x, w, b, backend).cpu().double()[1]
    assert (other - ref[1]).abs().max().item() < 1e-3


def _problem(device, transforms=None):
    x = torch.randn(2, 3, 9, 11, device=device)
    w = torch.randn(4, 3, 3, 3, device=device)
    return tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False, transforms=transforms)


def test_switch_off_leaves_only_native(device):
    on = _problem(device)
    assert on.transforms and tuner.transforms_allowed()
    with tuner.transforms(False):
        off = _problem(device)
        assert not tuner.transforms_allowed()
    assert tuner.transforms_allowed()
    assert not off.transforms
    for pass_ in tuner.PASSES:
        assert tuner.candidates_conv2d(off, pass_) == ["native"]
        assert any(c.startswith("fft:") for c in tuner.candidates_conv2d(on, pass_))
        assert off.key(pass_) != on.key(pass_)
        assert "|transforms=0|" in off.key(pass_) and "|transforms=1|" in on.key(pass_)


def test_layer_switch_overrides_the_global_one(device):
    off = _problem(device, transforms=False)
    assert not off.transforms and tuner.candidates_conv2d(off, "forward") == ["native"]
    with tuner.transforms(False):
        on = _problem(device, transforms=True)
        assert on.transforms and len(tuner.candidates_conv2d(on, "forward")) > 1


def test_switch_off_decides_native_with_the_reason(device, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    monkeypatch.setattr(tuner_conv2d, "measure", lambda *a: pytest.fail("measured"))
    with tuner.transforms(False):
        p = _problem(device)
        for pass_ in tuner.PASSES:
            assert tuner.choose_conv2d(p, pass_) == "native"
    rows = {r["key"]: r for r in tuner.decisions()}
    for pass_ in tuner.PASSES:
        row = rows[p.key(pass_)]
        assert row["source"] == "heuristic" and row["reason"].startswith("transforms off")
    assert "why: transforms off" in tuner.report()
    assert not tuner.cache_file().exists()  # nothing measured, nothing written


def test_decisions_made_with_transforms_are_not_used_without(device, monkeypatch):
    monkeypatch.setattr(tuner_conv2d, "measure", lambda *a: pytest.fail("measured"))
    on = _problem(device)
    path = tuner.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text('{"format": %d, "entries": {"%s": {"choice": "fft:16x16"}}}' % (
        tuner.FORMAT, on.key("forward")))
    tuner.clear()
    tuner.set_mode("cache")
    with tuner.transforms(False):
        assert tuner.choose_conv2d(_problem(device), "forward") == "native"
    assert tuner.choose_conv2d(on, "forward") == "fft:16x16"
    assert algorithms.fits("fft:16x16", on, "forward") is None
    assert "transforms are off" in algorithms.fits("fft:16x16", _problem(device, False), "forward")
