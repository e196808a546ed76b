// What the Python module (csrc/module.cpp) reads of the LSTM, declared without ATen headers;
// defined in lstm_common.cpp.
#pragma once

#include <cstdint>

namespace fastlayers {
namespace lstm_host {

// PyTorch's effective TF32 switch for cuDNN's RNNs (torch.backends.cudnn.allow_tf32, or
// torch.backends.cudnn.rnn.fp32_precision): the one nn.LSTM's cuDNN path obeys.
bool rnn_tf32_allowed();

#ifdef FASTLAYERS_WITH_CUDA
// Whether lstm_persistent serves `batch` sequences of hidden size `hidden` with elements of
// `element_size` bytes (4: float32; 2: float16, bfloat16) on CUDA device `device`.
bool persistent_fits(int64_t batch, int64_t hidden, int64_t element_size, int64_t device);
#endif

}  // namespace lstm_host
}  // namespace fastlayers
