"""The lstm layer kind: its problem (a whole nn.LSTM stack on one input signature), its candidates
(``native``: nn.LSTM's own forward; ``fused``: fastlayers' ops; ``persistent``: the same with
the recurrence as one kernel), its measuring inputs and float64 reference, and the choice per
pass (``forward`` alone, or ``training``: forward and backward)."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar, List, Optional

import torch

from .. import algorithms
from ..algorithms import LSTM_PASSES as PASSES
from ..algorithms import NATIVE
from . import decide
from .cache import versions
from .measure import error_floor, measure_candidates, problem_precision


@dataclass(frozen=True)
class LstmProblem:
    """Everything that changes the answer for an LSTM stack on one input signature."""
    kind: ClassVar[str] = "lstm"

    T: int            # steps (the longest sequence when packed)
    B: int            # batch
    I: int            # input features
    H: int            # hidden size
    R: int            # output features per direction (proj_size, else H)
    layers: int
    directions: int
    bias: bool
    packed: bool      # a PackedSequence (measured with every sequence T long)
    dtype: str
    device_type: str
    device_name: str
    capability: str
    tf32: bool
    deterministic: bool

    @staticmethod
    def of(config, T: int, B: int, dtype: torch.dtype, device: torch.device, packed: bool,
           tf32: bool, deterministic: bool) -> "LstmProblem":
        """The problem of an LSTM stack `config` = (input_size, hidden_size, proj_size,
        num_layers, bidirectional, bias) on an input of T steps and batch B."""
        if device.type == "cuda":
            name = torch.cuda.get_device_name(device)
            cap = "%d.%d" % torch.cuda.get_device_capability(device)
        else:
            name, cap = device.type, "-"
        I, H, P, L, bidirectional, bias = config
        return LstmProblem(T=int(T), B=int(B), I=I, H=H, R=P if P > 0 else H, layers=L,
                           directions=2 if bidirectional else 1, bias=bool(bias),
                           packed=bool(packed), dtype=str(dtype).replace("torch.", ""),
                           device_type=device.type, device_name=name, capability=cap,
                           tf32=bool(tf32), deterministic=bool(deterministic))

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def key(self, pass_: str) -> str:
        return ("lstm.%s|T=%d,B=%d,I=%d,H=%d,R=%d,L=%d,D=%d,bias=%d,packed=%d|%s|%s|sm%s|tf32=%d"
                "|det=%d|%s" % (pass_, self.T, self.B, self.I, self.H, self.R, self.layers,
                                self.directions, self.bias, self.packed, self.dtype,
                                self.device_name, self.capability, self.tf32, self.deterministic,
                                versions()))

    def describe(self) -> str:
        return "T=%d B=%d I=%d H=%d%s L=%d%s%s%s %s %s%s" % (
            self.T, self.B, self.I, self.H, " R=%d" % self.R if self.R != self.H else "",
            self.layers, " bidirectional" if self.directions == 2 else "",
            "" if self.bias else " no bias", " packed" if self.packed else "", self.dtype,
            self.device_type, " tf32" if self.tf32 and self.dtype == "float32" else "")


def candidates_lstm(p: LstmProblem, pass_: str) -> List[str]:
    return [c.label for c in algorithms.candidates(p, pass_)]


# Samples of the batch the accuracy check runs on: the whole batch up to this many, else at
# least this many. The check must run the kernel path the problem runs, and the persistent
# kernel's path depends on the batch (its scalar products up to batch 4, tensor-core tiles of 16
# rows above, a persistent backward up to 16, float32's batch halves from 32); 32 samples take
# the tile path with two tiles. Where 32 rows would still run another persistent kernel or
# another number of n-tiles a cluster than the batch (_persistent_path), the check takes 64,
# 128, ... rows, the first that runs the batch's, or the whole batch (_check_samples).
CHECK_SAMPLES = 32


def _check_samples(p: LstmProblem, pass_: str, labels, device: torch.device) -> int:
    n = min(p.B, CHECK_SAMPLES)
    if n == p.B or algorithms.lstm.PERSISTENT.label not in labels:
        return n
    from .. import lstm as lstm_ops
    passes = (False, True) if pass_ == "training" else (False,)
    path = lambda b: [lstm_ops._persistent_path(b, p.H, p.torch_dtype, device, bw)  # noqa: E731
                      for bw in passes]
    whole = path(p.B)
    while n < p.B and path(n) != whole:
        n *= 2
    return min(n, p.B)


def _modules(p: LstmProblem, device: torch.device, labels):
    """An nn.LSTM of the problem's configuration (seeded weights) and a fastlayers copy of it
    pinned to each of `labels`."""
    from ..rnn import LSTM
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        ref = torch.nn.LSTM(p.I, p.H, p.layers, bias=p.bias, bidirectional=p.directions == 2,
                            proj_size=p.R if p.R != p.H else 0)
    finally:
        torch.random.set_rng_state(gen_state)
    ref = ref.to(device=device, dtype=p.torch_dtype)
    ours = {}
    for label in labels:
        m = ours[label] = copy.deepcopy(ref)
        m.__class__ = LSTM
        m.force_algorithm(label)
    return ref, ours


def _input(p: LstmProblem, x: torch.Tensor):
    if p.packed:
        return torch.nn.utils.rnn.pack_padded_sequence(x, [x.shape[0]] * x.shape[1])
    return x


def _step(module, p: LstmProblem, pass_: str):
    """fn(x) -> one tensor: the outputs and final states (forward), and with the gradients of the
    input and every parameter (training), as the module computes them."""
    params = list(module.parameters())

    def run(x):
        y, (h, c) = module(_input(p, x))
        y = y.data if p.packed else y
        outs = [y.flatten(), h.flatten(), c.flatten()]
        if pass_ == "training":
            loss = y.float().square().sum() + h.float().sum() + c.float().sum()
            outs += [g.flatten() for g in torch.autograd.grad(loss, [x] + params)]
        return torch.cat([o.double() for o in outs])
    return run


def measure(p: LstmProblem, pass_: str, device: torch.device) -> decide.Decision:
    """native, fused and (where it fits) persistent, checked against nn.LSTM in float64 on the
    batch (at most CHECK_SAMPLES of it) and timed on the problem's size (a training pass: forward
    and backward, as a step pays them)."""
    choices = algorithms.candidates(p, pass_)
    ref, ours = _modules(p, device, [c.label for c in choices if c.label != NATIVE.label])
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(p.T, p.B, p.I, device=device, dtype=p.torch_dtype, generator=gen)
    x.requires_grad_(pass_ == "training")
    n = _check_samples(p, pass_, [c.label for c in choices], device)
    xc = x.detach()[:, :n].clone().requires_grad_(pass_ == "training")
    modules = {NATIVE.label: ref, **ours}
    with torch.autocast(device.type, enabled=False):
        ref64 = copy.deepcopy(ref).double()
        x64 = xc.detach().double().requires_grad_(pass_ == "training")
        ref_out = _step(ref64, p, pass_)(x64).detach()
        grad = torch.enable_grad() if pass_ == "training" else torch.no_grad()
        with grad, problem_precision("rnn", p):
            # Two warm-up calls: the ops' step loops run directly at a shape's first call and
            # record their CUDA graph at its second (cuda/common/step_graph.h), which took 20 ms
            # of a 4 ms fp32 training step at 512/64/100 and dropped fused from the race on its
            # first figure.
            return measure_candidates(
                choices, call=lambda c: _step(modules[c.label], p, pass_),
                workspace=lambda c: 0, args=(x,), check_args=(xc,), ref=ref_out,
                device=device, floor=error_floor(p.torch_dtype, p.tf32), warmups=2)


def choose_lstm(p: LstmProblem, pass_: str, device: Optional[torch.device] = None) -> str:
    """"native", "fused" or "persistent" for `pass_` of `p`; a new problem is measured on
    `device`."""
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    return decide.choose(p, pass_, device, measure)
