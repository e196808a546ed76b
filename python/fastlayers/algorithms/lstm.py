"""``fused``: fastlayers' LSTM ops (the input GEMM of every step hoisted, one GEMM and one fused
point-wise kernel per step), one op call per layer and direction. Its label has no parameters."""
from __future__ import annotations

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


FUSED = Choice("fused", (), "fused")
FAMILY = FusedLstm()
