"""scripts/ddp_check.py: a converted model under DistributedDataParallel trains as the plain one,
its ranks sharing one tuner cache file. Two CPU processes (gloo) here; two GPUs (NCCL) on CUDA."""
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ddp_check.py"), *args],
                          env=env, capture_output=True, text=True, timeout=600)


def test_ddp_on_cpu_matches_plain(tmp_path):
    r = run("--device", "cpu", "--steps", "3", "--cache", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ddp_check: PASS" in r.stdout and r.stdout.count(": ok ") == 2


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_ddp_on_two_gpus_matches_plain(tmp_path):
    r = run("--device", "cuda", "--steps", "20", "--cache", str(tmp_path))
    print(r.stdout)  # the ranks' figures, shown by pytest -rP
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ddp_check: PASS" in r.stdout and r.stdout.count(": ok ") == 2
