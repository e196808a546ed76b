"""fastlayers.Conv1d against nn.Conv1d: a 2-D convolution of height 1 through Conv2d's machinery."""
import copy
import json

import pytest
import torch
from torch import nn
from torch._dynamo.testing import AotEagerAndRecordGraphs
from torch._dynamo.utils import counters
from torch.autograd import gradcheck, gradgradcheck

import fastlayers
from fastlayers import tuner
from fastlayers.algorithms import parse
from fastlayers.ops import good_fft_size
from conv_samples import (assert_within_bound, cudnn_tf32, fft_reference, module_fft_label,
                          pass_decisions, rel_err)
from test_modules import FL_OPS, CountOps, forward_backward

CONFIGS = {
    "k3": dict(in_channels=3, out_channels=4, kernel_size=3),
    "k3-pad1": dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
    "k5-pad4": dict(in_channels=3, out_channels=4, kernel_size=5, padding=4),
    "k1": dict(in_channels=2, out_channels=5, kernel_size=1),
    "k4-same": dict(in_channels=3, out_channels=4, kernel_size=4, padding="same"),
    "k5-same": dict(in_channels=3, out_channels=4, kernel_size=5, padding="same"),
    "k3-valid-nobias": dict(in_channels=3, out_channels=4, kernel_size=3, padding="valid",
                            bias=False),
    "k3-reflect": dict(in_channels=3, out_channels=4, kernel_size=3, padding=2,
                       padding_mode="reflect"),
    "k4-replicate": dict(in_channels=3, out_channels=4, kernel_size=4, padding=3,
                         padding_mode="replicate"),
    "k3-circular-nobias": dict(in_channels=3, out_channels=4, kernel_size=3, padding=1,
                               padding_mode="circular", bias=False),
    "k4-same-reflect": dict(in_channels=3, out_channels=4, kernel_size=4, padding="same",
                            padding_mode="reflect"),
    "k6-same-circular": dict(in_channels=3, out_channels=4, kernel_size=6, padding="same",
                             padding_mode="circular"),
}
INPUT_L = 23

# Each pass's algorithm; "fft" is the smallest fast basis of height 1. "cached": FFT for every
# pass, from the tuner's file.
ALGORITHMS = {
    "cached": None,
    "fft": ("fft", "fft", "fft"),
    "fft-forward": ("fft", "native", "native"),
    "fft-grads": ("native", "fft", "fft"),
}


def fft_label(m, length):
    """'fft:1xN', the smallest fast basis of height 1 holding a Conv1d's padded input."""
    left, right = m._reversed_padding_repeated_twice
    return "fft:1x%d" % good_fft_size(length + left + right)


def problem(m, x):
    """The tuner's problem of `m` (a Conv1d or Conv2d) on a batched `x`; a Conv1d's is the 2-D
    convolution of height 1."""
    xp, padding = m._padding_pair(x)
    w = m.weight
    if w.dim() == 3:
        xp, w = xp.unsqueeze(2), w.unsqueeze(2)
    return tuner.ConvProblem.from_tensors(xp, w, padding, False)


def write_decisions(labels):
    """Writes {tuner key: label} into the tuner's file and forgets the decisions in memory."""
    path = tuner.cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": tuner.FORMAT,
                                "entries": {k: {"choice": v} for k, v in labels.items()}}))
    tuner.clear()


def set_algorithms(m, variant, x):
    """Pins the variant's labels on `m`, or (cached) writes the FFT label of every pass into the
    tuner's file and switches the tuner to mode 'cache'."""
    label = fft_label(m, x.shape[-1])
    if ALGORITHMS[variant] is not None:
        return m.force_algorithms(*(label if a == "fft" else a for a in ALGORITHMS[variant]))
    p = problem(m, x if x.dim() == 3 else x.unsqueeze(0))
    write_decisions({p.key(pass_): label for pass_ in tuner.PASSES})
    tuner.set_mode("cache")
    return m


def twins(config, **kwargs):
    """An nn.Conv1d and its fastlayers.Conv1d copy."""
    ref = nn.Conv1d(**config, **kwargs)
    return ref, fastlayers.convert(copy.deepcopy(ref))


def run_both(ref, m, x, gy=None):
    """(ref's results, m's results, the fastlayers ops m ran with their (basis, backend, tile)):
    output and the gradients of input, weight and bias for one grad_output."""
    gy = torch.randn_like(ref(x)) if gy is None else gy
    ref.zero_grad()
    m.zero_grad()
    expected = forward_backward(ref, x, gy)
    with CountOps() as counter:
        got = forward_backward(m, x, gy)
    return expected, got, counter


def assert_float64_close(expected, got, what=""):
    for name, e, g in zip(("output", "input grad", "weight grad", "bias grad"), expected, got):
        assert g.shape == e.shape, (what, name, g.shape, e.shape)
        assert rel_err(g, e) <= 1e-10, (what, name, rel_err(g, e))


def assert_within_rule(got, expected, native, m, x, gy, basis, what=""):
    """m's results in float32 against float64 `expected` within conv_samples' rule: PyTorch's
    direct results `native`, and PyTorch's FFT at `basis` of the height-1 problem (zero padding)."""
    x4, w4, gy4 = (t.detach().unsqueeze(2) for t in (x, m.weight, gy))
    padding = (0, int(m.padding[0]))
    same = [fft_reference(i, x4, w4, m.bias.detach(), gy4, padding, basis).squeeze(2)
            for i in range(3)]
    same.append(gy.sum((0, 2)))
    for name, g, e, n, f in zip(("output", "input grad", "weight grad", "bias grad"), got,
                                expected, native, same):
        assert_within_bound(g, e, n, f, what="%s %s" % (what, name))


# --- construction and state_dict ---------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_constructor_repr_and_initialisation_are_nn_conv1d(config):
    torch.manual_seed(1)
    ref = nn.Conv1d(**config, dtype=torch.float64)
    torch.manual_seed(1)
    m = fastlayers.Conv1d(**config, dtype=torch.float64)
    assert isinstance(m, nn.Conv1d) and repr(m) == repr(ref)
    assert {k: v for k, v in vars(m).items() if not k.startswith("_")} == \
        {k: v for k, v in vars(ref).items() if not k.startswith("_")}
    assert m._reversed_padding_repeated_twice == ref._reversed_padding_repeated_twice
    assert list(m.state_dict()) == list(ref.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), ref.parameters()))


@pytest.mark.parametrize("config", ["k3-pad1", "k4-same", "k3-valid-nobias"])
def test_state_dict_round_trips_with_nn_conv1d(config, device):
    config = CONFIGS[config]
    ref = nn.Conv1d(**config, dtype=torch.float64, device=device)
    m = fastlayers.Conv1d(**config, dtype=torch.float64, device=device)
    m.load_state_dict(ref.state_dict())
    back = nn.Conv1d(**config, dtype=torch.float64, device=device)
    back.load_state_dict(m.state_dict())
    for k, v in ref.state_dict().items():
        assert torch.equal(m.state_dict()[k], v) and torch.equal(back.state_dict()[k], v), k
    x = torch.randn(2, config["in_channels"], INPUT_L, dtype=torch.float64, device=device)
    set_algorithms(m, "fft", x)
    assert rel_err(m(x), back(x)) <= 1e-10


# --- forward and backward against nn.Conv1d ----------------------------------------------------


@pytest.mark.parametrize("variant", ALGORITHMS)
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_forward_backward_match_nn_conv1d(config, variant, device):
    ref, m = twins(config, dtype=torch.float64, device=device)
    x = torch.randn(2, config["in_channels"], INPUT_L, dtype=torch.float64, device=device)
    set_algorithms(m, variant, x)
    expected, got, counter = run_both(ref, m, x)
    assert_float64_close(expected, got, variant)
    assert got[2].shape == m.weight.shape
    basis = parse(fft_label(m, INPUT_L)).params.basis
    assert counter.args == {op: (basis, "cufft", (0, 0))
                            for op, a in zip(FL_OPS, ALGORITHMS[variant] or ("fft",) * 3)
                            if a == "fft"}
    assert {d["source"] for d in tuner.decisions()} == (
        {"file"} if ALGORITHMS[variant] is None else {"forced"})


def test_every_height_one_candidate_matches_nn_conv1d(device):
    """Each label the registry offers for the height-1 problem, pinned on its pass alone."""
    ref, m = twins(CONFIGS["k5-same"], dtype=torch.float64, device=device)
    x = torch.randn(2, 3, INPUT_L, dtype=torch.float64, device=device)
    gy = torch.randn(2, 4, INPUT_L, dtype=torch.float64, device=device)
    p = problem(m, x)
    for i, pass_ in enumerate(tuner.PASSES):
        labels = tuner.candidates_conv2d(p, pass_)[1:]
        assert labels and all(parse(v).params.basis[0] == 1 for v in labels), labels
        for label in labels:
            m.force_algorithms(*(label if j == i else None for j in range(3)))
            expected, got, counter = run_both(ref, m, x, gy)
            assert_float64_close(expected, got, label)
            assert counter.args[FL_OPS[i]] == (parse(label).params.basis,
                                               parse(label).params.backend,
                                               parse(label).params.tile)


@pytest.mark.parametrize("variant", ["forced", "tuned"])
def test_float32_within_pytorch_error(variant, device, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0.2)
    ref, m = twins(dict(in_channels=8, out_channels=6, kernel_size=31, padding=15),
                   device=device)
    x = torch.randn(4, 8, 200, device=device)
    gy = torch.randn(4, 6, 200, device=device)
    basis = parse(fft_label(m, 200)).params.basis
    if variant == "forced":
        m.force_algorithms(*(fft_label(m, 200),) * 3)
    with cudnn_tf32(False):
        expected = forward_backward(copy.deepcopy(ref).double(), x.double(), gy.double())
        native = forward_backward(ref, x, gy)
        got = forward_backward(m, x, gy)
    passes = pass_decisions()
    assert {d["source"] for d in passes} == {variant}
    assert len(passes) == 3
    assert_within_rule(got, expected, native, m, x, gy, basis, what=variant)


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("C, K, k, L, padding", [(2, 3, 255, 2048, 127), (1, 2, 1023, 4096, 0)],
                         ids=["k255-L2048", "k1023-L4096"])
def test_long_kernels_on_fft(C, K, k, L, padding, precision, device):
    dtype = getattr(torch, precision)
    ref, m = twins(dict(in_channels=C, out_channels=K, kernel_size=k, padding=padding),
                   dtype=dtype, device=device)
    label = fft_label(m, L)
    m.force_algorithms(label, label, label)
    x = torch.randn(2, C, L, dtype=dtype, device=device)
    gy = torch.randn(2, K, L + 2 * padding - k + 1, dtype=dtype, device=device)
    with cudnn_tf32(False):
        expected = forward_backward(copy.deepcopy(ref).double(), x.double(), gy.double())
        native = forward_backward(ref, x, gy)
        with CountOps() as counter:
            got = forward_backward(m, x, gy)
    assert set(counter.calls) == set(FL_OPS)
    if precision == "float64":
        assert_float64_close(expected, got, label)
    else:
        assert_within_rule(got, expected, native, m, x, gy, parse(label).params.basis, label)


@pytest.mark.parametrize("variant", ["cached", "fft"])
@pytest.mark.parametrize("config", ["k3-pad1", "k4-same", "k3-reflect"])
def test_unbatched_input(config, variant, device):
    config = CONFIGS[config]
    ref, m = twins(config, dtype=torch.float64, device=device)
    x = torch.randn(config["in_channels"], INPUT_L, dtype=torch.float64, device=device)
    set_algorithms(m, variant, x)
    expected, got, counter = run_both(ref, m, x)
    assert_float64_close(expected, got, variant)
    assert set(counter.calls) == set(FL_OPS) and got[0].dim() == 2


@pytest.mark.parametrize("variant", ["cached", "fft"])
def test_transposed_input(variant, device):
    """[N, L, C] data transposed to [N, C, L]: its height-1 view is channels_last."""
    ref, m = twins(CONFIGS["k5-same"], dtype=torch.float64, device=device)
    x = torch.randn(2, INPUT_L, 3, dtype=torch.float64, device=device).transpose(1, 2)
    set_algorithms(m, variant, x)
    expected, got, counter = run_both(ref, m, x)
    assert_float64_close(expected, got, variant)
    assert set(counter.calls) == set(FL_OPS)
    assert problem(m, x).layout == "channels_last"


def test_module_gradcheck_forced_fft(device):
    # circular: a padding mode whose backward is deterministic on CUDA (gradcheck's reentrancy)
    m = fastlayers.Conv1d(2, 3, 3, padding=1, padding_mode="circular", dtype=torch.float64,
                          device=device)
    label = fft_label(m, 6)
    m.force_algorithms(label, label, label)
    x = torch.randn(2, 2, 6, dtype=torch.float64, device=device, requires_grad=True)

    def fn(x, w, b):
        return torch.func.functional_call(m, {"weight": w, "bias": b}, (x,))

    args = (x, m.weight.detach().requires_grad_(), m.bias.detach().requires_grad_())
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args)


# --- what falls back to nn.Conv1d --------------------------------------------------------------


@pytest.mark.parametrize("kwargs, reason", [
    (dict(stride=2), "stride (2,)"),
    (dict(dilation=2), "dilation (2,)"),
    (dict(groups=2), "groups=2"),
])
def test_unsupported_modules_fall_back_to_native(kwargs, reason, device):
    ref, m = twins(dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, **kwargs),
                   device=device)
    m.force_algorithms("fft:1x32", "fft:1x32", "fft:1x32")
    x = torch.randn(2, 4, INPUT_L, device=device)
    expected, got, counter = run_both(ref, m, x)
    assert not counter.calls
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
    assert [(d["key"], d["source"]) for d in tuner.decisions()] == [
        ("conv1d(%s)" % m.extra_repr(), "unsupported")]
    assert reason in tuner.decisions()[0]["reason"]
    assert "conv1d(%s)" % m.extra_repr() in tuner.report() and reason in tuner.report()


# --- convert -----------------------------------------------------------------------------------


class Conv1dSubclass(nn.Conv1d):
    """A user's own Conv1d: convert leaves it alone (exact types only)."""


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Conv1d(3, 8, 5, padding=2), nn.ReLU(),
                                 nn.Conv1d(8, 8, 4, padding="same", padding_mode="reflect"))
        self.img = nn.Conv2d(3, 8, 3, padding=1)
        self.own = Conv1dSubclass(8, 4, 3)

    def forward(self, seq, img):
        return self.own(self.seq(seq)).mean((1, 2)) + self.img(img).mean((1, 2, 3))


def test_convert_swaps_conv1d_and_conv2d(device):
    model = Mixed().to(device, torch.float64)
    ref = copy.deepcopy(model)
    params = list(model.parameters())
    assert fastlayers.convert(model) is model
    assert [type(m) for m in (model.seq[0], model.seq[2], model.img, model.own)] == [
        fastlayers.Conv1d, fastlayers.Conv1d, fastlayers.Conv2d, Conv1dSubclass]
    assert all(a is b for a, b in zip(model.parameters(), params))
    seq = torch.randn(2, 3, 30, dtype=torch.float64, device=device)
    img = torch.randn(2, 3, 9, 11, dtype=torch.float64, device=device)
    for m in (model.seq[0], model.seq[2]):
        m.force_algorithms(*(fft_label(m, 30),) * 3)
    model.img.force_algorithms(*(module_fft_label(model.img, (9, 11)),) * 3)
    with CountOps() as counter:
        y = model(seq, img)
        y.sum().backward()
    # (the input gradient only where the input needs one: the second Conv1d's)
    assert counter.calls == {"fft_conv2d": 3, "fft_conv2d_input_grad": 1,
                             "fft_conv2d_weight_grad": 3}
    expected = ref(seq, img)
    expected.sum().backward()
    assert rel_err(y, expected) <= 1e-10
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert rel_err(p.grad, q.grad) <= 1e-10, name


# --- torch.compile -----------------------------------------------------------------------------


def small_net():
    return nn.Sequential(
        fastlayers.Conv1d(3, 8, 5, padding=2),
        nn.ReLU(),
        fastlayers.Conv1d(8, 8, 4, padding="same", padding_mode="reflect"),
        nn.ReLU(),
        fastlayers.Conv1d(8, 4, 1, bias=False),
    )


def compile_and_run(m, x, gy):
    """m compiled with fullgraph=True (aot_eager, recording the graphs), forward and backward on
    x and gy: (results, forward graph code, backward graph code)."""
    torch._dynamo.reset()
    counters.clear()
    backend = AotEagerAndRecordGraphs()
    m.zero_grad()
    got = forward_backward(torch.compile(m, fullgraph=True, backend=backend), x, gy)
    assert not counters["graph_break"], dict(counters["graph_break"])
    return (got, "\n".join(g.code for g in backend.fw_graphs),
            "\n".join(g.code for g in backend.bw_graphs))


@pytest.mark.parametrize("labels", [None, ("fft:1x64", "fft:1x16,tile=1x12", "fft:1x40")],
                         ids=["smallest-basis", "mixed"])
def test_compile_fullgraph_matches_eager(labels, device):
    model = small_net().to(device, torch.float64)
    for m in model.modules():
        if isinstance(m, fastlayers.Conv1d):
            m.force_algorithms(*(labels or (fft_label(m, 30),) * 3))
    x = torch.randn(2, 3, 30, dtype=torch.float64, device=device)
    gy = torch.randn(2, 4, 30, dtype=torch.float64, device=device)
    got, forward, backward = compile_and_run(model, x, gy)
    model.zero_grad()
    for e, g in zip(forward_backward(model, x, gy), got):
        assert rel_err(g, e) <= 1e-10
    assert forward.count("fastlayers.fft_conv2d.default") == 3
    assert backward.count("fastlayers.fft_conv2d_input_grad") == 3  # x needs a gradient too
    assert backward.count("fastlayers.fft_conv2d_weight_grad") == 3
