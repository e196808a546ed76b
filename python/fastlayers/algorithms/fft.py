"""FFT convolution, both transform backends: ``fft:NHxNW`` (cuFFT) and ``fbfft:NHxNW``, either
with ``,tile=THxTW`` (overlap-save tiles of the pass's large result)."""
from __future__ import annotations

from typing import NamedTuple, Tuple

import torch

from .. import _C
from ..fft_conv import FBFFT_MAX_BASIS, good_fft_size, next_pow2
from .registry import CONV2D_PASSES, Choice, Family

# Label name -> transform backend, and back.
BACKEND = {"fft": "cufft", "fbfft": "fbfft"}
NAME = {backend: name for name, backend in BACKEND.items()}

# Tiled candidates: power-of-two bases from 8, each side cut to what its tile needs (a side with a
# 1-wide kernel and result stays 1: a 1-D convolution), whose tiles are at least as long as the
# kernel (shorter ones spend more work on overlap than on output), at most MAX_TILE_BASES of them,
# up to the first that holds the whole result.
MIN_TILE_BASIS = 8
MAX_TILE_BASES = 4


class FftParams(NamedTuple):
    backend: str              # "cufft" or "fbfft"
    basis: Tuple[int, int]    # (nh, nw)
    tile: Tuple[int, int]     # (th, tw); (0, 0) untiled


def _size(text: str, label: str) -> Tuple[int, int]:
    h, sep, w = text.partition("x")
    try:
        if sep and int(h) > 0 and int(w) > 0:
            return (int(h), int(w))
    except ValueError:
        pass
    raise ValueError(f"bad size {text!r} in algorithm label {label!r}")


def _fbfft_basis_ok(nh: int, nw: int) -> bool:
    ok = lambda n: 2 <= n <= FBFFT_MAX_BASIS and n & (n - 1) == 0  # noqa: E731
    return ok(nh) and ok(nw)


def _pow2(n: int) -> int:
    """The smallest power of two >= n, 1 included (a side of a 1-D convolution)."""
    return 1 if n <= 1 else next_pow2(n)


def tile_shapes(p, pass_: str):
    """(basis, tile) of the tiled candidates of `pass_` of `p`: see MIN_TILE_BASIS."""
    rh, rw = (p.H, p.W) if pass_ == "input_grad" else (p.oh, p.ow)
    kmax = max(p.kh, p.kw)
    n = max(MIN_TILE_BASIS, next_pow2(2 * kmax - 1))
    out = []
    while len(out) < MAX_TILE_BASES:
        tile = (min(n - p.kh + 1, rh), min(n - p.kw + 1, rw))
        if tile == (rh, rw):
            break  # one tile is the whole result: the untiled candidates do that
        basis = (_pow2(tile[0] + p.kh - 1), _pow2(tile[1] + p.kw - 1))
        out.append((basis, tile))
        n *= 2
    return out


class Fft(Family):
    names = tuple(BACKEND)
    kinds = ("conv2d",)

    def parse(self, name, params, label):
        basis, sep, tile = params.partition(",tile=")
        return FftParams(BACKEND[name], _size(basis, label), _size(tile, label) if sep else (0, 0))

    def format(self, name, params):
        label = "%s:%dx%d" % (name, params.basis[0], params.basis[1])
        if params.tile[0] > 0:
            label += ",tile=%dx%d" % params.tile
        return label

    def make(self, basis, backend="cufft", tile=(0, 0)) -> Choice:
        """The choice of an FFT candidate: `basis` (nh, nw), `backend`, `tile` ((0, 0) untiled)."""
        params = FftParams(backend, (int(basis[0]), int(basis[1])), (int(tile[0]), int(tile[1])))
        return self.choice(NAME[backend], params)

    def candidates(self, p, pass_):
        """cuFFT at the smallest fast basis and the next power of two holding the padded input;
        fbfft at that power of two when both sides are 2..FBFFT_MAX_BASIS (not float64 on CUDA);
        tiled (tile_shapes), cuFFT and, where its sides allow, fbfft, for any kernel: tiles of
        the pass's large result (y; grad_input for the input grad)."""
        out = []
        hp, wp = p.H + 2 * p.ph, p.W + 2 * p.pw
        backends = ["cufft"]
        if not (p.device_type == "cuda" and p.dtype == "float64"):
            backends.append("fbfft")
        pow2 = (_pow2(hp), _pow2(wp))
        for basis in sorted({(good_fft_size(hp), good_fft_size(wp)), pow2}):
            out.append(self.make(basis))
        if "fbfft" in backends and _fbfft_basis_ok(*pow2):
            out.append(self.make(pow2, "fbfft"))
        for basis, tile in tile_shapes(p, pass_):
            for backend in backends:
                if backend == "cufft" or _fbfft_basis_ok(*basis):
                    out.append(self.make(basis, backend, tile))
        return out

    def conv2d_call(self, choice, pass_, padding, tf32):
        backend, basis, tile = choice.params
        fl = torch.ops.fastlayers
        if pass_ == "forward":
            op = fl.fft_conv2d
            return lambda x, w, b, gy: op(x, w, b, padding, basis, tf32, backend, tile)
        if pass_ == "input_grad":
            op = fl.fft_conv2d_input_grad
            return lambda x, w, b, gy: op(gy, w, padding, basis, tf32, backend, tile)
        op = fl.fft_conv2d_weight_grad
        return lambda x, w, b, gy: op(gy, x, padding, basis, tf32, backend, tile)

    def cpp_pass(self, choice, pass_):
        backend, basis, tile = choice.params
        return (1, backend, basis, tile)

    def workspace_bytes(self, choice, p, pass_):
        """The backend's buffers, or for a tiled candidate those of one chunk of tiles with the
        tile copies (chunks stay under the extension's chunk bound), plus a tenth for cuFFT's work
        areas, which the extension does not count."""
        backend, basis, tile = choice.params
        real_bytes = 8 if p.dtype == "float64" else 4
        ws = _C.fft_conv2d_workspace_bytes(CONV2D_PASSES.index(pass_), p.S, p.C, p.K, p.H, p.W,
                                           p.kh, p.kw, p.ph, p.pw, basis[0], basis[1], real_bytes,
                                           backend, tile[0], tile[1])
        return int(ws * 1.1)

    def describe(self, choice):
        backend, basis, tile = choice.params
        return "FFT, backend %s, basis %dx%d, %s" % (
            backend, basis[0], basis[1], "tiles %dx%d" % tile if tile[0] > 0 else "untiled")

    def deterministic(self, choice):
        # cuFFT or fbfft, cuBLAS and kernels without atomics; tiled weight gradients sum their
        # chunks in a fixed order.
        return True

    # Every output value mixes every input value of its sample (docs/tuner.md, "Non-finite and
    # wide-range inputs").
    transform_based = True

    def fits(self, choice, p, pass_):
        """What the ops' argument check requires of (choice, problem, pass): a basis holding the
        padded input, or tile + kernel - 1 with a tile no larger than the pass's result (y; the
        input gradient for input_grad), within the ops' plane bound; for fbfft, power-of-two sides
        up to FBFFT_MAX_BASIS and not float64 on CUDA."""
        from ..fft_conv import MAX_PLANE
        backend, (nh, nw), (th, tw) = choice.params
        hp, wp = p.H + 2 * p.ph, p.W + 2 * p.pw
        if hp * wp > MAX_PLANE:
            return "the padded input %dx%d exceeds the ops' %d elements per plane" % (
                hp, wp, MAX_PLANE)
        if th > 0:
            ig = pass_ == "input_grad"
            rh, rw = (p.H, p.W) if ig else (p.oh, p.ow)
            if th > rh or tw > rw:
                return "tile %dx%d is larger than the %s (%dx%d)" % (
                    th, tw, "input gradient" if ig else "output", rh, rw)
            need, what = (th + p.kh - 1, tw + p.kw - 1), "tile + kernel - 1"
        else:
            need, what = (hp, wp), "the padded input"
        if nh < need[0] or nw < need[1]:
            return "basis %dx%d is smaller than %s (%dx%d)" % (nh, nw, what, need[0], need[1])
        if nh * nw > MAX_PLANE:
            return "basis %dx%d exceeds the ops' %d elements per plane" % (nh, nw, MAX_PLANE)
        if backend == "fbfft":
            if not _fbfft_basis_ok(nh, nw):
                return "fbfft takes power-of-two basis sides from 2 to %d" % FBFFT_MAX_BASIS
            if p.device_type == "cuda" and p.dtype == "float64":
                return "fbfft computes in float32 on CUDA and does not take float64"
        return None


FAMILY = Fft()
