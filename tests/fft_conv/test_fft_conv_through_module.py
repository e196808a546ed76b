"""The op arguments a module's labels turn into: the backend of fbfft labels in every pass, and
tiled labels of both backends through torch.compile(fullgraph=True). The module's own behaviour
(every label against nn.Conv2d on every device, the tuner) is tested in tests/nn and tests/tuner."""
import torch
from torch import nn

import fastlayers
from conv_samples import rel_err


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
