"""The lstm op against nn.LSTM per device and precision: output, h_n, c_n and the gradients of
the input, h0, c0 and every weight (lstm_samples.py: float64 to 1e-12, the other precisions
within 2x nn.LSTM's own error against float64), and what the comparison rejects."""
import pytest
import torch

from conv_samples import MUTATION, rel_err
from lstm_samples import (CASES, NAMES, Case, PRECISIONS, check_results, run_case,
                          skip_unless_supported, weights)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_op_matches_nn_lstm(device, case, precision):
    skip_unless_supported(device, precision)
    ours, ref, native = run_case(case, precision, device)
    check_results(case, ours, ref, native, precision)


# On CUDA the forward's input GEMM runs in chunks of steps beside the recurrence (1, 2, 4, ...
# steps up to about 512 rows a chunk, at most 32 chunks), where the input rows are 16-byte
# aligned: four chunks padded and packed (the reverse direction taking them from the last step),
# and the most chunks.
CHUNKED = [
    Case(9, 160, 16, 32, 0, None, False, True),
    Case(9, 160, 16, 32, 0, None, True, True),
    Case(9, 200, 16, 24, 0, (9,) * 100 + (5,) * 60 + (2,) * 40, False, True),
    Case(9, 200, 16, 24, 0, (9,) * 100 + (5,) * 60 + (2,) * 40, True, False),
    Case(63, 1024, 16, 16, 0, None, True, True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CHUNKED, ids=str)
def test_input_gemm_in_chunks(case, precision):
    skip_unless_supported("cuda", precision)
    ours, ref, native = run_case(case, precision, "cuda")
    check_results(case, ours, ref, native, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_input_gemm_operands_off_16_byte_alignment(dtype):
    # x and w_ih two elements into their storage: rows of 16 bytes, addresses that are not. The
    # chunks' pointer-batched GEMMs cannot see their operands' addresses: such a call runs the
    # GEMM whole, with the values of aligned copies (which run it in chunks).
    T, B, I, H = 9, 160, 16, 32
    g = torch.Generator().manual_seed(5)

    def shifted(*shape):
        n = 1
        for d in shape:
            n *= d
        t = (torch.randn(n + 2, generator=g) * 0.5).to("cuda", dtype)[2:].view(shape)
        assert t.is_contiguous() and t.data_ptr() % 16 != 0
        return t

    x, w_ih = shifted(T, B, I), shifted(4 * H, I)
    rest = [(torch.randn(*sh, generator=g) * 0.5).to("cuda", dtype)
            for sh in ((B, H), (B, H), (4 * H, H), (4 * H,), (4 * H,))]
    fl = torch.ops.fastlayers
    got = fl.lstm(x, rest[0], rest[1], w_ih, rest[2], rest[3], rest[4], None, None, False, False)
    ref = fl.lstm(x.clone(), rest[0], rest[1], w_ih.clone(), rest[2], rest[3], rest[4], None,
                  None, False, False)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-3, atol=2e-3)
    for a, b in zip(got[:3], ref[:3]):
        torch.testing.assert_close(a, b, **tol)


# Float16 and bfloat16 layers without a projection at H = 128, 256, 512 and 1024 run each step as
# one kernel (cuda/lstm/fused_step.cuh) where its grid has at most one block per SM: blocks of 16
# batch rows and of 32 (B not a multiple: rows past B), padded and packed (rows past a step's
# active ones keep their state), both directions, with and without biases, odd and even step
# counts (h alternates between two buffers), B = 1, the input GEMM in chunks and whole (I * 2
# bytes not a multiple of 16).
FUSED = [
    Case(7, 16, 24, 128, 0, None, False, True),
    Case(6, 40, 24, 128, 0, None, True, True),
    Case(5, 3, 7, 256, 0, None, False, False),
    Case(8, 37, 16, 128, 0, (8,) * 5 + (6,) * 12 + (3,) * 19 + (1,), False, True),
    Case(8, 37, 16, 128, 0, (8,) * 5 + (6,) * 12 + (3,) * 19 + (1,), True, False),
    Case(9, 160, 16, 128, 0, None, False, True),
    Case(3, 64, 16, 512, 0, None, True, True),
    Case(2, 16, 8, 1024, 0, None, False, True),
    Case(1, 1, 8, 128, 0, None, False, True),
    # the other instantiated geometries (rows a block, H / 128) on a GPU of 128 SMs or more:
    # (16, 4), (32, 2) and (32, 8), the largest shared memory
    Case(3, 20, 16, 512, 0, None, False, True),
    Case(3, 80, 16, 256, 0, None, True, True),
    Case(2, 24, 8, 1024, 0, None, True, True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", FUSED, ids=str)
def test_fused_step(case, precision):
    skip_unless_supported("cuda", precision)
    ours, ref, native = run_case(case, precision, "cuda")
    check_results(case, ours, ref, native, precision)


def test_the_cases_cover_the_matrix():
    # padded and packed, each with both directions, with and without projection and biases;
    # T = 1, B = 1; sorted lengths with equal ones and a length-1 sequence
    assert {(c.lengths is None, c.reverse) for c in CASES} == {(a, b) for a in (True, False)
                                                               for b in (True, False)}
    assert {(c.lengths is None, c.P > 0) for c in CASES} == {(a, b) for a in (True, False)
                                                             for b in (True, False)}
    assert {(c.lengths is None, c.bias) for c in CASES} == {(a, b) for a in (True, False)
                                                            for b in (True, False)}
    assert any(c.T == 1 for c in CASES) and any(c.T > 1 and c.B == 1 for c in CASES)
    packed = [c.lengths for c in CASES if c.lengths]
    assert any(len(set(ls)) < len(ls) for ls in packed) and any(1 in ls for ls in packed)
    assert all(list(ls) == sorted(ls, reverse=True) for ls in packed)
    for c in CASES:  # output, h_n / grad h0, c_n / grad c0, grad input, the smallest weight
        sizes = (c.N * c.R, c.B * c.R, c.B * c.H, c.N * c.I, min(c.I, c.R, c.H) * c.H)
        assert min(sizes) >= 64, (str(c), sizes)


# --- What the comparison rejects (float32 and float64 on the CPU) --------------------------------

STRENGTH_CASES = [CASES[6], CASES[8]]  # packed: forward with biases; reverse, projection


def _swap_i_f(m):
    """The op's weights with the input and forget gates' rows swapped."""
    def swap(t):
        if t is None:
            return None
        H = t.shape[0] // 4
        return torch.cat([t[H:2 * H], t[:H], t[2 * H:]])
    w = weights(m, m.bidirectional)
    return [swap(t) for t in w[:4]] + [w[4]]


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("case", STRENGTH_CASES, ids=str)
def test_the_comparison_rejects_wrong_kernels(case, precision):
    ours, ref, native = run_case(case, precision)
    check_results(case, ours, ref, native, precision)  # the real results pass ...

    def rejected(results, what):
        with pytest.raises(AssertionError):
            check_results(case, results, ref, native, precision)

    # ... two gates swapped does not,
    swapped, _, _ = run_case(case, precision, op_weights=_swap_i_f)
    rejected(swapped, "gates i and f swapped")
    # nor the same weights run in the other direction (`reverse` not honoured),
    flipped, _, _ = run_case(case, precision, op_reverse=not case.reverse)
    rejected(flipped, "the other direction")
    # nor any one result scaled by (1 + MUTATION) (float32) or (1 + 1e-9) (float64),
    eps = 1e-9 if precision == "float64" else MUTATION["float32"]
    for i, name in enumerate(NAMES):
        if ours[i] is None:
            continue
        scaled = list(ours)
        scaled[i] = (ours[i].double() * (1 + eps)).to(ours[i].dtype)
        rejected(scaled, name + " scaled")
    # nor a bias gradient dropped (zero).
    if case.bias:
        for i in (NAMES.index("grad b_ih"), NAMES.index("grad b_hh")):
            dropped = list(ours)
            dropped[i] = torch.zeros_like(ours[i])
            rejected(dropped, NAMES[i] + " dropped")


def test_nn_lstms_own_float32_error_is_what_the_rule_scales():
    # The bound is not vacuous: nn.LSTM's float32 error against float64 is a float32 rounding
    # error (1e-8 .. 1e-5 relative), not 0 and not large.
    case = CASES[0]
    ours, ref, native = run_case(case, "float32")
    check_results(case, ours, ref, native, "float32")
    for i, name in enumerate(NAMES):
        if ref[i] is not None:
            assert 1e-9 < rel_err(native[i], ref[i]) < 1e-5, (name, rel_err(native[i], ref[i]))
