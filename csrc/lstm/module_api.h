// What the Python module (csrc/module.cpp) reads of the LSTM, declared without ATen headers;
// defined in lstm_common.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

namespace fastlayers {
namespace lstm_host {

// PyTorch's effective TF32 switch for cuDNN's RNNs (torch.backends.cudnn.allow_tf32, or
// torch.backends.cudnn.rnn.fp32_precision): the one nn.LSTM's cuDNN path obeys.
bool rnn_tf32_allowed();

#ifdef FASTLAYERS_WITH_CUDA
// Whether lstm_persistent (`backward`: and lstm_backward_persistent) serves `batch` sequences of
// hidden size `hidden` in `dtype` ("float32", "float16", "bfloat16"; anything else: no) on CUDA
// device `device`.
bool persistent_fits(int64_t batch, int64_t hidden, const std::string& dtype, int64_t device,
                     bool backward);
// The kernel lstm_persistent's forward (`backward`: lstm_backward_persistent) runs there:
// "cluster", "grid-registers", "grid", or "" where none fits.
std::string persistent_kernel(int64_t batch, int64_t hidden, const std::string& dtype,
                              int64_t device, bool backward);
// The cluster kernels' plan there: (clusters, n-tiles of 8 batch rows a cluster), (0, 0) where
// they do not serve (what the tuner's accuracy check and the tests compare).
std::tuple<int, int> persistent_clusters(int64_t batch, int64_t hidden, const std::string& dtype,
                                         int64_t device, bool backward);
#endif

}  // namespace lstm_host
}  // namespace fastlayers
