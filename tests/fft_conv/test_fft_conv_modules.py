"""The FFT-convolution ops reached through the package: fastlayers.Conv2d with forced labels (both
backends, tiles), torch.compile, autocast, and the tuner choosing among them on CUDA. Values
against nn.Conv2d / F.conv2d in float64 within the rule of conv_samples."""
import copy
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fastlayers
from fastlayers import algorithms, tuner
from conv_samples import (assert_training_matches, assert_within_bound, cudnn_tf32,
                          fft_reference, module_fft_label, rel_err)


class RecordOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the fastlayers ops that run, with their `backend` argument."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "fastlayers":
            self.calls.append((func._opname, next(a for a in args if isinstance(a, str))))
        return func(*args, **(kwargs or {}))


def twins(cin, cout, k, padding, device="cpu", dtype=torch.float64):
    ref = nn.Conv2d(cin, cout, k, padding=padding).to(device, dtype)
    m = fastlayers.Conv2d(cin, cout, k, padding=padding).to(device, dtype)
    m.load_state_dict(ref.state_dict())
    return ref, m


def test_module_runs_fbfft_labels():
    """fbfft labels call the ops with backend "fbfft" in every pass (on the CPU both backends
    compute alike, so this checks the label's plumbing; values in float64)."""
    ref, m = twins(3, 4, 3, 1)
    m.force_algorithms(forward="fbfft:16x16", input_grad="fbfft:16x16", weight_grad="fbfft:16x16")
    x = torch.randn(2, 3, 9, 11, dtype=torch.float64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    with RecordOps() as rec:
        y = m(x)
        y.backward(torch.ones_like(y))
    yr = ref(xr)
    yr.backward(torch.ones_like(yr))
    assert {name for name, _ in rec.calls} == {"fft_conv2d", "fft_conv2d_input_grad",
                                               "fft_conv2d_weight_grad"}
    assert all(backend == "fbfft" for _, backend in rec.calls)
    assert rel_err(y, yr) <= 1e-10 and rel_err(x.grad, xr.grad) <= 1e-10
    assert rel_err(m.weight.grad, ref.weight.grad) <= 1e-10


@pytest.mark.parametrize("labels", [
    ("fft:8x8,tile=6x6",) * 3,
    ("fbfft:8x8,tile=6x6", "fft:16x16,tile=13x9", "fbfft:16x16,tile=14x14"),
    ("fbfft:8x8,tile=6x6", "native", "fft:8x8,tile=6x6"),
])
def test_module_runs_tiled_labels(labels):
    ref, m = twins(3, 4, 3, 1)
    m.force_algorithms(*labels)
    x = torch.randn(2, 3, 17, 14, dtype=torch.float64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    y = m(x)
    yr = ref(xr)
    gy = torch.randn_like(yr)
    y.backward(gy)
    yr.backward(gy)
    assert rel_err(y, yr) <= 1e-10 and rel_err(x.grad, xr.grad) <= 1e-10
    assert rel_err(m.weight.grad, ref.weight.grad) <= 1e-10


def test_fft_labels_parse_into_choices():
    """The labels these tests force: family, backend, basis and tile, and back to the label."""
    for label, family, backend, basis, tile in (
            ("fft:8x8", "fft", "cufft", (8, 8), (0, 0)),
            ("fft:16x12,tile=6x5", "fft", "cufft", (16, 12), (6, 5)),
            ("fbfft:16x16", "fbfft", "fbfft", (16, 16), (0, 0)),
            ("fbfft:16x16,tile=14x13", "fbfft", "fbfft", (16, 16), (14, 13))):
        choice = algorithms.parse(label)
        assert choice.family == family
        assert (choice.params.backend, tuple(choice.params.basis), tuple(choice.params.tile)) == (
            backend, basis, tile), label
        assert str(choice) == choice.label == label
        assert algorithms.parse(choice.label) == choice
    for bad in ("fft:16x16,tile=", "fft:16x16,tile=0x4", "fbfft:8", "fft:16x16,tiles=4x4"):
        with pytest.raises(ValueError, match="fft"):
            algorithms.parse(bad)
    with pytest.raises(ValueError):
        fastlayers.Conv2d(3, 4, 3).force_algorithms(forward="fft:8x8,tile=axb")


def test_compile_fullgraph_tiled():
    torch._dynamo.reset()
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    m.force_algorithms("fbfft:8x8,tile=6x6", "fft:8x8,tile=6x6", "fbfft:16x16,tile=10x9")
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 3, 13, 11)

    def run(fn):
        m.zero_grad()
        xi = x.clone().requires_grad_()
        y = fn(xi)
        y.pow(2).sum().backward()
        return [y.detach(), xi.grad, m.weight.grad.clone(), m.bias.grad.clone()]

    for e, g in zip(run(m), run(compiled)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


# --- CUDA: float32 and float16 against float64 -----------------------------------------------------


def module_references(ref, x, gy, padding, basis, dtype=None, autocast=False):
    """(y, grad x, grad w) of `ref` in float64, and PyTorch's own in x's precision (or under
    autocast): nn.Conv2d's and fft_reference's, for the rule."""
    w, b = ref.weight, ref.bias
    x64 = x.detach().double().requires_grad_()
    w64, b64 = w.detach().double().requires_grad_(), b.detach().double()
    y64 = F.conv2d(x64, w64, b64, padding=padding)
    exact = (y64,) + torch.autograd.grad(y64, (x64, w64), gy.double())
    xs = x.detach().requires_grad_()
    ws = w.detach().requires_grad_()
    if autocast:
        with torch.autocast("cuda", dtype=dtype):
            yn = F.conv2d(xs, ws, b, padding=padding)
    else:
        yn = F.conv2d(xs, ws, b, padding=padding)
    native = (yn,) + torch.autograd.grad(yn, (xs, ws), gy.to(yn.dtype))
    low = dtype or x.dtype
    xf = x.detach().to(low).requires_grad_()
    wf = w.detach().to(low).requires_grad_()
    yf = fft_reference(0, xf, wf, b.detach().to(low), None, padding, basis)
    fft = (yf,) + tuple(g.to(n.dtype) for g, n in zip(
        torch.autograd.grad(yf, (xf, wf), gy.to(low)), native[1:]))
    return exact, native, fft


@pytest.mark.gpu
def test_module_autocast_float16():
    ref, m = twins(3, 4, 3, 1, "cuda", torch.float32)
    m.force_algorithms(forward="fft:16x16", input_grad="fft:16x16", weight_grad="fft:16x16")
    x = torch.randn(2, 3, 12, 12, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.float16):
        y = m(x)
    assert y.dtype == torch.float16
    gy = torch.randn_like(y)
    gx, gw = torch.autograd.grad(y, (x, m.weight), gy)
    assert gx.dtype == torch.float32 and gw.dtype == torch.float32
    exact, native, fft = module_references(ref, x, gy, (1, 1), (16, 16), torch.float16, True)
    for name, o, e, n, f in zip(("y", "grad x", "grad w"), (y, gx, gw), exact, native, fft):
        assert_within_bound(o, e, n, f, "float16", what="autocast " + name)


@pytest.mark.gpu
@pytest.mark.parametrize("labels", [
    ("fbfft:32x32",) * 3,
    ("fbfft:16x16,tile=14x14", "fft:16x16,tile=14x14", "fbfft:8x8,tile=6x6"),
])
def test_module_with_fbfft_and_tiles_matches_nn_conv2d(labels):
    ref, m = twins(8, 6, 3, 1, "cuda", torch.float32)
    m.force_algorithms(*labels)
    x = torch.randn(4, 8, 30, 27, device="cuda", requires_grad=True)
    gy = torch.randn(4, 6, 30, 27, device="cuda")
    with cudnn_tf32(False):
        y = m(x)
        gx, gw = torch.autograd.grad(y, (x, m.weight), gy)
        exact, native, fft = module_references(ref, x, gy, (1, 1), (32, 32))
    for name, o, e, n, f in zip(("y", "grad x", "grad w"), (y, gx, gw), exact, native, fft):
        assert_within_bound(o, e, n, f, what="%s %s" % (labels, name))


# --- CUDA: the tuner -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_tuner_chooses_and_caches_on_gpu(tuner_cache):
    tuner.set_budget(0.5)
    x = torch.randn(8, 32, 48, 48, device="cuda")
    w = torch.randn(32, 32, 7, 7, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (3, 3))
    assert p.device_type == "cuda" and p.capability != "-"
    labels = {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES}
    rows = {r["key"]: r for r in tuner.decisions()}
    for pass_, label in labels.items():
        row = rows[p.key(pass_)]
        assert row["source"] == "tuned" and row["choice"] == label
        assert "native" in row["times_ms"] and label in row["times_ms"]
        assert len(row["times_ms"]) + len(row["skipped"]) == len(tuner.candidates_conv2d(p, pass_))
    entries = json.loads(tuner.cache_file().read_text())["entries"]
    assert {p.key(pass_) for pass_ in tuner.PASSES} <= set(entries)

    before = tuner.decisions()
    assert {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES} == labels
    assert tuner.decisions() == before  # from memory: nothing measured again
    tuner.clear()
    assert {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES} == labels
    assert {r["source"] for r in tuner.decisions()} == {"file"}


@pytest.mark.gpu
def test_tuned_module_matches_nn_conv2d():
    tuner.set_budget(0.2)
    ref, m = twins(16, 16, 5, 2, "cuda", torch.float32)
    x = torch.randn(4, 16, 32, 32, device="cuda", requires_grad=True)
    gy = torch.randn(4, 16, 32, 32, device="cuda")
    with cudnn_tf32(False):
        y = m(x)
        gx, gw = torch.autograd.grad(y, (x, m.weight), gy)
        exact, native, fft = module_references(ref, x, gy, (2, 2), (36, 36))
    assert {r["source"] for r in tuner.decisions()} == {"tuned"}
    assert len(tuner.decisions()) == 3
    for name, o, e, n, f in zip(("y", "grad x", "grad w"), (y, gx, gw), exact, native, fft):
        assert_within_bound(o, e, n, f, what="tuned " + name)


def small_cnn(conv):
    return nn.Sequential(
        conv(3, 16, 3, padding=1),
        nn.ReLU(),
        conv(16, 16, 5, padding="same", padding_mode="reflect"),
        nn.ReLU(),
        conv(16, 8, 3, padding=1, bias=False),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )


@pytest.mark.gpu
@pytest.mark.parametrize("algorithms_", ["tuned", "fft"])
def test_training_steps_match_nn_conv2d(algorithms_):
    tuner.set_budget(0.2)
    torch.manual_seed(3)
    ref = small_cnn(nn.Conv2d).cuda()
    fast = fastlayers.convert(copy.deepcopy(ref))
    if algorithms_ == "fft":
        for m in fast.modules():
            if isinstance(m, fastlayers.Conv2d):
                label = module_fft_label(m, (24, 24))
                m.force_algorithms(forward=label, input_grad=label, weight_grad=label)
    with cudnn_tf32(False):
        assert_training_matches(ref, fast, 16, (24, 24), device="cuda")


@pytest.mark.gpu
def test_tuner_candidates_on_cuda():
    x = torch.randn(2, 4, 40, 40, device="cuda")
    w = torch.randn(4, 4, 3, 3, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False)
    cands = tuner.candidates_conv2d(p, "forward")
    assert "fbfft:64x64" in cands and "fbfft:32x32,tile=30x30" in cands
    p64 = tuner.ConvProblem.from_tensors(x.double(), w.double(), (1, 1))
    assert not any(c.startswith("fbfft") for c in tuner.candidates_conv2d(p64, "forward"))
    assert "fft:32x32,tile=30x30" in tuner.candidates_conv2d(p64, "forward")


@pytest.mark.gpu
def test_tuner_measures_fbfft_and_tiles_on_gpu():
    tuner.set_budget(10.0)
    x = torch.randn(16, 32, 60, 60, device="cuda")
    w = torch.randn(32, 32, 3, 3, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False)
    for pass_ in tuner.PASSES:
        label = tuner.choose_conv2d(p, pass_)
        row = {r["key"]: r for r in tuner.decisions()}[p.key(pass_)]
        assert row["source"] == "tuned" and label in row["times_ms"]
        measured = set(row["times_ms"]) | set(row["skipped"])
        assert measured == set(tuner.candidates_conv2d(p, pass_))
        assert any("tile=" in c for c in row["times_ms"]), row
