"""``native``: PyTorch's own layer (cuDNN's convolution or RNN on CUDA), the baseline every other
candidate must beat. Its label has no parameters."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import Choice, Family


class Native(Family):
    names = ("native",)
    kinds = ("conv2d", "lstm")
    keeps_input_layout = True

    def parse(self, name, params, label):
        if label != "native":
            raise ValueError(f"unknown algorithm label {label!r} ('native' takes no parameters)")
        return ()

    def format(self, name, params):
        return "native"

    def candidates(self, problem, pass_):
        return (NATIVE,)

    def fits(self, choice, problem, pass_):
        return None  # every convolution of its kinds

    def conv2d_call(self, choice, pass_, padding, tf32):
        pad = list(padding)
        if pass_ == "forward":
            return lambda x, w, b, gy: F.conv2d(x, w, b, 1, pad)
        backward = torch.ops.aten.convolution_backward
        if pass_ == "input_grad":
            return lambda x, w, b, gy: backward(gy, x, w, None, [1, 1], pad, [1, 1], False, [0, 0],
                                                1, [True, False, False])[0]
        return lambda x, w, b, gy: backward(gy, x, w, None, [1, 1], pad, [1, 1], False, [0, 0],
                                            1, [False, True, False])[1]

    def conv2d_grads(self, igrad, wgrad, padding, tf32):
        # One convolution_backward for whichever gradients are needed.
        pad = list(padding)
        backward = torch.ops.aten.convolution_backward

        def grads(x, w, gy, need_x, need_w):
            if not (need_x or need_w):
                return None, None
            gx, gw, _ = backward(gy, x, w, None, [1, 1], pad, [1, 1], False, [0, 0], 1,
                                 [need_x, need_w, False])
            return gx, gw
        return grads

    def cpp_pass(self, choice, pass_):
        return (0, "", (0, 0), (0, 0))

    def describe(self, choice):
        return "PyTorch (native)"

    def deterministic(self, choice):
        return True  # PyTorch's path obeys torch.use_deterministic_algorithms itself


NATIVE = Choice("native", (), "native")
FAMILY = Native()
