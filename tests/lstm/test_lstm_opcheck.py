"""torch.library.opcheck of the LSTM ops (schema, fake kernels, autograd registration, AOT
dispatch) per device, and torch.compile(fullgraph=True) of a function calling
fastlayers.lstm.lstm and of a fastlayers.LSTM pinned to the ops: no graph break, the ops in the
graph, the eager results."""
import pytest
import torch
from torch._dynamo.utils import counters

import fastlayers
from lstm_samples import SMALL, inputs, op_inputs, reference_module, weights

fl = torch.ops.fastlayers
OPCHECK_CASES = [SMALL[0], SMALL[1]]  # padded, projection; packed, reverse, projection


def _op_args(case, dtype, device, grads):
    m = reference_module(case, dtype, device)
    x, h0, c0 = inputs(case, dtype, device)
    xi, bs = op_inputs(case, x)
    w = [t.detach().clone() if t is not None else None for t in weights(m, case.reverse)]
    if grads == "all":
        for t in [xi, h0, c0] + w:
            if t is not None:
                t.requires_grad_()
    return xi, h0, c0, w, bs


@pytest.mark.parametrize("grads", ["none", "all"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", OPCHECK_CASES, ids=str)
def test_opcheck_lstm(device, case, dtype, grads):
    xi, h0, c0, w, bs = _op_args(case, dtype, device, grads)
    torch.library.opcheck(fl.lstm.default, (xi, h0, c0, *w, bs, case.reverse, False))


# (grad_h_n and grad_c_n given, need_input, need_weights): what lstm's autograd asks for when
# everything needs a gradient, when no weight does (a frozen LSTM), when the input does not.
BACKWARD_VARIANTS = {"all": (True, True, True), "frozen-weights": (False, True, False),
                     "weights-only": (True, False, True)}


@pytest.mark.parametrize("variant", BACKWARD_VARIANTS)
@pytest.mark.parametrize("case", [SMALL[0], SMALL[2]], ids=str)
def test_opcheck_lstm_backward(device, case, variant):
    states, need_input, need_weights = BACKWARD_VARIANTS[variant]
    xi, h0, c0, w, bs = _op_args(case, torch.float64, device, "none")
    w_ih, w_hh, _, _, w_hr = w
    out, h, c, reserve, reserve_h = fl.lstm(xi, h0, c0, *w, bs, case.reverse, False)
    g = lambda t: torch.randn_like(t)  # noqa: E731
    torch.library.opcheck(fl.lstm_backward.default,
                          (g(out), *((g(h), g(c)) if states else (None, None)), xi, h0, c0, w_ih,
                           w_hh, w_hr, bs, reserve, reserve_h, case.reverse, False, need_input,
                           need_weights))


def test_opcheck_lstm_cell(device):
    case = SMALL[0]
    xi, h0, c0, w, _ = _op_args(case, torch.float32, device, "all")
    torch.library.opcheck(fl.lstm_cell.default, (xi[0], h0, c0, *w, False),
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor"))


# --- torch.compile -------------------------------------------------------------------------------


class _Graphs:
    """A torch.compile backend that counts the fastlayers op calls of each graph it is given."""

    def __init__(self):
        self.ops = []

    def __call__(self, gm, example_inputs):
        self.ops.append(sorted(str(n.target) for n in gm.graph.nodes
                               if n.op == "call_function" and "fastlayers" in str(n.target)))
        from torch._dynamo.backends.common import aot_autograd
        return aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g)(
            gm, example_inputs)


def _compiled(fn):
    torch._dynamo.reset()
    counters.clear()
    graphs = _Graphs()
    return torch.compile(fn, fullgraph=True, backend=graphs), graphs


def test_compile_function_fullgraph(device):
    case = SMALL[1]  # packed, reverse, projection
    xi, h0, c0, w, bs = _op_args(case, torch.float32, device, "all")

    def run(xi, h0, c0, *w):
        out, h, c = fastlayers.lstm.lstm(xi, h0, c0, *w, batch_sizes=bs, reverse=True)
        return (out * out).sum() + h.sum() + c.sum()

    args = (xi, h0, c0, *w)
    compiled, graphs = _compiled(run)
    got = compiled(*args)
    grads = torch.autograd.grad(got, [a for a in args if a is not None])
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert graphs.ops == [["fastlayers.lstm"]]
    expected = run(*args)
    expected_grads = torch.autograd.grad(expected, [a for a in args if a is not None])
    exact = dict(rtol=0, atol=0) if device == "cpu" else {}  # (GEMM algorithms may differ)
    torch.testing.assert_close(got, expected, **exact)
    for a, e in zip(grads, expected_grads):
        torch.testing.assert_close(a, e, **exact)


def test_compile_module_fullgraph(device):
    torch.manual_seed(0)
    m = fastlayers.LSTM(3, 6, 2, bidirectional=True, proj_size=4, batch_first=True)
    m = m.to(device).force_algorithm("fused")
    x = torch.randn(2, 5, 3, device=device, requires_grad=True)
    compiled, graphs = _compiled(m)
    y, (h, c) = compiled(x)
    (y.sum() + h.sum() + c.sum()).backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert graphs.ops == [["fastlayers.lstm"] * 4]  # 2 layers x 2 directions
    got = [y, h, c, x.grad] + [p.grad for p in m.parameters()]
    x.grad = None
    m.zero_grad(set_to_none=True)
    y, (h, c) = m(x)
    (y.sum() + h.sum() + c.sum()).backward()
    exact = dict(rtol=0, atol=0) if device == "cpu" else {}
    for a, e in zip(got, [y, h, c, x.grad] + [p.grad for p in m.parameters()]):
        torch.testing.assert_close(a, e, **exact)
