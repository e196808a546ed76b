"""bench_networks --join: one document from runs of one tree that timed different rows (a run a
command's time limit cut, and the rest), with nothing joined that differs in more than the rows."""
import copy
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import bench_networks  # noqa: E402


def run(rows, rounds_for=None, commit="abc", stats=True, **extra):
    """A networks document of the rows (network, mode, ratio) as a run writes it, each row given
    the rounds its settings say."""
    rounds_for = rounds_for or {}
    doc = {"kind": "networks", "date": "2026-11-29T10:00:00+00:00",
           "device": {"name": "GPU", "type": "cuda"}, "versions": {"torch": "2.11.0"},
           "git": {"commit": commit, "dirty": False, "note": "manifest"},
           "argv": ["--nets", ",".join(sorted({n for n, _, _ in rows}))],
           "config": {"steps": 10, "rounds": 31, "rounds_for": rounds_for},
           "rows": [{"network": n, "mode": m, "ratio": x,
                     "rounds": rounds_for.get("%s:%s" % (n, m), rounds_for.get(n, 31))}
                    for n, m, x in rows],
           "sections": {"%s %s" % (n, m): {"ok": True, "s": 2.0} for n, m, _ in rows},
           "summary": {}, "tuner_report": "report of %d rows" % len(rows)}
    if stats:
        doc.update(stats={"errors": 0, "oom": 1}, elapsed_s=10.0)
    doc.update(extra)
    return doc


def test_rows_join_in_the_benchmarks_order_with_the_summary_of_all():
    # the run its limit cut: its ResNet-50 bf16 row (81 rounds given) never ran
    cut = run([("vgg16", "fp32", 1.6), ("resnet50", "tf32", 0.98)],
              rounds_for={"resnet50:tf32": 81, "resnet50:bf16": 81}, stats=False)
    rest = run([("alexnet", "bf16", 1.0)], date="2026-11-29T11:00:00+00:00")
    more = run([("resnet50", "bf16", 0.99)])  # run again at the default rounds
    doc = bench_networks.join([cut, rest, more])
    assert [(r["network"], r["mode"]) for r in doc["rows"]] == [
        ("vgg16", "fp32"), ("resnet50", "tf32"), ("resnet50", "bf16"), ("alexnet", "bf16")]
    assert list(doc["sections"]) == ["vgg16 fp32", "resnet50 tf32", "resnet50 bf16",
                                     "alexnet bf16"]
    assert doc["summary"]["min_ratio"] == 0.98
    assert doc["summary"]["geomean"] == pytest.approx((1.6 * 0.98 * 1.0 * 0.99) ** 0.25)
    assert doc["config"]["rounds_for"] == {"resnet50:tf32": 81}  # as the rows were timed
    assert doc["argv"] == [cut["argv"], rest["argv"], more["argv"]]
    assert doc["date"] == "2026-11-29T11:00:00+00:00"
    assert doc["stats"] == {"errors": 0, "oom": 2}
    assert doc["elapsed_s"] == 4.0 + 10.0 + 10.0  # the cut run's sections stand for its time
    assert doc["tuner_report"].count("report of") == 3
    assert doc["git"] == cut["git"]
    assert "the rows of 3 runs of this commit" in doc["config"]["merged"]
    # joined again with another run: each run's argv once, and counted once
    again = bench_networks.join([doc, run([("resnet18", "fp32", 1.2)])])
    assert len(again["argv"]) == 4 and len(again["rows"]) == 5
    assert "the rows of 4 runs of this commit" in again["config"]["merged"]


def test_a_cut_runs_failed_rows_count_as_its_errors_and_out_of_memory():
    cut = run([("vgg16", "fp32", 1.6)], stats=False)
    cut["rows"] += [{"network": "vgg16", "mode": "tf32", "failed": "RuntimeError: x", "oom": False},
                    {"network": "vgg16", "mode": "bf16", "failed": "OutOfMemoryError: y",
                     "oom": True}]
    doc = bench_networks.join([cut, run([("alexnet", "fp32", 1.3)])])
    assert doc["stats"] == {"errors": 1, "oom": 1 + 1}
    assert doc["summary"]["min_ratio"] == 1.3 and len(doc["rows"]) == 4


@pytest.mark.parametrize("change, what", [
    (lambda d: d["git"].update(commit="def"), "another tree"),
    (lambda d: d["git"].update(dirty=True), "another tree"),
    (lambda d: d["config"].update(steps=4), "other settings"),
    (lambda d: d["rows"][0].update(rounds=41), "timed 41 rounds"),
    (lambda d: d["device"].update(name="other GPU"), "device"),
    (lambda d: d["versions"].update(torch="2.10.0"), "versions"),
    (lambda d: d["rows"].append({"network": "vgg16", "mode": "fp32", "ratio": 1.5}), "two runs"),
    (lambda d: d["rows"].append({"network": "vgg16", "mode": "fp16", "failed": "x"}),
     "no network and mode"),
    (lambda d: d.update(kind="layers"), "not a networks document"),
])
def test_runs_that_differ_in_more_than_their_rows_are_not_joined(change, what):
    a = run([("vgg16", "fp32", 1.6)], rounds_for={"resnet50:tf32": 81})
    b = run([("alexnet", "fp32", 1.3)])
    bench_networks.join([copy.deepcopy(a), copy.deepcopy(b)])  # as they are: joined
    change(b)
    with pytest.raises(ValueError, match=what):
        bench_networks.join([a, b])


@pytest.mark.parametrize("git", [{"commit": "abc", "dirty": True}, {"commit": None, "dirty": None}])
def test_only_runs_of_a_clean_commit_are_joined(git):
    a, b = run([("vgg16", "fp32", 1.6)]), run([("alexnet", "fp32", 1.3)])
    for d in (a, b):
        d["git"] = dict(git)
    with pytest.raises(ValueError, match="clean commit"):
        bench_networks.join([a, b])


def test_the_command_writes_the_joined_document_and_refuses_timing_options(tmp_path, capsys,
                                                                           monkeypatch):
    monkeypatch.setattr(bench_networks, "render", lambda doc: "table")
    paths = []
    for i, rows in enumerate(([("vgg16", "fp32", 1.6)], [("alexnet", "fp32", 1.3)])):
        paths.append(tmp_path / ("run%d.json" % i))
        paths[-1].write_text(json.dumps(run(rows)))
    out = tmp_path / "out"
    assert bench_networks.main(["--join", *map(str, paths), "--out", str(out)]) == 0
    doc = json.loads((out / "networks-gpu.json").read_text())
    assert [r["network"] for r in doc["rows"]] == ["vgg16", "alexnet"]
    # each into a folder of the test's, so that a run which failed to refuse writes nothing else
    joins = ["--join", *map(str, paths), "--out", str(tmp_path / "refused")]
    for args in (joins + ["--rounds", "3"], joins + ["--nets", "vgg16"],
                 joins + ["--rounds-for", "vgg16=3"],
                 ["--join", str(paths[0]), str(tmp_path / "missing.json"), "--out", str(out)]):
        with pytest.raises(SystemExit):
            bench_networks.main(args)
    assert not (tmp_path / "refused").exists()
    assert "--join" in capsys.readouterr().err


def test_the_readme_row_names_the_modes_a_joined_document_lacks():
    """make_docs' results row of a networks document says which network's modes were not timed
    (a join of runs that left one out), rather than a span that reads as every row's."""
    import make_docs
    doc = run([("vgg16", "fp32", 1.5), ("vgg16", "bf16", 1.04), ("resnet50", "fp32", 1.1)])
    for r in doc["rows"]:
        r["ab"] = {"ratio_ci95": [r["ratio"] - 0.01, r["ratio"] + 0.01]}
    text = make_docs.summary({"networks": ("networks-GPU.json", doc)})
    assert "fp32 1.100-1.500x; bf16 1.040x" in text, text
    assert "not timed: resnet50 bf16" in text, text
    doc["rows"].append({"network": "resnet50", "mode": "bf16", "ratio": 0.99,
                        "ab": {"ratio_ci95": [0.98, 1.0]}})
    assert "not timed" not in make_docs.summary({"networks": ("networks-GPU.json", doc)})
