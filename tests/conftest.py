import random

import pytest
import torch

import fastlayers


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="CUDA device not available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    """Each test body is written once and runs on every device; CUDA cases are marked `gpu`."""
    return request.param


@pytest.fixture(autouse=True)
def seed():
    random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def tuner_cache(tmp_path, monkeypatch):
    """Every test gets its own, empty tuner cache folder and a tuner in its default state."""
    state = fastlayers.tuner._state
    cache_dir = tmp_path / "fastlayers-cache"
    monkeypatch.setenv("FASTLAYERS_CACHE_DIR", str(cache_dir))
    for name in ("mode", "budget_s", "workspace_limit", "tune_cpu", "transforms"):
        monkeypatch.setattr(state, name, getattr(state, name))
    state.mode = "tune"
    state.tune_cpu = False
    state.transforms = True
    state.workspace_limit = None
    fastlayers.tuner.clear()
    yield cache_dir
    fastlayers.tuner.clear()
