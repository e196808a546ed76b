// FFT convolution, all three passes, framework-free: raw pointers, sizes, a stream, a cuBLAS
// handle and a caller-provided workspace.
//
// Shapes (all tensors contiguous):
//   x  [S, C, H, W]      input            w  [K, C, kh, kw]  weight     bias [K]
//   y  [S, K, oh, ow]    output, oh = H + 2 ph - kh + 1, ow = W + 2 pw - kw + 1
// The Fourier basis nh x nw must hold the padded input: nh >= H + 2 ph, nw >= W + 2 pw.
// With that, every pass is exact (no wrap-around): forward and weight gradient are circular
// cross-correlations of lengths within the basis, the input gradient a full convolution of
// length H + 2 ph.
//
// Pipeline of each pass:  two operands --(zero-pad at an offset, cast to R)--> [n, nh, nw]
//   --(R2C, cuFFT)--> [n, F] --(transpose)--> [F, n]  (F = nh * (nw/2 + 1))
//   --(one complex GEMM per frequency, cuBLAS batched)--> [F, n_out]
//   --(transpose)--> [n_out, F] --(C2R)--> [n_out, nh, nw] --(clip, scale, bias, cast)--> out.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "layout.h"

namespace fastlayers {
namespace fft_conv {

// Choices that change how a pass runs, never what it computes; the defaults are the ops' choices.
struct Options {
  ConjugateSkip conjugate_skip = ConjugateSkip::WherePays;
};

// Bytes of workspace one call of `pass` needs, cuFFT's work areas included (creates the plans);
// `real_bytes` is sizeof(R), 4 or 8. Without the work areas: buffer_layout() in layout.h.
size_t workspace_bytes(Pass pass, const Shape& s, int real_bytes,
                       Backend backend = Backend::CuFFT);

// T: float, double, __half or __nv_bfloat16 (storage); arithmetic in float (double for double).
// Forward:     a = x, b = w, out = y [S, K, oh, ow], bias [K] or null.
// InputGrad:   a = grad_y, b = w, out = grad_x [S, C, H, W], bias must be null.
// WeightGrad:  a = grad_y, b = x, out = grad_w [K, C, kh, kw], bias must be null.
// tf32: allow TF32 tensor-op GEMMs (only meaningful for float arithmetic).
// backend FbFFT: T must not be double and fbfft_basis_ok(nh, nw) must hold (checked, throws).
template <typename T>
void run(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* workspace,
         size_t workspace_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
         Backend backend = Backend::CuFFT, const Options& options = {});

}  // namespace fft_conv
}  // namespace fastlayers
