"""Sample LSTM problems, nn.LSTM references and the comparison of the LSTM ops' results with
them (the project's tolerance rule, conv_samples.py), shared by the tests of tests/lstm."""
import copy
import zlib
from typing import List, NamedTuple, Optional, Sequence, Tuple

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from conv_samples import DTYPES, EXACT_FLOOR_ULPS, ULP, rel_err

# --- The rule for the LSTM -----------------------------------------------------------------------
#
# float64 results match float64 nn.LSTM to FLOAT64_BOUND (relative L2 error): the ops compute in
# float64 there, so only the order of a few sums differs (errors of 1e-16 to 1e-15 are seen).
#
# Other precisions: a result's relative error against float64 nn.LSTM is at most ERROR_FACTOR x
# nn.LSTM's own error in the same precision and on the same device (flash-attention's rule, the
# project's factor for float32 and TF32). The ops and nn.LSTM (cuDNN) both store the hidden state
# in the input dtype at every step and keep the cell state in float32, so a half-precision LSTM's
# error is dominated by those roundings, which compound over the steps, as in float32: the same
# factor for every precision. Measured on CPU in float32 over CASES with ten seeds each: at most
# 1.68x (median 1.0).
FLOAT64_BOUND = 1e-12
ERROR_FACTOR = 2.0
PRECISIONS = ("float64", "float32", "tf32", "float16", "bfloat16")

# The eleven results compared: the op's outputs and the gradients of its differentiable inputs.
NAMES = ("output", "h_n", "c_n", "grad input", "grad h0", "grad c0", "grad w_ih", "grad w_hh",
         "grad b_ih", "grad b_hh", "grad w_hr")


def skip_unless_supported(device: str, precision: str) -> None:
    """The CPU runs float64 and float32 (the module's CPU path takes nothing else); TF32 and the
    half types are CUDA's matrix (the CPU op computes them in float32 with no nn.LSTM to
    compare against: CPU nn.LSTM has no float16 kernel)."""
    if device == "cpu" and precision not in ("float64", "float32"):
        pytest.skip("%s runs on CUDA only in this matrix" % precision)


class Case(NamedTuple):
    T: int
    B: int
    I: int
    H: int
    P: int                              # proj_size (0: none)
    lengths: Optional[Tuple[int, ...]]  # sorted lengths of a packed input; None: padded
    reverse: bool
    bias: bool

    @property
    def R(self) -> int:
        return self.P or self.H

    @property
    def N(self) -> int:
        return sum(self.lengths) if self.lengths else self.T * self.B

    def __str__(self):
        return "T%d-B%d-I%d-H%d%s%s%s%s" % (
            self.T, self.B, self.I, self.H, "-P%d" % self.P if self.P else "",
            "-packed" + "_".join(map(str, self.lengths)) if self.lengths else "",
            "-reverse" if self.reverse else "", "" if self.bias else "-nobias")


# Padded and packed (sorted lengths, equal ones, length-1 sequences, one sequence, all of length
# one), both directions, with and without projection and biases, T = 1 and B = 1. Every quantity
# compared holds at least 64 values (test_the_cases_cover_the_matrix): the rule compares relative
# errors, which over a handful of values are a few roundings' luck (with 16 values, nn.LSTM's own
# error was 0.4x its usual in one seed of ten).
CASES = [
    Case(5, 3, 8, 24, 0, None, False, True),
    Case(5, 3, 8, 24, 0, None, True, True),
    Case(1, 1, 64, 64, 0, None, False, True),
    Case(1, 1, 64, 64, 0, (1,), True, True),
    Case(4, 2, 12, 48, 32, None, False, True),
    Case(4, 2, 12, 48, 32, None, True, False),
    Case(6, 4, 10, 16, 0, (6, 4, 4, 1), False, True),
    Case(6, 4, 10, 16, 0, (6, 4, 4, 1), True, True),
    Case(5, 3, 6, 40, 24, (5, 5, 2), True, False),
    Case(3, 2, 12, 32, 0, (3, 3), False, False),
    Case(6, 1, 16, 96, 64, (6,), False, True),
    Case(1, 3, 24, 24, 0, (1, 1, 1), True, True),
    Case(7, 16, 12, 32, 0, None, False, True),
    Case(4, 8, 16, 24, 8, (4, 3, 3, 3, 2, 2, 1, 1), False, True),
]

# Small problems for gradcheck and opcheck: every differentiable input (biases and w_hr too),
# padded and packed, both directions, T = 1 and B = 1.
SMALL = [
    Case(3, 2, 3, 4, 2, None, False, True),
    Case(4, 3, 2, 3, 2, (4, 2, 1), True, True),
    Case(3, 3, 2, 3, 0, (3, 3, 1), False, False),
    Case(1, 1, 2, 3, 0, None, True, True),
]


# --- Problems and references ---------------------------------------------------------------------


def _seed(case: Case) -> int:
    return zlib.crc32(str(case).encode())


def reference_module(case: Case, dtype=torch.float64, device="cpu") -> nn.LSTM:
    """A seeded nn.LSTM whose one layer is the case's: a bidirectional one for `reverse`, whose
    second direction the op computes."""
    torch.manual_seed(_seed(case))
    return nn.LSTM(case.I, case.H, bias=case.bias, proj_size=case.P,
                   bidirectional=case.reverse).to(device=device, dtype=dtype)


def weights(m: nn.LSTM, reverse: bool) -> List[Optional[torch.Tensor]]:
    """[w_ih, w_hh, b_ih, b_hh, w_hr] of the direction the op computes (None where absent)."""
    s = "_l0" + ("_reverse" if reverse else "")
    return [getattr(m, n + s, None) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                              "weight_hr")]


def inputs(case: Case, dtype=torch.float64, device="cpu"):
    """x [T, B, I] (padded; a packed case packs it), h0 [B, R], c0 [B, H]: drawn in float64 on
    the CPU, so every device and dtype sees the same values (rounded to the dtype)."""
    g = torch.Generator().manual_seed(_seed(case) + 1)
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(device, dtype)  # noqa
    return t(case.T, case.B, case.I), t(case.B, case.R), t(case.B, case.H)


def upstream(case: Case, device="cpu") -> List[torch.Tensor]:
    """Random float64 gradients of (output, h_n, c_n): the loss is <g, (output, h_n, c_n)>."""
    gen = torch.Generator().manual_seed(_seed(case) + 2)
    shape = (case.N, case.R) if case.lengths else (case.T, case.B, case.R)
    return [torch.randn(*s, generator=gen, dtype=torch.float64).to(device)
            for s in (shape, (case.B, case.R), (case.B, case.H))]


def op_inputs(case: Case, x):
    """The op's input and batch_sizes: x itself and None, or the packed data and batch_sizes."""
    if case.lengths is None:
        return x, None
    p = pack_padded_sequence(x, list(case.lengths))
    return p.data, p.batch_sizes


def nn_direction(m: nn.LSTM, case: Case, x, h0, c0):
    """nn.LSTM's output, h_n and c_n of the case's direction (x padded; the output packed data
    for a packed case). Both directions of a bidirectional reference start from (h0, c0)."""
    d = 1 if case.reverse else 0
    dirs = 2 if case.reverse else 1
    R = case.R
    hh = h0.unsqueeze(0).expand(dirs, -1, -1).contiguous()
    cc = c0.unsqueeze(0).expand(dirs, -1, -1).contiguous()
    inp = x if case.lengths is None else pack_padded_sequence(x, list(case.lengths))
    y, (h, c) = m(inp, (hh, cc))
    y = y if case.lengths is None else y.data
    return y[..., d * R:(d + 1) * R], h[d], c[d]


def results(case: Case, m: nn.LSTM, x, h0, c0, g, use_op: bool, tf32: bool = False,
            w=None, op_reverse: Optional[bool] = None, op="lstm") -> List[Optional[torch.Tensor]]:
    """The eleven NAMES: (output, h_n, c_n) and the gradients of x, h0, c0, w_ih, w_hh, b_ih,
    b_hh, w_hr (None where the case has no such weight) under <g, (output, h_n, c_n)>, by the op
    (`use_op`) or by nn.LSTM `m`. `w`: the op's weights (default: m's of the case's direction);
    `op_reverse`: the op's `reverse` (default: the case's); `op`: lstm or lstm_persistent."""
    x, h0, c0 = (t.detach().clone().requires_grad_() for t in (x, h0, c0))
    w = weights(m, case.reverse) if w is None else w
    if use_op:
        xi, bs = op_inputs(case, x)
        rev = case.reverse if op_reverse is None else op_reverse
        out, h, c, _, _ = getattr(torch.ops.fastlayers, op)(xi, h0, c0, *w, bs, rev, tf32)
    else:
        out, h, c = nn_direction(m, case, x, h0, c0)
    loss = sum((a.double() * b).sum() for a, b in zip((out, h, c), g))
    present = [t for t in w if t is not None]
    grads = iter(torch.autograd.grad(loss, [x, h0, c0] + present))
    full = [next(grads) for _ in range(3)] + [next(grads) if t is not None else None for t in w]
    return [out.detach(), h.detach(), c.detach()] + full


def check_results(case, ours: Sequence, ref: Sequence, native: Optional[Sequence],
                  precision: str) -> List[str]:
    """Each of `ours` against the float64 `ref` (float64: FLOAT64_BOUND; otherwise the rule
    against `native`, nn.LSTM's own results in that precision). Raises AssertionError naming
    every result outside; returns lines describing each comparison."""
    failures, lines = [], []
    dtype = DTYPES[precision]
    for i, (name, o, r) in enumerate(zip(NAMES, ours, ref)):
        if r is None:
            if o is not None:
                failures.append("%s: a result where nn.LSTM has none" % name)
            continue
        if o is None or o.dtype != dtype or o.shape != r.shape:
            failures.append("%s: %s, expected %s %s" % (
                name, None if o is None else (o.dtype, tuple(o.shape)), dtype, tuple(r.shape)))
            continue
        err = rel_err(o, r)
        if precision == "float64":
            bound, own = FLOAT64_BOUND, None
        else:
            own = rel_err(native[i], r)
            bound = ERROR_FACTOR * own if own > 0 else EXACT_FLOOR_ULPS * ULP[precision]
        line = "%s %s (%s): error %.3e, bound %.3e%s" % (
            case, name, precision, err, bound, "" if own is None else " (nn.LSTM's %.3e)" % own)
        lines.append(line)
        if not err <= bound:
            failures.append(line)
    assert not failures, "\n".join(failures)
    return lines


def run_case(case: Case, precision: str, device="cpu", op_weights=None,
             op_reverse: Optional[bool] = None, op="lstm"):
    """The op's results in `precision`, float64 nn.LSTM's and nn.LSTM's own in `precision` (None
    for float64). The float64 reference runs on the very values the others get (weights, inputs
    and the upstream gradients rounded to the dtype), so that errors measure the computation, not
    the rounding of its operands, which every result would share. `op_weights`: a function of
    the reference module giving the op's weights; `op_reverse`: the op's `reverse` (default: the
    case's); `op`: lstm or lstm_persistent."""
    dtype, tf32 = DTYPES[precision], precision == "tf32"
    m = reference_module(case, torch.float64, device).to(dtype)
    m64 = copy.deepcopy(m).double()
    x, h0, c0 = (t.to(dtype) for t in inputs(case, torch.float64, device))
    g = [t.to(dtype).double() for t in upstream(case, device)]
    ref = results(case, m64, x.double(), h0.double(), c0.double(), g, use_op=False)
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32  # nn.LSTM's TF32 switch (cuDNN's)
    try:
        w = op_weights(m) if op_weights is not None else None
        ours = results(case, m, x, h0, c0, g, use_op=True, tf32=tf32, w=w, op_reverse=op_reverse,
                       op=op)
        native = None if precision == "float64" else results(case, m, x, h0, c0, g, False)
    finally:
        torch.backends.cudnn.allow_tf32 = old
    return ours, ref, native
