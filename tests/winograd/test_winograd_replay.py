"""On CUDA the non-fused pipeline's pass is replayed as a cached CUDA graph when a call comes back
with the same sizes, switches, addresses and stream (recorded on the key's second call; the first
runs launch by launch). The graph bakes every address, so: a replay must read what the tensors
hold now, a call with any other address must run on its own tensors, the bits must not depend on
the mode, and inside a user's capture the pass goes into the user's graph. The values themselves
are checked against PyTorch by the other files."""
import pytest
import torch

from fastlayers import _C
from conv_samples import torch_passes

fl = torch.ops.fastlayers
pytestmark = pytest.mark.gpu

CAPACITY = 256  # cuda/common/step_graph.h: kCapacity
PASSES = ["forward", "input_grad", "weight_grad"]
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
S, C, K, H, W, PAD = 3, 5, 6, 9, 10, (1, 0)


def _tensors(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    oh, ow = H + 2 * PAD[0] - 2, W + 2 * PAD[1] - 2
    shapes = {"x": (S, C, H, W), "w": (K, C, 3, 3), "b": (K,), "gy": (S, K, oh, ow)}
    return {k: torch.rand(v, generator=g, dtype=torch.float64).mul_(2).sub_(1).to("cuda", dtype)
            for k, v in shapes.items()}


def _call(pass_, t, tile, tf32=False):
    if pass_ == "forward":
        return fl.winograd_conv2d(t["x"], t["w"], t["b"], list(PAD), tile, tf32, False)
    if pass_ == "input_grad":
        return fl.winograd_conv2d_input_grad(t["gy"], t["w"], list(PAD), tile, tf32, False)
    return fl.winograd_conv2d_weight_grad(t["gy"], t["x"], list(PAD), tile, tf32, False)


def _reference(pass_, t):
    d = {k: v.double() for k, v in t.items()}
    return torch_passes(d["x"], d["w"], d["b"], d["gy"], PAD)[PASSES.index(pass_)]


def _recorded_since(before):
    # At capacity a new graph replaces another: the count cannot show it.
    if before < CAPACITY:
        assert _C.step_graphs_cached() == before + 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pass_", PASSES)
def test_a_replay_reads_the_tensors_as_they_are_now(pass_, dtype):
    t = _tensors(1, dtype)
    tile = 2
    before = _C.step_graphs_cached()
    y = _call(pass_, t, tile)              # the key's first call: launch by launch
    first = y.clone()
    del y                                  # the next call's result takes the same memory
    y = _call(pass_, t, tile)              # records
    assert torch.equal(y, first)
    del y
    _recorded_since(before)
    y = _call(pass_, t, tile)              # replays
    assert torch.equal(y, first)
    del y
    for v in t.values():                   # new values at the same addresses
        v.mul_(-0.5).add_(0.25)
    y = _call(pass_, t, tile)              # replays on them
    fresh = _call(pass_, {k: v.clone() for k, v in t.items()}, tile)  # other addresses: direct
    assert torch.equal(y, fresh)
    assert not torch.equal(y, first)


def _close(y, ref, what):
    assert (y - ref).abs().max().item() <= 1e-10 * ref.abs().max().item(), what


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("pass_", PASSES)
def test_every_address_is_part_of_the_key(pass_, tile):
    # A graph recorded on one set of tensors, then calls that differ from it in one address
    # each: every call must compute on its own operands into its own result (float64: against
    # PyTorch, tightly).
    t = _tensors(2, torch.float64)
    for _ in range(2):                     # direct, then recorded (the result's memory reused)
        _call(pass_, t, tile)
    for name in ("x", "w", "b", "gy"):     # one operand elsewhere, the result where it was
        other = dict(t)
        other[name] = _tensors(3, torch.float64)[name]
        y = _call(pass_, other, tile)
        got = y.clone()
        del y
        _close(got, _reference(pass_, other), name)
    kept = _call(pass_, t, tile)           # replayed; its result stays alive, so the next one
    old = _reference(pass_, t)             # goes elsewhere
    for v in t.values():
        v.mul_(-0.5).add_(0.25)
    moved = _call(pass_, t, tile)
    _close(moved, _reference(pass_, t), "a result elsewhere")
    _close(kept, old, "the earlier result")


@pytest.mark.parametrize("pass_", PASSES)
def test_tf32_and_tile_are_part_of_the_key(pass_):
    t = _tensors(4, torch.float32)
    for _ in range(2):
        _call(pass_, t, 2, False)
    plain = _call(pass_, t, 2, False).clone()   # replayed, float32 products
    tf32 = _call(pass_, t, 2, True)             # the same addresses, TF32 products: another key
    assert not torch.equal(plain, tf32)
    ref = _reference(pass_, t)
    assert (plain.double() - ref).abs().max().item() < (tf32.double() - ref).abs().max().item()
    other = _call(pass_, t, 4, False)
    assert (other.double() - ref).abs().max().item() <= 1e-4 * ref.abs().max().item()


def test_side_stream():
    # A graph per stream; the same bits on a side stream as on the current one.
    t = _tensors(5, torch.float32)
    _call("forward", t, 2)
    here = _call("forward", t, 2).clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        there = [_call("forward", t, 2).clone() for _ in range(3)]  # direct, records, replays
    torch.cuda.current_stream().wait_stream(s)
    for one in there:
        assert torch.equal(one, here)


@pytest.mark.parametrize("pass_", PASSES)
def test_inside_a_users_cuda_graph(pass_):
    # Captured by the caller, the pass goes into the caller's graph (nothing cached meanwhile);
    # the caller's replays with new inputs give the eager results.
    t = _tensors(6, torch.float32)
    static = {k: v.clone() for k, v in t.items()}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # the key seen, recorded and replayed before the capture
            _call(pass_, static, 2)
    torch.cuda.current_stream().wait_stream(s)
    before = _C.step_graphs_cached()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _call(pass_, static, 2)
    assert _C.step_graphs_cached() == before
    for seed in (7, 8):
        new = _tensors(seed, torch.float32)
        for k in static:
            static[k].copy_(new[k])
        graph.replay()
        assert torch.equal(out, _call(pass_, {k: v.clone() for k, v in new.items()}, 2))
