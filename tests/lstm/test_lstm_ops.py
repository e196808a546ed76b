"""The LSTM ops against nn.LSTM, per device and precision: outputs, final states and the
gradients of every input (the tolerance rule: at most ERROR_FACTOR x nn.LSTM's own error against
float64 in the same precision), gradcheck, opcheck, lstm_cell, compile and bad arguments."""
import pytest
import torch
from torch.autograd import gradcheck

import fastlayers
from conv_samples import DTYPES, EXACT_FLOOR_ULPS, ULP, rel_err, skip_unless_supported
from lstm_samples import CASES, SMALL, inputs, nn_direction, op_inputs, reference_module, weights

# An LSTM rounds its hidden state to the input dtype at every step, nn.LSTM (cuDNN) as the ops
# do: the project's default factor (flash-attention's rule) for every precision.
ERROR_FACTOR = 2.0
NAMES = ("output", "h_n", "c_n", "grad input", "grad h0", "grad c0", "grad w_ih", "grad w_hh",
         "grad b_ih", "grad b_hh", "grad w_hr")


def results(case, m, x, h0, c0, g, use_op, tf32=False):
    """(output, h_n, c_n) and the gradients of x, h0, c0 and every weight of the case's
    direction under the loss <g, (output, h_n, c_n)>, by the op or by nn.LSTM."""
    x, h0, c0 = (t.detach().clone().requires_grad_() for t in (x, h0, c0))
    w = [t for t in weights(m, case.reverse)]
    if use_op:
        xi, bs = op_inputs(case, x)
        out, h, c, _, _ = torch.ops.fastlayers.lstm(xi, h0, c0, *w, bs, case.reverse, tf32)
    else:
        out, h, c = nn_direction(m, case, x, h0, c0)
    loss = sum((a.double() * b).sum() for a, b in zip((out, h, c), g))
    wrt = [x, h0, c0] + [t for t in w if t is not None]
    grads = torch.autograd.grad(loss, wrt)
    full = list(grads[:3])
    it = iter(grads[3:])
    full += [next(it) if t is not None else None for t in w]
    return [out.detach(), h.detach(), c.detach()] + full


def upstream(case, device):
    """Random gradients of (output, h_n, c_n) in float64."""
    gen = torch.Generator().manual_seed(1)
    R = case.P or case.H
    N = sum(case.lengths) if case.lengths else case.T * case.B
    shape = (N, R) if case.lengths else (case.T, case.B, R)
    return [torch.randn(*s, generator=gen, dtype=torch.float64).to(device)
            for s in (shape, (case.B, R), (case.B, case.H))]


@pytest.mark.parametrize("precision", ["float32", "float64", "tf32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_op_matches_nn_lstm(device, case, precision):
    skip_unless_supported(device, precision)
    dtype = DTYPES[precision]
    tf32 = precision == "tf32"
    m64 = reference_module(case, torch.float64, device)
    x, h0, c0 = inputs(case, torch.float64, device)
    g = upstream(case, device)
    ref = results(case, m64, x, h0, c0, g, use_op=False)
    m = reference_module(case, dtype, device)
    m.load_state_dict(m64.state_dict())
    xd, h0d, c0d = x.to(dtype), h0.to(dtype), c0.to(dtype)
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        ours = results(case, m, xd, h0d, c0d, g, use_op=True, tf32=tf32)
        native = None if precision == "float64" else results(case, m, xd, h0d, c0d, g, False)
    finally:
        torch.backends.cudnn.allow_tf32 = old
    for i, (name, o, r) in enumerate(zip(NAMES, ours, ref)):
        if r is None:
            assert o is None, name
            continue
        assert o.dtype == dtype and o.shape == r.shape, (name, o.dtype, o.shape, r.shape)
        err = rel_err(o, r)
        if precision == "float64":
            assert err <= 1e-12, "%s %s: float64 error %.2e" % (case, name, err)
            continue
        own = rel_err(native[i], r)
        bound = ERROR_FACTOR * own if own > 0 else EXACT_FLOOR_ULPS * ULP[precision]
        assert err <= bound, "%s %s (%s): error %.3e > %.3e (nn.LSTM's own %.3e)" % (
            case, name, precision, err, bound, own)


def test_reference_gradients_are_what_a_wrong_gate_breaks():
    # The comparison's strength: nn.LSTM with two gates' weights swapped is far outside it.
    case = CASES[0]
    m = reference_module(case)
    x, h0, c0 = inputs(case)
    g = upstream(case, "cpu")
    ref = results(case, m, x, h0, c0, g, use_op=True)
    with torch.no_grad():
        w = m.weight_ih_l0
        w[:case.H], w[case.H:2 * case.H] = w[case.H:2 * case.H].clone(), w[:case.H].clone()
    swapped = results(case, m, x, h0, c0, g, use_op=False)
    assert rel_err(swapped[0], ref[0]) > 1e-3


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_gradcheck(device, case):
    m = reference_module(case, torch.float64, device)
    x, h0, c0 = inputs(case, torch.float64, device)
    w = [t.detach().clone().requires_grad_() if t is not None else None
         for t in weights(m, case.reverse)]
    xi, bs = op_inputs(case, x)
    args = [xi, h0, c0] + [t for t in w if t is not None]
    args = [t.detach().clone().requires_grad_() for t in args]
    has = [t is not None for t in w]

    def fn(xi, h0, c0, *ws):
        it = iter(ws)
        full = [next(it) if h else None for h in has]
        out = torch.ops.fastlayers.lstm(xi, h0, c0, *full, bs, case.reverse, False)
        return out[:3]
    assert gradcheck(fn, args)

    def only_output(xi, h0, c0, *ws):  # grad_h_n and grad_c_n None
        return fn(xi, h0, c0, *ws)[0]
    assert gradcheck(only_output, args)


def test_lstm_cell_is_one_step(device):
    case = CASES[0]
    m = reference_module(case, torch.float64, device)
    cell = torch.nn.LSTMCell(case.I, case.H).to(device, torch.float64)
    with torch.no_grad():
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, n).copy_(getattr(m, n + "_l0"))
    x, h0, c0 = inputs(case, torch.float64, device)
    x0 = x[0].clone().requires_grad_()
    h, c = fastlayers.lstm.lstm_cell(x0, h0, c0, *weights(m, False))
    hr, cr = cell(x0, (h0, c0))
    torch.testing.assert_close(h, hr)
    torch.testing.assert_close(c, cr)
    gx = torch.autograd.grad((h * c).sum(), x0)[0]
    gxr = torch.autograd.grad((hr * cr).sum(), x0)[0]
    torch.testing.assert_close(gx, gxr)
    assert gradcheck(lambda a, b, c: torch.ops.fastlayers.lstm_cell(a, b, c, *weights(m, False)),
                     (x0.detach().requires_grad_(), h0.requires_grad_(), c0.requires_grad_()))


@pytest.mark.parametrize("grads", ["none", "first", "all"])
@pytest.mark.parametrize("case", SMALL, ids=str)
def test_opcheck(device, case, grads):
    m = reference_module(case, torch.float32, device)
    x, h0, c0 = inputs(case, torch.float32, device)
    xi, bs = op_inputs(case, x)
    w = [t.detach().clone() if t is not None else None for t in weights(m, case.reverse)]
    if grads != "none":
        xi.requires_grad_()
    if grads == "all":
        h0.requires_grad_(), c0.requires_grad_()
        for t in w:
            if t is not None:
                t.requires_grad_()
    torch.library.opcheck(torch.ops.fastlayers.lstm.default,
                          (xi, h0, c0, *w, bs, case.reverse, False))


def test_compile_fullgraph(device):
    case = SMALL[0]
    m = reference_module(case, torch.float32, device)
    x, h0, c0 = inputs(case, torch.float32, device)
    w = [t.detach() for t in weights(m, False)[:4]]

    def run(x, h0, c0, *w):
        return fastlayers.lstm.lstm(x, h0, c0, *w, tf32=False)

    torch._dynamo.reset()
    got = torch.compile(run, fullgraph=True, backend="aot_eager")(x, h0, c0, *w)
    for a, e in zip(got, run(x, h0, c0, *w)):
        torch.testing.assert_close(a, e)


def bad_calls():
    case = CASES[4]
    m = reference_module(case, torch.float32)
    x, h0, c0 = inputs(case, torch.float32)
    w_ih, w_hh, b_ih, b_hh, _ = weights(m, False)
    xi, bs = op_inputs(case, x)
    lstm = torch.ops.fastlayers.lstm
    ok = dict(input=x, h0=h0, c0=c0, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh, w_hr=None,
              batch_sizes=None)

    def call(**changes):
        a = dict(ok, **changes)
        return lambda: lstm(a["input"], a["h0"], a["c0"], a["w_ih"], a["w_hh"], a["b_ih"],
                            a["b_hh"], a["w_hr"], a["batch_sizes"], False, False)
    return [
        ("`w_ih`", call(w_ih=w_ih[:-1])),
        ("`w_hh` must have shape", call(w_hh=w_hh[:, :-1])),
        ("`h0` must have shape", call(h0=h0[:-1])),
        ("`c0` must have shape", call(c0=c0[:, :-1])),
        ("`b_ih` must have shape", call(b_ih=b_ih[:-1])),
        ("`w_hr` must have shape", call(w_hr=torch.randn(case.H, case.H + 1))),
        ("`h0` has dtype", call(h0=h0.double())),
        ("`input` must be 3-D", call(input=x[0])),
        ("features", call(input=x[..., :-1])),
        ("`batch_sizes` must be a 1-D int64 CPU", call(input=xi, batch_sizes=bs.int())),
        ("non-increasing", call(input=xi, batch_sizes=torch.tensor([1, 4, 4, 3, 2, 1]))),
        ("sums to", call(input=xi, batch_sizes=bs[:-1])),
        ("must equal the batch", call(input=xi, batch_sizes=torch.tensor([3, 3, 3, 3, 2, 1]))),
        ("packed `input`", call(input=x, batch_sizes=bs)),
        ("dtype", call(input=x.int())),
    ]


@pytest.mark.parametrize("i", range(len(bad_calls())))
def test_bad_arguments_name_themselves(i):
    what, call = bad_calls()[i]
    with pytest.raises(RuntimeError, match=what.replace("(", r"\(")):
        call()


def test_backward_refuses_a_foreign_reserve():
    case = CASES[0]
    m = reference_module(case, torch.float32)
    x, h0, c0 = inputs(case, torch.float32)
    w = weights(m, False)
    out, h, c, reserve, reserve_h = torch.ops.fastlayers.lstm(x, h0, c0, *w, None, False, False)
    with pytest.raises(RuntimeError, match="`reserve` is not what lstm saved"):
        torch.ops.fastlayers.lstm_backward(out, None, None, x, h0, c0, w[0], w[1], None, None,
                                           reserve[:, :-1], reserve_h, False, False, True, True)
