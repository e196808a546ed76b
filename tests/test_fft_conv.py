import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from fastlayers import ops
from conv_samples import (Case, assert_within_bound, fft_passes, make_tensors, opcheck_args,
                          opcheck_id, opcheck_specs, rel_err, sample_cases, torch_passes)

CASES = list(sample_cases("full"))
SMALL = list(sample_cases("small"))
PASSES = ("forward", "input_grad", "weight_grad")
fl = torch.ops.fastlayers


@pytest.mark.parametrize("case", CASES, ids=str)
def test_float32_within_pytorch_error(case):
    x, w, b, gy = make_tensors(case, torch.float32)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    native = torch_passes(x, w, b, gy, case.padding)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis)
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert_within_bound(out, r, n, what=name)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_float64_matches_pytorch(case):
    x, w, b, gy = make_tensors(case, torch.float64)
    ref = torch_passes(x, w, b, gy, case.padding)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis)
    for name, out, r in zip(PASSES, ours, ref):
        assert out.dtype == torch.float64 and out.shape == r.shape, name
        assert rel_err(out, r) <= 1e-10, name


def test_python_wrappers_default_to_the_smallest_fast_basis():
    case = Case(2, 3, 4, 9, 11, 3, 5, 1, 2, ops.default_basis((9, 11), (1, 2)))
    assert case.basis == (12, 15)
    x, w, b, gy = make_tensors(case, torch.float64)
    expected = fft_passes(x, w, b, gy, case.padding, case.basis)
    got = (ops.fft_conv2d(x, w, b, padding=(1, 2)),
           ops.fft_conv2d_input_grad(gy, w, padding=(1, 2)),
           ops.fft_conv2d_weight_grad(gy, x, padding=(1, 2)))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_conv_tf32_allowed_follows_pytorch():
    conv = torch.backends.cudnn.conv
    old = conv.fp32_precision
    try:
        conv.fp32_precision = "ieee"
        assert ops.conv_tf32_allowed() is False
        conv.fp32_precision = "tf32"
        assert ops.conv_tf32_allowed() is True
    finally:
        conv.fp32_precision = old


def test_good_fft_size():
    assert [ops.good_fft_size(n) for n in (0, 1, 7, 11, 13, 17, 97, 121)] == [
        1, 1, 7, 12, 14, 18, 98, 125]


# --- gradients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_gradcheck_forward(case):
    x, w, b, _ = make_tensors(case, torch.float64, requires_grad=True)

    def fn(x, w, b):
        return fl.fft_conv2d(x, w, b, case.padding, case.basis)

    assert gradcheck(fn, (x, w, b))
    assert gradgradcheck(fn, (x, w, b))


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_gradcheck_input_grad(case):
    _, w, _, gy = make_tensors(case, torch.float64, requires_grad=True)

    def fn(gy, w):
        return fl.fft_conv2d_input_grad(gy, w, case.padding, case.basis)

    assert gradcheck(fn, (gy, w))
    assert gradgradcheck(fn, (gy, w))


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_gradcheck_weight_grad(case):
    x, _, _, gy = make_tensors(case, torch.float64, requires_grad=True)

    def fn(gy, x):
        return fl.fft_conv2d_weight_grad(gy, x, case.padding, case.basis)

    assert gradcheck(fn, (gy, x))
    assert gradgradcheck(fn, (gy, x))


def test_autograd_matches_pytorch():
    case = Case(3, 4, 5, 10, 7, 4, 3, 2, 1, (16, 12))
    x, w, b, _ = make_tensors(case, torch.float64, requires_grad=True)
    ours = fl.fft_conv2d(x, w, b, case.padding, case.basis)
    ref = F.conv2d(x, w, b, 1, case.padding)
    gy = torch.randn_like(ref)
    for g_ours, g_ref in zip(torch.autograd.grad(ours, (x, w, b), gy),
                             torch.autograd.grad(ref, (x, w, b), gy)):
        assert rel_err(g_ours, g_ref) <= 1e-10


# --- opcheck -----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", list(opcheck_specs()), ids=opcheck_id)
def test_opcheck(spec):
    torch.library.opcheck(*opcheck_args(*spec))


# --- layouts and edge cases --------------------------------------------------------------------


def _relayout(t, layout):
    if layout == "transposed" and t.dim() == 4:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "strided":
        return t.repeat_interleave(2, dim=-1)[..., ::2]
    return t


@pytest.mark.parametrize("layout", ["transposed", "channels_last", "strided"])
def test_non_contiguous_inputs(layout):
    case = Case(3, 4, 5, 9, 12, 3, 4, 1, 2, (16, 16))
    tensors = make_tensors(case)
    moved = [_relayout(t, layout) for t in tensors]
    assert not moved[0].is_contiguous() and not moved[1].is_contiguous()
    expected = fft_passes(*tensors, case.padding, case.basis)
    got = fft_passes(*moved, case.padding, case.basis)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)


def test_empty_batch():
    case = Case(0, 3, 4, 7, 6, 3, 2, 1, 0, (9, 6))
    x, w, b, gy = make_tensors(case, requires_grad=True)
    y, gx, gw = fft_passes(x, w, b, gy, case.padding, case.basis)
    assert y.shape == (0, 4, 7, 5)
    assert gx.shape == (0, 3, 7, 6)
    assert gw.shape == (4, 3, 3, 2) and not gw.any()
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert not w.grad.any() and not b.grad.any()
    assert ops.conv2d(x.detach(), w.detach(), padding="same").shape == (0, 4, 7, 6)


# --- argument checks ---------------------------------------------------------------------------


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


BAD_ARGUMENTS = {
    "input-rank": (lambda: fl.fft_conv2d(_t(3, 5, 5), _t(2, 3, 3, 3), None, [0, 0], [5, 5]),
                   r"`input` must be 4-D"),
    "weight-rank": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3), None, [0, 0], [5, 5]),
                    r"`weight` must be 4-D"),
    "channels": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 4, 3, 3), None, [0, 0], [5, 5]),
                 r"`weight` has 4 input channels but `input` has 3"),
    "dtype": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3, 3, dtype=torch.float64), None,
                                    [0, 0], [5, 5]),
              r"`input` \(Float\) and `weight` \(Double\) must have the same dtype"),
    "integer-dtype": (lambda: fl.fft_conv2d(torch.ones(1, 3, 5, 5, dtype=torch.long),
                                            torch.ones(2, 3, 3, 3, dtype=torch.long), None,
                                            [0, 0], [5, 5]),
                      r"`input` has dtype Long"),
    "basis": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3, 3), None, [1, 1], [6, 7]),
              r"`basis` \[6, 7\] must be at least the padded input size \(7, 7\)"),
    "kernel": (lambda: fl.fft_conv2d(_t(1, 3, 4, 4), _t(2, 3, 5, 5), None, [0, 0], [8, 8]),
               r"kernel size \(5, 5\) is larger than the padded input \(4, 4\)"),
    "padding": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3, 3), None, [-1, 0], [8, 8]),
                r"`padding` must be >= 0"),
    "bias-shape": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3, 3), _t(3), [0, 0], [5, 5]),
                   r"`bias` must have shape \[2\]"),
    "bias-dtype": (lambda: fl.fft_conv2d(_t(1, 3, 5, 5), _t(2, 3, 3, 3),
                                         _t(2, dtype=torch.float64), [0, 0], [5, 5]),
                   r"`bias` has dtype Double"),
    "input_grad-rank": (lambda: fl.fft_conv2d_input_grad(_t(2, 3, 3), _t(2, 3, 3, 3), [0, 0],
                                                         [5, 5]),
                        r"`grad_output` must be 4-D"),
    "input_grad-channels": (lambda: fl.fft_conv2d_input_grad(_t(1, 3, 3, 3), _t(2, 3, 3, 3),
                                                             [0, 0], [5, 5]),
                            r"`weight` has 2 output channels but `grad_output` has 3"),
    "input_grad-dtype": (lambda: fl.fft_conv2d_input_grad(_t(1, 2, 3, 3),
                                                          _t(2, 3, 3, 3, dtype=torch.float64),
                                                          [0, 0], [5, 5]),
                         r"`grad_output` \(Float\) and `weight` \(Double\)"),
    "input_grad-basis": (lambda: fl.fft_conv2d_input_grad(_t(1, 2, 3, 3), _t(2, 3, 3, 3), [1, 1],
                                                          [4, 5]),
                         r"`basis`"),
    "weight_grad-batch": (lambda: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3), _t(3, 3, 5, 5),
                                                            [0, 0], [5, 5]),
                          r"`input` has batch 3 but `grad_output` has 2"),
    "weight_grad-rank": (lambda: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3), _t(2, 3, 5), [0, 0],
                                                           [5, 5]),
                         r"`input` must be 4-D"),
    "weight_grad-size": (lambda: fl.fft_conv2d_weight_grad(_t(2, 2, 6, 6), _t(2, 3, 5, 5),
                                                           [0, 0], [5, 5]),
                         r"larger than the padded `input`"),
    "weight_grad-padding": (lambda: fl.fft_conv2d_weight_grad(_t(2, 2, 3, 3), _t(2, 3, 5, 5),
                                                              [0, -1], [5, 5]),
                            r"`padding` must be >= 0"),
}


@pytest.mark.parametrize("name", BAD_ARGUMENTS)
def test_bad_arguments_name_the_argument(name):
    call, message = BAD_ARGUMENTS[name]
    with pytest.raises(RuntimeError, match=message):
        call()


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


# --- the F.conv2d-like wrapper -------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("kernel", [(1, 1), (3, 3), (5, 3), (2, 2), (4, 4), (2, 5), (6, 1)])
@pytest.mark.parametrize("padding", ["same", "valid", 0, 1, (2, 1)])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_conv2d_matches_torch(kernel, padding, batched):
    x = torch.randn(2, 3, 9, 10, dtype=torch.float64)
    w = torch.randn(4, 3, *kernel, dtype=torch.float64)
    b = torch.randn(4, dtype=torch.float64)
    if not batched:
        x = x[0]
    ref = F.conv2d(x, w, b, padding=padding)
    out = ops.conv2d(x, w, b, padding=padding)
    assert out.shape == ref.shape
    assert rel_err(out, ref) <= 1e-10
    if padding == "same":
        assert out.shape[-2:] == x.shape[-2:]


def test_conv2d_explicit_basis():
    x = torch.randn(2, 3, 9, 10, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    ref = F.conv2d(x, w, padding=1)
    for basis in [(11, 12), 16, (32, 13)]:
        assert rel_err(ops.conv2d(x, w, padding=1, basis=basis), ref) <= 1e-10
    with pytest.raises(RuntimeError, match="`basis`"):
        ops.conv2d(x, w, padding=1, basis=(10, 12))


# --- autocast ----------------------------------------------------------------------------------


def test_autocast_cpu_bfloat16():
    case = Case(2, 8, 6, 12, 10, 3, 5, 1, 2, (16, 16))
    x, w, b, gy = make_tensors(case)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    native = torch_passes(*(t.bfloat16() for t in (x, w, b, gy)), case.padding)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = fft_passes(x, w, b, gy, case.padding, case.basis)
        native_forward = F.conv2d(x, w, b, padding=case.padding)
        wrapped = ops.conv2d(x, w, b, padding=case.padding)
    assert native_forward.dtype == wrapped.dtype == torch.bfloat16
    torch.testing.assert_close(native_forward, native[0], rtol=0, atol=0)
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert out.dtype == torch.bfloat16, name
        assert_within_bound(out, r, n, what=name)
    assert_within_bound(wrapped, ref[0], native[0], what="conv2d")


def test_autocast_cpu_bfloat16_backward():
    case = Case(2, 4, 5, 11, 9, 3, 3, 1, 1, (13, 11))
    x, w, b, gy = make_tensors(case)
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    ref = torch.autograd.grad(F.conv2d(*(t.double() for t in leaves), padding=case.padding),
                              leaves, gy.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = fl.fft_conv2d(*leaves, case.padding, case.basis)
        native = F.conv2d(*leaves, padding=case.padding)
    assert ours.dtype == native.dtype == torch.bfloat16
    g_ours = torch.autograd.grad(ours, leaves, gy.bfloat16())
    g_native = torch.autograd.grad(native, leaves, gy.bfloat16())
    for name, go, gn, r in zip(("input", "weight", "bias"), g_ours, g_native, ref):
        assert go.dtype == torch.float32, name
        assert_within_bound(go, r, gn, floor=1.6e-2, what=name)
