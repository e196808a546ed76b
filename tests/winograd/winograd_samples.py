"""Sample problems, the pure-torch Winograd reference and the per-pass helpers of the Winograd op
tests (tests/winograd/test_*.py).

The reference is independent of the extension: windows by unfold, the matrices from
fastlayers.winograd_matrices (exact fractions, rounded to the compute dtype), the transforms in
the arithmetic of the device's kernels (`kernels`: 'cpu', a matrix product per side as the ATen
kernels; 'cuda', float32 FMAs in the CUDA kernels' order, zero entries skipped, the bias first in
the inverse; float64 in plain float64): for half types a transformed value often lies exactly on a
rounding midpoint and on a handful of outputs one such tie decides the error, so the order of the
float32 operations must be the kernel's for the rule to compare like with like. The per-point
products likewise (_products: FMAs in the reduction's order for 'cuda'); for half types the transformed operands rounded to the input dtype
before the products (the algorithm stores them so, to feed half-precision GEMMs), the products
accumulated in float32 and the result rounded once; `tf32` rounds the products'
operands to TF32. It is PyTorch's computation of the same algorithm: the `same_algorithm`
reference of the tolerance rule, as fft_reference is for the FFT ops. test_winograd_matrices.py
proves it exact in float64 for every pass and tile, and that it calls no fastlayers op."""
import torch
import torch.nn.functional as F

from fastlayers import winograd_matrices
from conv_samples import round_tf32, torch_passes

PASS_NAMES = ("forward", "input_grad", "weight_grad")
FORWARD_TILES = (2, 4, 6)      # m of F(m x m, 3x3): forward and input gradient
WEIGHT_GRAD_TILES = (2, 4)     # r of F(3x3, r x r): weight gradient

# S, C, K, H, W, ph, pw: batch 1..8, channels 1..64, odd, even, rectangular and tiny images
# (smaller than a tile: 1x1, 1 x 9, 2x5, 3x3 without padding), padding 0..4 (above 2 the input
# gradient's windows start inside grad_output).
SHAPES = [
    (1, 1, 1, 3, 3, 0, 0),
    (2, 3, 4, 8, 8, 1, 1),
    (1, 2, 3, 1, 1, 1, 1),
    (2, 3, 2, 1, 1, 4, 4),
    (2, 2, 3, 1, 9, 1, 0),
    (3, 5, 2, 2, 5, 1, 2),
    (4, 6, 7, 9, 7, 0, 2),
    (2, 16, 8, 11, 13, 2, 1),
    (1, 4, 4, 6, 10, 3, 4),
    (8, 3, 5, 7, 7, 1, 1),
    (3, 64, 1, 5, 6, 0, 1),
    (2, 64, 32, 12, 12, 1, 1),
    (1, 32, 64, 14, 9, 2, 2),
    # widths a multiple of 4 with a partial last row of tiles: the inverse's rows by vector stores
    # and, in the same result, the bottom tiles' values one by one (forward 10 x 8, grad_x 10 x 8)
    (2, 3, 4, 10, 8, 1, 1),
    # channels past the input gradient's filter tiles of 32 k x 8 c on TF32, the last ones partial
    (2, 17, 33, 6, 7, 1, 1),
]
# Small problems for gradcheck, gradgradcheck and opcheck (padding 3 > 2: input-gradient windows
# start inside grad_output).
SMALL_SHAPES = [(2, 2, 3, 5, 4, 1, 1), (1, 3, 2, 3, 6, 0, 2), (2, 1, 1, 4, 4, 3, 1)]


def shape_id(shape) -> str:
    return "S%d-C%d-K%d-%dx%d-p%dx%d" % tuple(shape)


def tiles_of(pass_: int):
    return WEIGHT_GRAD_TILES if pass_ == 2 else FORWARD_TILES


# (pass, tile) of every op and tile the ops offer.
PASS_TILES = [(p, t) for p in range(3) for t in tiles_of(p)]


def pass_tile_id(spec) -> str:
    return "%s-t%d" % (PASS_NAMES[spec[0]], spec[1])


def tensors(shape, dtype=torch.float32, device="cpu"):
    """x, w, b, gy of a shape, drawn in float32 on the CPU (every device and dtype sees the same
    values, rounded to the dtype)."""
    S, C, K, H, W, ph, pw = shape
    g = torch.Generator().manual_seed(hash(tuple(shape)) % (2 ** 31))
    t = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return t(S, C, H, W), t(K, C, 3, 3), t(K), t(S, K, H + 2 * ph - 2, W + 2 * pw - 2)


def run_pass(pass_: int, x, w, b, gy, padding, tile: int, tf32: bool = False):
    """One op: 0 winograd_conv2d(x, w, b), 1 its input gradient of gy, 2 its weight gradient."""
    fl, pad = torch.ops.fastlayers, list(padding)
    if pass_ == 0:
        return fl.winograd_conv2d(x, w, b, pad, tile, tf32)
    if pass_ == 1:
        return fl.winograd_conv2d_input_grad(gy, w, pad, tile, tf32)
    return fl.winograd_conv2d_weight_grad(gy, x, pad, tile, tf32)


def winograd_passes(x, w, b, gy, padding, tiles, tf32=False):
    """The three ops at tiles (forward, input grad, weight grad)."""
    return tuple(run_pass(p, x, w, b, gy, padding, tiles[p], tf32) for p in range(3))


def float64_passes(x, w, b, gy, padding):
    """PyTorch's three passes in float64 (the values every precision is measured against)."""
    return torch_passes(*(t.double() for t in (x, w, b, gy)), padding)


# --- the reference -------------------------------------------------------------------------------


def _windows(t, win, step, oy, ox, th, tw):
    """t [n, c, h, w] -> [n, c, th, tw, win, win]: the window of tile (ty, tx) at
    (ty step - oy, tx step - ox), zeros outside."""
    hh, ww = (th - 1) * step + win, (tw - 1) * step + win
    top, left = oy, ox
    bottom, right = hh - t.shape[2] - oy, ww - t.shape[3] - ox
    # F.pad with negative amounts crops: padding above 2 in the input gradient
    p = F.pad(t, (left, right, top, bottom))
    return p.unfold(2, win, step).unfold(3, win, step)


def _fma_stage(M, d, left: bool, acc0=None):
    """One side of a two-sided transform over the last two dims of d, as the kernels compute it:
    left: out[i][j] = sum_k M[i][k] d[k][j]; right: out[i][j] = sum_k d[i][k] M[j][k]; each sum
    accumulated from acc0 (default 0) in k order, one float32 FMA per nonzero entry (a float64
    product and sum rounded once to float32: exact but for ~2^-29 double-rounding cases)."""
    rows, n = len(M), len(M[0])
    cols = d.shape[-1] if left else rows
    out = []
    for i in range(rows):
        row = []
        for j in range(cols):
            acc = torch.zeros_like(d[..., 0, 0]) if acc0 is None else acc0.clone()
            for k in range(n):
                c = M[i][k] if left else M[j][k]
                if c == 0:
                    continue
                term = d[..., k, j] if left else d[..., i, k]
                c32 = torch.tensor(float(c), dtype=torch.float32).item()
                acc = (term.double() * c32 + acc.double()).float()
            row.append(acc)
        out.append(torch.stack(row, -1))
    return torch.stack(out, -2)


def _transform(M, d, kernels: str, acc0=None):
    """M d M^T over the last two dims of d (M: rows of exact fractions): matrix products in float64
    or for the CPU kernels, otherwise in the CUDA kernels' float32 arithmetic (_fma_stage); acc0
    is added last by the former and starts the second stage's sums (the bias) in the latter."""
    if d.dtype == torch.float64 or kernels == "cpu":
        Mt = torch.tensor([[float(v) for v in row] for row in M], dtype=d.dtype, device=d.device)
        out = Mt @ d @ Mt.T
        return out if acc0 is None else out + acc0[..., None, None]
    return _fma_stage(M, _fma_stage(M, d, True), False, acc0)


def _products(a, b, weight_grad: bool, kernels: str, reverse: bool = False):
    """The per-point products: M [S, out, th, tw, a, a] = sum over in of a [out, in, a, a] times
    b [S, in, th, tw, a, a] (forward, input gradient), or M [K, C, a, a] = sum over (S, th, tw)
    of a [S, K, th, tw, a, a] times b [S, C, th, tw, a, a] (weight gradient). For 'cuda' in
    float32 each sum runs as one FMA per term in the reduction's order (`reverse`: last term
    first), as cuBLAS's small GEMMs do (a few outputs' errors hang on it); otherwise an einsum."""
    if b.dtype == torch.float64 or kernels == "cpu":
        eq = "sotuab,sctuab->ocab" if weight_grad else "ocab,sctuab->sotuab"
        return torch.einsum(eq, a, b)
    if weight_grad:
        S, _, th, tw = a.shape[:4]
        terms = [(a[s, :, t, u, None], b[s, None, :, t, u])
                 for s in range(S) for t in range(th) for u in range(tw)]
        acc = torch.zeros(a.shape[1], b.shape[1], *a.shape[-2:], dtype=a.dtype,
                          device=a.device)
    else:
        terms = [(a[None, :, c, None, None], b[:, None, c]) for c in range(a.shape[1])]
        acc = torch.zeros(b.shape[0], a.shape[0], *b.shape[2:], dtype=a.dtype,
                          device=a.device)
    for x, y in (terms[::-1] if reverse else terms):
        acc = (x.double() * y.double() + acc.double()).float()
    return acc


def _round(t, tf32, dtype):
    """A transformed operand as the products read it: TF32, or stored in a half dtype."""
    if tf32:
        return round_tf32(t)
    if dtype in (torch.float16, torch.bfloat16):
        return t.to(dtype).to(t.dtype)
    return t


def winograd_reference(pass_: int, x, w, b, gy, padding, tile: int, tf32: bool = False,
                       kernels: str = "cpu", reverse: bool = False):
    """One pass of Winograd convolution in torch only: 0 forward (with b), 1 input gradient,
    2 weight gradient; F(tile, 3) for 0 and 1, F(3, tile) for 2; `kernels`: the device whose
    kernels' float32 arithmetic the transforms follow ('cpu' or 'cuda'; for 'cuda', `reverse`
    sums the products' reduction from its last term). It runs on the operands' device: the 'cuda'
    arithmetic is elementwise float64 steps, each rounded as on any device."""
    dtype = x.dtype
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    x, w, gy = x.to(ct), w.to(ct), gy.to(ct)
    ph, pw = padding
    H, W = x.shape[-2:]
    oh, ow = gy.shape[-2:]
    if pass_ == 2:
        m, r = 3, tile
    else:
        m, r = tile, 3
    AT, G, BT = winograd_matrices.matrices(m, r)
    alpha = m + r - 1
    if pass_ == 0:
        data, oy, ox, res_h, res_w = x, ph, pw, oh, ow
        filt = w
    elif pass_ == 1:
        data, oy, ox, res_h, res_w = gy, 2 - ph, 2 - pw, H, W
        filt = w.flip(2, 3).transpose(0, 1)  # [C, K, 3, 3]
    if pass_ < 2:
        th, tw = -(-res_h // m), -(-res_w // m)
        d = _windows(data, alpha, m, oy, ox, th, tw)            # [S, ch, th, tw, a, a]
        V = _transform(BT, d, kernels)
        U = _transform(G, filt, kernels)                         # [out, in, a, a]
        M = _products(_round(U, tf32, dtype), _round(V, tf32, dtype), False, kernels, reverse)
        bias = None
        if pass_ == 0 and b is not None:
            bias = b.to(ct)[None, :, None, None].expand(M.shape[:4]).contiguous()
        Y = _transform(AT, M, kernels, bias)                     # [S, out, th, tw, m, m]
        Y = Y.permute(0, 1, 2, 4, 3, 5)                          # [S, out, th, m, tw, m]
        Y = Y.reshape(Y.shape[0], Y.shape[1], th * m, tw * m)[..., :res_h, :res_w]
        return Y.to(dtype)
    th, tw = -(-oh // r), -(-ow // r)
    d = _windows(x, alpha, r, ph, pw, th, tw)                    # [S, C, th, tw, a, a]
    g = _windows(gy, r, r, 0, 0, th, tw)                         # [S, K, th, tw, r, r]
    X = _transform(BT, d, kernels)
    Gy = _transform(G, g, kernels)
    M = _products(_round(Gy, tf32, dtype), _round(X, tf32, dtype), True, kernels, reverse)
    return _transform(AT, M, kernels).to(dtype)


# --- recording the ops autograd runs -------------------------------------------------------------

# The position of `tile` in each op's arguments.
TILE_ARG = {"winograd_conv2d": 4, "winograd_conv2d_input_grad": 3,
            "winograd_conv2d_weight_grad": 3}


def recorded_tiles(calls):
    """{op name: [tiles]} of the Winograd ops in conv_samples.RecordOps().calls (which leaves out
    trailing default arguments: the default tile is 2)."""
    out = {}
    for name, args in calls:
        if name in TILE_ARG:
            i = TILE_ARG[name]
            out.setdefault(name, []).append(args[i] if i < len(args) else 2)
    return out
