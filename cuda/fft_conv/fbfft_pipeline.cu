// The fbfft pipeline of the FFT convolution (fft_conv.h): rfft2 of each operand through a window
// straight into the layout of the products, the products (GEMMs, or one kernel for few input
// channels), one irfft2 that clips, scales, adds the bias and casts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "../common/check.h"
#include "../common/storage.h"
#include "../fbfft/fbfft.h"
#include "pipeline.h"

namespace fastlayers {
namespace fft_conv {
namespace detail {

template <typename T>
void run_fbfft(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* ws,
               size_t ws_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
               const Options& options) {
  if constexpr (std::is_same_v<T, double>) {
    throw std::runtime_error("fastlayers: the fbfft backend computes in float32; float64 runs on "
                             "the cuFFT backend");
  } else {
    if (!fbfft_basis_ok(s.nh, s.nw))
      throw std::runtime_error("fastlayers: the fbfft backend needs power-of-two basis sides from "
                               "2 to " + std::to_string(kFbfftConvMax));
    const Plan p = plan_for(pass, s);
    if (p.n_out == 0 || p.oh * p.ow == 0) return;
    const BufferLayout L = buffer_layout(pass, s, 4, Backend::FbFFT);
    if (ws_size < L.total())
      throw std::runtime_error("fastlayers: fft_conv workspace too small: " +
                               std::to_string(ws_size) + " < " + std::to_string(L.total()));
    char* base = static_cast<char*>(ws);
    float2* at = reinterpret_cast<float2*>(base + L.at);
    float2* bt = reinterpret_cast<float2*>(base + L.bt);
    float2* big_c = reinterpret_cast<float2*>(base + L.big);
    float2* staging = reinterpret_cast<float2*>(base + L.scratch);
    const int64_t F = s.freqs(), M = p.n_out;
    const int nh = static_cast<int>(s.nh), nw = static_cast<int>(s.nw);
    const Real type = real_of<T>();
    // Few input channels: row-major spectra throughout, the products in one kernel. Else the
    // GEMMs' frequency-major layout, written directly, or on a staged basis row-major and
    // transposed to and from it.
    const bool small = fbfft_small_channels(s), staged = fbfft_uses_staging(s);
    // GEMMs without the conjugate rows, which the inverse then takes as implied (no fill)
    const bool skip = skip_conjugates(options.conjugate_skip, s, Backend::FbFFT, tf32);
    // An operand through a window at minus its offset in the basis (implicit zero padding) into
    // its spectrum: row-major (few channels), or the GEMMs' frequency-major layout, directly (both
    // operands in one launch where fbfft can: rfft2_two) or, staged, row-major and then
    // transposed.
    auto operand = [&](const T* src, const Operand& op, float2* spectrum) {
      return fbfft::Rfft2Operand{
          src, spectrum, small ? fbfft::row_major(nh, nw) : fbfft::frequency_major(nh, nw, op.n),
          op.n, static_cast<int>(op.h), static_cast<int>(op.w), static_cast<int>(-op.offh),
          static_cast<int>(-op.offw)};
    };
    auto staged_forward = [&](const T* src, const Operand& op, float2* spectrum) {
      fbfft::rfft2(src, type, staging, fbfft::row_major(nh, nw), op.n, static_cast<int>(op.h),
                   static_cast<int>(op.w), nh, nw, static_cast<int>(-op.offh),
                   static_cast<int>(-op.offw), stream);
      transpose<float2>(staging, spectrum, op.n, F, stream);
    };
    if (p.a.n == 0 || p.b.n == 0) {
      // An empty reduction: a zero spectrum, so the inverse writes zeros (plus bias).
      FL_CUDA_CHECK(cudaMemsetAsync(big_c, 0, sizeof(float2) * M * F, stream));
    } else {
      if (staged) {
        staged_forward(a, p.a, at);
        staged_forward(b, p.b, bt);
      } else {
        fbfft::rfft2_two(operand(a, p.a, at), operand(b, p.b, bt), type, nh, nw, stream);
      }
      if (small) {
        spectral_product_small(pass, s, at, bt, big_c, F, stream);
      } else {
        void** ptrs = reinterpret_cast<void**>(base + L.ptrs);
        spectral_gemm<float>(pass, s, at, bt, big_c, F, tf32, stream, blas,
                             skip ? ptrs : nullptr, /*fill=*/false);
      }
    }
    // Inverse from [F, n_out] (staged: transposed to [n_out, F] first; few channels: [n_out, F]
    // already), clipped to the output at (offh, offw), scaled, plus bias, cast.
    const float2* spectrum = big_c;
    fbfft::Strides strides =
        small ? fbfft::row_major(nh, nw) : fbfft::frequency_major(nh, nw, M);
    if (staged) {
      transpose<float2>(big_c, staging, F, M, stream);
      spectrum = staging;
      strides = fbfft::row_major(nh, nw);
    }
    fbfft::irfft2(spectrum, strides, out, type, M, nh, nw, static_cast<int>(p.oh),
                  static_cast<int>(p.ow), static_cast<int>(p.offh), static_cast<int>(p.offw),
                  1.f / static_cast<float>(s.nh * s.nw), bias, s.K, stream,
                  skip && p.a.n != 0 && p.b.n != 0);
  }
}

FL_FFT_CONV_PIPELINES(run_fbfft)

}  // namespace detail
}  // namespace fft_conv
}  // namespace fastlayers
