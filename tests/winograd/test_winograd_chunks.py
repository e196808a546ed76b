"""Batches in chunks of samples (the ops bound one chunk's buffers): every pass over several
chunks, the weight gradient's sum over them included, against PyTorch in float64, float32 and, on
CUDA, TF32 (where the input gradient's filters are stored by input channel)."""
import pytest
import torch

from fastlayers import _C
from conv_samples import assert_within_bound, cudnn_tf32, torch_passes

testing = _C.testing


def chunk_bound(pass_, S, C, K, H, W, pad, tile, samples, store=8, acc=8, given=False):
    """The smallest bound under which a chunk holds `samples` samples (checked)."""
    def chunk(bound):
        return testing.winograd_chunk_samples(pass_, S, C, K, H, W, *pad, tile, store, acc, bound,
                                              given)
    lo, hi = 1, 1 << 40
    while lo < hi:  # the chunk's sample count grows with the bound
        mid = (lo + hi) // 2
        if chunk(mid) >= samples:
            hi = mid
        else:
            lo = mid + 1
    assert chunk(lo) == samples
    return lo


# An odd result width (the inverse's values one by one) and a width of 8 (its rows by vector
# stores into each chunk's part of the result). The bound takes the unchunked result as the
# algorithm's own error, so this test catches what chunks change; the stores' values are
# test_winograd_values' (a mutation of them failed there, not here: w193).
@pytest.mark.parametrize("geometry", [(5, 3, 4, 9, 7, (1, 2)), (5, 3, 4, 9, 8, (1, 1))],
                         ids=["ow7", "ow8"])
@pytest.mark.parametrize("pass_", [0, 1, 2])
@pytest.mark.parametrize("tile", [2, 4])
def test_several_chunks_match_pytorch(device, pass_, tile, geometry):
    S, C, K, H, W, pad = geometry
    g = torch.Generator().manual_seed(pass_ * 10 + tile)
    x = torch.randn(S, C, H, W, generator=g, dtype=torch.float64)
    w = torch.randn(K, C, 3, 3, generator=g, dtype=torch.float64)
    b = torch.randn(K, generator=g, dtype=torch.float64)
    gy = torch.randn(S, K, H + 2 * pad[0] - 2, W + 2 * pad[1] - 2, generator=g,
                     dtype=torch.float64)
    ref = torch_passes(x, w, b, gy, pad)[pass_]
    cases = [(torch.float64, False), (torch.float32, False)]
    if device == "cuda":  # the CPU kernels ignore TF32
        cases.append((torch.float32, True))
    for dtype, tf32 in cases:
        size = 8 if dtype == torch.float64 else 4
        bound = chunk_bound(pass_, S, C, K, H, W, pad, tile, 2, size, size)  # chunks 2, 2, 1
        xd, wd, bd, gyd = (t.to(device, dtype) for t in (x, w, b, gy))
        a, bb, bias = [(xd, wd, bd), (gyd, wd, None), (gyd, xd, None)][pass_]
        outs = [testing.winograd_conv2d_pass(pass_, a, bb, bias, list(pad), tile, tf32, bound)]
        whole = testing.winograd_conv2d_pass(pass_, a, bb, bias, list(pad), tile, tf32, 0)
        if pass_ == 0:  # with the filters transformed ahead, in the same chunks of 2, 2, 1
            given = chunk_bound(pass_, S, C, K, H, W, pad, tile, 2, size, size, given=True)
            outs.append(testing.winograd_conv2d_pass(
                pass_, a, bb, bias, list(pad), tile, tf32, given,
                torch.ops.fastlayers.winograd_filter_transform(wd, tile)))
        for out in outs:
            if dtype == torch.float64:
                assert (out.cpu() - ref).abs().max().item() <= 1e-10 * ref.abs().max().item()
            else:
                with cudnn_tf32(tf32):
                    native = torch_passes(*(t.to(device, dtype) for t in (x, w, b, gy)),
                                          pad)[pass_]
                assert_within_bound(out.cpu(), ref, native.cpu(), whole.cpu(),
                                    "tf32" if tf32 else "float32",
                                    what="chunked pass %d tile %d" % (pass_, tile))


def test_chunk_bound_is_checked():
    x = torch.randn(2, 3, 5, 5)
    w = torch.randn(4, 3, 3, 3)
    with pytest.raises(RuntimeError, match="chunk_bytes"):
        testing.winograd_conv2d_pass(0, x, w, None, [1, 1], 2, False, -1)
    assert testing.WINOGRAD_CHUNK_BYTES == 512 << 20


@pytest.mark.parametrize("C,K", [(512, 256), (3, 3)])
@pytest.mark.parametrize("tile", [2, 4, 6])
def test_given_filters_take_no_workspace(tile, C, K):
    # A forward given its filters transformed ahead reads them where they are: the bound under
    # which a chunk holds n samples is U's bytes less (each buffer starts on 256 bytes: 3 x 3
    # filters at tile 2 take 576 bytes, 768 with their padding); the other passes have no such
    # filters.
    S, H, W, pad = 16, 14, 14, (1, 1)
    u_bytes = ((tile + 2) ** 2 * K * C * 4 + 255) // 256 * 256
    for n in (2, 5, S):
        plain = chunk_bound(0, S, C, K, H, W, pad, tile, n, 4, 4)
        given = chunk_bound(0, S, C, K, H, W, pad, tile, n, 4, 4, given=True)
        assert given == plain - u_bytes, (n, plain, given)
    for pass_ in (1, 2):
        t = min(tile, 4)
        assert chunk_bound(pass_, S, C, K, H, W, pad, t, 5, 4, 4, given=True) == \
            chunk_bound(pass_, S, C, K, H, W, pad, t, 5, 4, 4)
