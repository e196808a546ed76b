"""The tuner's measuring: a candidate's figure is what a step pays (host and device, back to back),
every candidate within tolerance is timed at least once whatever the budget, and the budget buys
rounds for the candidates that can still win, with fewer calls of slow ones."""
import re
import time

import pytest
import torch

import fastlayers
from fastlayers import algorithms, tuner
from fastlayers.tuner import conv2d as tuner_conv2d
from fastlayers.algorithms import NATIVE, Family


# Set by the layer check's other work in test_the_layer_check_counts_host_time_after_other_work,
# taken by the next call of a 'timed:cold=MS' label.
AFTER_OTHER_WORK = [False]
# Device time simulated on any device: a 'timed:device=MS' call adds MS, which the timer of
# simulated_device reads; that timer records the figures it was given (host, wall, wall's calls).
DEVICE_MS = [0.0]
DEVICE_TIMER_ARGS = []


class Timed(Family):
    """PyTorch's path with a cost added on the host ('timed:sleep=MS'), or PyTorch's result of
    the same input computed once and returned again ('timed:memo': nearly free; 'timed:spin=MS':
    the same after MS milliseconds of the host's own time, nothing on the device; 'timed:cold=MS':
    the same, spinning only in a call right after the layer check's other work; 'timed:device=MS':
    the memo, adding MS to the device time simulated by simulated_device)."""
    names = ("timed",)
    kinds = ("conv2d",)
    keeps_input_layout = True

    def __init__(self, labels):
        self.labels = labels

    def parse(self, name, params, label):
        return (params,)

    def format(self, name, params):
        return "timed:" + params[0]

    def candidates(self, problem, pass_):
        return [algorithms.parse(label) for label in self.labels]

    def conv2d_call(self, choice, pass_, padding, tf32):
        native = algorithms.conv2d_call(NATIVE, pass_, padding, tf32)
        what = choice.params[0]
        if what == "memo" or what.startswith(("spin=", "cold=", "device=")):
            memo = {}
            value = float(what.split("=")[1]) if "=" in what else 0.0
            cold = what.startswith("cold=")
            device_ms = value if what.startswith("device=") else 0.0
            ms = 0.0 if device_ms else value / 1e3  # the host's spin, in seconds

            def call(x, w, b, gy):
                key = (id(x), id(gy))
                if key not in memo:
                    memo[key] = (x, gy, native(x, w, b, gy))  # x, gy kept: ids stay theirs
                DEVICE_MS[0] += device_ms
                spin = ms if not cold or AFTER_OTHER_WORK[0] else 0.0
                AFTER_OTHER_WORK[0] = False
                t_end = time.perf_counter() + spin
                while time.perf_counter() < t_end:  # the host busy, as a slow host path is
                    pass
                return memo[key][2]
            return call
        delay = float(what.split("=")[1]) / 1e3

        def slow(x, w, b, gy):
            time.sleep(delay)
            return native(x, w, b, gy)
        return slow


@pytest.fixture
def timed(monkeypatch):
    def register(*labels):
        family = algorithms.register(Timed(labels))
        registered.append(family)
        return family
    registered = []
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    yield register
    AFTER_OTHER_WORK[0] = False
    DEVICE_MS[0] = 0.0
    DEVICE_TIMER_ARGS.clear()
    for family in registered:
        algorithms.unregister(family)


@pytest.fixture
def simulated_device(monkeypatch):
    """The tuner's device timer replaced, on any device, by one that reads the device time the
    calls simulate (DEVICE_MS): nothing else adds any."""
    def timer(device):
        def run(fn, args, calls, host_ms, wall_ms, wall_calls):
            DEVICE_TIMER_ARGS.append((calls, host_ms, wall_ms, wall_calls))
            before = DEVICE_MS[0]
            for _ in range(calls):
                fn(*args)
            return (DEVICE_MS[0] - before) / calls
        return run
    monkeypatch.setattr(tuner.measure, "device_timer", timer)
    monkeypatch.setattr(tuner_conv2d, "device_timer", timer)


def problem(device, S=4, C=16, K=16, H=24, W=24):
    # no FFT candidates in the way: kernel 1 x 1 over an image that leaves no tile
    x = torch.randn(S, C, H, W, device=device)
    w = torch.randn(K, C, 1, 1, device=device)
    p = tuner.ConvProblem.from_tensors(x, w, (0, 0), tf32=False)
    return p


def row_of(p, pass_="forward"):
    return {r["key"]: r for r in tuner.decisions()}[p.key(pass_)]


def only_timed(p, pass_="forward"):
    """The candidates of `p` without FFT ones: native and the test family."""
    return [c for c in tuner.candidates_conv2d(p, pass_) if c.split(":")[0] in ("native", "timed")]


@pytest.fixture
def no_fft(monkeypatch):
    fft = algorithms.fft.FAMILY
    monkeypatch.setattr(fft, "candidates", lambda problem, pass_: [])


def test_host_time_counts(timed, no_fft, device):
    """A candidate that costs the host 3 ms a call is slower in a step, whatever its device time."""
    timed("timed:sleep=3")
    tuner.set_budget(0.2)
    p = problem(device)
    assert tuner.choose_conv2d(p, "forward") == "native"
    row = row_of(p)
    assert row["times_ms"]["timed:sleep=3"] >= 3.0


@pytest.mark.device_alone
def test_host_time_beyond_the_baselines_is_paid_again(timed, no_fft, device):
    """On a GPU, a candidate with no device work but H ms of the host's own time a call, against
    PyTorch's convolution taking W ms on the device and little host time: back to back it costs
    about H, but a host-bound step pays H more than PyTorch's, so it wins only where W - H
    exceeds the extra host time (H = 0.25 W), not where it falls short (H = 0.65 W)."""
    if device != "cuda":
        pytest.skip("on a CPU the host's time is the wall time: nothing hides behind a device")
    tuner.set_budget(0.5)
    p = problem(device, S=32, C=1024, K=1024, H=96, W=96)
    x = torch.randn(p.S, p.C, p.H, p.W, device=device)
    w = torch.randn(p.K, p.C, 1, 1, device=device)
    # W: the least of 5 runs of 10 calls. Other work on the device only stretches a run, and a
    # W stretched so makes the spins that should win or lose far too long; the test runs with
    # no other GPU test beside it (device_alone), but other processes may share the device.
    runs = []
    with tuner.measure.problem_precision("conv", p):  # as the tuner runs PyTorch's candidate
        torch.nn.functional.conv2d(x, w)
        torch.cuda.synchronize()
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(10):
                torch.nn.functional.conv2d(x, w)
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - t0) * 1e3 / 10)
    W = min(runs)
    assert W > 1.5, "the layer is too small to be device-bound: %.3f ms" % W
    del x, w
    lose, win = "timed:spin=%.3f" % (0.65 * W), "timed:spin=%.3f" % (0.25 * W)
    family = timed(lose)
    choice = tuner.choose_conv2d(p, "forward")
    row = row_of(p)
    assert row["host_ms"]["native"] < 0.2 * W, (W, tuner.report())  # the premise: device-bound
    assert row["host_ms"][lose] >= 0.6 * W, (W, tuner.report())
    assert choice == "native", (W, tuner.report())
    assert row["times_ms"][lose] >= 2 * row["host_ms"][lose] - row["host_ms"]["native"] - 1e-9, \
        (W, tuner.report())
    algorithms.unregister(family)
    tuner.clear(file=True)
    timed(win)
    # The premise of the win: its host time near 0.25 W. A host busy with other work (a parallel
    # test run) can stretch the spin and break it; such a measurement is taken again, up to 3
    # times, and the premise asserted before the choice.
    for _ in range(3):
        choice = tuner.choose_conv2d(p, "forward")
        if row_of(p)["host_ms"][win] < 0.4 * W:
            break
        tuner.clear(file=True)
    assert row_of(p)["host_ms"][win] < 0.4 * W, (W, tuner.report())
    assert choice == win, (W, tuner.report())
    assert ", host " in tuner.report()


def test_device_time_beyond_the_baselines_is_paid_again(timed, no_fft, simulated_device, device):
    """A candidate that takes nearly no host time but a second of the device's a call (simulated:
    far beyond PyTorch's small convolution on any host), against PyTorch's: back to back its wall
    time would show the host's (here nothing of the device's at all), but a step whose device is
    the bottleneck pays that second, so it loses, and its figure says so."""
    timed("timed:device=1000")
    tuner.set_budget(0.1)
    p = problem(device)
    assert tuner.choose_conv2d(p, "forward") == "native", tuner.report()
    row = row_of(p)
    assert row["device_ms"] == {"native": 0.0, "timed:device=1000": 1000.0}, tuner.report()
    assert row["times_ms"]["timed:device=1000"] >= 1000.0
    assert ", device 1e+03)" in tuner.report()
    # the timer was given the step timer's figures of the same calls: host time to the last
    # call's return, at most the wall time to its completion; at most DEVICE_CALLS calls
    assert DEVICE_TIMER_ARGS and all(
        0 < host <= wall and 1 <= calls <= min(wall_calls, tuner.measure.DEVICE_CALLS)
        for calls, host, wall, wall_calls in DEVICE_TIMER_ARGS), DEVICE_TIMER_ARGS
    assert any(host < wall for _, host, wall, _ in DEVICE_TIMER_ARGS)


def test_less_device_time_than_the_baselines_earns_nothing(timed, no_fft, simulated_device,
                                                            device):
    """Device time below PyTorch's is no credit: a step whose host is the bottleneck does not see
    it, and the wall time back to back already shows it where the device is."""
    timed("timed:device=-1000")
    tuner.set_budget(0.1)  # rounds: a single slow figure of the memo does not leave it untimed
    p = problem(device)
    tuner.choose_conv2d(p, "forward")
    row = row_of(p)
    assert row["device_ms"].get("timed:device=-1000") == -1000.0, tuner.report()
    assert 0 < row["times_ms"]["timed:device=-1000"] < 1000, tuner.report()


def test_only_candidates_that_could_win_are_timed_on_the_device(timed, no_fft, simulated_device,
                                                                device, monkeypatch):
    """The device term only adds to a figure: a candidate that loses without it (3 ms of the
    host's a call), kept in the rounds here, is not timed on the device; one that would win
    without it is, beside PyTorch's path, with as many figures each as the rounds give the wall
    time."""
    monkeypatch.setattr(tuner.measure, "DROP_FACTOR", 1e9)  # every candidate in every round
    timed("timed:sleep=3", "timed:device=1000")
    tuner.set_budget(0.1)
    p = problem(device)
    assert tuner.choose_conv2d(p, "forward") == "native", tuner.report()
    row = row_of(p)
    assert row["device_ms"] == {"native": 0.0, "timed:device=1000": 1000.0}, tuner.report()
    assert row["runs"]["timed:sleep=3"] > 1  # in the rounds
    rounds = int(re.search(r"\((\d+) rounds", row["reason"]).group(1))
    assert len(DEVICE_TIMER_ARGS) == 2 * (1 + rounds), (DEVICE_TIMER_ARGS, row["reason"])
    # each figure given its own wall time's figures: first PyTorch's and the memo's first, one
    # call each (the memo's later ones many: a round of a nearly free call)
    assert [a[3] for a in DEVICE_TIMER_ARGS[:2]] == [1, 1], DEVICE_TIMER_ARGS


def test_no_device_time_where_no_candidate_could_win(timed, no_fft, simulated_device, device):
    """Where every candidate loses without the device term, nothing is timed on the device,
    PyTorch's path included."""
    timed("timed:sleep=3")
    tuner.set_budget(0.1)
    p = problem(device)
    assert tuner.choose_conv2d(p, "forward") == "native"
    row = row_of(p)
    assert row["device_ms"] == {} and not DEVICE_TIMER_ARGS, tuner.report()
    assert ", device " not in tuner.report()


@pytest.mark.parametrize("host_ms, wall_ms, wall_calls, bound", [
    (0.3, 1.0, 4, True),     # host / calls 0.075 of the wall time
    (0.4, 1.0, 4, False),    # at the bound: a tenth
    (0.399, 1.0, 4, True),
    (0.49, 1.0, 40, True),   # many calls: half the wall time still bounds it
    (0.5, 1.0, 40, False),   # the host as busy as the device's half: timed
    (0.09, 1.0, 1, True),
    (0.1, 1.0, 1, False),
    (0.7, 2.0, 4, True),     # the bounds scale with the wall time
    (0.8, 2.0, 4, False),
    (0.9, 2.0, 40, True),
    (1.0, 2.0, 40, False),
])
def test_device_bound_is_strictly_under_both_bounds(host_ms, wall_ms, wall_calls, bound):
    """The shortcut that takes the wall time for the device's holds strictly under DEVICE_BOUND x
    the calls' wall time and under half of it (on every device: the rule, not the timer)."""
    assert tuner.measure.device_bound(host_ms, wall_ms, wall_calls) is bound


@pytest.mark.device_alone
def test_the_device_timer_times_the_device_alone(device):
    """On a GPU: calls that keep the host busy 1 ms each around a tiny kernel take next to no
    device time, even when the host's time was underestimated (the timer then holds the device
    longer and times them again); calls that kept the device busy back to back (DEVICE_BOUND)
    take that wall time, untimed; calls of a matrix product timed behind the hold take the time
    events give them on an idle device, back to back."""
    if device != "cuda":
        pytest.skip("on a CPU there is no device time apart from the wall time")
    run = tuner.measure.device_timer(torch.device(device))
    x = torch.randn(1024, device=device)

    def host_bound():
        t_end = time.perf_counter() + 1e-3
        while time.perf_counter() < t_end:
            pass
        return x * 2
    assert run(host_bound, (), 4, 1.0, 1.0, 4) < 0.2
    assert run(host_bound, (), 4, 1e-3, 1e-3, 4) < 0.2  # the estimate far too small
    seen = []  # device-bound back to back (host / calls under a tenth of the wall): that wall time
    assert run(lambda: seen.append(1), (), 4, 0.3, 1.0, 4) == 1.0 and not seen
    # one call, host a fifth of the wall time: the host's time before the device starts may be
    # a fifth of the wall time, so it is timed
    assert run(lambda: seen.append(1) or x * 2, (), 1, 0.2, 1.0, 1) < 0.2 and seen
    a = torch.randn(4096, 4096, device=device)
    torch.mm(a, a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(3):
        torch.cuda.synchronize()
        start.record()
        for _ in range(4):
            torch.mm(a, a)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 4)
    mm = min(times)
    timed = min(run(torch.mm, (a, a), 4, 0.05, 0.05, 4) for _ in range(3))
    assert mm > 0.5, "the product is too small to be device-bound: %.3f ms" % mm
    assert 0.9 * mm < timed < 1.1 * mm, (timed, mm)


def test_a_cheaper_call_wins(timed, no_fft, device):
    timed("timed:memo")
    tuner.set_budget(0.5)
    p = problem(device, S=8, C=32, K=32, H=48, W=48)
    assert tuner.choose_conv2d(p, "forward") == "timed:memo"
    row = row_of(p)
    assert row["times_ms"]["timed:memo"] < 0.95 * row["times_ms"]["native"]
    assert set(row["host_ms"]) == set(row["times_ms"]) and row["host_ms"]["native"] > 0
    # a cheap call gets at least as many calls per round as PyTorch's convolution (more where
    # the convolution takes longer than a round's share: on CPU; on a GPU both can reach the cap)
    assert row["runs"]["timed:memo"] >= row["runs"]["native"] > 1
    if device == "cpu":
        assert row["runs"]["timed:memo"] > row["runs"]["native"]


def test_every_candidate_is_timed_once_without_budget(timed, no_fft, device):
    timed("timed:sleep=1", "timed:sleep=30", "timed:memo")
    tuner.set_budget(0)
    p = problem(device)
    tuner.choose_conv2d(p, "forward")
    row = row_of(p)
    assert set(row["times_ms"]) == set(only_timed(p))
    assert all(row["runs"][c] == 1 for c in row["times_ms"])
    assert not row["skipped"]
    assert "0 rounds" in row["reason"]


def test_a_candidate_that_cannot_win_leaves_the_race(timed, no_fft, device):
    timed("timed:sleep=30", "timed:memo")
    tuner.set_budget(0.3)
    p = problem(device)
    tuner.choose_conv2d(p, "forward")
    row = row_of(p)
    assert row["runs"]["timed:sleep=30"] == 1  # over 2x the best after its first figure
    assert row["runs"]["native"] > 1 and row["runs"]["timed:memo"] > 1
    assert "timed once" in row["reason"]
    assert "timed:sleep=30 " in tuner.report()


@pytest.mark.parametrize("warmups", [1, 2])
def test_a_later_calls_setup_goes_untimed_with_more_warm_ups(monkeypatch, warmups):
    # A candidate whose second call at the problem's size is slow (the LSTM ops' step loops
    # record their CUDA graph then) has that call in its first timed figure after one warm-up
    # call, and not after two (what the LSTM tuner asks for).
    from fastlayers.algorithms.registry import Choice
    from fastlayers.tuner import measure
    seen, first = [], {}
    real_timer = measure.step_timer

    def spy_timer(device):
        run = real_timer(device)

        def timed(fn, args, calls=1):
            wall, host = run(fn, args, calls)
            first.setdefault(fn, wall)
            return wall, host
        return timed
    monkeypatch.setattr(measure, "step_timer", spy_timer)

    def double(x):
        return x * 2

    def records_second(x):
        if x.shape[0] == 64:
            seen.append(1)
            if len(seen) == 2:
                time.sleep(0.05)
        return x * 2
    choices = [Choice("native", (), "native"), Choice("graph", (), "graph")]
    calls = {"native": double, "graph": records_second}
    x, xc = torch.randn(64, 8), torch.randn(4, 8)
    tuner.set_budget(0)
    measure.measure_candidates(choices, call=lambda c: calls[c.label], workspace=lambda c: 0,
                               args=(x,), check_args=(xc,), ref=(xc * 2).double(),
                               device=torch.device("cpu"), floor=1e-6, warmups=warmups)
    assert len(seen) >= warmups + 1
    assert (first[records_second] >= 50) == (warmups == 1), first[records_second]


def test_the_baseline_failing_leaves_native_with_the_reason(monkeypatch, device):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    p = problem(device)

    native_call = algorithms.native.FAMILY.conv2d_call

    def failing_call(choice, pass_, padding, tf32):
        call = native_call(choice, pass_, padding, tf32)

        def fail(x, w, b, gy):  # the float64 reference works, the candidate itself does not
            if x.dtype != torch.float64:
                raise RuntimeError("no convolution today")
            return call(x, w, b, gy)
        return fail
    monkeypatch.setattr(algorithms.native.FAMILY, "conv2d_call", failing_call)
    algorithms.registry._forget()
    try:
        assert tuner.choose_conv2d(p, "forward") == "native"
    finally:
        monkeypatch.undo()
        algorithms.registry._forget()
    row = row_of(p)
    assert row["source"] == "heuristic" and "no convolution today" in row["reason"]
    assert len(tuner.candidates_conv2d(p, "forward")) > 1  # FFT candidates were there to try


def test_a_large_kernel_measures_fft_in_every_pass(monkeypatch, device):
    """A 31 x 31 kernel: PyTorch's path is slow, and every FFT candidate is still measured in
    every pass, with no budget at all."""
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0)
    x = torch.randn(1, 2, 48, 48, device=device)
    w = torch.randn(2, 2, 31, 31, device=device)
    p = tuner.ConvProblem.from_tensors(x, w, (15, 15), tf32=False)
    for pass_ in tuner.PASSES:
        tuner.choose_conv2d(p, pass_)
        row = row_of(p, pass_)
        candidates = tuner.candidates_conv2d(p, pass_)
        assert any("tile=" in c for c in candidates) and len(candidates) > 3
        assert not any("budget" in why for why in row["skipped"].values()), row["skipped"]
        assert set(row["times_ms"]) | set(row["skipped"]) == set(candidates)
        assert set(row["times_ms"]) - {"native"}, (pass_, row)


def test_only_the_float64_reference_skips_cudnns_search(monkeypatch, device):
    """The float64 reference (a few samples: a shape of its own) runs with cudnn.benchmark off;
    the candidates' accuracy checks run at the problem's size, as the timed calls do, with
    cudnn.benchmark as the user set it: PyTorch's error is that of the algorithm its layer
    runs."""
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    seen = []
    native_call = algorithms.native.FAMILY.conv2d_call

    def recording_call(choice, pass_, padding, tf32):
        call = native_call(choice, pass_, padding, tf32)

        def run(x, w, b, gy):
            seen.append((x.dtype, x.shape[0], torch.backends.cudnn.benchmark))
            return call(x, w, b, gy)
        return run
    monkeypatch.setattr(algorithms.native.FAMILY, "conv2d_call", recording_call)
    algorithms.registry._forget()
    try:
        tuner.choose_conv2d(problem(device), "forward")
        assert torch.backends.cudnn.benchmark is True  # restored
    finally:
        monkeypatch.undo()
        algorithms.registry._forget()
    p = problem(device)
    check = tuner.conv2d.CHECK_SAMPLES
    assert p.S > check
    assert {(dt, n, b) for dt, n, b in seen if n != p.S} == {(torch.float64, check, False)}
    assert {(dt, b) for dt, n, b in seen if n == p.S} == {(torch.float32, True)}
    assert sum(n == p.S for dt, n, b in seen) > 2  # the check, the warm-up and the timed calls


@pytest.mark.parametrize("pass_", ["input_grad", "weight_grad"])
def test_a_gradient_is_timed_as_a_backward_pays_for_it(timed, no_fft, device, monkeypatch, pass_):
    """PyTorch's candidate for a gradient pass is its one convolution_backward of both gradients;
    any other candidate is timed beside PyTorch's call for the other gradient alone, which a
    backward then runs (and a host-bound step pays)."""
    seen = set()
    real = algorithms.conv2d_grads

    def spy(igrad, wgrad, padding, tf32):
        fn = real(igrad, wgrad, padding, tf32)

        def grads(x, w, gy, need_x, need_w):
            seen.add((str(igrad), str(wgrad), need_x, need_w))
            return fn(x, w, gy, need_x, need_w)
        return grads
    monkeypatch.setattr(algorithms, "conv2d_grads", spy)
    timed("timed:memo")
    tuner.set_budget(0.1)
    p = problem(device)
    tuner.choose_conv2d(p, pass_)
    pair = ("timed:memo", "native") if pass_ == "input_grad" else ("native", "timed:memo")
    assert seen == {("native", "native", True, True), pair + (True, True)}
    row = row_of(p, pass_)
    assert set(row["times_ms"]) == {"native", "timed:memo"}
    assert "other gradient on PyTorch's path" in row["reason"]


def layer_with_every_pass_on(label, monkeypatch, channels=32, size=32, batch=4):
    """A 3x3 layer run once (forward and backward) with every pass's decision made `label` after
    measuring as usual, so that its layer check runs: (the layer, its input, the layer check's
    row)."""
    tuner.set_budget(0.05)
    real = tuner_conv2d.measure

    def measure(p, pass_, device):
        d = real(p, pass_, device)
        d.choice = label
        return d
    monkeypatch.setattr(tuner_conv2d, "measure", measure)
    m = fastlayers.Conv2d(channels, channels, 3, padding=1)
    x = torch.randn(batch, channels, size, size, requires_grad=True)
    m(x).sum().backward()
    rows = [r for r in tuner.decisions() if ".layer|" in r["key"]]
    assert len(rows) == 1, tuner.report()
    return m, x, rows[0]


@pytest.mark.parametrize("label, kept", [("timed:memo", True), ("timed:sleep=5", False)])
def test_the_layer_check_weighs_the_whole_step(timed, no_fft, monkeypatch, label, kept):
    """Passes tuned one by one stay in a training step only where the layer's forward and
    backward with them beat PyTorch's layer: a label every pass picked (the test's) but costing
    5 ms a call sends the layer back to PyTorch's path, recorded in the file and report()."""
    timed(label)
    m, x, row = layer_with_every_pass_on(label, monkeypatch)
    assert row["choice"] == ("tuned" if kept else "native"), tuner.report()
    assert set(row["times_ms"]) == {"native", "tuned"} and "plan=%s/%s/%s" % ((label,) * 3) in row["key"]
    assert next(iter(m._fl_plans.values())).native == (not kept)
    assert ("every pass on PyTorch's path" in tuner.report()) == (not kept)
    assert tuner.cache.file_entries()[row["key"]]["choice"] == row["choice"]
    # a new process (memory forgotten) reads the answer from the file
    tuner.clear(memory=True)
    m2 = fastlayers.Conv2d(32, 32, 3, padding=1)
    m2(x).sum().backward()
    assert next(iter(m2._fl_plans.values())).native == (not kept)


@pytest.fixture
def one_thread():
    """PyTorch on one thread of its own: on a loaded machine its thread pool's barriers, not the
    host path a test weighs, took a tiny layer's forward + backward to 36-79 ms (2 cores, another
    test run and matrix products beside it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_layer_check_counts_host_time_after_other_work(timed, no_fft, monkeypatch,
                                                            one_thread):
    """In a network's step a layer's calls come between other layers', which leave its host path
    cold: a plan as fast as a memo back to back but whose calls take 20 ms more of the host's time
    each after other work (on the CPU, where host time is all the time, a hundred times PyTorch's
    step of this small layer, on one thread so that a loaded machine does not close the gap) goes
    back to PyTorch's path, and the report gives the host times."""
    real_other, real_timer = tuner_conv2d.other_work, tuner_conv2d.step_timer

    def other_work(device):
        run = real_other(device)

        def after():
            run()
            AFTER_OTHER_WORK[0] = True
        return after

    def step_timer(device):  # back to back, no call is right after other work
        run = real_timer(device)

        def timed_run(fn, args, calls=1):
            AFTER_OTHER_WORK[0] = False
            return run(fn, args, calls)
        return timed_run
    monkeypatch.setattr(tuner_conv2d, "other_work", other_work)
    monkeypatch.setattr(tuner_conv2d, "step_timer", step_timer)
    timed("timed:cold=20")
    m, _, row = layer_with_every_pass_on("timed:cold=20", monkeypatch, channels=4, size=8,
                                         batch=1)
    assert row["choice"] == "native", tuner.report()
    assert row["host_ms"]["tuned"] >= 20.0 > row["host_ms"]["native"], tuner.report()
    assert row["times_ms"]["tuned"] > row["times_ms"]["native"], tuner.report()
    assert "host time after other work" in row["reason"]
    assert next(iter(m._fl_plans.values())).native


def test_the_layer_check_counts_device_time(timed, no_fft, simulated_device, monkeypatch,
                                            one_thread):
    """A plan that costs the host next to nothing but the device a second a pass (simulated) loses
    to PyTorch's layer: a step whose device is the bottleneck pays the device time it adds, which
    its wall time back to back (the host's) does not show; the reason gives the device times. (A
    layer whose PyTorch path takes milliseconds, on one thread: the plan wins without the device
    term by far, so the check times the device; on a loaded machine a tiny layer's did not.)"""
    timed("timed:device=1000")
    m, _, row = layer_with_every_pass_on("timed:device=1000", monkeypatch)
    assert row["choice"] == "native", tuner.report()
    assert row["device_ms"] == {"native": 0.0, "tuned": 3000.0}, tuner.report()
    assert row["times_ms"]["tuned"] >= 3000.0, tuner.report()
    assert "device time 3e+03 ms against 0" in row["reason"]
    # given the back-to-back figures of each plan's calls (host at most wall)
    assert DEVICE_TIMER_ARGS and all(0 < host <= wall and calls <= wall_calls
                                     for calls, host, wall, wall_calls in DEVICE_TIMER_ARGS)
    assert next(iter(m._fl_plans.values())).native


def layer_check_figures(monkeypatch):
    """The layer checks' device figures: a list that gets, per check, the figures timed before
    it began (DEVICE_TIMER_ARGS' length), so that DEVICE_TIMER_ARGS[list[-1]:] are the last
    check's own (the passes' measurements time some too); and the step timer's figures of each
    plan's calls in the checks, [(fn, calls, wall, host)]."""
    starts, walls = [], []
    real_check, real_timer = tuner_conv2d.measure_layer, tuner_conv2d.step_timer

    def measure_layer(*a, **k):
        starts.append(len(DEVICE_TIMER_ARGS))
        return real_check(*a, **k)

    def step_timer(device):
        run = real_timer(device)

        def recorded(fn, args, calls=1):
            wall, host = run(fn, args, calls)
            walls.append((fn, calls, wall, host))
            return wall, host
        return recorded
    monkeypatch.setattr(tuner_conv2d, "measure_layer", measure_layer)
    monkeypatch.setattr(tuner_conv2d, "step_timer", step_timer)
    return starts, walls


def test_the_layer_check_times_no_device_where_no_plan_could_win(timed, no_fft, simulated_device,
                                                                 monkeypatch):
    """The device term only adds to a plan's cost: a plan that loses without it (5 ms of the
    host's a call) is turned down without timing the device, PyTorch's layer included, and the
    reason says its figure leaves the term out."""
    timed("timed:sleep=5")
    starts, _ = layer_check_figures(monkeypatch)
    m, _, row = layer_with_every_pass_on("timed:sleep=5", monkeypatch, channels=4, size=8,
                                         batch=1)
    assert row["choice"] == "native", tuner.report()
    assert len(starts) == 1 and not DEVICE_TIMER_ARGS[starts[0]:], DEVICE_TIMER_ARGS
    assert row["device_ms"] == {}, tuner.report()
    assert "PyTorch's (its device time not timed)" in row["reason"], row["reason"]
    assert "; device time" not in row["reason"]


def test_the_layer_check_times_on_the_device_only_plans_that_could_win(timed, no_fft,
                                                                       simulated_device,
                                                                       monkeypatch, one_thread):
    """Of two plans, the one that would win without the device term (every pass nearly free) is
    timed on the device beside PyTorch's layer, one figure per round, each given that round's
    wall and host time of the plan's calls; the other (its weight gradient moved to a candidate
    costing 5 ms a call) is not, and the reason says so."""
    timed("timed:memo", "timed:sleep=5")
    monkeypatch.setattr(algorithms.winograd.FAMILY, "candidates", lambda problem, pass_: [])
    tuner.set_budget(0.05)
    starts, walls = layer_check_figures(monkeypatch)
    real_timer = tuner_conv2d.device_timer  # the simulated one: which plan each figure is for
    device_fns = []

    def device_timer(device):
        run = real_timer(device)

        def recorded(fn, *a):
            device_fns.append(fn)
            return run(fn, *a)
        return recorded
    monkeypatch.setattr(tuner_conv2d, "device_timer", device_timer)
    real = tuner_conv2d.measure

    def measure(p, pass_, device):
        d = real(p, pass_, device)
        if pass_ == "weight_grad":  # left on PyTorch's path, the slow label its best other
            d.choice = NATIVE.label
            d.times_ms = {k: v for k, v in d.times_ms.items() if k != "timed:memo"}
        else:
            d.choice = "timed:memo"
        return d
    monkeypatch.setattr(tuner_conv2d, "measure", measure)
    m = fastlayers.Conv2d(32, 32, 3, padding=1)  # PyTorch's two gradients cost the step
    m(torch.randn(4, 32, 32, 32, requires_grad=True)).sum().backward()
    rows = [r for r in tuner.decisions() if ".layer|" in r["key"]]
    assert len(rows) == 1 and len(starts) == 1, tuner.report()
    row = rows[0]
    slow = "timed:memo/timed:memo/timed:sleep=5"
    assert set(row["times_ms"]) == {"native", "tuned", slow}, row
    assert row["times_ms"][slow] > row["times_ms"]["native"], tuner.report()
    assert set(row["device_ms"]) == {"native", "tuned"}, tuner.report()
    assert "; device time " in row["reason"], row["reason"]
    assert "also timed: %s %.2fx (its device time not timed))" % (
        slow, row["times_ms"][slow] / row["times_ms"]["native"]) in row["reason"], row["reason"]
    # the check's own figures: per plan timed, one a round, each given that round's figures of
    # the plan's calls back to back (their wall and host time, their number; at most
    # DEVICE_CALLS of them timed), in the rounds' order
    check = DEVICE_TIMER_ARGS[starts[0]:]
    rounds = tuner_conv2d.LAYER_ROUNDS
    assert len(check) == len(device_fns) == 2 * rounds, check
    plans = {fn for fn, calls, _, _ in walls if calls > 2}  # (2: each plan's first figure)
    assert len(plans) == 3 and set(device_fns) < plans
    for fn in set(device_fns):
        got = [a for f, a in zip(device_fns, check) if f is fn]
        want = [(min(calls, tuner.measure.DEVICE_CALLS), host, wall, calls)
                for f, calls, wall, host in walls if f is fn and calls > 2]
        assert got == want and len(got) == rounds, (got, want)


def test_the_layer_check_moves_the_passes_left_on_pytorchs_path(timed, no_fft, monkeypatch):
    """Passes are tuned one by one, each beside PyTorch's path for the others: a layer whose
    forward and input gradient took a nearly free label, and whose weight gradient stayed on
    PyTorch's path though the label was measured for it too, would run that gradient as a
    convolution_backward of its own. The check times the plan with the weight gradient moved to
    the label as well, which costs the step less, and keeps it: in the file, in report(), in the
    module's plan, and in a new process."""
    timed("timed:memo")
    monkeypatch.setattr(algorithms.winograd.FAMILY, "candidates", lambda problem, pass_: [])
    tuner.set_budget(0.05)
    real = tuner_conv2d.measure

    def measure(p, pass_, device):
        d = real(p, pass_, device)
        assert "timed:memo" in d.times_ms
        d.choice = NATIVE.label if pass_ == "weight_grad" else "timed:memo"
        return d
    monkeypatch.setattr(tuner_conv2d, "measure", measure)
    moved = ("timed:memo",) * 3
    x = torch.randn(4, 32, 32, 32, requires_grad=True)
    m = fastlayers.Conv2d(32, 32, 3, padding=1)
    m(x).sum().backward()
    rows = [r for r in tuner.decisions() if ".layer|" in r["key"]]
    assert len(rows) == 1, tuner.report()
    row = rows[0]
    assert "plan=timed:memo/timed:memo/native" in row["key"]
    assert row["choice"] == "/".join(moved), tuner.report()
    assert set(row["times_ms"]) == {"native", "tuned", "/".join(moved)}
    assert row["times_ms"]["/".join(moved)] < row["times_ms"]["tuned"]
    assert "use: %s" % "/".join(moved) in tuner.report()
    assert next(iter(m._fl_plans.values())).choices == tuple(map(algorithms.parse, moved))
    assert tuner.cache.file_entries()[row["key"]]["choice"] == row["choice"]
    # a new process (memory forgotten) reads the answer from the file
    tuner.clear(memory=True)
    m2 = fastlayers.Conv2d(32, 32, 3, padding=1)
    m2(x).sum().backward()
    assert next(iter(m2._fl_plans.values())).choices == tuple(map(algorithms.parse, moved))


def test_a_filed_layer_plan_that_cannot_serve_is_decided_again():
    """A layer check's filed answer is 'tuned', 'native' or a plan whose labels serve its passes;
    anything else is refused with the reason, or a ValueError for a label no family knows (the
    entry is then decided again)."""
    x = torch.randn(2, 4, 9, 9)
    p = tuner.ConvProblem.from_tensors(x, torch.randn(4, 4, 3, 3), (1, 1), tf32=False)
    c = tuner_conv2d.LayerCheck(p, ("native", "winograd:4", "native"), True, lambda labels: None)
    assert c.fits("tuned", "layer") is None and c.fits("native", "layer") is None
    assert c.fits("winograd:4/winograd:4/winograd:4", "layer") is None
    assert "not an answer" in c.fits("winograd:4/native", "layer")
    assert "weight_grad" in c.fits("winograd:4/winograd:4/winograd:6", "layer")
    with pytest.raises(ValueError):
        c.fits("winograd:4/winograd:4/nosuch:1", "layer")
