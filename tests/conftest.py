import fcntl
import random
import time

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


_DEVICE_WAIT_S = 600


def _flock(f, how, what):
    """flock(f, how), waiting at most _DEVICE_WAIT_S: a GPU test that hangs holds its share for
    good, and the test waiting for the whole device would hold back every other GPU test."""
    deadline = time.monotonic() + _DEVICE_WAIT_S
    while True:
        try:
            fcntl.flock(f, how | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail("waited %d s for %s: a GPU test on another worker does not end"
                            % (_DEVICE_WAIT_S, what))
            time.sleep(0.02)


@pytest.fixture(autouse=True)
def device_share(request, tmp_path_factory):
    """GPU tests share the device, but one marked `device_alone` (it times the device against the
    host) runs with no other GPU test beside it: it waits for those running to end and holds new
    ones back until it ends. The workers of a parallel run (xdist) agree through two lock files in
    the run's common temporary folder: `device.lock`, shared by GPU tests and taken whole by a
    `device_alone` one, and `device.gate`, held by that one while it waits, so that a stream of
    shared takers cannot keep it out."""
    if request.node.get_closest_marker("gpu") is None or not torch.cuda.is_available():
        yield
        return
    root = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker
        root = root.parent  # the workers' folders lie side by side in the run's folder
    alone = request.node.get_closest_marker("device_alone") is not None
    with open(root / "device.gate", "a") as gate, open(root / "device.lock", "a") as lock:
        _flock(gate, fcntl.LOCK_EX, "the device's gate")
        if alone:
            _flock(lock, fcntl.LOCK_EX, "the device alone")
        else:
            _flock(lock, fcntl.LOCK_SH, "a share of the device")
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            try:
                if torch.cuda.is_initialized():
                    torch.cuda.synchronize()  # this test's queued device work ends with its share
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
                if alone:
                    fcntl.flock(gate, fcntl.LOCK_UN)


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
