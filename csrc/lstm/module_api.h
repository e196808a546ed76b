// What the Python module (csrc/module.cpp) reads of the LSTM, declared without ATen headers;
// defined in lstm_common.cpp.
#pragma once

namespace fastlayers {
namespace lstm_host {

// PyTorch's effective TF32 switch for cuDNN's RNNs (torch.backends.cudnn.allow_tf32, or
// torch.backends.cudnn.rnn.fp32_precision): the one nn.LSTM's cuDNN path obeys.
bool rnn_tf32_allowed();

}  // namespace lstm_host
}  // namespace fastlayers
