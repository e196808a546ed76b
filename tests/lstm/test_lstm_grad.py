"""gradcheck of the LSTM ops in float64 per device: lstm through every differentiable input
(input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr), with the gradients of h_n and c_n absent when only
some outputs are used; lstm_cell against nn.LSTMCell and by gradcheck; no silent double
backward."""
import pytest
import torch
from torch import nn
from torch.autograd import gradcheck

import fastlayers
from lstm_samples import SMALL, inputs, op_inputs, reference_module, weights

fl = torch.ops.fastlayers

# Which of (output, h_n, c_n) the function under gradcheck returns: the others' gradients reach
# the backward as None (grad_h_n, grad_c_n None; an absent grad_output becomes zeros).
USES = {"all": (0, 1, 2), "output": (0,), "h_n": (1,), "c_n": (2,), "states": (1, 2)}


def _problem(case, device):
    m = reference_module(case, torch.float64, device)
    x, h0, c0 = inputs(case, torch.float64, device)
    xi, bs = op_inputs(case, x)
    w = weights(m, case.reverse)
    has = [t is not None for t in w]
    present = [t for t in w if t is not None]
    args = [t.detach().clone().requires_grad_() for t in [xi, h0, c0] + present]
    return args, has, bs


# every case with all outputs used and with the output alone; the other absent-gradient paths
# on the packed reverse case with a projection
GRADCHECKS = [(c, u) for c in SMALL for u in ("all", "output")] + [
    (SMALL[1], u) for u in USES if u not in ("all", "output")]


@pytest.mark.parametrize("case, uses", GRADCHECKS, ids=lambda v: str(v))
def test_gradcheck_lstm(device, case, uses):
    args, has, bs = _problem(case, device)

    def fn(xi, h0, c0, *ws):
        it = iter(ws)
        out = fl.lstm(xi, h0, c0, *[next(it) if h else None for h in has], bs, case.reverse,
                      False)
        return tuple(out[i] for i in USES[uses])
    assert gradcheck(fn, args)


def test_gradcheck_covers_every_weight():
    # the cases differentiate w_hr and both biases, and the biasless w_ih / w_hh alone
    assert any(c.P and c.bias and c.lengths for c in SMALL)
    assert any(c.P and c.bias and not c.lengths for c in SMALL)
    assert any(not c.bias for c in SMALL) and any(c.T == 1 and c.B == 1 for c in SMALL)


@pytest.mark.parametrize("need", ["input", "h0", "w_hh", "b_hh", "w_hr"])
def test_only_what_is_needed(device, need):
    # Each input alone requiring a gradient: its gradient is right (the op skips the others)
    case = SMALL[1]
    args, has, bs = _problem(case, device)
    names = ["input", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr"]
    k = names.index(need)
    for i, t in enumerate(args):
        t.requires_grad_(i == k)

    def fn(t):
        full = list(args)
        full[k] = t
        return fl.lstm(*full[:3], *full[3:], bs, case.reverse, False)[:3]
    assert gradcheck(fn, (args[k].detach().clone().requires_grad_(),))


# --- lstm_cell -----------------------------------------------------------------------------------

CELL = [(3, 4, 5, 0, True), (2, 3, 4, 2, True), (1, 2, 3, 0, False)]  # B, I, H, P, bias


def _cell_problem(B, I, H, P, bias, device, dtype=torch.float64):
    torch.manual_seed(B * 100 + I * 10 + H)
    m = nn.LSTM(I, H, bias=bias, proj_size=P).to(device, dtype)
    R = P or H
    x, h, c = (torch.randn(B, n, dtype=dtype, device=device) for n in (I, R, H))
    return m, x, h, c


@pytest.mark.parametrize("shape", CELL, ids=lambda s: "B%d-I%d-H%d-P%d%s" % (
    s[:4] + ("" if s[4] else "-nobias",)))
def test_lstm_cell_is_one_step_of_nn_lstm(device, shape):
    m, x, h, c = _cell_problem(*shape, device)
    hr, cr = (t[0] for t in m(x[None], (h[None], c[None]))[1])
    got = fastlayers.lstm.lstm_cell(x, h, c, *weights(m, False), tf32=False)
    torch.testing.assert_close(got[0], hr, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(got[1], cr, rtol=1e-13, atol=1e-14)
    if not shape[3]:  # no projection: nn.LSTMCell's step too
        cell = nn.LSTMCell(shape[1], shape[2], bias=shape[4]).to(device, torch.float64)
        cell.load_state_dict({k[:-3]: v for k, v in m.state_dict().items()})
        for a, b in zip(got, cell(x, (h, c))):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("shape", CELL, ids=lambda s: "B%d-I%d-H%d-P%d%s" % (
    s[:4] + ("" if s[4] else "-nobias",)))
def test_gradcheck_lstm_cell(device, shape):
    m, x, h, c = _cell_problem(*shape, device)
    w = weights(m, False)
    has = [t is not None for t in w]
    present = [t for t in w if t is not None]
    args = [t.detach().clone().requires_grad_() for t in [x, h, c] + present]

    def fn(x, h, c, *ws):
        it = iter(ws)
        return fl.lstm_cell(x, h, c, *[next(it) if k else None for k in has], False)
    assert gradcheck(fn, args)
    assert gradcheck(lambda *a: fn(*a)[0], args)  # the cell state unused: grad_c_n None


# --- double backward -----------------------------------------------------------------------------


@pytest.mark.parametrize("T, weights_need_grad", [(1, True), (3, True), (3, False)],
                         ids=["T1", "T3", "T3-frozen-weights"])
def test_double_backward_is_refused_or_right(T, weights_need_grad):
    # The ops document no double backward (as nn.LSTM on cuDNN): differentiating lstm's gradient
    # must raise, or give nn.LSTM's (CPU) second derivative; never another number.
    torch.manual_seed(0)
    I, H, B = 3, 4, 2
    m = nn.LSTM(I, H).double().requires_grad_(weights_need_grad)
    x = torch.randn(T, B, I, dtype=torch.float64, requires_grad=True)
    h0, c0 = torch.randn(1, B, H, dtype=torch.float64), torch.randn(1, B, H, dtype=torch.float64)

    def second(f):
        g, = torch.autograd.grad(f(x).square().sum(), x, create_graph=True)
        return torch.autograd.grad(g.square().sum(), x)[0]

    expected = second(lambda x: m(x, (h0, c0))[0])
    try:
        got = second(lambda x: fastlayers.lstm.lstm(x, h0[0], c0[0], *weights(m, False),
                                                    tf32=False)[0])
    except RuntimeError:
        return  # refused
    torch.testing.assert_close(got, expected, msg=lambda s: (
        "lstm's double backward returned a wrong second derivative instead of refusing:\n" + s))

