// The pieces of the FFT convolution's two pipelines (fft_conv.h), each compiled in its own file:
// the cuFFT pipeline (cufft_pipeline.cu), the fbfft pipeline (fbfft_pipeline.cu), the
// per-frequency GEMMs and the transposes around them (spectral_gemm.cu), and the few-channel
// products of the fbfft pipeline (small_products.cu).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "fft_conv.h"

namespace fastlayers {
namespace fft_conv {
namespace detail {

template <typename R> struct Complex;
template <> struct Complex<float> { using type = float2; };
template <> struct Complex<double> { using type = double2; };

// in [rows, cols] -> out [cols, rows] (C: float2 or double2), on `stream`.
template <typename C>
void transpose(const C* in, C* out, int64_t rows, int64_t cols, cudaStream_t stream);

// The per-frequency products of a pass: at [F, n_a], bt [F, n_b] -> out [F, n_out], one complex
// GEMM per frequency (R: float or double). ptrs: workspace for the operand pointers when the GEMMs
// skip the conjugate rows, which are then filled in (for cuFFT's C2R; fbfft's inverse takes them
// as implied instead: fill = false); nullptr: every frequency.
template <typename R>
void spectral_gemm(Pass pass, const Shape& s, const typename Complex<R>::type* at,
                   const typename Complex<R>::type* bt, typename Complex<R>::type* big_c,
                   int64_t F, bool tf32, cudaStream_t stream, cublasHandle_t blas,
                   void** ptrs = nullptr, bool fill = true);

// The per-frequency products of a pass when the input channels are few (fbfft_small_channels), on
// row-major spectra: a [n_a, F], b [n_b, F] -> out [n_out, F].
void spectral_product_small(Pass pass, const Shape& s, const float2* a, const float2* b,
                            float2* out, int64_t F, cudaStream_t stream);

// The two pipelines of run() (fft_conv.h), T: float, double, __half, __nv_bfloat16.
template <typename T>
void run_cufft(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* ws,
               size_t ws_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
               const Options& options);
template <typename T>
void run_fbfft(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* ws,
               size_t ws_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
               const Options& options);

// workspace_bytes() of the cuFFT pipeline: the buffers plus cuFFT's work area (creates the plans).
size_t cufft_workspace_bytes(Pass pass, const Shape& s, int real_bytes);

// Explicit instantiations of a pipeline (run_cufft, run_fbfft) for every storage type of run().
#define FL_FFT_CONV_PIPELINE(fn, T)                                                               \
  template void fn<T>(Pass, const Shape&, const T*, const T*, const T*, T*, void*, size_t,       \
                      cudaStream_t, cublasHandle_t, bool, const Options&);
#define FL_FFT_CONV_PIPELINES(fn)                                                                 \
  FL_FFT_CONV_PIPELINE(fn, float)                                                                 \
  FL_FFT_CONV_PIPELINE(fn, double)                                                                \
  FL_FFT_CONV_PIPELINE(fn, __half)                                                                \
  FL_FFT_CONV_PIPELINE(fn, __nv_bfloat16)

}  // namespace detail
}  // namespace fft_conv
}  // namespace fastlayers
