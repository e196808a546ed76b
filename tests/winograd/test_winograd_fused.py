"""The fused Winograd kernel (`fused=True`: F(2x2,3x3), forward and input gradient, float16 and
bfloat16 on CUDA) against PyTorch in float64 within the tolerance rule of conv_samples, as the
non-fused ops are (test_winograd_values.py), on the shape matrix and on shapes that cross the
kernel's items (64 result channels x 4 x 8 tiles, chunks of 16 reduction channels) at every edge;
its autograd, opcheck, and the errors for what it does not take."""
import pytest
import torch

from conv_samples import (assert_mutation_rejected, assert_within_bound, cudnn_tf32, rel_err,
                          torch_passes)
from winograd_samples import (PASS_NAMES, SHAPES, SMALL_SHAPES, float64_passes, run_pass,
                              shape_id, tensors, winograd_reference)

fl = torch.ops.fastlayers
HALF = [torch.float16, torch.bfloat16]
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
# one).
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


def fused_pass(pass_, x, w, b, gy, padding):
    pad = list(padding)
    if pass_ == 0:
        return fl.winograd_conv2d(x, w, b, pad, 2, False, True)
    return fl.winograd_conv2d_input_grad(gy, w, pad, 2, False, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("pass_", (0, 1), ids=lambda p: PASS_NAMES[p])
@pytest.mark.parametrize("shape", SHAPES + BLOCK_SHAPES, ids=shape_id)
def test_fused_matches_pytorch_within_its_error(shape, pass_, dtype):
    x, w, b, gy = tensors(shape, dtype, "cuda")
    padding = shape[5:]
    out = fused_pass(pass_, x, w, b, gy, padding)
    assert out.device == x.device and out.dtype == dtype
    ref = float64_passes(x, w, b, gy, padding)[pass_].cpu()
    with cudnn_tf32(False):
        native = torch_passes(x, w, b, gy, padding)[pass_].cpu()
    same = winograd_reference(pass_, x, w, b, gy, padding, 2, kernels="cuda").cpu()
    what = "%s %s fused" % (shape_id(shape), PASS_NAMES[pass_])
    bound = assert_within_bound(out.cpu(), ref, native, same, str(dtype).replace("torch.", ""),
                                what=what)
    if pass_ in MUTATED.get(dtype, ()):
        assert_mutation_rejected(out.cpu(), ref, bound, str(dtype).replace("torch.", ""), what)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_fused_is_the_same_algorithm_as_the_pipeline(dtype):
    """The same transforms and stored operands as the non-fused F(2x2,3x3): the two differ only in
    the order of the float32 sums of products, far below either's error against float64."""
    shape = (4, 96, 80, 13, 15, 1, 1)
    x, w, b, gy = tensors(shape, dtype, "cuda")
    ref = float64_passes(x, w, b, gy, shape[5:])
    for pass_ in (0, 1):
        a = fused_pass(pass_, x, w, b, gy, shape[5:]).cpu()
        n = run_pass(pass_, x, w, b, gy, shape[5:], 2).cpu()
        gap, err = rel_err(a, n.double()), rel_err(n, ref[pass_].cpu())
        assert gap < 0.5 * err, (PASS_NAMES[pass_], gap, err)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_fused_autograd_uses_the_fused_passes(dtype):
    """Backward of a fused forward: the input gradient fused, the weight gradient by its own op;
    the gradients match PyTorch's within the rule."""
    from conv_samples import RecordOps
    shape = (2, 24, 40, 9, 10, 1, 1)
    x, w, b, gy = tensors(shape, dtype, "cuda")
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    with RecordOps() as rec:
        y = fl.winograd_conv2d(*leaves, [1, 1], 2, False, True)
        y.backward(gy)
    calls = [(name, args) for name, args in rec.calls if name.startswith("winograd")]
    names = [name for name, _ in calls]
    assert names == ["winograd_conv2d", "winograd_conv2d_input_grad",
                     "winograd_conv2d_weight_grad"], names
    assert calls[1][1][-1] is True, calls[1]  # the input gradient ran fused
    ref = float64_passes(x, w, b, gy, (1, 1))
    with cudnn_tf32(False):
        native = torch_passes(x, w, b, gy, (1, 1))
    for i, leaf in ((1, leaves[0]), (2, leaves[1])):
        same = winograd_reference(i, x, w, b, gy, (1, 1), 2, kernels="cuda").cpu()
        assert_within_bound(leaf.grad.cpu(), ref[i].cpu(), native[i].cpu(), same,
                            precision=str(dtype).replace("torch.", ""), what=PASS_NAMES[i])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_fused_patch_copies_agree(dtype):
    """The patch's three copy paths (a TMA box for a 16-byte aligned operand whose width is a
    multiple of 8, 4-byte copies for a 4-byte aligned one, values through registers else) read
    the same windows into the same arithmetic: bitwise equal results."""
    shape = (3, 40, 72, 12, 40, 1, 1)
    x, w, b, gy = tensors(shape, dtype, "cuda")
    pad = list(shape[5:])
    for pass_, data in ((0, x), (1, gy)):
        outs = []
        for k in (0, 2, 1):
            d = placed(data, k)
            outs.append(fused_pass(pass_, d if pass_ == 0 else x, w, b, d if pass_ == 1 else gy,
                                   pad))
        for k, out in zip((2, 1), outs[1:]):
            assert torch.equal(out, outs[0]), "pass %d: data at offset %d differs" % (pass_, k)


@pytest.mark.gpu
def test_fused_reads_no_channel_past_its_operand():
    """A partial last chunk (R = 20 reduction channels, chunks of 16) reads no channel at or past
    R: the operand sits at the start of a buffer whose rest is NaN, so a channel of the next
    sample would be finite but one past the last sample NaN (times U's zero rows: NaN), on each
    of the three copy paths (data at offsets 0, 4 and 2 bytes)."""
    shape = (2, 20, 20, 9, 16, 1, 1)
    x, w, b, gy = tensors(shape, torch.float16, "cuda")
    pad = list(shape[5:])
    for pass_, data in ((0, x), (1, gy)):
        plane = data.shape[2] * data.shape[3]
        want = fused_pass(pass_, x, w, b, gy, pad)
        for k in (0, 2, 1):
            d = placed(data, k, tail=16 * plane, fill=float("nan"))
            out = fused_pass(pass_, d if pass_ == 0 else x, w, b, d if pass_ == 1 else gy, pad)
            assert torch.equal(out, want), "pass %d, data at offset %d" % (pass_, k)


@pytest.mark.gpu
@pytest.mark.parametrize("bad", (float("inf"), float("nan")), ids=("inf", "nan"))
def test_fused_nonfinite_stays_in_its_tiles(bad):
    """One inf or NaN in the data operand makes non-finite at most the 2x2 result tiles whose 4x4
    windows hold it (Winograd's spread, docs/tuner.md), and some of them; every other result is
    the clean run's, bitwise. Both passes, on each copy path (data widths 16, 10, and 9 or 7)."""
    for shape in ((2, 20, 24, 9, 16, 1, 1), (1, 17, 70, 10, 10, 1, 1), (2, 16, 16, 7, 9, 2, 0)):
        x, w, b, gy = tensors(shape, torch.float16, "cuda")
        ph, pw = shape[5:]
        for pass_ in (0, 1):
            data = (x if pass_ == 0 else gy).clone()
            oy, ox = (ph, pw) if pass_ == 0 else (2 - ph, 2 - pw)
            s, c, py, px = data.shape[0] - 1, data.shape[1] // 2, data.shape[2] // 2, 1
            clean = fused_pass(pass_, x, w, b, gy, [ph, pw])
            data[s, c, py, px] = bad
            out = fused_pass(pass_, data if pass_ == 0 else x, w, b,
                             data if pass_ == 1 else gy, [ph, pw])
            # result rows 2t, 2t + 1 of the tiles t whose window rows 2t - oy .. + 3 hold py
            rows = torch.arange(out.shape[2], device="cuda") // 2 * 2
            cols = torch.arange(out.shape[3], device="cuda") // 2 * 2
            near = (((rows - oy <= py) & (py <= rows - oy + 3))[:, None] &
                    ((cols - ox <= px) & (px <= cols - ox + 3))[None, :])
            mask = torch.zeros(out.shape, dtype=torch.bool, device="cuda")
            mask[s, :] = near
            what = "%s pass %d" % (shape_id(shape), pass_)
            assert torch.equal(out[~mask], clean[~mask]), what
            assert out[mask].isfinite().logical_not().any(), what


@pytest.mark.gpu
@pytest.mark.parametrize("op", ("forward", "input_grad"))
def test_fused_opcheck(op):
    x, w, b, gy = tensors(SMALL_SHAPES[2], torch.float16, "cuda")
    pad = list(SMALL_SHAPES[2][5:])
    for t in (x, w, b, gy):
        t.requires_grad_()
    if op == "forward":
        torch.library.opcheck(fl.winograd_conv2d.default, (x, w, b, pad, 2, False, True))
    else:
        torch.library.opcheck(fl.winograd_conv2d_input_grad.default, (gy, w, pad, 2, False, True))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_fused_refuses_what_it_does_not_take(device):
    shape = (2, 3, 4, 8, 8, 1, 1)
    x, w, b, gy = tensors(shape, torch.float16, device)
    if device == "cpu":
        with pytest.raises(RuntimeError, match=r"winograd_conv2d: `fused` runs on CUDA tensors"):
            fl.winograd_conv2d(x, w, b, [1, 1], 2, False, True)
        with pytest.raises(RuntimeError,
                           match=r"winograd_conv2d_input_grad: `fused` runs on CUDA tensors"):
            fl.winograd_conv2d_input_grad(gy, w, [1, 1], 2, False, True)
    x32, w32 = x.float(), w.float()
    with pytest.raises(RuntimeError, match=r"winograd_conv2d: `fused` takes `tile` 2 .*got 4"):
        fl.winograd_conv2d(x, w, b, [1, 1], 4, False, True)
    if device == "cuda":
        with pytest.raises(RuntimeError, match=r"`fused` takes float16 and bfloat16.*Float"):
            fl.winograd_conv2d(x32, w32, None, [1, 1], 2, False, True)
    # The weight gradient has no fused kernel: its schema takes no `fused`.
    with pytest.raises(RuntimeError, match="expected at most 5 argument"):
        fl.winograd_conv2d_weight_grad(gy, x, [1, 1], 2, False, True)


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
    assert "forward and the input gradient" in FAMILY.fits(c, p, "weight_grad")
    assert "float16 and bfloat16 on CUDA" in FAMILY.fits(c, _problem("float32", "cuda"), "forward")
    assert "float16 and bfloat16 on CUDA" in FAMILY.fits(c, _problem("float16", "cpu"), "forward")
    # U [16, result channels rounded up to 64, reduction channels rounded up to 16], float16
    assert FAMILY.workspace_bytes(c, p, "forward") == 16 * 64 * 16 * 2  # K 16, C 8
    assert FAMILY.workspace_bytes(c, p, "input_grad") == 16 * 64 * 16 * 2  # C 8, K 16


def _problem(dtype, device_type):
    from fastlayers import tuner
    return tuner.ConvProblem(S=2, C=8, K=16, H=10, W=10, kh=3, kw=3, ph=1, pw=1, dtype=dtype,
                             device_type=device_type, device_name="x", capability="9.0",
                             layout="contiguous", tf32=False, deterministic=False, transforms=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_module_runs_a_pinned_fused_label(dtype):
    """fastlayers.Conv2d with 'winograd:2,fused' pinned on the forward and the input gradient
    (its C++ plan): the fused ops run, and output and gradients match nn.Conv2d's within the
    rule."""
    import fastlayers
    from conv_samples import RecordOps
    shape = (3, 24, 40, 11, 13, 1, 1)
    x, w, b, gy = tensors(shape, dtype, "cuda")
    m = fastlayers.Conv2d(24, 40, 3, padding=1).cuda().to(dtype)
    with torch.no_grad():
        m.weight.copy_(w), m.bias.copy_(b)
    m.force_algorithms(forward="winograd:2,fused", input_grad="winograd:2,fused",
                       weight_grad="native")
    xg = x.clone().requires_grad_()
    with RecordOps() as rec:
        y = m(xg)
        y.backward(gy)
    fused = [(n, a[-1]) for n, a in rec.calls if n.startswith("winograd_conv2d")]
    assert fused == [("winograd_conv2d", True), ("winograd_conv2d_input_grad", True)], fused
    ref = float64_passes(x, w, b, gy, (1, 1))
    with cudnn_tf32(False):
        native = torch_passes(x, w, b, gy, (1, 1))
    prec = str(dtype).replace("torch.", "")
    for i, out in enumerate((y.detach(), xg.grad, m.weight.grad)):
        same = (winograd_reference(i, x, w, b, gy, (1, 1), 2, kernels="cuda").cpu()
                if i < 2 else None)
        assert_within_bound(out.cpu(), ref[i].cpu(), native[i].cpu(), same, precision=prec,
                            what=PASS_NAMES[i])
