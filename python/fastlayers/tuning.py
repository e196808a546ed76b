"""fastlayers.tune(model, *example_inputs): every fastlayers layer of a model tuned ahead of
training, from one forward and backward on example inputs, with a progress bar."""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from . import tuner

__all__ = ["tune"]


def _tensors(out) -> Iterator[torch.Tensor]:
    """The tensors in a model's output (a tensor, or sequences and dicts of them)."""
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for v in out.values():
            yield from _tensors(v)
    elif isinstance(out, (list, tuple)):
        for v in out:
            yield from _tensors(v)


@contextlib.contextmanager
def _buffers_kept(model: nn.Module):
    """Batch-norm statistics and other buffers as they were before (tuning is not training)."""
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in saved:
                    b.copy_(saved[name])


def _bar(total: int, enabled: bool):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is a dependency; a tree without it still tunes, silently
        return None
    return tqdm(total=total, desc="fastlayers.tune", unit="pass", disable=not enabled)


def tune(model: nn.Module, *example_inputs, progress: bool = True, **example_kwargs) -> str:
    """Tunes every fastlayers layer of `model` for the shapes, dtypes and devices of the example
    inputs: one forward and, where parameters or inputs need gradients, one backward, in the
    tuner's 'tune' mode whatever its current mode; every decision is written to the cache file
    (a later run of the same shapes reads it). A progress bar (tqdm) counts the passes decided:
    three per convolution, one per LSTM (its forward, or forward and backward together).

    The model is left as it was: parameters' .grad untouched (gradients are computed, not
    accumulated), buffers such as batch-norm statistics restored, and the random generators of
    the CPU and of the devices the model's parameters are on as they were (the model's dropout
    draws nothing a seeded run would see). Autocast, if wanted, is the caller's context. Returns
    ``tuner.report()`` as it stood after tuning.
    """
    from .nn import tuned_layers
    from .rnn import LSTM
    layers = tuned_layers(model)
    bar = _bar(sum(1 if isinstance(m, LSTM) else 3 for m in layers), progress)

    def seen(problem, pass_, decision):
        if bar is not None:
            bar.set_postfix_str("%s %s: %s" % (problem.describe(), pass_, decision.choice),
                                refresh=False)
            bar.update(1)

    old_mode = tuner.get_mode()
    try:
        cuda = sorted({t.device.index or 0 for t in _tensors(
            (list(model.parameters()), example_inputs, example_kwargs)) if t.is_cuda})
        with _buffers_kept(model), tuner.observing(seen), \
                torch.random.fork_rng(devices=cuda, device_type="cuda"):
            if old_mode != "tune":
                tuner.set_mode("tune")
            # a new generation: every layer asks the tuner again (decided shapes from memory),
            # so that the bar counts each pass and the report holds each layer
            tuner.new_generation()
            out = model(*example_inputs, **example_kwargs)
            leaves = [t for t in _tensors((example_inputs, example_kwargs))
                      if t.requires_grad and t.is_leaf]
            wrt = [p for p in model.parameters() if p.requires_grad] + leaves
            outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
            if wrt and outs:
                loss = sum(t.float().sum() for t in outs)
                torch.autograd.grad(loss, wrt, allow_unused=True)
        text = tuner.report()  # before the mode goes back: a switch of mode forgets decisions
    finally:
        if tuner.get_mode() != old_mode:
            tuner.set_mode(old_mode)
        if bar is not None:
            # the passes decided: layers that fall back, or run without backward, have none
            bar.total = bar.n
            bar.close()
    return text
