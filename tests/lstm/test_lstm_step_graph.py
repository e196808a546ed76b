"""The CUDA step loops of lstm and lstm_backward run as cached CUDA graphs (one per geometry,
recurrent weights and stream, recorded the second time a key comes; the first call runs the
loop launch by launch) that read each call's tensors through their state. A graph recorded on
one call must give a later call's results in that call's tensors: the bits of the loop run
directly, with the other calls' results untouched; inside a user's CUDA graph capture the loop
is recorded into it directly, with the same bits. The values themselves are checked against
nn.LSTM by the other files."""
import pytest
import torch

from lstm_samples import Case, inputs, op_inputs, reference_module, upstream, weights

fl = torch.ops.fastlayers
pytestmark = pytest.mark.gpu

# Padded and packed, forward and reverse, with and without a projection and biases; the input
# GEMM in chunks of 1, 2, 4, ... steps (inputs 16-byte aligned) or whole (the second and fourth
# case in float32 and the half types); in the half types the fifth and the last (packed) run each
# step as one kernel.
CASES = [
    Case(5, 3, 8, 24, 0, None, False, True),
    Case(6, 4, 10, 16, 0, (6, 4, 4, 1), True, True),
    Case(4, 2, 12, 48, 32, None, True, False),
    Case(5, 3, 6, 40, 24, (5, 5, 2), False, True),
    Case(7, 64, 32, 512, 0, None, False, True),
    Case(9, 160, 16, 32, 0, None, True, True),
    Case(6, 20, 8, 128, 0, (6,) * 4 + (4,) * 10 + (1,) * 6, True, True),
]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _problem(case, dtype, salt=0):
    m = reference_module(case, dtype, "cuda")
    w = [t.detach() if t is not None else None for t in weights(m, case.reverse)]
    x, h0, c0 = inputs(case, dtype, "cuda")
    if salt:
        x, h0, c0 = x.flip(0) * 0.5 + salt, h0.flip(0), -c0
    data, bs = op_inputs(case, x)
    return w, (data.contiguous(), h0.contiguous(), c0.contiguous()), bs


def _forward(case, w, xs, bs):
    return fl.lstm(xs[0], xs[1], xs[2], *w, bs, case.reverse, False)


def _backward(case, w, xs, bs, out, grads):
    dy, dh, dc = grads
    return fl.lstm_backward(dy, dh, dc, xs[0], xs[1], xs[2], w[0], w[1], w[4], bs, out[3],
                            out[4], case.reverse, False, True, True)


def _grads(case, dtype, out, salt=0):
    g = [t.to(dtype) for t in upstream(case, "cuda")]
    g[0] = g[0].reshape(out[0].shape)
    return [t * (1 + salt) for t in g]


def _same(a, b):
    for u, v in zip(a, b):
        assert u.shape == v.shape and torch.equal(u, v)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_cached_loop_serves_new_tensors(case, dtype):
    w, xs1, bs = _problem(case, dtype)
    _, xs2, _ = _problem(case, dtype, salt=1)
    out1 = _forward(case, w, xs1, bs)           # the key's first call: the loop runs directly
    kept1 = [t.clone() for t in out1]
    out2 = _forward(case, w, xs2, bs)           # the second records the graph
    kept2 = [t.clone() for t in out2]
    out3 = _forward(case, w, xs1, bs)           # replayed on other tensors than it recorded
    _same(out3, kept1)
    _same(out1, kept1)
    _same(out2, kept2)
    assert not torch.equal(out1[0], out2[0])
    fresh = [t.clone() if t is not None else None for t in w]
    _same(out2, _forward(case, fresh, xs2, bs))  # another key's first call: direct
    g1, g2 = _grads(case, dtype, out1), _grads(case, dtype, out2, salt=1)
    d1 = _backward(case, w, xs1, bs, out1, g1)
    d1_kept = [t.clone() for t in d1]
    d2 = _backward(case, w, xs2, bs, out2, g2)
    d2_kept = [t.clone() for t in d2]
    _same(_backward(case, w, xs1, bs, out3, g1), d1_kept)
    _same(d1, d1_kept)
    _same(d2, d2_kept)


def test_a_key_is_recorded_on_its_second_call():
    from fastlayers import _C
    case = CASES[0]
    w, xs, bs = _problem(case, torch.float32)
    w[1] = w[1].clone()                          # a key no other test made
    before = _C.step_graphs_cached()
    # At capacity a new graph replaces another: the count cannot show it.
    if before >= _C.STEP_GRAPH_CAPACITY:
        pytest.skip("the step-graph cache of this process is full")
    _forward(case, w, xs, bs)
    assert _C.step_graphs_cached() == before
    _forward(case, w, xs, bs)
    assert _C.step_graphs_cached() == before + 1


@pytest.mark.parametrize("case", CASES[:3], ids=str)
def test_weights_changed_in_place_are_read(case):
    # The graph bakes the weights' addresses, not their values.
    w, xs, bs = _problem(case, torch.float32)
    _forward(case, w, xs, bs)
    _forward(case, w, xs, bs)                    # recorded
    w[1].mul_(1.5)
    out = _forward(case, w, xs, bs)
    _same(out, _forward(case, [t.clone() if t is not None else None for t in w], xs, bs))


def test_side_stream():
    # A graph per stream; the same results on a side stream as on the current one.
    case = CASES[1]
    w, xs, bs = _problem(case, torch.float32)
    here = _forward(case, w, xs, bs)
    here = _forward(case, w, xs, bs)             # recorded on the current stream
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        there = [[t.clone() for t in _forward(case, w, xs, bs)] for _ in range(3)]
    torch.cuda.current_stream().wait_stream(s)
    for one in there:                            # direct, recording, replaying
        _same(one, here)


@pytest.mark.parametrize("case", CASES[:4] + CASES[5:], ids=str)
def test_inside_a_users_cuda_graph(case):
    # Captured by the caller, the loop goes into the caller's graph (no cached graph inside it);
    # replays with new inputs give the eager results.
    dtype = torch.float32
    w, xs, bs = _problem(case, dtype)
    _, xs2, _ = _problem(case, dtype, salt=1)
    static = [t.clone() for t in xs]
    out = _forward(case, w, static, bs)
    grads = _grads(case, dtype, out)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _backward(case, w, static, bs, _forward(case, w, static, bs), grads)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out = _forward(case, w, static, bs)
        g_grad = _backward(case, w, static, bs, g_out, grads)
    for src in (xs2, xs):
        for t, v in zip(static, src):
            t.copy_(v)
        graph.replay()
        torch.cuda.synchronize()
        eager = _forward(case, w, src, bs)
        _same(g_out, eager)
        _same(g_grad, _backward(case, w, src, bs, eager, grads))


def _cpu_reference(case, w, xs, bs):
    to = lambda t: t.detach().cpu().double() if t is not None else None  # noqa: E731
    return fl.lstm(*[to(t) for t in xs], *[to(t) for t in w], bs, case.reverse, False)


# Pairs of calls alike but for one thing a loop's graph bakes in: the recurrent weights, the
# projection's, the packed batch sizes (same T and B), the direction, the 2-byte type. The second
# call must not replay the first's graph: its results match the float64 CPU op as closely as a
# graph of its own gives (a wrong graph is off by O(1)).
BAKED = {
    "w_hh": (Case(5, 3, 8, 24, 0, None, False, True), Case(5, 3, 8, 24, 0, None, False, True),
             torch.float64),
    "w_hr": (Case(4, 2, 12, 48, 32, None, False, True), Case(4, 2, 12, 48, 32, None, False, True),
             torch.float64),
    "batch_sizes": (Case(6, 4, 10, 16, 0, (6, 4, 4, 1), False, True),
                    Case(6, 4, 10, 16, 0, (6, 6, 2, 1), False, True), torch.float64),
    "reverse": (Case(5, 3, 8, 24, 0, None, False, True), Case(5, 3, 8, 24, 0, None, True, True),
                torch.float64),
    "dtype": (Case(5, 3, 8, 24, 0, None, False, True), Case(5, 3, 8, 24, 0, None, False, True),
              torch.bfloat16),
}


@pytest.mark.parametrize("what", list(BAKED))
def test_each_key_ingredient_gets_its_own_graph(what):
    case_a, case_b, dtype_b = BAKED[what]
    dtype_a = torch.float16 if what == "dtype" else dtype_b
    w_a, xs_a, bs_a = _problem(case_a, dtype_a)
    w_b, xs_b, bs_b = _problem(case_b, dtype_b)
    # w_b's recurrent weights are w_a's own tensors (the same addresses), reinterpreted as
    # bfloat16 for the type's pair, unless they are the point
    same = (lambda t: t.view(dtype_b)) if dtype_a != dtype_b else (lambda t: t)  # noqa: E731
    w_b[1] = w_a[1] * 0.5 if what == "w_hh" else same(w_a[1])
    if w_a[4] is not None:
        w_b[4] = w_a[4] * 0.5 if what == "w_hr" else same(w_a[4])
    _forward(case_a, w_a, xs_a, bs_a)
    _forward(case_a, w_a, xs_a, bs_a)                  # a's graph recorded
    out = _forward(case_b, w_b, xs_b, bs_b)            # b must not replay it
    ref = _cpu_reference(case_b, w_b, xs_b, bs_b)
    tol = {torch.float64: 1e-10, torch.bfloat16: 5e-2}[dtype_b]
    for u, v in zip(out, ref):
        err = ((u.double().cpu() - v).norm() / v.norm()).item()
        assert err < tol, (what, err)
