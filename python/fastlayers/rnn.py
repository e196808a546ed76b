"""fastlayers.LSTM: a drop-in torch.nn.LSTM (same constructor, parameters, initialisation,
state_dict, inputs and outputs; an nn.RNNBase, not an nn.LSTM instance, so that torch.compile
traces it) whose layers run as fastlayers.lstm ops, one op call per layer
and direction (one lstm_stack call for a unidirectional stack), the step loop in C++/CUDA; on
CUDA a bidirectional layer's two directions run on two streams.

What runs is an algorithm choice per input signature: "fused" (the lstm ops), "persistent" (the
lstm_persistent op: the recurrence as one kernel, on CUDA where the batch and hidden size fit it;
its backward's too up to batch 16)
or "native" (nn.LSTM's own forward), from the tuner (pass "training" when gradients are needed,
else "forward"; measured on CUDA, or on CPU with FASTLAYERS_TUNE_CPU=1), unless
``force_algorithm`` pins one. ``fastlayers.tuner.report()`` shows every decision with its reason.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import forward_ad as _forward_ad
from torch.nn.utils.rnn import PackedSequence

from . import _C
from . import tuner as _tuner
from .lstm import rnn_tf32_allowed

__all__ = ["LSTM"]

ALGORITHMS = ("native", "fused", "persistent")
_CUDA_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_CPU_DTYPES = (torch.float32, torch.float64)


class LSTM(nn.RNNBase):
    """torch.nn.LSTM on fastlayers' lstm ops.

    It is an nn.RNNBase in LSTM mode, with nn.LSTM's own methods, but not an nn.LSTM instance:
    torch.compile refuses to trace any nn.LSTM instance (subclasses included), and this module
    is meant to compile with no graph break.

    Every nn.LSTM configuration runs on them: layers, bidirectional, batch_first, dropout between
    layers, proj_size, bias or not, unbatched input, PackedSequence (sorted or not; variable
    lengths are handled inside the op), (h0, c0) given or not. Other devices and dtypes (CUDA:
    fp32, fp64, fp16, bf16; CPU: fp32, fp64) run nn.LSTM's own forward. Gradients are not
    differentiable again (no double backward), as with nn.LSTM on cuDNN.
    """

    _fl_forced: Optional[str] = None

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    # nn.LSTM's own: the cell state's shape, the checks of (h0, c0), their permutation for
    # unsorted PackedSequences, and its forward (the native path).
    get_expected_cell_size = nn.LSTM.get_expected_cell_size
    check_forward_args = nn.LSTM.check_forward_args
    permute_hidden = nn.LSTM.permute_hidden
    _native_forward = nn.LSTM.forward

    def force_algorithm(self, algorithm: Optional[str]) -> "LSTM":
        """Pins "fused" (fastlayers' ops), "persistent" (the persistent kernel; an error where it
        cannot serve the input) or "native" (nn.LSTM's forward); None: the tuner's choice again.
        Dtypes the ops do not serve run nn.LSTM's forward whatever is pinned, listed in
        fastlayers.tuner.report(). Returns the module."""
        if algorithm is not None and algorithm not in ALGORITHMS:
            raise ValueError(f"LSTM algorithm must be one of {ALGORITHMS} or None, got "
                             f"{algorithm!r}")
        self._fl_forced = algorithm
        return self

    def _fl_weights(self, layer: int, direction: int):
        sfx = "_l%d%s" % (layer, "_reverse" if direction else "")
        get = lambda name: getattr(self, name + sfx)  # noqa: E731
        return (get("weight_ih"), get("weight_hh"),
                get("bias_ih") if self.bias else None, get("bias_hh") if self.bias else None,
                get("weight_hr") if self.proj_size > 0 else None)

    def _fl_choice(self, data: torch.Tensor, T: int, B: int, packed: bool, training: bool,
                   context: Optional[str] = None) -> str:
        """"fused" or "native" for this input: the pinned algorithm, else the tuner's (a pass
        "training" when gradients are needed, else "forward"); a layer the ops cannot serve, or a
        call in a context only nn.LSTM's forward serves (`context`: _C.pytorch_only_context's
        reason), runs native, recorded with the reason."""
        dev = data.device.type
        if context is not None:
            reason = context
        elif data.dtype not in (_CUDA_DTYPES if dev == "cuda" else _CPU_DTYPES if dev == "cpu"
                                else ()):
            reason = "dtype %s on %s" % (data.dtype, dev)
        elif dev == "cuda" and not _cuda_kernels():
            reason = "fastlayers was built without the LSTM's CUDA kernels"
        elif self._fl_forced == "persistent":
            why = _persistent_unfit((self.hidden_size, self.proj_size), int(B), _op_dtype(data),
                                    data.device, packed)
            if why:  # pinned: an error, not another algorithm
                raise ValueError("fastlayers.LSTM: force_algorithm('persistent') cannot serve "
                                 "this input: " + why)
            return "persistent"
        elif self._fl_forced is not None:
            return self._fl_forced
        else:
            # chosen for the dtype the ops run in (under autocast, its dtype)
            dtype = _op_dtype(data)
            tf32 = dtype == torch.float32 and dev == "cuda" and rnn_tf32_allowed()
            config = (self.input_size, self.hidden_size, self.proj_size, self.num_layers,
                      self.bidirectional, self.bias)
            return _choose(config, int(T), int(B), dtype, data.device, packed, tf32,
                           torch.are_deterministic_algorithms_enabled(),
                           "training" if training else "forward")
        if not torch.compiler.is_compiling():
            _tuner.note_fallback("lstm(%s)" % self.extra_repr(), reason)
        return "native"

    def __prepare_scriptable__(self):
        # torch.jit.script cannot compile this forward (it failed on an assertion about
        # overloads); an nn.LSTM handed over instead would replace this module in the caller's
        # model too (script swaps submodules in place): refuse, and say what works.
        raise RuntimeError(
            "fastlayers.LSTM(%s) cannot be scripted with torch.jit.script: use torch.compile or "
            "torch.export, or script a model that has torch.nn.LSTM" % self.extra_repr())

    def __getstate__(self):
        # The routes are this process's tuner's answers (its generation, its devices): torch.save
        # and copy.deepcopy leave them out, and the copy asks again.
        state = dict(super().__getstate__())
        state.pop("_fl_routes", None)
        return state

    def _fl_all_weights(self) -> list:
        """The weights as the module holds them now (functional_call puts its own in the
        parameters' dict, a parametrization behind the attribute), not the list nn.RNNBase keeps
        of them; the dict first (Module.__getattr__ costs microseconds)."""
        params = self._parameters
        return [params[n] if n in params else getattr(self, n) for n in self._flat_weights_names]

    def _fl_route(self, data: torch.Tensor, hx, T: int, B: int, packed: bool,
                  training: bool) -> str:
        """_fl_choice, remembered per input signature: a later call with the same signature, pin,
        TF32 switch, deterministic mode, tuner generation (mode switches, clear) and context
        (_C.pytorch_only_context) reads it back instead of asking the tuner again (host time
        every call would pay). Under
        torch.compile the choice is made when the graph is traced, as before."""
        if torch.compiler.is_compiling():
            return self._fl_choice(data, T, B, packed, training)
        operands = [data] if hx is None else [data, *hx]
        if _forward_ad._current_level >= 0:  # a dual weight (functional_call) has a tangent too
            operands += self._fl_all_weights()
        context = _C.pytorch_only_context(operands)
        op_dtype = _op_dtype(data)
        key = (T, B, data.dtype, op_dtype, data.device, packed, training, self._fl_forced,
               data.is_cuda and op_dtype == torch.float32 and rnn_tf32_allowed(),
               torch.are_deterministic_algorithms_enabled(), _tuner._state.generation, context)
        routes = self.__dict__.get("_fl_routes")
        if routes is None:  # (a converted nn.LSTM gets its table on its first call)
            routes = self.__dict__["_fl_routes"] = {}
        choice = routes.get(key)
        if choice is None:
            choice = routes[key] = self._fl_choice(data, T, B, packed, training, context)
        return choice

    def _fl_stacks(self, packed: bool, data: torch.Tensor) -> bool:
        """Whether the layers run as one lstm_stack call: two or more unidirectional layers
        without a projection over padded input, no dropout between them (in training), at most
        8 layers on CUDA."""
        return (self.num_layers >= 2 and not self.bidirectional and self.proj_size == 0 and
                not packed and not (self.dropout > 0 and self.training) and
                (not data.is_cuda or self.num_layers <= 8))

    def forward(self, input, hx=None):
        packed = isinstance(input, PackedSequence)
        data = input.data if packed else input
        if (not isinstance(data, torch.Tensor) or (not packed and input.dim() not in (2, 3)) or
                (hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2))):
            return self._native_forward(input, hx)  # nn.LSTM's own error
        if packed:
            data, batch_sizes, sorted_indices, unsorted_indices = input
            batched = True
            T, B = len(batch_sizes), int(batch_sizes[0])
        else:
            batch_sizes = sorted_indices = unsorted_indices = None
            batched = input.dim() == 3
            # nn.LSTM's view of the input (a batch of one when unbatched), then time-major
            nn_input = input if batched else input.unsqueeze(0 if self.batch_first else 1)
            data = nn_input.transpose(0, 1) if self.batch_first else nn_input
            T, B = data.shape[0], data.shape[1]
        training = torch.is_grad_enabled() and (
            data.requires_grad or any(p.requires_grad for p in self.parameters()) or (
                hx is not None and (hx[0].requires_grad or hx[1].requires_grad)))
        # no steps: nn.LSTM's own error
        choice = "native" if T == 0 else self._fl_route(data, hx, T, B, packed, training)
        if choice == "native":
            return self._native_forward(input, hx)
        dirs = 2 if self.bidirectional else 1
        R = self.proj_size if self.proj_size > 0 else self.hidden_size
        if hx is None:
            n = self.num_layers * dirs
            if R == self.hidden_size:  # one allocation and one fill for both
                hx = torch.zeros(2, n, B, R, dtype=data.dtype, device=data.device).unbind(0)
            else:
                hx = (torch.zeros(n, B, R, dtype=data.dtype, device=data.device),
                      torch.zeros(n, B, self.hidden_size, dtype=data.dtype, device=data.device))
        elif packed:
            self.check_forward_args(data, hx, batch_sizes)
            hx = self.permute_hidden(hx, sorted_indices)
        else:
            want = 3 if batched else 2
            if hx[0].dim() != want or hx[1].dim() != want:
                return self._native_forward(input, hx)  # nn.LSTM's own error
            if not batched:
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        if not packed:
            self.check_forward_args(nn_input, hx, None)
        h0, c0 = hx
        tf32 = data.dtype == torch.float32 and data.is_cuda and rnn_tf32_allowed()
        persistent = choice == "persistent"
        lstm = (torch.ops.fastlayers.lstm_persistent if persistent else
                torch.ops.fastlayers.lstm)
        # Eager calls take the C++ autograd node (_C.lstm_call: no Python in the step's forward
        # or backward); a traced graph takes the ops and their registered autograd.
        eager = not torch.compiler.is_compiling()
        x = data if packed else data.contiguous()
        if choice == "fused" and self._fl_stacks(packed, data):
            # one wavefront over every layer (lstm_stack): no dropout between them here
            if eager:
                y, h, c = _C.lstm_stack_call(x, h0, c0, self._fl_all_weights(), self.bias, tf32)
            else:
                y, h, c, _, _, _ = torch.ops.fastlayers.lstm_stack(
                    x, h0, c0, self._fl_all_weights(), self.bias, tf32)
            if not batched:
                return y.squeeze(1), (h.squeeze(1), c.squeeze(1))
            return (y.transpose(0, 1) if self.batch_first else y), (h, c)
        h_n, c_n = [], []
        side = _side_stream(x) if dirs == 2 else None
        for layer in range(self.num_layers):
            outs = []
            if side is not None:
                _fork(side, x, h0, c0)
            for d in range(dirs):
                k = layer * dirs + d
                with _on(side if d == 1 else None):
                    if eager:  # h, c [1, B, .]
                        y, h, c = _C.lstm_call(persistent, x, h0[k], c0[k],
                                               *self._fl_weights(layer, d), batch_sizes, d == 1,
                                               tf32)
                    else:  # h, c [B, .]
                        y, h, c, _, _ = lstm(x, h0[k], c0[k], *self._fl_weights(layer, d),
                                             batch_sizes, d == 1, tf32)
                outs.append(y)
                h_n.append(h)
                c_n.append(c)
            if side is not None:
                _join(side, outs[1], h_n[-1], c_n[-1])
            x = outs[0] if dirs == 1 else torch.cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        if not eager:
            hidden = (torch.stack(h_n), torch.stack(c_n))
        elif len(h_n) == 1:  # one layer and direction: its states as they are (no copy)
            hidden = (h_n[0], c_n[0])
        else:
            hidden = (torch.cat(h_n), torch.cat(c_n))
        if packed:
            return (PackedSequence(x, batch_sizes, sorted_indices, unsorted_indices),
                    self.permute_hidden(hidden, unsorted_indices))
        if not batched:
            return x.squeeze(1), (hidden[0].squeeze(1), hidden[1].squeeze(1))
        return (x.transpose(0, 1) if self.batch_first else x), hidden


_SIDE = {}


def _side_stream(x: torch.Tensor) -> Optional[torch.cuda.Stream]:
    """A second stream for a bidirectional layer's reverse direction on CUDA (the two
    recurrences are independent and each leaves most of the GPU idle); None where it does not
    apply (the CPU, a traced graph)."""
    if not x.is_cuda or torch.compiler.is_compiling():
        return None
    s = _SIDE.get(x.device)
    if s is None:
        s = _SIDE[x.device] = torch.cuda.Stream(x.device)
    return s


def _fork(side: torch.cuda.Stream, *used: torch.Tensor) -> None:
    """The side stream waits for the current one (a layer's input is the layer below's output,
    made there), and what it reads is marked as used on it (the backward reads it there too)."""
    side.wait_stream(torch.cuda.current_stream(side.device))
    for t in used:
        t.record_stream(side)


def _on(stream: Optional[torch.cuda.Stream]):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def _join(side: torch.cuda.Stream, *made: torch.Tensor) -> None:
    """The current stream waits for the side stream's direction; its results, allocated there,
    are marked as used on the current stream (so the allocator does not hand their memory to
    the side stream again too early). Autograd runs that direction's backward on the side
    stream too, with the same synchronisation."""
    current = torch.cuda.current_stream(side.device)
    current.wait_stream(side)
    for t in made:
        t.record_stream(current)


def _op_dtype(data: torch.Tensor) -> torch.dtype:
    """The dtype the tuner chooses for on `data`: under CUDA autocast, the autocast dtype for
    floating input other than float64 (the ops' autocast kernels cast so), else data's own. On
    the CPU the ops run in autocast's dtype too, but the CPU candidates are float32 and float64:
    asked for bfloat16 there, the tuner would find only nn.LSTM's path, so a CPU layer keeps the
    choice made for its input's dtype."""
    if data.is_cuda and data.dtype in (torch.float32, torch.float16, torch.bfloat16) and \
            torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return data.dtype


# Runs as Python when a graph is traced; its result enters the graph as a constant.
@torch.compiler.assume_constant_result
def _choose(config, T, B, dtype, device, packed, tf32, deterministic, pass_) -> str:
    """The tuner's label for an LSTM stack of `config` (input_size, hidden_size, proj_size,
    num_layers, bidirectional, bias) on this input signature."""
    from .tuner.lstm import LstmProblem, choose_lstm
    p = LstmProblem.of(config, T, B, dtype, device, packed, tf32, deterministic)
    return choose_lstm(p, pass_, device)


# Runs as Python when a graph is traced; its result enters the graph as a constant.
@torch.compiler.assume_constant_result
def _persistent_unfit(sizes, B, dtype, device, packed) -> str:
    """Why lstm_persistent cannot serve a stack of (hidden_size, proj_size) on this input ("" if
    it can): the persistent family's own rule."""
    from .algorithms import lstm as family
    from .tuner.lstm import LstmProblem
    H, P = sizes
    p = LstmProblem.of((1, H, P, 1, False, True), 1, B, dtype, device, packed, False, False)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        return family.PERSISTENT_FAMILY.fits(family.PERSISTENT, p, "forward") or ""


def _cuda_kernels() -> bool:
    """Whether this build has the LSTM's CUDA kernels."""
    from . import _C
    return bool(getattr(_C, "with_lstm_cuda", False))
