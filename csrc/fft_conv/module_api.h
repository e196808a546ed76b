// What the Python module (csrc/module.cpp) reads of the FFT convolution, declared without ATen
// headers so that the module compiles quickly; defined in fft_conv_common.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fastlayers {
namespace fft_conv_host {

// Size bounds of the FFT-convolution ops, checked before anything is computed or allocated
// (check() in fft_conv_common.cpp; the Python wrappers before they derive a default basis):
// - kMaxPlane elements per plane: the basis nh x nw, each operand's spatial plane and the padded
//   input (H + 2 ph) x (W + 2 pw), which holds every result plane. The CUDA pad and clip kernels
//   index a plane with 32-bit ints, and cuBLAS takes the frequency count (at most a basis plane)
//   as its int batch count.
// - kMaxSpectrum values in the spectra of one pass (its largest batch of planes, over every sample
//   and tile, times nh x nw): the workspace adds a few buffers of up to 16 bytes a value in 64-bit
//   byte counts; below 2^54 values that sum cannot overflow (and no device holds that much).
constexpr int64_t kMaxPlane = 2147483647;  // INT32_MAX
constexpr int64_t kMaxSpectrum = int64_t{1} << 54;

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
