"""fastlayers.LSTM as a drop-in nn.LSTM: every configuration against nn.LSTM with the same
weights (outputs, states and every gradient), state_dict both ways, convert, errors, the default
path, and a language model trained both ways."""
import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import fastlayers
from fastlayers import tuner

# (kwargs of nn.LSTM, input form, hx given, training)
CONFIGS = {
    "plain": ({}, "padded", True, False),
    "layers3": ({"num_layers": 3}, "padded", True, False),
    "bi-layers2": ({"bidirectional": True, "num_layers": 2}, "padded", True, False),
    "batch-first-proj": ({"batch_first": True, "proj_size": 3}, "padded", True, False),
    "no-bias": ({"bias": False}, "padded", False, False),
    "packed-unsorted-bi-proj": ({"num_layers": 2, "bidirectional": True, "proj_size": 3},
                                "packed", True, False),
    "packed-batch-first-nohx": ({"num_layers": 2, "batch_first": True}, "packed", False, False),
    "unbatched": ({}, "unbatched", True, False),
    "unbatched-bi-batch-first": ({"batch_first": True, "bidirectional": True}, "unbatched",
                                 False, False),
    "dropout-train": ({"num_layers": 3, "dropout": 0.5}, "padded", True, True),
    "dropout-eval": ({"num_layers": 2, "dropout": 0.5}, "padded", True, False),
}
LENGTHS = [2, 5, 3]  # unsorted: the PackedSequence permutes


def pair(kwargs, dtype=torch.float64, device="cpu"):
    torch.manual_seed(0)
    ref = nn.LSTM(4, 6, dtype=dtype, device=device, **kwargs)
    fast = fastlayers.convert(copy.deepcopy(ref)).force_algorithm("fused")
    return ref, fast


def run(m, x, form, hx, seed):
    torch.manual_seed(seed)  # the same dropout masks for both modules
    inp = pack_padded_sequence(x, LENGTHS, batch_first=m.batch_first,
                               enforce_sorted=False) if form == "packed" else x
    y, (h, c) = m(inp, hx)
    return y.data if form == "packed" else y, h, c


@pytest.mark.parametrize("name", CONFIGS)
def test_matches_nn_lstm(device, name):
    kwargs, form, with_hx, training = CONFIGS[name]
    if device == "cuda" and training and kwargs.get("dropout"):
        pytest.skip("cuDNN draws its own dropout masks (the CPU case checks the masks match)")
    ref, fast = pair(kwargs, device=device)
    ref.train(training), fast.train(training)
    D = 2 if kwargs.get("bidirectional") else 1
    L = kwargs.get("num_layers", 1)
    R = kwargs.get("proj_size", 0) or 6
    T, B = 5, 3
    g = torch.Generator().manual_seed(1)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(device)  # noqa: E731
    if form == "unbatched":
        x = rnd(T, 4)
        hx = (rnd(L * D, R), rnd(L * D, 6)) if with_hx else None
    else:
        x = rnd(B, T, 4) if kwargs.get("batch_first") else rnd(T, B, 4)
        hx = (rnd(L * D, B, R), rnd(L * D, B, 6)) if with_hx else None
    x.requires_grad_()
    if hx is not None:
        hx = tuple(t.requires_grad_() for t in hx)
    got = []
    for m in (ref, fast):
        y, h, c = run(m, x, form, hx, seed=7)
        loss = (y * y.cos()).sum() + h.square().sum() + (c ** 3).sum()
        wrt = [x] + (list(hx) if hx is not None else []) + list(m.parameters())
        got.append([y, h, c] + list(torch.autograd.grad(loss, wrt)))
    assert len(got[0]) == len(got[1])
    for i, (a, b) in enumerate(zip(*got)):
        assert a.shape == b.shape, i
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12, msg="value %d" % i)


def test_float32_within_twice_nn_lstms_error():
    ref, fast = pair({"num_layers": 2, "bidirectional": True})
    ref64 = copy.deepcopy(ref)
    ref.float(), fast.float()
    x = torch.randn(9, 4, 4, dtype=torch.float64)
    y64 = ref64(x)[0]
    e_nn = ((ref(x.float())[0].double() - y64).norm() / y64.norm()).item()
    e_fl = ((fast(x.float())[0].double() - y64).norm() / y64.norm()).item()
    assert e_fl <= 2 * e_nn, (e_fl, e_nn)


def test_state_dict_both_ways_and_the_same_parameters():
    ref = nn.LSTM(4, 6, 2, bidirectional=True, proj_size=3)
    fast = fastlayers.LSTM(4, 6, 2, bidirectional=True, proj_size=3)
    assert list(fast.state_dict()) == list(ref.state_dict())
    assert [p.shape for p in fast.parameters()] == [p.shape for p in ref.parameters()]
    fast.load_state_dict(ref.state_dict())
    back = nn.LSTM(4, 6, 2, bidirectional=True, proj_size=3)
    back.load_state_dict(fast.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(back.parameters(), ref.parameters()))
    params = list(ref.parameters())
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    fastlayers.convert(ref)
    assert type(ref) is fastlayers.LSTM and all(a is b for a, b in zip(ref.parameters(), params))
    ref.force_algorithm("fused")(torch.randn(3, 2, 4))[0].sum().backward()
    opt.step()  # the optimizer built before the conversion still holds the parameters
    assert repr(ref) == repr(back)
    ref.flatten_parameters()  # accepted, as nn.LSTM's


def test_subclasses_are_left_alone_and_compile_sees_no_nn_lstm():
    class Mine(nn.LSTM):
        pass
    m = nn.Sequential(Mine(3, 4), nn.LSTM(4, 4))
    fastlayers.convert(m)
    assert type(m[0]) is Mine and type(m[1]) is fastlayers.LSTM
    # torch.compile refuses every nn.LSTM instance; fastlayers.LSTM is an RNNBase in LSTM mode
    assert isinstance(m[1], nn.RNNBase) and not isinstance(m[1], nn.LSTM)
    assert m[1].mode == "LSTM"


@pytest.mark.parametrize("bad", ["features", "rank", "hx"])
def test_nn_lstm_errors(bad):
    ref, fast = pair({"num_layers": 2})
    x = {"features": torch.randn(5, 3, 7, dtype=torch.float64),
         "rank": torch.randn(2, 5, 3, 4, dtype=torch.float64),
         "hx": torch.randn(5, 3, 4, dtype=torch.float64)}[bad]
    hx = (torch.zeros(1, 3, 6, dtype=torch.float64),) * 2 if bad == "hx" else None
    errors = []
    for m in (ref, fast):
        with pytest.raises((RuntimeError, ValueError)) as e:
            m(x, hx)
        errors.append((type(e.value), str(e.value)))
    assert errors[0] == errors[1]


def test_default_path_and_the_reason():
    ref, fast = pair({})
    fast.force_algorithm(None)
    x = torch.randn(5, 3, 4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fast(x)[0], ref(x)[0], rtol=0, atol=0)
    (row,) = [r for r in tuner.decisions() if r["key"].startswith("lstm.")]
    assert row["choice"] == "native" and "FASTLAYERS_TUNE_CPU" in row["reason"]
    with pytest.raises(ValueError, match="bogus"):
        fast.force_algorithm("bogus")
    fast.force_algorithm("native")  # pinned: nn.LSTM's path, no decision asked


def test_unsupported_dtype_falls_back_with_the_reason():
    fast = fastlayers.LSTM(4, 6).to(torch.bfloat16).force_algorithm("fused")
    fast(torch.randn(3, 2, 4, dtype=torch.bfloat16))
    assert any("bfloat16 on cpu" in r["reason"] for r in tuner.decisions())


def test_language_model_trains_the_same():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.rnn, self.out = nn.Embedding(50, 8), nn.LSTM(8, 12, 2), nn.Linear(12, 50)

        def forward(self, t):
            return self.out(self.rnn(self.emb(t))[0])

    torch.manual_seed(0)
    plain = LM().double()
    conv = fastlayers.convert(copy.deepcopy(plain))
    conv.rnn.force_algorithm("fused")
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (plain, conv)]
    for step in range(4):
        tokens = torch.randint(0, 50, (9, 3))
        losses = []
        for m, opt in zip((plain, conv), opts):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(tokens[:-1]).view(-1, 50), tokens[1:].reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-12), step
