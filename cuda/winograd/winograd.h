// Winograd convolution, all three passes, framework-free: raw pointers, sizes, a stream, a cuBLAS
// handle and a caller-provided workspace. 3 x 3 filters, stride 1, zero padding (ph, pw) >= 0.
//
// Shapes (all tensors contiguous, NCHW):
//   x  [S, C, H, W]      input            w  [K, C, 3, 3]  weight     bias [K]
//   y  [S, K, oh, ow]    output, oh = H + 2 ph - 2, ow = W + 2 pw - 2
//
// Pipeline of each pass (layout.h says which operand is which): the filter operand transformed
// per (K, C) pair or per tile (G), the data operand per tile (B^T), both into [alpha^2, ch, ...]
// in the storage type; alpha^2 GEMMs (cuBLAS, strided batched) into the accumulation type; the
// inverse transform (A^T) of each tile into the result, clipped, with the bias.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "layout.h"

namespace fastlayers {
namespace winograd {

// T: float, double, __half or __nv_bfloat16. The transformed operands are stored as T (half
// types feed tensor-core GEMMs), the products and their inverse transforms are float (double for
// double): buffers(pass, s, chunk, sizeof(T), sizeof(float or double)) bytes of workspace.
//   Forward:     a = x, b = w, out = y [S, K, oh, ow], bias [K] or null.
//   InputGrad:   a = grad_y, b = w, out = grad_x [S, C, H, W], bias null.
//   WeightGrad:  a = grad_y, b = x, out = grad_w [K, C, 3, 3], bias null.
// `chunk`: samples per round of transforms and GEMMs (1..S; chunk_samples in layout.h), so the
// workspace stays bounded; weight gradients sum the chunks in the accumulation type.
// tf32: allow TF32 tensor-op GEMMs (float only). s.tile must satisfy tile_ok (throws otherwise).
// `transformed` (Forward only, else null): U [alpha^2, K, C], the filters already transformed
// (transform_filters), which the products then read instead of transforming b.
template <typename T>
void run(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* workspace,
         size_t workspace_size, int64_t chunk, cudaStream_t stream, cublasHandle_t blas,
         bool tf32, const T* transformed);

// run() on `stream`, replayed as one cached CUDA graph (common/step_graph.h) when a call comes
// back with the same sizes, switches, addresses and stream, as a training step's layer does step
// after step: one graph launch instead of the transforms' launches and cuBLAS's host path. The
// graph bakes every address, so a call with new ones runs directly (and may be recorded if its
// key comes back); it runs at the priority of `stream`, as direct launches do. The GEMMs run on
// the graph cache's cuBLAS handle with `blas_workspace` bytes of its workspace in both modes, so
// a call gives the same bits replayed or not.
template <typename T>
void run_replayed(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out,
                  void* workspace, size_t workspace_size, int64_t chunk, cudaStream_t stream,
                  size_t blas_workspace, bool tf32, const T* transformed);

// The forward's transformed filters: U [alpha^2, K, C] (storage T) = G w[k, c] G^T of
// F(tile x tile, 3x3), w [K, C, 3, 3]; tile 2, 4 or 6 (throws otherwise).
template <typename T>
void transform_filters(const T* w, T* U, int64_t K, int64_t C, int64_t tile, cudaStream_t stream);

// The fused kernel (fused.cuh), float16 and bfloat16, or float32: the filter transform into
// `workspace` (fused_workspace_bytes, layout.h), then one kernel for the data transform, the
// products (float32 accumulation, on tensor cores; in float32 without `tf32` split TF32) and
// the inverse transform, all samples at once. Forward (a = x, b = w, bias) or InputGrad
// (a = grad_y, b = w); s.tile must satisfy fused_ok, `workspace` be 16-byte aligned, and float32
// data (a) have a width that is a multiple of 4 and be 16-byte aligned (throws otherwise).
template <typename T>
void run_fused(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out,
               void* workspace, size_t workspace_size, bool tf32, cudaStream_t stream);

// The fused weight gradient (fused_wgrad.cuh), float16 and bfloat16, or float32 (TF32 products with
// `tf32`, else four TF32 products of split values, hi + lo): F(3x3, 2x2), grad_w [K, C, 3, 3] from
// gy [S, K, oh, ow] and x [S, C, H, W]; `workspace` of fused_wgrad_workspace_bytes (layout.h) holds
// the partial sums.
template <typename T>
void run_fused_weight_grad(const Shape& s, const T* gy, const T* x, T* out, void* workspace,
                           size_t workspace_size, bool tf32, cudaStream_t stream);

}  // namespace winograd
}  // namespace fastlayers
