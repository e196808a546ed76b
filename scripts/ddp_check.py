#!/usr/bin/env python3
"""A converted model under DistributedDataParallel trains like the plain one.

    python3 scripts/ddp_check.py [--device cuda|cpu] [--world 2] [--steps 20] [--cache DIR]

Starts `world` processes (one GPU each with NCCL on CUDA; gloo on CPU, with the tuner measuring CPU
tensors). Every rank builds the same small CNN twice, plain and through fastlayers.convert (its 3x3
layer pinned to Winograd, the fused kernel on CUDA, so that fastlayers' kernels run whatever the
tuner picks for the others), wraps each in DDP and trains both for `steps` SGD steps on its own
shard of the same data. The ranks share one tuner cache file (every rank tunes the shapes it meets,
or reads what another wrote: the file is written under a lock). Checks, on every rank: the converted
model's losses match the plain model's step by step (relative difference at most --tol, default 1e-3
with TF32 off), its parameters stay identical across ranks, the pinned layer's three passes ran on
fastlayers' kernels, and the cache file is valid JSON with entries. Exits 0 when all hold; prints
one line per rank.
"""
from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import sys
import tempfile

# NVLink multicast stays off on shared hosts (device/KINDS.md).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isdir(os.path.join(ROOT, "python", "fastlayers")):
    sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402


def model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 5, padding=2), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 8, 7, padding=3), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def worker(rank, args, port, results):
    os.environ["FASTLAYERS_CACHE_DIR"] = args.cache
    if args.device == "cpu":
        os.environ["FASTLAYERS_TUNE_CPU"] = "1"
    import fastlayers
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=args.world)
    try:
        if cuda:
            torch.cuda.set_device(rank)
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
        fastlayers.tuner.set_budget(0.2)
        torch.manual_seed(0)
        plain = model().to(dev)
        conv = fastlayers.convert(copy.deepcopy(plain))
        conv[2].force_algorithms(*(["winograd:2,fused" if cuda else "winograd:2"] * 3))
        ddp = {"plain": DDP(plain, device_ids=[rank] if cuda else None),
               "converted": DDP(conv, device_ids=[rank] if cuda else None)}
        opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for k, m in ddp.items()}
        gen = torch.Generator().manual_seed(1234)
        losses = {"plain": [], "converted": []}
        for _ in range(args.steps):
            x = torch.randn(args.world * 8, 3, 24, 24, generator=gen)
            y = torch.randint(0, 10, (args.world * 8,), generator=gen)
            xs, ys = x[rank::args.world].to(dev), y[rank::args.world].to(dev)
            for k, m in ddp.items():
                opts[k].zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(m(xs), ys)
                loss.backward()
                opts[k].step()
                losses[k].append(loss.item())
        worst = max(abs(a - b) / max(abs(a), 1e-12)
                    for a, b in zip(losses["plain"], losses["converted"]))
        # parameters identical across ranks (DDP's all-reduce keeps them so)
        flat = torch.cat([p.detach().reshape(-1) for p in conv.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(args.world)]
        dist.all_gather(gathered, flat)
        same = all(torch.equal(g, gathered[0]) for g in gathered)
        # tuned passes on fastlayers, and the pinned layer's passes, each recorded once as it ran
        # (a pinned layer that fell back to PyTorch's path records none)
        on = collections.Counter(d["source"] for d in fastlayers.tuner.decisions()
                                 if d["choice"] != "native")
        on_fastlayers, pinned = on["tuned"] + on["file"], on["forced"]
        results[rank] = {"worst_rel_loss_diff": worst, "params_equal_across_ranks": same,
                         "passes_on_fastlayers": on_fastlayers, "pinned_passes_run": pinned,
                         "final_loss": (losses["plain"][-1], losses["converted"][-1])}
    finally:
        dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    choices=("cuda", "cpu"))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--cache", default=None, help="tuner cache folder (default: a new temporary one)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and torch.cuda.device_count() < args.world:
        print("ddp_check: %d CUDA devices, %d needed" % (torch.cuda.device_count(), args.world))
        return 2
    args.cache = args.cache or tempfile.mkdtemp(prefix="fastlayers-ddp-")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(worker, args=(args, port, results), nprocs=args.world, join=True)
    ok = len(results) == args.world
    for rank in range(args.world):
        r = results.get(rank)
        good = (r is not None and r["worst_rel_loss_diff"] <= args.tol
                and r["params_equal_across_ranks"] and r["pinned_passes_run"] == 3)
        ok &= good
        print("rank %d: %s %s" % (rank, "ok" if good else "FAILED", r))
    import fastlayers
    path = os.path.join(args.cache, "tuner-v%d.json" % fastlayers.tuner.FORMAT)
    try:
        with open(path) as f:
            entries = json.load(f)["entries"]
        print("cache %s: %d entries" % (path, len(entries)))
        ok &= len(entries) > 0
    except (OSError, ValueError, KeyError) as e:
        print("cache %s: unreadable (%s)" % (path, e))
        ok = False
    print("ddp_check: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
