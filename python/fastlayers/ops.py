"""The op surface in Python: typed wrappers of torch.ops.fastlayers.*, imported from one place.

Each feature keeps its wrappers, fake kernels and autograd formulas in its own module
(fft_conv.py, winograd.py; fbfft.py for the transforms); this module re-exports the convolution
ops and the helpers around them.
"""
from . import fft_conv, winograd
from ._common import conv_tf32_allowed
from .fft_conv import (BACKENDS, FBFFT_MAX_BASIS, conv2d, default_basis, fft_conv2d,
                       fft_conv2d_input_grad, fft_conv2d_weight_grad, good_fft_size, next_pow2)
from .fft_conv import _basis_for  # noqa: F401  (tests)
from .winograd import (FORWARD_TILES, WEIGHT_GRAD_TILES, winograd_conv2d,
                       winograd_conv2d_input_grad, winograd_conv2d_weight_grad)

__all__ = fft_conv.__all__ + winograd.__all__ + ["conv_tf32_allowed"]
