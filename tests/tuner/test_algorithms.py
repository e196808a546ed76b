"""The algorithm-choice registry: labels, calls, candidates, and a family added and removed."""
import dataclasses
import re

import pytest
import torch
import torch.nn.functional as F

import fastlayers
from fastlayers import algorithms, ops, tuner
from fastlayers.algorithms import NATIVE, Choice, FftParams, Family
from conv_samples import rel_err, torch_passes

PASSES = algorithms.CONV2D_PASSES


def problem(S=2, C=3, K=4, H=9, W=11, kh=3, kw=3, ph=1, pw=1, dtype=torch.float64):
    x = torch.randn(S, C, H, W, dtype=dtype)
    w = torch.randn(K, C, kh, kw, dtype=dtype)
    return tuner.ConvProblem.from_tensors(x, w, (ph, pw), tf32=False)


# Problems whose candidates cover untiled and tiled, both backends, rectangular bases and tiles.
PROBLEMS = [
    dict(H=9, W=11),
    dict(S=1, C=2, K=3, H=13, W=6, kh=5, kw=2, ph=2, pw=0),
    dict(S=2, C=2, K=2, H=20, W=20, kh=3, kw=3, ph=1, pw=1),
    dict(S=1, C=1, K=2, H=5, W=3, kh=1, kw=1, ph=2, pw=2),
    dict(S=1, C=2, K=2, H=100, W=90, kh=15, kw=17, ph=7, pw=3),  # large kernel: tiles from 48
    dict(S=2, C=2, K=3, H=1, W=300, kh=1, kw=31, ph=0, pw=15),  # 1-D: bases of height 1
]


@pytest.mark.parametrize("kwargs", PROBLEMS[-2:], ids=["k15x17", "1d-k31"])
def test_large_kernels_have_untiled_and_tiled_fft_in_every_pass(kwargs):
    p = problem(**kwargs)
    for pass_ in PASSES:
        fft = [c for c in algorithms.candidates(p, pass_) if c.family == "fft"]
        tiled = [c for c in fft if c.params.tile != (0, 0)]
        assert len(fft) > len(tiled) >= 1, (pass_, fft)  # cuFFT: untiled and tiled
        for c in tiled:
            (nh, nw), (th, tw) = c.params.basis, c.params.tile
            assert th + p.kh - 1 <= nh and tw + p.kw - 1 <= nw, c
            assert max(th, tw) >= min(p.kh, p.kw), c  # tiles at least as long as the kernel
            if p.H == 1:
                assert nh == 1 and th == 1, c


def all_candidates():
    for kwargs in PROBLEMS:
        p = problem(**kwargs)
        for pass_ in PASSES:
            for c in algorithms.candidates(p, pass_):
                yield p, pass_, c


def test_labels_round_trip():
    labels = {c.label for _, _, c in all_candidates()}
    assert {"native", "fft:12x14", "fbfft:16x16", "fft:8x8,tile=6x6", "fbfft:8x8,tile=6x6"} <= labels
    assert any(c.startswith("fbfft:") and "tile=" in c for c in labels)
    for label in labels:
        c = algorithms.parse(label)
        assert isinstance(c, Choice) and c.label == label == str(c)
        assert algorithms.parse(c.label) == c and algorithms.parse(c) is c
        assert hash(c) == hash(algorithms.parse(label))
        assert label.startswith(c.family + ":") or label == c.family == "native"
    with pytest.raises(dataclasses.FrozenInstanceError):
        algorithms.parse("fft:8x8").family = "fbfft"


def test_parsed_parameters():
    assert algorithms.parse("native") == NATIVE
    assert algorithms.parse("native").params == ()
    assert algorithms.parse("fft:16x12").params == FftParams("cufft", (16, 12), (0, 0))
    c = algorithms.parse("fbfft:32x32,tile=30x29")
    assert (c.family, c.params) == ("fbfft", FftParams("fbfft", (32, 32), (30, 29)))
    assert c.params.backend == "fbfft" and c.params.basis == (32, 32) and c.params.tile == (30, 29)
    # A label that spells numbers differently names the same choice, under its canonical label.
    assert algorithms.parse("fft:016x16") == algorithms.parse("fft:16x16")
    assert algorithms.parse("fft:016x16").label == "fft:16x16"
    assert algorithms.parse("fft:16x16") != algorithms.parse("fbfft:16x16")


@pytest.mark.parametrize("bad", ["winograd:4x4", "fft:16", "fft:16x16,tile=3", "fft:0x8",
                                 "fbfft:8x-8", "fft:16x16,foo", "fft", "native:1", "Native", "",
                                 "fft:16x16,tile=4x4,tile=2x2", "fft:16x16,tile=",
                                 "fft:16x16,tile=0x4", "fbfft:8", "fft:16x16,tiles=4x4",
                                 "fft:8x8,tile=axb", "winograd:3", "winograd", "winograd:",
                                 "winograd:2,fast", "winograd:4,fused", "winograd:8"])
def test_bad_labels_name_themselves(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        algorithms.parse(bad)
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        fastlayers.Conv2d(3, 4, 3).force_algorithms(input_grad=bad)
    assert algorithms.describe(bad) == bad  # the report shows what it cannot read as it is


def test_descriptions_and_determinism():
    assert algorithms.describe("native") == "PyTorch (native)"
    assert algorithms.describe("fbfft:16x16,tile=14x14") == \
        "FFT, backend fbfft, basis 16x16, tiles 14x14"
    assert algorithms.describe(algorithms.parse("fft:12x14")) == \
        "FFT, backend cufft, basis 12x14, untiled"
    assert algorithms.describe("winograd:4") == \
        "Winograd, tile 4 (F(4x4,3x3); weight gradient F(3x3,4x4))"
    assert algorithms.describe("winograd:6") == "Winograd, tile 6 (F(6x6,3x3))"
    assert all(algorithms.deterministic(c) for _, _, c in all_candidates())


def test_candidates_start_with_native_and_match_the_tuner():
    for kwargs in PROBLEMS:
        p = problem(**kwargs)
        for pass_ in PASSES:
            cands = algorithms.candidates(p, pass_)
            assert cands[0] == NATIVE and NATIVE not in cands[1:]
            assert len(set(cands)) == len(cands)
            assert tuner.candidates_conv2d(p, pass_) == [c.label for c in cands]


def test_fbfft_limit_comes_from_the_extension():
    from fastlayers import _C
    assert ops.FBFFT_MAX_BASIS == _C.FBFFT_MAX_2D
    n = ops.FBFFT_MAX_BASIS
    inside = problem(S=1, C=1, K=1, H=5, W=n - 2, ph=1, pw=1)
    outside = problem(S=1, C=1, K=1, H=5, W=n - 1, ph=1, pw=1)
    assert "fbfft:8x%d" % n in tuner.candidates_conv2d(inside, "forward")
    untiled = [c for c in tuner.candidates_conv2d(outside, "forward") if "tile=" not in c]
    assert "fft:8x%d" % (2 * n) in untiled and not any(c.startswith("fbfft:") for c in untiled)


def test_workspace_of_native_is_nothing():
    p = problem(S=8, C=16, K=16, H=30, W=30)
    assert algorithms.workspace_bytes(NATIVE, p, "forward") == 0
    assert algorithms.workspace_bytes("fft:32x32", p, "forward") > 0


def test_every_candidate_call_matches_pytorch():
    for kwargs in PROBLEMS:
        p = problem(**kwargs)
        x = torch.randn(p.S, p.C, p.H, p.W, dtype=torch.float64)
        w = torch.randn(p.K, p.C, p.kh, p.kw, dtype=torch.float64)
        b = torch.randn(p.K, dtype=torch.float64)
        gy = torch.randn(p.S, p.K, p.oh, p.ow, dtype=torch.float64)
        expected = dict(zip(PASSES, torch_passes(x, w, b, gy, (p.ph, p.pw))))
        for pass_ in PASSES:
            for c in algorithms.candidates(p, pass_):
                call = algorithms.conv2d_call(c, pass_, (p.ph, p.pw), False)
                assert algorithms.conv2d_call(c.label, pass_, [p.ph, p.pw], False) is call
                out = call(x, w, b if pass_ == "forward" else None, gy)
                assert rel_err(out, expected[pass_]) <= 1e-10, (kwargs, pass_, c)


@pytest.mark.parametrize("igrad, wgrad", [("native", "native"), ("native", "fft:16x16"),
                                          ("fbfft:16x16,tile=5x5", "native"),
                                          ("fft:12x14", "fbfft:8x8,tile=6x6")])
def test_gradients_in_one_backward(igrad, wgrad):
    x = torch.randn(2, 3, 9, 11, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    gy = torch.randn(2, 4, 9, 11, dtype=torch.float64)
    _, gx_ref, gw_ref = torch_passes(x, w, None, gy, (1, 1))
    grads = algorithms.conv2d_grads(igrad, wgrad, (1, 1), False)
    gx, gw = grads(x, w, gy, True, True)
    assert rel_err(gx, gx_ref) <= 1e-10 and rel_err(gw, gw_ref) <= 1e-10
    assert grads(x, w, gy, True, False)[1] is None
    assert grads(x, w, gy, False, True)[0] is None
    assert rel_err(grads(x, w, gy, False, True)[1], gw_ref) <= 1e-10
    assert grads(x, w, gy, False, False) == (None, None)


def test_forward_call_in_nn_layout_keeps_channels_last():
    x = torch.randn(2, 3, 9, 11, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    for label in ("native", "fft:12x14"):
        y = algorithms.conv2d_call(label, "forward", (1, 1), False, nn_layout=True)(x, w, None, None)
        assert y.is_contiguous(memory_format=torch.channels_last), label
        assert rel_err(y, F.conv2d(x, w, None, 1, 1)) <= 1e-10


def test_bad_pass_is_refused():
    with pytest.raises(ValueError, match="backward"):
        algorithms.conv2d_call("fft:8x8", "backward", (0, 0), False)


# --- a family added from outside: one object, one register call ----------------------------------


class Scaled(Family):
    """PyTorch's path, scaled by a factor named in the label ('scaled:1', 'scaled:1.001'), or failing
    ('scaled:fail'), or asking for more workspace than any bound ('scaled:huge')."""
    names = ("scaled",)
    kinds = ("conv2d",)
    keeps_input_layout = True

    def __init__(self, labels=("scaled:1",), deterministic=True):
        self.labels = labels
        self.is_deterministic = deterministic

    def parse(self, name, params, label):
        if params in ("fail", "huge"):
            return (params,)
        try:
            return (float(params),)
        except ValueError:
            raise ValueError(f"bad factor in algorithm label {label!r}") from None

    def format(self, name, params):
        return "scaled:%s" % (params[0] if isinstance(params[0], str) else repr(params[0]))

    def candidates(self, problem, pass_):
        return [algorithms.parse(label) for label in self.labels]

    def conv2d_call(self, choice, pass_, padding, tf32):
        native = algorithms.conv2d_call(NATIVE, pass_, padding, tf32)
        what = choice.params[0]
        if what == "fail":
            def fail(*args):
                raise RuntimeError("out of luck\nsecond line")
            return fail
        factor = 1.0 if what == "huge" else what
        return lambda x, w, b, gy: native(x, w, b, gy) * factor

    def workspace_bytes(self, choice, problem, pass_):
        return 1 << 60 if choice.params[0] == "huge" else 0

    def describe(self, choice):
        return "PyTorch scaled by %s" % (choice.params[0],)

    def deterministic(self, choice):
        return self.is_deterministic


@pytest.fixture
def scaled():
    family = Scaled(("scaled:1.0", "scaled:1.001", "scaled:fail", "scaled:huge"))
    algorithms.register(family)
    try:
        yield family
    finally:
        algorithms.unregister(family)


def test_added_family_shows_up_everywhere_and_leaves(scaled, monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(60)  # every candidate gets its verdict
    p = problem(dtype=torch.float32)
    c = algorithms.parse("scaled:1.0")
    assert c.family == "scaled" and c.params == (1.0,)
    assert algorithms.candidates(p, "forward")[-4:] == [
        algorithms.parse(label) for label in scaled.labels]
    assert tuner.candidates_conv2d(p, "forward")[0] == "native"

    tuner.choose_conv2d(p, "forward")
    row = {r["key"]: r for r in tuner.decisions()}[p.key("forward")]
    assert "scaled:1.0" in row["times_ms"]
    skipped = row["skipped"]
    assert skipped["scaled:1.001"].startswith("error ") and "> tolerance" in skipped["scaled:1.001"]
    assert skipped["scaled:fail"] == "failed: out of luck"
    assert skipped["scaled:huge"].startswith("workspace ")
    assert "skipped scaled:fail: failed: out of luck" in tuner.report()

    m = fastlayers.Conv2d(3, 4, 3, padding=1).force_algorithms("scaled:1.0", "scaled:1.0",
                                                               "scaled:1.0")
    x = torch.randn(2, 3, 9, 11, requires_grad=True)
    m(x).sum().backward()
    assert "use: PyTorch scaled by 1.0" in tuner.report()

    algorithms.unregister(scaled)
    assert not any(c.startswith("scaled:") for c in tuner.candidates_conv2d(p, "forward"))
    with pytest.raises(ValueError, match="'scaled:1.0'"):
        algorithms.parse("scaled:1.0")
    assert scaled not in algorithms.families()
    algorithms.register(scaled)  # for the fixture's unregister
    with pytest.raises(ValueError, match="taken"):
        algorithms.register(Scaled())


def test_deterministic_mode_drops_nondeterministic_families():
    family = algorithms.register(Scaled(deterministic=False))
    try:
        p = problem()
        assert "scaled:1.0" in tuner.candidates_conv2d(p, "forward")
        q = dataclasses.replace(p, deterministic=True)
        assert "scaled:1.0" not in tuner.candidates_conv2d(q, "forward")
        assert tuner.candidates_conv2d(q, "forward") == tuner.candidates_conv2d(p, "forward")[:-1]
    finally:
        algorithms.unregister(family)


# --- whether a choice fits a problem -------------------------------------------------------------


def test_every_candidate_fits():
    for p, pass_, c in all_candidates():
        assert algorithms.fits(c, p, pass_) is None, (p, pass_, c)
        assert algorithms.check_fits(c.label, p, pass_) == c


# (label, pass, problem kwargs, part of the reason, or None where it fits). Problem: 9x11, k 3,
# padding 1 unless said (padded input 11x13; y and grad_input 9x11).
FITS = [
    ("native", "weight_grad", {}, None),
    ("fft:11x13", "forward", {}, None),
    ("fft:100x64", "input_grad", {}, None),          # fits though no candidate
    ("fft:11x12", "forward", {}, "basis 11x12 is smaller than the padded input (11x13)"),
    ("fft:2x2", "weight_grad", {}, "basis 2x2 is smaller than the padded input (11x13)"),
    ("fft:8x8,tile=6x6", "forward", {}, None),
    ("fft:8x8,tile=6x7", "forward", {}, "basis 8x8 is smaller than tile + kernel - 1 (8x9)"),
    ("fft:16x16,tile=9x11", "input_grad", {}, None),
    ("fft:16x16,tile=10x11", "forward", {}, "tile 10x11 is larger than the output (9x11)"),
    ("fft:16x16,tile=9x12", "input_grad", {},
     "tile 9x12 is larger than the input gradient (9x11)"),
    ("fft:16x16,tile=13x11", "input_grad", dict(H=13, W=11, kh=1, kw=1, ph=0, pw=0), None),
    ("fft:16x16,tile=13x11", "forward", dict(H=9, W=11, kh=1, kw=1, ph=2, pw=0), None),
    ("fft:16x16,tile=13x11", "input_grad", dict(H=9, W=11, kh=1, kw=1, ph=2, pw=0),
     "larger than the input gradient (9x11)"),
    ("fbfft:16x16", "forward", {}, None),
    ("fbfft:12x16", "forward", {}, "fbfft takes power-of-two basis sides from 2 to 128"),
    ("fbfft:256x16", "forward", {}, "fbfft takes power-of-two basis sides from 2 to 128"),
    ("fbfft:8x8,tile=6x6", "weight_grad", {}, None),
    ("fft:65536x65536", "forward", {}, "basis 65536x65536 exceeds the ops' 2147483647 elements"),
    ("winograd:2", "forward", {}, None),
    ("winograd:6", "input_grad", {}, None),
    ("winograd:4", "weight_grad", {}, None),
    ("winograd:6", "weight_grad", {}, "the weight_grad pass takes Winograd tiles 2/4, not 6"),
    ("winograd:2", "forward", dict(kh=5, kw=5, ph=2, pw=2), "takes 3x3 filters, not 5x5"),
    ("winograd:4", "input_grad", dict(kh=1, kw=3, ph=0, pw=1), "takes 3x3 filters, not 1x3"),
]


@pytest.mark.parametrize("label, pass_, kwargs, why", FITS)
def test_fits_states_the_reason(label, pass_, kwargs, why):
    p = problem(**kwargs)
    got = algorithms.fits(label, p, pass_)
    if why is None:
        assert got is None
        assert algorithms.check_fits(label, p, pass_) == algorithms.parse(label)
    else:
        assert got is not None and why in got
        with pytest.raises(ValueError) as e:
            algorithms.check_fits(label, p, pass_)
        for part in (repr(label), pass_, p.describe(), why):
            assert part in str(e.value)


@pytest.mark.parametrize("label, pass_, kwargs, why", [f for f in FITS if "65536" not in f[0]])
def test_fits_is_what_the_ops_accept(label, pass_, kwargs, why):
    # The rule mirrors the ops' argument check: a fitting choice runs and matches PyTorch, one
    # that does not fit is refused by the op.
    p = problem(**kwargs)
    x = torch.randn(p.S, p.C, p.H, p.W, dtype=torch.float64)
    w = torch.randn(p.K, p.C, p.kh, p.kw, dtype=torch.float64)
    gy = torch.randn(p.S, p.K, p.oh, p.ow, dtype=torch.float64)
    call = algorithms.conv2d_call(label, pass_, (p.ph, p.pw), False)
    if why is None:
        expected = dict(zip(PASSES, torch_passes(x, w, None, gy, (p.ph, p.pw))))[pass_]
        assert rel_err(call(x, w, None, gy), expected) <= 1e-10
    else:
        with pytest.raises(RuntimeError, match="`basis`|`tile`|`weight` must be 3x3"):
            call(x, w, None, gy)


def test_fbfft_does_not_fit_float64_on_cuda():
    p = dataclasses.replace(problem(dtype=torch.float64), device_type="cuda")
    assert "does not take float64" in algorithms.fits("fbfft:16x16", p, "forward")
    assert algorithms.fits("fft:16x16", p, "forward") is None
    assert algorithms.fits("fbfft:16x16", problem(dtype=torch.float32), "forward") is None


def test_fits_follows_the_problems_policy():
    p = problem()
    assert "transforms are off" in algorithms.fits("fft:16x16", dataclasses.replace(
        p, transforms=False), "forward")
    assert algorithms.fits("native", dataclasses.replace(p, transforms=False), "forward") is None
    family = algorithms.register(Scaled(deterministic=False))
    try:
        q = dataclasses.replace(p, deterministic=True)
        assert algorithms.fits("scaled:1.0", p, "forward") is None
        assert "not deterministic" in algorithms.fits("scaled:1.0", q, "forward")
    finally:
        algorithms.unregister(family)


def test_fits_refuses_unknown_labels_and_passes():
    p = problem()
    with pytest.raises(ValueError, match=re.escape("'winograd:4x4'")):
        algorithms.fits("winograd:4x4", p, "forward")
    with pytest.raises(ValueError, match=re.escape("'fft:16'")):
        algorithms.check_fits("fft:16", p, "forward")
    with pytest.raises(ValueError, match="backward"):
        algorithms.fits("native", p, "backward")


def test_a_family_without_a_rule_fits_its_candidates():
    family = algorithms.register(Scaled(("scaled:1.0",)))
    try:
        p = problem()
        assert algorithms.fits("scaled:1.0", p, "forward") is None
        assert "not one of scaled's candidates" in algorithms.fits("scaled:2.0", p, "forward")
    finally:
        algorithms.unregister(family)


def test_transform_based_families_leave_with_the_switch():
    kinds = {type(f).__name__: f.transform_based for f in algorithms.families()}
    assert kinds == {"Native": False, "Fft": True, "Winograd": True, "FusedLstm": False,
                     "PersistentLstm": False}
    family = Scaled(("scaled:1.0",))
    family.transform_based = True
    algorithms.register(family)
    try:
        p = problem()
        off = dataclasses.replace(p, transforms=False)
        assert "scaled:1.0" in tuner.candidates_conv2d(p, "forward")
        assert tuner.candidates_conv2d(off, "forward") == ["native"]
    finally:
        algorithms.unregister(family)


def test_candidates_of_a_huge_layer_come_quickly():
    # good_fft_size builds its answer instead of searching: a side of 10^9 costs microseconds.
    assert ops.good_fft_size(10 ** 9 + 7) == 1000188000 and ops.good_fft_size(2 ** 40 + 1) == \
        1100753141760
    p = dataclasses.replace(problem(), H=10 ** 6, W=7, ph=0, pw=0)
    assert "fft:1000000x7" in tuner.candidates_conv2d(p, "forward")


def test_winograd_is_offered_on_both_devices():
    cpu = problem(dtype=torch.float32)
    cuda = dataclasses.replace(cpu, device_type="cuda")
    for p in (cpu, cuda):
        assert [c for c in tuner.candidates_conv2d(p, "forward") if c.startswith("winograd")] \
            == ["winograd:2", "winograd:4", "winograd:6"]
        # on CUDA the fused weight gradient too (any width)
        assert [c for c in tuner.candidates_conv2d(p, "weight_grad")
                if c.startswith("winograd")] == ["winograd:2", "winograd:4"] + (
                    ["winograd:2,fused"] if p.device_type == "cuda" else [])
        assert algorithms.fits("winograd:2", p, "forward") is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_winograd_half_offers_only_the_fused_kernel_on_cuda(dtype):
    # The non-fused pipeline won alone and lost in whole AMP steps (docs/winograd.md): on CUDA
    # the tuner offers the fused kernels (every pass); a pinned non-fused label runs as asked.
    p = dataclasses.replace(problem(dtype=dtype), device_type="cuda")
    for pass_ in tuner.PASSES:
        expected = ["winograd:2,fused"]
        assert [c for c in tuner.candidates_conv2d(p, pass_) if c.startswith("winograd")] == \
            expected
        for label in expected:
            assert algorithms.fits(label, p, pass_) is None
    assert algorithms.fits("winograd:2", p, "forward") is None
    assert [c for c in tuner.candidates_conv2d(dataclasses.replace(p, dtype="float32"),
                                              "forward") if c.startswith("winograd")] == \
        ["winograd:2", "winograd:4", "winograd:6"]
    cpu = dataclasses.replace(p, device_type="cpu")  # the fused kernel is CUDA's alone
    assert "winograd:2,fused" not in tuner.candidates_conv2d(cpu, "forward")


def test_winograd_float16_candidates_stop_at_alpha_6():
    # F(6x6,3x3) stores 8x8 transformed tiles in float16, which overflow from inputs of ~400.
    p16 = problem(dtype=torch.float16)
    assert [c for c in tuner.candidates_conv2d(p16, "forward") if c.startswith("winograd")] == \
        ["winograd:2", "winograd:4"]
    assert [c for c in tuner.candidates_conv2d(p16, "weight_grad") if c.startswith("winograd")] \
        == ["winograd:2", "winograd:4"]
    assert algorithms.fits("winograd:6", p16, "forward") is None  # pinned by hand: run as asked
    p32 = problem(dtype=torch.float32)
    assert "winograd:6" in tuner.candidates_conv2d(p32, "forward")
