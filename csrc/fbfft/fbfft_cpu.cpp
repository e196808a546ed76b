#include <torch/library.h>

#include <vector>

#include "fbfft.h"

namespace fastlayers {
namespace fbfft_host {
namespace {

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

// An empty batch: the result's shape (the leading dimensions, then `tail`) with nothing to
// compute (pocketfft refuses a batch of none).
bool empty_batch(const at::Tensor& t, int64_t dims) {
  for (int64_t d = 0; d < t.dim() - dims; ++d)
    if (t.size(d) == 0) return true;
  return false;
}

at::Tensor empty_result(const at::Tensor& t, int64_t dims, std::vector<int64_t> tail,
                        at::ScalarType type) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end() - dims);
  shape.insert(shape.end(), tail.begin(), tail.end());
  return at::empty(shape, t.options().dtype(type));
}

}  // namespace

at::Tensor fbfft_rfft_cpu(const at::Tensor& input, int64_t n, int64_t offset) {
  check_forward("fbfft_rfft", input, {n}, {offset}, 1);
  if (empty_batch(input, 1))
    return empty_result(input, 1, {n / 2 + 1}, c10::toComplexType(real_compute(input)));
  auto x = window(input.to(real_compute(input)), {offset}, {n});
  return at::fft_rfft(x, n, -1).contiguous();
}

at::Tensor fbfft_irfft_cpu(const at::Tensor& input, int64_t n, int64_t out_size, int64_t offset,
                           bool normalized) {
  check_inverse("fbfft_irfft", input, {n}, {out_size}, {offset}, false, 1);
  if (empty_batch(input, 1))
    return empty_result(input, 1, {out_size}, c10::toRealValueType(input.scalar_type()));
  auto y = at::fft_irfft(input, n, -1, normalized ? "backward" : "forward");
  return window(y, {offset}, {out_size}).contiguous();
}

at::Tensor fbfft_rfft2_cpu(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef offset,
                           bool transposed) {
  check_forward("fbfft_rfft2", input, size, offset, 2);
  if (empty_batch(input, 2)) {
    const int64_t bins = size[1] / 2 + 1;
    return empty_result(input, 2, transposed ? std::vector<int64_t>{bins, size[0]}
                                             : std::vector<int64_t>{size[0], bins},
                        c10::toComplexType(real_compute(input)));
  }
  auto x = window(input.to(real_compute(input)), offset, size);
  auto X = at::fft_rfft2(x, std::nullopt, {-2, -1});
  return (transposed ? X.transpose(-1, -2) : X).contiguous();
}

at::Tensor fbfft_irfft2_cpu(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef out_size,
                            at::IntArrayRef offset, bool transposed, bool normalized) {
  check_inverse("fbfft_irfft2", input, size, out_size, offset, transposed, 2);
  if (empty_batch(input, 2))
    return empty_result(input, 2, {out_size[0], out_size[1]},
                        c10::toRealValueType(input.scalar_type()));
  auto X = transposed ? input.transpose(-1, -2) : input;
  auto y = at::fft_irfft2(X, size, {-2, -1}, normalized ? "backward" : "forward");
  return window(y, offset, out_size).contiguous();
}

TORCH_LIBRARY_IMPL(fastlayers, CPU, m) {
  register_ops(m, {&fbfft_rfft_cpu, &fbfft_irfft_cpu, &fbfft_rfft2_cpu, &fbfft_irfft2_cpu});
}

}  // namespace fbfft_host
}  // namespace fastlayers
