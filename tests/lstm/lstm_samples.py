"""Sample LSTM problems and nn.LSTM references for the LSTM op and module tests."""
from typing import NamedTuple, Optional, Tuple

import zlib

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence


class Case(NamedTuple):
    T: int
    B: int
    I: int
    H: int
    P: int                            # proj_size (0: none)
    lengths: Optional[Tuple[int, ...]]  # sorted, for a packed input; None: padded
    reverse: bool
    bias: bool

    def __str__(self):
        return "T%d-B%d-I%d-H%d%s%s%s%s" % (
            self.T, self.B, self.I, self.H, "-P%d" % self.P if self.P else "",
            "-packed" + "_".join(map(str, self.lengths)) if self.lengths else "",
            "-reverse" if self.reverse else "", "" if self.bias else "-nobias")


# Every quantity compared holds at least 64 values (H >= 16): the tolerance rule compares
# relative errors, which over a handful of values are one rounding's luck.
CASES = [
    Case(5, 3, 8, 16, 0, None, False, True),
    Case(5, 3, 8, 16, 0, None, True, True),
    Case(1, 1, 16, 32, 0, None, False, True),
    Case(4, 2, 12, 16, 8, None, False, True),
    Case(6, 4, 10, 16, 0, (6, 4, 4, 1), False, True),
    Case(6, 4, 10, 16, 0, (6, 4, 4, 1), True, True),
    Case(5, 3, 6, 20, 7, (5, 5, 2), True, False),
    Case(3, 2, 8, 16, 0, (3, 3), False, False),
    Case(7, 16, 12, 32, 0, None, False, True),
    Case(4, 8, 16, 24, 8, (4, 3, 3, 3, 2, 2, 1, 1), False, True),
]
SMALL = [Case(3, 2, 3, 4, 0, None, False, True), Case(4, 3, 2, 3, 2, (4, 2, 1), True, True)]


def reference_module(case: Case, dtype=torch.float64, device="cpu"):
    """A seeded nn.LSTM whose one layer (its second direction for `reverse`) is the case's."""
    torch.manual_seed(zlib.crc32(str(case).encode()))
    return nn.LSTM(case.I, case.H, bias=case.bias, proj_size=case.P,
                   bidirectional=case.reverse).to(device=device, dtype=dtype)


def weights(m: nn.LSTM, reverse: bool):
    """(w_ih, w_hh, b_ih, b_hh, w_hr) of the direction the op computes."""
    s = "_l0" + ("_reverse" if reverse else "")
    get = lambda n: getattr(m, n + s) if hasattr(m, n + s) else None  # noqa: E731
    return (get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr"))


def inputs(case: Case, dtype=torch.float64, device="cpu"):
    """x [T, B, I], h0 [B, R], c0 [B, H], drawn in float64 on the CPU."""
    g = torch.Generator().manual_seed(zlib.crc32(str(case).encode()) + 1)
    R = case.P or case.H
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(device, dtype)  # noqa
    return t(case.T, case.B, case.I), t(case.B, R), t(case.B, case.H)


def nn_direction(m: nn.LSTM, case: Case, x, h0, c0):
    """nn.LSTM's output, h_n and c_n of the case's direction (x padded [T, B, I]; packed data for
    a packed case)."""
    d = 1 if case.reverse else 0
    dirs = 2 if case.reverse else 1
    R = case.P or case.H
    hh = h0.unsqueeze(0).expand(dirs, -1, -1).contiguous()
    cc = c0.unsqueeze(0).expand(dirs, -1, -1).contiguous()
    inp = x if case.lengths is None else pack_padded_sequence(x, list(case.lengths))
    y, (h, c) = m(inp, (hh, cc))
    y = y if case.lengths is None else y.data
    return y[..., d * R:(d + 1) * R], h[d], c[d]


def op_inputs(case: Case, x):
    """The op's input and batch_sizes: x itself, or the packed data and its batch_sizes."""
    if case.lengths is None:
        return x, None
    p = pack_padded_sequence(x, list(case.lengths))
    return p.data, p.batch_sizes
