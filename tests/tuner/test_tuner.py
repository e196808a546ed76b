import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import fastlayers
from conv_samples import pass_decisions
from fastlayers import algorithms, tuner
from fastlayers.tuner import cache, measure, state
from fastlayers.tuner import conv2d as tuner_conv2d

REPO_PYTHON = Path(__file__).resolve().parents[2] / "python"


def problem(S=2, C=3, K=4, H=9, W=11, k=3, pad=1, dtype=torch.float32, device="cpu"):
    x = torch.randn(S, C, H, W, dtype=dtype, device=device)
    w = torch.randn(K, C, k, k, dtype=dtype, device=device)
    return tuner.ConvProblem.from_tensors(x, w, (pad, pad), tf32=False)


def by_key():
    return {r["key"]: r for r in tuner.decisions()}


def write_cache(entries, fmt=tuner.FORMAT):
    path = tuner.cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": fmt, "entries": entries}))
    tuner.clear()
    return path


def run_python(script, cache_dir, *args, **env):
    env = dict(os.environ, PYTHONPATH=str(REPO_PYTHON), FASTLAYERS_CACHE_DIR=str(cache_dir), **env)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=180):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


@pytest.fixture
def tune_cpu(monkeypatch):
    monkeypatch.setattr(tuner._state, "tune_cpu", True)
    tuner.set_budget(0.05)


@pytest.fixture
def no_measuring(monkeypatch):
    def fail(*args):
        raise AssertionError("the tuner measured")
    monkeypatch.setattr(tuner_conv2d, "measure", fail)


def test_cache_lives_in_the_test_folder(tuner_cache):
    assert tuner.cache_file().parent == tuner_cache
    assert tuner.cache_file().name == "tuner-v%d.json" % tuner.FORMAT
    # labels with backends and tiles; the largest element's error; the layer check's host time
    # after other work; device time in step costs
    assert tuner.FORMAT == 5


def test_keys_name_the_sources_the_extension_was_built_from():
    # setup.py writes the digest of csrc/, cuda/ and the build flags beside the package; a
    # rebuild from changed kernels gives new keys, so cached decisions are measured again.
    from fastlayers import _build_info
    assert re.fullmatch(r"[0-9a-f]{16}", _build_info.SOURCES)
    assert ",fastlayers=%s+%s|" % (fastlayers.__version__, _build_info.SOURCES) in \
        problem().key("forward") + "|"


def test_cpu_is_not_measured_by_default(no_measuring):
    p = problem()
    assert [tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES] == ["native"] * 3
    assert {r["source"] for r in tuner.decisions()} == {"heuristic"}
    assert "FASTLAYERS_TUNE_CPU" in tuner.decisions()[0]["reason"]
    assert not tuner.cache_file().exists()


def test_tuning_decides_every_pass_once(tune_cpu, device, monkeypatch):
    p = problem(device=device)
    assert p.device_type == device and (p.capability != "-") == (device == "cuda")
    labels = {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES}
    rows = by_key()
    assert len(rows) == 3
    for pass_, label in labels.items():
        row = rows[p.key(pass_)]
        candidates = tuner.candidates_conv2d(p, pass_)
        assert row["source"] == "tuned" and row["choice"] == label
        assert label in candidates and label in row["times_ms"]
        assert "native" in row["times_ms"]
        assert set(row["times_ms"]) | set(row["skipped"]) == set(candidates)
        tol = max(2 * row["errors"]["native"], tuner.error_floor(torch.float32, False))
        assert all(row["errors"][c] <= tol for c in row["times_ms"])

    data = json.loads(tuner.cache_file().read_text())
    assert data["format"] == tuner.FORMAT
    for pass_, label in labels.items():
        assert data["entries"][p.key(pass_)]["choice"] == label

    monkeypatch.setattr(tuner_conv2d, "measure", lambda *a: pytest.fail("measured again"))
    assert {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES} == labels
    tuner.clear()
    assert {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES} == labels
    assert {r["source"] for r in tuner.decisions()} == {"file"}


@pytest.fixture
def cudnn_precision():
    """cuDNN's precision settings as they were, put back after the test."""
    c = torch.backends.cudnn
    old = c.fp32_precision, c.conv.fp32_precision, c.rnn.fp32_precision
    yield c
    c.fp32_precision, c.conv.fp32_precision, c.rnn.fp32_precision = old


def test_error_floors_are_a_few_units_of_each_dtypes_rounding():
    # A floor far above PyTorch's own error would let in what is less precise than the layer
    # replaced; each floor is about four units of its dtype's rounding, TF32's float16's.
    for dtype, unit in ((torch.float32, 2.0**-24), (torch.float16, 2.0**-11),
                        (torch.bfloat16, 2.0**-8)):
        assert 3 * unit <= tuner.error_floor(dtype, False) <= 5 * unit, dtype
    assert tuner.error_floor(torch.float32, True) == tuner.error_floor(torch.float16, False)


@pytest.mark.parametrize("max_element", [True, False])
def test_the_largest_elements_error_is_bounded_too(max_element):
    # Lavin & Gray's Table 4 measure (the largest element's error, here over the reference's
    # largest magnitude) beside relative L2: one element off by 1e-6 of a float32 result of
    # magnitude 1 hides in L2 (5e-8 over 1024 elements of norm 18) but not in the largest
    # element (1e-6 > the floor 2.4e-7); the convolution tuner bounds both, the LSTM's L2 only
    from types import SimpleNamespace
    from fastlayers.tuner import measure as tuner_measure
    gen = torch.Generator().manual_seed(0)
    ref = torch.rand(4, 256, generator=gen, dtype=torch.float64) * 2 - 1
    spiked = ref.float()
    spiked[1, 7] += 1e-6
    outputs = {"native": ref.float(), "even": (ref * (1 + 2 ** -24)).float(), "spiked": spiked}
    d = tuner_measure.measure_candidates(
        [SimpleNamespace(label=k) for k in outputs], call=lambda c: lambda: outputs[c.label],
        workspace=lambda c: 0, args=(), check_args=(), ref=ref, device=torch.device("cpu"),
        floor=tuner.error_floor(torch.float32, False), max_element=max_element)
    assert "even" in d.times_ms
    assert d.errors["spiked"] < tuner.error_floor(torch.float32, False)
    if max_element:
        assert d.skipped["spiked"].startswith("largest element's error 1.0"), d.skipped
        assert d.max_errors["native"] < 1e-7 and set(d.max_errors) == set(outputs)
    else:
        assert "spiked" in d.times_ms and not d.max_errors


def test_convolution_checks_take_uniform_data(device):
    # the data of Table 4: uniform in [-1, 1]
    p = problem(S=2, C=3, K=4, H=8, W=8, device=device)
    for t in tuner_conv2d.inputs(p, torch.device(device)):
        assert -1 <= t.min() < -0.9 and 0.9 < t.max() <= 1


def test_float32_tuning_keeps_out_the_less_precise_tiles(tune_cpu, device, cudnn_precision):
    # In float32 twice PyTorch's error decides: F(6x6,3x3) (7-21 times cuDNN's error on VGG-E's
    # layers; 15 times PyTorch's at this shape on the CPU) is skipped, F(2x2,3x3) (1.2 times) is
    # measured, and F(4x4,3x3) (1.7-4.1 times cuDNN's on the H200; 3.6 times PyTorch's here on
    # the CPU) is skipped exactly where its error, relative L2 or the largest element's, is above
    # twice PyTorch's (the guard's rule, measure.measure_candidates). The problem's
    # precision, not the process's TF32 switch (on here), is what PyTorch's candidate runs at:
    # measured in TF32, its error (3e-4 on an H100) would admit every tile.
    cudnn_precision.conv.fp32_precision = "tf32"
    p = problem(S=2, C=64, K=64, H=28, W=28, device=device)
    assert not p.tf32
    tuner.choose_conv2d(p, "forward")
    row = by_key()[p.key("forward")]
    native = row["errors"]["native"]
    assert native < 1e-6
    assert row["skipped"]["winograd:6"].startswith("error "), row["skipped"]
    assert "winograd:2" in row["times_ms"], row["skipped"]
    floor = measure.error_floor(torch.float32, False)
    if row["errors"]["winograd:4"] > max(2 * native, floor):
        assert row["skipped"]["winograd:4"].startswith("error "), row["skipped"]
    elif row["max_errors"]["winograd:4"] > max(2 * row["max_errors"]["native"], floor):
        assert row["skipped"]["winograd:4"].startswith("largest element's error "), row["skipped"]
    else:
        assert "winograd:4" in row["times_ms"], row["skipped"]
    if device == "cpu":
        assert "winograd:4" in row["skipped"], row["errors"]


def test_a_problem_is_measured_at_its_own_precision(cudnn_precision, monkeypatch):
    # The tuner sets cuDNN's TF32 switch for convolution to a float32 CUDA problem's while it
    # measures it and puts it back: past an exception, after the per-operation API was used
    # (where the legacy getter raises), inheriting where it inherited; other dtypes' problems
    # and problems that agree with the switch leave it alone; a thread that finds it held
    # changed gives up after a while rather than wait on a backward that may need its thread.
    from types import SimpleNamespace
    from fastlayers._common import conv_tf32_allowed
    from fastlayers.tuner import measure as tuner_measure
    problem_of = lambda dtype, tf32: SimpleNamespace(  # noqa: E731
        device_type="cuda", dtype=dtype, tf32=tf32)
    c = cudnn_precision
    c.fp32_precision, c.conv.fp32_precision = "tf32", "none"  # conv inherits TF32
    with tuner_measure.problem_precision("conv", problem_of("float32", False)):
        assert not conv_tf32_allowed()
    assert conv_tf32_allowed()
    c.fp32_precision = "ieee"  # still inheriting
    assert not conv_tf32_allowed()
    c.fp32_precision = "tf32"
    with pytest.raises(KeyError):
        with tuner_measure.problem_precision("conv", problem_of("float32", False)):
            raise KeyError("inside")
    assert conv_tf32_allowed()
    with tuner_measure.problem_precision("conv", problem_of("float16", False)):
        assert conv_tf32_allowed()
    with tuner_measure.problem_precision("conv", problem_of("float32", True)):
        assert conv_tf32_allowed()
    c.conv.fp32_precision = "ieee"  # set explicitly: comes back explicit
    with tuner_measure.problem_precision("conv", problem_of("float32", True)):
        assert conv_tf32_allowed()
    assert not conv_tf32_allowed() and c.conv.fp32_precision == "ieee"
    rnn = c.rnn.fp32_precision
    with tuner_measure.cudnn_tf32("rnn", rnn != "tf32"):
        assert (c.rnn.fp32_precision == "tf32") == (rnn != "tf32")
    assert c.rnn.fp32_precision == rnn

    monkeypatch.setattr(tuner_measure, "LOCK_WAIT_S", 0.05)
    held, release = threading.Event(), threading.Event()

    def holder():
        with tuner_measure.cudnn_tf32("conv", True):
            held.set()
            release.wait(10)
    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(10)
        with pytest.raises(RuntimeError, match="held changed by another thread"):
            with tuner_measure.cudnn_tf32("conv", False):
                pass
    finally:
        release.set()
        t.join()
    assert not conv_tf32_allowed()


@pytest.mark.parametrize("shape", [(7, 9, 3, 3, 1, 1), (8, 8, 5, 3, 0, 2), (6, 7, 3, 5, 4, 3),
                                   (4, 9, 1, 7, 2, 6), (3, 3, 3, 3, 5, 1)])
@pytest.mark.parametrize("pass_", tuner.PASSES)
def test_the_float64_reference_is_pytorchs_pass(device, shape, pass_):
    # The input gradient's reference is a forward correlation (cheaper in float64 for large
    # kernels); padding beyond the kernel makes it crop grad_output.
    H, W, kh, kw, ph, pw = shape
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 3, H, W, generator=g), torch.randn(4, 3, kh, kw, generator=g)
    gy = torch.randn(2, 4, H + 2 * ph - kh + 1, W + 2 * pw - kw + 1, generator=g)
    x, w, gy = (t.to(device, torch.float64) for t in (x, w, gy))
    want = algorithms.conv2d_call("native", pass_, (ph, pw), False)(x, w, None, gy)
    got = tuner_conv2d.reference(pass_, (ph, pw), x, w, gy)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_module_tuned_on_cpu(tune_cpu, monkeypatch):
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    ref = nn.Conv2d(3, 4, 3, padding=1)
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 9, 11, requires_grad=True)
    m(x).sum().backward()
    assert {r["source"] for r in tuner.decisions()} == {"tuned"}
    assert {r["key"].split("|")[0] for r in pass_decisions()} == {
        "conv2d." + pass_ for pass_ in tuner.PASSES}

    monkeypatch.setattr(tuner_conv2d, "measure", lambda *a: pytest.fail("measured twice"))
    grad = x.grad.clone()
    x.grad = None
    y = m(x)
    y.sum().backward()
    torch.testing.assert_close(y, ref(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x.grad, grad)


def test_second_process_reads_the_file(tune_cpu, tuner_cache):
    p = problem()
    labels = {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES}
    script = """
        import json, torch
        from fastlayers import tuner
        from fastlayers.tuner import conv2d
        x, w = torch.randn(2, 3, 9, 11), torch.randn(4, 3, 3, 3)
        p = tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False)
        conv2d.measure = None
        labels = {pass_: tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES}
        print(json.dumps({"labels": labels, "decisions": tuner.decisions()}))
    """
    out = json.loads(finish(run_python(script, tuner_cache, FASTLAYERS_TUNER_MODE="cache")))
    assert out["labels"] == labels
    assert {r["source"] for r in out["decisions"]} == {"file"}
    assert {r["key"] for r in out["decisions"]} == {p.key(pass_) for pass_ in tuner.PASSES}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"format": 1, "entries": []}', "",
                                  b"\xff\xfe not UTF-8", "[" * 100000 + "]" * 100000],
                         ids=["not-json", "list", "format-1", "empty", "bytes", "deep"])
def test_corrupt_file_is_ignored_then_overwritten(tune_cpu, text):
    path = tuner.cache_file()
    path.parent.mkdir(parents=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    tuner.clear()
    p = problem()
    with pytest.warns(UserWarning, match="corrupt"):
        label = tuner.choose_conv2d(p, "forward")
    assert by_key()[p.key("forward")]["source"] == "tuned"
    data = json.loads(path.read_text())
    assert data["format"] == tuner.FORMAT
    assert data["entries"][p.key("forward")]["choice"] == label


def test_corrupt_file_in_cache_mode_falls_back_to_the_heuristic(no_measuring):
    path = tuner.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text("\x00\x01garbage")
    tuner.set_mode("cache")
    with pytest.warns(UserWarning, match="corrupt"):
        assert tuner.choose_conv2d(problem(), "forward") == "native"
    assert tuner.decisions()[0]["source"] == "heuristic"


def test_foreign_format_is_ignored(no_measuring):
    p = problem()
    write_cache({p.key("forward"): {"choice": "fft:16x16"}}, fmt=tuner.FORMAT + 1)
    tuner.set_mode("cache")
    with pytest.warns(UserWarning, match="format %d" % (tuner.FORMAT + 1)):
        assert tuner.choose_conv2d(p, "forward") == "native"
    assert by_key()[p.key("forward")]["source"] == "heuristic"


@pytest.mark.parametrize("field,value", [("times_ms", {"native": "1.0"}),
                                         ("host_ms", {"native": None}),
                                         ("errors", {"native": [1]}), ("times_ms", [1.0])])
def test_entries_with_measurements_not_numbers_are_ignored(no_measuring, field, value):
    p = problem()
    write_cache({p.key("forward"): {"choice": "native", field: value}})
    tuner.set_mode("cache")
    with pytest.warns(UserWarning, match="malformed entry"):
        assert tuner.choose_conv2d(p, "forward") == "native"
    assert by_key()[p.key("forward")]["source"] == "heuristic"
    assert "fastlayers tuner" in tuner.report()  # (a malformed entry once broke it)


def test_a_write_keeps_the_files_permissions(tune_cpu):
    path = tuner.cache_file()
    path.parent.mkdir(parents=True)
    write_cache({})
    path.chmod(0o664)
    tuner.clear()
    tuner.choose_conv2d(problem(), "forward")
    assert path.stat().st_mode & 0o777 == 0o664


def test_entries_without_a_choice_are_ignored(no_measuring):
    p = problem()
    write_cache({p.key("forward"): {"reason": "no choice"}, p.key("input_grad"): "fft:16x16",
                 p.key("weight_grad"): {"choice": "fft:16x16"}})
    tuner.set_mode("cache")
    assert [tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES] == [
        "native", "native", "fft:16x16"]


WRITER = """
    import sys, time
    from pathlib import Path
    from fastlayers import tuner
    from fastlayers.tuner import cache
    wid, n, go = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    (go.parent / ("ready-%d" % wid)).touch()
    while not go.exists():
        time.sleep(0.001)
    for i in range(n):
        cache.write_entry("test|writer=%d|%d" % (wid, i),
                          tuner.Decision(choice="native", source="tuned", reason=str(wid)).to_json())
"""


def test_concurrent_writer_processes(tuner_cache, tmp_path):
    writers, n = 4, 25
    go = tmp_path / "go"
    procs = [run_python(WRITER, tuner_cache, wid, n, go) for wid in range(writers)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < writers:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    for proc in procs:
        finish(proc)
    data = json.loads(tuner.cache_file().read_text())
    expected = {"test|writer=%d|%d" % (wid, i) for wid in range(writers) for i in range(n)}
    assert set(data["entries"]) == expected
    assert not list(tuner_cache.glob("*.tmp"))


def test_concurrent_writer_threads():
    threads, n = 8, 20
    barrier = threading.Barrier(threads)
    errors = []

    def write(tid):
        try:
            barrier.wait()
            for i in range(n):
                cache.write_entry("test|thread=%d|%d" % (tid, i),
                                  tuner.Decision(choice="native", source="tuned").to_json())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    pool = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    data = json.loads(tuner.cache_file().read_text())
    assert set(data["entries"]) == {"test|thread=%d|%d" % (t, i)
                                    for t in range(threads) for i in range(n)}


def test_unwritable_cache_keeps_decisions_in_memory(tune_cpu, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FASTLAYERS_CACHE_DIR", str(blocker / "cache"))
    tuner.clear()
    p = problem()
    with pytest.warns(UserWarning, match="could not write"):
        label = tuner.choose_conv2d(p, "forward")
    assert by_key()[p.key("forward")]["choice"] == label


def test_modes(tune_cpu, no_measuring):
    p = problem()
    write_cache({p.key("forward"): {"choice": "fft:16x16", "reason": "by hand"}})

    with pytest.raises(ValueError, match="tuner mode"):
        tuner.set_mode("fast")
    assert tuner.get_mode() == "tune"

    tuner.set_mode("off")
    assert [tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES] == ["native"] * 3
    assert {(r["source"], r["reason"]) for r in tuner.decisions()} == {("heuristic", "tuner off")}
    assert all(not r["times_ms"] for r in tuner.decisions())

    tuner.set_mode("cache")
    tuner.clear()
    assert tuner.choose_conv2d(p, "forward") == "fft:16x16"
    assert tuner.choose_conv2d(p, "input_grad") == "native"
    rows = by_key()
    assert rows[p.key("forward")]["source"] == "file"
    assert rows[p.key("forward")]["reason"] == "by hand"
    assert rows[p.key("input_grad")]["source"] == "heuristic"
    assert "not in cache" in rows[p.key("input_grad")]["reason"]

    with tuner.mode("off"):
        assert tuner.get_mode() == "off"
    assert tuner.get_mode() == "cache"


def test_tune_mode_uses_file_entries_and_measures_the_rest(tune_cpu):
    p = problem()
    write_cache({p.key("forward"): {"choice": "fft:16x16"}})
    assert tuner.choose_conv2d(p, "forward") == "fft:16x16"
    tuner.choose_conv2d(p, "input_grad")
    rows = by_key()
    assert rows[p.key("forward")]["source"] == "file"
    assert rows[p.key("input_grad")]["source"] == "tuned"
    entries = json.loads(tuner.cache_file().read_text())["entries"]
    assert set(entries) == {p.key("forward"), p.key("input_grad")}


def test_mode_switch_reaches_modules(tune_cpu, no_measuring):
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 9, 11)
    p = tuner.ConvProblem.from_tensors(x, m.weight, (1, 1))  # TF32 is part of the key on CUDA only
    write_cache({p.key("forward"): {"choice": "fft:16x16"}})
    tuner.set_mode("off")
    with torch.no_grad():
        m(x)
    assert tuner.decisions()[0]["choice"] == "native"
    generation = tuner.generation()
    tuner.set_mode("cache")
    assert tuner.generation() != generation
    with torch.no_grad():
        m(x)
    assert by_key()[p.key("forward")]["choice"] == "fft:16x16"


def test_environment_is_read_at_start(monkeypatch):
    monkeypatch.setenv("FASTLAYERS_TUNER_MODE", "cache")
    monkeypatch.setenv("FASTLAYERS_TUNE_CPU", "1")
    monkeypatch.setenv("FASTLAYERS_TUNER_BUDGET", "0.5")
    monkeypatch.setenv("FASTLAYERS_WORKSPACE_LIMIT", "64M")
    s = state._State()
    assert (s.mode, s.tune_cpu, s.budget_s, s.workspace_limit) == ("cache", True, 0.5, 64 << 20)
    monkeypatch.setenv("FASTLAYERS_TUNER_MODE", "sometimes")
    monkeypatch.setenv("FASTLAYERS_TUNE_CPU", "0")
    with pytest.warns(UserWarning, match="FASTLAYERS_TUNER_MODE"):
        s = state._State()
    assert s.mode == "tune" and not s.tune_cpu


@pytest.mark.parametrize("text, value", [("512", 512), ("4K", 4096), ("1.5M", 3 << 19),
                                         ("2GiB", 2 << 30), ("1gb", 1 << 30)])
def test_workspace_limit_parsing(text, value):
    assert state._parse_bytes(text) == value
    tuner.set_workspace_limit(text)  # the setter takes the variable's forms too
    assert state._state.workspace_limit == value
    tuner.set_workspace_limit(None)


@pytest.mark.parametrize("name,text", [("FASTLAYERS_TUNER_BUDGET", "2s"),
                                       ("FASTLAYERS_TUNER_BUDGET", "-1"),
                                       ("FASTLAYERS_TUNER_BUDGET", "nan"),
                                       ("FASTLAYERS_WORKSPACE_LIMIT", "lots"),
                                       ("FASTLAYERS_WORKSPACE_LIMIT", "inf")])
def test_bad_numbers_in_the_environment_are_reported_and_the_default_used(monkeypatch, name,
                                                                           text):
    monkeypatch.setenv(name, text)
    with pytest.warns(UserWarning, match=name):
        s = state._State()
    assert (s.budget_s, s.workspace_limit) == (2.0, None)


@pytest.mark.parametrize("call", [lambda: tuner.set_budget(-1), lambda: tuner.set_budget("abc"),
                                  lambda: tuner.set_budget(float("nan")),
                                  lambda: tuner.set_workspace_limit(-5),
                                  lambda: tuner.set_workspace_limit("lots")])
def test_bad_budgets_and_limits_name_the_argument(call):
    with pytest.raises(ValueError, match="`seconds`|`nbytes`"):
        call()


@pytest.mark.parametrize("text,on", [("1", True), ("yes", True), ("On", True), ("0", False),
                                     ("False", False), ("OFF", False), ("no", False), ("", False)])
def test_tune_cpu_environment(monkeypatch, text, on):
    monkeypatch.setenv("FASTLAYERS_TUNE_CPU", text)
    assert state._State().tune_cpu is on


def test_workspace_limit_skips_fft_candidates(tune_cpu):
    tuner.set_workspace_limit(1)
    assert tuner.workspace_limit(torch.device("cpu")) == 1
    p = problem()
    for pass_ in tuner.PASSES:
        assert tuner.choose_conv2d(p, pass_) == "native"
        row = by_key()[p.key(pass_)]
        ffts = [c for c in tuner.candidates_conv2d(p, pass_) if c != "native"]
        assert ffts and set(row["skipped"]) == set(ffts)
        assert all("workspace" in why for why in row["skipped"].values())
        assert set(row["times_ms"]) == {"native"}
    tuner.set_workspace_limit(None)
    assert tuner.workspace_limit(torch.device("cpu")) == 1 << 30


def test_inaccurate_or_failing_candidates_are_rejected(tune_cpu, monkeypatch):
    real = algorithms.conv2d_call
    behaviour = {}

    def conv2d_call(choice, pass_, padding, tf32):  # the first FFT candidate inaccurate, the
        fn = real(choice, pass_, padding, tf32)     # others failing
        if choice == algorithms.NATIVE:
            return fn
        kind = behaviour.setdefault(choice.label, "failing" if behaviour else "inaccurate")
        if kind == "inaccurate":
            return lambda *a: fn(*a) * 1.001
        def fail(*a):
            raise RuntimeError("out of luck\nsecond line")
        return fail

    monkeypatch.setattr(algorithms, "conv2d_call", conv2d_call)
    tuner.set_budget(60)  # rejected candidates are never timed: every one gets its verdict
    p = problem()
    assert tuner.choose_conv2d(p, "forward") == "native"
    skipped = by_key()[p.key("forward")]["skipped"]
    assert set(skipped) == set(tuner.candidates_conv2d(p, "forward")[1:]) == set(behaviour)
    reasons = sorted(skipped.values())
    assert reasons[0].startswith("error ") and "> tolerance" in reasons[0]
    assert set(reasons[1:]) == {"failed: out of luck"}


@pytest.mark.parametrize("pass_", tuner.PASSES)
def test_accuracy_is_checked_at_the_problems_size(tune_cpu, monkeypatch, pass_):
    """A candidate accurate on a few samples but not at the problem's batch (as a library that
    takes a less accurate kernel from some size up) is rejected in every pass."""
    real = algorithms.conv2d_call

    def conv2d_call(choice, pass_, padding, tf32):
        fn = real(choice, pass_, padding, tf32)
        if choice == algorithms.NATIVE:
            return fn

        def by_size(x, w, b, gy):
            out = fn(x, w, b, gy)
            return out * 1.001 if x.shape[0] > tuner_conv2d.CHECK_SAMPLES else out
        return by_size

    # the gradient passes bind their calls through the registry (conv2d_grads)
    monkeypatch.setattr(algorithms, "conv2d_call", conv2d_call)
    monkeypatch.setattr(algorithms.registry, "conv2d_call", conv2d_call)
    algorithms.registry._forget()
    tuner.set_budget(60)
    p = problem(S=5)
    try:
        assert tuner.choose_conv2d(p, pass_) == "native"
    finally:
        monkeypatch.undo()
        algorithms.registry._forget()
    skipped = by_key()[p.key(pass_)]["skipped"]
    assert set(skipped) == set(tuner.candidates_conv2d(p, pass_)[1:])
    assert all(r.startswith("error ") and "> tolerance" in r for r in skipped.values())


def test_deterministic_mode_is_part_of_the_key(no_measuring):
    p = problem()
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        q = problem()
        tuner.choose_conv2d(q, "forward")
    finally:
        torch.use_deterministic_algorithms(old)
    tuner.choose_conv2d(p, "forward")
    assert q.deterministic and not p.deterministic
    assert "det=1" in q.key("forward") and "det=0" in p.key("forward")
    assert p.key("forward") != q.key("forward")
    assert set(by_key()) == {p.key("forward"), q.key("forward")}


def test_key_separates_what_changes_the_answer():
    base = problem()
    keys = {base.key(pass_) for pass_ in tuner.PASSES}
    for other in (problem(S=3), problem(C=2), problem(K=5), problem(H=10), problem(W=12),
                  problem(k=5), problem(pad=0), problem(dtype=torch.float64)):
        keys.add(other.key("forward"))
    x, w = torch.randn(2, 3, 9, 11), torch.randn(4, 3, 3, 3)
    keys.add(tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=True).key("forward"))
    keys.add(tuner.ConvProblem.from_tensors(x.contiguous(memory_format=torch.channels_last), w,
                                            (1, 1), tf32=False).key("forward"))
    keys.add(tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False,
                                            transforms=False).key("forward"))
    assert len(keys) == 3 + 11


def test_candidates_hold_the_padded_input():
    p = problem(H=9, W=13, pad=2)
    for pass_ in tuner.PASSES:
        cands = tuner.candidates_conv2d(p, pass_)
        assert cands[0] == "native"
        untiled = [algorithms.parse(c).params for c in cands[1:]
                   if c.startswith(("fft:", "fbfft:")) and "tile=" not in c]
        assert [(u.basis, u.backend) for u in untiled] == [
            ((14, 18), "cufft"), ((16, 32), "cufft"), ((16, 32), "fbfft")]
        assert all(nh >= 13 and nw >= 17 for nh, nw in (u.basis for u in untiled))


def test_candidates_backends_and_tiles():
    # y and grad_input 40x40 (k = 3, pad 1): tiles of 6, 14, 30 (bases 8, 16, 32); a tile of 62
    # (basis 64) would exceed the result.
    p = problem(S=2, H=40, W=40, k=3, pad=1)
    for pass_ in tuner.PASSES:
        cands = tuner.candidates_conv2d(p, pass_)
        assert cands[:4] == ["native", "fft:42x42", "fft:64x64", "fbfft:64x64"]
        tiled = [c for c in cands[4:] if not c.startswith("winograd:")]
        assert tiled == ["%s:%dx%d,tile=%dx%d" % (a, n, n, n - 2, n - 2)
                         for n in (8, 16, 32) for a in ("fft", "fbfft")]
        tiles = (2, 4) if pass_ == "weight_grad" else (2, 4, 6)
        assert cands[4 + len(tiled):] == ["winograd:%d" % t for t in tiles]
    # Past fbfft's 128: no untiled fbfft, tiles still; a wide result cuts the tile to its height,
    # and the basis side to what that tile needs.
    p = problem(S=1, H=5, W=200, k=3, pad=1)
    cands = tuner.candidates_conv2d(p, "forward")
    assert "fbfft:8x256" not in cands and "fft:8x256" in cands
    assert "fbfft:8x128" in tuner.candidates_conv2d(problem(S=1, H=5, W=100, k=3, pad=1), "forward")
    assert "fbfft:8x8,tile=5x6" in cands and "fft:8x64,tile=5x62" in cands
    assert "fft:64x64,tile=5x62" not in cands
    # The input gradient's tiles divide grad_input: 5x3 image, k = 1, pad 2 -> y is 9x7.
    p = problem(S=1, H=5, W=3, k=1, pad=2)
    assert "fft:8x8,tile=8x7" not in tuner.candidates_conv2d(p, "input_grad")
    assert "fft:8x8,tile=8x7" in tuner.candidates_conv2d(p, "forward")
    assert not any("tile=" in c for c in tuner.candidates_conv2d(p, "input_grad"))


def test_no_fbfft_candidates_for_float64_on_cuda():
    p = problem(H=12, W=12, dtype=torch.float64)
    assert any(c.startswith("fbfft:") for c in tuner.candidates_conv2d(p, "forward"))
    import dataclasses
    q = dataclasses.replace(p, device_type="cuda")
    cands = tuner.candidates_conv2d(q, "forward")
    assert not any(c.startswith("fbfft:") for c in cands)
    assert "fft:8x8,tile=6x6" in cands


def test_deterministic_mode_keeps_every_backend():
    p = problem(H=12, W=12)
    import dataclasses
    assert tuner.candidates_conv2d(dataclasses.replace(p, deterministic=True), "forward") == \
        tuner.candidates_conv2d(p, "forward")


def test_workspace_bound_follows_backend_and_tile():
    from fastlayers import _C
    p = problem(S=8, C=16, K=16, H=30, W=30, k=3, pad=1)
    cufft = algorithms.workspace_bytes("fft:32x32", p, "forward")
    fbfft = algorithms.workspace_bytes("fbfft:32x32", p, "forward")
    assert fbfft < cufft
    # The extension's figure for the label's backend, basis, tile, pass and real size, plus a tenth
    # for cuFFT's work areas.
    for label, dtype in (("fbfft:8x8,tile=6x6", torch.float32), ("fft:32x16,tile=28x3", torch.float64)):
        q = problem(S=8, C=16, K=16, H=30, W=30, k=3, pad=1, dtype=dtype)
        backend, (nh, nw), (th, tw) = algorithms.parse(label).params
        for i, pass_ in enumerate(tuner.PASSES):
            ws = _C.fft_conv2d_workspace_bytes(i, 8, 16, 16, 30, 30, 3, 3, 1, 1, nh, nw,
                                               dtype.itemsize, backend, th, tw)
            assert algorithms.workspace_bytes(label, q, pass_) == int(ws * 1.1) > 0


def test_workspace_limit_between_backends(tune_cpu):
    p = problem(S=8, C=16, K=16, H=30, W=30, k=3, pad=1)
    cufft = algorithms.workspace_bytes("fft:32x32", p, "forward")
    fbfft = algorithms.workspace_bytes("fbfft:32x32", p, "forward")
    tuner.set_workspace_limit((cufft + fbfft) // 2)
    tuner.set_budget(5)
    tuner.choose_conv2d(p, "forward")
    row = by_key()[p.key("forward")]
    assert "workspace" in row["skipped"]["fft:32x32"]
    assert "fbfft:32x32" in row["times_ms"]


def test_unknown_pass_is_refused():
    with pytest.raises(ValueError, match="backward"):
        tuner.choose_conv2d(problem(), "backward")


def test_module_runs_cached_tiled_choices(no_measuring):
    from conv_samples import rel_err
    m = fastlayers.Conv2d(3, 4, 3, padding=1).double()
    x = torch.randn(2, 3, 13, 11, dtype=torch.float64, requires_grad=True)
    p = tuner.ConvProblem.from_tensors(x, m.weight, (1, 1), tf32=False)
    labels = {"forward": "fbfft:8x8,tile=6x6", "input_grad": "fft:16x16,tile=9x10",
              "weight_grad": "fbfft:16x16,tile=13x11"}
    write_cache({p.key(pass_): {"choice": label} for pass_, label in labels.items()})
    tuner.set_mode("cache")
    seen = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "fastlayers":
                seen.append((func._opname, list(args[-4]), args[-2], list(args[-1])))
            return func(*args, **(kwargs or {}))

    with Record():
        y = m(x)
        y.sum().backward()
    assert sorted(seen) == sorted([("fft_conv2d", [8, 8], "fbfft", [6, 6]),
                                   ("fft_conv2d_input_grad", [16, 16], "cufft", [9, 10]),
                                   ("fft_conv2d_weight_grad", [16, 16], "fbfft", [13, 11])])
    ref = torch.nn.functional.conv2d(x, m.weight, m.bias, padding=1)
    gx = torch.autograd.grad(ref.sum(), x)[0]
    assert rel_err(y, ref) <= 1e-10 and rel_err(x.grad, gx) <= 1e-10
    text = tuner.report()
    assert "FFT, backend fbfft, basis 8x8, tiles 6x6" in text
    assert "FFT, backend cufft, basis 16x16, tiles 9x10" in text


def test_clear_can_remove_the_file(tune_cpu):
    tuner.choose_conv2d(problem(), "forward")
    assert tuner.cache_file().exists() and tuner.decisions()
    tuner.clear()
    assert not tuner.decisions() and tuner.cache_file().exists()
    tuner.clear(file=True)
    assert not tuner.cache_file().exists()


def test_report(tune_cpu):
    assert "(no decisions yet)" in tuner.report()
    p = problem()
    labels = [tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES]
    forced = fastlayers.Conv2d(3, 4, 3, padding=1).force_algorithms(forward="fft:16x16")
    strided = fastlayers.Conv2d(3, 4, 3, stride=2)
    with torch.no_grad():
        forced(torch.randn(1, 3, 9, 11))
        strided(torch.randn(1, 3, 9, 11))
    text = tuner.report()
    assert "mode=tune" in text and str(tuner.cache_file()) in text
    for label in labels:
        assert label in text
    for word in ("tuned", "forced", "unsupported", "stride", "why:", "ms:", "err:", "fft:16x16",
                 "use: FFT, backend cufft, basis 16x16, untiled", "use: "):
        assert word in text
    for pass_ in tuner.PASSES:
        assert "conv2d.%s|S=2,C=3,K=4,H=9,W=11,k=3x3,pad=1,1" % pass_ in text
    assert "|torch=" not in text


def test_failed_measurement_falls_back_to_native_in_memory_only(tune_cpu, monkeypatch):
    def out_of_memory(*args):
        raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")
    monkeypatch.setattr(tuner_conv2d, "measure", out_of_memory)
    p = problem()
    assert tuner.choose_conv2d(p, "forward") == "native"
    row = by_key()[p.key("forward")]
    assert row["source"] == "heuristic" and "measuring failed: CUDA out of memory" in row["reason"]
    assert not tuner.cache_file().exists()


@pytest.mark.parametrize("inference", [False, True])
def test_gradient_passes_are_measured_where_backward_runs(tune_cpu, device, monkeypatch, inference):
    # cuDNN keeps its benchmark choices per thread, and autograd runs a CUDA device's backward on
    # a thread of its own: the gradient passes are measured there, so the native candidate's
    # search is the one the training step's backward reuses (under inference mode no backward
    # runs, and they are measured where they are asked for).
    seen, orig = {}, tuner_conv2d.measure

    def spy(p, pass_, dev):
        seen[pass_] = (threading.get_ident(), torch._C._current_autograd_node() is not None)
        return orig(p, pass_, dev)
    monkeypatch.setattr(tuner_conv2d, "measure", spy)
    p = problem(device=device)
    with torch.inference_mode(inference):
        labels = [tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES]
    assert all(r["source"] == "tuned" for r in tuner.decisions()), labels
    x, backward_thread = torch.ones(2, device=device, requires_grad=True), []
    x.register_hook(lambda g: backward_thread.append(threading.get_ident()))
    (x * 2).sum().backward()
    assert seen["forward"] == (threading.get_ident(), False)
    want = (threading.get_ident(), False) if inference else (backward_thread[0], True)
    assert seen["input_grad"] == seen["weight_grad"] == want
    if device == "cuda" and not inference:
        assert backward_thread[0] != threading.get_ident()


def test_measuring_holds_no_tuner_lock(tune_cpu, monkeypatch):
    # A gradient pass is measured on autograd's device thread, which may be running another
    # thread's backward that asks the tuner: the lock is free while measuring. A clear() during
    # the measurement leaves its decision out of memory (it belongs to the old generation).
    orig, free = tuner_conv2d.measure, []

    def spy(p, pass_, dev):
        other = threading.Thread(target=lambda: free.append(state._state.lock.acquire(False)
                                                            and state._state.lock.release()
                                                            is None))
        other.start()
        other.join()
        if pass_ == "weight_grad":
            tuner.clear()
        return orig(p, pass_, dev)
    monkeypatch.setattr(tuner_conv2d, "measure", spy)
    p = problem()
    for pass_ in tuner.PASSES:
        tuner.choose_conv2d(p, pass_)
    assert free == [True, True, True]
    assert not tuner.decisions()  # clear() emptied memory; weight_grad's was not kept


def test_gradient_passes_are_measured_under_torch_func(tune_cpu):
    # Under torch.func's transforms the backward hop cannot run: measured where asked, not
    # "measuring failed".
    p = problem()
    torch.func.grad(lambda t: [tuner.choose_conv2d(p, pass_) for pass_ in tuner.PASSES]
                    and t.sum())(torch.ones(2))
    assert {r["source"] for r in tuner.decisions()} == {"tuned"}


def test_module_survives_a_failed_measurement(tune_cpu, monkeypatch):
    monkeypatch.setattr(tuner_conv2d, "measure",
                        lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 9, 11, requires_grad=True)
    y = m(x)
    y.sum().backward()
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, m.weight, m.bias, padding=1))
    assert "measuring failed: boom" in tuner.report()


@pytest.mark.gpu
def test_candidates_on_cuda():
    x = torch.randn(2, 4, 40, 40, device="cuda")
    w = torch.randn(4, 4, 3, 3, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False)
    cands = tuner.candidates_conv2d(p, "forward")
    assert "fbfft:64x64" in cands and "fbfft:32x32,tile=30x30" in cands
    p64 = tuner.ConvProblem.from_tensors(x.double(), w.double(), (1, 1))
    assert not any(c.startswith("fbfft") for c in tuner.candidates_conv2d(p64, "forward"))
    assert "fft:32x32,tile=30x30" in tuner.candidates_conv2d(p64, "forward")


@pytest.mark.gpu
def test_measures_fbfft_and_tiles_on_gpu():
    tuner.set_budget(10.0)
    x = torch.randn(16, 32, 60, 60, device="cuda")
    w = torch.randn(32, 32, 3, 3, device="cuda")
    p = tuner.ConvProblem.from_tensors(x, w, (1, 1), tf32=False)
    for pass_ in tuner.PASSES:
        label = tuner.choose_conv2d(p, pass_)
        row = by_key()[p.key(pass_)]
        assert row["source"] == "tuned" and label in row["times_ms"]
        measured = set(row["times_ms"]) | set(row["skipped"])
        assert measured == set(tuner.candidates_conv2d(p, pass_))
        assert any("tile=" in c for c in row["times_ms"]), row


# --- file entries the tuner does not trust -------------------------------------------------------

# Entries of valid JSON whose label cannot serve the 9x11 problem (padded 11x13), by pass, with
# part of the reason.
UNFIT_ENTRIES = {
    "forward": ({"choice": "fft:2x2"}, "basis 2x2 is smaller than the padded input (11x13)"),
    "input_grad": ({"choice": "spectral:4x4"}, "unknown algorithm label 'spectral:4x4'"),
    "weight_grad": ({"choice": "fbfft:12x16", "times_ms": {"fbfft:12x16": 0.1}},
                    "fbfft takes power-of-two basis sides"),
}


def test_unfit_file_entries_are_ignored_and_retuned(tune_cpu):
    p = problem()
    write_cache({p.key(pass_): entry for pass_, (entry, _) in UNFIT_ENTRIES.items()})
    for pass_, (entry, why) in UNFIT_ENTRIES.items():
        head = p.key(pass_).split("|torch=")[0]
        with pytest.warns(UserWarning) as record:
            label = tuner.choose_conv2d(p, pass_)
        text = "\n".join(str(w.message) for w in record)
        assert head in text and repr(entry["choice"]) in text and why in text
        assert label in tuner.candidates_conv2d(p, pass_)
        assert by_key()[p.key(pass_)]["source"] == "tuned"
    entries = json.loads(tuner.cache_file().read_text())["entries"]
    assert {pass_: entries[p.key(pass_)]["choice"] for pass_ in tuner.PASSES} == {
        pass_: by_key()[p.key(pass_)]["choice"] for pass_ in tuner.PASSES}


def test_unfit_entry_in_cache_mode_is_reported_once(no_measuring):
    p = problem()
    write_cache({p.key("forward"): {"choice": "fft:2x2"},
                 p.key("input_grad"): {"choice": "fft:16x16", "times_ms": [1, 2]}})
    tuner.set_mode("cache")
    with pytest.warns(UserWarning, match=re.escape("'fft:2x2'")):
        assert tuner.choose_conv2d(p, "forward") == "native"
    with pytest.warns(UserWarning, match="malformed entry"):
        assert tuner.choose_conv2d(p, "input_grad") == "native"
    row = by_key()[p.key("forward")]
    assert row["source"] == "heuristic"
    assert row["reason"].startswith("ignored the file's 'fft:2x2': basis 2x2 is smaller")
    assert "mode 'cache'" in row["reason"]
    tuner.set_mode("cache")  # forgets the decisions in memory: the file is consulted again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuner.choose_conv2d(p, "forward") == "native"


def test_fitting_entries_need_not_be_candidates(no_measuring):
    p = problem()
    write_cache({p.key("forward"): {"choice": "fft:100x64"},
                 p.key("input_grad"): {"choice": "fbfft:16x16,tile=9x11"}})
    tuner.set_mode("cache")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuner.choose_conv2d(p, "forward") == "fft:100x64"
        assert tuner.choose_conv2d(p, "input_grad") == "fbfft:16x16,tile=9x11"
    assert "fft:100x64" not in tuner.candidates_conv2d(p, "forward")


def test_module_survives_an_unfit_entry(no_measuring):
    m = fastlayers.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 9, 11)
    p = tuner.ConvProblem.from_tensors(x, m.weight, (1, 1))
    write_cache({p.key("forward"): {"choice": "fbfft:2x2"}})
    tuner.set_mode("cache")
    with torch.no_grad(), pytest.warns(UserWarning, match=re.escape("'fbfft:2x2'")):
        y = m(x)
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, m.weight, m.bias, padding=1))


# --- the transforms switch ------------------------------------------------------------------------


def test_transforms_switch_and_context():
    assert tuner.transforms_allowed()
    generation = tuner.generation()
    with tuner.transforms(False):
        assert not tuner.transforms_allowed() and tuner.generation() != generation
        assert not problem().transforms
    assert tuner.transforms_allowed() and problem().transforms
    # back to the same state: the same generation (plans and compiled graphs made in it serve)
    assert tuner.generation() == generation
    tuner.set_mode("cache")
    assert tuner.generation() != generation
    tuner.set_mode("tune")
    assert tuner.generation() == generation
    tuner.clear()
    assert tuner.generation() != generation
    with pytest.raises(TypeError, match="`allowed`"):
        tuner.set_transforms("0")
    assert tuner.transforms_allowed()


def test_decisions_return_with_their_mode(tune_cpu):
    # a module keeps its plan for a state it returns to: the decisions behind it stay listed
    p = problem()
    tuner.choose_conv2d(p, "forward")
    made = by_key()
    tuner.set_mode("cache")
    assert p.key("forward") not in by_key()  # this mode's own table
    tuner.set_mode("tune")
    assert by_key() == made


def test_transforms_environment(monkeypatch):
    for text, allowed in (("0", False), ("false", False), ("1", True), ("", True)):
        monkeypatch.setenv("FASTLAYERS_TRANSFORMS", text)
        assert state._State().transforms is allowed
    monkeypatch.delenv("FASTLAYERS_TRANSFORMS")
    assert state._State().transforms
    monkeypatch.setenv("FASTLAYERS_TRANSFORMS", "sometimes")
    with pytest.warns(UserWarning, match="FASTLAYERS_TRANSFORMS"):
        assert state._State().transforms
