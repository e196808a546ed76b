// The cuFFT pipeline of the FFT convolution (fft_conv.h): each operand zero-padded into the basis,
// cuFFT's R2C, a transpose to the GEMMs' frequency-major layout; the GEMMs; a transpose back,
// cuFFT's C2R, and one kernel that clips, scales, adds the bias and casts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "../common/check.h"
#include "../common/cufft_plans.h"
#include "../common/storage.h"
#include "pipeline.h"

namespace fastlayers {
namespace fft_conv {
namespace detail {
namespace {

// in [n, h, w] (T) -> out [n, nh, nw] (R), `in` placed at (offh, offw), zeros elsewhere.
// Grid: x over the elements of one basis plane, y over planes (strided); index arithmetic is done
// once per thread, not per element.
template <typename T, typename R>
__global__ void pad_kernel(const T* __restrict__ in, R* __restrict__ out, int64_t n, int h, int w,
                           int nh, int nw, int offh, int offw) {
  const int plane = nh * nw;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= plane) return;
  const int i = e / nw, j = e - (e / nw) * nw;
  const int si = i - offh, sj = j - offw;
  const bool inside = si >= 0 && si < h && sj >= 0 && sj < w;
  const int64_t src = inside ? static_cast<int64_t>(si) * w + sj : 0;
  const int64_t in_plane = static_cast<int64_t>(h) * w;
  for (int64_t b = blockIdx.y; b < n; b += gridDim.y)
    out[b * plane + e] = inside ? to_compute(in[b * in_plane + src]) : R(0);
}

// in [n, nh, nw] (R) -> out [n, oh, ow] (T): out = in[offh + i, offw + j] * scale + bias[n % ch]
template <typename R, typename T>
__global__ void clip_kernel(const R* __restrict__ in, T* __restrict__ out, int64_t n, int nh, int nw,
                            int offh, int offw, int oh, int ow, R scale, const T* __restrict__ bias,
                            int64_t channels) {
  const int plane = oh * ow;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= plane) return;
  const int i = e / ow, j = e - (e / ow) * ow;
  const int64_t src = static_cast<int64_t>(offh + i) * nw + offw + j;
  const int64_t in_plane = static_cast<int64_t>(nh) * nw;
  for (int64_t b = blockIdx.y; b < n; b += gridDim.y) {
    R v = in[b * in_plane + src] * scale;
    if (bias != nullptr) v += to_compute(bias[b % channels]);
    out[b * plane + e] = from_compute<T>(v);
  }
}

inline dim3 plane_grid(int64_t plane, int64_t n, int threads) {
  return dim3(static_cast<unsigned>((plane + threads - 1) / threads),
              static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(n, 65535))));
}

template <typename T, typename R>
void pad(const T* in, R* out, int64_t n, int64_t h, int64_t w, const Shape& s, int64_t offh,
         int64_t offw, cudaStream_t stream) {
  if (n == 0) return;
  pad_kernel<T, R><<<plane_grid(s.nh * s.nw, n, 256), 256, 0, stream>>>(
      in, out, n, static_cast<int>(h), static_cast<int>(w), static_cast<int>(s.nh),
      static_cast<int>(s.nw), static_cast<int>(offh), static_cast<int>(offw));
  FL_LAUNCH_CHECK();
}

template <typename R, typename T>
void clip(const R* in, T* out, int64_t n, const Shape& s, int64_t offh, int64_t offw, int64_t oh,
          int64_t ow, const T* bias, int64_t channels, cudaStream_t stream) {
  if (n == 0 || oh * ow == 0) return;
  const R scale = R(1) / static_cast<R>(s.nh * s.nw);
  clip_kernel<R, T><<<plane_grid(oh * ow, n, 256), 256, 0, stream>>>(
      in, out, n, static_cast<int>(s.nh), static_cast<int>(s.nw), static_cast<int>(offh),
      static_cast<int>(offw), static_cast<int>(oh), static_cast<int>(ow), scale, bias, channels);
  FL_LAUNCH_CHECK();
}

struct Layout : BufferLayout {
  size_t work_bytes, total;
};

// The buffers plus cuFFT's work area (the plans are created and cached here).
Layout layout_for(Pass pass, const Shape& s, int real_bytes) {
  Layout L{};
  static_cast<BufferLayout&>(L) = buffer_layout(pass, s, real_bytes);
  const Plan p = plan_for(pass, s);
  const int64_t na = p.a.n, nb = p.b.n, no = p.n_out;
  using cufft_plans::Transform;
  const bool dbl = real_bytes == 8;
  const Transform fwd = dbl ? Transform::R2C_F64 : Transform::R2C_F32;
  const Transform inv = dbl ? Transform::C2R_F64 : Transform::C2R_F32;
  L.work_bytes = std::max({na ? cufft_plans::work_bytes(fwd, s.nh, s.nw, na) : size_t{0},
                           nb ? cufft_plans::work_bytes(fwd, s.nh, s.nw, nb) : size_t{0},
                           no ? cufft_plans::work_bytes(inv, s.nh, s.nw, no) : size_t{0}});
  L.total = L.work + align_up(L.work_bytes);
  return L;
}

}  // namespace

template <typename T>
void run_cufft(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* ws,
               size_t ws_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
               const Options& options) {
  using R = compute_t<T>;
  using C = typename Complex<R>::type;
  const Plan p = plan_for(pass, s);
  if (p.n_out == 0 || p.oh * p.ow == 0) return;
  const Layout L = layout_for(pass, s, sizeof(R));
  if (ws_size < L.total)
    throw std::runtime_error("fastlayers: fft_conv workspace too small: " + std::to_string(ws_size) +
                             " < " + std::to_string(L.total));
  char* base = static_cast<char*>(ws);
  C* at = reinterpret_cast<C*>(base + L.at);
  C* bt = reinterpret_cast<C*>(base + L.bt);
  R* big_r = reinterpret_cast<R*>(base + L.big);
  C* big_c = reinterpret_cast<C*>(base + L.big);
  C* scratch = reinterpret_cast<C*>(base + L.scratch);
  void* work = base + L.work;
  const int64_t F = s.freqs();

  const int64_t M = p.n_out;  // [n_out] = product of the output's two leading dims
  if (p.a.n == 0 || p.b.n == 0) {
    // An empty reduction (S == 0 for the weight gradient, C == 0 or K == 0): zeros, plus bias.
    FL_CUDA_CHECK(cudaMemsetAsync(big_r, 0, sizeof(R) * M * s.nh * s.nw, stream));
  } else {
    // Operand a: pad, R2C, transpose to [F, n_a].
    pad<T, R>(a, big_r, p.a.n, p.a.h, p.a.w, s, p.a.offh, p.a.offw, stream);
    cufft_plans::rfft2(big_r, scratch, s.nh, s.nw, p.a.n, work, stream);
    transpose<C>(scratch, at, p.a.n, F, stream);
    // Operand b.
    pad<T, R>(b, big_r, p.b.n, p.b.h, p.b.w, s, p.b.offh, p.b.offw, stream);
    cufft_plans::rfft2(big_r, scratch, s.nh, s.nw, p.b.n, work, stream);
    transpose<C>(scratch, bt, p.b.n, F, stream);

    void** ptrs = reinterpret_cast<void**>(base + L.ptrs);
    spectral_gemm<R>(pass, s, at, bt, big_c, F, tf32, stream, blas,
                     skip_conjugates(options.conjugate_skip, s, Backend::CuFFT, tf32) ? ptrs
                                                                                     : nullptr);
    // [F, n_out] -> [n_out, F] -> C2R into `big`.
    transpose<C>(big_c, scratch, F, M, stream);
    cufft_plans::irfft2(scratch, big_r, s.nh, s.nw, M, work, stream);
  }
  clip<R, T>(big_r, out, M, s, p.offh, p.offw, p.oh, p.ow, bias, s.K, stream);
}

size_t cufft_workspace_bytes(Pass pass, const Shape& s, int real_bytes) {
  return layout_for(pass, s, real_bytes).total;
}

FL_FFT_CONV_PIPELINES(run_cufft)

}  // namespace detail
}  // namespace fft_conv
}  // namespace fastlayers
