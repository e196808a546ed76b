"""lstm_persistent and its backward lstm_backward_persistent (each recurrence as one cooperative
kernel on CUDA; lstm's and lstm_backward's kernels on the CPU) against nn.LSTM per device and
precision with lstm's rule (lstm_samples.py): values and every gradient; their reserve and
gradients against the step-wise ops'; their errors, where they fit, the module pinned to them and
the tuner's candidate."""
import copy

import pytest
import torch
from torch import nn

import fastlayers
from conv_samples import RecordOps, cudnn_tf32, rel_err
from lstm_samples import (CASES, ERROR_FACTOR, PRECISIONS, Case, check_results, inputs,
                          reference_module, run_case, skip_unless_supported, weights)
from fastlayers import algorithms
from fastlayers.tuner.lstm import LstmProblem

fl = torch.ops.fastlayers

# Padded, no projection (what the kernel takes): lstm's cases of that kind, and the kernel's own
# geometry: hidden sizes below and above the SM count (one unit per block; several, the last
# block with fewer), batches not a multiple of the rows a warp shares a weight load across, and
# a batch of 64. Batches above 4 in float16 and bfloat16 run the gate products on tensor cores
# (16 batch rows x 8 gate rows a tile): batches and gate rows that fill no tile, hidden sizes not
# a multiple of 16 (padded) or of 8 (h_{t-1} loaded element by element).
# The persistent backward on the grid serves batches up to 16 (above, lstm_persistent's gradient
# is lstm_backward's, except where the cluster kernels below serve): its blocks own a power of
# two of units (1, 2, 4, 8, 16: the least spreading H over the SMs; 601 and 1100 leave the last
# block partial), and its products group 32 / units batch rows (B 5 fills no group). Float32's
# w_hh columns at 16 units a block (H above 1056 on an H100) do not fit shared memory: there the
# gradient is lstm_backward's.
# Float32 at H 512, 256 and 128 (4, 4 and 8 units a block) runs the kernel that holds w_hh in
# registers: batch rows in groups of 8 (B 9, 13 and 20 leave the last group partial), two warps a
# row tile at 4 units a block, one at 8; from batch 32 at H 512 and 256 the batch in two halves
# (B 64: 32 rows each; B 37: 19 and 18; B 45: 23 and 22, partial groups) at twice the units a
# block; H 128 at B 60: 8 groups of batch rows, more commit groups than cp.async's waits name.
# On the CPU the op is lstm's kernel: there the geometry cases check it at larger H.
PADDED_CASES = [c for c in CASES if c.lengths is None and c.P == 0]
GEOMETRY_CASES = [
    Case(6, 5, 7, 133, 0, None, True, True),
    Case(5, 3, 9, 300, 0, None, False, False),
    Case(3, 64, 8, 64, 0, None, False, True),
    Case(9, 1, 16, 512, 0, None, True, True),
    Case(4, 17, 5, 133, 0, None, True, False),
    Case(3, 40, 6, 300, 0, None, False, True),
    Case(3, 24, 8, 72, 0, None, True, True),
    Case(5, 64, 32, 512, 0, None, True, False),
    Case(3, 16, 8, 601, 0, None, False, True),
    Case(3, 5, 8, 1100, 0, None, True, True),
    Case(4, 13, 8, 512, 0, None, False, True),
    Case(4, 9, 8, 256, 0, None, True, True),
    Case(3, 20, 8, 128, 0, None, False, False),
    Case(3, 37, 8, 256, 0, None, True, True),
    Case(3, 45, 8, 512, 0, None, False, True),
    Case(2, 60, 8, 128, 0, None, True, True),
]
PERSISTENT_CASES = PADDED_CASES + GEOMETRY_CASES


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", PERSISTENT_CASES, ids=str)
def test_persistent_op_matches_nn_lstm(device, case, precision):
    skip_unless_supported(device, precision)
    if device == "cuda" and precision == "float64":
        pytest.skip("the persistent kernel takes float32, float16 and bfloat16")
    ours, ref, native = run_case(case, precision, device, op="lstm_persistent")
    check_results(case, ours, ref, native, precision)


# float16 and bfloat16 at H 128, 256 and 512 run on thread-block clusters of H / 32 blocks (sm_90
# on), forward and backward, a cluster for every 4 batch rows up to what the device holds at once
# (an H100: 30, 15 and 7 at H 128, 256 and 512), then up to 16 rows a cluster: one cluster (B up
# to 4), several (B 5 to 40) with partial n-tiles and uneven rows, T 1 (no exchange), T 2 (one
# phase of one buffer's mbarrier), T 64 (32 phases of each), both directions, with and without
# biases, at every H; on an H100 one full n-tile a cluster at H 512 B 56 (7 x 8 rows), two
# n-tiles at H 512 B 64, 100 and 112 (7 x 16 rows: every cell warp), H 256 B 130 and H 128 B 250
# (test_the_cluster_cases_cover_the_plans checks which plans the device gives them).
CLUSTER_CASES = [
    Case(2, 4, 8, 128, 0, None, True, False),
    Case(64, 6, 8, 128, 0, None, False, True),
    Case(5, 2, 12, 256, 0, None, True, True),
    Case(7, 1, 16, 512, 0, None, False, True),
    Case(6, 5, 24, 512, 0, None, True, True),
    Case(5, 8, 8, 256, 0, None, False, False),
    Case(4, 9, 16, 512, 0, None, True, False),
    Case(9, 16, 8, 128, 0, None, False, True),
    Case(3, 13, 16, 256, 0, None, True, True),
    Case(1, 3, 8, 128, 0, None, False, True),
    Case(8, 16, 32, 512, 0, None, True, True),
    Case(5, 17, 8, 128, 0, None, True, True),
    Case(4, 40, 8, 256, 0, None, False, True),
    Case(3, 64, 8, 512, 0, None, True, False),
    Case(3, 100, 8, 512, 0, None, False, True),
    Case(2, 56, 8, 512, 0, None, False, True),
    Case(2, 112, 8, 512, 0, None, True, True),
    Case(2, 130, 8, 256, 0, None, True, False),
    Case(2, 250, 8, 128, 0, None, False, True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", CLUSTER_CASES, ids=str)
def test_cluster_kernel_matches_nn_lstm(case, precision):
    skip_unless_supported("cuda", precision)
    dtype = getattr(torch, precision)
    assert fastlayers.lstm.persistent_kernel(case.B, case.H, dtype, "cuda") in _cluster_expected(
        case.H, case.B)
    ours, ref, native = run_case(case, precision, "cuda", op="lstm_persistent")
    check_results(case, ours, ref, native, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [Case(6, 9, 8, 128, 0, None, True, True),
                                  Case(5, 3, 8, 512, 0, None, False, True)], ids=str)
def test_cluster_results_and_reserve_are_lstms(case, dtype):
    # The cluster kernel's results and reserve (what lstm_backward reads) against lstm's (the
    # step-wise kernels): the same values to the products' summation order, over 6 steps.
    m = reference_module(case, dtype, "cuda")
    x, h0, c0 = inputs(case, dtype, "cuda")
    w = weights(m, case.reverse)
    a = fl.lstm(x, h0, c0, *w, None, case.reverse, False)
    b = fl.lstm_persistent(x, h0, c0, *w, None, case.reverse, False)
    for u, v in zip(a, b):
        assert u.shape == v.shape and u.dtype == v.dtype
        tol = 2 * torch.finfo(dtype).eps  # two units of the storage's last place at 1
        torch.testing.assert_close(v.float(), u.float(), rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [Case(6, 9, 8, 128, 0, None, True, True),
                                  Case(5, 1, 8, 256, 0, None, False, True),
                                  Case(7, 16, 8, 512, 0, None, True, True),
                                  Case(4, 40, 8, 256, 0, None, False, True),
                                  Case(3, 100, 8, 512, 0, None, True, True)], ids=str)
def test_cluster_backward_is_as_accurate_as_lstm_backwards(case, dtype):
    # On one reserve and upstream gradients, every result of lstm_backward_persistent (the
    # cluster kernel, which sums each block's partial products of dh in another order) is within
    # ERROR_FACTOR x lstm_backward's own error against lstm_backward in float64 on the same
    # operands, with and without grad_h_n / grad_c_n and the weight gradients.
    kernel = fastlayers.lstm.persistent_kernel(case.B, case.H, dtype, "cuda", backward=True)
    assert kernel in _cluster_expected(case.H, case.B, backward=True)
    if kernel is None:
        pytest.skip("batch %d does not fit this device's clusters" % case.B)
    m = reference_module(case, dtype, "cuda")
    x, h0, c0 = inputs(case, dtype, "cuda")
    w = [t if t is None else t.detach() for t in weights(m, case.reverse)]
    _, _, _, reserve, reserve_h = fl.lstm(x, h0, c0, *w, None, case.reverse, False)
    gen = torch.Generator().manual_seed(5)
    dy, dh, dc = (torch.randn(*s, generator=gen).to("cuda", dtype) for s in (
        (case.T, case.B, case.H), (case.B, case.H), (case.B, case.H)))
    for g_h, g_c, need_w in ((dh, dc, True), (None, None, False), (dh, None, True)):
        args = [dy, g_h, g_c, x, h0, c0, w[0], w[1], None, None, reserve, reserve_h,
                case.reverse, False, True, need_w]
        ref = fl.lstm_backward(*[a.double() if isinstance(a, torch.Tensor) else a
                                 for a in args])
        step = fl.lstm_backward(*args)
        ours = fl.lstm_backward_persistent(*args)
        for k, (u, v, r) in enumerate(zip(step, ours, ref)):
            assert u.shape == v.shape and u.dtype == v.dtype, k
            if r.numel() == 0:
                continue
            own, err = rel_err(u, r), rel_err(v, r)
            assert err <= ERROR_FACTOR * max(own, torch.finfo(dtype).eps), (k, err, own)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_rows_results_do_not_depend_on_its_cluster(dtype):
    # Every batch row runs the same arithmetic whichever cluster and n-tile it falls in: rows 40-43
    # of a batch of 100 at H 512 (several clusters of two n-tiles, a boundary between them on an
    # H100) equal, bit for bit, the same four rows run alone (one cluster, one n-tile), forward
    # (outputs, states, reserve) and backward (h0's and c0's gradients). w_ih is zero, so the
    # input products are exactly zero whatever GEMM the batch's size chooses.
    case = Case(5, 100, 8, 512, 0, None, False, True)
    if fastlayers.lstm.persistent_kernel(100, 512, dtype, "cuda", backward=True) != "cluster":
        pytest.skip("batch 100 does not fit this device's clusters at hidden 512")
    m = reference_module(case, dtype, "cuda")
    x, h0, c0 = inputs(case, dtype, "cuda")
    w = [t.detach() for t in weights(m, False)[:4]]
    w[0] = torch.zeros_like(w[0])
    gen = torch.Generator().manual_seed(3)
    dy, dh, dc = (torch.randn(*s, generator=gen).to("cuda", dtype) for s in (
        (case.T, case.B, case.H), (case.B, case.H), (case.B, case.H)))
    rows = slice(40, 44)
    runs = []
    for sub in (lambda t: t, lambda t: t[:, rows].contiguous()):
        xs, hs, cs = sub(x), sub(h0[None])[0], sub(c0[None])[0]
        out, h_n, c_n, reserve, reserve_h = fl.lstm_persistent(xs, hs, cs, *w, None, None, False,
                                                                False)
        n = xs.shape[1]
        grads = fl.lstm_backward_persistent(sub(dy), sub(dh[None])[0], sub(dc[None])[0], xs, hs,
                                            cs, w[0], w[1], None, None, reserve, reserve_h, False,
                                            False, True, False)
        runs.append([out, h_n[None], c_n[None], reserve.view(case.T, n, -1),
                     reserve_h.view(case.T, n, -1), grads[1][None], grads[2][None]])
    for k, (whole, alone) in enumerate(zip(*runs)):
        assert torch.equal(whole[:, rows] if whole.shape[1] == 100 else whole, alone), k


def _cluster_expected(H, B=1, backward=False):
    """The kernels expected at hidden H and batch B in a half type. Clusters of 4 and 8 blocks are
    portable on sm_90; 16 (H 512) needs a GPC with 16 free SMs, as the H100 SXM and H200 (132
    SMs) have. Above 16 rows the batch needs several clusters at once, as many as the chip's
    GPCs hold (an H100: 30, 15 and 7 at H 128, 256 and 512); past them it runs on the grid (the
    backward: not persistent at all above batch 16)."""
    props = torch.cuda.get_device_properties(0)
    other = "grid" if not backward or B <= 16 else None
    if props.major < 9:
        return {other}
    if B <= 16 and (H < 512 or props.multi_processor_count >= 132):
        return {"cluster"}
    return {"cluster", other}


def _clusters(B, H, dtype=torch.float16, backward=False):
    """(clusters, n-tiles a cluster) of the cluster kernels' plan; (0, 0) where they do not
    serve."""
    return tuple(fastlayers._C.lstm_persistent_clusters(B, H, str(dtype).replace("torch.", ""),
                                                        torch.cuda.current_device(), backward))


@pytest.mark.gpu
@pytest.mark.parametrize("H", [128, 256, 512])
def test_the_cluster_cases_cover_the_plans(H):
    # On a device whose clusters fit as an H100's do (the most clusters any batch gets: 30, 15, 7
    # at H 128, 256, 512), CLUSTER_CASES at H run one cluster, several with one n-tile and several
    # with two, forward and backward alike; at H 512, a full n-tile (8 rows) and 16 rows a
    # cluster. Elsewhere the plans differ and the cases still check whatever runs.
    capacity = max(_clusters(B, H)[0] for B in range(4, 16 * 40, 4))
    if _cluster_expected(H) != {"cluster"} or capacity != {128: 30, 256: 15, 512: 7}[H]:
        pytest.skip("this device's clusters are not an H100's (%d at hidden %d)" % (capacity, H))
    batches = [c.B for c in CLUSTER_CASES if c.H == H]
    for backward in (False, True):
        plans = [_clusters(B, H, backward=backward) for B in batches]
        assert (1, 1) in plans, plans
        assert any(g > 1 and t == 1 for g, t in plans), plans
        assert any(g > 1 and t == 2 for g, t in plans), plans
    if H == 512:
        rows = {-(-B // _clusters(B, H)[0]) for B in batches}
        assert {8, 16} <= rows, rows


@pytest.mark.gpu
def test_which_persistent_kernel():
    kernel = fastlayers.lstm.persistent_kernel
    for dt in (torch.float16, torch.bfloat16):
        for H in (128, 256, 512):
            for B in (1, 8, 9, 16, 17, 64):
                assert kernel(B, H, dt, "cuda") in _cluster_expected(H, B), (H, B, dt)
        assert kernel(8, 384, dt, "cuda") == "grid" and kernel(8, 1024, dt, "cuda") == "grid"
    # w_hh's rows in registers at 8 units a block at most: H up to 8 per SM
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for H in (128, 256, 512):
        for B in (1, 9, 64):
            assert kernel(B, H, torch.float32, "cuda") == (
                "grid-registers" if 8 * sms >= H else "grid"), (H, B)
    assert kernel(8, 384, torch.float32, "cuda") == "grid"
    assert kernel(8, 1024, torch.float32, "cuda") == "grid"
    assert kernel(8, 512, torch.float64, "cuda") is None
    assert kernel(1 << 14, 512, torch.float32, "cuda") is None
    # The backward's: the same rule; the grid backward none above batch 16 (lstm_backward serves
    # there).
    for dt in (torch.float16, torch.bfloat16):
        for H in (128, 256, 512):
            for B in (1, 8, 9, 16, 17, 64):
                assert kernel(B, H, dt, "cuda", backward=True) in _cluster_expected(
                    H, B, backward=True), (H, B)
        assert kernel(8, 384, dt, "cuda", backward=True) == "grid"
        assert kernel(17, 384, dt, "cuda", backward=True) is None
    assert kernel(8, 512, torch.float32, "cuda", backward=True) == "grid"
    assert kernel(17, 512, torch.float32, "cuda", backward=True) is None


@pytest.mark.gpu
def test_persistent_results_and_reserve_are_lstms():
    # The same reserve layout, so lstm_backward reads either; values agree to float32 rounding.
    case = Case(5, 64, 32, 512, 0, None, True, False)
    m = reference_module(case, torch.float32, "cuda")
    x, h0, c0 = inputs(case, torch.float32, "cuda")
    w = weights(m, case.reverse)
    a = fl.lstm(x, h0, c0, *w, None, case.reverse, False)
    b = fl.lstm_persistent(x, h0, c0, *w, None, case.reverse, False)
    for u, v in zip(a, b):
        assert u.shape == v.shape and u.dtype == v.dtype
        torch.testing.assert_close(v, u, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", [Case(9, 1, 16, 512, 0, None, True, True),
                                  Case(3, 16, 8, 601, 0, None, False, True)], ids=str)
def test_persistent_backward_is_lstm_backwards(device, case):
    # On one reserve and upstream gradients: every result of lstm_backward_persistent agrees with
    # lstm_backward's to float32 rounding (the same cell arithmetic; the products summed in
    # another order), with and without the weight gradients and grad_h_n / grad_c_n.
    m = reference_module(case, torch.float32, device)
    x, h0, c0 = inputs(case, torch.float32, device)
    w = weights(m, case.reverse)
    _, _, _, reserve, reserve_h = fl.lstm(x, h0, c0, *w, None, case.reverse, False)
    gen = torch.Generator().manual_seed(5)
    dy, dh, dc = (torch.randn(*s, generator=gen).to(device) for s in (
        (case.T, case.B, case.H), (case.B, case.H), (case.B, case.H)))
    for g_h, g_c, need_w in ((dh, dc, True), (None, None, False), (dh, None, True)):
        args = (dy, g_h, g_c, x, h0, c0, w[0], w[1], None, None, reserve, reserve_h,
                case.reverse, False, True, need_w)
        a = fl.lstm_backward(*args)
        b = fl.lstm_backward_persistent(*args)
        for u, v in zip(a, b):
            assert u.shape == v.shape and u.dtype == v.dtype
            torch.testing.assert_close(v, u, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_above_batch_16_the_gradient_is_lstm_backwards():
    case = Case(3, 17, 4, 40, 0, None, False, True)
    m = reference_module(case, torch.float32, "cuda")
    x, h0, c0 = inputs(case, torch.float32, "cuda")
    w = [t.detach().clone().requires_grad_() for t in weights(m, False)[:4]]
    with RecordOps() as rec:
        y = fl.lstm_persistent(x, h0, c0, *w, None, None, False, False)[0]
        y.sum().backward()
    assert [n for n, _ in rec.calls] == ["lstm_persistent", "lstm_backward"]


@pytest.mark.gpu
def test_a_smaller_shape_planned_later_does_not_break_a_larger_one():
    # Each kernel's shared-memory limit is set once for the device, not per shape: planning B = 2
    # after B = 4 (as a two-sample accuracy check does) left the B = 4 launch refused.
    fits = fastlayers.lstm.persistent_fits
    H = 512
    for dt in (torch.float32, torch.bfloat16):
        assert fits(4, H, dt, "cuda") and fits(2, H, dt, "cuda")
        x = torch.randn(3, 4, 8, device="cuda", dtype=dt)
        h0, c0 = torch.zeros(4, H, device="cuda", dtype=dt), torch.zeros(4, H, device="cuda",
                                                                          dtype=dt)
        w_ih = torch.randn(4 * H, 8, device="cuda", dtype=dt) * 0.1
        w_hh = torch.randn(4 * H, H, device="cuda", dtype=dt) * 0.05
        a = fl.lstm(x, h0, c0, w_ih, w_hh, None, None, None, None, False, False)
        b = fl.lstm_persistent(x, h0, c0, w_ih, w_hh, None, None, None, None, False, False)
        torch.testing.assert_close(b[0], a[0], rtol=2e-2, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("what", ["packed", "projection", "float64", "too large"])
def test_persistent_refuses_what_it_cannot_run(what):
    case = Case(3, 2, 4, 8, 2 if what == "projection" else 0, None, False, True)
    dtype = torch.float64 if what == "float64" else torch.float32
    m = reference_module(case, dtype, "cuda")
    x, h0, c0 = inputs(case, dtype, "cuda")
    w = weights(m, False)
    bs = None
    if what == "packed":
        x, bs = x.reshape(-1, case.I), torch.tensor([2, 2, 2])
    if what == "too large":  # h_{t-1} of the whole batch does not fit a block's shared memory
        B = 1 << 14
        x, h0, c0 = x[:, :1].expand(3, B, 4).contiguous(), h0[:1].expand(B, 8).contiguous(), \
            c0[:1].expand(B, 8).contiguous()
        assert not fastlayers.lstm.persistent_fits(B, 8, torch.float32, "cuda")
    word = {"packed": "`batch_sizes`", "projection": "`w_hr`", "float64": "`input`",
            "too large": "persistent kernel"}[what]
    with pytest.raises(RuntimeError, match=word):
        fl.lstm_persistent(x, h0, c0, *w, bs, False, False)
    # the backward refuses the same, naming the same argument
    _, _, _, reserve, reserve_h = fl.lstm(x, h0, c0, *w, bs, False, False)
    dy = torch.zeros(x.shape[:-1] + (case.R,), device="cuda", dtype=dtype)
    with pytest.raises(RuntimeError, match="lstm_backward_persistent: .*" + word):
        fl.lstm_backward_persistent(dy, None, None, x, h0, c0, w[0], w[1], w[4], bs, reserve,
                                    reserve_h, False, False, True, True)


def test_where_it_fits(device):
    fits = fastlayers.lstm.persistent_fits
    assert not fits(8, 512, torch.float64, device)
    if device == "cpu":
        assert not fits(8, 512, torch.float32, device)
        return
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        assert fits(1, 512, dt, device) and fits(16, 512, dt, device)
        assert fits(16, 512, dt, device, backward=True) and fits(64, 512, dt, device)
    # above batch 16 the backward serves on clusters only (float16 and bfloat16, sm_90 on)
    assert not fits(17, 512, torch.float32, device, backward=True)
    assert not fits(17, 384, torch.float16, device, backward=True)
    if torch.cuda.get_device_properties(0).major >= 9:
        assert fits(17, 256, torch.float16, device, backward=True)
        assert fits(64, 256, torch.bfloat16, device, backward=True)
    assert not fits(1 << 14, 512, torch.float32, device)


def _problem(device, B=4, H=16, packed=False, proj=0, dtype=torch.float32):
    return LstmProblem.of((8, H, proj, 2, False, True), 5, B, dtype, torch.device(device), packed,
                          False, False)


def test_the_tuner_offers_it_only_where_it_fits(device):
    labels = lambda p: [c.label for c in algorithms.candidates(p, "training")]  # noqa: E731
    if device == "cpu":
        assert "persistent" not in labels(_problem("cpu"))
        return
    assert labels(_problem(device)) == ["native", "fused", "persistent"]
    assert "persistent" not in labels(_problem(device, packed=True))
    assert "persistent" not in labels(_problem(device, proj=8))
    assert "persistent" not in labels(_problem(device, dtype=torch.float64))
    assert "persistent" not in labels(_problem(device, B=1 << 14))


def test_the_module_pinned_to_it(device):
    torch.manual_seed(0)
    ref = nn.LSTM(8, 16, 2, batch_first=True).to(device)
    fast = fastlayers.convert(copy.deepcopy(ref)).force_algorithm("persistent")
    x = torch.randn(3, 5, 8, device=device)
    if device == "cpu":  # pinned where it cannot run: an error, not another algorithm
        with pytest.raises(ValueError, match="persistent"):
            fast(x)
        return
    with cudnn_tf32(False):  # float32 both ways: nn.LSTM's TF32 switch is the ops' too
        with RecordOps() as rec:
            y, (h, c) = fast(x)
        assert [n for n, _ in rec.calls] == ["lstm_persistent"] * 2
        y0, (h0, c0) = ref(x)
        for a, b in ((y, y0), (h, h0), (c, c0)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        with RecordOps() as rec:
            y.sum().backward()
        assert [n for n, _ in rec.calls] == ["lstm_backward_persistent"] * 2
        y0.sum().backward()
    for p, q in zip(fast.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    packed = nn.utils.rnn.pack_padded_sequence(x, [5, 4, 2], batch_first=True)
    with pytest.raises(ValueError, match="padded input only"):
        fast(packed)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_the_module_pinned_to_it_in_half_types(dtype, bidirectional):
    # The module's eager node through the cluster kernels (hidden 128): output, states and every
    # gradient within ERROR_FACTOR x nn.LSTM's own error in the same dtype, against float64.
    torch.manual_seed(0)
    ref64 = nn.LSTM(24, 128, bidirectional=bidirectional).cuda().double()
    ref = copy.deepcopy(ref64).to(dtype)
    fast = fastlayers.convert(copy.deepcopy(ref)).force_algorithm("persistent")
    assert fastlayers.lstm.persistent_kernel(4, 128, dtype, "cuda", backward=True) in \
        _cluster_expected(128)
    x = torch.randn(9, 4, 24, device="cuda", dtype=torch.float64)
    results = []
    for m in (ref64, ref, fast):
        xm = x.to(dtype if m is not ref64 else torch.float64).requires_grad_()
        with RecordOps() as rec:
            y, (h, c) = m(xm)
            loss = (y.double() * y.double().cos()).sum() + h.double().square().sum() + \
                (c.double() ** 3).sum()
            grads = torch.autograd.grad(loss, [xm] + list(m.parameters()))
        if m is fast:
            assert [n for n, _ in rec.calls] == (["lstm_persistent"] * (1 + bidirectional) +
                                                 ["lstm_backward_persistent"] *
                                                 (1 + bidirectional))
        results.append([y, h, c] + list(grads))
    for k, (r, own, ours) in enumerate(zip(*results)):
        err, ref_err = rel_err(ours, r), rel_err(own, r)
        assert err <= ERROR_FACTOR * max(ref_err, torch.finfo(dtype).eps), (k, err, ref_err)


@pytest.mark.parametrize("grads", [False, True])
def test_opcheck(device, grads):
    case = Case(3, 2, 3, 4, 0, None, True, True)
    m = reference_module(case, torch.float32, device)
    x, h0, c0 = inputs(case, torch.float32, device)
    w = [t.detach().clone() if t is not None else None for t in weights(m, True)]
    for t in [x, h0, c0] + w:
        if t is not None:
            t.requires_grad_(grads)
    torch.library.opcheck(fl.lstm_persistent.default, (x, h0, c0, *w, None, True, False))
    _, _, _, reserve, reserve_h = fl.lstm(x, h0, c0, *w, None, True, False)
    dy = torch.randn(case.T, case.B, case.R, device=device)
    torch.library.opcheck(fl.lstm_backward_persistent.default,
                          (dy, None, None, x.detach(), h0.detach(), c0.detach(), w[0].detach(),
                           w[1].detach(), None, None, reserve, reserve_h, True, False, True,
                           grads))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,H,B", [(torch.float16, 64, 24), (torch.bfloat16, 64, 24),
                                       (torch.float32, 256, 24), (torch.float32, 256, 40)],
                         ids=str)
def test_tensor_core_products_with_an_unaligned_state(dtype, H, B):
    """A batch above 4 in a half type (the gate products on tensor cores), or float32 where
    w_hh's rows stay in registers (B 40: in two batch halves), with h0 a view one element into
    its storage (not 16-byte aligned: loaded element by element) gives exactly the results of an
    aligned h0, and the reserve lstm_backward reads."""
    case = Case(4, B, 8, H, 0, None, False, True)
    m = reference_module(case, dtype, "cuda")
    x, h0, c0 = inputs(case, dtype, "cuda")
    w = weights(m, case.reverse)
    store = torch.empty(h0.numel() + 1, device="cuda", dtype=dtype)
    h0u = store[1:].view_as(h0)
    h0u.copy_(h0)
    assert h0u.data_ptr() % 16 != 0
    a = fl.lstm_persistent(x, h0, c0, *w, None, case.reverse, False)
    b = fl.lstm_persistent(x, h0u, c0, *w, None, case.reverse, False)
    for u, v in zip(a, b):
        torch.testing.assert_close(v, u, rtol=0, atol=0)
