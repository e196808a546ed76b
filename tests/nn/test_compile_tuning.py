"""A module first seen under torch.compile asks the tuner when the graph is traced (the shapes are
known then): the decision runs as Python outside the graph, and the chosen ops go into it."""
import copy

import pytest
import torch
from torch import nn

import fastlayers
from fastlayers import tuner
from fastlayers.tuner import conv2d as tuner_conv2d
from fastlayers.ops import good_fft_size
from conv_samples import rel_err
from test_conv1d import compile_and_run, problem, write_decisions
from test_modules import forward_backward

# Two layers of different shapes (so of different FFT labels), and the input shape.
MODELS = {
    "conv2d": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                     nn.Conv2d(4, 4, (3, 5), padding=(1, 2))), (2, 3, 12, 10)),
    "conv1d": (lambda: nn.Sequential(nn.Conv1d(3, 4, 5, padding=2), nn.ReLU(),
                                     nn.Conv1d(4, 4, 9, padding="same", padding_mode="reflect")),
               (2, 3, 30)),
}
FL_OPS = ("fastlayers.fft_conv2d.default", "fastlayers.fft_conv2d_input_grad.default",
          "fastlayers.fft_conv2d_weight_grad.default")


def model_and_input(name, device):
    """A model of nn layers, the same converted to fastlayers (never called), an input and a
    grad_output (float64)."""
    make, shape = MODELS[name]
    ref = make().to(device, torch.float64)
    fast = fastlayers.convert(copy.deepcopy(ref))
    x = torch.randn(shape, dtype=torch.float64, device=device)
    return ref, fast, x, torch.randn_like(ref(x))


def cache_fft_decisions(ref, fast, x):
    """Writes, for every pass of every layer of `fast`, the FFT label at the smallest fast basis
    of its padded input into the tuner's file (the inputs are those `ref` gives its layers)."""
    inputs = []
    hooks = [r.register_forward_pre_hook(lambda mod, args: inputs.append(args[0]))
             for r in ref if isinstance(r, nn.modules.conv._ConvNd)]
    ref(x)
    for h in hooks:
        h.remove()
    labels = {}
    layers = [m for m in fast if isinstance(m, nn.modules.conv._ConvNd)]
    for m, xi in zip(layers, inputs):
        p = problem(m, xi)
        label = "fft:%dx%d" % (good_fft_size(p.H + 2 * p.ph), good_fft_size(p.W + 2 * p.pw))
        labels.update({p.key(pass_): label for pass_ in tuner.PASSES})
    write_decisions(labels)


def first_fft_wins(monkeypatch):
    """The tuner measures as usual (on its own inputs), then its first FFT candidate measured
    wins: a CPU timing cannot be relied on to pick it. Returns the passes measured, in order."""
    measured = []
    real = tuner_conv2d.measure

    def measure(p, pass_, device):
        d = real(p, pass_, device)
        fft = [label for label in d.times_ms if label != "native"]
        assert fft, "no FFT candidate measured within the budget: %s" % d.skipped
        d.choice, d.reason = fft[0], "the test's: the first FFT candidate measured"
        measured.append(pass_)
        return d

    monkeypatch.setattr(tuner_conv2d, "measure", measure)
    return measured


def no_measuring(monkeypatch):
    def fail(*args):
        raise AssertionError("the tuner measured")
    monkeypatch.setattr(tuner_conv2d, "measure", fail)


def layer_check_keeps(monkeypatch):
    """The eager layer check (a training step's, after the passes) keeps the tuned passes: a CPU
    timing cannot be relied on for it either."""
    monkeypatch.setattr(tuner_conv2d, "measure_layer", lambda c, pass_, device: tuner.Decision(
        choice="tuned", source="tuned", reason="the test's: the passes as tuned"))


@pytest.mark.parametrize("source", ["tuned", "file"])
@pytest.mark.parametrize("model", MODELS)
def test_first_seen_under_compile_is_tuned_when_traced(model, source, device, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    layer_check_keeps(monkeypatch)
    tuner.set_budget(1.0)
    ref, fast, x, gy = model_and_input(model, device)
    if source == "file":
        cache_fft_decisions(ref, fast, x)
        no_measuring(monkeypatch)
    else:
        measured = first_fft_wins(monkeypatch)
    got, forward, backward = compile_and_run(fast, x, gy)
    # never called eagerly: the decisions were made when the graph was traced
    assert all(m._fl_plans is None for m in fast if isinstance(m, nn.modules.conv._ConvNd))
    rows = tuner.decisions()
    assert [(r["key"].split(".")[1].split("|")[0], r["source"]) for r in rows] == [
        (pass_, source) for pass_ in tuner.PASSES] * 2
    assert source == "file" or measured == list(tuner.PASSES) * 2
    labels = [r["choice"] for r in rows]
    assert all(label.startswith("fft:") for label in labels) and labels[0] != labels[3], labels
    report = tuner.report()
    assert all(r["key"].split("|torch=")[0] in report for r in rows)
    assert forward.count(FL_OPS[0]) == 2 and "aten.convolution" not in forward
    assert backward.count(FL_OPS[1]) == 2 and backward.count(FL_OPS[2]) == 2
    # eager, with the decisions in memory, and nn's own: the same results
    fast.zero_grad()
    eager = forward_backward(fast, x, gy)
    # eager adds only the layer checks, which a traced graph does not make
    after = tuner.decisions()
    assert [r for r in after if ".layer|" not in r["key"]] == rows
    assert [r["choice"] for r in after if ".layer|" in r["key"]] == ["tuned"] * 2
    for e, n, g in zip(eager, forward_backward(ref, x, gy), got):
        assert rel_err(g, e) <= 1e-10 and rel_err(g, n) <= 1e-10


@pytest.mark.parametrize("model", MODELS)
def test_tuner_off_under_compile_uses_native(model, device, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    no_measuring(monkeypatch)
    ref, fast, x, gy = model_and_input(model, device)
    cache_fft_decisions(ref, fast, x)  # mode 'off' does not read the file either
    tuner.set_mode("off")
    got, forward, backward = compile_and_run(fast, x, gy)
    assert "fastlayers." not in forward + backward
    assert forward.count("aten.convolution.default") == 2
    assert backward.count("aten.convolution_backward") == 2
    assert {(r["choice"], r["source"], r["reason"]) for r in tuner.decisions()} == {
        ("native", "heuristic", "tuner off")}
    assert len(tuner.decisions()) == 6
    for e, g in zip(forward_backward(ref, x, gy), got):
        assert rel_err(g, e) <= 1e-10


def test_a_layer_first_seen_under_compile_that_falls_back_is_reported():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = fastlayers.convert(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2),
                                                   torch.nn.ReLU(),
                                                   torch.nn.Conv2d(4, 4, 3, groups=2)))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 3, 12, 12)
    torch.testing.assert_close(compiled(x), model(x))
    rows = [r for r in fastlayers.tuner.decisions() if r["source"] == "unsupported"]
    traced = [r for r in rows if "dilation=" in r["key"]]  # the traced record names every field
    assert {r["reason"].split(" ")[0] for r in traced} == {"stride", "groups=2"}
    assert not torch._dynamo.utils.counters["graph_break"]


def test_switching_back_and_forth_reuses_the_compiled_graphs():
    # a transforms switch for a block and back returns the tuner to a state whose graph exists:
    # no new graph per switch (dynamo's recompile limit would end a fullgraph model after 8)
    m = fastlayers.Conv2d(3, 4, 5, padding=2, dtype=torch.float64)
    ref = nn.Conv2d(3, 4, 5, padding=2, dtype=torch.float64)
    ref.load_state_dict(m.state_dict())
    cm = torch.compile(m, fullgraph=True, backend="eager")
    x = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    with torch._dynamo.config.patch(recompile_limit=3):
        for _ in range(6):
            torch.testing.assert_close(cm(x), ref(x))
            with tuner.transforms(False):
                torch.testing.assert_close(cm(x), ref(x))


@pytest.mark.parametrize("call,arg", [
    (lambda x, w: torch.ops.fastlayers.fft_conv2d(x, w, None, [-5, -5], [16, 16]), "`padding`"),
    (lambda x, w: torch.ops.fastlayers.winograd_conv2d(x, w, None, [2 ** 62, 1]), "`padding`"),
    (lambda x, w: torch.ops.fastlayers.fft_conv2d_input_grad(x, w, [9, 9], [16, 16]),
     "empty"),
])
def test_traced_ops_check_their_arguments_as_eager_ones(call, arg):
    x, w = torch.randn(1, 3, 8, 8), torch.randn(3, 3, 3, 3)
    with pytest.raises(Exception, match=arg):
        call(x, w)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=arg):
        torch.compile(call, fullgraph=True, backend="aot_eager")(x, w)
