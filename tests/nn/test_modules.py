import collections
import copy
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import gradcheck, gradgradcheck
from torch.utils._python_dispatch import TorchDispatchMode

import fastlayers
from fastlayers import tuner
from fastlayers.algorithms import parse
from fastlayers.ops import conv_tf32_allowed
from conv_samples import (RecordOps, assert_training_matches, assert_within_bound, cudnn_tf32,
                          fft_reference, module_fft_label, pass_decisions, rel_err)


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

# Each pass's algorithm, pinned on the module; "cached": FFT for every pass, from the tuner's file.
ALGORITHMS = {
    "cached": None,
    "fft": ("fft", "fft", "fft"),
    "fft-forward": ("fft", "native", "native"),
    "fft-grads": ("native", "fft", "fft"),
    "fft-input-grad": ("native", "fft", "native"),
    "fft-weight-grad": ("fft", "native", "fft"),
}
FL_OPS = ("fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad")


class CountOps(TorchDispatchMode):
    """Counts the fastlayers ops that run, and records each one's (basis, backend, tile)."""

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()
        self.args = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "fastlayers":
            self.calls[func._opname] += 1
            schema = func._schema.arguments  # trailing arguments at their defaults are left out
            named = {a.name: v for a, v in zip(schema, list(args) + [a.default_value
                                                                   for a in schema[len(args):]])}
            self.args[func._opname] = (tuple(named["basis"]), named["backend"], tuple(named["tile"]))
        return func(*args, **(kwargs or {}))


def force(m, algorithms, hw=INPUT_HW):
    label = module_fft_label(m, hw)
    names = [label if a == "fft" else a for a in algorithms]
    return m.force_algorithms(forward=names[0], input_grad=names[1], weight_grad=names[2])


def cache_fft(m, x):
    """Writes the FFT label of every pass of `m` on `x` into the tuner's file and switches the
    tuner to mode 'cache': the module takes its choices from the tuner."""
    xi = x if x.dim() == 4 else x.unsqueeze(0)
    xp, padding = m._padding_pair(xi)
    tf32 = xp.dtype == torch.float32 and xp.device.type == "cuda" and conv_tf32_allowed()
    p = tuner.ConvProblem.from_tensors(xp, m.weight, padding, tf32)
    label = module_fft_label(m, x.shape[-2:])
    path = tuner.cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": tuner.FORMAT, "entries": {
        p.key(pass_): {"choice": label} for pass_ in tuner.PASSES}}))
    tuner.set_mode("cache")
    tuner.clear()


def set_algorithms(m, variant, x):
    """Pins the variant's algorithms on `m`, or (cached) has the tuner supply FFT for all passes."""
    if ALGORITHMS[variant] is None:
        cache_fft(m, x)
    else:
        force(m, ALGORITHMS[variant], x.shape[-2:])
    return m


def twins(config, **kwargs):
    """An nn.Conv2d and a fastlayers.Conv2d with the same parameters."""
    ref = nn.Conv2d(**config, **kwargs)
    m = fastlayers.Conv2d(**config, **kwargs)
    m.load_state_dict(ref.state_dict())
    return ref, m


def match_float64(ref, m, x, variant):
    """Sets the variant's algorithms on `m`, runs forward and backward of `ref` and `m` on `x` with
    one grad_output and checks each of m's results against ref's to float64 accuracy. Returns m's
    results and the fastlayers ops that ran."""
    set_algorithms(m, variant, x)
    gy = torch.randn_like(ref(x))
    expected = forward_backward(ref, x, gy)
    with CountOps() as counter:
        got = forward_backward(m, x, gy)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and rel_err(g, e) <= 1e-10
    return got, set(counter.calls)


RESULTS = ("output", "input grad", "weight grad", "bias grad")


def assert_within_rule(got, expected, native, m, x, gy, basis, precision=None, what=""):
    """m's [y, grad x, grad w, grad b] (zero padding) against the float64 `expected` within
    conv_samples' rule: PyTorch's direct results `native` and PyTorch's computation of the
    module's algorithm in the same precision (the three passes by FFT at `basis`; the bias
    gradient as the module computes it for a non-native pass, a sum of grad_output)."""
    dt = torch.float16 if precision == "float16" else x.dtype
    args = [t.detach().to(dt) for t in (x, m.weight, m.bias, gy)]
    padding = tuple(int(p) for p in m.padding)
    same_algorithm = [fft_reference(i, *args, padding, basis, precision == "tf32")
                      for i in range(3)] + [args[3].sum((0, 2, 3)).to(got[3].dtype)]
    for name, g, e, n, f in zip(RESULTS, got, expected, native, same_algorithm):
        assert_within_bound(g, e, n, f, precision, what="%s %s" % (what, name))


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
    ref = nn.Conv2d(**config, dtype=torch.float64)
    m = fastlayers.Conv2d(**config, dtype=torch.float64)
    m.load_state_dict(ref.state_dict())
    back = nn.Conv2d(**config, dtype=torch.float64)
    back.load_state_dict(m.state_dict())
    assert m.state_dict().keys() == ref.state_dict().keys() == back.state_dict().keys()
    for k, v in ref.state_dict().items():
        assert torch.equal(m.state_dict()[k], v) and torch.equal(back.state_dict()[k], v), k
    x = torch.randn(2, config["in_channels"], *INPUT_HW, dtype=torch.float64)
    force(m, ALGORITHMS["fft"])
    assert rel_err(m(x), back(x)) <= 1e-10


# --- forward and backward against nn.Conv2d ----------------------------------------------------


@pytest.mark.parametrize("variant", ALGORITHMS)
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_forward_backward_match_nn_conv2d(config, variant, device):
    ref, m = twins(config, dtype=torch.float64, device=device)
    x = torch.randn(2, config["in_channels"], *INPUT_HW, dtype=torch.float64, device=device)
    _, ran = match_float64(ref, m, x, variant)
    assert ran == {op for op, a in zip(FL_OPS, ALGORITHMS[variant] or ("fft",) * 3) if a == "fft"}
    sources = {d["source"] for d in tuner.decisions()}
    assert sources == ({"file"} if ALGORITHMS[variant] is None else {"forced"})


@pytest.mark.parametrize("variant", ["cached", "fft"])
def test_float32_fft_within_pytorch_error(variant, device):
    config = CONFIGS["k3x5-pad1x2"]
    ref, m = twins(config, device=device)
    ref64 = copy.deepcopy(ref).double()
    x = torch.randn(4, 3, *INPUT_HW, device=device)
    gy = torch.randn(4, 4, *INPUT_HW, device=device)
    with cudnn_tf32(False):
        set_algorithms(m, variant, x)
        expected = forward_backward(ref64, x.double(), gy.double())
        native = forward_backward(ref, x, gy)
        with CountOps() as counter:
            got = forward_backward(m, x, gy)
    assert set(counter.calls) == set(FL_OPS)
    assert_within_rule(got, expected, native, m, x, gy, parse(module_fft_label(m, INPUT_HW)).params.basis)


@pytest.mark.parametrize("variant", ["cached", "fft"])
@pytest.mark.parametrize("config", ["k3-pad1", "k2x4-same", "k3-reflect"])
def test_unbatched_input(config, variant):
    config = CONFIGS[config]
    ref, m = twins(config, dtype=torch.float64)
    x = torch.randn(config["in_channels"], *INPUT_HW, dtype=torch.float64)
    got, ran = match_float64(ref, m, x, variant)
    assert ran == set(FL_OPS) and got[0].dim() == 3


@pytest.mark.parametrize("layouts", ["x", "w", "xw"])
@pytest.mark.parametrize("variant", ["cached", "fft"])
def test_channels_last_gives_nn_conv2ds_layout(variant, layouts, device):
    """The result's layout is nn.Conv2d's: channels_last where the input or the weight is, but
    contiguous for float64 on CUDA (cuDNN has no NHWC float64)."""
    cl = torch.channels_last
    ref, m = twins(CONFIGS["k3-pad1"], dtype=torch.float64, device=device)
    if "w" in layouts:
        for mod in (ref, m):
            mod.weight.data = mod.weight.data.contiguous(memory_format=cl)
    x = torch.randn(2, 3, *INPUT_HW, dtype=torch.float64, device=device)
    if "x" in layouts:
        x = x.contiguous(memory_format=cl)
    got, ran = match_float64(ref, m, x, variant)
    y = ref(x)
    assert ran == set(FL_OPS) and got[0].stride() == y.stride()
    assert y.is_contiguous(memory_format=cl) == (device == "cpu")


def test_empty_batch(device):
    ref, m = twins(CONFIGS["k3-pad1"], device=device)
    force(m, ALGORITHMS["fft"])
    x = torch.randn(0, 3, *INPUT_HW, device=device, requires_grad=True)
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
    with pytest.raises(ValueError, match="'winograd'"):
        m.force_algorithms(forward="winograd")
    with pytest.raises(ValueError, match="'fft:16'"):
        m.force_algorithms(weight_grad="fft:16")
    assert m._fl_forced is None
    m.force_algorithms(forward="fft:8x8")  # too small for the shape: refused when first planned
    with pytest.raises(ValueError, match="'fft:8x8' cannot serve the forward pass.*basis 8x8"):
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
        with pytest.warns(UserWarning, match="pinned algorithms .* not used: dtype torch.bfloat16"):
            y = m(x)
        expected = ref(x)
    assert y.dtype == torch.bfloat16
    assert not counter.calls
    torch.testing.assert_close(y, expected)
    # the fallback is in the report, with its reason
    assert any(d["source"] == "unsupported" and "bfloat16 on cpu" in d["reason"]
               for d in tuner.decisions())


def test_autocast_leaves_float64_alone(device):
    # autocast casts float16/32 operands, never float64: a float64 layer computes in float64 on
    # fastlayers' path under autocast too, as nn.Conv2d does on its own
    ref, m = twins(CONFIGS["k3-pad1"], dtype=torch.float64, device=device)
    force(m, ALGORITHMS["fft"])
    x = torch.randn(2, 3, *INPUT_HW, dtype=torch.float64, device=device, requires_grad=True)
    dt = torch.bfloat16 if device == "cpu" else torch.float16
    with torch.autocast(device, dtype=dt), CountOps() as counter:
        y = m(x)
        y.sum().backward()
        expected = ref(x)
    assert y.dtype == expected.dtype == torch.float64
    assert set(counter.calls) == set(FL_OPS)
    torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)


# --- higher-order gradients ----------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["cached", "fft", "fft-forward", "fft-grads"])
def test_double_backward(variant, device):
    ref, m = twins(CONFIGS["k3x5-pad1x2"], dtype=torch.float64, device=device)
    x = torch.randn(2, 3, *INPUT_HW, dtype=torch.float64, device=device)
    set_algorithms(m, variant, x)

    def second_order(module):
        xi = x.clone().requires_grad_()
        y = module(xi)
        (gx,) = torch.autograd.grad(y.pow(2).sum(), xi, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), [xi, module.weight, module.bias])

    for e, g in zip(second_order(ref), second_order(m)):
        assert rel_err(g, e) <= 1e-10


def test_module_gradcheck_forced_fft(device):
    # circular: a padding mode whose backward is deterministic on CUDA too (reflection padding's
    # accumulates with atomics there, which gradcheck's reentrancy check rejects)
    m = fastlayers.Conv2d(2, 3, (3, 2), padding=(1, 1), padding_mode="circular",
                          dtype=torch.float64, device=device)
    force(m, ALGORITHMS["fft"], hw=(5, 4))
    x = torch.randn(2, 2, 5, 4, dtype=torch.float64, device=device, requires_grad=True)

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


def force_all_fft(model, hw, labels=None):
    """Every fastlayers.Conv2d of `model` on FFT: its smallest fast basis, or `labels`."""
    for m in model.modules():
        if isinstance(m, fastlayers.Conv2d):
            if labels is None:
                force(m, ALGORITHMS["fft"], hw)
            else:
                m.force_algorithms(*labels)
    return model


@pytest.mark.parametrize("labels", [None, ("fbfft:8x8,tile=6x4", "fft:8x8,tile=6x4",
                                           "fbfft:16x16,tile=10x9")], ids=["untiled", "tiled"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_matches_eager(backend, labels):
    torch._dynamo.reset()
    model = force_all_fft(small_cnn(), (12, 10), labels)
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


@pytest.mark.parametrize("variant", ["tuned", "fft"])
def test_training_steps_match_nn_conv2d(variant, device, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0.2)
    torch.manual_seed(3)
    ref = small_cnn(nn.Conv2d).to(device)
    fast = fastlayers.convert(copy.deepcopy(ref))
    if variant == "fft":
        force_all_fft(fast, (16, 16))
    with cudnn_tf32(False):
        assert_training_matches(ref, fast, 8, (16, 16), device=device)
    sources = {d["source"] for d in tuner.decisions()}
    assert sources == ({"tuned"} if variant == "tuned" else {"forced"})


# --- what the module binds, and the other devices' cases ------------------------------------------


def test_choices_are_bound_once(monkeypatch):
    """After the first call of a shape, calls neither parse labels, nor ask the tuner, nor bind
    op calls again."""
    import fastlayers.algorithms as registry
    m = fastlayers.Conv2d(3, 4, 3, padding=1, dtype=torch.float64)
    m.force_algorithms("fbfft:16x16", "fft:8x8,tile=5x6", None)
    x = torch.randn(2, 3, *INPUT_HW, dtype=torch.float64, requires_grad=True)
    m(x).sum().backward()
    for name in ("parse", "conv2d_call", "conv2d_grads"):
        monkeypatch.setattr(registry, name, lambda *a, **k: pytest.fail("bound again"))
    monkeypatch.setattr(tuner, "choose_conv2d", lambda *a, **k: pytest.fail("asked the tuner"))
    with CountOps() as counter:
        for _ in range(3):
            m(x).sum().backward()
    assert counter.calls == {"fft_conv2d": 3, "fft_conv2d_input_grad": 3}


# Plans whose families all have a C++ form: the eager call is one C++ autograd node.
CPP_PLANS = [("fft:16x16", "native", "winograd:2"), ("winograd:4", "fbfft:16x16", "native"),
             ("native", "winograd:2", "fft:16x16,tile=7x9"), ("winograd:2",) * 3]


@pytest.mark.parametrize("kind", ["conv2d", "conv1d"])
@pytest.mark.parametrize("labels", CPP_PLANS, ids=["-".join(p) for p in CPP_PLANS])
def test_eager_calls_run_the_cpp_node(labels, kind, device):
    """The C++ node (csrc/conv_module) runs each pass's op; values and every gradient, double
    backward included, match nn.Conv*d in float64."""
    torch.manual_seed(0)
    if kind == "conv2d":
        ref = nn.Conv2d(3, 4, 3, padding=1, dtype=torch.float64, device=device)
        x = torch.randn(2, 3, 9, 11, dtype=torch.float64, device=device)
    else:
        ref = nn.Conv1d(3, 4, 3, padding=1, dtype=torch.float64, device=device)
        x = torch.randn(2, 3, 11, dtype=torch.float64, device=device)
        # a 1-D problem has height 1: cuFFT bases of height 1 (fbfft's sides start at 2, and
        # Winograd takes 3x3 filters)
        labels = tuple(lb if lb == "native" else "fft:1x16,tile=1x9" if "tile" in lb else
                       "fft:1x16" for lb in labels)
    if device == "cuda":  # fbfft computes in float32 there
        labels = tuple(lb.replace("fbfft", "fft") for lb in labels)
    m = fastlayers.convert(copy.deepcopy(ref)).force_algorithms(*labels)
    gy = torch.randn_like(ref(x))
    expected = forward_backward(ref, x, gy)
    with RecordOps() as rec:
        got = forward_backward(m, x, gy)
    ops = {"fft": "fft_conv2d", "fbfft": "fft_conv2d", "winograd": "winograd_conv2d"}  # label name
    assert sorted(name for name, _ in rec.calls) == sorted(
        ops[lb.split(":")[0]] + suffix for lb, suffix in zip(labels, ("", "_input_grad",
                                                                       "_weight_grad"))
        if lb != "native")
    assert "PlannedConv" in m(x.requires_grad_()).grad_fn.name()
    for e, g in zip(expected, got):
        assert g.shape == e.shape and rel_err(g, e) <= 1e-10

    def second_order(module):
        xi = x.detach().clone().requires_grad_()
        (gx,) = torch.autograd.grad(module(xi).pow(2).sum(), xi, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), [xi, module.weight])

    for e, g in zip(second_order(ref), second_order(m)):
        assert rel_err(g, e) <= 1e-10
    with torch.no_grad():
        y = m(x)
    assert y.grad_fn is None and rel_err(y, ref(x).detach()) <= 1e-10


@pytest.mark.parametrize("hw, k, padding", [((2, 2), 3, 1), ((1, 5), 3, 1), ((3, 3), 5, 2)])
def test_input_smaller_than_the_kernel_but_padded_enough(hw, k, padding, device):
    # the zero padding is the op's, so the padded input decides: such a layer runs fastlayers
    # (it went to nn.Conv2d's path unrecorded, comparing the unpadded input with the kernel)
    ref = nn.Conv2d(2, 3, k, padding=padding, dtype=torch.float64, device=device)
    m = fastlayers.convert(copy.deepcopy(ref)).force_algorithms("fft:8x8", "fft:8x8", "fft:8x8")
    x = torch.randn(2, 2, *hw, dtype=torch.float64, device=device)
    gy = torch.randn_like(ref(x))
    with RecordOps() as rec:
        got = forward_backward(m, x, gy)
    assert sorted(name for name, _ in rec.calls) == sorted(FL_OPS)
    for e, g in zip(forward_backward(ref, x, gy), got):
        assert rel_err(g, e) <= 1e-10
    small = torch.randn(2, 2, k - 2 * padding - 1, k, dtype=torch.float64, device=device)
    with pytest.raises(RuntimeError, match="Kernel size can't be greater") as got_error:
        m(small)  # padded, still smaller than the kernel: nn.Conv2d's own error
    with pytest.raises(RuntimeError) as expected_error:
        ref(small)
    assert str(got_error.value) == str(expected_error.value)


def test_a_family_without_a_cpp_form_keeps_the_python_node():
    import fastlayers.algorithms as registry
    from fastlayers.algorithms.fft import Fft

    class PythonOnly(Fft):  # the FFT ops under another name, with no C++ form
        names = ("pyfft",)

        def parse(self, name, params, label):
            return super().parse("fft", params, label)

        def format(self, name, params):
            return "py" + super().format("fft", params)

        def cpp_pass(self, choice, pass_):
            return None

    family = registry.register(PythonOnly())
    try:
        ref = nn.Conv2d(3, 4, 3, padding=1, dtype=torch.float64)
        m = fastlayers.convert(copy.deepcopy(ref)).force_algorithms("pyfft:16x16", "native",
                                                                     "native")
        x = torch.randn(2, 3, 9, 11, dtype=torch.float64, requires_grad=True)
        y = m(x)
        assert y.grad_fn.name() == "_ConvFunctionBackward"
        gy = torch.randn_like(y)
        for e, g in zip(forward_backward(ref, x, gy), forward_backward(m, x, gy)):
            assert rel_err(g, e) <= 1e-10
    finally:
        registry.unregister(family)


@pytest.mark.parametrize("labels", [
    ("fbfft:32x32",) * 3,
    ("fbfft:16x16,tile=14x14", "fft:16x16,tile=14x14", "fbfft:8x8,tile=6x6"),
    ("fbfft:8x8,tile=6x6", "native", "fft:8x8,tile=6x6"),
])
def test_fbfft_and_tiled_labels_match_nn_conv2d(labels, device):
    ref, m = twins(dict(in_channels=8, out_channels=6, kernel_size=3, padding=1), device=device)
    m.force_algorithms(*labels)
    x = torch.randn(4, 8, 30, 27, device=device)
    gy = torch.randn(4, 6, 30, 27, device=device)
    with cudnn_tf32(False):
        expected = forward_backward(copy.deepcopy(ref).double(), x.double(), gy.double())
        native = forward_backward(ref, x, gy)
        with CountOps() as counter:
            got = forward_backward(m, x, gy)
    assert counter.args == {op: (parse(label).params.basis, parse(label).params.backend,
                                 parse(label).params.tile)
                            for op, label in zip(FL_OPS, labels) if label != "native"}
    assert_within_rule(got, expected, native, m, x, gy, (32, 32), what=str(labels))


def test_tuned_module_matches_nn_conv2d(device, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0.2)
    ref, m = twins(dict(in_channels=16, out_channels=16, kernel_size=5, padding=2), device=device)
    x = torch.randn(4, 16, 32, 32, device=device)
    gy = torch.randn(4, 16, 32, 32, device=device)
    with cudnn_tf32(False):
        got = forward_backward(m, x, gy)
        expected = forward_backward(copy.deepcopy(ref).double(), x.double(), gy.double())
        native = forward_backward(ref, x, gy)
    assert {r["source"] for r in pass_decisions()} == {"tuned"}
    assert len(pass_decisions()) == 3
    assert_within_rule(got, expected, native, m, x, gy, (36, 36), what="tuned")


@pytest.mark.gpu
def test_autocast_half_input_from_the_layer_before():
    # In a network under autocast a layer's input is already float16 (the layer before computed
    # in it) while its weight is float32: autocast casts the weight, and so does the module (it
    # ran nn.Conv2d's path for such a layer, which left every layer after the first off fastlayers)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1))
    ref = ref.cuda()
    m = fastlayers.convert(copy.deepcopy(ref))
    for layer in (m[0], m[2]):
        layer.force_algorithms(forward="fft:16x16", input_grad="fft:16x16",
                               weight_grad="fft:16x16")
    x = torch.randn(2, 3, 12, 12, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.float16):
        with CountOps() as counter:
            y = m(x)
            y.float().square().sum().backward()
        expected = ref(x)
    assert counter.calls == {op: 2 for op in FL_OPS}, counter.calls
    assert y.dtype == expected.dtype == torch.float16
    exact = copy.deepcopy(ref).double()(x.detach().double())
    assert rel_err(y, exact) <= 2 * rel_err(expected, exact)


@pytest.mark.gpu
def test_autocast_float16_forward_and_gradients():
    ref, m = twins(CONFIGS["k3-pad1"], device="cuda")
    m.force_algorithms(forward="fft:16x16", input_grad="fft:16x16", weight_grad="fft:16x16")
    x = torch.randn(2, 3, 12, 12, device="cuda")
    gy = torch.randn(2, 4, 12, 12, device="cuda").half()
    with torch.autocast("cuda", dtype=torch.float16), CountOps() as counter:
        got = forward_backward(m, x, gy)
        native = forward_backward(ref, x, gy)
    assert set(counter.calls) == set(FL_OPS)
    assert got[0].dtype == native[0].dtype == torch.float16
    assert all(g.dtype == torch.float32 for g in got[1:])
    expected = forward_backward(copy.deepcopy(ref).double(), x.double(), gy.double())
    assert_within_rule(got, expected, native, m, x, gy, (16, 16), "float16", what="autocast")
