"""fastlayers.LSTM as a drop-in nn.LSTM: every configuration against nn.LSTM with the same
weights (copy.deepcopy, fastlayers.convert, force_algorithm("fused")): outputs, h_n, c_n and the
gradients of the input, (h0, c0) and every parameter, float64 to 1e-12 and float32 within 2x
nn.LSTM's own error; dropout masks; state_dict both ways; convert keeping the parameter objects;
nn.LSTM's own errors; the default path and its reason; a language model trained both ways."""
import copy
import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import fastlayers
from fastlayers import tuner
from conv_samples import RecordOps, python_autograd_calls, rel_err
from lstm_samples import ERROR_FACTOR, FLOAT64_BOUND

# name: (nn.LSTM kwargs, input form, hx given, train mode, (T, B))
# forms: padded; unbatched; sorted / unsorted PackedSequence (lengths SORTED / UNSORTED)
CONFIGS = {
    "plain": ({}, "padded", True, False, (5, 3)),
    "plain-nohx": ({}, "padded", False, False, (5, 3)),
    "T1-B1": ({"num_layers": 2}, "padded", True, False, (1, 1)),
    "layers3": ({"num_layers": 3}, "padded", True, False, (5, 3)),
    "bi-layers2": ({"bidirectional": True, "num_layers": 2}, "padded", True, False, (5, 3)),
    "batch-first-proj": ({"batch_first": True, "proj_size": 3}, "padded", True, False, (5, 3)),
    "bi-proj-layers2-nohx": ({"bidirectional": True, "proj_size": 3, "num_layers": 2}, "padded",
                             False, False, (4, 2)),
    "no-bias-bi": ({"bias": False, "bidirectional": True}, "padded", False, False, (5, 3)),
    "no-bias-proj-layers2": ({"bias": False, "proj_size": 2, "num_layers": 2}, "padded", True,
                             False, (5, 3)),
    "unbatched-hx": ({"num_layers": 2}, "unbatched", True, False, (5, None)),
    "unbatched-nohx": ({}, "unbatched", False, False, (5, None)),
    "unbatched-bi-batch-first-proj": ({"batch_first": True, "bidirectional": True,
                                       "proj_size": 3}, "unbatched", True, False, (5, None)),
    "packed-sorted-hx-bi": ({"bidirectional": True, "num_layers": 2}, "sorted", True, False,
                            (5, 4)),
    "packed-sorted-nohx": ({"num_layers": 2}, "sorted", False, False, (5, 4)),
    "packed-unsorted-hx-bi-proj": ({"num_layers": 2, "bidirectional": True, "proj_size": 3},
                                   "unsorted", True, False, (5, 4)),
    "packed-unsorted-nohx-batch-first": ({"num_layers": 2, "batch_first": True}, "unsorted",
                                         False, False, (5, 4)),
    "dropout-eval": ({"num_layers": 2, "dropout": 0.5}, "padded", True, False, (5, 3)),
    "dropout-train": ({"num_layers": 3, "dropout": 0.5, "bidirectional": True}, "padded", True,
                      True, (5, 3)),
    "dropout-train-packed-unsorted": ({"num_layers": 2, "dropout": 0.3}, "unsorted", True, True,
                                      (5, 4)),
}
SORTED, UNSORTED = [5, 3, 3, 1], [3, 5, 1, 3]  # equal lengths and a length-1 sequence
# Sizes: float64 compares every value to 1e-12; float32 uses the rule, which needs quantities of
# tens of values (relative errors over a handful are a few roundings' luck).
SIZES = {torch.float64: (5, 7, 3), torch.float32: (16, 32, 16)}  # input, hidden, proj


def pair(kwargs, dtype=torch.float64, device="cpu", seed=0):
    """nn.LSTM and its fastlayers copy pinned to the ops."""
    I, H, P = SIZES[dtype]
    kwargs = dict(kwargs, proj_size=P if kwargs.get("proj_size") else 0)
    torch.manual_seed(seed)
    ref = nn.LSTM(I, H, dtype=dtype, device=device, **kwargs)
    fast = fastlayers.convert(copy.deepcopy(ref)).force_algorithm("fused")
    assert type(fast) is fastlayers.LSTM
    return ref, fast


def make_inputs(name, dtype=torch.float64, device="cpu"):
    kwargs, form, with_hx, _, (T, B) = CONFIGS[name]
    I, H, P = SIZES[dtype]
    D = 2 if kwargs.get("bidirectional") else 1
    L = kwargs.get("num_layers", 1)
    R = P if kwargs.get("proj_size") else H
    g = torch.Generator().manual_seed(1)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(device, dtype)  # noqa
    if form == "unbatched":
        x = rnd(T, I)
        hx = (rnd(L * D, R), rnd(L * D, H)) if with_hx else None
    else:
        x = rnd(B, T, I) if kwargs.get("batch_first") else rnd(T, B, I)
        hx = (rnd(L * D, B, R), rnd(L * D, B, H)) if with_hx else None
    return x, hx


def forward(m, name, x, hx, seed=7):
    """m's output (packed: its data in the sorted order), h_n, c_n; the RNG seeded the same for
    both modules (the same dropout masks)."""
    form = CONFIGS[name][1]
    if form in ("sorted", "unsorted"):
        inp = pack_padded_sequence(x, SORTED if form == "sorted" else UNSORTED,
                                   batch_first=m.batch_first, enforce_sorted=form == "sorted")
    else:
        inp = x
    torch.manual_seed(seed)
    y, (h, c) = m(inp, hx)
    if isinstance(inp, PackedSequence):
        assert isinstance(y, PackedSequence)
        assert torch.equal(y.batch_sizes, inp.batch_sizes)
        for a, b in ((y.sorted_indices, inp.sorted_indices),
                     (y.unsorted_indices, inp.unsorted_indices)):
            assert (a is None and b is None) or torch.equal(a, b)
        y = y.data
    return y, h, c


def all_results(m, name, x, hx):
    """[output, h_n, c_n, grad x, grad h0, grad c0 (if given), grad of each parameter] under a
    loss using every output nonlinearly, and the fastlayers ops that ran."""
    x = x.detach().clone().requires_grad_()
    hx = None if hx is None else tuple(t.detach().clone().requires_grad_() for t in hx)
    with RecordOps() as rec:
        y, h, c = forward(m, name, x, hx)
        loss = (y * y.cos()).sum() + h.square().sum() + (c ** 3).sum()
        wrt = [x] + (list(hx) if hx is not None else []) + list(m.parameters())
        grads = torch.autograd.grad(loss, wrt)
    names = ["output", "h_n", "c_n", "grad input"] + (["grad h0", "grad c0"] if hx else []) + [
        "grad " + n for n, _ in m.named_parameters()]
    return dict(zip(names, [y, h, c] + list(grads))), [op for op, _ in rec.calls]


def set_modes(ref, fast, name, device):
    """The configuration's train/eval mode on both modules. cuDNN's RNN backward refuses eval
    mode, so on CUDA an eval-mode nn.LSTM reference runs in training mode with dropout 0: the
    same function (eval mode only turns dropout off)."""
    training = CONFIGS[name][3]
    fast.train(training)
    if device == "cuda" and not training:
        ref.dropout = 0.0
        ref.train(True)
    else:
        ref.train(training)


def _layers_dirs(name):
    kwargs = CONFIGS[name][0]
    return kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)


def _expected_ops(name):
    """The ops a forward and backward run: lstm_stack for two or more unidirectional layers
    without a projection over padded input and no dropout in training, else lstm per layer and
    direction; lstm_backward per layer and direction."""
    kwargs, form, _, training, _ = CONFIGS[name]
    stacks = (kwargs.get("num_layers", 1) >= 2 and not kwargs.get("bidirectional") and
              not kwargs.get("proj_size") and form in ("padded", "unbatched") and
              not (training and kwargs.get("dropout")))
    n = _layers_dirs(name)
    return (["lstm_stack"] if stacks else ["lstm"] * n) + ["lstm_backward"] * n


@pytest.mark.parametrize("name", CONFIGS)
def test_matches_nn_lstm(device, name):
    kwargs, form, _, training, _ = CONFIGS[name]
    if device == "cuda" and training and kwargs.get("dropout"):
        pytest.skip("cuDNN draws its own dropout masks (the CPU case checks that they match)")
    ref, fast = pair(kwargs, device=device)
    set_modes(ref, fast, name, device)
    x, hx = make_inputs(name, device=device)
    expected, native_ops = all_results(ref, name, x, hx)
    got, ops = all_results(fast, name, x, hx)
    # the ops ran (a fallback would match trivially)
    assert native_ops == []
    assert ops == _expected_ops(name), ops
    assert list(got) == list(expected)
    for what in expected:
        a, b = got[what], expected[what]
        assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape)
        err = rel_err(a, b)
        assert err <= FLOAT64_BOUND, "%s %s: relative error %.3e" % (name, what, err)
    if training and kwargs.get("dropout"):  # the masks matched, and dropped something
        ref.eval()
        assert not torch.allclose(forward(ref, name, x, hx)[0], expected["output"])


FLOAT32_CONFIGS = ["plain", "layers3", "bi-layers2", "batch-first-proj", "no-bias-bi",
                   "packed-sorted-hx-bi", "packed-unsorted-hx-bi-proj", "dropout-eval"]


@pytest.fixture
def no_tf32():
    """float32 as float32 on CUDA too (TF32 is on by default for cuDNN's RNNs and the ops)."""
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("name", FLOAT32_CONFIGS)
def test_float32_within_twice_nn_lstms_error(device, name, no_tf32):
    kwargs = CONFIGS[name][0]
    ref32, fast32 = pair(kwargs, torch.float32, device)
    set_modes(ref32, fast32, name, device)
    ref64 = copy.deepcopy(ref32).double()
    x, hx = make_inputs(name, torch.float32, device)
    ref, _ = all_results(ref64, name, x.double(), hx and tuple(t.double() for t in hx))
    native, _ = all_results(ref32, name, x, hx)
    got, ops = all_results(fast32, name, x, hx)
    assert ops[0] in ("lstm", "lstm_stack")  # the ops ran (a fallback would match trivially)
    failures = []
    for what in ref:
        own, err = rel_err(native[what], ref[what]), rel_err(got[what], ref[what])
        assert got[what].dtype == torch.float32
        if not err <= ERROR_FACTOR * own:
            failures.append("%s: error %.3e > %g x nn.LSTM's %.3e" % (what, err, ERROR_FACTOR,
                                                                       own))
    assert not failures, "\n".join(failures)


def test_the_matrix_covers_nn_lstms_options():
    seen = lambda key: {CONFIGS[n][0].get(key) for n in CONFIGS}  # noqa: E731
    assert {1, 2, 3} <= seen("num_layers") | {1}
    assert {True, None} <= seen("bidirectional") and True in seen("batch_first")
    assert 3 in seen("proj_size") and False in seen("bias")
    forms = {(CONFIGS[n][1], CONFIGS[n][2]) for n in CONFIGS}
    assert {(f, h) for f in ("padded", "unbatched", "sorted", "unsorted")
            for h in (True, False)} <= forms
    assert {(CONFIGS[n][0].get("dropout", 0) > 0, CONFIGS[n][3]) for n in CONFIGS} >= {
        (True, True), (True, False)}


# --- The module's other duties -------------------------------------------------------------------


def test_state_dict_both_ways_and_parameter_names():
    torch.manual_seed(0)
    ref = nn.LSTM(4, 6, 2, bidirectional=True, proj_size=3)
    fast = fastlayers.LSTM(4, 6, 2, bidirectional=True, proj_size=3).force_algorithm("fused")
    assert [n for n, _ in fast.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert list(fast.state_dict()) == list(ref.state_dict())
    assert fast._flat_weights_names == ref._flat_weights_names
    assert [p.shape for p in fast.parameters()] == [p.shape for p in ref.parameters()]
    fast.load_state_dict(ref.state_dict())  # nn.LSTM -> fastlayers
    x = torch.randn(5, 2, 4)
    torch.testing.assert_close(fast(x)[0], ref(x)[0], rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        for p in fast.parameters():
            p.mul_(0.5)
    back = nn.LSTM(4, 6, 2, bidirectional=True, proj_size=3)
    back.load_state_dict(fast.state_dict())  # fastlayers -> nn.LSTM
    assert all(torch.equal(a, b) for a, b in zip(back.parameters(), fast.parameters()))
    torch.testing.assert_close(fast(x)[0], back(x)[0], rtol=1e-5, atol=1e-6)
    assert repr(fast) == repr(back)


def test_convert_keeps_the_parameter_objects_and_the_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.LSTM(4, 6, 2, dtype=torch.float64))
    twin = copy.deepcopy(model)
    params = list(model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_twin = torch.optim.SGD(twin.parameters(), lr=0.1)
    assert fastlayers.convert(model) is model
    assert type(model[0]) is fastlayers.LSTM
    assert all(a is b for a, b in zip(model.parameters(), params))
    model[0].force_algorithm("fused")
    x = torch.randn(3, 2, 4, dtype=torch.float64)
    for _ in range(2):  # the optimizer built before the conversion moves what the ops read
        for m, o in ((model, opt), (twin, opt_twin)):
            o.zero_grad()
            m(x)[0].square().sum().backward()
            o.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    with RecordOps() as rec:
        model(x)
    assert [n for n, _ in rec.calls] == ["lstm_stack"]  # two layers: one wavefront


def test_flatten_parameters_is_accepted():
    ref, fast = pair({"num_layers": 2})
    x = torch.randn(4, 2, 5, dtype=torch.float64)
    before = fast(x)[0]
    assert fast.flatten_parameters() is None
    torch.testing.assert_close(fast(x)[0], before, rtol=0, atol=0)


def test_convert_leaves_subclasses_and_other_types_alone():
    class Mine(nn.LSTM):
        pass
    m = nn.Sequential(Mine(3, 4), nn.LSTM(4, 4), nn.GRU(4, 4))
    fastlayers.convert(m)
    assert type(m[0]) is Mine and type(m[1]) is fastlayers.LSTM and type(m[2]) is nn.GRU
    # not an nn.LSTM instance (torch.compile refuses to trace those): an RNNBase in LSTM mode
    assert isinstance(m[1], nn.RNNBase) and not isinstance(m[1], nn.LSTM)
    assert m[1].mode == "LSTM"


def _hx(L, B, R, H, **kw):
    return (torch.zeros(L, B, R, dtype=torch.float64, **kw),
            torch.zeros(L, B, H, dtype=torch.float64, **kw))


# name: (input form, input, hx) for an nn.LSTM(5, 7, 2) in float64
BAD_INPUTS = {
    "features": ("padded", lambda: torch.randn(5, 3, 4, dtype=torch.float64), None),
    "rank-4": ("padded", lambda: torch.randn(2, 5, 3, 5, dtype=torch.float64), None),
    "rank-1": ("padded", lambda: torch.randn(5, dtype=torch.float64), None),
    "float32-input": ("padded", lambda: torch.randn(5, 3, 5), None),
    "int-input": ("padded", lambda: torch.ones(5, 3, 5, dtype=torch.int64), None),
    "hx-layers": ("padded", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                  lambda: _hx(1, 3, 7, 7)),
    "hx-batch": ("padded", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                 lambda: _hx(2, 2, 7, 7)),
    "hx-hidden": ("padded", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                  lambda: _hx(2, 3, 6, 7)),
    "cx-hidden": ("padded", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                  lambda: _hx(2, 3, 7, 8)),
    "hx-2d-for-batched": ("padded", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                          lambda: tuple(t[:, 0] for t in _hx(2, 3, 7, 7))),
    "hx-3d-for-unbatched": ("padded", lambda: torch.randn(5, 5, dtype=torch.float64),
                            lambda: _hx(2, 1, 7, 7)),
    "hx-three-states": ("padded", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                        lambda: _hx(2, 3, 7, 7) + (torch.zeros(2, 3, 7, dtype=torch.float64),)),
    "hx-one-state": ("padded", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                     lambda: _hx(2, 3, 7, 7)[:1]),
    "empty-sequence": ("padded", lambda: torch.randn(0, 3, 5, dtype=torch.float64), None),
    "packed-features": ("packed", lambda: torch.randn(5, 3, 4, dtype=torch.float64), None),
    "packed-hx-batch": ("packed", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                        lambda: _hx(2, 4, 7, 7)),
    "packed-hx-fewer-layers": ("packed", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                               lambda: _hx(1, 3, 7, 7)),
    "packed-hx-more-layers": ("packed", lambda: torch.randn(5, 3, 5, dtype=torch.float64),
                              lambda: _hx(3, 3, 7, 7)),
}


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_nn_lstms_errors(bad):
    form, x, hx = BAD_INPUTS[bad]
    x, hx = x(), hx and hx()
    torch.manual_seed(0)
    ref = nn.LSTM(5, 7, 2, dtype=torch.float64)
    fast = fastlayers.convert(copy.deepcopy(ref)).force_algorithm("fused")
    if form == "packed":
        x = pack_padded_sequence(x, [5, 3, 2])
    errors = []
    for m in (ref, fast):
        try:
            m(x, hx)
            errors.append(None)
        except Exception as e:  # noqa: BLE001 (the type is what is compared)
            errors.append(e)
    assert errors[0] is not None, "nn.LSTM accepts it"
    assert type(errors[1]) is type(errors[0]), "nn.LSTM raises %r, fastlayers.LSTM %r" % tuple(
        errors)
    if form == "padded":  # nn.LSTM's own checks in Python: the same message
        assert str(errors[1]) == str(errors[0])


# The stack path (lstm_stack: two or more unidirectional layers) and the per-layer path.
PATH_CONFIGS = ["layers3", "bi-layers2"]


@pytest.mark.parametrize("name", PATH_CONFIGS)
def test_frozen_weights_still_give_the_other_gradients(name):
    ref, fast = pair(CONFIGS[name][0])
    x, hx = make_inputs(name)
    got = []
    for m in (ref, fast):
        m.requires_grad_(False)
        xs = [t.detach().clone().requires_grad_() for t in (x, *hx)]
        y, (h, c) = m(xs[0], tuple(xs[1:]))
        got.append(torch.autograd.grad((y * y.cos()).sum() + (c ** 3).sum(), xs))
    for a, b in zip(*got):
        assert rel_err(b, a) <= FLOAT64_BOUND


@pytest.mark.parametrize("name", PATH_CONFIGS)
def test_weights_given_for_the_call_are_the_ones_used(name):
    # torch.func.functional_call and parametrizations put other tensors behind the parameter
    # names for a call; nn.LSTM reads them there
    ref, fast = pair(CONFIGS[name][0])
    x, hx = make_inputs(name)
    params = {n: p.detach() * 1.5 for n, p in ref.named_parameters()}
    a, b = (torch.func.functional_call(m, params, (x, hx))[0] for m in (ref, fast))
    assert rel_err(b, a) <= FLOAT64_BOUND

    class Twice(nn.Module):
        def forward(self, w):
            return 2 * w

    for m in (ref, fast):
        torch.nn.utils.parametrize.register_parametrization(m, "weight_hh_l1", Twice())
    assert rel_err(fast(x, hx)[0], ref(x, hx)[0]) <= FLOAT64_BOUND


@pytest.mark.parametrize("used", ["output", "h_n", "c_n", "h_n c_n"])
@pytest.mark.parametrize("name", ["plain"] + PATH_CONFIGS)
def test_a_loss_of_some_results_only(device, name, used):
    # The results a loss leaves out reach the backward as no gradient at all (not zeros), and are
    # read as zero there.
    ref, fast = pair(CONFIGS[name][0], device=device)
    x, hx = make_inputs(name, device=device)
    got = []
    for m in (ref, fast):
        xs = [t.detach().clone().requires_grad_() for t in (x, *hx)]
        y, (h, c) = m(xs[0], tuple(xs[1:]))
        terms = {"output": (y * y.cos()).sum(), "h_n": h.square().sum(), "c_n": (c ** 3).sum()}
        loss = sum(terms[k] for k in used.split())
        got.append(torch.autograd.grad(loss, xs + list(m.parameters())))
    for a, b in zip(*got):
        assert rel_err(b, a) <= FLOAT64_BOUND, (name, used, rel_err(b, a))


@pytest.mark.parametrize("name", ["plain", "plain-nohx", "bi-layers2", "layers3"])
def test_states_can_be_changed_in_place(device, name):
    # As nn.LSTM's: h_n and c_n changed in place (a one-layer module's are views of its layer's
    # results), then differentiated, give nn.LSTM's gradients. (The output is not: on CUDA
    # nn.LSTM's backward reads its output, and refuses it changed.)
    ref, fast = pair(CONFIGS[name][0], device=device)
    x, hx = make_inputs(name, device=device)
    got = []
    for m in (ref, fast):
        xs = [t.detach().clone().requires_grad_() for t in (x, *(hx or ()))]
        y, (h, c) = m(xs[0], tuple(xs[1:]) if hx else None)
        h.add_(1)
        c.mul_(h.detach())
        loss = (y * y.cos()).sum() + h.square().sum() + (c ** 3).sum()
        got.append([y, h, c] + list(torch.autograd.grad(loss, xs + list(m.parameters()))))
    for a, b in zip(*got):
        assert rel_err(b, a) <= FLOAT64_BOUND


@pytest.mark.parametrize("name", ["plain", "plain-nohx", "bi-layers2", "layers3",
                                  "packed-sorted-nohx"])
def test_states_detach_in_place(device, name):
    # Truncated backpropagation through time detaches the states in place between chunks, as
    # nn.LSTM's allow; the next chunk from them gives nn.LSTM's results.
    ref, fast = pair(CONFIGS[name][0], device=device)
    x, hx = make_inputs(name, device=device)
    got = []
    for m in (ref, fast):
        x1 = x.detach().clone().requires_grad_()
        _, h, c = forward(m, name, x1, hx)
        h.detach_()
        c.detach_()
        assert not h.requires_grad and not c.requires_grad
        y2, h2, c2 = forward(m, name, x1, (h, c))
        got.append([y2, h2, c2] + list(torch.autograd.grad(y2.sum() + h2.sum(), [x1])))
    for a, b in zip(*got):
        assert rel_err(b, a) <= FLOAT64_BOUND


@pytest.mark.parametrize("name", ["plain", "bi-layers2", "layers3"])
def test_a_training_step_enters_no_python_autograd(name):
    # Eager calls run the ops below autograd from C++ nodes: the ops' registered (Python)
    # autograd is entered neither in the forward nor in the backward.
    ref, fast = pair(CONFIGS[name][0])
    x, hx = make_inputs(name)
    x = x.detach().requires_grad_()

    def step():
        y, (h, c) = fast(x, hx)
        (y.sum() + h.sum() + c.sum()).backward()
    step()
    assert python_autograd_calls(step) == []


def test_autocast_asks_the_tuner_for_its_dtype(device, monkeypatch):
    # Under CUDA autocast the ops run in its dtype: the tuner is asked for that dtype (TF32 off),
    # not the float32 input's, and the same input without autocast asks for float32 again (the
    # module's remembered route is per dtype the ops run in). On the CPU, whose candidates are
    # float32 and float64, the layer keeps its input dtype's choice (asked once): asked for
    # bfloat16 the tuner would offer only nn.LSTM's path, where the ops run under autocast.
    asked = []

    def choose(config, T, B, dtype, dev, packed, tf32, deterministic, pass_):
        asked.append((dtype, tf32))
        return "fused"
    monkeypatch.setattr(fastlayers.rnn, "_choose", choose)
    _, fast = pair(CONFIGS["plain"][0], dtype=torch.float32, device=device)
    fast.force_algorithm(None)
    x, hx = make_inputs("plain", dtype=torch.float32, device=device)
    for _ in range(2):
        with torch.autocast(device, dtype=torch.bfloat16):
            y, _ = fast(x, hx)
        assert y.dtype == torch.bfloat16
        fast(x, hx)
    if device == "cuda":
        assert asked == [(torch.bfloat16, False),
                         (torch.float32, fastlayers.lstm.rnn_tf32_allowed())]
    else:
        assert asked == [(torch.float32, False)]


@pytest.mark.parametrize("name", ["plain", "bi-layers2", "layers3"])
def test_autocast_runs_the_layers_in_its_dtype(device, name):
    # Under torch.autocast the layers run in its dtype, as nn.LSTM's do, and the float32
    # parameters and input get float32 gradients through the casts: the same values, bit for
    # bit, as the ops called on operands cast by hand.
    dtype = torch.bfloat16
    ref, fast = pair(CONFIGS[name][0], dtype=torch.float32, device=device)
    x, hx = make_inputs(name, dtype=torch.float32, device=device)
    xs = [t.detach().clone().requires_grad_() for t in (x, *hx)]
    with torch.autocast(device, dtype=dtype):
        y, (h, c) = fast(*xs[:1], tuple(xs[1:]))
    assert y.dtype == h.dtype == c.dtype == dtype
    got = torch.autograd.grad((y.float() ** 2).sum() + h.float().sum() + c.float().sum(),
                              xs + list(fast.parameters()))

    ys = [t.detach().clone().requires_grad_() for t in (x, *hx)]
    params = list(fast.parameters())
    cast = [p.to(dtype) for p in params]
    per = len(params) // _layers_dirs(name)
    tf32 = device == "cuda" and fastlayers.lstm.rnn_tf32_allowed()  # the module's argument
    inp, hs, cs = ys[0].to(dtype), [], []
    if fast._fl_stacks(False, x):  # one lstm_stack call
        inp, h1, c1, _, _, _ = torch.ops.fastlayers.lstm_stack(
            inp, ys[1].to(dtype), ys[2].to(dtype), cast, True, tf32)
        hs, cs = list(h1), list(c1)
    for layer in range(0 if hs else fast.num_layers):
        outs = []
        for d in range(2 if fast.bidirectional else 1):
            k = layer * (2 if fast.bidirectional else 1) + d
            o, hk, ck, _, _ = torch.ops.fastlayers.lstm(
                inp, ys[1][k].to(dtype), ys[2][k].to(dtype), *cast[per * k:per * k + 4], None,
                None, d == 1, tf32)
            outs.append(o)
            hs.append(hk)
            cs.append(ck)
        inp = torch.cat(outs, -1)
    want = [inp, torch.stack(hs), torch.stack(cs)]
    for a, b in zip((y, h, c), want):
        assert torch.equal(a, b)
    expected = torch.autograd.grad((want[0].float() ** 2).sum() + want[1].float().sum() +
                                   want[2].float().sum(), ys + params)
    for a, b in zip(got, expected):
        assert a.dtype == torch.float32 and torch.equal(a, b)


@pytest.mark.parametrize("name", PATH_CONFIGS)
def test_the_two_bias_gradients_are_tensors_of_their_own(name):
    ref, fast = pair(CONFIGS[name][0])
    x, hx = make_inputs(name)
    y, _ = fast(x, hx)
    biases = [p for n, p in fast.named_parameters() if n.startswith("bias_")]
    grads = torch.autograd.grad(y.square().sum(), biases)
    ptrs = [g.data_ptr() for g in grads]
    assert len(set(ptrs)) == len(ptrs)


def _output_tangents(modules, call):
    """Per module, the tangent of the output of call(module), run inside a forward-AD level."""
    import torch.autograd.forward_ad as fwAD
    out = []
    for m in modules:
        with fwAD.dual_level():
            y, _ = call(m)
            out.append(fwAD.unpack_dual(y).tangent)
    return out


@pytest.mark.parametrize("name", PATH_CONFIGS)
def test_torch_func_and_forward_ad_run_nn_lstms_forward(name):
    # the ops' autograd has no functorch or forward-AD rules: such calls run nn.LSTM's forward
    import torch.autograd.forward_ad as fwAD
    ref, fast = pair(CONFIGS[name][0])
    x, hx = make_inputs(name)
    params = {n: p.detach() for n, p in ref.named_parameters()}
    grads = [torch.func.grad(lambda p: torch.func.functional_call(m, p, (x, hx))[0].sum())(params)
             for m in (ref, fast)]
    for k in params:
        assert rel_err(grads[1][k], grads[0][k]) <= FLOAT64_BOUND, k
    assert "torch.func transform" in tuner.report()
    tangents = _output_tangents((ref, fast), lambda m: m(fwAD.make_dual(x, torch.ones_like(x)), hx))
    assert rel_err(tangents[1], tangents[0]) <= FLOAT64_BOUND
    assert "forward-mode AD" in tuner.report()
    _, ops = all_results(fast, name, x, hx)  # outside those: the ops again
    assert ops == _expected_ops(name)


@pytest.mark.parametrize("name", PATH_CONFIGS)
def test_forward_ad_through_a_weight_runs_nn_lstms_forward(name):
    # the tangent may ride on a weight alone (functional_call with a dual parameter): the ops
    # would drop it, so the call runs nn.LSTM's forward, whose tangent is the reference
    import torch.autograd.forward_ad as fwAD
    ref, fast = pair(CONFIGS[name][0])
    x, hx = make_inputs(name)

    def dual_weight(m):
        params = {n: p.detach() for n, p in m.named_parameters()}
        params["weight_hh_l0"] = fwAD.make_dual(params["weight_hh_l0"],
                                                torch.ones_like(params["weight_hh_l0"]))
        return torch.func.functional_call(m, params, (x, hx))

    tangents = _output_tangents((ref, fast), dual_weight)
    assert tangents[0] is not None and tangents[0].abs().max() > 0
    assert tangents[1] is not None and rel_err(tangents[1], tangents[0]) <= FLOAT64_BOUND


def test_default_path_is_nn_lstms_with_the_reason():
    ref, fast = pair({"num_layers": 2, "bidirectional": True})
    fast.force_algorithm(None)
    x = torch.randn(5, 3, 5, dtype=torch.float64, requires_grad=True)
    with RecordOps() as rec:
        y, (h, c) = fast(x)
        y.sum().backward()
    assert rec.calls == []
    yr, (hr, cr) = ref(x)
    for a, b in ((y, yr), (h, hr), (c, cr)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    rows = [r for r in tuner.decisions() if r["key"].startswith("lstm.")]
    assert [r["choice"] for r in rows] == ["native"]
    assert "FASTLAYERS_TUNE_CPU" in rows[0]["reason"]
    assert rows[0]["key"].startswith("lstm.training|")
    assert "FASTLAYERS_TUNE_CPU" in tuner.report()


def test_force_algorithm():
    fast = fastlayers.LSTM(5, 7)
    with pytest.raises(ValueError, match="'bogus'"):
        fast.force_algorithm("bogus")
    assert fast.force_algorithm("native") is fast
    x = torch.randn(3, 2, 5)
    with RecordOps() as rec:
        fast(x)
    assert rec.calls == [] and not tuner.decisions()  # pinned: nn.LSTM's path, nothing asked
    with RecordOps() as rec:
        fast.force_algorithm("fused")(x)
    assert [n for n, _ in rec.calls] == ["lstm"]


def test_unsupported_dtype_falls_back_with_the_reason():
    fast = fastlayers.LSTM(4, 6).to(torch.bfloat16).force_algorithm("fused")
    ref = nn.LSTM(4, 6).to(torch.bfloat16)
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(3, 2, 4, dtype=torch.bfloat16)
    with RecordOps() as rec:
        y = fast(x)[0]
    assert rec.calls == []
    torch.testing.assert_close(y, ref(x)[0], rtol=0, atol=0)
    assert any("bfloat16 on cpu" in r["reason"] for r in tuner.decisions())
    assert "bfloat16 on cpu" in tuner.report()


# --- Training ------------------------------------------------------------------------------------


class LM(nn.Module):
    """Embedding, a 2-layer LSTM with dropout between the layers, a linear head."""

    def __init__(self, vocab=50, dim=8, hidden=12):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, 2, dropout=0.2)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        return self.out(self.rnn(self.emb(tokens))[0])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_language_model_trains_the_same(dtype):
    torch.manual_seed(0)
    plain = LM().to(dtype)
    conv = fastlayers.convert(copy.deepcopy(plain))
    assert type(conv.rnn) is fastlayers.LSTM
    conv.rnn.force_algorithm("fused")
    opts = [torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.5) for m in (plain, conv)]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        tokens = torch.randint(0, 50, (9, 3), generator=g)
        losses = []
        for m, opt in zip((plain, conv), opts):
            torch.manual_seed(step)  # the same dropout masks
            opt.zero_grad()
            loss = F.cross_entropy(m(tokens[:-1]).flatten(0, 1), tokens[1:].flatten())
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=tol), (step, losses)
    for (name, p), q in zip(conv.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol * 1e-2, msg=name)


def test_the_tuner_is_asked_once_per_signature(monkeypatch):
    # The choice is remembered per input signature (host time every call would pay); a new
    # signature, a training pass, a pin and tuner.clear() ask again.
    from fastlayers import rnn
    calls = []
    real = rnn._choose
    monkeypatch.setattr(rnn, "_choose", lambda *a: calls.append(a) or real(*a))
    m = fastlayers.LSTM(4, 6)
    x = torch.randn(3, 2, 4)
    with torch.no_grad():
        m(x)
        m(x)
        assert len(calls) == 1
        m(torch.randn(5, 2, 4))
        assert len(calls) == 2
    m(x)  # gradients needed: the training pass
    m(x)
    assert len(calls) == 3
    m.force_algorithm("fused")
    with torch.no_grad():
        m(x)
    m.force_algorithm(None)
    with torch.no_grad():
        m(x)
        assert len(calls) == 3  # pinned: no tuner; unpinned again: the remembered choice
        tuner.clear()
        m(x)
    assert len(calls) == 4


def test_copies_ask_the_tuner_again():
    m = fastlayers.LSTM(4, 6)
    with torch.no_grad():
        m(torch.randn(3, 2, 4))
    assert m.__dict__.get("_fl_routes")
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    for c in (copy.deepcopy(m), torch.load(buf, weights_only=False)):
        assert "_fl_routes" not in c.__dict__


def test_jit_script_refuses_with_the_reason():
    # the module cannot be scripted; an nn.LSTM handed to script instead would replace it in the
    # caller's model: a clear error, the model unchanged
    model = nn.Sequential(fastlayers.LSTM(4, 8))
    with pytest.raises(RuntimeError, match=r"fastlayers.LSTM\(4, 8\) cannot be scripted with "
                                           r"torch.jit.script: use torch.compile or torch.export"):
        torch.jit.script(model)
    assert type(model[0]) is fastlayers.LSTM
