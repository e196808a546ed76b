#include <torch/library.h>

#include "fbfft.h"

namespace fastlayers {
namespace fbfft_host {
namespace {

bool pow2_in(int64_t n, int64_t max) { return n >= 2 && n <= max && (n & (n - 1)) == 0; }

void check_size(const char* op, const char* name, int64_t n, int64_t max) {
  TORCH_CHECK(pow2_in(n, max), op, ": `", name, "` must be a power of two from 2 to ", max,
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

at::ScalarType real_compute(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// window(x)[..., i] = x[..., i + off] where in range, else 0, over the last off.size() dims.
at::Tensor window(const at::Tensor& x, at::IntArrayRef off, at::IntArrayRef n) {
  const int64_t d = static_cast<int64_t>(n.size());
  auto shape = x.sizes().vec();
  for (int64_t k = 0; k < d; ++k) shape[x.dim() - d + k] = n[k];
  auto out = at::zeros(shape, x.options());
  at::Tensor src = x, dst = out;
  for (int64_t k = 0; k < d; ++k) {
    const int64_t dim = x.dim() - d + k, len = x.size(dim);
    const int64_t lo = std::max<int64_t>(0, off[k]), hi = std::min<int64_t>(len, off[k] + n[k]);
    if (hi <= lo) return out;
    src = src.narrow(dim, lo, hi - lo);
    dst = dst.narrow(dim, lo - off[k], hi - lo);
  }
  dst.copy_(src);
  return out;
}

}  // namespace

at::Tensor fbfft_rfft_cpu(const at::Tensor& input, int64_t n, int64_t offset) {
  const char* op = "fbfft_rfft";
  check_real(op, input, 1);
  check_size(op, "n", n, kMax1d);
  auto x = window(input.to(real_compute(input)), {offset}, {n});
  return at::fft_rfft(x, n, -1).contiguous();
}

at::Tensor fbfft_irfft_cpu(const at::Tensor& input, int64_t n, int64_t out_size, int64_t offset,
                           bool normalized) {
  const char* op = "fbfft_irfft";
  check_complex(op, input, 1);
  check_size(op, "n", n, kMax1d);
  TORCH_CHECK(input.size(-1) == n / 2 + 1, op, ": `input` must have n/2+1 = ", n / 2 + 1,
              " bins in its last dimension, got ", input.size(-1));
  TORCH_CHECK(out_size >= 1, op, ": `out_size` must be >= 1, got ", out_size);
  auto y = at::fft_irfft(input, n, -1, normalized ? "backward" : "forward");
  return window(y, {offset}, {out_size}).contiguous();
}

at::Tensor fbfft_rfft2_cpu(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef offset,
                           bool transposed) {
  const char* op = "fbfft_rfft2";
  check_real(op, input, 2);
  TORCH_CHECK(size.size() == 2, op, ": `size` must have 2 values, got ", size);
  TORCH_CHECK(offset.size() == 2, op, ": `offset` must have 2 values, got ", offset);
  check_size(op, "size", size[0], kMax2d);
  check_size(op, "size", size[1], kMax2d);
  auto x = window(input.to(real_compute(input)), offset, size);
  auto X = at::fft_rfft2(x, std::nullopt, {-2, -1});
  return (transposed ? X.transpose(-1, -2) : X).contiguous();
}

at::Tensor fbfft_irfft2_cpu(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef out_size,
                            at::IntArrayRef offset, bool transposed, bool normalized) {
  const char* op = "fbfft_irfft2";
  check_complex(op, input, 2);
  TORCH_CHECK(size.size() == 2, op, ": `size` must have 2 values, got ", size);
  TORCH_CHECK(out_size.size() == 2, op, ": `out_size` must have 2 values, got ", out_size);
  TORCH_CHECK(offset.size() == 2, op, ": `offset` must have 2 values, got ", offset);
  check_size(op, "size", size[0], kMax2d);
  check_size(op, "size", size[1], kMax2d);
  TORCH_CHECK(out_size[0] >= 1 && out_size[1] >= 1, op, ": `out_size` must be >= 1, got ",
              out_size);
  const int64_t rows = transposed ? size[1] / 2 + 1 : size[0];
  const int64_t cols = transposed ? size[0] : size[1] / 2 + 1;
  TORCH_CHECK(input.size(-2) == rows && input.size(-1) == cols, op, ": `input` must end in [", rows,
              ", ", cols, "] for `size` ", size, (transposed ? " (transposed)" : ""), ", got ",
              input.sizes());
  auto X = transposed ? input.transpose(-1, -2) : input;
  auto y = at::fft_irfft2(X, size, {-2, -1}, normalized ? "backward" : "forward");
  return window(y, offset, out_size).contiguous();
}

TORCH_LIBRARY_IMPL(fastlayers, CPU, m) {
  m.impl("fbfft_rfft", &fbfft_rfft_cpu);
  m.impl("fbfft_irfft", &fbfft_irfft_cpu);
  m.impl("fbfft_rfft2", &fbfft_rfft2_cpu);
  m.impl("fbfft_irfft2", &fbfft_irfft2_cpu);
}

}  // namespace fbfft_host
}  // namespace fastlayers
