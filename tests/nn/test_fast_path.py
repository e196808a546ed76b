"""The module's eager fast path: a call whose signature matches the last one reuses what that
call decided. Everything that changes the decision must be seen: layer attributes, grad mode,
which operands need gradients, dtype, deterministic mode, the tuner's state. Each test changes
one thing between two calls and checks the second call against nn.Conv2d and the ops it runs."""
import copy
import io
import warnings

import pytest
import torch
from torch import nn

import fastlayers
from fastlayers import tuner
from conv_samples import cudnn_tf32, ops_of, python_autograd_calls


def pair(device, **kwargs):
    """An nn.Conv2d and a fastlayers.Conv2d with the same parameters (float64)."""
    torch.manual_seed(0)
    ref = nn.Conv2d(3, 4, 3, **kwargs).to(device).double()
    fast = fastlayers.convert(copy.deepcopy(ref))
    return ref, fast


def assert_same(ref, fast, x):
    torch.testing.assert_close(fast(x), ref(x), rtol=1e-10, atol=1e-10)


def test_attribute_changes_after_a_call_take_effect(device):
    ref, fast = pair(device, padding=1)
    x = torch.randn(2, 3, 7, 7, device=device, dtype=torch.float64)
    assert_same(ref, fast, x)
    for m in (ref, fast):
        m.padding = (2, 0)  # nn.Conv2d reads its padding on every call
    assert_same(ref, fast, x)
    for m in (ref, fast):
        m.stride = (2, 2)  # now PyTorch's path, recorded as a fallback
    assert_same(ref, fast, x)
    assert any("stride" in d.get("reason", "") for d in tuner.decisions())
    for m in (ref, fast):
        m.stride = (1, 1)
    fast.force_algorithms(forward="fft:16x16")
    y, ops = ops_of(lambda: fast(x))
    assert ops == ["fft_conv2d"]
    torch.testing.assert_close(y, ref(x), rtol=1e-10, atol=1e-10)
    fast.transforms = False  # a pinned transform-based label is refused, not run
    with pytest.raises(ValueError, match="transform"):
        fast(x)


def test_new_weight_and_dtype_are_seen(device):
    ref, fast = pair(device, padding=1)
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    assert_same(ref, fast, x)
    w = torch.randn_like(ref.weight)
    for m in (ref, fast):
        m.weight = nn.Parameter(w.clone())
    assert_same(ref, fast, x)
    for m in (ref, fast):
        m.float()  # the same parameters, another dtype
    with pytest.raises(RuntimeError):  # as nn.Conv2d: input and weight dtypes differ
        ref(x)
    with pytest.raises(RuntimeError):
        fast(x)
    # float32 with TF32 off: the tuner may pick FFT or Winograd here (with TF32 on, whose
    # rounding it accepts, nn.Conv2d's tiny layer need not use TF32 at all). Which one depends on
    # timing, so the result is held to the tuner's contract: its error against float64 within
    # max(2 x nn.Conv2d's, the float32 floor).
    with cudnn_tf32(False):
        y, want = fast(x.float()), ref(x.float())
        assert y.dtype == torch.float32
        exact = nn.functional.conv2d(x, ref.weight.double(), ref.bias.double(), padding=1)
        err = lambda out: ((out.double() - exact).norm() / exact.norm()).item()  # noqa: E731
        assert err(y) <= max(2 * err(want), tuner.error_floor(torch.float32, False))


def test_autocast_is_seen(device):
    ref, fast = pair(device, padding=1)
    for m in (ref, fast):
        m.float()
    fast.force_algorithms(forward="fft:16x16", input_grad="native", weight_grad="native")
    x = torch.randn(2, 3, 6, 6, device=device)
    y, ops = ops_of(lambda: fast(x))
    assert y.dtype == torch.float32 and ops == ["fft_conv2d"]
    # the same call under autocast: nn.Conv2d's dtype (bfloat16 on the CPU, on PyTorch's path
    # there; float16 on CUDA, on the op)
    dt = torch.bfloat16 if device == "cpu" else torch.float16
    with torch.autocast(device, dtype=dt), warnings.catch_warnings():
        # on the CPU the pinned forward cannot serve bfloat16: said once, as a warning
        warnings.simplefilter("ignore" if device == "cpu" else "error")
        y, ops = ops_of(lambda: fast(x))
        expected = ref(x)
    assert y.dtype == expected.dtype == dt
    assert ops == ([] if device == "cpu" else ["fft_conv2d"])
    y, ops = ops_of(lambda: fast(x))  # and back
    assert y.dtype == torch.float32 and ops == ["fft_conv2d"]


def test_grad_mode_and_requires_grad_are_seen(device):
    ref, fast = pair(device, padding=1)
    fast.force_algorithms(forward="fft:8x8", input_grad="fft:8x8", weight_grad="fft:8x8")
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    xg = x.clone().requires_grad_()
    with torch.no_grad():
        y = fast(xg)  # the same input as below: only grad mode differs
    assert y.grad_fn is None
    y, ops = ops_of(lambda: fast(xg).sum().backward())
    assert sorted(ops) == ["fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad"]
    ref(xg.detach().requires_grad_()).sum().backward()
    torch.testing.assert_close(fast.weight.grad, ref.weight.grad, rtol=1e-10, atol=1e-10)
    fast.weight.requires_grad_(False)
    fast.bias.requires_grad_(False)
    # parameters frozen: only the input's requires_grad decides whether there is a backward
    assert fast(x).grad_fn is None
    xg.grad = None
    _, ops = ops_of(lambda: fast(xg).sum().backward())
    assert sorted(ops) == ["fft_conv2d", "fft_conv2d_input_grad"]
    assert xg.grad is not None


def test_tuner_state_is_seen(device):
    _, fast = pair(device, padding=1)
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    fast(x)
    tuner.clear()
    tuner.set_transforms(False)
    try:
        fast.force_algorithms(forward="fft:8x8")
        with pytest.raises(ValueError, match="transform"):
            fast(x)
    finally:
        tuner.set_transforms(True)
    _, ops = ops_of(lambda: fast(x))
    assert ops == ["fft_conv2d"]
    # a direct write to the switch (no generation bump) is seen too
    tuner._state.transforms = False
    try:
        with pytest.raises(ValueError, match="transform"):
            fast(x)
    finally:
        tuner._state.transforms = True


def test_tuner_generation_is_seen(device, monkeypatch):
    """A new tuner generation (clear(), a mode or transforms switch) alone makes the next call
    decide again: the tuner's answer changed here, and nothing else did."""
    ref, fast = pair(device, padding=1)
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    # the tuner's answer is scripted: on CUDA the real one may pick FFT at once
    answer = {"forward": "native"}
    monkeypatch.setattr(tuner, "choose_conv2d",
                        lambda p, pass_, dev: answer.get(pass_, "native"))
    with torch.no_grad():
        assert "fft_conv2d" not in ops_of(lambda: fast(x))[1]
        answer["forward"] = "fft:8x8"
        assert "fft_conv2d" not in ops_of(lambda: fast(x))[1]  # the same signature: route kept
        tuner.clear()  # a new generation
        y, ops = ops_of(lambda: fast(x))
        assert ops == ["fft_conv2d"]
        torch.testing.assert_close(y, ref(x), rtol=1e-10, atol=1e-10)


def test_deterministic_mode_is_seen(device):
    _, fast = pair(device, padding=1)
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    fast(x)
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        fast(x)
        assert any("det=1" in d["key"] for d in tuner.decisions())
    finally:
        torch.use_deterministic_algorithms(old)


def test_a_used_module_pickles_and_runs_after_loading(device):
    ref, fast = pair(device, padding=1)
    fast.force_algorithms(forward="fft:8x8")
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    fast(x)
    buf = io.BytesIO()
    torch.save(fast, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert type(loaded) is fastlayers.Conv2d and loaded._fl_forced == fast._fl_forced
    _, ops = ops_of(lambda: loaded(x))
    assert ops == ["fft_conv2d"]
    torch.testing.assert_close(loaded(x), ref(x), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(copy.deepcopy(fast)(x), ref(x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("param", ["weight", "bias"])
def test_a_parameter_needing_gradients_again_is_seen(device, param):
    ref, fast = pair(device, padding=1)
    fast.force_algorithms(forward="fft:8x8", input_grad="fft:8x8", weight_grad="fft:8x8")
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)  # no gradient
    for m in (ref, fast):
        m.weight.requires_grad_(False)
        m.bias.requires_grad_(False)
    assert fast(x).grad_fn is None
    for m in (ref, fast):
        getattr(m, param).requires_grad_(True)
        m(x).square().sum().backward()
    torch.testing.assert_close(getattr(fast, param).grad, getattr(ref, param).grad, rtol=1e-10,
                               atol=1e-10)


def test_layout_is_seen(device):
    # channels_last is another problem for the tuner (its own key and decision)
    ref, fast = pair(device, padding=1)
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    fast(x)
    xc = x.contiguous(memory_format=torch.channels_last)
    y = fast(xc)
    assert any("channels_last" in d["key"] for d in tuner.decisions())
    r = ref(xc)
    # nn.Conv2d's layout: channels_last, but contiguous for float64 on CUDA (no cuDNN NHWC there)
    assert y.is_contiguous(memory_format=torch.channels_last) == (device == "cpu")
    assert y.stride() == r.stride()
    torch.testing.assert_close(y, r, rtol=1e-10, atol=1e-10)


@pytest.mark.gpu
def test_tf32_switch_is_seen():
    ref, fast = pair("cuda", padding=1)
    fast.float()
    x = torch.randn(2, 3, 6, 6, device="cuda")
    old = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        fast(x)
        torch.backends.cudnn.allow_tf32 = True
        fast(x)
    finally:
        torch.backends.cudnn.allow_tf32 = old
    keys = [d["key"] for d in tuner.decisions()]
    assert any("tf32=0" in k for k in keys) and any("tf32=1" in k for k in keys)


def test_signature_call_checks_its_arguments(device):
    """fastlayers._C.conv_signature (a plain CPython function): TypeError for anything but
    (tensor, tensor, tensor or None, int, truth value), which the module turns into nn.Conv2d's
    own error; the bias's presence is part of the signature."""
    from fastlayers import _C
    x = torch.randn(2, 3, 5, 5, device=device)
    w = torch.randn(4, 3, 3, 3, device=device)
    b = torch.randn(4, device=device)
    sig = _C.conv_signature
    assert sig(x, w, b, 0, True) == sig(x, w, b, 0, True)
    assert sig(x, w, None, 0, True) != sig(x, w, b, 0, True)
    assert sig(x, w, b, 1, True) != sig(x, w, b, 0, True)
    assert sig(x, w, b, 0, False) != sig(x, w, b, 0, True)
    for args in ((1.0, w, b, 0, True), (x, [1], b, 0, True), (x, w, 3, 0, True),
                 (x, w, b, "0", True), (x, w, b), ()):
        with pytest.raises(TypeError):
            sig(*args)
    with pytest.raises(TypeError, match="conv2d"):  # nn.Conv2d's own error, through the module
        fastlayers.Conv2d(3, 4, 3).to(device)("not a tensor")


def test_plan_call_checks_its_arguments_and_keeps_its_plan(device):
    """A Conv2dPlan's fast_call (a plain CPython function bound to the plan, what the module calls
    every eager step): TypeError for anything but (tensor, tensor, tensor or None, truth value);
    F.conv2d's values and gradients in float64; the plan lives as long as the function, and the
    ops' own errors come through as PyTorch raises them."""
    import gc
    from fastlayers import _C, algorithms
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, device=device, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, device=device, dtype=torch.float64, requires_grad=True)
    f = algorithms.conv2d_cpp_plan(("fft:8x8", "fft:8x8", "native"), (1, 1), False, False)
    assert not isinstance(f, _C.Conv2dPlan)  # the Conv2dPlan object is gone: f holds the plan
    # other plans made and dropped reuse freed memory: a plan f did not keep would show here
    for i in range(200):
        algorithms.conv2d_cpp_plan(("native", "fft:%dx%d" % (8 + i % 3, 8 + i % 3), "native"),
                                   (i % 2, 1), bool(i % 2), False)
    gc.collect()
    for _ in range(20):
        assert ops_of(lambda: f(x.detach(), w.detach(), None, False))[1] == ["fft_conv2d"]
    for args in ((1.0, w, b, True), (x, [1], b, True), (x, w, 3, True), (x, w, b), ()):
        with pytest.raises(TypeError):
            f(*args)
    with pytest.raises(TypeError, match=r"4 to 5 positional arguments, got 6"):
        f(x, w, b, True, None, None)
    with pytest.raises(TypeError):  # positional only, as the module calls it
        f(x, w, b, need_backward=True)
    with pytest.raises(RuntimeError):  # need_backward's truth value raises: an error, no crash
        f(x, w, b, torch.ones(2))
    y, ops = ops_of(lambda: f(x, w, b, True))
    assert ops == ["fft_conv2d"]
    ref = torch.nn.functional.conv2d(x, w, b, padding=1)
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(ref)
    got, ops = ops_of(lambda: torch.autograd.grad(y, (x, w, b), g))
    assert ops == ["fft_conv2d_input_grad"]  # the weight gradient is PyTorch's
    want = torch.autograd.grad(ref, (x, w, b), g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)
    y = f(x, w, None, False)  # no backward asked: no graph
    assert y.grad_fn is None
    torch.testing.assert_close(y, ref - b.view(1, -1, 1, 1), rtol=1e-10, atol=1e-10)
    with pytest.raises(RuntimeError, match="input channels"):  # the op's own message
        f(x, torch.randn(4, 2, 3, 3, device=device, dtype=torch.float64), None, False)


@pytest.mark.parametrize("label", ["fft:16x16", "winograd:2", "native"])
def test_a_training_step_enters_no_python_autograd(label):
    # The C++ node runs each pass's op below autograd: the ops' registered (Python) autograd is
    # not entered, in the forward or the backward (Function::apply alone only turns grad mode
    # off, which still enters it).
    torch.manual_seed(0)
    fast = fastlayers.Conv2d(3, 4, 3, padding=1).double().force_algorithms(label, label, label)
    x = torch.randn(2, 3, 12, 12, dtype=torch.float64, requires_grad=True)
    fast(x).sum().backward()  # the plan made
    assert python_autograd_calls(lambda: fast(x).sum().backward()) == []
    assert python_autograd_calls(lambda: fast(x)) == []
