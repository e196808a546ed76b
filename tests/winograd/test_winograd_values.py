"""Every Winograd op and tile on the shape matrix, per device and precision, against PyTorch in
float64 within the tolerance rule of conv_samples: PyTorch's own error is the larger of the direct
convolution's and the pure-torch Winograd reference's (winograd_samples.winograd_reference, the
same algorithm in torch). Larger tiles round more than the direct convolution (F(6x6,3x3) up to
~60x its error in float32 on CPU), not more than their own algorithm: the factors of
ERROR_FACTOR hold as they are. float64 must match to FLOAT64_BOUND.

Where a kernel that wrong would otherwise pass, each comparison also proves that the rule rejects
the output scaled by (1 + MUTATION[precision]) (MUTATED)."""
import pytest
import torch

from conv_samples import (DTYPES, assert_float64_matches, assert_mutation_rejected,
                          assert_within_bound, cudnn_tf32, precision_of, rel_err,
                          skip_unless_supported, torch_passes)
from winograd_samples import (PASS_NAMES, PASS_TILES, SHAPES, float64_passes, pass_tile_id,
                              run_pass, shape_id, tensors, winograd_passes, winograd_reference)

PRECISIONS = ["float32", "float64", "tf32", "float16", "bfloat16"]

# (device, precision): the (pass, tile)s whose every comparison also checks that the rule rejects
# the output scaled by (1 + MUTATION[precision]); the devices and precisions are the FFT tests'.
# Elsewhere the algorithm's own error reaches MUTATION (the bound then holds a scaled output):
# the smallest (scaled error / bound) over the matrix, CPU, with the CPU op (float32) or the
# reference standing in for the CUDA op (float16, bfloat16; robust from ~1.3 whatever the op's
# own error):
#   float32   t2 3.9 / 8.4 / 4.7   t4 2.0 / 2.3 / 2.1   t6 0.72 / 0.88   (forward / input / weight)
#   float16   t2 1.8 / 1.5 / 2.2   t4 1.00 / 0.91 / 0.75   t6 0.75 / 0.75
#   bfloat16  t2 0.89 / 1.01 / 1.5   t4 0.62 / 0.77 / 0.87   t6 0.80 / 0.72
MUTATED = {
    ("cpu", "float32"): {(0, 2), (0, 4), (1, 2), (1, 4), (2, 2), (2, 4)},
    ("cuda", "float16"): {(0, 2), (1, 2), (2, 2)},
    ("cuda", "bfloat16"): {(2, 2)},
}

_REFERENCES = {}


def _pytorch(shape, precision, device):
    """(float64 passes, PyTorch's passes in the precision or None), once per shape, precision and
    device: every op and tile of a shape is measured against the same results."""
    key = (shape, precision, device)
    if key not in _REFERENCES:
        x, w, b, gy = tensors(shape, DTYPES[precision], device)
        ref = float64_passes(x, w, b, gy, shape[5:])
        native = None
        if precision != "float64":
            with cudnn_tf32(precision == "tf32"):
                native = torch_passes(x, w, b, gy, shape[5:])
        _REFERENCES[key] = ref, native
    return _REFERENCES[key]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("spec", PASS_TILES, ids=pass_tile_id)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_matches_pytorch_within_its_error(device, shape, spec, precision):
    skip_unless_supported(device, precision)
    pass_, tile = spec
    tf32 = precision == "tf32"
    x, w, b, gy = tensors(shape, DTYPES[precision], device)
    padding = shape[5:]
    out = run_pass(pass_, x, w, b, gy, padding, tile, tf32)
    assert out.device == x.device
    ref, native = _pytorch(shape, precision, device)
    what = "%s %s tile %d on %s" % (shape_id(shape), PASS_NAMES[pass_], tile, device)
    if precision == "float64":
        assert_float64_matches(out, ref[pass_], what)
        return
    same = winograd_reference(pass_, x, w, b, gy, padding, tile, tf32, kernels=device).cpu()
    out, r, n = out.cpu(), ref[pass_].cpu(), native[pass_].cpu()
    if device == "cuda":
        # cuBLAS chooses the order of the products' reduction: the algorithm's own error is the
        # larger of the two orders' (on a few outputs it is all a rounding or two: S1-C2-K3-1x1's
        # F(4x4) forward reads 4.8e-8 in one and 2.3e-7 in the other; the kernel 2.2e-7, H200).
        other = winograd_reference(pass_, x, w, b, gy, padding, tile, tf32, kernels=device,
                                   reverse=True).cpu()
        if rel_err(other, r) > rel_err(same, r):
            same = other
    bound = assert_within_bound(out, r, n, same, precision_of(x.dtype, tf32), what=what)
    if spec in MUTATED.get((device, precision), ()):
        assert_mutation_rejected(out, r, bound, precision, what)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=str)
def test_cpu_ignores_tf32(dtype):
    """A contract, not a correctness test: the CPU kernel has no TF32, so `tf32` changes no
    result of any op or tile (the values are checked above)."""
    shape = (2, 3, 4, 9, 7, 1, 2)
    x, w, b, gy = tensors(shape, dtype)
    for pass_, tile in PASS_TILES:
        base = run_pass(pass_, x, w, b, gy, shape[5:], tile, False)
        assert base.dtype == dtype
        torch.testing.assert_close(run_pass(pass_, x, w, b, gy, shape[5:], tile, True), base,
                                   rtol=0, atol=0, msg="%s tile %d" % (PASS_NAMES[pass_], tile))


def test_tiles_are_different_algorithms(device):
    """The tile is honoured: each tile's float32 result differs from the others' and lies nearer
    its own algorithm's reference than any other tile's (so a kernel running F(2x2,3x3) whatever
    the tile would fail here, though it would pass the rule); larger tiles round more (F(6x6,3x3)
    within 60x F(2x2,3x3)'s error)."""
    shape = (2, 32, 32, 12, 12, 1, 1)
    x, w, b, gy = tensors(shape, torch.float32, device)
    ref = float64_passes(x, w, b, gy, (1, 1))
    for pass_ in range(3):
        tiles = (2, 4) if pass_ == 2 else (2, 4, 6)
        outs = {t: run_pass(pass_, x, w, b, gy, (1, 1), t).cpu() for t in tiles}
        refs = {t: winograd_reference(pass_, x, w, b, gy, (1, 1), t, kernels=device).cpu()
                for t in tiles}
        for t in tiles:
            for u in tiles:
                if u != t:
                    assert not torch.equal(outs[t], outs[u]), (PASS_NAMES[pass_], t, u)
                    assert rel_err(outs[t], refs[t].double()) < rel_err(outs[t], refs[u].double())
        errs = [rel_err(outs[t], ref[pass_].cpu()) for t in tiles]
        assert errs[0] < errs[-1] < 60 * errs[0], (PASS_NAMES[pass_], errs)


def test_three_passes_of_one_problem(device):
    """winograd_passes: the three ops side by side on one problem, each tile triple once."""
    shape = (3, 5, 4, 10, 9, 2, 1)
    x, w, b, gy = tensors(shape, torch.float64, device)
    ref = float64_passes(x, w, b, gy, shape[5:])
    for tiles in ((2, 2, 2), (4, 6, 4), (6, 4, 2)):
        for name, out, r in zip(PASS_NAMES, winograd_passes(x, w, b, gy, shape[5:], tiles), ref):
            assert_float64_matches(out, r, "%s tiles %s" % (name, tiles))
