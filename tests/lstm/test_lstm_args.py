"""Argument checks of the LSTM ops per device: each bad argument raises a RuntimeError naming the
op and the argument at fault (shapes, dtypes, devices, batch_sizes, ranks, a foreign reserve);
the empty edge cases give the right shapes."""
import pytest
import torch

from lstm_samples import Case, inputs, op_inputs, reference_module, weights

fl = torch.ops.fastlayers
CASE = Case(4, 3, 5, 6, 0, (4, 3, 1), False, True)        # packed: batch_sizes [3, 2, 2, 1]
PROJ = Case(4, 3, 5, 6, 2, None, False, True)             # padded, projection
L, LB = "lstm: ", "lstm_backward: "


def _args(device, case=CASE, packed=None):
    """The op's arguments (a dict) for `case`, packed as the case says unless `packed` is given."""
    m = reference_module(case, torch.float32, device)
    x, h0, c0 = inputs(case, torch.float32, device)
    xi, bs = op_inputs(case, x) if packed in (None, True) else (x, None)
    w_ih, w_hh, b_ih, b_hh, w_hr = (t.detach() if t is not None else None
                                    for t in weights(m, False))
    return dict(input=xi, h0=h0, c0=c0, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh, w_hr=w_hr,
                batch_sizes=bs)


def _lstm(device, case=CASE, packed=None, **changes):
    a = _args(device, case, packed)
    a.update({k: (v(a) if callable(v) else v) for k, v in changes.items()})
    return fl.lstm(a["input"], a["h0"], a["c0"], a["w_ih"], a["w_hh"], a["b_ih"], a["b_hh"],
                   a["w_hr"], a["batch_sizes"], False, False)


def _backward(device, case=CASE, **changes):
    """lstm_backward on the results of lstm, with some of its arguments changed."""
    a = _args(device, case)
    out, h, c, reserve, reserve_h = _lstm(device, case)
    b = dict(grad_output=torch.ones_like(out), grad_h_n=None, grad_c_n=None, reserve=reserve,
             reserve_h=reserve_h)
    b.update({k: (v(b) if callable(v) else v) for k, v in changes.items()})
    return fl.lstm_backward(b["grad_output"], b["grad_h_n"], b["grad_c_n"], a["input"], a["h0"],
                            a["c0"], a["w_ih"], a["w_hh"], a["w_hr"], a["batch_sizes"],
                            b["reserve"], b["reserve_h"], False, False, True, True)


def _t(*shape, device="cpu", dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, device=device)


def _batch_sizes_elsewhere(device):
    """batch_sizes on the device of the input, CUDA; on the CPU, on meta, with the CPU kernel
    itself (a meta operand sends the call to the fake kernel, which computes shapes only, as
    aten's meta kernels do): the kernels' own check is what is tested."""
    if device != "cpu":
        return _lstm(device, batch_sizes=lambda a: a["batch_sizes"].to(device))
    a = _args(device)
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    return fl.lstm.default.redispatch(keys, a["input"], a["h0"], a["c0"], a["w_ih"], a["w_hh"],
                                      a["b_ih"], a["b_hh"], a["w_hr"],
                                      a["batch_sizes"].to("meta"), False, False)


# name: (call taking the device, message)
BAD_ARGUMENTS = {
    # weights
    "w_ih-rows-not-4H": (lambda d: _lstm(d, w_ih=lambda a: a["w_ih"][:-1]),
                         L + r"`w_ih` must be 2-D \[4 hidden_size, input_size\], got shape "
                             r"\[23, 5\]"),
    "w_ih-1d": (lambda d: _lstm(d, w_ih=lambda a: a["w_ih"].flatten()),
                L + r"`w_ih` must be 2-D"),
    "w_ih-input-size": (lambda d: _lstm(d, w_ih=lambda a: a["w_ih"][:, :-1]),
                        L + r"`input` has 5 features but `w_ih` expects 4"),
    "w_hh-columns": (lambda d: _lstm(d, w_hh=lambda a: a["w_hh"][:, :-1]),
                     L + r"`w_hh` must have shape \[24, 6\], got \[24, 5\]"),
    "w_hh-rows": (lambda d: _lstm(d, w_hh=lambda a: a["w_hh"][:-4]),
                  L + r"`w_hh` must have shape \[24, 6\], got \[20, 6\]"),
    "b_ih-size": (lambda d: _lstm(d, b_ih=lambda a: a["b_ih"][:-1]),
                  L + r"`b_ih` must have shape \[24\], got \[23\]"),
    "b_hh-2d": (lambda d: _lstm(d, b_hh=lambda a: a["b_hh"][None]),
                L + r"`b_hh` must have shape \[24\], got \[1, 24\]"),
    "w_hr-columns": (lambda d: _lstm(d, PROJ, w_hr=lambda a: a["w_hr"][:, :-1]),
                     L + r"`w_hr` must have shape \[2, 6\], got \[2, 5\]"),
    "w_hr-3d": (lambda d: _lstm(d, PROJ, w_hr=lambda a: a["w_hr"][:, :, None]),
                L + r"`w_hr` must be 2-D \[proj_size, hidden_size\]"),
    "w_hr-0d": (lambda d: _lstm(d, PROJ, w_hr=torch.tensor(1.0, device=d)),
                L + r"`w_hr` must be 2-D \[proj_size, hidden_size\]"),
    "w_hr-without-projection-weights": (lambda d: _lstm(d, w_hr=_t(2, 6, device=d)),
                                        L + r"`w_hh` must have shape \[24, 2\], got \[24, 6\]"),
    # states
    "h0-batch": (lambda d: _lstm(d, packed=False, h0=lambda a: a["h0"][:-1]),
                 L + r"`h0` must have shape \[3, 6\], got \[2, 6\]"),
    "h0-3d-layer-stack": (lambda d: _lstm(d, packed=False, h0=lambda a: a["h0"][None]),
                          L + r"`h0` must have shape \[3, 6\], got \[1, 3, 6\]"),
    "h0-projected-size": (lambda d: _lstm(d, PROJ, h0=lambda a: a["c0"]),
                          L + r"`h0` must have shape \[3, 2\], got \[3, 6\]"),
    "c0-size": (lambda d: _lstm(d, c0=lambda a: a["c0"][:, :-1]),
                L + r"`c0` must have shape \[3, 6\], got \[3, 5\]"),
    "c0-projected-size": (lambda d: _lstm(d, PROJ, c0=lambda a: a["h0"]),
                          L + r"`c0` must have shape \[3, 6\], got \[3, 2\]"),
    # dtypes
    "h0-float64": (lambda d: _lstm(d, h0=lambda a: a["h0"].double()),
                   L + r"`h0` has dtype Double but `input` has Float"),
    "w_hh-float16": (lambda d: _lstm(d, w_hh=lambda a: a["w_hh"].half()),
                     L + r"`w_hh` has dtype Half but `input` has Float"),
    "b_hh-float64": (lambda d: _lstm(d, b_hh=lambda a: a["b_hh"].double()),
                     L + r"`b_hh` has dtype Double but `input` has Float"),
    "input-float64-weights-float32": (lambda d: _lstm(d, input=lambda a: a["input"].double()),
                                      L + r"`w_ih` has dtype Float but `input` has Double"),
    "input-int": (lambda d: _lstm(d, input=lambda a: a["input"].int()),
                  L + r"`input` has dtype Int; supported: float32, float64, float16, bfloat16"),
    # batch_sizes
    "batch_sizes-int32": (lambda d: _lstm(d, batch_sizes=lambda a: a["batch_sizes"].int()),
                          L + r"`batch_sizes` must be a 1-D int64 CPU tensor"),
    "batch_sizes-float": (lambda d: _lstm(d, batch_sizes=lambda a: a["batch_sizes"].float()),
                          L + r"`batch_sizes` must be a 1-D int64 CPU tensor"),
    "batch_sizes-2d": (lambda d: _lstm(d, batch_sizes=lambda a: a["batch_sizes"][None]),
                       L + r"`batch_sizes` must be a 1-D int64 CPU tensor"),
    "batch_sizes-on-another-device": (_batch_sizes_elsewhere,
                                      L + r"`batch_sizes` must be a 1-D int64 CPU tensor .* on "
                                          r"(meta|cuda)"),
    "batch_sizes-increasing": (lambda d: _lstm(
        d, batch_sizes=torch.tensor([1, 2, 2, 3]), h0=lambda a: a["h0"][:1],
        c0=lambda a: a["c0"][:1]),
        L + r"`batch_sizes` must be positive and non-increasing, got \[1, 2, 2, 3\]$"),
    "packed-h0-1d": (lambda d: _lstm(d, h0=lambda a: a["h0"][0]),
                     L + r"`h0` and `c0` must be 2-D \[B, hidden_size\] and \[B, hidden_size\], "
                         r"got shapes \[6\] and \[3, 6\]"),
    "batch_sizes-zero": (lambda d: _lstm(d, batch_sizes=torch.tensor([3, 2, 2, 1, 0])),
                         L + r"`batch_sizes` must be positive and non-increasing"),
    "batch_sizes-sum-short": (lambda d: _lstm(d, batch_sizes=torch.tensor([3, 2, 2])),
                              L + r"`input` has 8 rows but `batch_sizes` sums to 7"),
    "batch_sizes-sum-long": (lambda d: _lstm(d, batch_sizes=torch.tensor([3, 3, 2, 1])),
                             L + r"`input` has 8 rows but `batch_sizes` sums to 9"),
    "batch_sizes-first-not-h0-batch": (lambda d: _lstm(d, batch_sizes=torch.tensor([2, 2, 2, 2])),
                                       L + r"`batch_sizes`\[0\] \(2\) must equal the batch of "
                                           r"`h0` \(3\)"),
    # ranks
    "padded-input-2d": (lambda d: _lstm(d, packed=False, input=lambda a: a["input"][0]),
                        L + r"`input` must be 3-D \[T, B, input_size\]"),
    "padded-input-4d": (lambda d: _lstm(d, packed=False, input=lambda a: a["input"][None]),
                        L + r"`input` must be 3-D \[T, B, input_size\]"),
    "packed-input-3d": (lambda d: _lstm(d, input=lambda a: a["input"][None]),
                        L + r"a packed `input` \(with `batch_sizes`\) must be 2-D"),
    "lstm_cell-input-3d": (lambda d: fl.lstm_cell(_t(1, 3, 5, device=d), *(
        _args(d)[k] for k in ("h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr")), False),
        r"lstm_cell: `input` must be 2-D \[B, input_size\], got shape \[1, 3, 5\]"),
    "lstm_cell-hx-batch": (lambda d: fl.lstm_cell(_args(d, packed=False)["input"][0], *(
        _args(d, packed=False)[k][1:] if k == "h0" else _args(d, packed=False)[k]
        for k in ("h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr")), False),
        r"lstm_cell: `hx` must have shape \[3, 6\], got \[2, 6\]"),
    "lstm_cell-cx-hidden": (lambda d: fl.lstm_cell(_args(d, packed=False)["input"][0], *(
        _args(d, packed=False)[k][:, 1:] if k == "c0" else _args(d, packed=False)[k]
        for k in ("h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr")), False),
        r"lstm_cell: `cx` must have shape \[3, 6\], got \[3, 5\]"),
    # lstm_backward
    "backward-reserve-shape": (lambda d: _backward(d, reserve=lambda b: b["reserve"][:, :-1]),
                               LB + r"`reserve` is not what lstm saved for these arguments "
                                    r"\(shape \[8, 29\]"),
    "backward-reserve-rows": (lambda d: _backward(d, reserve=lambda b: b["reserve"][:-1]),
                              LB + r"`reserve` is not what lstm saved .*shape \[7, 30\]"),
    "backward-reserve-dtype": (lambda d: _backward(d, reserve=lambda b: b["reserve"].double()),
                               LB + r"`reserve` is not what lstm saved .*dtype Double"),
    "backward-reserve_h-shape": (lambda d: _backward(d, reserve_h=lambda b: b["reserve_h"][:, 1:]),
                                 LB + r"`reserve_h` is not what lstm saved .*shape \[8, 5\]"),
    "backward-grad_output-shape": (lambda d: _backward(
        d, grad_output=lambda b: b["grad_output"][:-1]),
        LB + r"`grad_output` must have shape \[8, 6\], got \[7, 6\]"),
    "backward-grad_output-dtype": (lambda d: _backward(
        d, grad_output=lambda b: b["grad_output"].double()),
        LB + r"`grad_output` must have the dtype and device of `input`"),
    "backward-grad_h_n-shape": (lambda d: _backward(d, grad_h_n=_t(3, 5, device=d)),
                                LB + r"`grad_h_n` must have shape \[3, 6\], got \[3, 5\]"),
    "backward-grad_c_n-dtype": (lambda d: _backward(
        d, grad_c_n=_t(3, 6, device=d, dtype=torch.float64)),
        LB + r"`grad_c_n` has dtype Double but `input` has Float"),
}


@pytest.mark.parametrize("name", BAD_ARGUMENTS)
def test_bad_arguments_name_themselves(device, name):
    call, message = BAD_ARGUMENTS[name]
    with pytest.raises(RuntimeError, match=message):
        call(device)


@pytest.mark.gpu
@pytest.mark.parametrize("operand", ["h0", "w_hh", "b_ih"])
def test_operands_on_another_device(operand):
    with pytest.raises(RuntimeError, match=L + "`%s` is on cpu but `input` is on cuda" % operand):
        _lstm("cuda", **{operand: lambda a: a[operand].cpu()})


# --- empty edge cases ----------------------------------------------------------------------------


def test_empty_batch_and_empty_sequence(device):
    # B = 0: empty results of the right shapes; T = 0: the states pass through (the op accepts
    # what nn.LSTM refuses: it raises "Expected sequence length to be larger than 0")
    out, h, c, _, _ = _lstm(device, packed=False, input=_t(4, 0, 5, device=device),
                            h0=_t(0, 6, device=device), c0=_t(0, 6, device=device))
    assert out.shape == (4, 0, 6) and h.shape == (0, 6) and c.shape == (0, 6)
    a = _args(device, packed=False)
    out, h, c, _, _ = _lstm(device, packed=False, input=_t(0, 3, 5, device=device))
    assert out.shape == (0, 3, 6)
    assert torch.equal(h, a["h0"]) and torch.equal(c, a["c0"])
