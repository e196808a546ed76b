// What the Python module (csrc/module.cpp) reads of the FFT convolution, declared without ATen
// headers so that the module compiles quickly; defined in fft_conv_common.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fastlayers {
namespace fft_conv_host {

// PyTorch's effective TF32 switch for cuDNN convolution (legacy and new APIs both honoured).
bool conv_tf32_allowed();

// Workspace bytes of one pass (0 forward, 1 input grad, 2 weight grad) with the given transform
// backend ("cufft" or "fbfft"), cuFFT's work areas excluded (small next to the buffers, and asking
// needs a device). Tiled (th, tw > 0): the bytes of one chunk of tiles, tile copies included.
size_t python_workspace_bytes(int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W,
                              int64_t kh, int64_t kw, int64_t ph, int64_t pw, int64_t nh,
                              int64_t nw, int real_bytes, const std::string& backend, int64_t th,
                              int64_t tw);

}  // namespace fft_conv_host
}  // namespace fastlayers
