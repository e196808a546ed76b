"""``fused``: fastlayers' LSTM ops (the input GEMM of every step hoisted, one GEMM and one fused
point-wise kernel per step), one op call per layer and direction; ``persistent``: the same with the
recurrence as one cooperative kernel (lstm_persistent) on CUDA, for the batches and hidden sizes
it fits. Their labels have no parameters."""
from __future__ import annotations

import torch

from .registry import Choice, Family

# The dtypes the ops serve per device.
DTYPES = {"cuda": ("float32", "float64", "float16", "bfloat16"), "cpu": ("float32", "float64")}


class FusedLstm(Family):
    names = ("fused",)
    kinds = ("lstm",)

    def parse(self, name, params, label):
        if label != "fused":
            raise ValueError(f"unknown algorithm label {label!r} ('fused' takes no parameters)")
        return ()

    def format(self, name, params):
        return "fused"

    def fits(self, choice, p, pass_):
        if p.dtype not in DTYPES.get(p.device_type, ()):
            return "the LSTM ops do not take %s on %s" % (p.dtype, p.device_type)
        if p.device_type == "cuda":
            from .. import _C
            if not getattr(_C, "with_lstm_cuda", False):
                return "fastlayers was built without the LSTM's CUDA kernels"
        return None

    def candidates(self, p, pass_):
        if self.fits(FUSED, p, pass_) is not None:
            return []
        return [FUSED]

    def describe(self, choice):
        return "fastlayers LSTM ops (input GEMM hoisted; one GEMM and one fused kernel per step)"

    def deterministic(self, choice):
        return True  # no atomics; cuBLAS GEMMs


class PersistentLstm(Family):
    names = ("persistent",)
    kinds = ("lstm",)

    def parse(self, name, params, label):
        if label != "persistent":
            raise ValueError(f"unknown algorithm label {label!r} ('persistent' takes no "
                             "parameters)")
        return ()

    def format(self, name, params):
        return "persistent"

    def fits(self, choice, p, pass_):
        if p.device_type != "cuda":
            return "the persistent kernel is CUDA's"
        if p.dtype not in ("float32", "float16", "bfloat16"):
            return "the persistent kernel does not take %s" % p.dtype
        if p.packed:
            return "the persistent kernel takes padded input only"
        if p.R != p.H:
            return "the persistent kernel has no projection"
        from .. import _C
        if not getattr(_C, "with_lstm_cuda", False):
            return "fastlayers was built without the LSTM's CUDA kernels"
        if not torch.cuda.is_available():
            return "no CUDA device to run the persistent kernel on"
        from ..lstm import persistent_fits
        if not persistent_fits(p.B, p.H, getattr(torch, p.dtype), torch.device("cuda")):
            return "batch %d and hidden size %d do not fit the persistent kernel here" % (
                p.B, p.H)
        return None

    def candidates(self, p, pass_):
        return [PERSISTENT] if self.fits(PERSISTENT, p, pass_) is None else []

    def describe(self, choice):
        return ("fastlayers LSTM ops, the recurrence as one persistent kernel (w_hh on chip; a "
                "grid barrier per step, or in float16 / bfloat16 thread-block clusters exchanging "
                "h_t; the backward's too up to batch 16, and on clusters)")

    def deterministic(self, choice):
        return True  # no atomics; the input GEMM on cuBLAS


FUSED = Choice("fused", (), "fused")
PERSISTENT = Choice("persistent", (), "persistent")
FAMILY = FusedLstm()
PERSISTENT_FAMILY = PersistentLstm()
