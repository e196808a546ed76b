#!/usr/bin/env python3
"""Does a family's share of a network's passes pay in the whole step, and what does it do to the
network's error? (a diagnosis, not a result.)

    python3 benchmarks/probe_held_passes.py [--nets resnet50] [--modes bf16] [--hold 'winograd*']...
                                            [--steps 10] [--rounds 15] [--best-of 1]
                                            [--choices-from networks-DEVICE.json]
                                            [--offer-half-pipeline]

Per network and mode: the plain model, a converted one (tuned on a fresh cache; the labels of its
passes are counted), for each --hold pattern a converted twin whose passes that the tuner gave a
label matching it (fnmatch) are pinned to PyTorch's path (the other passes of those layers pinned
to the tuner's labels, other layers as tuned), and a second plain copy. The converted models'
logits and first-layer weight gradients are checked against a float64 copy as bench_networks
checks them, their errors printed beside the plain model's (which passes raise the error:
--hold 'fbfft*' --hold 'winograd:4'); when all pass and ROUNDS > 0, all are timed as
bench_networks times a step (STEPS steps back to back, wall clock) in one rotation round by round.
Comparing two runs of bench_networks (one with the family offered, one without) leaves the
run-to-run drift of a host-bound step in the comparison; here all converted models see the
same rounds. Prints held / converted (> 1: the held passes pay) and plain / held per pattern,
plain / converted and plain / plain copy (the A/A), each the median of per-round ratios with its
quartiles and the median's 95% interval.

--offer-half-pipeline (AMP bf16 modes; elsewhere the two models below only tune again): two further
converted models, each tuned on a cache cleared after the others had decided: "retuned" with the
module's policy, which offers only the fused Winograd kernel in float16 and bfloat16 on CUDA
(docs/winograd.md), and "offered" with the non-fused pipeline offered there as well. Every
converted model (the held ones too) is pinned to its tuned labels before the cache is cleared, so
that none tunes again, and all are timed in the same rotation. Tuning twice moves some choices by
chance, so retuned / offered, not converted / offered, is the pipeline's share.

--choices-from: the converted model takes the decisions a bench_networks run recorded for the
same network and mode (its row's `choices`, written into the fresh tuner cache, keyed for this
build) instead of tuning anew, so that a run's plans can be timed again and held pass by pass;
a pass the row does not hold (another device, say) is tuned as usual, and the log counts both.
"""
from __future__ import annotations

import collections
import copy
import fnmatch
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_networks as bn  # noqa: E402
import common  # noqa: E402
from common import log, torch  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402
from fastlayers.tuner import cache as tuner_cache  # noqa: E402


def plan_labels(module):
    """The labels of a converted layer's tuned passes (forward, input and weight gradient), or
    none for a module that is not one or has not decided."""
    route = getattr(module, "_fl_route", None)
    plan = getattr(route[1], "plan", None) if route is not None else None
    return [ch.label for ch in plan.choices] if plan is not None else []


def hold(converted, held, pattern):
    """Pins the layers of `held` that have a pass on fastlayers whose label in `converted` (its
    twin, tuned) matches `pattern` (fnmatch): those passes to native, the layer's others to their
    tuned labels. Returns the passes held."""
    n = 0
    for c, h in zip(converted.modules(), held.modules()):
        labels = plan_labels(c)
        # passes on PyTorch's path are not held: '*' holds every pass on fastlayers, and no
        # layer without one is pinned (a stride-2 layer would warn that its pins go unused)
        match = [v != "native" and fnmatch.fnmatchcase(v, pattern) for v in labels]
        n_held = sum(match)
        if n_held:  # (a layer with none decides as its twin did: the same cache)
            n += n_held
            h.force_algorithms(*("native" if mv else v for v, mv in zip(labels, match)))
    return n


def replay_choices(path, name, mode):
    """Writes the choices of `path`'s row for (name, mode) into the tuner's cache file, keyed
    for this build (a row's keys leave out the versions' tail). Returns how many; ValueError
    when the file has no such row, or the row no choices."""
    with open(path) as f:
        rows = [r for r in json.load(f).get("rows", [])
                if r.get("network") == name and r.get("mode") == mode]
    if len(rows) != 1:
        raise ValueError("%s: %d rows for %s %s, not one" % (path, len(rows), name, mode))
    if not isinstance(rows[0].get("choices"), dict):
        raise ValueError("%s: the row for %s %s records no choices" % (path, name, mode))
    tail = tuner_cache.versions()
    tuner_cache.write_entries({"%s|%s" % (key, tail): {"choice": label,
                                                       "reason": "replayed from %s" % path}
                               for key, label in rows[0]["choices"].items()})
    return len(rows[0]["choices"])


def pin(model):
    """Pins every decided layer of `model` that can take fastlayers' algorithms to its tuned labels
    (a stride-2 layer, say, runs PyTorch's path whatever its pins, and would warn). Returns how
    many layers."""
    n = 0
    for m in model.modules():
        labels = plan_labels(m)
        if labels and m._unsupported_layer() is None:
            m.force_algorithms(*labels)
            n += 1
    return n


def labels_by_layer(model):
    """{module name: its tuned labels} for the decided layers of `model`."""
    return {name: plan_labels(m) for name, m in model.named_modules() if plan_labels(m)}


def tune_with_half_pipeline(step):
    """Runs `step` (its first: the layers tune) with the Winograd family offering its non-fused
    tiles in float16 and bfloat16 on CUDA beside the fused kernel (for float16 up to alpha
    FP16_MAX_ALPHA, the family's rule on other devices)."""
    from fastlayers.algorithms import winograd as wg
    family = wg.FAMILY
    policy = family.candidates

    def offered(p, pass_):
        out = list(policy(p, pass_))
        half = p.device_type == "cuda" and p.dtype in wg.HALF_DTYPES
        if half and wg.Winograd._layer_fits(p) is None:
            tiles = [t for t in wg._tiles(pass_)
                     if p.dtype != "float16" or t + wg.KERNEL - 1 <= wg.FP16_MAX_ALPHA]
            out = [family.make(t) for t in tiles] + out
        return out
    family.candidates = offered
    try:
        step()
    finally:
        del family.candidates  # the class's method again


def run(name, mode, patterns, args):
    N, side = bn.NETWORKS[name]
    common.set_precision("tf32" if mode == "tf32" else "fp32")
    torch.manual_seed(0)
    plain = bn.build(name)
    conv = fastlayers.convert(copy.deepcopy(plain))
    helds = {"held%d" % i: fastlayers.convert(copy.deepcopy(plain)) for i in range(len(patterns))}
    twin = copy.deepcopy(plain)
    x = torch.randn(N, 3, side, side, device="cuda")
    target = torch.randint(0, 1000, (N,), device="cuda")
    models = {"plain": plain, "converted": conv, **helds, "twin": twin}
    if args.offer_half_pipeline:
        models["retuned"] = fastlayers.convert(copy.deepcopy(plain))
        models["offered"] = fastlayers.convert(copy.deepcopy(plain))
    steps = {k: bn.make_step(m, x, target, mode) for k, m in models.items()}
    tuner.clear()
    if args.choices_from:
        n_replayed = replay_choices(args.choices_from, name, mode)
    steps["converted"]()
    if args.choices_from:
        sources = collections.Counter(d["source"] for d in tuner.decisions())
        log("  %s %s: %d choices replayed from %s; the decisions' sources: %s" % (
            name, mode, n_replayed, args.choices_from,
            ", ".join("%s x%d" % kv for kv in sorted(sources.items()))))
        if not sources["file"]:
            log("  %s %s: WARNING: no decision came from %s (another batch, device or build?): "
                "the converted model was tuned anew" % (name, mode, args.choices_from))
    labels = collections.Counter(lab for m in conv.modules() for lab in plan_labels(m))
    log("  %s %s N=%d: the %s passes' labels: %s" % (
        name, mode, N, "replayed" if args.choices_from else "tuned",
        ", ".join("%s x%d" % kv for kv in sorted(labels.items()))))
    ratios = collections.defaultdict(list)  # label -> its error / native's, per pass chosen
    for d in tuner.decisions():
        e = d["errors"]
        if d["source"] == "tuned" and d["choice"] != "native" and e.get("native"):
            ratios[d["choice"]].append(e[d["choice"]] / e["native"])
    if ratios:  # (replayed decisions carry no errors)
        log("  %s %s: the chosen labels' errors over native's in the tuner's check: %s" % (
            name, mode, ", ".join("%s median x%.2f max x%.2f" % (k, statistics.median(v), max(v))
                                  for k, v in sorted(ratios.items()))))
    n = {k: hold(conv, helds[k], pat) for k, pat in zip(helds, patterns)}
    if args.offer_half_pipeline:
        before = labels_by_layer(conv)
        for k in ("converted", *helds):  # decided and pinned before the cache is cleared
            if k != "converted":
                steps[k]()
            pin(models[k])
        for k in ("retuned", "offered"):
            tuner.clear(memory=True, file=True)
            if k == "offered":
                tune_with_half_pipeline(steps[k])
            else:
                steps[k]()
            # (read before pinning: a pinned layer plans again at its next call)
            after = labels_by_layer(models[k])
            n_pinned = pin(models[k])
            how = "tuned again" if k == "retuned" else "with the 16-bit pipeline offered"
            counts = collections.Counter(lab for labs in after.values() for lab in labs)
            log("  %s %s N=%d: %s (%d layers pinned), the labels: %s" % (
                name, mode, N, how, n_pinned,
                ", ".join("%s x%d" % kv for kv in sorted(counts.items()))))
            for layer, labs in after.items():
                if labs != before.get(layer):
                    log("    %s %s: %s -> %s" % (k, layer, " / ".join(before.get(layer, ["?"])),
                                                 " / ".join(labs)))
    # The plain model's own error moves with cuDNN's algorithms: its error with the heuristics'
    # choices (benchmark off) beside the benchmark's shows how much.
    torch.backends.cudnn.benchmark = False
    aa = bn.check(plain, twin, x, target, mode)
    torch.backends.cudnn.benchmark = True
    log("  %s %s: the plain model's errors with cuDNN's heuristic algorithms: %s" % (
        name, mode, ", ".join("%s %.2e" % (what, v["plain_err"])
                              for what, v in aa.items() if isinstance(v, dict))))
    ok = True
    extra = ["retuned", "offered"] if args.offer_half_pipeline else []
    for k in ("converted", *helds, *extra):
        models[k].load_state_dict(plain.state_dict())
        chk = bn.check(plain, models[k], x, target, mode)
        log("  %s %s %s%s: errors against float64 (the plain model's), %s%s" % (
            name, mode, k, " (%s)" % patterns[int(k[4:])] if k.startswith("held") else "",
            ", ".join("%s %.2e (%.2e, x%.2f)" % (what, v["converted_err"], v["plain_err"],
                                                 v["converted_err"] / v["plain_err"])
                      for what, v in chk.items() if isinstance(v, dict)),
            "" if chk["ok"] else ": outside tolerance"))
        ok = ok and chk["ok"]
    if not ok or args.rounds == 0:
        return
    for s in steps.values():
        for _ in range(2):
            s()
    per = common.rotating({k: common.back_to_back(s, args.steps) for k, s in steps.items()},
                          lambda fn: fn(), args.rounds, args.best_of)

    def show(a, b):
        r = common.ratio_of(per[a], per[b])
        return "%s/%s x%.3f (%.3f-%.3f; 95%% interval %.3f-%.3f)" % (
            a, b, r["ratio"], r["ratio_q1"], r["ratio_q3"], *r["ratio_ci95"])
    for k, pat in zip(helds, patterns):
        log("  %s %s N=%d, %d passes held (%s): %s; %s" % (
            name, mode, N, n[k], pat, show(k, "converted"), show("plain", k)))
    if args.offer_half_pipeline:
        log("  %s %s N=%d, the 16-bit pipeline offered: %s; %s; tuned again: %s; %s" % (
            name, mode, N, show("retuned", "offered"), show("converted", "offered"),
            show("converted", "retuned"), show("plain", "offered")))
    log("  %s %s N=%d: %s; A/A %s; plain %.2f ms" % (
        name, mode, N, show("plain", "converted"), show("plain", "twin"),
        statistics.median(per["plain"])))


def main() -> int:
    ap = common.parser(__doc__, results=False)
    ap.add_argument("--nets", default="resnet50")
    ap.add_argument("--modes", default="bf16")
    ap.add_argument("--hold", action="append",
                    help="fnmatch pattern of the labels held back (winograd:? the non-fused); "
                         "repeated, one held model each, timed in the same rotation "
                         "(default winograd*)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--best-of", type=int, default=1)
    ap.add_argument("--choices-from", default=None,
                    help="a bench_networks results JSON whose recorded decisions the converted "
                         "models take (default: tuned anew)")
    ap.add_argument("--offer-half-pipeline", action="store_true",
                    help="also two models tuned again on a cleared cache, one with the "
                         "non-fused pipeline offered in 16 bits and one without")
    args = ap.parse_args()
    if not common.require_cuda("whole-network training steps"):
        return 0
    os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-probe-held-")
    torch.backends.cudnn.benchmark = True
    for name in args.nets.split(","):
        for mode in args.modes.split(","):
            run(name, mode, args.hold or ["winograd*"], args)
            common.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
