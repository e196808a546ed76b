"""The fused Winograd kernels (`fused=True` on CUDA, float16 and bfloat16, and float32 with TF32 or
split TF32 products: F(2x2,3x3) for the forward and input gradient, F(3x3,2x2) for the weight
gradient) against PyTorch in float64 within the tolerance rule of conv_samples, as the non-fused
ops are (test_winograd_values.py), on the shape matrix and on shapes that cross the kernels' items
(64 result channels x 4 x 8 tiles, chunks of 16 reduction channels, 8 in float32; the weight
gradient's blocks of 32 x 32 channels, chunks of 16 tiles, runs of chunks) at every edge; their
autograd, opcheck, and the errors for what they do not take."""
import contextlib
import itertools

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conv_samples import (DTYPES, assert_mutation_rejected, assert_within_bound, cudnn_tf32,
                          rel_err, torch_passes)
from winograd_samples import (PASS_NAMES, SHAPES, SMALL_SHAPES, float64_passes, run_pass,
                              shape_id, tensors, winograd_reference)

fl = torch.ops.fastlayers
HALF = [torch.float16, torch.bfloat16]
# The fused kernel's precisions: float32 data's products are TF32 with tf32=True ("tf32"), else
# split TF32 ("float32": hi + lo, three TF32 products in the forward and input gradient and four
# in the weight gradient, within float32's error).
FUSED = ["float16", "bfloat16", "tf32", "float32"]
# Items (64 result channels x a rectangle of 4 x 8 tiles, chunks of 16 reduction channels): K or C
# of 64 + 1 and 16 + 1 (a partial block and a partial chunk), partial rectangles both ways, more
# than one each way; padding 3 (input-gradient windows start inside grad_output, at an odd column
# of an even width for 7x12 p3x3); odd widths (patches through registers) and even ones with
# windows at odd and at even patch columns. On an H100 (132 SMs) the 8x96x130 30x34 shape gives
# both passes 192-288 items, so blocks take 2-3 items, up to 18 chunks: a U stage is used three
# times and the stage an item's exchange used is refilled by the bulk copy. Data widths that are
# multiples of 8 take the patch by TMA, whose rows start woff = 0..3 words before the windows
# (then kXoff values): 12x40 p1x1 (both passes, woff 3 kXoff 1, 3 rectangles a row, a first box
# starting left of the image and boxes reaching past its right edge), 9x16 p3x4 (the forward, 2
# 0), 9x16 p1x2 (the forward, 3 0), 9x16 p0x3 (the forward, 2 1), 9x18 p2x4 (the input gradient, 1
# 0), 9x18 p1x0 (the input gradient, 3 0), 6x16 p2x5 (both, 1 1), 7x14 p1x2 (the input gradient, 0
# 0), 8x24 p0x0 (the forward, 0 0); 30x32 with 96 channels (the forward: 192 items, blocks take
# 1-2, up to 12 chunks, each stage of the 3-ahead stream reused and the exchange's refilled) and
# 12x130x130 30x32 (both passes: 288 items, blocks take 2-3, 9 chunks an item with a partial last
# one). float32 takes the patch by TMA alone, for data widths that are multiples of 4 (f32_takes),
# whose rows start woff = -ox mod 4 values before the windows: the shapes give the forward woff 0
# (8x8 p0x0, 9x16 p3x4, 8x24 p0x0), 1 (7x12 p3x3, 9x16 p0x3), 2 (7x12 p3x2, 9x16 p1x2) and 3
# (padding 1), the input gradient 0 (16x18 p2x2, 7x14 p1x2), 1 (7x12 p3x3, 9x16 p0x3), 2 (9x18
# p2x4, p1x0) and 3 (padding 1); reduction channels 3, 4, 12, 17, 20, 130 leave partial chunks
# of 8, and 8x96x130 30x32 and 12x130x130 30x32 give blocks 2-3 items. Where the windows would
# start at an odd column (ox odd) and the result's width is not a multiple of 16, the 16-bit and
# TF32 kernels start the tiles one column left of the result's first (run_fused's col_shift), so
# that the windows start at even ones: the woff and kXoff above are then those of ox + 1 (padding
# 1: 16 bits woff 3 kXoff 0, TF32 woff 2), and no tile stores a pair or a column left of the
# result. Odd starts stay with 30x32 p1x1 (both passes), 7x12 p3x3 (the forward), 9x16 p0x3 and
# 6x16 p2x5 (the input gradient), and with split TF32 on every shape.
BLOCK_SHAPES = [
    (1, 17, 65, 10, 14, 1, 1),
    (3, 33, 130, 11, 9, 1, 1),
    (2, 130, 17, 8, 8, 0, 0),
    (5, 48, 64, 14, 14, 1, 1),
    (2, 16, 16, 7, 12, 3, 2),
    (1, 64, 64, 28, 28, 1, 1),
    (2, 24, 70, 16, 18, 2, 2),
    (4, 40, 130, 30, 34, 1, 1),
    (8, 96, 130, 30, 34, 1, 1),
    (2, 16, 16, 7, 12, 3, 3),
    (3, 40, 72, 12, 40, 1, 1),
    (2, 24, 20, 9, 16, 3, 4),
    (2, 24, 20, 9, 18, 2, 4),
    (3, 20, 12, 7, 14, 1, 2),
    (2, 17, 33, 8, 24, 0, 0),
    (8, 96, 130, 30, 32, 1, 1),
    (2, 24, 20, 9, 16, 1, 2),
    (2, 24, 20, 9, 16, 0, 3),
    (2, 24, 20, 9, 18, 1, 0),
    (1, 16, 24, 6, 16, 2, 5),
    (12, 130, 130, 30, 32, 1, 1),
]
# The weight gradient's chunks and runs (layout.h, wgrad_dims): 8x16x16 64x64 p1x1 has 512 chunks of
# one tile row (16 tiles; float32 copies them by TMA) on one block of channels, so 128 runs of 4
# chunks summed in order; 3x40x36 31x31 p0x2 has an odd grad_output (29 x 33: a last tile row and
# column of one value) whose 15 x 17 tiles go in 60 chunks of 4 x 4 (the last ones partly past the
# grid), 15 runs of 4 on 2 x 2 blocks of channels, 36 and 40 of 64 each. The other shapes give
# either chunk, by TMA or by value-by-value copies (widths not multiples of 4, or data not 16-byte
# aligned: test_fused_float32_data_anywhere_gives_the_same_results). 1x2x3 2x4 p1x1 and 1x1x1 4x8
# p1x1 are runs of 1 and 2 chunks by TMA (the pipeline's first and last chunks at once).
WGRAD_SHAPES = [(8, 16, 16, 64, 64, 1, 1), (3, 40, 36, 31, 31, 0, 2), (1, 2, 3, 2, 4, 1, 1),
                (1, 1, 1, 4, 8, 1, 1)]
# The passes whose every comparison also proves the rule rejects the output scaled by
# (1 + MUTATION): the non-fused kernel's float16 set for F(2x2,3x3) (test_winograd_values.py).
MUTATED = {torch.float16: (0, 1)}


def placed(t, k, tail=8, fill=None):
    """t's values, contiguous, k elements past a 16-byte aligned start, in a buffer with `tail`
    more elements after them (filled with `fill`, or left as they come)."""
    n = k + t.numel() + tail
    buf = (torch.empty(n, dtype=t.dtype, device=t.device) if fill is None else
           torch.full((n,), fill, dtype=t.dtype, device=t.device))
    v = buf[k:k + t.numel()].view(t.shape)
    v.copy_(t)
    assert v.data_ptr() % 16 == k * t.element_size()
    return v


def fused_pass(pass_, x, w, b, gy, padding, tf32=False):
    pad = list(padding)
    if pass_ == 0:
        return fl.winograd_conv2d(x, w, b, pad, 2, tf32, True)
    if pass_ == 1:
        return fl.winograd_conv2d_input_grad(gy, w, pad, 2, tf32, True)
    return fl.winograd_conv2d_weight_grad(gy, x, pad, 2, tf32, True)


def f32_takes(shape, pass_):
    """float32's fused kernel takes data whose width is a multiple of 4: `input`'s in the forward,
    `grad_output`'s in the input gradient; the weight gradient's takes any."""
    W, pw = shape[4], shape[6]
    return pass_ == 2 or (W if pass_ == 0 else W + 2 * pw - 2) % 4 == 0


def pass_cases(shapes):
    """(shape, pass, precision) of every pass of `shapes` the kernels take, in each precision."""
    return [(shape, pass_, prec) for prec in FUSED for pass_ in (0, 1, 2) for shape in shapes
            if DTYPES[prec] != torch.float32 or f32_takes(shape, pass_)]


def case_ids(cases):
    return ["%s-%s-%s" % (shape_id(s), PASS_NAMES[p], q) for s, p, q in cases]


VALUE_CASES = pass_cases(SHAPES + BLOCK_SHAPES) + [
    (shape, 2, prec) for prec in FUSED for shape in WGRAD_SHAPES]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,pass_,prec", VALUE_CASES, ids=case_ids(VALUE_CASES))
def test_fused_matches_pytorch_within_its_error(shape, pass_, prec):
    dtype, tf32 = DTYPES[prec], prec == "tf32"
    x, w, b, gy = tensors(shape, dtype, "cuda")
    padding = shape[5:]
    out = fused_pass(pass_, x, w, b, gy, padding, tf32)
    assert out.device == x.device and out.dtype == dtype
    ref = float64_passes(x, w, b, gy, padding)[pass_].cpu()
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, padding)[pass_].cpu()
    same = winograd_reference(pass_, x, w, b, gy, padding, 2, tf32, kernels="cuda").cpu()
    what = "%s %s fused" % (shape_id(shape), PASS_NAMES[pass_])
    bound = assert_within_bound(out.cpu(), ref, native, same, prec, what=what)
    if pass_ in MUTATED.get(dtype, ()):
        assert_mutation_rejected(out.cpu(), ref, bound, prec, what)


# Integer data in -2..2 and filters in -2..2: every step of F(2x2,3x3) is exact in float16,
# bfloat16, TF32 and float32 (B^T d B: integers up to 8; G g G^T: quarters up to 18, 7 bits;
# their products summed over the reduction channels, and A^T M A, within float32's 24 bits), and
# the one rounding left, the result's to its dtype, is the direct convolution's rounded to it. So
# the fused kernel must give that bit for bit: a wrong index anywhere, even in one edge tile,
# shows. Likewise F(3x3,2x2) for the weight gradient (G g G^T of a grad_output tile: quarters up to
# 4; the sums over every tile: quarters within 2^16). The shapes cross the items' edges, partial
# chunks of 8 and 16, woff 0..3 in float32 and odd and even columns in the 16-bit layouts, tiles
# shifted a column left by each copy path (9x15 p1x1: odd widths, value by value); 8x96x130 30x32
# gives blocks 2-3 items.
EXACT_SHAPES = [s for s in BLOCK_SHAPES if max(s[1], s[2]) <= 56] + [
    (3, 56, 50, 17, 36, 1, 1), (2, 9, 40, 13, 20, 2, 0), (5, 40, 9, 10, 12, 0, 2),
    (8, 96, 130, 30, 32, 1, 1), (2, 20, 24, 9, 15, 1, 1)]
EXACT_CASES = pass_cases(EXACT_SHAPES) + [
    (shape, 2, prec) for prec in FUSED for shape in WGRAD_SHAPES]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,pass_,prec", EXACT_CASES, ids=case_ids(EXACT_CASES))
def test_fused_is_exact_on_small_integers(shape, pass_, prec):
    dtype, tf32 = DTYPES[prec], prec == "tf32"
    S, C, K, H, W, ph, pw = shape
    g = torch.Generator().manual_seed(sum(shape) + pass_)
    ints = lambda *size: torch.randint(-2, 3, size, generator=g).double()  # noqa: E731
    x, w, b = ints(S, C, H, W), ints(K, C, 3, 3), ints(K)
    gy = ints(S, K, H + 2 * ph - 2, W + 2 * pw - 2)
    if pass_ == 0:
        ref = torch.nn.functional.conv2d(x, w, b, padding=(ph, pw))
    elif pass_ == 1:
        ref = torch.nn.grad.conv2d_input(x.shape, w, gy, padding=(ph, pw))
    else:
        ref = torch.nn.grad.conv2d_weight(x, w.shape, gy, padding=(ph, pw))
    dev = lambda t: t.to("cuda", dtype)  # noqa: E731
    out = fused_pass(pass_, dev(x), dev(w), dev(b), dev(gy), shape[5:], tf32)
    bad = out.double().cpu() != ref.to(dtype).double()
    assert not bad.any(), "%d of %d results differ, first at %s" % (
        int(bad.sum()), bad.numel(), tuple(bad.nonzero()[0].tolist()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_fused_is_the_same_algorithm_as_the_pipeline(dtype):
    """The same transforms and stored operands as the non-fused F(2x2,3x3): the two differ only in
    the order of the float32 sums of products, far below either's error against float64. On
    shapes whose tiles are the pipeline's: padding (1, 2) starts every window at an even column
    (odd widths, values through registers); 13x16 p1x1 at odd ones, its result 16 wide, so not
    shifted (the TMA box, joined halves). Where the kernel shifts its tiles a column, its results
    are other roundings."""
    for shape in ((4, 96, 80, 13, 15, 1, 2), (4, 96, 80, 13, 16, 1, 1)):
        x, w, b, gy = tensors(shape, dtype, "cuda")
        ref = float64_passes(x, w, b, gy, shape[5:])
        for pass_ in (0, 1):
            a = fused_pass(pass_, x, w, b, gy, shape[5:]).cpu()
            n = run_pass(pass_, x, w, b, gy, shape[5:], 2).cpu()
            gap, err = rel_err(a, n.double()), rel_err(n, ref[pass_].cpu())
            assert gap < 0.5 * err, (shape_id(shape), PASS_NAMES[pass_], gap, err)


@pytest.mark.gpu
def test_fused_float32_products_follow_tf32():
    """float32's fused kernel multiplies in TF32 with tf32=True and in split TF32 without: on data
    that TF32 cannot hold, the TF32 results are orders of magnitude less accurate, so neither
    setting runs the other's kernel (the value tests' tolerances would not see TF32 run as
    float32)."""
    shape = (2, 24, 40, 12, 16, 1, 1)
    x, w, b, gy = tensors(shape, torch.float32, "cuda")
    pad = list(shape[5:])
    ref = float64_passes(x, w, b, gy, pad)
    for pass_ in (0, 1, 2):
        e32 = rel_err(fused_pass(pass_, x, w, b, gy, pad, False).cpu(), ref[pass_].cpu())
        etf = rel_err(fused_pass(pass_, x, w, b, gy, pad, True).cpu(), ref[pass_].cpu())
        assert etf > 100 * e32, (PASS_NAMES[pass_], etf, e32)


# (precision, shape): float32's input gradient runs fused where grad_output's width is a multiple
# of 4 (12 at padding 1), and falls back to the non-fused pipeline where not (10 at padding 0).
AUTOGRAD_CASES = [("float16", (2, 24, 40, 9, 10, 1, 1)), ("bfloat16", (2, 24, 40, 9, 10, 1, 1)),
                  ("tf32", (2, 24, 40, 9, 12, 1, 1)), ("tf32", (2, 24, 40, 9, 12, 0, 0)),
                  ("float32", (2, 24, 40, 9, 12, 1, 1)), ("float32", (2, 24, 40, 9, 12, 0, 0))]


@pytest.mark.gpu
@pytest.mark.parametrize("prec,shape", AUTOGRAD_CASES,
                         ids=["%s-%s" % (q, shape_id(s)) for q, s in AUTOGRAD_CASES])
def test_fused_autograd_uses_the_fused_passes(prec, shape):
    """Backward of a fused forward: the input gradient fused where the kernel takes it, the
    weight gradient fused; the gradients match PyTorch's within the rule."""
    from conv_samples import RecordOps
    dtype, tf32 = DTYPES[prec], prec == "tf32"
    x, w, b, gy = tensors(shape, dtype, "cuda")
    pad = list(shape[5:])
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    with RecordOps() as rec:
        y = fl.winograd_conv2d(*leaves, pad, 2, tf32, True)
        y.backward(gy)
    calls = [(name, args) for name, args in rec.calls if name.startswith("winograd")]
    names = [name for name, _ in calls]
    assert names == ["winograd_conv2d", "winograd_conv2d_input_grad",
                     "winograd_conv2d_weight_grad"], names
    # the input gradient ran fused, or not where float32's kernel does not take grad_output
    # (RecordOps leaves out trailing default arguments: `fused` is the sixth)
    args = calls[1][1]
    assert (len(args) > 5 and args[5]) is (dtype != torch.float32 or f32_takes(shape, 1)), args[2:]
    assert calls[2][1][5] is True, calls[2][1][2:]
    ref = float64_passes(x, w, b, gy, pad)
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, pad)
    for i, leaf in ((1, leaves[0]), (2, leaves[1])):
        same = winograd_reference(i, x, w, b, gy, pad, 2, tf32, kernels="cuda").cpu()
        assert_within_bound(leaf.grad.cpu(), ref[i].cpu(), native[i].cpu(), same,
                            precision=prec, what=PASS_NAMES[i])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_fused_patch_copies_agree(dtype):
    """The patch's three copy paths (a TMA box for a 16-byte aligned operand whose width is a
    multiple of 8, 4-byte copies for a 4-byte aligned one, values through registers else) read
    the same windows into the same arithmetic: bitwise equal results. 12x40 p1x1 with the tiles
    shifted a column (even window starts), 12x32 p1x1 not (its results 32 wide: odd starts)."""
    for shape in ((3, 40, 72, 12, 40, 1, 1), (3, 40, 72, 12, 32, 1, 1)):
        x, w, b, gy = tensors(shape, dtype, "cuda")
        pad = list(shape[5:])
        for pass_, data in ((0, x), (1, gy)):
            outs = []
            for k in (0, 2, 1):
                d = placed(data, k)
                outs.append(fused_pass(pass_, d if pass_ == 0 else x, w, b,
                                       d if pass_ == 1 else gy, pad))
            for k, out in zip((2, 1), outs[1:]):
                assert torch.equal(out, outs[0]), "%s pass %d: data at offset %d differs" % (
                    shape_id(shape), pass_, k)


@pytest.mark.gpu
@pytest.mark.parametrize("tf32", (True, False), ids=("tf32", "float32"))
def test_fused_float32_data_anywhere_gives_the_same_results(tf32):
    """float32 data at a start that is not 16-byte aligned (the TMA box's term) is copied to one
    that is (forward, input gradient), or read by value-by-value copies instead of TMA boxes (the
    weight gradient, either operand): the same results, bitwise, at offsets of 1, 2 and 3
    values."""
    shape = (3, 40, 72, 12, 40, 1, 1)
    x, w, b, gy = tensors(shape, torch.float32, "cuda")
    pad = list(shape[5:])
    for pass_, which in ((0, "x"), (1, "gy"), (2, "x"), (2, "gy")):
        want = fused_pass(pass_, x, w, b, gy, pad, tf32)
        for k in (1, 2, 3):
            d = placed(x if which == "x" else gy, k)
            out = fused_pass(pass_, d if which == "x" else x, w, b, d if which == "gy" else gy,
                             pad, tf32)
            assert torch.equal(out, want), "pass %d: %s at offset %d differs" % (pass_, which, k)


@pytest.mark.gpu
def test_fused_reads_no_channel_past_its_operand():
    """A partial last chunk (R = 20 reduction channels, chunks of 16) reads no channel at or past
    R: the operand sits at the start of a buffer whose rest is NaN, so a channel of the next
    sample would be finite but one past the last sample NaN (times U's zero rows: NaN), on each
    of the three copy paths (data at offsets 0, 4 and 2 bytes); and in float32 (chunks of 8: the
    last reads channels 16..23 of 20), by TMA, with either product."""
    shape = (2, 20, 20, 9, 16, 1, 1)
    for dtype, tf32, offsets in ((torch.float16, False, (0, 2, 1)), (torch.float32, True, (0,)),
                                 (torch.float32, False, (0,))):
        x, w, b, gy = tensors(shape, dtype, "cuda")
        pad = list(shape[5:])
        for pass_, data in ((0, x), (1, gy)):
            plane = data.shape[2] * data.shape[3]
            want = fused_pass(pass_, x, w, b, gy, pad, tf32)
            for k in offsets:
                d = placed(data, k, tail=16 * plane, fill=float("nan"))
                out = fused_pass(pass_, d if pass_ == 0 else x, w, b, d if pass_ == 1 else gy,
                                 pad, tf32)
                assert torch.equal(out, want), "%s pass %d, data at offset %d" % (dtype, pass_, k)
        # the weight gradient (blocks of 32 x 32 channels: 12 of each past the last), both
        # operands at the start of NaN buffers
        want = fused_pass(2, x, w, b, gy, pad, tf32)
        xn = placed(x, 0, tail=16 * x.shape[2] * x.shape[3], fill=float("nan"))
        gyn = placed(gy, 0, tail=16 * gy.shape[2] * gy.shape[3], fill=float("nan"))
        assert torch.equal(fused_pass(2, xn, w, b, gyn, pad, tf32), want), "%s pass 2" % dtype


@pytest.mark.gpu
@pytest.mark.parametrize("prec", ("bfloat16", "tf32", "float32"))
def test_fused_weight_grad_nonfinite_stays_in_its_channels(prec):
    """One inf in the input's channel c (grad_output's channel k) makes non-finite some of the
    weight gradient's [:, c] ([k, :]) and nothing else: every other value is the clean run's,
    bitwise (the partial sums of one (k, c) pair never mix with another's)."""
    tf32 = prec == "tf32"
    shape = (2, 40, 36, 9, 14, 1, 1)
    x, w, b, gy = tensors(shape, DTYPES[prec], "cuda")
    clean = fused_pass(2, x, w, b, gy, [1, 1], tf32)
    for which, ch in ((0, 33), (1, 5)):
        data = (x if which == 0 else gy).clone()
        data[1, ch, 4, 7] = float("inf")
        out = fused_pass(2, data if which == 0 else x, w, b, data if which == 1 else gy, [1, 1],
                         tf32)
        mask = torch.zeros(out.shape, dtype=torch.bool, device="cuda")
        if which == 0:
            mask[:, ch] = True
        else:
            mask[ch] = True
        assert torch.equal(out[~mask], clean[~mask]), which
        assert out[mask].isfinite().logical_not().any(), which


@pytest.mark.gpu
@pytest.mark.parametrize("prec", ("float16", "tf32", "float32"))
@pytest.mark.parametrize("bad", (float("inf"), float("nan")), ids=("inf", "nan"))
def test_fused_nonfinite_stays_in_its_tiles(bad, prec):
    """One inf or NaN in the data operand makes non-finite at most the 2x2 result tiles whose 4x4
    windows hold it (Winograd's spread, docs/tuner.md), and some of them; every other result is
    the clean run's, bitwise. Both passes, on each copy path (data widths 16, 10, and 9 or 7;
    float32: 16 and 20, by TMA), with the tiles where the kernel puts them: one column left of the
    result where it shifts them (odd window starts, the result's width not a multiple of 16, not
    split TF32: 10x10 p1x1 in 16 bits, 9x20 p1x1 in TF32)."""
    tf32, f32 = prec == "tf32", DTYPES[prec] == torch.float32
    # float32: woff 3 in both passes (padding 1; 9x20 under TF32: shifted, woff 2); 2 (the forward,
    # padding 2) and 2 (the input gradient of 12 wide grad_output, padding 0)
    shapes = ((2, 20, 24, 9, 16, 1, 1), (2, 20, 24, 9, 16, 2, 2),
              (2, 20, 24, 9, 14, 0, 0), (2, 20, 24, 9, 20, 1, 1)) if f32 else (
        (2, 20, 24, 9, 16, 1, 1), (1, 17, 70, 10, 10, 1, 1), (2, 16, 16, 7, 9, 2, 0))
    for shape in shapes:
        x, w, b, gy = tensors(shape, DTYPES[prec], "cuda")
        ph, pw = shape[5:]
        for pass_ in (0, 1):
            if f32 and not f32_takes(shape, pass_):
                continue
            data = (x if pass_ == 0 else gy).clone()
            oy, ox = (ph, pw) if pass_ == 0 else (2 - ph, 2 - pw)
            s, c, py, px = data.shape[0] - 1, data.shape[1] // 2, data.shape[2] // 2, 1
            clean = fused_pass(pass_, x, w, b, gy, [ph, pw], tf32)
            data[s, c, py, px] = bad
            out = fused_pass(pass_, data if pass_ == 0 else x, w, b,
                             data if pass_ == 1 else gy, [ph, pw], tf32)
            # result rows 2t, 2t + 1 of the tiles t whose window rows 2t - oy .. + 3 hold py;
            # columns likewise from each tile's first column, -1 + 2t where the tiles are shifted
            sh = int(ox % 2 == 1 and not (f32 and not tf32) and out.shape[3] % 16 != 0)
            rows = torch.arange(out.shape[2], device="cuda") // 2 * 2
            cols = (torch.arange(out.shape[3], device="cuda") + sh) // 2 * 2 - sh
            near = (((rows - oy <= py) & (py <= rows - oy + 3))[:, None] &
                    ((cols - ox <= px) & (px <= cols - ox + 3))[None, :])
            mask = torch.zeros(out.shape, dtype=torch.bool, device="cuda")
            mask[s, :] = near
            what = "%s pass %d" % (shape_id(shape), pass_)
            assert torch.equal(out[~mask], clean[~mask]), what
            assert out[mask].isfinite().logical_not().any(), what


@pytest.mark.gpu
@pytest.mark.parametrize("prec", ("float16", "tf32", "float32"))
@pytest.mark.parametrize("op", ("forward", "input_grad", "weight_grad"))
def test_fused_opcheck(op, prec):
    # (4x4 at padding 3, 1: the forward's width 4, grad_output's 4)
    x, w, b, gy = tensors(SMALL_SHAPES[2], DTYPES[prec], "cuda")
    pad, tf32 = list(SMALL_SHAPES[2][5:]), prec == "tf32"
    for t in (x, w, b, gy):
        t.requires_grad_()
    if op == "forward":
        torch.library.opcheck(fl.winograd_conv2d.default, (x, w, b, pad, 2, tf32, True))
    elif op == "input_grad":
        torch.library.opcheck(fl.winograd_conv2d_input_grad.default, (gy, w, pad, 2, tf32, True))
    else:
        torch.library.opcheck(fl.winograd_conv2d_weight_grad.default, (gy, x, pad, 2, tf32, True))


@pytest.mark.parametrize("device", ["cpu", "fake-cpu", "meta",
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
def test_fused_refuses_what_it_does_not_take(device):
    # fake-cpu: torch.compile's fake tensors on the CPU; meta stands for CUDA's fake tensors
    # (the fake kernels take it as CUDA): each refuses as the op on that device does
    with FakeTensorMode() if device == "fake-cpu" else contextlib.nullcontext():
        refuses(device.replace("fake-", ""))


def refuses(device):
    shape = (2, 3, 4, 8, 8, 1, 1)
    x, w, b, gy = tensors(shape, torch.float16, device)
    if device == "cpu":
        with pytest.raises(RuntimeError, match=r"winograd_conv2d: `fused` runs on CUDA tensors"):
            fl.winograd_conv2d(x, w, b, [1, 1], 2, False, True)
        with pytest.raises(RuntimeError,
                           match=r"winograd_conv2d_input_grad: `fused` runs on CUDA tensors"):
            fl.winograd_conv2d_input_grad(gy, w, [1, 1], 2, False, True)
        with pytest.raises(RuntimeError,
                           match=r"winograd_conv2d_weight_grad: `fused` runs on CUDA tensors"):
            fl.winograd_conv2d_weight_grad(gy, x, [1, 1], 2, False, True)
    w32 = w.float()
    with pytest.raises(RuntimeError, match=r"winograd_conv2d: `fused` takes `tile` 2 .*got 4"):
        fl.winograd_conv2d(x, w, b, [1, 1], 4, False, True)
    with pytest.raises(RuntimeError, match=r"winograd_conv2d_weight_grad: `fused` takes `tile` 2 "
                                           r"\(the fused kernels compute F\(3x3, 2x2\)\), got 4"):
        fl.winograd_conv2d_weight_grad(gy, x, [1, 1], 4, False, True)
    if device in ("cuda", "meta"):
        with pytest.raises(RuntimeError, match=r"winograd_conv2d_weight_grad: `fused` takes "
                                               r"float16, bfloat16 and float32, got Double"):
            fl.winograd_conv2d_weight_grad(gy.double(), x.double(), [1, 1], 2, True, True)
        with pytest.raises(RuntimeError, match=r"`fused` takes float16, bfloat16 and float32, "
                                               r"got Double"):
            fl.winograd_conv2d(x.double(), w.double(), None, [1, 1], 2, True, True)
        # float32's data widths, with either product: multiples of 4 (input 10 wide; grad_output
        # 10 wide)
        x10, gy10 = tensors((2, 3, 4, 8, 10, 1, 1), torch.float32, device)[::3]
        for tf32 in (True, False):
            with pytest.raises(RuntimeError, match=r"winograd_conv2d: `fused` in float32 takes "
                                                   r"`input` of a width that is a multiple of 4, "
                                                   r"got 10"):
                fl.winograd_conv2d(x10, w32, None, [1, 1], 2, tf32, True)
            with pytest.raises(RuntimeError, match=r"winograd_conv2d_input_grad: `fused` in "
                                                   r"float32 takes `grad_output` of a width that "
                                                   r"is a multiple of 4, got 10"):
                fl.winograd_conv2d_input_grad(gy10, w32, [1, 1], 2, tf32, True)
        # float32's weight gradient takes any width (10 here), TF32 or not
        for tf32 in (True, False):
            fl.winograd_conv2d_weight_grad(gy10, x10, [1, 1], 2, tf32, True)


def test_fused_label():
    from fastlayers import algorithms
    from fastlayers.algorithms.winograd import FAMILY
    c = algorithms.parse("winograd:2,fused")
    assert c.params.fused and c.params.tile == 2 and c.label == "winograd:2,fused"
    assert not algorithms.parse("winograd:2").params.fused
    for bad in ("winograd:4,fused", "winograd:2,fast", "winograd:2,"):
        with pytest.raises(ValueError, match="bad variant"):
            algorithms.parse(bad)
    p = _problem(dtype="float16", device_type="cuda")
    assert FAMILY.fits(c, p, "forward") is None and FAMILY.fits(c, p, "input_grad") is None
    assert FAMILY.fits(c, p, "weight_grad") is None
    takes = "float16, bfloat16 and float32 on CUDA"
    assert takes + ", not float16 on cpu" in FAMILY.fits(c, _problem("float16", "cpu"), "forward")
    assert takes + ", not float32 on cpu" in FAMILY.fits(c, _problem("float32", "cpu", tf32=True),
                                                         "forward")
    assert takes + ", not float64 on cuda" in FAMILY.fits(c, _problem("float64", "cuda"),
                                                          "forward")
    # float32, TF32 or not: data widths that are multiples of 4 (input's W; grad_output's ow)
    for (W, pw, fwd, igrad), tf32 in itertools.product(
            ((12, 1, True, True), (12, 0, True, False), (10, 2, False, True)), (True, False)):
        q = _problem("float32", "cuda", tf32=tf32, W=W, pw=pw)
        for pass_, ok in (("forward", fwd), ("input_grad", igrad), ("weight_grad", True)):
            why = FAMILY.fits(c, q, pass_)
            assert (why is None) == ok, (W, pw, tf32, pass_, why)
            if not ok:
                assert "whose width is a multiple of 4, not %s's %d" % (
                    "input" if pass_ == "forward" else "grad_output", q.W if pass_ == "forward"
                    else q.ow) in why, why
    # U [16, result channels rounded up to 64, reduction channels rounded up to 16], float16;
    # in float32 rounded up to 8 (chunks of 32 bytes)
    assert FAMILY.workspace_bytes(c, p, "forward") == 16 * 64 * 16 * 2  # K 16, C 8
    assert FAMILY.workspace_bytes(c, p, "input_grad") == 16 * 64 * 16 * 2  # C 8, K 16
    q = _problem("float32", "cuda", tf32=True, W=12)
    assert FAMILY.workspace_bytes(c, q, "forward") == 16 * 64 * 8 * 4  # K 16, C 8
    assert FAMILY.workspace_bytes(c, q, "input_grad") == 16 * 64 * 16 * 4  # C 8, K 16
    # the weight gradient's partial sums on one block of 32 x 32 channels: 2 x 10 x 10 at padding 1
    # is 5 x 5 tiles a sample, 4 chunks of 4 x 4 a sample (width 10: not a multiple of 4), 8 in all,
    # 2 runs of 4: [2, 16, 32, 32] float; at width 12, 5 x 6 tiles, 5 chunks of one tile row a
    # sample, 10 in all, 2 runs (of 5)
    assert FAMILY.workspace_bytes(c, p, "weight_grad") == 2 * 16 * 32 * 32 * 4
    assert FAMILY.workspace_bytes(c, q, "weight_grad") == 2 * 16 * 32 * 32 * 4
    from fastlayers import _C
    assert _C.winograd_fused_weight_grad_workspace_bytes(8, 16, 16, 64, 64, 1, 1) == \
        128 * 16 * 32 * 32 * 4  # 512 chunks: 128 runs of 4
    for bad in (0, 3, 8):  # a chunk is 32 bytes of 2- or 4-byte values
        with pytest.raises(RuntimeError, match="`store_bytes` must be 2 .* or 4 .*got %d" % bad):
            _C.winograd_fused_workspace_bytes(0, 8, 16, bad)


def test_fused_is_a_candidate_in_float32():
    """The tuner measures the fused kernel in float32 on CUDA, TF32 or not, beside the pipelines'
    tiles, and only where it takes the data's width."""
    from fastlayers.algorithms.winograd import FAMILY
    labels = lambda p, pass_: [c.label for c in FAMILY.candidates(p, pass_)]  # noqa: E731
    for tf32 in (True, False):
        on = _problem("float32", "cuda", tf32=tf32, W=12)
        assert labels(on, "forward") == ["winograd:2", "winograd:4", "winograd:6",
                                         "winograd:2,fused"]
        assert labels(on, "input_grad")[-1] == "winograd:2,fused"
        assert labels(on, "weight_grad") == ["winograd:2", "winograd:4", "winograd:2,fused"]
        # the weight gradient's kernel takes any width
        assert labels(_problem("float32", "cuda", tf32=tf32, W=10), "weight_grad")[-1] == \
            "winograd:2,fused"
    for p in (_problem("float32", "cuda", W=10), _problem("float32", "cuda", tf32=True, W=10),
              _problem("float32", "cpu", tf32=True, W=12), _problem("float64", "cuda", W=12)):
        assert "winograd:2,fused" not in labels(p, "forward"), p
    for pass_ in ("forward", "input_grad", "weight_grad"):
        assert labels(_problem("float16", "cuda"), pass_) == ["winograd:2,fused"]


def _problem(dtype, device_type, tf32=False, W=10, pw=1):
    from fastlayers import tuner
    return tuner.ConvProblem(S=2, C=8, K=16, H=10, W=W, kh=3, kw=3, ph=1, pw=pw, dtype=dtype,
                             device_type=device_type, device_name="x", capability="9.0",
                             layout="contiguous", tf32=tf32, deterministic=False, transforms=True)


@pytest.mark.gpu
@pytest.mark.parametrize("prec", FUSED)
def test_module_runs_a_pinned_fused_label(prec):
    """fastlayers.Conv2d with 'winograd:2,fused' pinned on every pass (its C++ plan): the fused
    ops run, and output and gradients match nn.Conv2d's within the
    rule (float32: TF32 or not, as PyTorch's switch says)."""
    import fastlayers
    from conv_samples import RecordOps
    dtype, tf32 = DTYPES[prec], prec == "tf32"
    shape = (3, 24, 40, 11, 12 if dtype == torch.float32 else 13, 1, 1)
    x, w, b, gy = tensors(shape, dtype, "cuda")
    m = fastlayers.Conv2d(24, 40, 3, padding=1).cuda().to(dtype)
    with torch.no_grad():
        m.weight.copy_(w), m.bias.copy_(b)
    m.force_algorithms(forward="winograd:2,fused", input_grad="winograd:2,fused",
                       weight_grad="winograd:2,fused")
    xg = x.clone().requires_grad_()
    with cudnn_tf32(tf32), RecordOps() as rec:
        y = m(xg)
        y.backward(gy)
    # `fused`: the seventh argument of the forward, the sixth of the gradients (RecordOps leaves
    # out trailing default arguments)
    at = {"winograd_conv2d": 6, "winograd_conv2d_input_grad": 5, "winograd_conv2d_weight_grad": 5}
    fused = [(n, len(a) > at[n] and a[at[n]]) for n, a in rec.calls if n in at]
    assert fused == [("winograd_conv2d", True), ("winograd_conv2d_input_grad", True),
                     ("winograd_conv2d_weight_grad", True)], fused
    ref = float64_passes(x, w, b, gy, (1, 1))
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, (1, 1))
    for i, out in enumerate((y.detach(), xg.grad, m.weight.grad)):
        same = winograd_reference(i, x, w, b, gy, (1, 1), 2, tf32, kernels="cuda").cpu()
        assert_within_bound(out.cpu(), ref[i].cpu(), native[i].cpu(), same, precision=prec,
                            what=PASS_NAMES[i])
