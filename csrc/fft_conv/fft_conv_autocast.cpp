// Autocast for the three FFT-convolution passes: they run in the autocast dtype, as nn.Conv2d
// does (csrc/common/autocast.h).
#include <torch/library.h>

#include "../common/autocast.h"

namespace {

void register_passes(torch::Library& m, c10::DeviceType device) {
  fastlayers::register_autocast(m, device,
                                {"fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad"});
}

}  // namespace

TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) { register_passes(m, c10::DeviceType::CUDA); }
TORCH_LIBRARY_IMPL(fastlayers, AutocastCPU, m) { register_passes(m, c10::DeviceType::CPU); }
