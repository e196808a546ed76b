"""Argument checks of the FFT-convolution ops and `fastlayers.ops.conv2d` on every device: each
error names the argument at fault."""
import pytest
import torch

from fastlayers import ops

fl = torch.ops.fastlayers


def _t(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape).to(device=device, dtype=dtype)


def _long(*shape, device="cpu"):
    return torch.ones(*shape, dtype=torch.long, device=device)


# name: (call taking the device, message)
BAD_ARGUMENTS = {
    "input-rank": (lambda d: fl.fft_conv2d(_t(3, 5, 5, device=d), _t(2, 3, 3, 3, device=d), None,
                                           [0, 0], [5, 5]),
                   r"`input` must be 4-D"),
    "weight-rank": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, device=d), None,
                                            [0, 0], [5, 5]),
                    r"`weight` must be 4-D"),
    "channels": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 4, 3, 3, device=d), None,
                                         [0, 0], [5, 5]),
                 r"`weight` has 4 input channels but `input` has 3"),
    "dtype": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                      _t(2, 3, 3, 3, dtype=torch.float64, device=d), None,
                                      [0, 0], [5, 5]),
              r"`input` \(Float\) and `weight` \(Double\) must have the same dtype"),
    "integer-dtype": (lambda d: fl.fft_conv2d(_long(1, 3, 5, 5, device=d),
                                              _long(2, 3, 3, 3, device=d), None, [0, 0], [5, 5]),
                      r"`input` has dtype Long"),
    "basis": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d), None,
                                      [1, 1], [6, 7]),
              r"`basis` \[6, 7\] must be at least the padded input size \(7, 7\)"),
    "kernel": (lambda d: fl.fft_conv2d(_t(1, 3, 4, 4, device=d), _t(2, 3, 5, 5, device=d), None,
                                       [0, 0], [8, 8]),
               r"kernel size \(5, 5\) is larger than the padded input \(4, 4\)"),
    "padding": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d), None,
                                        [-1, 0], [8, 8]),
                r"`padding` must be >= 0"),
    "bias-shape": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d),
                                           _t(3, device=d), [0, 0], [5, 5]),
                   r"`bias` must have shape \[2\]"),
    "bias-dtype": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d),
                                           _t(2, dtype=torch.float64, device=d), [0, 0], [5, 5]),
                   r"`bias` has dtype Double"),
    "input_grad-rank": (lambda d: fl.fft_conv2d_input_grad(_t(2, 3, 3, device=d),
                                                           _t(2, 3, 3, 3, device=d), [0, 0],
                                                           [5, 5]),
                        r"`grad_output` must be 4-D"),
    "input_grad-channels": (lambda d: fl.fft_conv2d_input_grad(_t(1, 3, 3, 3, device=d),
                                                               _t(2, 3, 3, 3, device=d), [0, 0],
                                                               [5, 5]),
                            r"`weight` has 2 output channels but `grad_output` has 3"),
    "input_grad-dtype": (lambda d: fl.fft_conv2d_input_grad(
        _t(1, 2, 3, 3, device=d), _t(2, 3, 3, 3, dtype=torch.float64, device=d), [0, 0], [5, 5]),
        r"`grad_output` \(Float\) and `weight` \(Double\)"),
    "input_grad-basis": (lambda d: fl.fft_conv2d_input_grad(_t(1, 2, 3, 3, device=d),
                                                            _t(2, 3, 3, 3, device=d), [1, 1],
                                                            [4, 5]),
                         r"`basis`"),
    "weight_grad-batch": (lambda d: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3, device=d),
                                                              _t(3, 3, 5, 5, device=d), [0, 0],
                                                              [5, 5]),
                          r"`input` has batch 3 but `grad_output` has 2"),
    "weight_grad-rank": (lambda d: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3, device=d),
                                                             _t(2, 3, 5, device=d), [0, 0],
                                                             [5, 5]),
                         r"`input` must be 4-D"),
    "weight_grad-size": (lambda d: fl.fft_conv2d_weight_grad(_t(2, 2, 6, 6, device=d),
                                                             _t(2, 3, 5, 5, device=d), [0, 0],
                                                             [5, 5]),
                         r"larger than the padded `input`"),
    "weight_grad-padding": (lambda d: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3, device=d),
                                                                _t(2, 3, 5, 5, device=d),
                                                                [0, -1], [5, 5]),
                            r"`padding` must be >= 0"),
    # the transform backend
    "backend": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d), None,
                                        [0, 0], [8, 8], False, "vkfft"),
                r"fft_conv2d: `backend` must be \"cufft\" or \"fbfft\", got \"vkfft\""),
    "backend-case": (lambda d: fl.fft_conv2d_input_grad(_t(1, 2, 3, 3, device=d),
                                                        _t(2, 3, 3, 3, device=d), [0, 0], [8, 8],
                                                        False, "FBFFT"),
                     r"fft_conv2d_input_grad: `backend` must be \"cufft\" or \"fbfft\""),
    "backend-weight_grad": (lambda d: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3, device=d),
                                                                _t(2, 3, 5, 5, device=d), [0, 0],
                                                                [8, 8], False, ""),
                            r"fft_conv2d_weight_grad: `backend` must be"),
    "fbfft-basis-not-pow2": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                                     _t(2, 3, 3, 3, device=d), None, [1, 1],
                                                     [12, 16], False, "fbfft"),
                             r"`basis` \[12, 16\] is not supported by `backend` \"fbfft\""),
    "fbfft-basis-too-large": (lambda d: fl.fft_conv2d_input_grad(_t(1, 2, 70, 3, device=d),
                                                                 _t(2, 3, 3, 3, device=d),
                                                                 [0, 0], [256, 8], False,
                                                                 "fbfft"),
                              r"`basis` \[256, 8\] is not supported by `backend` \"fbfft\".*"
                              r"from 2 to 128"),
    "fbfft-basis-weight_grad": (lambda d: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3, device=d),
                                                                    _t(2, 3, 5, 5, device=d),
                                                                    [0, 0], [5, 8], False,
                                                                    "fbfft"),
                                r"`basis` \[5, 8\] is not supported by `backend` \"fbfft\""),
}

# Tiles of a [1, 3, 9, 9] x [2, 3, 3, 3] problem (y and grad_output 7 x 7): the pass, basis,
# backend, tile, and the message.
BAD_TILES = {
    "negative": ("forward", [8, 8], "cufft", [-1, 4],
                 r"fft_conv2d: `tile` must be >= 0, got \[-1, 4\]"),
    "one-zero": ("forward", [8, 8], "cufft", [0, 4],
                 r"`tile` must be \[0, 0\] \(untiled\) or have both sides positive, got \[0, 4\]"),
    "one-zero-input_grad": ("input_grad", [8, 8], "cufft", [3, 0],
                            r"fft_conv2d_input_grad: `tile` must be \[0, 0\]"),
    "larger-than-output": ("forward", [16, 16], "cufft", [8, 7],
                           r"`tile` \[8, 7\] is larger than the output \(7, 7\)"),
    "larger-than-input-grad": ("input_grad", [16, 16], "cufft", [9, 10],
                               r"`tile` \[9, 10\] is larger than the input gradient \(9, 9\)"),
    "larger-than-output-weight_grad": (
        "weight_grad", [16, 16], "cufft", [2, 8],
        r"fft_conv2d_weight_grad: `tile` \[2, 8\] is larger than the output \(7, 7\)"),
    "basis-below-tile": ("forward", [8, 6], "cufft", [5, 5],
                         r"`basis` \[8, 6\] must be at least `tile` \+ kernel - 1 \(7, 7\)"),
    "basis-below-tile-input_grad": (
        "input_grad", [7, 6], "cufft", [5, 5],
        r"fft_conv2d_input_grad: `basis` \[7, 6\] must be at least `tile` \+ kernel - 1"),
    "fbfft-basis-tiled": ("forward", [7, 7], "fbfft", [5, 5],
                          r"`basis` \[7, 7\] is not supported by `backend` \"fbfft\""),
    "length": ("forward", [8, 8], "cufft", [2, 2, 2], r"tile"),
}


def tiled_call(device, pass_, basis, backend, tile):
    x, w, gy = (_t(*s, device=device) for s in ((1, 3, 9, 9), (2, 3, 3, 3), (1, 2, 7, 7)))
    if pass_ == "forward":
        return fl.fft_conv2d(x, w, None, [0, 0], basis, False, backend, tile)
    if pass_ == "input_grad":
        return fl.fft_conv2d_input_grad(gy, w, [0, 0], basis, False, backend, tile)
    return fl.fft_conv2d_weight_grad(gy, x, [0, 0], basis, False, backend, tile)


@pytest.mark.parametrize("name", list(BAD_ARGUMENTS) + ["tile-" + n for n in BAD_TILES])
def test_bad_arguments_name_the_argument(device, name):
    if name.startswith("tile-"):
        *args, message = BAD_TILES[name[5:]]
        call = lambda d: tiled_call(d, *args)  # noqa: E731
    else:
        call, message = BAD_ARGUMENTS[name]
    with pytest.raises(RuntimeError, match=message):
        call(device)


# The checks the fake kernels make as the ops do (what every convolution family checks of its
# operands, the forward's channels and bias, the padding): under torch.compile's fake tensors the
# same message. (basis, backend and tile are checked on real tensors only.)
FAKE_CHECKED = ["input-rank", "weight-rank", "channels", "dtype", "integer-dtype", "padding",
                "bias-shape", "bias-dtype", "input_grad-rank", "input_grad-dtype",
                "weight_grad-rank", "weight_grad-padding"]


@pytest.mark.parametrize("name", FAKE_CHECKED)
def test_fake_kernels_refuse_as_the_ops_do(name):
    from torch._subclasses.fake_tensor import FakeTensorMode
    call, message = BAD_ARGUMENTS[name]
    with FakeTensorMode(), pytest.raises(RuntimeError, match=message):
        call("cpu")


# Absurd sizes, refused before anything is computed or allocated (the ops' bound: 2^31 - 1
# elements per side and plane, 2^54 values in a pass's spectra). name: (call taking the device,
# error type, message). Expanded tensors give huge shapes without memory.
HUGE = 2 ** 62


def _expanded(*shape, device="cpu"):
    return torch.zeros(1, 1, 1, 1, device=device).expand(*shape)


ABSURD_SIZES = {
    "op-padding": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d),
                                           None, [HUGE, HUGE], [8, 8]),
                   RuntimeError, r"fft_conv2d: `padding` \[4611686018427387904, .* is too large"),
    "op-padding-one-side": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                                    _t(2, 3, 3, 3, device=d), None, [2 ** 40, 0],
                                                    [8, 8]),
                            RuntimeError, r"`padding` \[1099511627776, 0\] is too large"),
    "op-padded-plane": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                                _t(2, 3, 3, 3, device=d), None,
                                                [2 ** 16, 2 ** 16], [131077, 131077]),
                        RuntimeError, r"the padded input \(131077, 131077\) .* and `padding` "
                                      r"\[65536, 65536\] is too large"),
    "op-padding-input_grad": (lambda d: fl.fft_conv2d_input_grad(_t(1, 2, 3, 3, device=d),
                                                                 _t(2, 3, 3, 3, device=d),
                                                                 [HUGE, 0], [8, 8]),
                              RuntimeError, r"fft_conv2d_input_grad: `padding` .* is too large"),
    "op-padding-weight_grad": (lambda d: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3, device=d),
                                                                   _t(2, 3, 5, 5, device=d),
                                                                   [0, HUGE], [8, 8]),
                               RuntimeError, r"fft_conv2d_weight_grad: `padding` .* is too large"),
    "op-basis-plane": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d),
                                               None, [0, 0], [2 ** 20, 2 ** 20]),
                       RuntimeError, r"`basis` \[1048576, 1048576\] has 1099511627776 elements"),
    "op-basis-side": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d),
                                              None, [0, 0], [HUGE, 8]),
                      RuntimeError, r"`basis` \[4611686018427387904, 8\] is too large"),
    "op-basis-tiled": (lambda d: fl.fft_conv2d(_t(1, 3, 9, 9, device=d), _t(2, 3, 3, 3, device=d),
                                               None, [0, 0], [2 ** 16, 2 ** 16], False,
                                               "cufft", [5, 5]),
                       RuntimeError, r"`basis` \[65536, 65536\] has 4294967296 elements"),
    "op-tile": (lambda d: fl.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d), None,
                                        [1, 1], [8, 8], False, "cufft", [HUGE, HUGE]),
                RuntimeError, r"`tile` \[4611686018427387904, .* is larger than the output"),
    "op-spectra": (lambda d: fl.fft_conv2d(_expanded(2 ** 25, 1, 1, 1, device=d),
                                           _t(1, 1, 1, 1, device=d), None, [0, 0],
                                           [2 ** 15, 2 ** 15]),
                   RuntimeError, r"`basis` \[32768, 32768\] gives spectra of .* values for "
                                 r"S = 33554432"),
    "op-input-plane": (lambda d: fl.fft_conv2d(_expanded(1, 1, 2 ** 16, 2 ** 16, device=d),
                                               _t(1, 1, 3, 3, device=d), None, [0, 0], [8, 8]),
                       RuntimeError, r"`input` has spatial size \(65536, 65536\)"),
    "wrapper-padding": (lambda d: ops.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                                 _t(2, 3, 3, 3, device=d), padding=HUGE),
                        ValueError, r"`padding` \[4611686018427387904, .* is too large"),
    "wrapper-padded-basis": (lambda d: ops.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                                      _t(2, 3, 3, 3, device=d), padding=2 ** 30),
                             ValueError, r"padded by `padding` \[1073741824, 1073741824\] needs "
                                         r"a basis of \[2147483653, 2147483653\]"),
    "wrapper-padding-fbfft": (lambda d: ops.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                                       _t(2, 3, 3, 3, device=d),
                                                       padding=(0, 2 ** 31), backend="fbfft"),
                              ValueError, r"`padding` \[0, 2147483648\] is too large"),
    "wrapper-padding-input_grad": (lambda d: ops.fft_conv2d_input_grad(
        _t(1, 2, 3, 3, device=d), _t(2, 3, 3, 3, device=d), padding=HUGE),
        ValueError, r"`padding` .* is too large"),
    "wrapper-padding-weight_grad": (lambda d: ops.fft_conv2d_weight_grad(
        _t(2, 2, 3, 3, device=d), _t(2, 3, 5, 5, device=d), padding=(HUGE, 1)),
        ValueError, r"`padding` .* is too large"),
    "wrapper-basis": (lambda d: ops.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                               _t(2, 3, 3, 3, device=d), basis=2 ** 70),
                      ValueError, r"`basis` \[1180591620717411303424, .* is too large"),
    "wrapper-tile": (lambda d: ops.fft_conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d),
                                              tile=HUGE),
                     ValueError, r"`tile` \[4611686018427387904, .* is too large"),
    "wrapper-tile-basis": (lambda d: ops.fft_conv2d(_t(1, 3, 5, 5, device=d),
                                                    _t(2, 3, 3, 3, device=d), tile=2 ** 31 - 1),
                           ValueError, r"`tile` \[2147483647, 2147483647\] \+ kernel - 1 needs "
                                       r"a basis of \[2147483649, 2147483649\]"),
    "conv2d-padding": (lambda d: ops.conv2d(_t(1, 3, 5, 5, device=d), _t(2, 3, 3, 3, device=d),
                                            padding=HUGE),
                       ValueError, r"`padding` .* is too large"),
}


@pytest.mark.parametrize("name", list(ABSURD_SIZES))
def test_absurd_sizes_name_the_argument(device, name):
    call, error, message = ABSURD_SIZES[name]
    with pytest.raises(error, match=message):
        call(device)


@pytest.mark.parametrize("kwargs, name", [
    (dict(stride=2), "stride"),
    (dict(stride=(1, 2)), "stride"),
    (dict(dilation=2), "dilation"),
    (dict(groups=2), "groups"),
    (dict(padding="full"), "padding"),
    (dict(padding=(1, 1, 1)), "padding"),
])
def test_conv2d_rejects_unsupported_arguments(kwargs, name):
    x, w = _t(1, 4, 8, 8), _t(2, 4, 3, 3)
    with pytest.raises(ValueError, match="`%s`" % name):
        ops.conv2d(x, w, **kwargs)


@pytest.mark.gpu
def test_device_mismatch_names_both_arguments():
    x = torch.randn(1, 3, 5, 5, device="cuda")
    with pytest.raises(RuntimeError, match="`input` is on cuda:0 but `weight` is on cpu"):
        fl.fft_conv2d(x, torch.randn(2, 3, 3, 3), None, [0, 0], [5, 5])
    with pytest.raises(RuntimeError, match="`bias` is on cpu"):
        fl.fft_conv2d(x, torch.randn(2, 3, 3, 3, device="cuda"), torch.randn(2), [0, 0], [5, 5])
