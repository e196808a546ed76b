import copy
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import gradcheck, gradgradcheck

import fastlayers
from fastlayers import ops, tuner
from conv_samples import (TF32_FLOOR, Case, assert_training_matches, assert_within_bound,
                          cudnn_tf32, fft_passes, make_tensors, module_fft_label, opcheck_args,
                          opcheck_id, opcheck_specs, rel_err, sample_cases, torch_passes)

pytestmark = pytest.mark.gpu

CASES = list(sample_cases("full"))
SMALL = list(sample_cases("small"))
PASSES = ("forward", "input_grad", "weight_grad")
fl = torch.ops.fastlayers




def cuda_tensors(case, dtype=torch.float32, requires_grad=False):
    tensors = [t.to(dtype) for t in make_tensors(case, torch.float32, "cuda")]
    return [t.requires_grad_(requires_grad) for t in tensors]


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_float32_within_pytorch_error(case, tf32):
    x, w, b, gy = cuda_tensors(case)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    with cudnn_tf32(tf32):
        native = torch_passes(x, w, b, gy, case.padding)
        ours = fft_passes(x, w, b, gy, case.padding, case.basis, tf32=tf32)
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert_within_bound(out, r, n, floor=TF32_FLOOR if tf32 else None, what=name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_half_precision_within_pytorch_error(case, dtype):
    x, w, b, gy = cuda_tensors(case, dtype)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    native = torch_passes(x, w, b, gy, case.padding)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis)
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert_within_bound(out, r, n, what=name)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_float64_matches_pytorch(case):
    x, w, b, gy = cuda_tensors(case, torch.float64)
    ref = torch_passes(x, w, b, gy, case.padding)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis)
    for name, out, r in zip(PASSES, ours, ref):
        assert out.dtype == torch.float64 and out.device == r.device, name
        assert rel_err(out, r) <= 1e-10, name


def test_cuda_matches_cpu():
    case = Case(3, 5, 6, 14, 11, 5, 3, 2, 1, (18, 16))
    tensors = make_tensors(case, torch.float64)
    cpu = fft_passes(*tensors, case.padding, case.basis)
    cuda = fft_passes(*(t.cuda() for t in tensors), case.padding, case.basis)
    for c, g in zip(cpu, cuda):
        assert rel_err(g.cpu(), c) <= 1e-12


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_gradcheck(case):
    x, w, b, gy = cuda_tensors(case, torch.float64, requires_grad=True)
    pad, basis = case.padding, case.basis
    checks = [
        (lambda x, w, b: fl.fft_conv2d(x, w, b, pad, basis), (x, w, b)),
        (lambda gy, w: fl.fft_conv2d_input_grad(gy, w, pad, basis), (gy, w)),
        (lambda gy, x: fl.fft_conv2d_weight_grad(gy, x, pad, basis), (gy, x)),
    ]
    for fn, args in checks:
        assert gradcheck(fn, args)
        assert gradgradcheck(fn, args)


@pytest.mark.parametrize("spec", list(opcheck_specs((torch.float32, torch.float16))),
                         ids=opcheck_id)
def test_opcheck(spec):
    torch.library.opcheck(*opcheck_args(*spec, device="cuda"))


@pytest.mark.parametrize("layout", ["transposed", "channels_last", "strided"])
def test_non_contiguous_inputs(layout):
    case = Case(3, 4, 5, 9, 12, 3, 4, 1, 2, (16, 16))
    tensors = cuda_tensors(case)
    if layout == "transposed":
        moved = [t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() == 4 else t
                 for t in tensors]
    elif layout == "channels_last":
        moved = [t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t
                 for t in tensors]
    else:
        moved = [t.repeat_interleave(2, dim=-1)[..., ::2] for t in tensors]
    assert not moved[0].is_contiguous() and not moved[1].is_contiguous()
    expected = fft_passes(*tensors, case.padding, case.basis, tf32=False)
    got = fft_passes(*moved, case.padding, case.basis, tf32=False)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_empty_batch(dtype):
    case = Case(0, 3, 4, 7, 6, 3, 2, 1, 0, (9, 6))
    x, w, b, gy = cuda_tensors(case, dtype, requires_grad=True)
    y, gx, gw = fft_passes(x, w, b, gy, case.padding, case.basis)
    assert y.shape == (0, 4, 7, 5) and y.device.type == "cuda"
    assert gx.shape == (0, 3, 7, 6)
    assert gw.shape == (4, 3, 3, 2) and not gw.any()
    y.sum().backward()
    assert x.grad.shape == x.shape and not w.grad.any() and not b.grad.any()


def test_device_mismatch_names_both_arguments():
    x = torch.randn(1, 3, 5, 5, device="cuda")
    with pytest.raises(RuntimeError, match="`input` is on cuda:0 but `weight` is on cpu"):
        fl.fft_conv2d(x, torch.randn(2, 3, 3, 3), None, [0, 0], [5, 5])
    with pytest.raises(RuntimeError, match="`bias` is on cpu"):
        fl.fft_conv2d(x, torch.randn(2, 3, 3, 3, device="cuda"), torch.randn(2), [0, 0], [5, 5])


def test_autocast_float16():
    case = Case(2, 8, 6, 12, 10, 3, 5, 1, 2, (16, 16))
    x, w, b, gy = cuda_tensors(case)
    ref = torch_passes(x.double(), w.double(), b.double(), gy.double(), case.padding)
    native = torch_passes(*(t.half() for t in (x, w, b, gy)), case.padding)
    with torch.autocast("cuda", dtype=torch.float16):
        ours = fft_passes(x, w, b, gy, case.padding, case.basis)
    for name, out, r, n in zip(PASSES, ours, ref, native):
        assert out.dtype == torch.float16, name
        assert_within_bound(out, r, n, what=name)


def test_module_autocast_float16():
    ref = nn.Conv2d(3, 4, 3, padding=1).cuda()
    m = fastlayers.Conv2d(3, 4, 3, padding=1).cuda()
    m.load_state_dict(ref.state_dict())
    m.force_algorithms(forward="fft:16x16", input_grad="fft:16x16", weight_grad="fft:16x16")
    x = torch.randn(2, 3, 12, 12, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.float16):
        y = m(x)
        expected = ref(x)
    assert y.dtype == expected.dtype == torch.float16
    y64 = F.conv2d(x.double(), ref.weight.double(), ref.bias.double(), padding=1)
    assert_within_bound(y, y64, expected)
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and m.weight.grad.dtype == torch.float32


# --- tuner ---------------------------------------------------------------------------------------


def test_tuner_chooses_and_caches_on_gpu(tuner_cache, monkeypatch):
    tuner.set_budget(0.5)
    x = torch.randn(8, 32, 48, 48, device="cuda")
    w = torch.randn(32, 32, 7, 7, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (3, 3))
    assert p.device_type == "cuda" and p.capability != "-"
    labels = {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES}
    rows = {r["key"]: r for r in tuner.decisions()}
    for pass_, label in labels.items():
        row = rows[p.key(pass_)]
        assert row["source"] == "tuned" and row["choice"] == label
        assert "native" in row["times_ms"] and label in row["times_ms"]
        assert len(row["times_ms"]) + len(row["skipped"]) == len(tuner.candidates_conv2d(p, pass_))
    entries = json.loads(tuner.cache_file().read_text())["entries"]
    assert {p.key(pass_) for pass_ in tuner.PASSES} <= set(entries)

    monkeypatch.setattr(tuner, "_measure", lambda *a: pytest.fail("measured again"))
    assert {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES} == labels
    tuner.clear()
    assert {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES} == labels
    assert {r["source"] for r in tuner.decisions()} == {"file"}


def test_tuned_module_matches_nn_conv2d():
    tuner.set_budget(0.2)
    ref = nn.Conv2d(16, 16, 5, padding=2).cuda()
    m = fastlayers.Conv2d(16, 16, 5, padding=2).cuda()
    m.load_state_dict(ref.state_dict())
    x = torch.randn(4, 16, 32, 32, device="cuda", requires_grad=True)
    with cudnn_tf32(False):
        y = m(x)
        y.sum().backward()
        native = ref(x)
    assert {r["source"] for r in tuner.decisions()} == {"tuned"}
    assert len(tuner.decisions()) == 3
    y64 = F.conv2d(x.double(), ref.weight.double(), ref.bias.double(), padding=2)
    assert_within_bound(y, y64, native)


# --- training ------------------------------------------------------------------------------------


def small_cnn(conv):
    return nn.Sequential(
        conv(3, 16, 3, padding=1),
        nn.ReLU(),
        conv(16, 16, 5, padding="same", padding_mode="reflect"),
        nn.ReLU(),
        conv(16, 8, 3, padding=1, bias=False),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )


@pytest.mark.parametrize("algorithms", ["tuned", "fft"])
def test_training_steps_match_nn_conv2d(algorithms):
    tuner.set_budget(0.2)
    torch.manual_seed(3)
    ref = small_cnn(nn.Conv2d).cuda()
    fast = fastlayers.convert(copy.deepcopy(ref))
    if algorithms == "fft":
        for m in fast.modules():
            if isinstance(m, fastlayers.Conv2d):
                label = module_fft_label(m, (24, 24))
                m.force_algorithms(forward=label, input_grad=label, weight_grad=label)
    with cudnn_tf32(False):
        assert_training_matches(ref, fast, 16, (24, 24), device="cuda")
