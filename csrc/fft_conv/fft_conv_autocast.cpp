// Autocast for the three FFT-convolution passes: they run in the autocast dtype, as nn.Conv2d
// does (csrc/common/autocast.h).
#include "../common/autocast.h"

namespace {

template <c10::DeviceType D>
void register_passes(torch::Library& m) {
  fastlayers::register_autocast<D>(
      m, {"fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad"});
}

}  // namespace

TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) { register_passes<c10::DeviceType::CUDA>(m); }
TORCH_LIBRARY_IMPL(fastlayers, AutocastCPU, m) { register_passes<c10::DeviceType::CPU>(m); }
