"""Layers on the second GPU while the first is current, as a model placed with .to("cuda:1")
runs: every algorithm family's kernels run on the tensors' device (the same values as on the
first GPU, step after step, with as many cached graphs recorded and replayed there: the Winograd
pipeline's, keyed by the tensors' addresses, and the fused LSTM's, the stack's forward keyed by
its shapes and each layer's backward by its recurrent weights too; no memory of PyTorch's
allocator left taken there), the tuned module decides and keeps the tuner's accuracy rule, and
the current device is left as it was."""
import copy

import pytest
import torch
from torch import nn

import fastlayers
from fastlayers import _C
from conv_samples import RecordOps, cudnn_tf32, pass_decisions

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")]

# Each pass's label, one plan per family of kernels.
CONV_PLANS = {
    "winograd-fused": ("winograd:2,fused",) * 3,
    "winograd-pipeline": ("winograd:2",) * 3,
    "fft-cufft": ("fft:16x16",) * 3,
    "fbfft": ("fbfft:16x16",) * 3,
}


# A key's first call, the second (which records a graph where one is kept) and the third (which
# replays it). The steps keep their inputs in place and record op names only, so that a step's
# tensors take the addresses the step before had (the Winograd pipeline's key holds them). The
# counts below hold for keys new to the process: the shapes here are used by no other test (the
# fused LSTM stack's forward key holds only its sizes), and a second run in the same process finds
# its graphs cached.
STEPS = 3
GRAPH_PLANS = {"winograd-pipeline"}  # the conv plans whose passes run as cached graphs


def graph_counts():
    return _C.step_graph_recordings(), _C.step_graph_replays()


def on_each_device(make, step):
    """STEPS x step(make(dev)) on cuda:0, then on cuda:1 with cuda:0 current: both runs' results
    (on the CPU, step after step, concatenated), the bytes the second run left allocated on
    cuda:0, and each run's cached graphs recorded and launched (graph_counts' growth)."""
    torch.cuda.set_device(0)
    out, graphs = {}, {}
    for dev in ("cuda:0", "cuda:1"):
        torch.cuda.synchronize(0)
        before = torch.cuda.memory_allocated(0)
        state = make(torch.device(dev))
        counts = graph_counts()
        out[dev] = []
        for _ in range(STEPS):
            got = step(state)
            assert all(t.device == torch.device(dev) for t in got)
            assert torch.cuda.current_device() == 0
            out[dev] += [t.cpu() for t in got]
            del got
        graphs[dev] = tuple(b - a for a, b in zip(counts, graph_counts()))
        del state
        left_on_0 = torch.cuda.memory_allocated(0) - before
    return out["cuda:0"], out["cuda:1"], left_on_0, graphs


def assert_graphs(graphs, keys):
    """Both devices recorded and launched as many graphs: each of `keys` keys recorded once (on
    its second step) and launched on every step after its first."""
    assert graphs["cuda:1"] == graphs["cuda:0"], graphs
    assert graphs["cuda:1"] == (keys, keys * (STEPS - 1)), graphs


def kept_inputs(base, x, gy):
    """make() for on_each_device: a copy of `base` on the device, and the input (a leaf that
    keeps its address) and output gradient there."""
    return lambda dev: (copy.deepcopy(base).to(dev), x.to(dev, copy=True).requires_grad_(),
                        gy.to(dev))


def kept_step(state, output=lambda y: y):
    """One forward and backward on kept inputs: the output (`output` of the module's result),
    then the gradients of the input and of every parameter."""
    m, xi, gyi = state
    m.zero_grad(set_to_none=True)
    xi.grad = None
    y = output(m(xi))
    y.backward(gyi)
    return [y.detach(), xi.grad] + [p.grad for p in m.parameters()]


@pytest.mark.parametrize("plan", CONV_PLANS)
def test_conv_on_the_second_gpu(plan):
    torch.manual_seed(0)
    base = fastlayers.Conv2d(7, 10, 3, padding=1).force_algorithms(*CONV_PLANS[plan])
    x, gy = torch.randn(3, 7, 11, 12), torch.randn(3, 10, 11, 12)  # fused fp32: width 4k
    with cudnn_tf32(False), RecordOps(names_only=True) as rec:
        first, second, left_on_0, graphs = on_each_device(kept_inputs(base, x, gy), kept_step)
    passes = [n for n, _ in rec.calls if n.endswith(("conv2d", "input_grad", "weight_grad"))]
    assert len(passes) == 6 * STEPS, passes  # three passes a step a device, none on PyTorch's
    assert left_on_0 == 0
    assert_graphs(graphs, 3 if plan in GRAPH_PLANS else 0)
    for a, b in zip(first, second):  # the same kernels on the same model of GPU
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_tuned_conv_on_the_second_gpu():
    fastlayers.tuner.set_budget(0.2)
    torch.manual_seed(0)
    ref = nn.Conv2d(16, 16, 3, padding=1)
    x, gy = torch.randn(8, 16, 24, 24), torch.randn(8, 16, 24, 24)
    torch.cuda.set_device(0)
    dev = torch.device("cuda:1")
    with cudnn_tf32(False):
        got = kept_step(kept_inputs(fastlayers.convert(copy.deepcopy(ref)), x, gy)(dev))
        want = kept_step(kept_inputs(ref, x, gy)(dev))
    exact = kept_step((copy.deepcopy(ref).double(), x.double().requires_grad_(), gy.double()))
    assert torch.cuda.current_device() == 0
    decisions = pass_decisions()
    assert len(decisions) == 3 and {d["source"] for d in decisions} == {"tuned"}, decisions
    err = lambda t, e: ((t.cpu().double() - e).norm() / e.norm()).item()  # noqa: E731
    floor = fastlayers.tuner.error_floor(torch.float32, False)
    for g, w, e, what in zip(got, want, exact, ("output", "input", "weight", "bias")):
        assert g.device == dev
        assert err(g, e) <= max(2 * err(w, e), floor), what  # the tuner's own rule


@pytest.mark.parametrize("algorithm", ["fused", "persistent"])
def test_lstm_on_the_second_gpu(algorithm):
    torch.manual_seed(0)
    base = fastlayers.LSTM(8, 16, 2).force_algorithm(algorithm)
    x, gy = torch.randn(6, 3, 8), torch.randn(6, 3, 16)
    with cudnn_tf32(False), RecordOps(names_only=True) as rec:
        first, second, left_on_0, graphs = on_each_device(
            kept_inputs(base, x, gy), lambda state: kept_step(state, output=lambda out: out[0]))
    assert rec.calls and all(n.startswith("lstm") for n, _ in rec.calls)
    assert left_on_0 == 0
    if algorithm == "fused":  # the stack's forward and each layer's backward
        assert_graphs(graphs, 3)
    else:
        assert graphs["cuda:1"] == graphs["cuda:0"], graphs
    for a, b in zip(first, second):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
