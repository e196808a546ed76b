#!/usr/bin/env python3
"""Two builds of fastlayers, one set of op calls: device time and output bits, build against build.
For changes that must not change behaviour (a restructuring): the same op calls on both trees, in
alternating processes, give the time ratio with an A/A beside it, and whether outputs are
bit-identical.

    python3 benchmarks/ab_builds.py run --tree DIR --out FILE.json   # one process, one built tree
    python3 benchmarks/ab_builds.py compare A1.json B1.json B2.json A2.json ...

Only the public op surface (torch.ops.fastlayers.*) is called, so two trees whose Python packages
differ are measured the same way. Each case is timed as ten back-to-back calls between two CUDA
events, median of nine trials; the first call's output is hashed (bit identity between builds)
and checked against PyTorch in float64 (relative L2 error), so no figure stands unchecked.
"""
import hashlib
import json
import statistics
import sys


def cases():
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


def key(op, a):
    return op + "|" + ",".join("%s=%s" % kv for kv in sorted(a.items()))


def run(tree, out_path):
    sys.path.insert(0, tree + "/python")
    import torch
    import torch.nn.functional as F
    import fastlayers  # noqa: F401
    fl = torch.ops.fastlayers
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    res = {"device": torch.cuda.get_device_name(), "tree": tree, "rows": {}}
    g = torch.Generator(device=dev).manual_seed(0)

    def rel(out, ref):
        out, ref = out.double(), ref.double()
        return ((out - ref).norm() / ref.norm()).item()

    for op, a in cases():
        torch.cuda.empty_cache()
        if op.startswith("fbfft"):
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
        digest = hashlib.sha256(raw.cpu().numpy().tobytes()).hexdigest()[:16]
        err = check(out)
        del out, raw
        for _ in range(2):
            fn()
        times = []
        for _ in range(9):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(10):
                fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 10)
        res["rows"][key(op, a)] = {"ms": statistics.median(times), "sha": digest, "err": err}
        print("%-90s %.4f ms  err %.1e  %s" % (key(op, a), statistics.median(times), err, digest),
              flush=True)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


def compare(paths):
    """paths alternate build A and build B per round (A B B A ...): ratio A/B per round, median."""
    docs = [json.load(open(p)) for p in paths]
    tags = [d["tree"] for d in docs]
    trees = sorted(set(tags))
    by = {t: [d for d in docs if d["tree"] == t] for t in trees}
    a, b = trees
    print("device:", docs[0]["device"])
    print("A = %s (%d runs), B = %s (%d runs)" % (a, len(by[a]), b, len(by[b])))
    print("| case | A ms | B ms | A/B (median of run pairs) | A/A | B/B | bits A==B | err A | err B |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios, aa_all, bb_all, same = [], [], [], 0
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
        print("| %s | %.4f | %.4f | %.3f | %.3f | %.3f | %s | %.1e | %.1e |" % (
            k, statistics.median(ta), statistics.median(tb), r, aa, bb, "yes" if bits else "NO",
            by[a][0]["rows"][k]["err"], by[b][0]["rows"][k]["err"]))
    gm = lambda xs: statistics.geometric_mean(xs)  # noqa: E731
    print("\ngeomean A/B %.3f (min %.3f, max %.3f); A/A %.3f (min %.3f max %.3f); B/B %.3f "
          "(min %.3f max %.3f); outputs bit-identical in %d of %d cases" % (
              gm(ratios), min(ratios), max(ratios), gm(aa_all), min(aa_all), max(aa_all),
              gm(bb_all), min(bb_all), max(bb_all), same, len(ratios)))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[sys.argv.index("--tree") + 1], sys.argv[sys.argv.index("--out") + 1])
    else:
        compare(sys.argv[2:])
