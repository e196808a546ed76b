"""The forward's filters transformed ahead (Lavin & Gray's FX variant): winograd_filter_transform
against the exact matrices, winograd_conv2d with `transformed_weight` giving what it gives
without, on every device and dtype the pipeline takes; the argument checks; and
fastlayers.cached_filter_transforms keeping a layer's transformed filters per weight version."""
import pytest
import torch
import torch.nn.functional as F

import fastlayers
from fastlayers import winograd as W
from fastlayers import winograd_matrices
from conv_samples import ops_of

fl = torch.ops.fastlayers
TILES = (2, 4, 6)


def exact_filters(w, tile):
    """G w G^T in float64 from the exact matrices: [alpha^2, K, C]."""
    G = torch.tensor([[float(v) for v in row] for row in winograd_matrices.matrices(tile, 3)[1]],
                     dtype=torch.float64)
    a = G.shape[0]
    U = torch.einsum("ai,kcij,bj->abkc", G, w.double().cpu(), G)
    return U.reshape(a * a, w.shape[0], w.shape[1])


@pytest.mark.parametrize("tile", TILES)
def test_filter_transform_is_g_w_gt(device, tile):
    w = torch.randn(5, 3, 3, 3, dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        U = W.winograd_filter_transform(w.to(device, dtype), tile)
        assert U.shape == ((tile + 2) ** 2, 5, 3) and U.dtype == dtype
        tol = 1e-14 if dtype == torch.float64 else 1e-6
        torch.testing.assert_close(U.cpu().double(), exact_filters(w, tile), rtol=tol, atol=tol)


def test_filter_transform_gradcheck():
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    for tile in TILES:
        assert torch.autograd.gradcheck(lambda t: W.winograd_filter_transform(t, tile), (w,))


def dtypes_of(device):
    return ([torch.float64, torch.float32] +
            ([torch.float16, torch.bfloat16] if device == "cuda" else []))


@pytest.mark.parametrize("tile", TILES)
def test_the_forward_reads_the_given_filters_as_its_own(device, tile):
    # the pipeline transforms the filters as winograd_filter_transform does and stores them in
    # the input dtype: given or not, the same algorithm, as accurate against float64 (the bits
    # may differ: a GEMM library's rounding may follow its operands' addresses, MKL's on the CPU)
    for dtype in dtypes_of(device):
        x = torch.randn(3, 5, 11, 9, device=device).to(dtype)
        w = torch.randn(6, 5, 3, 3, device=device).to(dtype)
        b = torch.randn(6, device=device).to(dtype)
        U = W.winograd_filter_transform(w, tile)
        plain = W.winograd_conv2d(x, w, b, (1, 2), tile, tf32=False)
        given = W.winograd_conv2d(x, w, b, (1, 2), tile, tf32=False, transformed_weight=U)
        exact = F.conv2d(x.double(), w.double(), b.double(), padding=(1, 2))
        err_plain, err_given = ((y.double() - exact).abs().max().item() for y in (plain, given))
        assert err_given <= 2 * err_plain, (dtype, err_given, err_plain)
        # and the given filters are what is read: others give another result
        other = W.winograd_conv2d(x, w, b, (1, 2), tile, tf32=False, transformed_weight=2 * U)
        assert not torch.equal(other, plain)


@pytest.mark.gpu
def test_given_filters_take_no_workspace_on_cuda():
    # deep layer, small batch: the filters are most of what the forward would reserve
    x = torch.randn(1, 512, 14, 14, device="cuda")
    w = torch.randn(512, 512, 3, 3, device="cuda")
    U = W.winograd_filter_transform(w, 4)
    u_bytes = U.numel() * U.element_size()

    def peak(**kw):
        W.winograd_conv2d(x, w, None, 1, 4, tf32=False, **kw)  # the allocator settles
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        W.winograd_conv2d(x, w, None, 1, 4, tf32=False, **kw)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    # the allocator rounds requests (512 bytes; 1 MiB of slack): U's 37.7 MB are what differs
    assert peak() - peak(transformed_weight=U) >= u_bytes - (1 << 20)


def test_gradients_remain_the_weights(device):
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, device=device)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, device=device)
    if device == "cuda":
        x, w = x.float(), w.float()
    U = W.winograd_filter_transform(w, 4)
    got, ref = [], []
    for out, transformed in ((got, U), (ref, None)):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        W.winograd_conv2d(xs, ws, None, 1, 4, tf32=False,
                          transformed_weight=transformed).square().sum().backward()
        out += [xs.grad, ws.grad]
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_transform_that_wants_gradients_serves_without_them(device):
    # refused where gradients are on ("needs-grad" below), taken under no_grad and inference_mode
    dtype = torch.float64 if device == "cpu" else torch.float32
    x = torch.randn(2, 3, 8, 8, dtype=dtype, device=device)
    w = torch.randn(4, 3, 3, 3, dtype=dtype, device=device).requires_grad_()
    U = W.winograd_filter_transform(w, 2)
    assert U.requires_grad
    ref = W.winograd_conv2d(x, w.detach(), None, 1, 2, tf32=False)
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            got = W.winograd_conv2d(x, w, None, 1, 2, tf32=False, transformed_weight=U)
        torch.testing.assert_close(got, ref, rtol=0, atol=0)


BAD = {
    "tile": (lambda x, w: W.winograd_conv2d(x, w, None, 1, 4,
                                            transformed_weight=W.winograd_filter_transform(w, 2)),
             r"`transformed_weight` must be \[alpha\^2, K, C\] = \[36, 4, 3\]"),
    "dtype": (lambda x, w: W.winograd_conv2d(x, w, None, 1, 2, transformed_weight=(
        W.winograd_filter_transform(w, 2).double())), r"`transformed_weight` must have `weight`'s"),
    "needs-grad": (lambda x, w: W.winograd_conv2d(x, w, None, 1, 2, transformed_weight=(
        W.winograd_filter_transform(w.clone().requires_grad_(), 2))),
        r"`transformed_weight` takes no gradient"),
    "filters-5x5": (lambda x, w: W.winograd_filter_transform(torch.randn(4, 3, 5, 5), 2),
                    r"winograd_filter_transform: `weight` must be 3x3"),
    "filters-tile": (lambda x, w: W.winograd_filter_transform(w, 3),
                     r"winograd_filter_transform: `tile` must be 2, 4 or 6"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_arguments_name_the_argument(name):
    call, match = BAD[name]
    with pytest.raises(RuntimeError, match=match):
        call(torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3))


@pytest.mark.gpu
def test_not_with_the_fused_kernel():
    x = torch.randn(2, 8, 8, 8, device="cuda", dtype=torch.float16)
    w = torch.randn(8, 8, 3, 3, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match=r"`transformed_weight` serves the non-fused pipeline"):
        W.winograd_conv2d(x, w, None, 1, 2, fused=True,
                          transformed_weight=W.winograd_filter_transform(w, 2))


# --- the module ----------------------------------------------------------------------------------


def test_layers_keep_their_transformed_filters_per_weight_version(device):
    m = fastlayers.Conv2d(3, 4, 3, padding=1, dtype=torch.float64, device=device)
    m.force_algorithms("winograd:4", "winograd:4", "winograd:4")
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64, device=device)

    def expect():
        return F.conv2d(x, m.weight, m.bias, padding=1)

    with torch.no_grad(), fastlayers.cached_filter_transforms():
        y, ops = ops_of(lambda: m(x))
        assert ops == ["winograd_filter_transform", "winograd_conv2d"]
        torch.testing.assert_close(y, expect())
        y, ops = ops_of(lambda: m(x * 2))
        assert ops == ["winograd_conv2d"]  # kept
        torch.testing.assert_close(y, F.conv2d(x * 2, m.weight, m.bias, padding=1))
        m.weight.mul_(-1)  # a new version
        y, ops = ops_of(lambda: m(x))
        assert ops == ["winograd_filter_transform", "winograd_conv2d"]
        torch.testing.assert_close(y, expect())
        m.weight = torch.nn.Parameter(torch.randn_like(m.weight))  # a new weight
        y, ops = ops_of(lambda: m(x))
        assert ops == ["winograd_filter_transform", "winograd_conv2d"]
        torch.testing.assert_close(y, expect())
        version = m.weight._version
        m.weight.data = torch.randn_like(m.weight)  # the same parameter, new storage
        assert m.weight._version == version  # (what the storage in the key is for)
        y, ops = ops_of(lambda: m(x))
        assert ops == ["winograd_filter_transform", "winograd_conv2d"]
        torch.testing.assert_close(y, expect())
        # the storage transformed is held, so a later new storage cannot take its address (and
        # match the key's) while its filters are kept
        held = fastlayers.nn._kept.filters[m][3]
        assert held.data_ptr() == m.weight.data_ptr()
    with torch.no_grad():  # outside the context: transformed in the call, as always
        _, ops = ops_of(lambda: m(x))
        assert ops == ["winograd_conv2d"]
    with fastlayers.cached_filter_transforms():  # a gradient wanted: the call as always
        _, ops = ops_of(lambda: m(x.requires_grad_()).sum().backward())
        assert "winograd_filter_transform" not in ops


def pinned(device, dtype=torch.float64):
    m = fastlayers.Conv2d(3, 4, 3, padding=1, dtype=dtype, device=device)
    return m.force_algorithms("winograd:4", "winograd:4", "winograd:4")


def test_kept_filters_are_forgotten_when_the_block_ends(device):
    # a change the version counter does not see (.data, a fused optimizer's step) between two
    # blocks is seen: nothing is kept from one block to the next
    m = pinned(device)
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64, device=device)
    with torch.no_grad():
        with fastlayers.cached_filter_transforms():
            m(x)
            _, ops = ops_of(lambda: m(x))
            assert ops == ["winograd_conv2d"]  # kept
            assert m in fastlayers.nn._kept.filters
        assert fastlayers.nn._kept.filters is None  # the block's filters are let go
        m.weight.data.mul_(-3)  # no new version
        with fastlayers.cached_filter_transforms():
            y, ops = ops_of(lambda: m(x))
        assert ops == ["winograd_filter_transform", "winograd_conv2d"]
        torch.testing.assert_close(y, F.conv2d(x, m.weight, m.bias, padding=1))


def test_kept_filters_follow_the_weights_dtype(device):
    m = pinned(device, torch.float32)
    x = torch.randn(2, 3, 10, 10, device=device)
    with torch.no_grad(), fastlayers.cached_filter_transforms():
        m(x)
        m.double()  # the same parameter, other data (no new version)
        y, ops = ops_of(lambda: m(x.double()))
        assert ops == ["winograd_filter_transform", "winograd_conv2d"]
        torch.testing.assert_close(y, F.conv2d(x.double(), m.weight, m.bias, padding=1))


def test_weights_not_the_layers_own_are_transformed_in_each_call(device):
    m = pinned(device)
    torch.nn.utils.parametrize.register_parametrization(m, "weight", Twice())
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64, device=device)
    with torch.no_grad(), fastlayers.cached_filter_transforms():
        for _ in range(2):
            y, ops = ops_of(lambda: m(x))
            assert ops == ["winograd_conv2d"]
            torch.testing.assert_close(y, F.conv2d(x, m.weight, m.bias, padding=1))
            m.parametrizations.weight.original.mul_(-1)


class Twice(torch.nn.Module):
    def forward(self, w):
        return 2 * w


def test_inference_tensors_are_transformed_in_each_call(device):
    with torch.inference_mode():
        m = pinned(device)
        x = torch.randn(2, 3, 10, 10, dtype=torch.float64, device=device)
        with fastlayers.cached_filter_transforms():
            y, ops = ops_of(lambda: m(x))
    assert ops == ["winograd_conv2d"]
    torch.testing.assert_close(y, F.conv2d(x, m.weight, m.bias, padding=1))
