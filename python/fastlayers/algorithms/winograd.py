"""Winograd convolution: ``winograd:T``, T the op's tile: F(T x T, 3x3) in the forward and input
gradient (T = 2, 4, 6), F(3x3, T x T) in the weight gradient (T = 2, 4); ``winograd:2,fused``: the
fused kernels (every pass on CUDA: float16 and bfloat16, or float32, with data widths that are
multiples of 4 in the forward and input gradient; TF32 or float32 products as PyTorch allows). 3x3
filters at stride 1, any padding."""
from __future__ import annotations

from typing import NamedTuple

import torch

from .. import _C
from ..winograd import FORWARD_TILES, FUSED_TILE, KERNEL, WEIGHT_GRAD_TILES
from .registry import CONV2D_PASSES, Family


HALF_DTYPES = ("float16", "bfloat16")


class WinogradParams(NamedTuple):
    tile: int
    fused: bool = False


# The largest alpha offered for float16 (see Winograd.candidates).
FP16_MAX_ALPHA = 6


def _tiles(pass_: str):
    return WEIGHT_GRAD_TILES if pass_ == "weight_grad" else FORWARD_TILES


class Winograd(Family):
    names = ("winograd",)
    kinds = ("conv2d",)
    # Every output of a tile mixes the whole alpha x alpha input window (docs/tuner.md).
    transform_based = True

    def parse(self, name, params, label):
        head, sep, variant = params.partition(",")
        try:
            tile = int(head)
        except ValueError:
            tile = 0
        if tile not in FORWARD_TILES + WEIGHT_GRAD_TILES or head != str(tile):
            raise ValueError(f"bad tile {head!r} in algorithm label {label!r} (winograd:T, T one "
                             f"of {sorted(set(FORWARD_TILES + WEIGHT_GRAD_TILES))})")
        if sep and (variant != "fused" or tile != FUSED_TILE):
            raise ValueError(f"bad variant {variant!r} in algorithm label {label!r} (the one "
                             f"variant is winograd:{FUSED_TILE},fused)")
        return WinogradParams(tile, bool(sep))

    def format(self, name, params):
        return "winograd:%d%s" % (params.tile, ",fused" if params.fused else "")

    def make(self, tile: int, fused: bool = False):
        return self.choice("winograd", WinogradParams(int(tile), bool(fused)))

    def candidates(self, p, pass_):
        if self._layer_fits(p) is not None:
            return []
        if p.device_type == "cuda" and p.dtype in HALF_DTYPES:
            # Only the fused kernel is offered in float16 and bfloat16 on CUDA (a pinned label
            # runs as asked): alone, the non-fused pipeline won some gradient passes of 7x7 and
            # 14x14 layers by 8-25%, and in the AMP steps of the networks holding them it lost
            # (docs/winograd.md).
            fused = self.make(FUSED_TILE, fused=True)
            return [fused] if self.fits(fused, p, pass_) is None else []
        tiles = _tiles(pass_)
        if p.dtype == "float32" and p.device_type == "cuda":
            # The fused kernel's products are TF32 on tensor cores under TF32, else split TF32
            # (hi + lo: three TF32 products in the forward and input gradient, four in the weight
            # gradient); it is measured beside the pipelines (the accuracy guard sees its
            # rounding like theirs).
            fused = self.make(FUSED_TILE, fused=True)
            extra = [fused] if self.fits(fused, p, pass_) is None else []
            return [self.make(t) for t in tiles] + extra
        if p.dtype == "float16":
            # The transformed tiles are stored in float16: B^T d B grows a value by up to the
            # square of B^T's largest row sum (4, 25.6, 225 for alpha 4, 6, 8), so F(6x6,3x3)
            # overflows from inputs of about 290. The accuracy guard measures normal data and
            # cannot see that; the candidates stop at alpha 6 (inputs up to about 2500).
            tiles = tuple(t for t in tiles if t + KERNEL - 1 <= FP16_MAX_ALPHA)
        return [self.make(t) for t in tiles]

    @staticmethod
    def _layer_fits(p):
        if (p.kh, p.kw) != (KERNEL, KERNEL):
            return "Winograd convolution here takes 3x3 filters, not %dx%d" % (p.kh, p.kw)
        if p.oh < 1 or p.ow < 1:
            return "the 3x3 kernel is larger than the padded input"
        return None

    def fits(self, choice, p, pass_):
        why = self._layer_fits(p)
        if why is not None:
            return why
        tile = choice.params.tile
        if tile not in _tiles(pass_):
            return "the %s pass takes Winograd tiles %s, not %d" % (
                pass_, "/".join(map(str, _tiles(pass_))), tile)
        if choice.params.fused:
            f32 = p.dtype == "float32"
            if p.device_type != "cuda" or not (p.dtype in HALF_DTYPES or f32):
                return ("the fused Winograd kernel takes float16, bfloat16 and float32 on CUDA, "
                        "not %s on %s" % (p.dtype, p.device_type))
            if f32 and pass_ != "weight_grad":
                name, width = ("input", p.W) if pass_ == "forward" else ("grad_output", p.ow)
                if width % 4:
                    return ("the fused Winograd kernel takes float32 data whose width is a "
                            "multiple of 4, not %s's %d" % (name, width))
        return None

    def conv2d_call(self, choice, pass_, padding, tf32):
        tile, fused = choice.params
        fl = torch.ops.fastlayers
        if pass_ == "forward":
            op = fl.winograd_conv2d
            return lambda x, w, b, gy: op(x, w, b, padding, tile, tf32, fused)
        if pass_ == "input_grad":
            op = fl.winograd_conv2d_input_grad
            return lambda x, w, b, gy: op(gy, w, padding, tile, tf32, fused)
        op = fl.winograd_conv2d_weight_grad
        return lambda x, w, b, gy: op(gy, x, padding, tile, tf32, fused)

    def conv2d_filter_transform(self, choice):
        tile, fused = choice.params
        if fused:  # the fused kernel transforms its filters into a layout of its own
            return None
        op = torch.ops.fastlayers.winograd_filter_transform
        return lambda w: op(w, tile)

    def cpp_pass(self, choice, pass_):
        t = choice.params.tile
        return (2, "fused" if choice.params.fused else "", (0, 0), (t, t))

    def workspace_bytes(self, choice, p, pass_):
        """The transformed operands and products of one chunk of samples (the ops bound a chunk;
        chunk_samples in cuda/winograd/layout.h)."""
        store = torch.tensor([], dtype=p.torch_dtype).element_size()
        if choice.params.fused and pass_ == "weight_grad":  # the partial sums
            return int(_C.winograd_fused_weight_grad_workspace_bytes(p.S, p.C, p.K, p.H, p.W,
                                                                     p.ph, p.pw))
        if choice.params.fused:  # the transformed filters alone (fused_workspace_bytes)
            return int(_C.winograd_fused_workspace_bytes(CONV2D_PASSES.index(pass_), p.C, p.K,
                                                         store))
        acc = 8 if p.dtype == "float64" else 4
        return int(_C.winograd_conv2d_workspace_bytes(
            CONV2D_PASSES.index(pass_), p.S, p.C, p.K, p.H, p.W, p.ph, p.pw, choice.params.tile,
            store, acc))

    def describe(self, choice):
        t = choice.params.tile
        if choice.params.fused:
            return ("Winograd F(2x2,3x3), fused kernels (transforms and products in one; weight "
                    "gradient F(3x3,2x2))")
        what = []
        if t in FORWARD_TILES:
            what.append("F(%dx%d,3x3)" % (t, t))
        if t in WEIGHT_GRAD_TILES:
            what.append("weight gradient F(3x3,%dx%d)" % (t, t))
        return "Winograd, tile %d (%s)" % (t, "; ".join(what))

    def deterministic(self, choice):
        # Transforms without atomics and cuBLAS GEMMs; weight gradients sum their chunks in order.
        return True


FAMILY = Winograd()
