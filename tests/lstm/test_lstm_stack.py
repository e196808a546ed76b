"""lstm_stack (a unidirectional stack of layers in one call; on CUDA one wavefront) against
nn.LSTM of as many layers per device and precision with lstm's rule (lstm_samples.py): output,
h_n, c_n and every gradient (input, h0, c0, each layer's weights); its reserve slices against
lstm's per layer; gradcheck, opcheck, autocast and its errors."""
import copy
import re
from typing import NamedTuple

import pytest
import torch
from torch import nn

from conv_samples import DTYPES, EXACT_FLOOR_ULPS, ULP, rel_err
from lstm_samples import ERROR_FACTOR, FLOAT64_BOUND, PRECISIONS, skip_unless_supported

fl = torch.ops.fastlayers


class Stack(NamedTuple):
    T: int
    B: int
    I: int
    H: int
    L: int
    bias: bool


# More layers than steps (the wavefront's ramps overlap), one step, one sequence, no biases, a
# hidden size not a multiple of 8 (unaligned layer slices of the state), and a batch of 64.
STACKS = [
    Stack(5, 3, 8, 24, 2, True),
    Stack(2, 4, 6, 16, 4, True),
    Stack(1, 1, 5, 7, 3, False),
    Stack(6, 2, 12, 13, 3, True),
    Stack(4, 64, 32, 64, 2, False),
    Stack(7, 5, 9, 20, 1, True),
]


def _problem(st: Stack, dtype, device):
    torch.manual_seed(st.T * 1000 + st.L * 100 + st.H)
    m = nn.LSTM(st.I, st.H, num_layers=st.L, bias=st.bias).to(device, dtype)
    g = torch.Generator().manual_seed(7)
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(device, dtype)  # noqa
    x, h0, c0 = t(st.T, st.B, st.I), t(st.L, st.B, st.H), t(st.L, st.B, st.H)
    ups = [t(st.T, st.B, st.H), t(st.L, st.B, st.H), t(st.L, st.B, st.H)]
    return m, (x, h0, c0), ups


def _results(m, xs, ups, use_op, tf32=False):
    """[output, h_n, c_n, grad input, grad h0, grad c0, grad of each flat weight] under
    <ups, (output, h_n, c_n)>."""
    x, h0, c0 = (t.detach().clone().requires_grad_() for t in xs)
    w = list(m._flat_weights)
    if use_op:
        y, h, c, _, _, _ = fl.lstm_stack(x, h0, c0, w, m.bias, tf32)
    else:
        y, (h, c) = m(x, (h0, c0))
    loss = sum((a.double() * b.double()).sum() for a, b in zip((y, h, c), ups))
    grads = torch.autograd.grad(loss, [x, h0, c0] + w)
    return [y.detach(), h.detach(), c.detach()] + list(grads)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("st", STACKS, ids=str)
def test_stack_matches_nn_lstm(device, st, precision):
    skip_unless_supported(device, precision)
    dtype, tf32 = DTYPES[precision], precision == "tf32"
    m, xs, ups = _problem(st, dtype, device)
    m64 = copy.deepcopy(m).double()
    ref = _results(m64, [t.double() for t in xs], ups, use_op=False)
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        ours = _results(m, xs, ups, use_op=True, tf32=tf32)
        native = _results(m, xs, ups, use_op=False) if precision != "float64" else None
    finally:
        torch.backends.cudnn.allow_tf32 = old
    failures = []
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert o.dtype == dtype and o.shape == r.shape, (i, o.dtype, o.shape, r.shape)
        err = rel_err(o, r)
        if precision == "float64":
            bound = FLOAT64_BOUND
        else:
            own = rel_err(native[i], r)
            bound = ERROR_FACTOR * own if own > 0 else EXACT_FLOOR_ULPS * ULP[precision]
        if not err <= bound:
            failures.append("result %d: error %.3e > bound %.3e" % (i, err, bound))
    assert not failures, "\n".join(failures)


def test_reserve_is_each_layers_lstm_reserve(device):
    # Each layer's slices are what lstm saves for that layer's input, so lstm_backward reads them.
    st = STACKS[3]
    m, (x, h0, c0), _ = _problem(st, torch.float64, device)
    w = list(m._flat_weights)
    out, h_n, c_n, inner, reserve, reserve_h = fl.lstm_stack(x, h0, c0, w, True)
    assert inner.shape == (st.L - 1, st.T, st.B, st.H)
    layer_in = x
    for layer in range(st.L):
        y, h, c, r, rh = fl.lstm(layer_in, h0[layer], c0[layer], *w[4 * layer:4 * layer + 4],
                                 None, None, False, False)
        expect_y = out if layer == st.L - 1 else inner[layer]
        for a, b in ((expect_y, y), (h_n[layer], h), (c_n[layer], c), (reserve[layer], r),
                     (reserve_h[layer], rh)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
        layer_in = y


def test_gradcheck(device):
    st = Stack(3, 2, 3, 4, 3, True)
    m, xs, _ = _problem(st, torch.float64, device)
    w = [p.detach().clone().requires_grad_() for p in m._flat_weights]
    xs = [t.requires_grad_() for t in xs]
    torch.autograd.gradcheck(lambda x, h0, c0, *w: fl.lstm_stack(x, h0, c0, list(w), True)[:3],
                             (*xs, *w))


def test_opcheck(device):
    for st in (STACKS[0], STACKS[2]):
        m, xs, _ = _problem(st, torch.float32, device)
        w = [p.detach().clone().requires_grad_() for p in m._flat_weights]
        args = ([t.clone().requires_grad_() for t in xs] + [w, st.bias, False])
        torch.library.opcheck(fl.lstm_stack.default, args)


def test_autocast_runs_in_the_autocast_dtype(device):
    dtype = torch.bfloat16
    st = STACKS[0]
    m, xs, _ = _problem(st, torch.float32, device)
    with torch.autocast(device, dtype=dtype):
        out = fl.lstm_stack(*xs, list(m._flat_weights), True)
    assert out[0].dtype == dtype and out[1].dtype == dtype


BAD = {
    "weights count": (lambda w, x, h0, c0: (x, h0, c0, w[:3], True), "`weights` must hold 4"),
    "layers of h0": (lambda w, x, h0, c0: (x, h0[:1], c0[:1], w, True), "`h0` and `c0` must be"),
    "inner w_ih": (lambda w, x, h0, c0: (x, h0, c0, w[:4] + [w[4][:, :3]] + w[5:], True),
                   "weights[4] (w_ih of layer 1)"),
    "bias dtype": (lambda w, x, h0, c0: (x, h0, c0, w[:6] + [w[6].double()] + w[7:], True),
                   "weights[6] (a bias of layer 1)"),
    "packed rank": (lambda w, x, h0, c0: (x[0], h0, c0, w, True), "`input` must be 3-D"),
    # the whole state's expected shape, not a layer's slice of it
    "batch of h0": (lambda w, x, h0, c0: (x, h0[:, 1:], c0, w, True),
                    "lstm_stack: `h0` must have shape [2, 3, 24], got [2, 2, 24]"),
}


@pytest.mark.parametrize("what", list(BAD))
def test_bad_arguments_name_the_argument(device, what):
    m, (x, h0, c0), _ = _problem(STACKS[0], torch.float32, device)
    w = [p.detach() for p in m._flat_weights]
    make, message = BAD[what]
    with pytest.raises(RuntimeError, match=re.escape(message)):
        fl.lstm_stack(*make(w, x, h0, c0))


@pytest.mark.gpu
def test_more_layers_than_the_cuda_kernel_takes():
    m, (x, h0, c0), _ = _problem(Stack(2, 2, 4, 4, 9, True), torch.float32, "cuda")
    with pytest.raises(RuntimeError, match="at most 8"):
        fl.lstm_stack(x, h0, c0, list(m._flat_weights), True)
