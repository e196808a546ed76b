"""fastlayers: faster convolution and LSTM layers for PyTorch, tuned per shape and per pass."""
import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C  # noqa: F401  (registers torch.ops.fastlayers.*)
from ._version import __version__
from . import algorithms, fbfft, lstm, ops, tuner, winograd
from .nn import Conv1d, Conv2d, cached_filter_transforms, convert
from .rnn import LSTM
from .tuning import tune

__all__ = ["Conv1d", "Conv2d", "LSTM", "cached_filter_transforms", "convert", "tune",
           "algorithms", "fbfft", "lstm", "ops", "tuner", "winograd", "with_cuda", "__version__"]

with_cuda = bool(getattr(_C, "with_cuda", False))
