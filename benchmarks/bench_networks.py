#!/usr/bin/env python3
"""Whole training steps of torchvision networks: fastlayers.convert against the plain model.

    python3 benchmarks/bench_networks.py [--out DIR] [--quick] [--nets vgg16,resnet18]
                                         [--modes fp32,tf32,bf16] [--steps N] [--rounds R]
                                         [--rounds-for resnet50:tf32=131,...] [--best-of K]
    python3 benchmarks/bench_networks.py --join RUN.json [RUN.json ...] [--out DIR]

Per network and precision mode (fp32: TF32 off; tf32: PyTorch's convolution default; bf16:
autocast to bfloat16 with TF32 off), with cudnn.benchmark on as BENCHMARKS.md's method says:
  first step  wall time of the first training step of each model on a fresh tuner cache (the
              converted model tunes its layers there; the plain one pays cuDNN's benchmark)
  check       the logits and first-layer weight gradient of a forward + backward of both models
              (eval mode: no dropout, batch-norm running statistics; cuDNN's heuristics, not its
              benchmark) against a float64 copy of the plain model, on CHECK_BATCHES batches, each
              error within max(2 x the plain model's, floor): the logits on every batch, the
              weight gradient by the medians over the batches; any non-finite output fails
  steps       forward, loss, backward and an SGD step, STEPS steps back to back (wall clock to the
              last one's completion, host and device together); plain, converted and a second
              plain copy in an order that changes round by round (common.balanced_orders:
              each takes each place, and follows each other, equally often); the ratio plain /
              converted is the median of per-round ratios, with its quartiles; beside it, plain
              / the copy from the same rounds (A/A: the noise floor of the ratio); with
              --best-of K, a round is K such orders and each model's figure the least of its K
              trials (a shared host's noise only adds time); --rounds-for gives given rows more
              rounds than --rounds (a host-bound step's ratio spreads more round to round, and
              its median's 95% interval narrows as the square root of the rounds)
The tuner's decisions per network go into the JSON. Writes DIR/networks-<device>.json.
--join: one document from runs of one clean commit that timed different rows (a run that a
command's time limit cut, and the rest by --nets/--modes), written to DIR/networks-<device>.json;
refused where the runs differ in anything but the rows, their rounds and the run's own record.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import make_docs  # noqa: E402
from common import log, torch  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import _C, tuner  # noqa: E402

# name -> (batch, image side): BENCHMARKS.md's whole-step anchors.
NETWORKS = {"vgg16": (16, 224), "resnet18": (64, 224), "resnet50": (32, 224), "alexnet": (128, 224)}
MODES = ("fp32", "tf32", "bf16")
CHECK_BATCHES = 5
# The tuner's floors: a network's check is no looser than a layer's.
FLOOR = {"fp32": tuner.error_floor(torch.float32, False),
         "tf32": tuner.error_floor(torch.float32, True),
         "bf16": tuner.error_floor(torch.bfloat16, False)}


def build(name: str):
    import torchvision
    return getattr(torchvision.models, name)(weights=None).cuda().train()


def make_step(model, x, target, mode):
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.bfloat16, enabled=mode == "bf16"):
            loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
    return step


def first_conv(model):
    return next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))


def outputs(model, x, target, mode):
    """Logits and the first convolution's weight gradient of one forward + backward (no step), in
    eval mode: dropout masks drawn for float32 and float64 tensors differ, and a check against
    another model's would compare different functions."""
    model.zero_grad(set_to_none=True)
    model.eval()
    try:
        with torch.autocast("cuda", torch.bfloat16, enabled=mode == "bf16"):
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, target)
        loss.backward()
    finally:
        model.train()
    out = (logits.detach().double(), first_conv(model).weight.grad.detach().double())
    model.zero_grad(set_to_none=True)
    return out


def check(plain, conv, x, target, mode) -> dict:
    """Both models' errors against float64 over CHECK_BATCHES batches (x and target, then seeded
    draws of the same shapes), with cuDNN's heuristics (benchmark off), so that the layers both
    models give to cuDNN run the same algorithms. The logits must be within tolerance on every
    batch. In float32 the first layer's weight gradient is far off float64 (a thousand times the
    rounding), by an amount that varies from batch to batch in either model; over one batch a
    converted model failed where other runs of it passed, so that gradient is compared by its
    median over the batches. A non-finite output fails either way."""
    ref = copy.deepcopy(plain).double()
    gen = torch.Generator(device=x.device).manual_seed(1)
    errs = {"logits": ([], []), "conv1_weight_grad": ([], [])}
    bench = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        for b in range(CHECK_BATCHES):
            if b:
                x = torch.randn(x.shape, device=x.device, generator=gen)
                target = torch.randint(0, 1000, target.shape, device=x.device, generator=gen)
            r = outputs(ref, x.double(), target, "fp64")
            p, c = outputs(plain, x, target, mode), outputs(conv, x, target, mode)
            for i, (ep, ec) in enumerate(errs.values()):
                ep.append(common.rel_err(p[i], r[i]))
                ec.append(common.rel_err(c[i], r[i]))
    finally:
        torch.backends.cudnn.benchmark = bench
    del ref
    row = {}
    for what, (ep, ec) in errs.items():
        if what == "logits":  # the batch nearest its tolerance stands for all
            tols = [common.tolerance(p, 2.0, FLOOR[mode]) for p in ep]
            b = max(range(len(ec)), key=lambda i: ec[i] / tols[i])
            mp, mc, tol, rule = ep[b], ec[b], tols[b], "every batch"
        else:
            mp, mc = statistics.median(ep), statistics.median(ec)
            tol, rule = common.tolerance(mp, 2.0, FLOOR[mode]), "median"
        ok = mc <= tol and all(math.isfinite(e) for e in ec)
        row[what] = {"plain_err": mp, "converted_err": mc, "tolerance": tol, "ok": ok,
                     "rule": rule, "plain_errs": ep, "converted_errs": ec}
    row["ok"] = all(v["ok"] for v in row.values() if isinstance(v, dict))
    return row


def run_network(doc, res, stats, name, mode, args):
    N, side = NETWORKS[name]
    if args.quick:
        N = max(1, N // 2)
    row = {"network": name, "mode": mode, "N": N, "image": side}
    doc["rows"].append(row)
    with common.guard(row, stats, res, "%s %s" % (name, mode)):
        common.set_precision("tf32" if mode == "tf32" else "fp32")
        torch.manual_seed(0)
        plain = build(name)
        conv = fastlayers.convert(copy.deepcopy(plain))
        twin = copy.deepcopy(plain)
        x = torch.randn(N, 3, side, side, device="cuda")
        target = torch.randint(0, 1000, (N,), device="cuda")
        steps = {k: make_step(m, x, target, mode) for k, m in
                 (("plain", plain), ("converted", conv), ("twin", twin))}

        tuner.clear()
        row["first_step_s"] = {"plain": common.first_call_s(steps["plain"]),
                               "converted": common.first_call_s(steps["converted"])}
        decisions = [d for d in tuner.decisions() if d["source"] in ("tuned", "file")]
        row["choices"] = {d["key"].split("|torch=")[0]: d["choice"] for d in decisions}
        row["passes_tuned"], row["passes_on_fastlayers"] = make_docs.pass_counts(row["choices"])
        log("  %-8s %-4s N=%-3d first step: plain %.2f s, converted %.2f s (%d passes tuned, "
            "%d on fastlayers)" % (name, mode, N, row["first_step_s"]["plain"],
                                   row["first_step_s"]["converted"], row["passes_tuned"],
                                   row["passes_on_fastlayers"]))

        # The first steps updated each model with its own gradients: the check compares the
        # same function only once the converted model holds the plain one's weights (and
        # batch-norm statistics) again.
        conv.load_state_dict(plain.state_dict())
        row["check"] = chk = check(plain, conv, x, target, mode)
        if not chk["ok"]:
            row["failed"] = "outside tolerance: %s" % chk
            stats["errors"] += 1
            log("  %-8s %-4s %s" % (name, mode, row["failed"]))
            return
        for s in steps.values():  # warm: plans, allocator, cuDNN's choices
            for _ in range(2):
                s()
        rounds = rounds_for(args, name, mode)
        row["steps_per_trial"] = args.steps
        row["rounds"] = rounds
        row["best_of"] = args.best_of
        # The three models in one rotation (a host-bound step's host is shared and bursty).
        launches = getattr(_C, "step_graph_replays", lambda: 0)
        before = launches()
        row.update(common.ab_aa(steps, "plain", "converted", "twin", args.steps, rounds,
                                args.best_of))
        # Cached CUDA graphs launched (the Winograd pipeline's passes, the LSTM's loops) per
        # timed step of the converted model, the one model that launches any.
        row["graph_launches_per_step"] = ((launches() - before)
                                          / (args.steps * rounds * args.best_of))
        log("  %-8s %-4s plain %.2f ms, converted %.2f ms: x%.3f (quartiles %.3f-%.3f, %.3f-%.3f);"
            " A/A x%.3f (quartiles %.3f-%.3f, %.3f-%.3f)" % (
                name, mode, row["ab"]["a_ms"], row["ab"]["b_ms"], row["ratio"],
                row["ab"]["ratio_q1"], row["ab"]["ratio_q3"], row["ab"]["ratio_min"],
                row["ab"]["ratio_max"], row["aa"]["ratio"], row["aa"]["ratio_q1"],
                row["aa"]["ratio_q3"], row["aa"]["ratio_min"], row["aa"]["ratio_max"]))
    del plain, conv, twin
    common.release()


def parse_rounds_for(text: str) -> dict:
    """'NET[:MODE]=R,...' -> {(net, mode or None): R}; a clear error for anything else, a row
    named twice included."""
    out = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        what, eq, r = item.partition("=")
        net, colon, mode = what.partition(":")
        if (not eq or net not in NETWORKS or (colon and mode not in MODES)
                or not (r.isascii() and r.isdigit()) or int(r) < 1):
            raise argparse.ArgumentTypeError(
                "%r is not NET[:MODE]=ROUNDS (networks: %s; modes: %s; rounds a positive integer)"
                % (item, ", ".join(NETWORKS), ", ".join(MODES)))
        key = (net, mode or None)
        if key in out:
            raise argparse.ArgumentTypeError("%r is given twice" % what)
        out[key] = int(r)
    return out


def rounds_for(args, name: str, mode: str) -> int:
    """The rounds of a row: --rounds-for's for the network and mode, or for the network, or
    --rounds."""
    return args.rounds_for.get((name, mode), args.rounds_for.get((name, None), args.rounds))


def render(doc) -> str:
    return make_docs.networks(doc)


def summary(rows) -> dict:
    """The least and the geometric mean of the rows' ratios (rows that failed have none)."""
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    return {"min_ratio": min(ratios) if ratios else None,
            "geomean": common.geomean(ratios) if ratios else None}


# What runs joined may differ in: their rows, the rounds given rows, and each run's own record.
JOIN_OWN = ("date", "argv", "rows", "sections", "summary", "tuner_report", "stats", "elapsed_s")
JOIN_CONFIG = ("rounds_for", "merged")


def join(docs: list) -> dict:
    """One networks document from runs of one clean commit (docs, each a results document) that
    timed different rows: the rows in NETWORKS x MODES order, each run's sections and stats
    together, the summary recomputed, rounds_for rebuilt from the rounds each row was given, the
    argv of each run, the latest date. A ValueError where a row was timed twice, is not a
    network and mode of this benchmark or was given other rounds than its run's settings say, or
    where the runs differ in anything else (commit and tree state, device, versions, settings
    but rounds_for)."""
    if not docs:
        raise ValueError("nothing to join")
    first = docs[0]
    if not first["git"].get("commit") or first["git"].get("dirty") is not False:
        raise ValueError("run 0 is not of a clean commit (%s)" % first["git"])
    settings = {k: v for k, v in first["config"].items() if k not in JOIN_CONFIG}
    order = [(n, m) for n in NETWORKS for m in MODES]
    rounds: dict = {}
    rows: dict = {}
    for i, d in enumerate(docs):
        if d.get("kind") != "networks":
            raise ValueError("run %d is not a networks document (kind %r)" % (i, d.get("kind")))
        for key in sorted(set(first) | set(d)):
            if key in JOIN_OWN or key in ("config", "git"):
                continue
            if d.get(key) != first.get(key):
                raise ValueError("run %d differs from run 0 in %s" % (i, key))
        if {k: v for k, v in d["git"].items() if k != "note"} != \
                {k: v for k, v in first["git"].items() if k != "note"}:
            raise ValueError("run %d is of another tree: %s, not %s" % (
                i, d["git"].get("commit"), first["git"].get("commit")))
        if {k: v for k, v in d["config"].items() if k not in JOIN_CONFIG} != settings:
            raise ValueError("run %d has other settings: %s" % (i, d["config"]))
        given = d["config"].get("rounds_for", {})
        for r in d["rows"]:
            key = (r["network"], r["mode"])
            if key not in order:
                raise ValueError("run %d has a row of no network and mode of this benchmark: "
                                 "%s %s" % ((i,) + key))
            if key in rows:
                raise ValueError("row %s %s is in two runs" % key)
            want = given.get("%s:%s" % key, given.get(key[0], settings["rounds"]))
            if r.get("rounds", want) != want:
                raise ValueError("row %s %s was timed %s rounds, its run's settings say %s"
                                 % (key + (r["rounds"], want)))
            if want != settings["rounds"]:
                rounds["%s:%s" % key] = want
            rows[key] = r
    out = {k: v for k, v in first.items() if k not in JOIN_OWN}
    out["date"] = max(d["date"] for d in docs)
    out["argv"] = []
    for d in docs:  # a joined document's argv is already one list a run
        out["argv"] += d["argv"] if d["argv"] and isinstance(d["argv"][0], list) else [d["argv"]]
    # make_docs says what a document joins (config "merged")
    out["config"] = dict(first["config"], rounds_for=rounds, merged=(
        "the rows of %d runs of this commit (bench_networks --join; each run's arguments in argv)"
        % len(out["argv"])))
    out["rows"] = [rows[k] for k in order if k in rows]
    names = ["%s %s" % k for k in order]
    sections = {k: v for d in docs for k, v in d.get("sections", {}).items()}
    out["sections"] = {k: sections[k] for k in names if k in sections}
    out["summary"] = summary(out["rows"])
    reports = [d["tuner_report"] for d in docs if d.get("tuner_report")]
    if reports:
        out["tuner_report"] = "\n".join(reports)
    # a run cut short wrote no stats: its failed rows say which were out of memory (common.guard)
    out["stats"] = {"errors": 0, "oom": 0}
    for d in docs:
        for k in out["stats"]:
            out["stats"][k] += d["stats"][k] if "stats" in d else sum(
                1 for r in d["rows"] if "failed" in r and bool(r.get("oom")) == (k == "oom"))
    out["elapsed_s"] = sum(d["elapsed_s"] if d.get("elapsed_s") is not None else
                           sum(v["s"] for v in d.get("sections", {}).values()) for d in docs)
    return {k: out[k] for k in list(first) + [k for k in out if k not in first] if k in out}


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--nets", default=",".join(NETWORKS), help="comma-separated: " + ", ".join(NETWORKS))
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--steps", type=int, default=None, help="steps per timed trial (default 10, quick 4)")
    ap.add_argument("--rounds", type=int, default=None, help="rotated rounds (default 15, quick 3)")
    ap.add_argument("--rounds-for", default="", type=parse_rounds_for,
                    help="rows with other rounds than --rounds (or --quick's): NET[:MODE]=R, "
                    "comma-separated")
    ap.add_argument("--best-of", type=int, default=1,
                    help="rotations per round, each model's least trial kept (default 1)")
    ap.add_argument("--join", nargs="+", metavar="RUN.json",
                    help="join these runs' rows into one document, written to --out (default "
                    "benchmarks/results, replacing the file there); times nothing")
    args = ap.parse_args(argv)
    if args.join:
        timing = [o for o in ("nets", "modes", "steps", "rounds", "best_of", "quick")
                  if getattr(args, o) != ap.get_default(o)] + (["rounds_for"] if args.rounds_for
                                                              else [])
        if timing:
            ap.error("--join times nothing: --%s do not apply"
                     % ", --".join(o.replace("_", "-") for o in timing))
        try:
            docs = []
            for path in args.join:
                with open(path) as f:
                    docs.append(json.load(f))
            doc = join(docs)
        except (OSError, ValueError, KeyError) as e:  # a JSON error is a ValueError
            ap.error("--join: %s: %s" % (type(e).__name__, e))
        res = common.Results(args.out, doc)
        res.save()
        print(render(doc))
        log("wrote %s (%d rows from %d runs)" % (res.path, len(doc["rows"]), len(docs)))
        return 0
    args.steps = args.steps or (4 if args.quick else 10)
    args.rounds = args.rounds or (3 if args.quick else 15)
    unused = [n + (":" + m if m else "") for n, m in args.rounds_for
              if n not in args.nets.split(",") or (m and m not in args.modes.split(","))]
    if unused:  # (--quick's rounds do not apply to the rows named)
        ap.error("--rounds-for names rows this run does not time: %s" % ", ".join(unused))
    if not common.require_cuda("whole-network training steps"):
        return 0
    # A fresh tuner cache: the first steps measure what a new user's would.
    os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-bench-networks-")
    tuner.clear()
    torch.backends.cudnn.benchmark = True
    t_start = time.perf_counter()
    doc = common.meta("networks", args, steps=args.steps, rounds=args.rounds,
                      rounds_for={"%s%s" % (n, ":" + m if m else ""): r
                                  for (n, m), r in args.rounds_for.items()},
                      best_of=args.best_of, quick=args.quick,
                      cudnn_benchmark=True, check_batches=CHECK_BATCHES,
                      check_cudnn_benchmark=False, timer="wall clock, steps back to back",
                      order="balanced")
    doc["rows"] = []
    res = common.Results(args.out, doc)
    stats = {"errors": 0, "oom": 0}
    ok = True
    for name in args.nets.split(","):
        for mode in args.modes.split(","):
            ok &= common.section(doc, res, "%s %s" % (name, mode), run_network, doc, res, stats,
                                 name, mode, args)
    doc["summary"] = summary(doc["rows"])
    return common.finish(doc, res, ok, stats, t_start, render)


if __name__ == "__main__":
    sys.exit(main())
