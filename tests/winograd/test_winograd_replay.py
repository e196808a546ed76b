"""On CUDA the non-fused pipeline's pass is replayed as a cached CUDA graph when a call comes back
with the same sizes, switches, addresses and stream (recorded on the key's second call; the first
runs launch by launch). The graph bakes every address, so: a replay must read what the tensors
hold now, a call with any other address must run on its own tensors, the bits must not depend on
the mode, and inside a user's capture the pass goes into the user's graph. The values themselves
are checked against PyTorch by the other files.

A call's result and workspace come from the caching allocator, which hands a call the memory the
same call had before when nothing else was allocated in between (as in a training step, step
after step): the tests keep what they compare in tensors allocated ahead and copy into them."""
import pytest
import torch

from fastlayers import _C
from conv_samples import torch_passes

fl = torch.ops.fastlayers
pytestmark = pytest.mark.gpu

CAPACITY = _C.STEP_GRAPH_CAPACITY if _C.with_cuda else 0
PASSES = ["forward", "input_grad", "weight_grad"]
OPERANDS = {"forward": ["x", "w", "b"], "input_grad": ["gy", "w"], "weight_grad": ["gy", "x"]}
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# S, C, K, H, W, padding: a shape per test, so that no test finds a key another one left
SMALL = (3, 5, 6, 9, 10, (1, 0))
WIDE = (4, 128, 128, 16, 16, (1, 1))  # GEMMs large enough for tensor cores (TF32)
SHIFTED = (3, 5, 6, 9, 11, (1, 0))
SIDE = (2, 5, 6, 9, 10, (1, 0))
CAPTURED = (2, 4, 6, 8, 10, (0, 1))


def _tensors(seed, dtype, shape=SMALL):
    S, C, K, H, W, pad = shape
    g = torch.Generator().manual_seed(seed)
    oh, ow = H + 2 * pad[0] - 2, W + 2 * pad[1] - 2
    shapes = {"x": (S, C, H, W), "w": (K, C, 3, 3), "b": (K,), "gy": (S, K, oh, ow)}
    t = {k: torch.rand(v, generator=g, dtype=torch.float64).mul_(2).sub_(1).to("cuda", dtype)
         for k, v in shapes.items()}
    t["pad"] = list(pad)
    return t


def _call(pass_, t, tile, tf32=False):
    if pass_ == "forward":
        return fl.winograd_conv2d(t["x"], t["w"], t["b"], t["pad"], tile, tf32, False)
    if pass_ == "input_grad":
        return fl.winograd_conv2d_input_grad(t["gy"], t["w"], t["pad"], tile, tf32, False)
    return fl.winograd_conv2d_weight_grad(t["gy"], t["x"], t["pad"], tile, tf32, False)


def _reference(pass_, t):
    d = {k: v.double() for k, v in t.items() if k != "pad"}
    return torch_passes(d["x"], d["w"], d["b"], d["gy"], t["pad"])[PASSES.index(pass_)]


def _close(y, ref, what):
    assert (y.double() - ref).abs().max().item() <= 1e-10 * ref.abs().max().item(), what


class Calls:
    """Calls of one pass whose results are copied into tensors allocated ahead, with whether
    each launched a cached graph (recorded then, or replayed) and where its result was."""

    def __init__(self, pass_, tile, like, n):
        self.pass_, self.tile = pass_, tile
        self.kept = [torch.empty_like(like) for _ in range(n)]
        self.i = 0

    def __call__(self, t, tile=None, tf32=False):
        before = _C.step_graph_replays()
        y = _call(self.pass_, t, self.tile if tile is None else tile, tf32)
        replayed = _C.step_graph_replays() - before
        assert replayed in (0, 1)
        out, where = self.kept[self.i], y.data_ptr()
        out.copy_(y)
        del y
        self.i += 1
        return out, bool(replayed), where


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pass_", PASSES)
def test_a_replay_reads_the_tensors_as_they_are_now(pass_, dtype):
    t = _tensors(1, dtype)
    fresh_t = {k: (v.clone() if k != "pad" else v) for k, v in t.items()}
    call = Calls(pass_, 2, _call(pass_, t, 4), 5)   # tile 4: another key
    cached = _C.step_graphs_cached()
    first, replayed, where = call(t)                # the key's first call: launch by launch
    assert not replayed
    second, replayed, at = call(t)                  # records, and launches the recording
    assert replayed and at == where
    assert torch.equal(second, first)
    if cached < CAPACITY:  # at capacity a new graph replaces another: the count cannot show it
        assert _C.step_graphs_cached() == cached + 1
    third, replayed, at = call(t)
    assert replayed and at == where
    assert torch.equal(third, first)
    for k, v in t.items():                          # new values at the same addresses
        if k != "pad":
            v.mul_(-0.5).add_(0.25)
            fresh_t[k].copy_(v)
    fourth, replayed, _ = call(t)
    assert replayed
    fresh, replayed, _ = call(fresh_t)              # the same values elsewhere: launch by launch
    assert not replayed
    assert torch.equal(fourth, fresh)
    assert not torch.equal(fourth, first)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("pass_", PASSES)
def test_every_address_is_part_of_the_key(pass_, tile):
    # A graph recorded on one set of tensors, then calls that differ from it in one operand's
    # address each, the result where it was: each must run on its own operands (float64:
    # against PyTorch, tightly).
    t = _tensors(2, torch.float64, SHIFTED)
    others = _tensors(3, torch.float64, SHIFTED)
    names = OPERANDS[pass_]
    variants = {}
    for name in names:
        variants[name] = dict(t)
        variants[name][name] = others[name]
    refs = {name: _reference(pass_, v) for name, v in variants.items()}
    ref = _reference(pass_, t)
    call = Calls(pass_, tile, ref.to(torch.float64), 3 + len(names))
    _, _, where = call(t)
    call(t)                                         # recorded
    _, replayed, _ = call(t)
    assert replayed
    for name in names:
        got, replayed, at = call(variants[name])
        assert at == where                          # only the operand moved
        _close(got, refs[name], name)
        assert not replayed, name
    # The result elsewhere: the last one kept alive while the pass runs again on new values.
    kept = _call(pass_, t, tile)
    for k, v in t.items():
        if k != "pad":
            v.mul_(-0.5).add_(0.25)
    moved = _call(pass_, t, tile)
    assert moved.data_ptr() != kept.data_ptr()
    _close(moved, _reference(pass_, t), "a result elsewhere")
    _close(kept, ref, "the earlier result")


@pytest.mark.parametrize("pass_", PASSES)
def test_tf32_is_part_of_the_key(pass_):
    t = _tensors(4, torch.float32, WIDE)
    ref = _reference(pass_, t)
    call = Calls(pass_, 2, ref.float(), 5)
    _, replayed, where = call(t)
    assert not replayed
    call(t)
    y, replayed, _ = call(t)                        # replayed, float32 products
    assert replayed
    tf32, replayed, at = call(t, tf32=True)         # TF32 products, all else as before
    assert at == where and not replayed
    assert not torch.equal(y, tf32)
    err = {k: ((v.double() - ref).norm() / ref.norm()).item()
           for k, v in (("fp32", y), ("tf32", tf32))}
    assert err["fp32"] < 1e-5 < err["tf32"] < 1e-2, err
    other, replayed, _ = call(t, tile=4)           # another tile (and workspace): its own key
    assert not replayed
    assert ((other.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_side_stream():
    # The same bits recorded and replayed on a side stream as on the current one. (The caching
    # allocator gives a side stream's calls memory of their own, so their keys differ by address
    # too: the stream's own part of the key is not what this shows.)
    t = _tensors(5, torch.float32, SIDE)
    call = Calls("forward", 2, _call("forward", t, 4), 5)
    call(t)
    here, _, _ = call(t)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        there = [call(t) for _ in range(3)]         # direct, records, replays
    torch.cuda.current_stream().wait_stream(s)
    assert [r for _, r, _ in there] == [False, True, True]
    for one, _, _ in there:
        assert torch.equal(one, here)


@pytest.mark.parametrize("pass_", PASSES)
def test_inside_a_users_cuda_graph(pass_):
    # Captured by the caller, the pass goes into the caller's graph (nothing cached or replayed
    # meanwhile); the caller's replays with new inputs give the eager results.
    t = _tensors(6, torch.float32, CAPTURED)
    static = {k: (v.clone() if k != "pad" else v) for k, v in t.items()}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # the key seen, recorded and replayed before the capture
            _call(pass_, static, 2)
    torch.cuda.current_stream().wait_stream(s)
    counts = _C.step_graphs_cached(), _C.step_graph_replays(), _C.step_graph_recordings()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        # The capture's pool hands each call the memory the last one freed: one key for the
        # three, which outside a capture the second call would record and the third replay.
        for _ in range(2):
            _call(pass_, static, 2)
        out = _call(pass_, static, 2)
    assert (_C.step_graphs_cached(), _C.step_graph_replays(),
            _C.step_graph_recordings()) == counts
    for seed in (7, 8):
        new = _tensors(seed, torch.float32, CAPTURED)
        for k in static:
            if k != "pad":
                static[k].copy_(new[k])
        graph.replay()
        eager = _call(pass_, {k: (v.clone() if k != "pad" else v) for k, v in new.items()}, 2)
        assert torch.equal(out, eager)


def test_more_keys_than_the_cache_holds():
    # Keys that come back in turn, more of them than the cache holds: each is recorded at most
    # STEP_GRAPH_MAX_EVICTIONS times (its graphs pushed out after a few launches), then runs
    # launch by launch, and the recordings stop (without the rule every key pushed out would be
    # recorded anew round after round). In 16 rounds no graph reaches STEP_GRAPH_PAID_LAUNCHES.
    assert _C.testing.STEP_GRAPH_PAID_LAUNCHES >= 16
    n = CAPACITY + 40
    sizes = [(3 + i // 16, 3 + i % 16) for i in range(n)]      # a key per size
    x = [torch.randn(1, 1, h, w, device="cuda") for h, w in sizes]
    w = torch.randn(1, 1, 3, 3, device="cuda")
    ref = [torch.nn.functional.conv2d(xi.double(), w.double()) for xi in x]
    scale = [r.abs().max().item() for r in ref]
    per_round = []
    for _ in range(16):
        before = _C.step_graph_recordings()
        for xi, r, m in zip(x, ref, scale):
            y = fl.winograd_conv2d(xi, w, None, [0, 0], 2, False, False)
            assert (y.double() - r).abs().max().item() <= 1e-5 * m
            del y
        per_round.append(_C.step_graph_recordings() - before)
        assert _C.step_graphs_cached() <= CAPACITY
    assert sum(per_round) <= _C.testing.STEP_GRAPH_MAX_EVICTIONS * n, per_round
    assert per_round[-3:] == [0, 0, 0], per_round
