#!/usr/bin/env python3
"""fastlayers.Conv2d (tuned) against torch.nn.Conv2d: whole layers, host overhead, small networks.

    python3 benchmarks/bench_modules.py [--out DIR] [--quick] [--layers L1,L2] [--modes fp32,tf32]
                                        [--runtime-calls]

Sections (CUDA):
  modules   the Table 4 layers (S = 128, valid) as modules: forward and forward+backward, device
            time (CUDA events, L2 flushed; ratio = median of per-round ratios of interleaved
            trials) and wall clock of calls issued back to back (host cost included). Outputs
            and gradients are checked against a float64 nn.Conv2d first; a module outside
            max(2 x nn.Conv2d's error, the tuner's floor) gets no ratio.
  overhead  host cost of fastlayers.Conv2d.forward on a warm tuner cache: the module's call
            against its chosen algorithm called directly (fastlayers.algorithms.conv2d_call),
            beside nn.Conv2d's own cost over F.conv2d.
  ops-host  host time per call of each FFT pass against cuDNN on a small layer, where the host
            side dominates.
  networks  (not with --quick) small VGG-ish and AlexNet-ish training steps: fastlayers.convert
            against the same model with nn.Conv2d, losses checked against float64 first.
--runtime-calls: also print the CUDA runtime calls of each pass and of a module step
(torch.profiler; a synchronising call or an allocation would show there).

Writes DIR/modules-<device>.json. Without CUDA: the overhead section on CPU tensors
(DIR/modules-cpu.json). Exit status as bench_table4.py.
"""
from __future__ import annotations

import copy
import os
import sys
import tempfile
import time

import common
from common import log

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import algorithms, tuner  # noqa: E402

from bench_table4 import LAYERS, MODES, S, layer_parser, parse_layer_args  # noqa: E402

PASSES = tuner.PASSES


def make_pair(C, K, k, device, padding=0):
    torch.manual_seed(0)
    ref = nn.Conv2d(C, K, k, padding=padding).to(device)
    ours = fastlayers.Conv2d(C, K, k, padding=padding).to(device)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def module_choices(m, x):
    """The tuner's label for each pass of module `m` on input `x` (None: not decided yet)."""
    tf32 = fastlayers.ops.conv_tf32_allowed() and x.dtype == torch.float32 and x.is_cuda
    p = tuner.ConvProblem.from_tensors(x, m.weight, tuple(int(v) for v in m.padding), tf32)
    keys = {r["key"]: r["choice"] for r in tuner.decisions()}
    return {pass_: keys.get(p.key(pass_)) for pass_ in PASSES}


def step_outputs(m, x, gy):
    """(y, grad x, grad weight, grad bias) of one forward+backward."""
    xg = x.detach().clone().requires_grad_()
    y = m(xg)
    g = torch.autograd.grad(y, (xg, m.weight, m.bias), gy)
    return (y.detach(),) + tuple(t.detach() for t in g)


def check_module(ref_m, fl_m, x, gy, tf32) -> dict:
    """Errors of both modules' outputs and gradients against a float64 nn.Conv2d; ok when every
    one of fastlayers' is within max(2 x nn.Conv2d's, the tuner's floor)."""
    m64 = copy.deepcopy(ref_m).double()
    # The float64 reference needs no fast algorithm: under cudnn.benchmark cuDNN would first time
    # every float64 algorithm of this shape (minutes for a 63x63 kernel).
    benchmark, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, False
    try:
        refs = step_outputs(m64, x.double(), gy.double())
    finally:
        torch.backends.cudnn.benchmark = benchmark
    del m64
    names = ("y", "grad_x", "grad_w", "grad_b")
    nn_err = dict(zip(names, (common.rel_err(a, r) for a, r in zip(step_outputs(ref_m, x, gy), refs))))
    fl_err = dict(zip(names, (common.rel_err(a, r) for a, r in zip(step_outputs(fl_m, x, gy), refs))))
    floor = tuner.error_floor(x.dtype, tf32)
    tol = {n: common.tolerance(nn_err[n], 2.0, floor) for n in names}
    bad = [n for n in names if not fl_err[n] <= tol[n]]
    return {"nn_err": nn_err, "fastlayers_err": fl_err, "tolerance": tol,
            "within_tolerance": not bad, "outside": bad}


def bench_modules(args, res, timer, stats):
    rows = res.doc.setdefault("modules", [])
    rounds = 3 if args.quick else 5
    calls = 10 if args.quick else 20
    for name, C, K, n, k in LAYERS:
        if args.layers and name not in args.layers:
            continue
        for mode in MODES:
            if args.modes and mode not in args.modes:
                continue
            tf32 = common.set_precision(mode)
            row = {"layer": name, "mode": mode, "S": S, "C": C, "K": K, "n": n, "k": k}
            rows.append(row)
            with common.guard(row, stats, res, "%s %s" % (name, mode)):
                ref_m, fl_m = make_pair(C, K, k, "cuda")
                gen = torch.Generator(device="cuda").manual_seed(7)
                x = torch.randn(S, C, n, n, device="cuda", generator=gen)
                gy = torch.randn(S, K, n - k + 1, n - k + 1, device="cuda", generator=gen)
                step_outputs(fl_m, x, gy)  # tunes all three passes
                with torch.no_grad():
                    fl_m(x)  # and the forward without autograd
                row["choices"] = module_choices(fl_m, x)
                row["check"] = chk = check_module(ref_m, fl_m, x, gy, tf32)
                if not chk["within_tolerance"]:
                    row["failed"] = "outside tolerance: %s" % ", ".join(chk["outside"])
                    stats["errors"] += 1
                    log("  %-3s %-4s %s" % (name, mode, row["failed"]))
                    continue
                xg = x.clone().requires_grad_()

                def step(m):
                    torch.autograd.grad(m(xg), (xg, m.weight, m.bias), gy)

                with torch.no_grad():
                    row["fwd"] = common.interleaved(lambda: ref_m(x), lambda: fl_m(x), timer, rounds)
                    row["fwd_loop_us"] = {"nn": common.host_us(lambda: ref_m(x), calls, 3)["us"],
                                          "fastlayers": common.host_us(lambda: fl_m(x), calls, 3)["us"]}
                row["fwdbwd"] = common.interleaved(lambda: step(ref_m), lambda: step(fl_m), timer,
                                                   rounds)
                row["fwdbwd_loop_us"] = {"nn": common.host_us(lambda: step(ref_m), calls, 3)["us"],
                                         "fastlayers": common.host_us(lambda: step(fl_m), calls, 3)["us"]}
                row["fwd_ratio"] = row["fwd"]["ratio"]
                row["fwdbwd_ratio"] = row["fwdbwd"]["ratio"]
                row["fwdbwd_loop_ratio"] = row["fwdbwd_loop_us"]["nn"] / row["fwdbwd_loop_us"]["fastlayers"]
                log("  %-3s %-4s forward x%.2f | fwd+bwd x%.2f (back to back x%.2f) | %s"
                    % (name, mode, row["fwd_ratio"], row["fwdbwd_ratio"], row["fwdbwd_loop_ratio"],
                       " / ".join(str(v) for v in row["choices"].values())))
                del x, gy, xg, ref_m, fl_m
    res.doc["modules_summary"] = {
        mode: {"geomean_fwd_ratio": common.geomean([r.get("fwd_ratio") for r in rows if r["mode"] == mode]),
               "geomean_fwdbwd_ratio": common.geomean([r.get("fwdbwd_ratio") for r in rows
                                                       if r["mode"] == mode])}
        for mode in MODES}


def bench_overhead(args, res, stats, device="cuda"):
    """Host cost of the module over its chosen algorithm called directly, warm tuner cache."""
    rows = res.doc.setdefault("overhead", [])
    calls, reps = (100, 5) if args.quick else (300, 7)
    shapes = [("small", 1, 8, 8, 16, 3)] + ([("L4", S, 128, 128, 16, 7)] if device == "cuda" else [])
    if device == "cuda":
        common.set_precision("fp32")
    for label, bs, C, K, n, k in shapes:
        row = {"shape": label, "S": bs, "C": C, "K": K, "n": n, "k": k, "mode": "fp32",
               "device": device}
        rows.append(row)
        with common.guard(row, stats, res, label):
            ref_m, fl_m = make_pair(C, K, k, device)
            x = torch.randn(bs, C, n, n, device=device)
            w, b = fl_m.weight, fl_m.bias
            with torch.no_grad():
                fl_m(x)  # tunes (or hits the cache)
            choice = module_choices(fl_m, x)["forward"] or "native"
            row["choice_forward"] = choice
            fn = algorithms.conv2d_call(algorithms.parse(choice), "forward", (0, 0), False)

            def direct():
                return fn(x, w, b, None)

            us = lambda f: common.host_us(f, calls, reps)["us"]  # noqa: E731
            with torch.no_grad():
                row["us_module_nograd"] = us(lambda: fl_m(x))
                row["us_direct_nograd"] = us(direct)
                row["us_nn_module_nograd"] = us(lambda: ref_m(x))
                row["us_F_conv2d_nograd"] = us(lambda: F.conv2d(x, w, b))
            fl_m(x)  # with autograd recording: plans the backward passes too
            row["us_module_grad"] = us(lambda: fl_m(x))
            row["us_direct_grad"] = us(direct)
            row["us_nn_module_grad"] = us(lambda: ref_m(x))
            row["overhead_us_nograd"] = row["us_module_nograd"] - row["us_direct_nograd"]
            row["overhead_us_grad"] = row["us_module_grad"] - row["us_direct_grad"]
            row["nn_overhead_us_nograd"] = row["us_nn_module_nograd"] - row["us_F_conv2d_nograd"]
            log("  %-5s forward=%s: module over the direct call %+.1f us (no grad), %+.1f us "
                "(autograd); nn.Conv2d over F.conv2d %+.1f us"
                % (label, choice, row["overhead_us_nograd"], row["overhead_us_grad"],
                   row["nn_overhead_us_nograd"]))


def small_layer():
    x = torch.randn(1, 8, 16, 16, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    gy = torch.randn(1, 8, 16, 16, device="cuda")
    return x, w, gy


def bench_ops_host(args, res, stats):
    """Host time per call of each pass, cuDNN against the FFT ops, on a layer whose device time is
    a few microseconds (1 x 8 x 16 x 16, k = 3, pad 1)."""
    rows = res.doc.setdefault("ops_host", [])
    common.set_precision("fp32")
    x, w, gy = small_layer()
    for label in ("native", "fft:18x18", "fbfft:32x32"):
        for pass_ in PASSES:
            fn = algorithms.conv2d_call(algorithms.parse(label), pass_, (1, 1), False)
            t = common.host_us(lambda: fn(x, w, None, gy), 500, 3, 50)
            rows.append({"choice": label, "pass": pass_, **t})
            log("  %-12s %-11s enqueue %.1f us/call, with the device %.1f us/call"
                % (label, pass_, t["enqueue_us"], t["us"]))
    res.save()


def runtime_calls():
    """The CUDA runtime and driver calls of each FFT pass (small layer) and of a module step
    (L4, forward+backward), host time per call, longest first."""
    from torch.profiler import ProfilerActivity, profile

    def show(fn, reps, unit):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
        rows = [(e.cpu_time_total / reps, e.count / reps, e.key) for e in prof.key_averages()
                if e.key.startswith("cu")]
        for t, cnt, key in sorted(rows, reverse=True)[:10]:
            log("    %8.1f us/%s  x%.1f  %s" % (t, unit, cnt, key))

    x, w, gy = small_layer()
    for pass_ in PASSES:
        fn = algorithms.conv2d_call(algorithms.parse("fft:18x18"), pass_, (1, 1), False)
        log("  fft:18x18 %s" % pass_)
        show(lambda: fn(x, w, None, gy), 20, "call")
    xl = torch.randn(S, 128, 16, 16, device="cuda", requires_grad=True)
    for labels in (None, ("fbfft:16x16",) * 3):
        m = fastlayers.Conv2d(128, 128, 7).cuda() if labels else nn.Conv2d(128, 128, 7).cuda()
        if labels:
            m.force_algorithms(*labels)
        log("  %s forward+backward (L4)" % ("fastlayers " + "/".join(labels) if labels else "nn.Conv2d"))
        show(lambda: m(xl).sum().backward(), 5, "step")


def vgg_ish():
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, "M"]
    layers, c = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
            c = v
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * 4 * 4, 256), nn.ReLU(inplace=True),
                         nn.Linear(256, 10)), (64, 3, 64, 64)


def alexnet_ish():
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Linear(256 * 6 * 6, 1024), nn.ReLU(inplace=True), nn.Linear(1024, 10),
    ), (64, 3, 224, 224)


def bench_networks(args, res, stats):
    rows = res.doc.setdefault("networks", [])
    timer = common.CudaTimer(warmup=3, trials=10, flush=False, max_s=3.0)
    for net_name, make in (("vgg-ish", vgg_ish), ("alexnet-ish", alexnet_ish)):
        for mode in MODES:
            if args.modes and mode not in args.modes:
                continue
            tf32 = common.set_precision(mode)
            row = {"net": net_name, "mode": mode}
            rows.append(row)
            with common.guard(row, stats, res, "%s %s" % (net_name, mode)):
                torch.manual_seed(0)
                base, shape = make()
                base = base.cuda()
                ours = fastlayers.convert(copy.deepcopy(base))
                row["input"] = list(shape)
                x = torch.randn(*shape, device="cuda")
                target = torch.randint(0, 10, (shape[0],), device="cuda")

                def make_step(model):
                    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

                    def step():
                        opt.zero_grad(set_to_none=True)
                        F.cross_entropy(model(x), target).backward()
                        opt.step()
                    return step

                before = {r["key"] for r in tuner.decisions()}
                t0 = time.perf_counter()
                with torch.no_grad():
                    y_ours = ours(x)  # tunes every layer's forward
                torch.cuda.synchronize()
                row["first_forward_s"] = time.perf_counter() - t0
                with torch.no_grad():
                    ref = copy.deepcopy(base).double()(x.double())
                    err_nn, err_ours = common.rel_err(base(x), ref), common.rel_err(y_ours, ref)
                del ref, y_ours
                tol = common.tolerance(err_nn, 2.0, tuner.error_floor(torch.float32, tf32))
                row["check"] = {"nn_err": err_nn, "fastlayers_err": err_ours, "tolerance": tol}
                if not err_ours <= tol:
                    row["failed"] = "logits error %.2e > tolerance %.2e" % (err_ours, tol)
                    stats["errors"] += 1
                    log("  %-11s %-4s %s" % (net_name, mode, row["failed"]))
                    continue
                step_ours = make_step(ours)
                step_ours()  # tunes the backward passes
                row["step"] = common.interleaved(make_step(base), step_ours, timer, 3)
                row["ratio"] = row["step"]["ratio"]
                row["choices"] = sorted({r["choice"] for r in tuner.decisions()
                                         if r["key"] not in before})
                log("  %-11s %-4s train step nn %.2f ms, fastlayers %.2f ms (x%.2f); %s"
                    % (net_name, mode, row["step"]["a_ms"], row["step"]["b_ms"], row["ratio"],
                       ", ".join(row["choices"])))
                del base, ours, x, target


def parse_args(argv=None):
    ap = layer_parser(__doc__)
    ap.add_argument("--no-networks", action="store_true", help="skip the whole-network section")
    ap.add_argument("--runtime-calls", action="store_true",
                    help="print the CUDA runtime calls of each pass and of a module step")
    return parse_layer_args(ap, argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["FASTLAYERS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastlayers-bench-tuner-")
    tuner.clear(memory=True)
    tuner.set_mode("tune")
    stats = {"errors": 0, "oom": 0}
    t_start = time.perf_counter()
    if not torch.cuda.is_available():
        log("no CUDA device: the module overhead on CPU tensors only")
        doc = common.meta("modules", args, quick=bool(args.quick), timer="wall clock")
        res = common.Results(args.out, doc)
        ok = common.section(doc, res, "module overhead (CPU)", bench_overhead, args, res, stats,
                            "cpu")
        log("wrote %s" % res.path)
        return 0 if ok and not stats["errors"] else 3
    budget = 1.0 if args.quick else 3.0
    tuner.set_workspace_limit(8 << 30)
    tuner.set_budget(budget)
    torch.backends.cudnn.benchmark = True
    timer = common.CudaTimer(*((2, 5) if args.quick else (3, 15)), flush=True)
    doc = common.meta("modules", args, S=S, **timer.config(), quick=bool(args.quick),
                      tuner_budget_s=budget, cudnn_benchmark=True,
                      ratio="nn.Conv2d ms / fastlayers.Conv2d ms; median of per-round ratios "
                            "of interleaved trials")
    res = common.Results(args.out, doc)
    res.save()
    log(common.describe_run(doc))
    ok = common.section(doc, res, "modules", bench_modules, args, res, timer, stats)
    ok &= common.section(doc, res, "overhead", bench_overhead, args, res, stats)
    ok &= common.section(doc, res, "ops-host", bench_ops_host, args, res, stats)
    if args.runtime_calls:
        ok &= common.section(doc, res, "runtime calls", runtime_calls)
    if not (args.quick or args.no_networks):
        ok &= common.section(doc, res, "networks", bench_networks, args, res, stats)
    import make_docs
    return common.finish(doc, res, ok, stats, t_start, make_docs.modules)


if __name__ == "__main__":
    sys.exit(main())
