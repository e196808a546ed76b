#!/usr/bin/env python3
"""Two builds of fastlayers, one set of op calls: device time and output bits, build against build.
The same op calls on both trees, in alternating processes, give the time ratio with an A/A beside
it, and whether outputs are bit-identical: for a restructuring that must not change behaviour, or
a kernel change that must pay (scripts/ab-builds builds both trees on the GPU machine and runs
this).

    python3 benchmarks/ab_builds.py run --tree DIR --out FILE.json [--family fft|winograd]
                                        [--only SUB,SUB...]   # cases whose key holds one
    python3 benchmarks/ab_builds.py compare A1.json B1.json B2.json A2.json ...

Only the public op surface (torch.ops.fastlayers.*) is called, so two trees whose Python packages
differ are measured the same way. Each case is timed as ten back-to-back calls between two CUDA
events, median of nine trials; the first call's output is hashed (bit identity between builds)
and checked against PyTorch in float64 (relative L2 error), so no figure stands unchecked. The
winograd family (the fused kernels on VGG layers) also times cuDNN's call in the same trials,
alternating with the op's (cudnn.benchmark on), and compare() gives B over A of cuDNN's time
over the op's as well: the process's own speed cancels there.
"""
import hashlib
import json
import os
import statistics
import sys


def cases(family="fft"):
    if family == "winograd":
        return winograd_cases()
    out = []
    for n in (8, 16, 32, 64, 128):
        out.append(("fbfft_rfft2", dict(n=n, h=n, B=16384)))
        out.append(("fbfft_irfft2", dict(n=n, h=n, B=16384)))
    for n, h in ((16, 13), (32, 27), (64, 57)):
        out.append(("fbfft_rfft2", dict(n=n, h=h, B=16384)))
    for n in (8, 16, 32, 64, 128, 256):
        out.append(("fbfft_rfft", dict(n=n, B=16384)))
        out.append(("fbfft_irfft", dict(n=n, B=16384)))
    layers = {"L1": (3, 96, 128, 11), "L2": (64, 64, 64, 9), "L3": (128, 128, 32, 9),
              "L4": (128, 128, 16, 7), "L5": (384, 384, 13, 3)}
    labels = {"L1": ["fbfft:128x128", "fft:128x128"], "L2": ["fbfft:64x64", "fft:64x64"],
              "L3": ["fbfft:32x32", "fbfft:16x16,tile=8x8"], "L4": ["fbfft:16x16", "fft:16x16"],
              "L5": ["fbfft:16x16", "fft:16x16"]}
    for name, (C, K, n, k) in layers.items():
        for label in labels[name]:
            for p in ("forward", "input_grad", "weight_grad"):
                for tf32 in (False, True):
                    out.append(("conv", dict(layer=name, C=C, K=K, n=n, k=k, label=label, pass_=p,
                                             tf32=tf32)))
    return out


def winograd_cases():
    """The fused Winograd kernels on VGG's 3x3 layers (channels, width): forward and input
    gradient at N 8 and 64 in fp32 (split TF32), tf32 and bf16; the weight gradient at N 16."""
    out = []
    for name, (C, H) in (("conv1_2", (64, 224)), ("conv2_2", (128, 112)), ("conv3_2", (256, 56)),
                         ("conv4_2", (512, 28))):
        for prec in ("fp32", "tf32", "bf16"):
            for N in (8, 64):
                for p in ("forward", "input_grad"):
                    out.append(("winograd", dict(layer=name, C=C, H=H, N=N, prec=prec, pass_=p)))
            if prec != "bf16":  # (the tuner keeps cuDNN's 16-bit weight gradient)
                out.append(("winograd", dict(layer=name, C=C, H=H, N=16, prec=prec,
                                             pass_="weight_grad")))
    return out


def winograd_case(torch, F, fl, a, g):
    """(the op's call, cuDNN's call, the float64 result, and what of a call's result it covers:
    the first two samples, or for the weight gradient the whole) for one winograd case."""
    C, H, N, p = a["C"], a["H"], a["N"], a["pass_"]
    dt = torch.bfloat16 if a["prec"] == "bf16" else torch.float32
    tf32 = a["prec"] == "tf32"
    x = (torch.rand(N, C, H, H, device="cuda", generator=g) * 2 - 1).to(dt)
    w = (torch.rand(C, C, 3, 3, device="cuda", generator=g) * 2 - 1).to(dt)
    bw = torch.ops.aten.convolution_backward
    w2 = w.double()
    x2 = x.double() if p == "weight_grad" else x[:2].double()
    if p == "forward":
        ours = lambda: fl.winograd_conv2d(x, w, None, [1, 1], 2, tf32, True)  # noqa: E731
        ref = lambda: F.conv2d(x, w, None, 1, 1)  # noqa: E731
        exact = F.conv2d(x2, w2, None, 1, 1)
    elif p == "input_grad":  # grad_output x (C = K, the same size)
        ours = lambda: fl.winograd_conv2d_input_grad(x, w, [1, 1], 2, tf32, True)  # noqa: E731
        ref = lambda: bw(x, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,  # noqa: E731
                         [True, False, False])[0]
        exact = bw(x2, x2, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                   [True, False, False])[0]
    else:  # grad_output and input both x; the timed call itself is checked (all N samples)
        ours = lambda: fl.winograd_conv2d_weight_grad(x, x, [1, 1], 2, tf32, True)  # noqa: E731
        ref = lambda: bw(x, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,  # noqa: E731
                         [False, True, False])[1]
        exact = bw(x2, x2, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                   [False, True, False])[1]
        return ours, ref, exact, lambda y: y
    return ours, ref, exact, lambda y: y[:2]


def key(op, a):
    return op + "|" + ",".join("%s=%s" % kv for kv in sorted(a.items()))


def events_ms(torch, fn):
    """ten back-to-back calls between two CUDA events, ms a call"""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 10


def run(tree, out_path, family="fft", only=()):
    # (benchmarks/common is not imported: it would put this checkout's python/ ahead of the tree's)
    sys.path.insert(0, tree + "/python")
    import torch
    import torch.nn.functional as F
    import fastlayers
    # The build loaded must be the tree's: a process of A that found B's would time B twice.
    loaded = os.path.realpath(fastlayers._C.__file__)
    if not loaded.startswith(os.path.realpath(tree) + os.sep):
        raise SystemExit("ab_builds run: loaded %s, not a build of the tree %s" % (loaded, tree))
    fl = torch.ops.fastlayers
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    res = {"device": torch.cuda.get_device_name(), "tree": tree, "loaded": loaded,
           "family": family, "rows": {}}
    g = torch.Generator(device=dev).manual_seed(0)

    def rel(out, ref):
        out, ref = out.double(), ref.double()
        return ((out - ref).norm() / ref.norm()).item()

    for op, a in cases(family):
        if only and not any(sub in key(op, a) for sub in only):
            continue
        torch.cuda.empty_cache()
        ref_fn = None
        if op == "winograd":
            torch.backends.cudnn.allow_tf32 = a["prec"] == "tf32"
            torch.backends.cudnn.benchmark = True  # (cuDNN's best, searched in the warm-up calls)
            fn, ref_fn, exact, part = winograd_case(torch, F, fl, a, g)
            check = lambda out: rel(part(out), exact)  # noqa: E731
        elif op.startswith("fbfft"):
            n, B = a["n"], a["B"]
            if op == "fbfft_rfft2":
                x = torch.randn(B, a["h"], a["h"], device=dev, generator=g)
                fn = lambda: fl.fbfft_rfft2(x, [n, n], [0, 0], False)  # noqa: E731
                ref = torch.fft.rfft2(x.double(), s=(n, n))
            elif op == "fbfft_irfft2":
                X = torch.fft.rfft2(torch.randn(B, n, n, device=dev, generator=g)).to(torch.complex64)
                fn = lambda: fl.fbfft_irfft2(X, [n, n], [n, n], [0, 0], False, True)  # noqa: E731
                ref = torch.fft.irfft2(X.to(torch.complex128), s=(n, n))
            elif op == "fbfft_rfft":
                x = torch.randn(B, n, device=dev, generator=g)
                fn = lambda: fl.fbfft_rfft(x, n, 0)  # noqa: E731
                ref = torch.fft.rfft(x.double(), n=n)
            else:
                X = torch.fft.rfft(torch.randn(B, n, device=dev, generator=g)).to(torch.complex64)
                fn = lambda: fl.fbfft_irfft(X, n, n, 0, True)  # noqa: E731
                ref = torch.fft.irfft(X.to(torch.complex128), n=n)
            check = lambda out: rel(torch.view_as_real(out) if out.is_complex() else out,  # noqa: E731
                                    torch.view_as_real(ref) if ref.is_complex() else ref)
        else:
            S, C, K, n, k = 128, a["C"], a["K"], a["n"], a["k"]
            algo, _, params = a["label"].partition(":")
            backend = "fbfft" if algo == "fbfft" else "cufft"
            basis_s, _, tile_s = params.partition(",tile=")
            basis = [int(v) for v in basis_s.split("x")]
            tile = [int(v) for v in tile_s.split("x")] if tile_s else [0, 0]
            x = torch.randn(S, C, n, n, device=dev, generator=g)
            w = torch.randn(K, C, k, k, device=dev, generator=g)
            o = n - k + 1
            gy = torch.randn(S, K, o, o, device=dev, generator=g)
            tf32, p = a["tf32"], a["pass_"]
            if p == "forward":
                fn = lambda: fl.fft_conv2d(x, w, None, [0, 0], basis, tf32, backend, tile)  # noqa: E731
                ref = F.conv2d(x.double(), w.double())
            elif p == "input_grad":
                gt = [min(tile[0], n), min(tile[1], n)] if tile[0] else tile
                fn = lambda: fl.fft_conv2d_input_grad(gy, w, [0, 0], basis, tf32, backend, gt)  # noqa: E731
                ref = torch.ops.aten.convolution_backward(
                    gy.double(), x.double(), w.double(), None, [1, 1], [0, 0], [1, 1], False,
                    [0, 0], 1, [True, False, False])[0]
            else:
                fn = lambda: fl.fft_conv2d_weight_grad(gy, x, [0, 0], basis, tf32, backend, tile)  # noqa: E731
                ref = torch.ops.aten.convolution_backward(
                    gy.double(), x.double(), w.double(), None, [1, 1], [0, 0], [1, 1], False,
                    [0, 0], 1, [False, True, False])[1]
            check = lambda out: rel(out, ref)  # noqa: E731
        out = fn()
        torch.cuda.synchronize()
        raw = (torch.view_as_real(out) if out.is_complex() else out).contiguous()
        digest = hashlib.sha256(raw.view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]
        err = check(out)
        del out, raw
        row = {"sha": digest, "err": err}
        for _ in range(2):
            fn()
        times, ref_times = [], []
        if ref_fn is not None:
            row["ref_err"] = rel(part(ref_fn()), exact)
            for _ in range(2):
                ref_fn()
        for i in range(9):  # the op and cuDNN alternate, each first in turn
            if ref_fn is not None and i % 2 == 1:
                ref_times.append(events_ms(torch, ref_fn))
            times.append(events_ms(torch, fn))
            if ref_fn is not None and i % 2 == 0:
                ref_times.append(events_ms(torch, ref_fn))
        row["ms"] = statistics.median(times)
        if ref_fn is not None:
            row["ref_ms"] = statistics.median(ref_times)
        res["rows"][key(op, a)] = row
        print("%-90s %.4f ms%s  err %.1e  %s" % (
            key(op, a), row["ms"], "" if ref_fn is None else " (cuDNN %.4f)" % row["ref_ms"],
            err, digest), flush=True)
    if not res["rows"]:
        raise SystemExit("ab_builds run: no case of family %s holds any of %s" % (family, only))
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


def compare(paths):
    """paths alternate build A and build B per round (A B B A ...; the first is A): ratio A/B per
    run pair, median. Rows timed beside cuDNN also give cuDNN's time over the op's in each build
    and B's of those over A's (> 1: B faster)."""
    docs = [json.load(open(p)) for p in paths]
    tags = [d["tree"] for d in docs]
    a = tags[0]
    others = sorted(set(tags) - {a})
    if len(others) != 1:
        raise SystemExit("ab_builds compare: the files must come from exactly two trees")
    b = others[0]
    by = {t: [d for d in docs if d["tree"] == t] for t in (a, b)}
    with_ref = all("ref_ms" in r for r in docs[0]["rows"].values())
    print("device:", docs[0]["device"])
    print("A = %s (%d runs), B = %s (%d runs)" % (a, len(by[a]), b, len(by[b])))
    head = "| case | A ms | B ms | A/B (median of run pairs) | A/A | B/B | bits A==B | err A | err B |"
    if with_ref:
        head += " cuDNN/A | cuDNN/B | B over A | err cuDNN |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    ratios, aa_all, bb_all, rel_all, same = [], [], [], [], 0
    for k in docs[0]["rows"]:
        ta = [d["rows"][k]["ms"] for d in by[a]]
        tb = [d["rows"][k]["ms"] for d in by[b]]
        r = statistics.median([x / y for x, y in zip(ta, tb)])
        aa = ta[0] / ta[1] if len(ta) > 1 else float("nan")
        bb = tb[0] / tb[1] if len(tb) > 1 else float("nan")
        bits = len({d["rows"][k]["sha"] for d in docs}) == 1
        same += bits
        ratios.append(r)
        aa_all.append(aa)
        bb_all.append(bb)
        line = "| %s | %.4f | %.4f | %.3f | %.3f | %.3f | %s | %.1e | %.1e |" % (
            k, statistics.median(ta), statistics.median(tb), r, aa, bb, "yes" if bits else "NO",
            by[a][0]["rows"][k]["err"], by[b][0]["rows"][k]["err"])
        if with_ref:
            ra = [d["rows"][k]["ref_ms"] / d["rows"][k]["ms"] for d in by[a]]
            rb = [d["rows"][k]["ref_ms"] / d["rows"][k]["ms"] for d in by[b]]
            rel_all.append(statistics.median([y / x for x, y in zip(ra, rb)]))
            line += " %.3f | %.3f | %.3f | %.1e |" % (
                statistics.median(ra), statistics.median(rb), rel_all[-1],
                by[a][0]["rows"][k]["ref_err"])
        print(line)
    gm = lambda xs: statistics.geometric_mean(xs)  # noqa: E731
    print("\ngeomean A/B %.3f (min %.3f, max %.3f); A/A %.3f (min %.3f max %.3f); B/B %.3f "
          "(min %.3f max %.3f); outputs bit-identical in %d of %d cases" % (
              gm(ratios), min(ratios), max(ratios), gm(aa_all), min(aa_all), max(aa_all),
              gm(bb_all), min(bb_all), max(bb_all), same, len(ratios)))
    if with_ref:
        print("against cuDNN in the same trials, B over A: geomean %.3f (min %.3f, max %.3f)" % (
            gm(rel_all), min(rel_all), max(rel_all)))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        fam = sys.argv[sys.argv.index("--family") + 1] if "--family" in sys.argv else "fft"
        if fam not in ("fft", "winograd"):
            raise SystemExit("ab_builds run: --family must be fft or winograd, not %r" % fam)
        only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else ()
        run(sys.argv[sys.argv.index("--tree") + 1], sys.argv[sys.argv.index("--out") + 1], fam,
            only)
    else:
        compare(sys.argv[2:])
