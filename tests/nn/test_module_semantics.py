"""nn.Conv*d's semantics where a module runs fastlayers' ops (pinned labels): what a user does
with a layer's output, attributes and contexts, against nn.Conv*d with the same parameters."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.testing import AotEagerAndRecordGraphs

import fastlayers
from fastlayers import tuner
from fastlayers.tuner import conv2d as tuner_conv2d
from conv_samples import ops_of

FFT1D = ("fft:1x64", "fft:1x64", "fft:1x64")
FFT2D = ("fft:16x16", "fft:16x16", "fft:16x16")


def twins(nn_cls, *args, labels, device="cpu", **kwargs):
    """nn.Conv*d in float64 and its fastlayers copy with `labels` pinned."""
    ref = nn_cls(*args, dtype=torch.float64, device=device, **kwargs)
    fast = fastlayers.convert(copy.deepcopy(ref)).force_algorithms(*labels)
    return ref, fast


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_conv1d_output_may_be_changed_in_place(device, compiled):
    # a ReLU(inplace=True) after the layer: the output is no view of the layer's autograd node
    ref, fast = twins(nn.Conv1d, 4, 4, 15, padding=7, labels=FFT1D, device=device)
    x = torch.randn(2, 4, 50, dtype=torch.float64, device=device)
    grads = []
    backend = AotEagerAndRecordGraphs()
    torch._dynamo.reset()
    for m in (ref, torch.compile(fast, backend=backend, fullgraph=True) if compiled else fast):
        xg = x.clone().requires_grad_()
        if compiled and m is not ref:  # (recording ops would keep dynamo from compiling)
            y = m(xg)
            ops = ["fft_conv2d"] if any("fastlayers.fft_conv2d" in g.code
                                        for g in backend.fw_graphs) else []
        else:
            y, ops = ops_of(lambda: m(xg))
        assert y.is_contiguous()
        torch.relu_(y).square().sum().backward()
        grads.append((xg.grad, *(p.grad for p in (ref if m is ref else fast).parameters())))
    assert "fft_conv2d" in ops
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dims,padding", [(2, 2), (2, (2,)), (2, (1, 2)), (2, "same"),
                                          (2, "valid"), (1, 3), (1, (3,)), (1, "same")], ids=str)
def test_padding_set_after_construction_counts(device, dims, padding):
    cls, labels, kernel, shape = ((nn.Conv2d, FFT2D, (3, 4), (2, 3, 8, 8)) if dims == 2 else
                                  (nn.Conv1d, FFT1D, 4, (2, 3, 30)))
    ref, fast = twins(cls, 3, 4, kernel, padding=1, labels=labels, device=device)
    x = torch.randn(*shape, dtype=torch.float64, device=device)
    fast(x)  # a plan for the first padding
    ref.padding, fast.padding = padding, padding
    y, ops = ops_of(lambda: fast(x))
    assert ops == ["fft_conv2d"]
    torch.testing.assert_close(y, ref(x), rtol=1e-10, atol=1e-12)


def test_a_replaced_weight_of_another_shape_is_decided_again(device):
    m = fastlayers.Conv2d(3, 4, 3, padding=1, device=device, dtype=torch.float64)
    m.force_algorithms("winograd:2", "winograd:2", "winograd:2")
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, device=device)
    m(x)
    m.weight = nn.Parameter(torch.randn(4, 3, 1, 1, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="winograd:2.*3x3 filters, not 1x1"):
        m(x)  # as a new module with this weight would say
    m.force_algorithms(None)
    torch.testing.assert_close(m(x), F.conv2d(x, m.weight, m.bias, padding=1))


@pytest.mark.parametrize("case", ["one-channel-input", "1x1-weight"])
def test_channels_last_where_both_layouts_fit(device, case):
    # one channel or a 1x1 kernel: strides fit both layouts; PyTorch reads the layout from them
    cl = torch.channels_last
    C, k = (1, 3) if case == "one-channel-input" else (3, 1)
    ref, fast = twins(nn.Conv2d, C, 4, k, padding=k // 2, labels=FFT2D, device=device)
    ref, fast = ref.to(memory_format=cl), fast.to(memory_format=cl)
    x = torch.randn(2, C, 8, 8, dtype=torch.float64, device=device)
    if case == "one-channel-input":
        x = x.to(memory_format=cl)
    a = ref(x)
    b, ops = ops_of(lambda: fast(x))
    assert ops == ["fft_conv2d"]
    assert b.stride() == a.stride()
    torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_jit_trace_records_pytorchs_convolution():
    ref, fast = twins(nn.Conv2d, 3, 4, 3, padding=1, labels=FFT2D)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    traced = torch.jit.trace(fast, x)
    torch.testing.assert_close(traced(x * 2), ref(x * 2), rtol=1e-10, atol=1e-12)
    assert "torch.jit.trace" in tuner.report()
    _, ops = ops_of(lambda: fast(x))  # outside the trace: the pinned ops again
    assert ops == ["fft_conv2d"]


def test_torch_func_transforms_run_pytorchs_path(device):
    ref, fast = twins(nn.Conv2d, 3, 4, 3, padding=1, labels=FFT2D, device=device)
    x = torch.randn(5, 3, 8, 8, dtype=torch.float64, device=device)
    params = dict(ref.named_parameters())

    def per_sample(m):
        def loss(p, xi):
            return torch.func.functional_call(m, p, (xi[None],)).square().sum()
        return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, x)

    a, b = per_sample(ref), per_sample(fast)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-10, atol=1e-12)
    assert "torch.func" in tuner.report()
    tangent = torch.randn_like(x)
    ja = torch.func.jvp(ref, (x,), (tangent,))
    jb = torch.func.jvp(fast, (x,), (tangent,))
    for u, v in zip(ja, jb):
        torch.testing.assert_close(v, u, rtol=1e-10, atol=1e-12)
    _, ops = ops_of(lambda: fast(x))  # outside the transforms: the pinned ops again
    assert ops == ["fft_conv2d"]


def test_forward_mode_ad_runs_pytorchs_path(device):
    import torch.autograd.forward_ad as fwAD
    ref, fast = twins(nn.Conv2d, 3, 4, 3, padding=1, labels=FFT2D, device=device)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, device=device)
    t = torch.randn_like(x)
    out = []
    for m in (ref, fast):
        with fwAD.dual_level():
            y = m(fwAD.make_dual(x, t))
            out.append(fwAD.unpack_dual(y))
    for u, v in zip(*out):
        torch.testing.assert_close(v, u, rtol=1e-10, atol=1e-12)
    assert "forward-mode AD" in tuner.report()


@pytest.fixture
def measuring(monkeypatch):
    """The tuner measures CPU tensors too, each candidate once."""
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0)


def test_tuning_leaves_the_random_generators_as_they_were(measuring, monkeypatch):
    # every pass measured off PyTorch's path, so that the layer check measures too
    real = tuner_conv2d.measure

    def measure(p, pass_, device):
        d = real(p, pass_, device)
        d.choice = "fft:16x16"
        return d
    monkeypatch.setattr(tuner_conv2d, "measure", measure)
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    torch.manual_seed(0)
    m(x).sum().backward()  # a new shape: tuned here, the layer check among the measurements
    assert any(".layer|" in r["key"] for r in tuner.decisions()), tuner.report()
    after_tuning = torch.rand(4)
    torch.manual_seed(0)
    m(x).sum().backward()  # decided: no measurement
    torch.testing.assert_close(after_tuning, torch.rand(4), rtol=0, atol=0)


def test_the_layer_switch_takes_a_bool_or_none():
    m = fastlayers.Conv2d(3, 4, 3)
    for v in (True, False, None):
        m.transforms = v
    with pytest.raises(TypeError, match="transforms must be True, False or None"):
        m.transforms = "false"


def test_sizes_the_tuner_cannot_measure_give_pytorchs_own_error(measuring):
    ref = nn.Conv2d(2, 2, 3, padding=2 ** 62)
    fast = fastlayers.convert(copy.deepcopy(ref))
    x = torch.randn(1, 2, 8, 8)
    errors = []
    for m in (ref, fast):
        with pytest.raises(Exception) as e:
            m(x)
        errors.append(e.value)
    assert type(errors[1]) is type(errors[0]) and str(errors[1]) == str(errors[0])


@pytest.mark.parametrize("cls, shape", [(nn.Conv2d, (2, 3, 8, 8)), (nn.Conv1d, (2, 3, 8))])
def test_meta_device_runs_nn_convs_path(cls, shape):
    # shape inference and deferred initialisation on the meta device: nn.Conv*d's result, and
    # the fallback in report() (autocast, asked of the meta device, would raise)
    ref = cls(3, 4, 3, device="meta")
    fast = fastlayers.convert(copy.deepcopy(ref))
    x = torch.empty(shape, device="meta")
    y = fast(x)
    assert y.device.type == "meta" and y.shape == ref(x).shape
    with torch.device("meta"):
        assert fastlayers.convert(cls(3, 4, 3))(torch.empty(shape)).shape == y.shape
    assert any(d["source"] == "unsupported" and d["reason"] == "device meta"
               for d in tuner.decisions())


def test_export_with_a_dynamic_batch(monkeypatch):
    # torch.export keeps a size marked dynamic dynamic: the layer takes PyTorch's path, which
    # takes any size, and says so; a static export holds the pinned op
    ref, fast = twins(nn.Conv2d, 3, 4, 3, padding=1, labels=("winograd:2",) * 3)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    batch = torch.export.Dim("batch")
    ep = torch.export.export(fast, (x,), dynamic_shapes=({0: batch},))
    ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert not any("fastlayers" in op for op in ops), ops
    x5 = torch.randn(5, 3, 8, 8, dtype=torch.float64)
    torch.testing.assert_close(ep.module()(x5), ref(x5))
    assert any(d["source"] == "unsupported" and "dynamic size under torch.export" in d["reason"]
               for d in tuner.decisions())
    ep = torch.export.export(fast, (x,))
    assert any("fastlayers.winograd_conv2d" in str(n.target) for n in ep.graph.nodes)
    torch.testing.assert_close(ep.module()(x), ref(x))


def test_jit_script_refuses_with_the_reason():
    # torch.jit.script cannot compile the tuned forward, and handing it an nn.Conv2d would put
    # that in place of the layer in the user's model: a clear error, the model unchanged
    model = fastlayers.convert(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))
    with pytest.raises(RuntimeError, match=r"fastlayers.Conv2d\(3, 4, .*\) cannot be scripted "
                                           r"with torch.jit.script: use torch.compile or "
                                           r"torch.export"):
        torch.jit.script(model)
    assert type(model[0]) is fastlayers.Conv2d


def test_channel_mismatch_is_nn_convs_error_and_tunes_nothing():
    # a pinned or tuned layer given the wrong channel count: nn.Conv*d's own message, before
    # any tuning of a problem that cannot run
    tuner._state.tune_cpu = True
    for labels in (("winograd:2",) * 3, None):
        m = fastlayers.Conv2d(3, 4, 3)
        if labels:
            m.force_algorithms(*labels)
        with pytest.raises(RuntimeError, match=r"Given groups=1, weight of size \[4, 3, 3, 3\], "
                                               r"expected input\[2, 5, 8, 8\] to have 3 "
                                               r"channels"):
            m(torch.randn(2, 5, 8, 8))
    assert not tuner.decisions()
