#include "fbfft.h"

#include "../common/conv_checks.h"

namespace fastlayers {
namespace fbfft_host {
namespace {

void check_size(const char* op, const char* name, int64_t n, int64_t max) {
  TORCH_CHECK(fbfft::pow2_in(n, max), op, ": `", name, "` must be a power of two from 2 to ", max,
              ", got ", n);
}

void check_real(const char* op, const at::Tensor& t, int64_t dims) {
  const auto dt = t.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kDouble || dt == at::kHalf || dt == at::kBFloat16, op,
              ": `input` must be real (float32, float64, float16 or bfloat16), got ", dt);
  TORCH_CHECK(t.dim() >= dims, op, ": `input` must have at least ", dims, " dimensions, got ",
              t.dim());
}

void check_complex(const char* op, const at::Tensor& t, int64_t dims) {
  const auto dt = t.scalar_type();
  TORCH_CHECK(dt == at::kComplexFloat || dt == at::kComplexDouble, op,
              ": `input` must be complex64 or complex128, got ", dt);
  TORCH_CHECK(t.dim() >= dims, op, ": `input` must have at least ", dims, " dimensions, got ",
              t.dim());
}

// The transform size (`n` in 1-D, `size` in 2-D) and the window offset.
void check_sizes(const char* op, at::IntArrayRef size, at::IntArrayRef offset, int64_t dims) {
  const char* name = dims == 1 ? "n" : "size";
  TORCH_CHECK(static_cast<int64_t>(size.size()) == dims, op, ": `", name, "` must have ", dims,
              " values, got ", size);
  TORCH_CHECK(static_cast<int64_t>(offset.size()) == dims, op, ": `offset` must have ", dims,
              " values, got ", offset);
  for (int64_t n : size) check_size(op, name, n, dims == 1 ? fbfft::kMax1d : fbfft::kMax2d);
}

}  // namespace

void check_forward(const char* op, const at::Tensor& input, at::IntArrayRef size,
                   at::IntArrayRef offset, int64_t dims) {
  check_real(op, input, dims);
  check_sizes(op, size, offset, dims);
}

void check_inverse(const char* op, const at::Tensor& input, at::IntArrayRef size,
                   at::IntArrayRef out_size, at::IntArrayRef offset, bool transposed,
                   int64_t dims) {
  check_complex(op, input, dims);
  check_sizes(op, size, offset, dims);
  TORCH_CHECK(static_cast<int64_t>(out_size.size()) == dims, op, ": `out_size` must have ", dims,
              " values, got ", out_size);
  for (int64_t n : out_size) TORCH_CHECK(n >= 1, op, ": `out_size` must be >= 1, got ", out_size);
  // the result's rows are indexed with int, as a convolution's planes
  TORCH_CHECK(conv_plane_ok(out_size[0], dims == 2 ? out_size[1] : 1), op, ": `out_size` ",
              out_size, " is too large: at most ", kConvMaxPlane, " elements per transform");
  if (dims == 1) {
    TORCH_CHECK(input.size(-1) == size[0] / 2 + 1, op, ": `input` must have n/2+1 = ",
                size[0] / 2 + 1, " bins in its last dimension, got ", input.size(-1));
  } else {
    const int64_t rows = transposed ? size[1] / 2 + 1 : size[0];
    const int64_t cols = transposed ? size[0] : size[1] / 2 + 1;
    TORCH_CHECK(input.size(-2) == rows && input.size(-1) == cols, op, ": `input` must end in [",
                rows, ", ", cols, "] for `size` ", size, (transposed ? " (transposed)" : ""),
                ", got ", input.sizes());
  }
}

void register_ops(torch::Library& m, const Kernels& kernels) {
  m.impl("fbfft_rfft", kernels.rfft);
  m.impl("fbfft_irfft", kernels.irfft);
  m.impl("fbfft_rfft2", kernels.rfft2);
  m.impl("fbfft_irfft2", kernels.irfft2);
}

#ifndef FASTLAYERS_WITH_CUDA
// Builds without CUDA: the CUDA kernels' entries exist for the test hooks and say so.
namespace {
[[noreturn]] void no_cuda(const char* op) {
  TORCH_CHECK(false, op, ": fastlayers was built without CUDA");
}
}  // namespace
at::Tensor fbfft_rfft_cuda(const at::Tensor&, int64_t, int64_t, int) { no_cuda("fbfft_rfft"); }
at::Tensor fbfft_irfft_cuda(const at::Tensor&, int64_t, int64_t, int64_t, bool, int) {
  no_cuda("fbfft_irfft");
}
at::Tensor fbfft_rfft2_cuda(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, bool, int) {
  no_cuda("fbfft_rfft2");
}
at::Tensor fbfft_irfft2_cuda(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef,
                             bool, bool, int) {
  no_cuda("fbfft_irfft2");
}
#endif

}  // namespace fbfft_host
}  // namespace fastlayers
