// Host side of FFT convolution: argument checks and geometry shared by the CPU and CUDA kernels.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "../../cuda/fft_conv/layout.h"

namespace fastlayers {
namespace fft_conv_host {

enum class Pass : int { Forward = 0, InputGrad = 1, WeightGrad = 2 };
using Backend = fft_conv::Backend;

struct Geometry {
  int64_t S, C, K, H, W, kh, kw, ph, pw, nh, nw;
  Backend backend = Backend::CuFFT;
  int64_t oh() const { return H + 2 * ph - kh + 1; }
  int64_t ow() const { return W + 2 * pw - kw + 1; }
  fft_conv::Shape shape() const { return {S, C, K, H, W, kh, kw, ph, pw, nh, nw}; }
};

// "cufft" -> CuFFT, "fbfft" -> FbFFT; anything else is an error naming `backend` (op: for the
// message).
Backend parse_backend(const char* op, c10::string_view backend);

// Checks the arguments of one pass and derives the geometry. `a`, `b` are the pass's two tensor
// arguments in schema order: (input, weight), (grad_output, weight), (grad_output, input).
Geometry check(Pass pass, const at::Tensor& a, const at::Tensor& b,
               const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
               at::IntArrayRef basis, c10::string_view backend);

// The output's shape: [S, K, oh, ow], [S, C, H, W] or [K, C, kh, kw].
std::vector<int64_t> output_shape(Pass pass, const Geometry& g);

// --- CPU kernels (fft_conv_cpu.cpp) ------------------------------------------------------------

at::Tensor fft_conv2d_cpu(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
                          at::IntArrayRef basis, bool tf32, c10::string_view backend);
at::Tensor fft_conv2d_input_grad_cpu(const at::Tensor& grad_output, const at::Tensor& weight,
                                     at::IntArrayRef padding, at::IntArrayRef basis, bool tf32,
                                     c10::string_view backend);
at::Tensor fft_conv2d_weight_grad_cpu(const at::Tensor& grad_output, const at::Tensor& input,
                                      at::IntArrayRef padding, at::IntArrayRef basis, bool tf32,
                                      c10::string_view backend);

}  // namespace fft_conv_host
}  // namespace fastlayers
