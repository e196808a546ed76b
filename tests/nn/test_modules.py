import collections
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import gradcheck, gradgradcheck
from torch.utils._python_dispatch import TorchDispatchMode

import fastlayers
from fastlayers import tuner
from conv_samples import (assert_training_matches, assert_within_bound, module_fft_label,
                          rel_err)

CONFIGS = {
    "k3": dict(in_channels=3, out_channels=4, kernel_size=3),
    "k3-pad1": dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
    "k3x5-pad1x2": dict(in_channels=3, out_channels=4, kernel_size=(3, 5), padding=(1, 2)),
    "k1": dict(in_channels=2, out_channels=5, kernel_size=1),
    "k2x4-same": dict(in_channels=3, out_channels=4, kernel_size=(2, 4), padding="same"),
    "k3-same": dict(in_channels=3, out_channels=4, kernel_size=3, padding="same"),
    "k3x2-valid-nobias": dict(in_channels=3, out_channels=4, kernel_size=(3, 2), padding="valid",
                              bias=False),
    "k3-reflect": dict(in_channels=3, out_channels=4, kernel_size=3, padding=2,
                       padding_mode="reflect"),
    "k5x3-replicate": dict(in_channels=3, out_channels=4, kernel_size=(5, 3), padding=(2, 1),
                           padding_mode="replicate"),
    "k3-circular-nobias": dict(in_channels=3, out_channels=4, kernel_size=3, padding=1,
                               padding_mode="circular", bias=False),
    "k4-same-reflect": dict(in_channels=3, out_channels=4, kernel_size=4, padding="same",
                            padding_mode="reflect"),
}
INPUT_HW = (9, 11)

ALGORITHMS = {
    "tuned": None,
    "fft": ("fft", "fft", "fft"),
    "fft-forward": ("fft", "native", "native"),
    "fft-grads": ("native", "fft", "fft"),
    "fft-input-grad": ("native", "fft", "native"),
    "fft-weight-grad": ("fft", "native", "fft"),
}
FL_OPS = ("fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad")


class CountOps(TorchDispatchMode):
    """Counts the fastlayers ops that run."""

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "fastlayers":
            self.calls[func._opname] += 1
        return func(*args, **(kwargs or {}))


def force(m, algorithms, hw=INPUT_HW):
    label = module_fft_label(m, hw)
    names = [label if a == "fft" else a for a in algorithms]
    return m.force_algorithms(forward=names[0], input_grad=names[1], weight_grad=names[2])


def twins(config, **kwargs):
    """An nn.Conv2d and a fastlayers.Conv2d with the same parameters."""
    ref = nn.Conv2d(**config, **kwargs)
    m = fastlayers.Conv2d(**config, **kwargs)
    m.load_state_dict(ref.state_dict())
    return ref, m


def forward_backward(m, x, gy):
    x = x.detach().requires_grad_()
    y = m(x)
    y.backward(gy)
    grads = [x.grad] + [p.grad for p in m.parameters()]
    return [y.detach()] + grads


# --- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("extra", [{}, dict(device="cpu", dtype=torch.float64)],
                         ids=["default", "cpu-float64"])
def test_constructor_parity(config, extra):
    torch.manual_seed(1)
    ref = nn.Conv2d(**config, **extra)
    torch.manual_seed(1)
    m = fastlayers.Conv2d(**config, **extra)
    assert isinstance(m, nn.Conv2d)
    assert repr(m) == repr(ref)
    for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                 "groups", "padding_mode", "_reversed_padding_repeated_twice"):
        assert getattr(m, name) == getattr(ref, name), name
    assert m.state_dict().keys() == ref.state_dict().keys()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        assert p.dtype == q.dtype and p.device == q.device, name
        assert torch.equal(p, q), name


@pytest.mark.parametrize("kwargs", [dict(stride=2), dict(dilation=(2, 1)), dict(groups=3)],
                         ids=["stride", "dilation", "groups"])
def test_constructor_parity_unsupported_arguments(kwargs):
    torch.manual_seed(1)
    ref = nn.Conv2d(3, 6, 3, **kwargs)
    torch.manual_seed(1)
    m = fastlayers.Conv2d(3, 6, 3, **kwargs)
    assert repr(m) == repr(ref)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), ref.parameters()))


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_state_dict_round_trip(config):
    ref = nn.Conv2d(**config)
    m = fastlayers.Conv2d(**config)
    m.load_state_dict(ref.state_dict())
    x = torch.randn(2, config["in_channels"], *INPUT_HW)
    torch.testing.assert_close(m(x), ref(x))

    back = nn.Conv2d(**config)
    back.load_state_dict(m.state_dict())
    for k, v in m.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    torch.testing.assert_close(back(x), m(x))


# --- forward and backward against nn.Conv2d ----------------------------------------------------


@pytest.mark.parametrize("algorithms", ALGORITHMS.values(), ids=ALGORITHMS.keys())
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_forward_backward_match_nn_conv2d(config, algorithms):
    ref, m = twins(config, dtype=torch.float64)
    if algorithms is not None:
        force(m, algorithms)
    x = torch.randn(2, config["in_channels"], *INPUT_HW, dtype=torch.float64)
    gy = torch.randn_like(ref(x))
    expected = forward_backward(ref, x, gy)
    with CountOps() as counter:
        got = forward_backward(m, x, gy)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and rel_err(g, e) <= 1e-10
    used = {op for op, a in zip(FL_OPS, algorithms or ("native",) * 3) if a == "fft"}
    assert set(counter.calls) == used
    sources = {d["source"] for d in tuner.decisions()}
    assert sources == ({"heuristic"} if algorithms is None else {"forced"})


@pytest.mark.parametrize("algorithms", ["tuned", "fft"])
def test_float32_forced_fft_within_pytorch_error(algorithms):
    config = CONFIGS["k3x5-pad1x2"]
    ref, m = twins(config)
    if algorithms == "fft":
        force(m, ALGORITHMS["fft"])
    ref64 = copy.deepcopy(ref).double()
    x = torch.randn(4, 3, *INPUT_HW)
    gy = torch.randn(4, 4, *INPUT_HW)
    expected = forward_backward(ref64, x.double(), gy.double())
    native = forward_backward(ref, x, gy)
    got = forward_backward(m, x, gy)
    for name, g, e, n in zip(("output", "input", "weight", "bias"), got, expected, native):
        assert_within_bound(g, e, n, what=name)


@pytest.mark.parametrize("algorithms", ["tuned", "fft"])
@pytest.mark.parametrize("config", ["k3-pad1", "k2x4-same", "k3-reflect"])
def test_unbatched_input(config, algorithms):
    config = CONFIGS[config]
    ref, m = twins(config, dtype=torch.float64)
    if algorithms == "fft":
        force(m, ALGORITHMS["fft"])
    x = torch.randn(config["in_channels"], *INPUT_HW, dtype=torch.float64)
    gy = torch.randn_like(ref(x))
    expected = forward_backward(ref, x, gy)
    got = forward_backward(m, x, gy)
    assert got[0].dim() == 3
    for e, g in zip(expected, got):
        assert g.shape == e.shape and rel_err(g, e) <= 1e-10


@pytest.mark.parametrize("algorithms", ["tuned", "fft"])
def test_channels_last_input_keeps_its_layout(algorithms):
    ref, m = twins(CONFIGS["k3-pad1"], dtype=torch.float64)
    if algorithms == "fft":
        force(m, ALGORITHMS["fft"])
    x = torch.randn(2, 3, *INPUT_HW, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    gy = torch.randn_like(ref(x))
    expected = forward_backward(ref, x, gy)
    got = forward_backward(m, x, gy)
    assert got[0].is_contiguous(memory_format=torch.channels_last)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and rel_err(g, e) <= 1e-10


def test_empty_batch():
    ref, m = twins(CONFIGS["k3-pad1"])
    force(m, ALGORITHMS["fft"])
    x = torch.randn(0, 3, *INPUT_HW, requires_grad=True)
    y = m(x)
    assert y.shape == ref(x).shape == (0, 4, *INPUT_HW)
    y.sum().backward()
    assert x.grad.shape == x.shape and not m.weight.grad.any()


def test_partial_forcing_leaves_other_passes_to_the_tuner():
    ref, m = twins(CONFIGS["k3-pad1"], dtype=torch.float64)
    m.force_algorithms(weight_grad=module_fft_label(m, INPUT_HW))
    x = torch.randn(2, 3, *INPUT_HW, dtype=torch.float64)
    gy = torch.randn(2, 4, *INPUT_HW, dtype=torch.float64)
    with CountOps() as counter:
        got = forward_backward(m, x, gy)
    assert set(counter.calls) == {"fft_conv2d_weight_grad"}
    for e, g in zip(forward_backward(ref, x, gy), got):
        assert rel_err(g, e) <= 1e-10
    sources = collections.Counter(d["source"] for d in tuner.decisions())
    assert sources == {"forced": 1, "heuristic": 2}


def test_bad_forced_labels():
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    with pytest.raises(ValueError):
        m.force_algorithms(forward="winograd")
    with pytest.raises(ValueError):
        m.force_algorithms(forward="fft:16")
    m.force_algorithms(forward="fft:8x8")
    with pytest.raises(RuntimeError, match="`basis`"):
        m(torch.randn(1, 3, *INPUT_HW))


def test_no_grad_forward_runs_only_the_forward():
    ref, m = twins(CONFIGS["k3-pad1"])
    force(m, ALGORITHMS["fft"])
    x = torch.randn(2, 3, *INPUT_HW)
    with torch.no_grad(), CountOps() as counter:
        y = m(x)
    assert dict(counter.calls) == {"fft_conv2d": 1}
    torch.testing.assert_close(y, ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, reason", [
    (dict(stride=2), "stride"),
    (dict(dilation=2), "dilation"),
    (dict(groups=3, out_channels=6), "groups"),
])
def test_unsupported_modules_fall_back_to_native(kwargs, reason):
    config = dict(in_channels=3, out_channels=4, kernel_size=3, padding=1)
    config.update(kwargs)
    ref, m = twins(config)
    m.force_algorithms(forward="fft:16x16", input_grad="fft:16x16", weight_grad="fft:16x16")
    x = torch.randn(2, 3, *INPUT_HW)
    gy = torch.randn_like(ref(x))
    with CountOps() as counter:
        got = forward_backward(m, x, gy)
    assert not counter.calls
    for e, g in zip(forward_backward(ref, x, gy), got):
        torch.testing.assert_close(g, e)
    text = tuner.report()
    assert reason in text
    assert any(d["source"] == "unsupported" and reason in d["reason"] for d in tuner.decisions())


def test_autocast_cpu_bfloat16_falls_back_to_native():
    ref, m = twins(CONFIGS["k3-pad1"])
    force(m, ALGORITHMS["fft"])
    x = torch.randn(2, 3, *INPUT_HW)
    with torch.autocast("cpu", dtype=torch.bfloat16), CountOps() as counter:
        y = m(x)
        expected = ref(x)
    assert y.dtype == torch.bfloat16
    assert not counter.calls
    torch.testing.assert_close(y, expected)


# --- higher-order gradients ----------------------------------------------------------------------


@pytest.mark.parametrize("algorithms", ["tuned", "fft", "fft-forward", "fft-grads"])
def test_double_backward(algorithms):
    ref, m = twins(CONFIGS["k3x5-pad1x2"], dtype=torch.float64)
    if ALGORITHMS[algorithms] is not None:
        force(m, ALGORITHMS[algorithms])
    x = torch.randn(2, 3, *INPUT_HW, dtype=torch.float64)

    def second_order(module):
        xi = x.clone().requires_grad_()
        y = module(xi)
        (gx,) = torch.autograd.grad(y.pow(2).sum(), xi, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), [xi, module.weight, module.bias])

    for e, g in zip(second_order(ref), second_order(m)):
        assert rel_err(g, e) <= 1e-10


def test_module_gradcheck_forced_fft():
    m = fastlayers.Conv2d(2, 3, (3, 2), padding=(1, 1), padding_mode="reflect",
                          dtype=torch.float64)
    force(m, ALGORITHMS["fft"], hw=(5, 4))
    x = torch.randn(2, 2, 5, 4, dtype=torch.float64, requires_grad=True)

    def fn(x, w, b):
        return torch.func.functional_call(m, {"weight": w, "bias": b}, (x,))

    args = (x, m.weight.detach().requires_grad_(), m.bias.detach().requires_grad_())
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args)


# --- convert -------------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect")
        self.norm = nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x))) + x


def small_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Sequential(Block(), nn.Conv2d(8, 8, (2, 4), padding="same", bias=False)),
        nn.Conv2d(8, 8, 3, stride=2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )


def test_convert_replaces_every_conv2d_in_place():
    model = small_model().eval()
    x = torch.randn(2, 3, 12, 10)
    expected = model(x)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    params = list(model.parameters())
    buffers = list(model.buffers())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    assert fastlayers.convert(model) is model
    assert len(convs) == 4
    for m in convs:
        assert type(m) is fastlayers.Conv2d and isinstance(m, nn.Conv2d)
    assert [m for m in model.modules() if isinstance(m, nn.Conv2d)] == convs
    assert all(a is b for a, b in zip(model.parameters(), params))
    assert all(a is b for a, b in zip(model.buffers(), buffers))
    assert len(list(model.parameters())) == len(params)
    torch.testing.assert_close(model(x), expected)

    model(x).sum().backward()
    optimizer.step()
    assert all(p.grad is not None for p in params)


def test_convert_a_bare_conv2d():
    conv = nn.Conv2d(3, 4, 3)
    weight = conv.weight
    assert fastlayers.convert(conv) is conv
    assert type(conv) is fastlayers.Conv2d and conv.weight is weight


def test_converted_model_forced_fft_matches():
    model = small_model().eval()
    fast = fastlayers.convert(copy.deepcopy(model))
    x = torch.randn(2, 3, 12, 10)
    for m in fast.modules():
        if isinstance(m, fastlayers.Conv2d) and m.stride == (1, 1):
            force(m, ALGORITHMS["fft"], hw=(12, 10))
    with CountOps() as counter:
        y = fast(x)
    assert counter.calls["fft_conv2d"] == 3
    torch.testing.assert_close(y, model(x), rtol=1e-4, atol=1e-5)


# --- torch.compile -------------------------------------------------------------------------------


def small_cnn(conv=fastlayers.Conv2d):
    return nn.Sequential(
        conv(3, 8, 3, padding=1),
        nn.ReLU(),
        conv(8, 8, (3, 5), padding="same", padding_mode="reflect"),
        nn.ReLU(),
        conv(8, 4, 1, bias=False),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 5),
    )


def force_all_fft(model, hw):
    for m in model.modules():
        if isinstance(m, fastlayers.Conv2d):
            force(m, ALGORITHMS["fft"], hw)
    return model


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_matches_eager(backend):
    torch._dynamo.reset()
    model = force_all_fft(small_cnn(), (12, 10))
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x = torch.randn(2, 3, 12, 10)

    def run(fn):
        model.zero_grad()
        xi = x.clone().requires_grad_()
        y = fn(xi)
        y.pow(2).sum().backward()
        return [y.detach(), xi.grad] + [p.grad.clone() for p in model.parameters()]

    expected = run(model)
    for e, g in zip(expected, run(compiled)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def test_compile_graph_calls_the_fft_ops():
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    torch._dynamo.reset()
    model = force_all_fft(small_cnn(), (12, 10))
    backend = AotEagerAndRecordGraphs()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    compiled(torch.randn(2, 3, 12, 10, requires_grad=True)).sum().backward()
    forward = "\n".join(g.code for g in backend.fw_graphs)
    backward = "\n".join(g.code for g in backend.bw_graphs)
    assert forward.count("fastlayers.fft_conv2d.default") == 3
    assert "fastlayers.fft_conv2d_input_grad.default" in backward
    assert "fastlayers.fft_conv2d_weight_grad.default" in backward


# --- training ------------------------------------------------------------------------------------


def test_training_steps_match_nn_conv2d():
    torch.manual_seed(3)
    ref = small_cnn(nn.Conv2d)
    fast = force_all_fft(fastlayers.convert(copy.deepcopy(ref)), (16, 16))
    assert_training_matches(ref, fast, 8, (16, 16))
