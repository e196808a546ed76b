"""Argument checks of the Winograd ops on every device: each error names the op and the argument
at fault; empty batches and channel counts give the right shapes (and values)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fastlayers import _C
from winograd_samples import run_pass

fl = torch.ops.fastlayers


def _t(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape).to(device=device, dtype=dtype)


def _problem(device):
    """x [2, 3, 6, 6], w [4, 3, 3, 3], b [4], gy [2, 4, 6, 6]: padding 1."""
    return (_t(2, 3, 6, 6, device=device), _t(4, 3, 3, 3, device=device),
            _t(4, device=device), _t(2, 4, 6, 6, device=device))


def _forward(d, x=None, w=None, b=None, padding=(1, 1), tile=2):
    x0, w0, _, _ = _problem(d)
    return fl.winograd_conv2d(x0 if x is None else x, w0 if w is None else w, b, list(padding),
                              tile, False)


def _input_grad(d, gy=None, w=None, padding=(1, 1), tile=2):
    _, w0, _, gy0 = _problem(d)
    return fl.winograd_conv2d_input_grad(gy0 if gy is None else gy, w0 if w is None else w,
                                         list(padding), tile, False)


def _weight_grad(d, gy=None, x=None, padding=(1, 1), tile=2):
    x0, _, _, gy0 = _problem(d)
    return fl.winograd_conv2d_weight_grad(gy0 if gy is None else gy, x0 if x is None else x,
                                          list(padding), tile, False)


F_, IG, WG = "winograd_conv2d: ", "winograd_conv2d_input_grad: ", "winograd_conv2d_weight_grad: "
# name: (call taking the device, message)
BAD_ARGUMENTS = {
    # the filter size
    "weight-5x5": (lambda d: _forward(d, w=_t(4, 3, 5, 5, device=d)),
                   F_ + r"`weight` must be 3x3, got 5x5"),
    "weight-1x3": (lambda d: _forward(d, w=_t(4, 3, 1, 3, device=d)),
                   F_ + r"`weight` must be 3x3, got 1x3"),
    "input_grad-weight-3x2": (lambda d: _input_grad(d, w=_t(4, 3, 3, 2, device=d)),
                              IG + r"`weight` must be 3x3, got 3x2"),
    # tiles
    "tile-3": (lambda d: _forward(d, tile=3),
               F_ + r"`tile` must be 2, 4 or 6 \(output tiles of F\(tile x tile, 3x3\)\), got 3"),
    "tile-0": (lambda d: _forward(d, tile=0), F_ + r"`tile` must be 2, 4 or 6 .*, got 0"),
    "input_grad-tile-8": (lambda d: _input_grad(d, tile=8), IG + r"`tile` must be 2, 4 or 6"),
    "weight_grad-tile-3": (lambda d: _weight_grad(d, tile=3),
                           WG + r"`tile` must be 2 or 4 \(grad_output tiles of "
                                r"F\(3x3, tile x tile\)\), got 3"),
    "weight_grad-tile-6": (lambda d: _weight_grad(d, tile=6), WG + r"`tile` must be 2 or 4 .*got 6"),
    # padding
    "padding-negative": (lambda d: _forward(d, padding=(-1, 1)),
                         F_ + r"`padding` must be >= 0, got \[-1, 1\]"),
    "input_grad-padding-negative": (lambda d: _input_grad(d, padding=(1, -2)),
                                    IG + r"`padding` must be >= 0, got \[1, -2\]"),
    "weight_grad-padding-negative": (lambda d: _weight_grad(d, padding=(-1, 1)),
                                     WG + r"`padding` must be >= 0, got \[-1, 1\]"),
    "padding-length": (lambda d: _forward(d, padding=(1, 1, 1)),
                       F_ + r"`padding` must have 2 values \(ph, pw\), got \[1, 1, 1\]"),
    "weight_grad-padding-length": (lambda d: _weight_grad(d, padding=(1,)),
                                   WG + r"`padding` must have 2 values \(ph, pw\), got \[1\]"),
    "padding-huge": (lambda d: _forward(d, padding=(2 ** 40, 1)),
                     F_ + r"`padding` \[1099511627776, 1\] is too large"),
    "padded-input-too-large": (lambda d: _forward(d, padding=(2 ** 30, 1)),
                               F_ + r"the padded input \(2147483654, 8\) is too large"),
    # dtypes
    "dtype-mix": (lambda d: _forward(d, w=_t(4, 3, 3, 3, dtype=torch.float64, device=d)),
                  F_ + r"`input` \(Float\) and `weight` \(Double\) must have the same dtype"),
    "input_grad-dtype-mix": (lambda d: _input_grad(d, gy=_t(2, 4, 6, 6, dtype=torch.float16,
                                                            device=d)),
                             IG + r"`grad_output` \(Half\) and `weight` \(Float\) must have the "
                                  r"same dtype"),
    "weight_grad-dtype-mix": (lambda d: _weight_grad(d, x=_t(2, 3, 6, 6, dtype=torch.bfloat16,
                                                             device=d)),
                              WG + r"`grad_output` \(Float\) and `input` \(BFloat16\) must have "
                                   r"the same dtype"),
    "integer-dtype": (lambda d: _forward(d, x=torch.ones(2, 3, 6, 6, dtype=torch.int32, device=d),
                                         w=torch.ones(4, 3, 3, 3, dtype=torch.int32, device=d)),
                      F_ + r"`input` has dtype Int; supported: float32, float64"),
    "bias-dtype": (lambda d: _forward(d, b=_t(4, dtype=torch.float64, device=d)),
                   F_ + r"`bias` has dtype Double but `input` has Float"),
    # channels and batch
    "channels": (lambda d: _forward(d, w=_t(4, 2, 3, 3, device=d)),
                 F_ + r"`weight` has 2 input channels but `input` has 3"),
    "input_grad-channels": (lambda d: _input_grad(d, gy=_t(2, 5, 6, 6, device=d)),
                            IG + r"`weight` has 4 output channels but `grad_output` has 5"),
    "weight_grad-batch": (lambda d: _weight_grad(d, gy=_t(3, 4, 6, 6, device=d)),
                          WG + r"`input` has batch 2 but `grad_output` has 3"),
    # ranks
    "input-3d": (lambda d: _forward(d, x=_t(3, 6, 6, device=d)),
                 F_ + r"`input` must be 4-D, got 3-D tensor of shape \[3, 6, 6\]"),
    "weight-3d": (lambda d: _forward(d, w=_t(3, 3, 3, device=d)), F_ + r"`weight` must be 4-D"),
    "input_grad-3d": (lambda d: _input_grad(d, gy=_t(4, 6, 6, device=d)),
                      IG + r"`grad_output` must be 4-D, got 3-D"),
    "weight_grad-input-3d": (lambda d: _weight_grad(d, x=_t(3, 6, 6, device=d)),
                             WG + r"`input` must be 4-D, got 3-D"),
    "weight_grad-5d": (lambda d: _weight_grad(d, gy=_t(2, 4, 6, 6, 1, device=d)),
                       WG + r"`grad_output` must be 4-D, got 5-D"),
    # bias
    "bias-shape": (lambda d: _forward(d, b=_t(5, device=d)),
                   F_ + r"`bias` must have shape \[4\], got \[5\]"),
    "bias-2d": (lambda d: _forward(d, b=_t(4, 1, device=d)),
                F_ + r"`bias` must have shape \[4\], got \[4, 1\]"),
    # sizes that do not fit together
    "weight_grad-grad_output-width": (
        lambda d: _weight_grad(d, gy=_t(2, 4, 6, 5, device=d)),
        WG + r"`grad_output` has spatial size \(6, 5\) but a 3x3 kernel over `input` \(6, 6\) "
             r"with `padding` \[1, 1\] gives \(6, 6\)"),
    "weight_grad-grad_output-padding": (
        lambda d: _weight_grad(d, padding=(0, 1)),
        WG + r"`grad_output` has spatial size \(6, 6\) but .* gives \(4, 6\)"),
    "kernel-larger-than-padded-input": (
        lambda d: _forward(d, x=_t(1, 3, 2, 2, device=d), padding=(0, 0)),
        F_ + r"the 3x3 kernel is larger than the padded input \(2, 2\)"),
    "kernel-larger-one-side": (
        lambda d: _forward(d, x=_t(1, 3, 1, 7, device=d), padding=(0, 1)),
        F_ + r"the 3x3 kernel is larger than the padded input \(1, 9\)"),
    "weight_grad-kernel-larger": (
        lambda d: _weight_grad(d, gy=_t(1, 4, 0, 0, device=d), x=_t(1, 3, 2, 2, device=d),
                               padding=(0, 0)),
        WG + r"the 3x3 kernel is larger than the padded input \(2, 2\)"),
    "input_grad-empty-input": (
        lambda d: _input_grad(d, gy=_t(2, 4, 1, 1, device=d), padding=(2, 2)),
        IG + r"`grad_output` of spatial size \(1, 1\) with a 3x3 kernel and `padding` \[2, 2\] "
             r"implies an input of size \(-1, -1\), which is empty"),
    "input-empty-plane": (lambda d: _forward(d, x=_t(1, 3, 0, 5, device=d), padding=(2, 1)),
                          F_ + r"input spatial size must be >= 1, got \(0, 5\)"),
    "input-plane-too-large": (
        lambda d: _forward(d, x=torch.zeros(1, 1, 1, 1, device=d).expand(1, 3, 2 ** 16, 2 ** 16)),
        F_ + r"`input` has spatial size \(65536, 65536\); the ops take at most 2147483647 "
             r"elements per plane"),
}


@pytest.mark.parametrize("name", list(BAD_ARGUMENTS))
def test_bad_arguments_name_the_argument(device, name):
    call, message = BAD_ARGUMENTS[name]
    with pytest.raises(RuntimeError, match=message):
        call(device)


@pytest.mark.parametrize("name", list(BAD_ARGUMENTS))
def test_fake_kernels_refuse_as_the_ops_do(name):
    # Traced (torch.compile's fake tensors), a call fails as the eager one does, with the same
    # message, not later on a wrong shape
    call, message = BAD_ARGUMENTS[name]
    with FakeTensorMode(), pytest.raises(RuntimeError, match=message):
        call("cpu")


def test_only_the_forward_takes_a_bias(device):
    """Through the test hook, which takes a bias for any pass: the gradients refuse one."""
    x, w, b, gy = _problem(device)
    for pass_, (a, bb) in ((1, (gy, w)), (2, (gy, x))):
        with pytest.raises(RuntimeError, match="takes no bias"):
            _C.testing.winograd_conv2d_pass(pass_, a, bb, b, [1, 1], 2, False, 0)


@pytest.mark.gpu
def test_device_mismatch_names_both_arguments():
    x, w, b, gy = _problem("cuda")
    with pytest.raises(RuntimeError, match=F_ + "`input` is on cuda:0 but `weight` is on cpu"):
        fl.winograd_conv2d(x, w.cpu(), None, [1, 1], 2, False)
    with pytest.raises(RuntimeError, match=F_ + "`bias` is on cpu but `input` is on cuda:0"):
        fl.winograd_conv2d(x, w, b.cpu(), [1, 1], 2, False)
    with pytest.raises(RuntimeError, match=WG + "`grad_output` is on cuda:0 but `input` is on cpu"):
        fl.winograd_conv2d_weight_grad(gy, x.cpu(), [1, 1], 2, False)


# --- empty batches and channel counts ------------------------------------------------------------

EMPTY = {"S": (0, 3, 4), "C": (2, 0, 4), "K": (2, 3, 0), "all": (0, 0, 0)}


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("empty", list(EMPTY))
def test_empty_sizes(device, empty, tile):
    """No sample, input or output channel: every op gives its shape on the device, in the dtype,
    without running a kernel: zeros, the forward's bias broadcast where there is no input channel
    (F.conv2d gets C = 0 wrong: [S, 0, ...]); autograd gives zero gradients of the right shapes."""
    S, C, K = EMPTY[empty]
    x = torch.randn(S, C, 5, 4, device=device, requires_grad=True)
    w = torch.randn(K, C, 3, 3, device=device, requires_grad=True)
    b = torch.randn(K, device=device, requires_grad=True)
    gy = torch.randn(S, K, 5, 6, device=device)
    pad = (1, 2)
    y, gx, gw = (run_pass(p, x.detach(), w.detach(), b.detach(), gy, pad, tile)
                 for p in range(3))
    for out, shape in ((y, (S, K, 5, 6)), (gx, (S, C, 5, 4)), (gw, (K, C, 3, 3))):
        assert out.shape == shape and out.dtype == x.dtype and out.device == x.device
    torch.testing.assert_close(y, b.detach()[:, None, None].expand(S, K, 5, 6), rtol=0, atol=0)
    assert not gx.any() and not gw.any()
    y = run_pass(0, x, w, b, None, pad, tile)
    y.backward(gy)
    assert x.grad.shape == x.shape and not x.grad.any()
    assert w.grad.shape == w.shape and not w.grad.any()
    torch.testing.assert_close(b.grad, gy.sum((0, 2, 3)))



def test_fake_kernels_with_dynamic_sizes():
    # traced with symbolic sizes (torch.compile, dynamic=True): two sizes through one graph give
    # F.conv2d's values; a bad weight fails while tracing, with the op's message
    import torch.nn.functional as F

    def f(x, w):
        return fl.winograd_conv2d(x, w, None, [1, 1], 2, False)
    torch._dynamo.reset()
    g = torch.compile(f, backend="aot_eager", dynamic=True, fullgraph=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    for shape in ((2, 3, 8, 8), (3, 3, 10, 12)):
        x = torch.randn(*shape, dtype=torch.float64)
        torch.testing.assert_close(g(x, w), F.conv2d(x, w, padding=1))
    # (the sizes print as symbols: "got s6xs6")
    for bad, message in ((torch.randn(4, 3, 5, 5), r"`weight` must be 3x3, got \w+x\w+"),
                         (torch.randn(4, 2, 3, 3), r"`weight` has \w+ input channels but "
                                                   r"`input` has \w+")):
        torch._dynamo.reset()
        with pytest.raises(Exception, match=message):
            g(torch.randn(2, 3, 8, 8), bad)
