"""The LSTM's tuner: its problem and keys, its candidates, measuring, the cache file, and
fastlayers.LSTM following the decisions (eagerly and under torch.compile)."""
import dataclasses
import json
import warnings

import pytest
import torch
from torch import nn

import fastlayers
from fastlayers import algorithms, tuner
from fastlayers.tuner import lstm as tuner_lstm
from conv_samples import RecordOps

CONFIG = (6, 8, 0, 2, True, True)  # input, hidden, proj, layers, bidirectional, bias


def problem(T=5, B=3, dtype=torch.float32, device="cpu", packed=False, config=CONFIG):
    return tuner.LstmProblem.of(config, T, B, dtype, torch.device(device), packed, False, False)


def module():
    torch.manual_seed(0)
    return fastlayers.LSTM(6, 8, 2, bidirectional=True)


def lstm_ops(fn):
    with RecordOps() as rec:
        fn()
    return [name for name, _ in rec.calls]


def write_cache(entries):
    path = tuner.cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": tuner.FORMAT, "entries": entries}))
    tuner.clear()


def test_keys_tell_every_setting_apart():
    p = problem()
    assert p.key("training").startswith("lstm.training|T=5,B=3,I=6,H=8,R=8,L=2,D=2,bias=1,packed=0")
    variants = [problem(T=6), problem(B=4), problem(dtype=torch.float64), problem(packed=True),
                problem(config=(6, 8, 3, 2, True, True)), problem(config=(6, 8, 0, 1, True, True)),
                problem(config=(6, 8, 0, 2, False, True)), problem(config=(6, 8, 0, 2, True, False)),
                dataclasses.replace(p, tf32=True), dataclasses.replace(p, deterministic=True)]
    keys = {v.key("training") for v in variants} | {p.key("training"), p.key("forward")}
    assert len(keys) == len(variants) + 2


def test_candidates_and_fits():
    assert tuner.candidates_lstm(problem(), "training") == ["native", "fused"]
    assert tuner.candidates_lstm(problem(dtype=torch.float16), "forward") == ["native"]
    assert "float16 on cpu" in algorithms.fits("fused", problem(dtype=torch.float16), "forward")
    with pytest.raises(ValueError, match="pass must be one of"):
        algorithms.fits("fused", problem(), "input_grad")
    # conv2d labels do not serve an LSTM, nor the LSTM's a convolution
    assert "does not serve lstm" in algorithms.fits("fft:8x8", problem(), "forward")
    conv = tuner.ConvProblem.from_tensors(torch.randn(1, 2, 5, 5), torch.randn(2, 2, 3, 3), (1, 1))
    assert "does not serve conv2d" in algorithms.fits("fused", conv, "forward")


def test_cuda_is_offered_where_the_build_has_the_kernels(monkeypatch):
    cuda = dataclasses.replace(problem(), device_type="cuda")
    monkeypatch.setattr(fastlayers._C, "with_lstm_cuda", True, raising=False)
    # (and "persistent" after them where a CUDA device has room for it: test_lstm_persistent.py)
    assert tuner.candidates_lstm(cuda, "training")[:2] == ["native", "fused"]
    monkeypatch.setattr(fastlayers._C, "with_lstm_cuda", False, raising=False)
    assert tuner.candidates_lstm(cuda, "training") == ["native"]
    assert "without the LSTM's CUDA kernels" in algorithms.fits("fused", cuda, "training")


def test_cpu_keeps_native_unless_asked_to_measure():
    m = module()
    x = torch.randn(5, 3, 6)
    assert lstm_ops(lambda: m(x)[0].sum().backward()) == []
    (row,) = [r for r in tuner.decisions() if r["key"].startswith("lstm.")]
    assert row["key"].startswith("lstm.training|") and row["choice"] == "native"
    assert "FASTLAYERS_TUNE_CPU" in row["reason"]


@pytest.mark.parametrize("pass_", ["forward", "training"])
def test_measuring_checks_and_times_both(monkeypatch, pass_):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0.05)
    p = problem()
    d = tuner_lstm.measure(p, pass_, torch.device("cpu"))
    assert set(d.times_ms) == {"native", "fused"} and set(d.errors) == {"native", "fused"}
    # both within float32 rounding of the float64 reference
    assert all(e < 1e-5 for e in d.errors.values()), d.errors
    label = tuner.choose_lstm(p, pass_)
    assert label in ("native", "fused")
    assert tuner.cache_file().exists()


def wrong_lstm_op(monkeypatch, from_batch=1):
    """torch.ops.fastlayers.lstm scaled by 1.01 from batch `from_batch` on (the tuner's fused
    candidate computing something else), every other op as it is; in the module's eager call
    (_C.lstm_call) and in the op a traced graph calls alike."""
    real = torch.ops.fastlayers.lstm
    real_call = fastlayers._C.lstm_call

    def wrong_call(persistent, *args):
        out = real_call(persistent, *args)
        if persistent or args[0].shape[1] < from_batch:
            return out
        return (out[0] * 1.01,) + tuple(out[1:])
    monkeypatch.setattr(fastlayers._C, "lstm_call", wrong_call)

    class Wrong:
        def __getattr__(self, name):
            return getattr(torch.ops.fastlayers, name)

        @staticmethod
        def lstm(*args):
            out = real(*args)
            if args[0].shape[1] < from_batch:
                return out
            return (out[0] * 1.01,) + tuple(out[1:])
    monkeypatch.setattr(torch, "ops", type("Ops", (), {"fastlayers": Wrong()})())


def test_a_wrong_fused_is_not_chosen(monkeypatch):
    # The accuracy guard: a fused path that computes something else is skipped, not timed.
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    wrong_lstm_op(monkeypatch)
    d = tuner_lstm.measure(problem(), "forward", torch.device("cpu"))
    assert "fused" in d.skipped and "error" in d.skipped["fused"] and d.choice == "native"


def test_the_check_runs_the_batch_the_problem_runs(monkeypatch):
    # A candidate whose kernel path depends on the batch (the persistent kernel's does) is checked
    # on the problem's own batch up to CHECK_SAMPLES, and on CHECK_SAMPLES of a larger one: a fused
    # path wrong only from batch 5 on is caught at batch 5, and at a batch above the bound.
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    wrong_from = 5
    assert wrong_from <= tuner_lstm.CHECK_SAMPLES
    wrong_lstm_op(monkeypatch, wrong_from)
    for B in (wrong_from, tuner_lstm.CHECK_SAMPLES + 3):
        d = tuner_lstm.measure(problem(T=3, B=B), "forward", torch.device("cpu"))
        assert "fused" in d.skipped and "error" in d.skipped["fused"], (B, d.skipped)
    d = tuner_lstm.measure(problem(T=3, B=wrong_from - 1), "forward", torch.device("cpu"))
    assert "fused" not in d.skipped and "fused" in d.times_ms


def test_the_check_takes_rows_that_run_the_batchs_kernel(monkeypatch):
    # Which persistent kernel runs, and on clusters with how many n-tiles a cluster, depends on
    # the batch: the check takes CHECK_SAMPLES rows where they run the batch's path, else 64,
    # 128, ... rows (the first that does), at most the whole batch; in a training pass the
    # backward's path counts too.
    path = {False: lambda b: ("cluster", 1), True: lambda b: ("cluster", 1)}
    monkeypatch.setattr(fastlayers.lstm, "_persistent_path",
                        lambda batch, hidden, dtype, device, backward=False: path[backward](batch))
    labels, cpu = ["native", "fused", "persistent"], torch.device("cpu")
    n = tuner_lstm.CHECK_SAMPLES
    assert n == 32
    check = tuner_lstm._check_samples
    assert check(problem(B=100), "training", labels, cpu) == n
    path[True] = lambda b: ("cluster", 1) if b <= 56 else ("cluster", 2)
    assert check(problem(B=100), "forward", labels, cpu) == n
    assert check(problem(B=100), "training", labels, cpu) == 64
    assert check(problem(B=100), "training", labels[:2], cpu) == n  # no persistent candidate
    path[False] = lambda b: ("cluster", 1) if b <= 112 else ("grid", 0)
    assert check(problem(B=100), "forward", labels, cpu) == n
    assert check(problem(B=1000), "forward", labels, cpu) == 128
    assert check(problem(B=120), "forward", labels, cpu) == 120  # 128 rows: more than the batch
    assert check(problem(B=20), "forward", labels, cpu) == 20


def test_the_step_loops_graphs_are_recorded_before_the_timing(monkeypatch):
    # The ops' step loops record their CUDA graph at a shape's second call: the LSTM tuner warms
    # each candidate up twice before timing it (the measuring itself: test_measure.py).
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    seen = {}
    real = tuner_lstm.measure_candidates

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(tuner_lstm, "measure_candidates", spy)
    tuner_lstm.measure(problem(T=2, B=2), "forward", torch.device("cpu"))
    assert seen["warmups"] == 2


def test_the_module_follows_the_cache_file():
    m = module()
    x = torch.randn(5, 3, 6)
    p = problem()
    write_cache({p.key("training"): {"choice": "fused"}, p.key("forward"): {"choice": "native"}})
    tuner.set_mode("cache")
    ops = lstm_ops(lambda: m(x)[0].sum().backward())
    assert ops.count("lstm") == 4 and ops.count("lstm_backward") == 4  # 2 layers x 2 directions
    with torch.no_grad():
        assert lstm_ops(lambda: m(x)) == []
    ref = nn.LSTM(6, 8, 2, bidirectional=True)
    ref.load_state_dict(m.state_dict())
    torch.testing.assert_close(m(x)[0], ref(x)[0])


def test_an_unfit_file_entry_is_ignored():
    p = problem(dtype=torch.float64)
    write_cache({p.key("forward"): {"choice": "fft:8x8"}})
    tuner.set_mode("cache")
    m = module().double()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            assert lstm_ops(lambda: m(torch.randn(5, 3, 6, dtype=torch.float64))) == []
    assert any("fft:8x8" in str(w.message) for w in caught)


def test_compiled_module_uses_the_decision_with_no_graph_break():
    from torch._dynamo.utils import counters
    m = module()
    x = torch.randn(5, 3, 6)
    p = problem()
    write_cache({p.key("forward"): {"choice": "fused"}})
    tuner.set_mode("cache")
    counters.clear()
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(m, fullgraph=True, backend="eager")(x)[0]
        ref = nn.LSTM(6, 8, 2, bidirectional=True)
        ref.load_state_dict(m.state_dict())
        torch.testing.assert_close(got, ref(x)[0])
    assert not counters["graph_break"]
