#!/usr/bin/env python3
"""fastlayers.LSTM (the fused ops pinned; with --algorithm persistent, the persistent kernel)
against torch.nn.LSTM (cuDNN) and an eager LSTMCell loop, and a word-level language model's
training step converted against plain.

    python3 benchmarks/bench_lstm.py [--out DIR] [--quick] [--configs NAME,...] [--modes fp32,...]
                                      [--algorithm fused|persistent]
                                      [--sections layers,cell,host,lm]

Sections (CUDA):
  layers  the configurations of NVIDIA's cuDNN 5 RNN post and BENCHMARKS.md (hidden H, batch B,
          steps T, layers L; input = hidden, sequence-major): forward (no autograd) and forward +
          backward, modes fp32 (TF32 off), tf32 (cuDNN's RNN switch on: PyTorch's default), fp16,
          bf16. Outputs, final states and the gradients of the input and every parameter are
          checked against a float64 nn.LSTM first; a module outside max(2 x nn.LSTM's error, the
          tuner's floor) gets no ratio. Then interleaved rounds: device time (CUDA events, L2
          flushed) and wall clock of calls back to back (host included), ratio = nn.LSTM's time /
          fastlayers' (> 1: fastlayers faster); TFLOP/s from 2 T B 4H (I + R) per layer and
          direction (forward; three times that for forward + backward).
  cell    the eager LSTMCell loop (100 Python steps) against the fused op and, where it fits, the
          persistent kernel, fp32, forward.
  host    the host's own time of a training step (one layer's forward and backward) with the
          device held by a sleep kernel queued first (common.held_host_us), nn.LSTM against
          fastlayers.LSTM as convert gives it (the tuner's choice), rotated rounds; a call that
          waited on the device anyway (the device found idle after the calls, or the calls
          lasting half the sleep or more) is marked not held, and given no ratio.
  lm      embedding (10k) -> 2-layer LSTM 512 -> linear (10k), T 35, B 64: SGD steps back to back,
          converted (fastlayers.convert as a user gets it: the tuner picks per pass; the first
          step, tuning included, timed) against plain, fp32 / tf32 / AMP bf16; plain, converted
          and a second plain copy rotated round by round (A/A from the same rounds); the loss
          checked against float64 first; the tuner's choices in the JSON.
Writes DIR/lstm-<device>.json. Without CUDA: one small configuration on CPU tensors
(DIR/lstm-cpu.json). Exit status: 0 all ran, 3 a measurement failed (a correctness gate
included), 1 a section crashed.
"""
from __future__ import annotations

import copy
import statistics
import time

import common
from common import log

import torch  # noqa: E402
from torch import nn  # noqa: E402

import fastlayers  # noqa: E402
from fastlayers import tuner  # noqa: E402

# name: (H, B, T, L, bidirectional, packed)
CONFIGS = {
    "512x64x100": (512, 64, 100, 1, False, False),
    "512x64x100-L4": (512, 64, 100, 4, False, False),
    "1024x64x100": (1024, 64, 100, 1, False, False),
    "256x32x1000": (256, 32, 1000, 1, False, False),
    "512x1x100": (512, 1, 100, 1, False, False),
    "512x4x100": (512, 4, 100, 1, False, False),
    "512x8x100": (512, 8, 100, 1, False, False),
    "512x16x100": (512, 16, 100, 1, False, False),
    "512x64x100-bi": (512, 64, 100, 1, True, False),
    "512x64x100-packed": (512, 64, 100, 1, False, True),
}
QUICK = ("512x64x100", "512x64x100-L4", "512x1x100", "512x64x100-packed")
MODES = ("fp32", "tf32", "fp16", "bf16")
DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
         "bf16": torch.bfloat16}


def set_mode(mode: str) -> bool:
    """TF32 for cuDNN's RNNs (and fastlayers', which follows the same switch) only in tf32."""
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = False
    return fastlayers.lstm.rnn_tf32_allowed()


def lengths_of(B: int, T: int):
    """Mixed lengths from T down to T / 2, sorted (a PackedSequence's order)."""
    return [T - (T // 2) * i // max(B - 1, 1) for i in range(B)]


def make(H, L, bidirectional, device, dtype, algorithm="fused"):
    torch.manual_seed(0)
    ref = nn.LSTM(H, H, L, bidirectional=bidirectional).to(device=device, dtype=dtype)
    fast = fastlayers.convert(copy.deepcopy(ref)).force_algorithm(algorithm)
    return ref, fast


def inputs(H, B, T, packed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(T, B, H, device=device, dtype=dtype, generator=gen)
    return x, (lengths_of(B, T) if packed else None)


def wrap(x, lengths):
    return x if lengths is None else nn.utils.rnn.pack_padded_sequence(x, lengths)


def outputs(m, x, lengths, train: bool):
    """The output, h_n, c_n, and with `train` the gradients of x and every parameter, flattened
    into one float64 tensor."""
    xg = x.detach().clone().requires_grad_(train)
    with torch.set_grad_enabled(train):
        y, (h, c) = m(wrap(xg, lengths))
        y = y.data if lengths is not None else y
        outs = [y.flatten(), h.flatten(), c.flatten()]
        if train:
            loss = y.float().square().sum() + h.float().sum()
            outs += [g.flatten() for g in torch.autograd.grad(loss, [xg] + list(m.parameters()))]
    return torch.cat([o.detach().double() for o in outs])


def check(ref, fast, x, lengths, train, tf32) -> dict:
    n = min(x.shape[1], 2)
    xs = x[:, :n]
    ls = None if lengths is None else lengths[:n]
    r64 = outputs(copy.deepcopy(ref).double(), xs.double(), ls, train)
    nn_err = common.rel_err(outputs(ref, xs, ls, train), r64)
    fl_err = common.rel_err(outputs(fast, xs, ls, train), r64)
    tol = common.tolerance(nn_err, 2.0, tuner.error_floor(x.dtype, tf32))
    return {"nn_err": nn_err, "fastlayers_err": fl_err, "tolerance": tol,
            "within_tolerance": fl_err <= tol}


def flops(H, B, T, L, D, train):
    """Multiply-adds x 2 of the GEMMs (input and recurrent), every layer and direction; a
    backward does twice a forward's."""
    per = 2.0 * T * B * 4 * H * (H + H) * D
    first, rest = per, 2.0 * T * B * 4 * H * (H * D + H) * D
    total = first + rest * (L - 1)
    return total * (3 if train else 1)


def bench_layers(args, res, timer, stats, device="cuda"):
    rows = res.doc.setdefault("layers", [])
    names = args.configs or (QUICK if args.quick else tuple(CONFIGS))
    modes = args.modes or (("fp32", "fp16") if args.quick else MODES)
    rounds = 3 if args.quick else 5
    calls = 5 if args.quick else 10
    for name in names:
        H, B, T, L, bi, packed = CONFIGS[name]
        for mode in modes:
            tf32 = set_mode(mode)
            row = {"config": name, "mode": mode, "H": H, "B": B, "T": T, "L": L,
                   "bidirectional": bi, "packed": packed, "algorithm": args.algorithm}
            rows.append(row)
            if args.algorithm == "persistent" and (packed or not fastlayers.lstm.persistent_fits(
                    B, H, DTYPE[mode], device)):
                row["failed"] = "the persistent kernel does not serve this configuration"
                log("  %-18s %-4s skipped: %s" % (name, mode, row["failed"]))
                continue
            with common.guard(row, stats, res, "%s %s" % (name, mode)):
                ref, fast = make(H, L, bi, device, DTYPE[mode], args.algorithm)
                x, lengths = inputs(H, B, T, packed, device, DTYPE[mode])
                for train, label in ((False, "fwd"), (True, "fwdbwd")):
                    chk = row["check_" + label] = check(ref, fast, x, lengths, train, tf32)
                    if not chk["within_tolerance"]:
                        row["failed"] = "%s outside tolerance (%.2e > %.2e)" % (
                            label, chk["fastlayers_err"], chk["tolerance"])
                        stats["errors"] += 1
                        log("  %s %s %s" % (name, mode, row["failed"]))
                        break
                    xg = x.clone().requires_grad_(train)
                    params = [list(ref.parameters()), list(fast.parameters())]

                    def run(m, ps, train=train, xg=xg):
                        if not train:
                            with torch.no_grad():
                                return m(wrap(xg, lengths))
                        y, (h, _) = m(wrap(xg, lengths))
                        y = y.data if lengths is not None else y
                        torch.autograd.grad(y.float().sum() + h.float().sum(), [xg] + ps)

                    a = lambda: run(ref, params[0])  # noqa: E731
                    b = lambda: run(fast, params[1])  # noqa: E731
                    if device == "cuda":
                        dev = common.interleaved(a, b, timer, rounds)
                        row[label] = dev
                        row[label + "_tflops"] = flops(H, B, T, L, 2 if bi else 1, train) / (
                            dev["b_ms"] * 1e9)
                    wall = common.interleaved(
                        a, b, lambda f: {"ms": common.host_us(f, calls, 3, 2)["us"] / 1e3}, rounds)
                    row[label + "_wall"] = wall
                    log("  %-18s %-4s %-6s device x%s, back to back x%.2f (nn %.3f ms, "
                        "fastlayers %.3f ms)" % (
                            name, mode, label, common.fmt(row.get(label, {}).get("ratio"), ".2f"),
                            wall["ratio"], wall["a_ms"], wall["b_ms"]))
                del ref, fast, x


def bench_cell(args, res, timer, stats):
    """The eager nn.LSTMCell loop against the fused op, and against the persistent kernel where
    it fits, over the same 100 steps, fp32, forward."""
    row = {"config": "512x64x100", "mode": "fp32"}
    res.doc["cell"] = row
    with common.guard(row, stats, res, "cell loop"):
        set_mode("fp32")
        H, B, T = 512, 64, 100
        ref, fast = make(H, 1, False, "cuda", torch.float32)
        persistent = (fastlayers.convert(copy.deepcopy(ref)).force_algorithm("persistent")
                      if fastlayers.lstm.persistent_fits(B, H, torch.float32, "cuda") else None)
        cell = nn.LSTMCell(H, H).cuda()
        with torch.no_grad():
            for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, n).copy_(getattr(ref, n + "_l0"))
        x, _ = inputs(H, B, T, False, "cuda", torch.float32)

        def loop():
            h = c = torch.zeros(B, H, device="cuda")
            outs = []
            for t in range(T):
                h, c = cell(x[t], (h, c))
                outs.append(h)
            return torch.stack(outs)

        with torch.no_grad():
            want = loop().double()
            err = common.rel_err(want, fast(x)[0].double())
            row["loop_vs_fused_rel_err"] = err
            if persistent is not None:
                row["loop_vs_persistent_rel_err"] = common.rel_err(
                    want, persistent(x)[0].double())
                err = max(err, row["loop_vs_persistent_rel_err"])
            if err > 1e-4:
                row["failed"] = "the loop and the op differ: %.2e" % err
                stats["errors"] += 1
                return
            row["fwd"] = common.interleaved(loop, lambda: fast(x), timer, 3)
            if persistent is not None:
                row["fwd_persistent"] = common.interleaved(loop, lambda: persistent(x), timer, 3)
        log("  LSTMCell loop over the fused op: x%.2f" % row["fwd"]["ratio"])
        if persistent is not None:
            log("  LSTMCell loop over the persistent kernel: x%.2f"
                % row["fwd_persistent"]["ratio"])


HOST_CONFIGS = ("512x1x100", "512x64x100")


def bench_host(args, res, stats, device="cuda"):
    """A training step's host time, device held: nn.LSTM against fastlayers.LSTM (tuned)."""
    rows = res.doc.setdefault("host", [])
    names = [n for n in (args.configs or HOST_CONFIGS) if n in HOST_CONFIGS]
    for name in names:
        H, B, T, L, bi, packed = CONFIGS[name]
        for mode in args.modes or ("fp32", "fp16"):
            row = {"config": name, "mode": mode, "H": H, "B": B, "T": T, "L": L}
            rows.append(row)
            with common.guard(row, stats, res, "host %s %s" % (name, mode)):
                set_mode(mode)
                torch.manual_seed(0)
                ref = nn.LSTM(H, H, L).to(device, DTYPE[mode])
                fast = fastlayers.convert(copy.deepcopy(ref))
                x = torch.randn(T, B, H, device=device, dtype=DTYPE[mode], requires_grad=True)

                def step(m):
                    y, (h, _) = m(x)
                    (y.float().sum() + h.float().sum()).backward()
                tuner.clear()
                step(fast)  # tunes the training pass
                row["choice"] = sorted({d["choice"] for d in tuner.decisions()
                                        if d["source"] in ("tuned", "file")})
                per, held = {"nn": [], "fastlayers": []}, {"nn": True, "fastlayers": True}
                mods = [("nn", ref), ("fastlayers", fast)]
                for r in range(6):
                    for k, m in mods if r % 2 == 0 else mods[::-1]:
                        o = common.held_host_us(lambda: step(m), calls=10, reps=3)
                        per[k].append(o["host_us"])
                        held[k] &= o["held"]
                row["nn_us"] = statistics.median(per["nn"])
                row["fastlayers_us"] = statistics.median(per["fastlayers"])
                row["held"] = held
                row["ratio"] = row["nn_us"] / row["fastlayers_us"]
                log("  host %-12s %-4s nn %.0f us%s, fastlayers (%s) %.0f us%s: x%.2f" % (
                    name, mode, row["nn_us"], "" if held["nn"] else " (waited on the device)",
                    "/".join(row["choice"]), row["fastlayers_us"],
                    "" if held["fastlayers"] else " (waited on the device)", row["ratio"]))


def bench_lm(args, res, stats, device="cuda"):
    """A word-level language model's SGD steps, converted (the tuner's choices) against plain."""
    rows = res.doc.setdefault("lm", [])
    V, E, H, T, B = 10000, 512, 512, 35, 64
    modes = ("fp32",) if args.quick else ("fp32", "tf32", "bf16")
    for mode in modes:
        row = {"mode": mode, "V": V, "H": H, "T": T, "B": B, "layers": 2}
        rows.append(row)
        with common.guard(row, stats, res, "lm %s" % mode):
            set_mode("tf32" if mode == "tf32" else "fp32")
            torch.manual_seed(0)

            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.emb, self.rnn = nn.Embedding(V, E), nn.LSTM(E, H, 2)
                    self.out = nn.Linear(H, V)

                def forward(self, tokens):
                    return self.out(self.rnn(self.emb(tokens))[0])

            plain = LM().to(device)
            conv = fastlayers.convert(copy.deepcopy(plain))
            tokens = torch.randint(0, V, (T + 1, B), device=device)
            amp = mode == "bf16"
            loss_fn = nn.CrossEntropyLoss()

            def make_step(model):
                opt = torch.optim.SGD(model.parameters(), lr=0.01)

                def step():
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(device, torch.bfloat16, enabled=amp):
                        logits = model(tokens[:-1])
                        loss = loss_fn(logits.float().view(-1, V), tokens[1:].reshape(-1))
                    loss.backward()
                    opt.step()
                    return loss
                return step

            with torch.no_grad():
                ref64 = copy.deepcopy(plain).double()
                l64 = loss_fn(ref64(tokens[:-1]).view(-1, V), tokens[1:].reshape(-1)).item()
                with torch.autocast(device, torch.bfloat16, enabled=amp):
                    lp = loss_fn(plain(tokens[:-1]).float().view(-1, V), tokens[1:].reshape(-1))
                    lc = loss_fn(conv(tokens[:-1]).float().view(-1, V), tokens[1:].reshape(-1))
            row["loss_f64"], row["loss_plain"], row["loss_converted"] = l64, lp.item(), lc.item()
            tol = max(2 * abs(lp.item() - l64), 1e-5 * abs(l64))
            if abs(lc.item() - l64) > tol:
                row["failed"] = "converted loss %.6g, plain %.6g, float64 %.6g" % (
                    lc.item(), lp.item(), l64)
                stats["errors"] += 1
                continue
            # The copy's cuDNN weights are one buffer again, as plain's are (.cuda() flattened
            # them; a deepcopy does not): otherwise each of its calls compacts them and A/A
            # reads the copy slower.
            twin = copy.deepcopy(plain)
            twin.rnn.flatten_parameters()
            sp, sc, sp2 = make_step(plain), make_step(conv), make_step(twin)
            tuner.clear()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            sc()  # the first step tunes the LSTM's passes
            torch.cuda.synchronize()
            row["first_step_s"] = time.perf_counter() - t0
            row["choices"] = {d["key"].split("|torch=")[0]: d["choice"] for d in tuner.decisions()
                              if d["source"] in ("tuned", "file")}
            wall = lambda f: common.host_us(f, 10, 3, 3)["us"] / 1e3  # noqa: E731
            per = common.rotating({"plain": sp, "converted": sc, "twin": sp2}, wall, 9)
            row["steps"] = common.ratio_of(per["plain"], per["converted"])
            row["aa"] = common.ratio_of(per["plain"], per["twin"])
            log("  lm %-4s step x%.3f (quartiles %.3f-%.3f), A/A x%.3f (%.3f-%.3f); first step "
                "%.1f s; %s" % (mode, row["steps"]["ratio"], row["steps"]["ratio_q1"],
                                row["steps"]["ratio_q3"], row["aa"]["ratio"], row["aa"]["ratio_q1"],
                                row["aa"]["ratio_q3"], row["first_step_s"],
                                ", ".join(sorted(set(row["choices"].values())))))


def render(doc) -> str:
    import make_docs
    return "LSTM, %s\n\n%s" % (common.describe_run(doc), make_docs.lstm(doc))


def parse_args(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--configs", default="", help="comma-separated subset of " +
                    ",".join(CONFIGS))
    ap.add_argument("--modes", default="", help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--sections", default="layers,cell,host,lm",
                    help="comma-separated subset of layers, cell, host, lm (on CUDA)")
    ap.add_argument("--algorithm", default="fused", choices=("fused", "persistent"),
                    help="fastlayers.LSTM's pinned algorithm in the layer table (default fused)")
    args = ap.parse_args(argv)
    args.configs = [s for s in args.configs.split(",") if s]
    args.modes = [s for s in args.modes.split(",") if s]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    stats = {"errors": 0, "oom": 0}
    cuda = torch.cuda.is_available() and fastlayers.with_cuda
    doc = common.meta("lstm", args, quick=args.quick)
    res = common.Results(args.out, doc)
    ok = True
    if cuda:
        timer = common.CudaTimer(trials=5 if args.quick else 10)
        sections = args.sections.split(",")
        if "layers" in sections:
            ok &= common.section(doc, res, "layers", bench_layers, args, res, timer, stats)
        if "cell" in sections:
            ok &= common.section(doc, res, "cell", bench_cell, args, res, timer, stats)
        if "host" in sections:
            ok &= common.section(doc, res, "host", bench_host, args, res, stats)
        if "lm" in sections:
            ok &= common.section(doc, res, "lm", bench_lm, args, res, stats)
    else:
        CONFIGS["cpu-64x4x20"] = (64, 4, 20, 2, True, True)
        args.configs = args.configs or ["cpu-64x4x20"]
        args.modes = ["fp32"]
        ok &= common.section(doc, res, "layers", bench_layers, args, res, None, stats, "cpu")
    return common.finish(doc, res, ok, stats, t_start, render)


if __name__ == "__main__":
    raise SystemExit(main())
