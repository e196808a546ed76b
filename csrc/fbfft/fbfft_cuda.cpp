// CUDA host glue of the fbfft transforms: checks (shared with the CPU kernels), contiguity,
// current stream; the transforms compute in float32.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../../cuda/common/cufft_plans.h"
#include "../../cuda/fbfft/fbfft.h"
#include "fbfft.h"

namespace fastlayers {
namespace fbfft_host {
namespace {

void check_float32(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() != at::kDouble && t.scalar_type() != at::kComplexDouble, op,
              ": `input` is ", t.scalar_type(), "; on CUDA fbfft computes in float32 (float64 "
              "transforms run on CPU tensors)");
}

std::vector<int64_t> lead(const at::Tensor& t, int64_t dims) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end() - dims);
}

Real real_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return Real::F16;
    case at::kBFloat16: return Real::BF16;
    default: return Real::F32;
  }
}

int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  return n;
}

// What both directions start from: the checked, contiguous input, its leading dimensions (all but
// the last `dims`) and their product, and the transform's options.
struct Batch {
  at::Tensor t;
  std::vector<int64_t> shape;
  int64_t count;
  fbfft::Options options;
};

Batch prepare(const char* op, const at::Tensor& input, int64_t dims, int direct_io) {
  check_float32(op, input);
  TORCH_CHECK(direct_io >= 0 && direct_io <= 2, op, ": `direct_io` must be 0, 1 or 2, got ",
              direct_io);
  Batch b{input.contiguous(), {}, 0, {}};
  b.shape = lead(b.t, dims);
  b.count = count(b.shape);
  b.options.direct_io = static_cast<fbfft::DirectIo>(direct_io);
  return b;
}

// input [..., h, w] (dims = 2) or [..., w] (dims = 1, one row) -> spectrum.
at::Tensor forward(const char* op, const at::Tensor& input, int64_t nh, int64_t nw, int64_t oy,
                   int64_t ox, bool transposed, int64_t dims, int direct_io) {
  c10::cuda::CUDAGuard guard(input.device());
  Batch in = prepare(op, input, dims, direct_io);
  const at::Tensor& x = in.t;
  auto& shape = in.shape;
  const int64_t h = dims == 2 ? x.size(-2) : 1, w = x.size(-1);
  if (dims == 2) {
    shape.push_back(transposed ? nw / 2 + 1 : nh);
    shape.push_back(transposed ? nh : nw / 2 + 1);
  } else {
    shape.push_back(nw / 2 + 1);
  }
  auto out = at::empty(shape, x.options().dtype(at::kComplexFloat));
  if (out.numel() == 0) return out;
  auto* dst = reinterpret_cast<float2*>(out.mutable_data_ptr<c10::complex<float>>());
  const int ih = static_cast<int>(nh), iw = static_cast<int>(nw);
  fbfft::rfft2(x.const_data_ptr(), real_type(x.scalar_type()), dst,
               transposed ? fbfft::transposed(ih, iw) : fbfft::row_major(ih, iw), in.count,
               static_cast<int>(h), static_cast<int>(w), ih, iw, static_cast<int>(oy),
               static_cast<int>(ox), at::cuda::getCurrentCUDAStream(), in.options);
  return out;
}

at::Tensor inverse(const char* op, const at::Tensor& input, int64_t nh, int64_t nw, int64_t out_h,
                   int64_t out_w, int64_t oy, int64_t ox, bool transposed, bool normalized,
                   int64_t dims, int direct_io) {
  c10::cuda::CUDAGuard guard(input.device());
  Batch in = prepare(op, input, dims, direct_io);
  const at::Tensor& X = in.t;
  auto& shape = in.shape;
  if (dims == 2) shape.push_back(out_h);
  shape.push_back(out_w);
  auto out = at::empty(shape, X.options().dtype(at::kFloat));
  if (out.numel() == 0) return out;
  const float scale = normalized ? 1.f / static_cast<float>(nh * nw) : 1.f;
  const int ih = static_cast<int>(nh), iw = static_cast<int>(nw);
  fbfft::irfft2(reinterpret_cast<const float2*>(X.const_data_ptr<c10::complex<float>>()),
                transposed ? fbfft::transposed(ih, iw) : fbfft::row_major(ih, iw),
                out.mutable_data_ptr<float>(), Real::F32, in.count, ih, iw,
                static_cast<int>(out_h), static_cast<int>(out_w), static_cast<int>(oy),
                static_cast<int>(ox), scale, nullptr, 1, at::cuda::getCurrentCUDAStream(), false,
                in.options);
  return out;
}

// Benchmark reference: cuFFT called directly (one cufftExec on a cached plan, no framework around
// it). `x` [B, n] (nh = 1: 1-D) or [B, nh, nw], float32, CUDA.
void check_direct(const char* op, const char* arg, const at::Tensor& t, at::ScalarType type,
                  int64_t nh, int64_t nw, int64_t last) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == type, op, ": `", arg, "` must be a CUDA ", type,
              " tensor, got ", t.scalar_type(), " on ", t.device());
  TORCH_CHECK(nh >= 1 && nw >= 2, op, ": `nh` must be >= 1 and `nw` >= 2, got ", nh, " and ",
              nw);
  TORCH_CHECK(t.dim() == (nh == 1 ? 2 : 3) && t.size(-1) == last &&
                  (nh == 1 || t.size(1) == nh) && t.size(0) >= 1,
              op, ": `", arg, "` must be [B, ", nh == 1 ? "" : std::to_string(nh) + ", ", last,
              "] for this size, got ", t.sizes());
  TORCH_CHECK(t.is_contiguous(), op, ": `", arg, "` must be contiguous");
}

at::Tensor work_area(cufft_plans::Transform t, int64_t nh, int64_t nw, int64_t batch,
                     const at::Tensor& like) {
  const size_t bytes = cufft_plans::work_bytes(t, nh, nw, batch);
  return at::empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, like.options().dtype(at::kByte));
}

// The ops' kernels: the measured spectrum movement.
constexpr int kMeasured = static_cast<int>(fbfft::DirectIo::Measured);

at::Tensor rfft_op(const at::Tensor& input, int64_t n, int64_t offset) {
  return fbfft_rfft_cuda(input, n, offset, kMeasured);
}
at::Tensor irfft_op(const at::Tensor& input, int64_t n, int64_t out_size, int64_t offset,
                    bool normalized) {
  return fbfft_irfft_cuda(input, n, out_size, offset, normalized, kMeasured);
}
at::Tensor rfft2_op(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef offset,
                    bool transposed) {
  return fbfft_rfft2_cuda(input, size, offset, transposed, kMeasured);
}
at::Tensor irfft2_op(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef out_size,
                     at::IntArrayRef offset, bool transposed, bool normalized) {
  return fbfft_irfft2_cuda(input, size, out_size, offset, transposed, normalized, kMeasured);
}

}  // namespace

at::Tensor fbfft_rfft_cuda(const at::Tensor& input, int64_t n, int64_t offset, int direct_io) {
  check_forward("fbfft_rfft", input, {n}, {offset}, 1);
  return forward("fbfft_rfft", input, 1, n, 0, offset, false, 1, direct_io);
}

at::Tensor fbfft_irfft_cuda(const at::Tensor& input, int64_t n, int64_t out_size, int64_t offset,
                            bool normalized, int direct_io) {
  check_inverse("fbfft_irfft", input, {n}, {out_size}, {offset}, false, 1);
  return inverse("fbfft_irfft", input, 1, n, 1, out_size, 0, offset, false, normalized, 1,
                 direct_io);
}

at::Tensor fbfft_rfft2_cuda(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef offset,
                            bool transposed, int direct_io) {
  check_forward("fbfft_rfft2", input, size, offset, 2);
  return forward("fbfft_rfft2", input, size[0], size[1], offset[0], offset[1], transposed, 2,
                 direct_io);
}

at::Tensor fbfft_irfft2_cuda(const at::Tensor& input, at::IntArrayRef size,
                             at::IntArrayRef out_size, at::IntArrayRef offset, bool transposed,
                             bool normalized, int direct_io) {
  check_inverse("fbfft_irfft2", input, size, out_size, offset, transposed, 2);
  return inverse("fbfft_irfft2", input, size[0], size[1], out_size[0], out_size[1], offset[0],
                 offset[1], transposed, normalized, 2, direct_io);
}

at::Tensor cufft_direct_rfft2(const at::Tensor& x, int64_t nh, int64_t nw) {
  check_direct("cufft_direct_rfft2", "x", x, at::kFloat, nh, nw, nw);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t batch = x.size(0);
  auto shape = x.sizes().vec();
  shape.back() = nw / 2 + 1;
  auto out = at::empty(shape, x.options().dtype(at::kComplexFloat));
  auto work = work_area(cufft_plans::Transform::R2C_F32, nh, nw, batch, x);
  cufft_plans::rfft2(x.const_data_ptr<float>(),
                     reinterpret_cast<float2*>(out.mutable_data_ptr<c10::complex<float>>()), nh,
                     nw, batch, work.mutable_data_ptr(), at::cuda::getCurrentCUDAStream());
  return out;
}

at::Tensor cufft_direct_irfft2_(const at::Tensor& spectrum, int64_t nh, int64_t nw) {
  check_direct("cufft_direct_irfft2_", "spectrum", spectrum, at::kComplexFloat, nh, nw,
               nw / 2 + 1);
  c10::cuda::CUDAGuard guard(spectrum.device());
  const int64_t batch = spectrum.size(0);
  auto shape = spectrum.sizes().vec();
  shape.back() = nw;
  auto out = at::empty(shape, spectrum.options().dtype(at::kFloat));
  auto work = work_area(cufft_plans::Transform::C2R_F32, nh, nw, batch, spectrum);
  cufft_plans::irfft2(
      reinterpret_cast<float2*>(spectrum.mutable_data_ptr<c10::complex<float>>()),
      out.mutable_data_ptr<float>(), nh, nw, batch, work.mutable_data_ptr(),
      at::cuda::getCurrentCUDAStream());
  return out;
}

TORCH_LIBRARY_IMPL(fastlayers, CUDA, m) {
  register_ops(m, {&rfft_op, &irfft_op, &rfft2_op, &irfft2_op});
}

}  // namespace fbfft_host
}  // namespace fastlayers
