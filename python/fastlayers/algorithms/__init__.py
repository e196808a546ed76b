"""The one algorithm-choice registry: a label parses once into a typed ``Choice``, and one
function gives the op call for (choice, pass). The module, the tuner and the benchmarks all go
through it.

    c = parse("fbfft:16x16,tile=14x14")   # or "winograd:4", "native"
    # c.family == "fbfft", c.params == FftParams(backend="fbfft", basis=(16, 16), tile=(14, 14))
    y = conv2d_call(c, "forward", padding=(1, 1), tf32=False)(x, w, b, None)
    check_fits(c, problem, "forward")  # ValueError when c cannot serve that shape and pass

A family (native.py, fft.py, winograd.py, lstm.py: fused and persistent) answers everything about its labels: parsing,
candidates, whether a choice fits a problem, calls, workspace, description, determinism and
whether it is transform-based. Adding one is a new module here and one ``register`` call below.
"""
from . import fft, lstm, native, winograd
from .fft import FftParams
from .native import NATIVE
from .registry import (CONV2D_PASSES, LSTM_PASSES, PASSES, Choice, Family, candidates,
                       check_fits, conv2d_call, conv2d_cpp_plan, conv2d_filter_transform, conv2d_grads, describe, deterministic, families,
                       fits, parse, register, unregister, workspace_bytes)

__all__ = [
    "Choice", "Family", "FftParams", "NATIVE", "CONV2D_PASSES", "LSTM_PASSES", "PASSES", "parse",
    "register", "unregister", "families", "candidates", "fits", "check_fits", "conv2d_call", "conv2d_grads",
    "conv2d_cpp_plan", "conv2d_filter_transform", "workspace_bytes", "describe", "deterministic",
]

register(native.FAMILY)  # first: the baseline leads every candidate list
register(fft.FAMILY)
register(winograd.FAMILY)
register(lstm.FAMILY)
register(lstm.PERSISTENT_FAMILY)
