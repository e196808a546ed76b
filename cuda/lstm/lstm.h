// The LSTM, one layer and one direction over a sequence, framework-free: raw pointers, the step
// geometry on the host, a stream, a cuBLAS handle and a caller-provided workspace.
//
// The recipe of NVIDIA's "Optimizing Recurrent Neural Networks in cuDNN 5": the input GEMM of
// every step in one call before the recurrence, one GEMM per step for all four gates, one fused
// point-wise kernel per step (which also saves what the backward reads); backward: one fused
// point-wise kernel and one GEMM per step, then the input gradient and each weight gradient as
// one GEMM over every step. The step loops run as cached CUDA graphs (step_graph.h) with their
// GEMMs on the cache's cuBLAS handle and `blas_workspace` bytes of its workspace (the framework's
// size, so cuBLAS chooses as it would on the framework's handle); `blas` runs the rest.
//
// Layout (row-major, every tensor contiguous): rows of the input are [N, I] with step t's
// bs[t] rows at off[t] (a padded [T, B, I] input is bs[t] = B, off[t] = t B); active rows of a
// step are the first bs[t] of the state (non-increasing bs: PackedSequence's order).
//   x [N, I]   h0 [B, R]   c0 [B, H]   w_ih [4H, I]   w_hh [4H, R]   b_ih, b_hh [4H] or null
//   w_hr [R, H] or null (R = H without)   out [N, R]   h_n [B, R]   c_n [B, H]
//   reserve [N, 5H] (accumulation type A: i, f, g, o, c_{t-1})
//   reserve_h [N, R + (w_hr ? H : 0)] (T: h_{t-1}, o tanh(c_t))
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fastlayers {
namespace lstm {

struct Steps {
  int64_t T, B, I, H, R, N;
  const int64_t* bs;   // [T] on the host
  const int64_t* off;  // [T] on the host
  bool proj;
  bool reverse;        // run time steps T-1 .. 0
};

// Workspace bytes of forward() and backward() for storage type size `t_bytes` and accumulation
// type size `a_bytes`, and of their step loops' state within it (sequence.cuh).
size_t forward_workspace(const Steps& s, int t_bytes, int a_bytes);
size_t backward_workspace(const Steps& s, int t_bytes, int a_bytes);
size_t forward_state_bytes(const Steps& s, int t_bytes, int a_bytes);
size_t backward_state_bytes(const Steps& s, int t_bytes, int a_bytes);
constexpr size_t kRowsBytes = 256;  // a state's piece for the per-call pointers
constexpr int kMaxInputChunks = 32;  // the forward's input GEMM chunks (sequence.cuh)
constexpr int kBackwardDhParts = 4;  // the backward's recurrent GEMM pieces (sequence.cuh)

// T: float, double, __half, __nv_bfloat16; A: float (double for double).
template <typename T>
void forward(const Steps& s, const T* x, const T* h0, const T* c0, const T* w_ih, const T* w_hh,
             const T* b_ih, const T* b_hh, const T* w_hr, T* out, T* h_n, T* c_n, void* reserve,
             T* reserve_h, void* workspace, size_t workspace_size, cudaStream_t stream,
             cublasHandle_t blas, size_t blas_workspace, bool tf32);

// The persistent forward (persistent.cu): the same results and reserve as forward() for padded
// input without a projection (N = T B, w_hr null), T: float, __half, __nv_bfloat16; one
// cooperative kernel for the recurrence. persistent_fits(): whether batch B and hidden size H fit
// it (shared memory, co-resident blocks) on the current device, for storage of `t_bytes` (4 or 2;
// `bf16`: bfloat16 rather than half); persistent_backward_fits(): whether they fit it and
// backward_persistent's kernel (batches up to 16 on the grid; on clusters by the forward's rule,
// with the backward kernel's own capacity).
bool persistent_fits(int64_t B, int64_t H, int t_bytes, bool bf16);
bool persistent_backward_fits(int64_t B, int64_t H, int t_bytes, bool bf16);
// The forward kernel lstm_persistent runs for (B, H, storage type): "cluster" (float16 and
// bfloat16 at H 128, 256, 512 on sm_90 and later, B up to 16 rows a cluster on the clusters the
// device holds at once: persistent_cluster.cuh), "grid-registers" (float32 where a block's rows
// of w_hh fit its registers), "grid" (the other cooperative kernels), or null where none fits.
const char* persistent_forward_kernel(int64_t B, int64_t H, int t_bytes, bool bf16);
// The backward kernel lstm_backward_persistent runs there: "cluster" (float16 and bfloat16 at H
// 128, 256, 512 where its clusters fit, by the forward's rule: persistent_cluster_backward.cuh),
// "grid", or null where persistent_backward_fits is false.
const char* persistent_backward_kernel(int64_t B, int64_t H, int t_bytes, bool bf16);
// The cluster kernels' plan there (`backward`: lstm_backward_persistent's): clusters, and n-tiles
// of 8 batch rows a cluster (1 or 2); both 0 where the cluster kernels do not serve.
struct ClusterShape {
  int clusters = 0, n_tiles = 0;
};
ClusterShape persistent_cluster_shape(int64_t B, int64_t H, int t_bytes, bool bf16,
                                      bool backward);
template <typename T>
void forward_persistent(const Steps& s, const T* x, const T* h0, const T* c0, const T* w_ih,
                        const T* w_hh, const T* b_ih, const T* b_hh, T* out, T* h_n, T* c_n,
                        void* reserve, T* reserve_h, void* workspace, size_t workspace_size,
                        cudaStream_t stream, cublasHandle_t blas, bool tf32);

// The persistent backward (persistent.cu): backward()'s results where persistent_backward_fits,
// padded input without a projection (dw_hr none); the recurrence as one kernel (a cluster's or a
// cooperative grid's), then
// backward()'s GEMMs over every step.
template <typename T>
void backward_persistent(const Steps& s, const T* dy, const T* dh_n, const T* dc_n, const T* x,
                         const T* w_ih, const T* w_hh, const void* reserve, const T* reserve_h,
                         T* dx, T* dh0, T* dc0, bool weights, T* dw_ih, T* dw_hh, T* db,
                         void* workspace, size_t workspace_size, cudaStream_t stream,
                         cublasHandle_t blas, bool tf32);

// A unidirectional stack of L layers (1 <= L <= kMaxStack) over padded input without a
// projection (N = T B, s.I the first layer's input size, R = H), as a wavefront: at wavefront
// step w every layer l with t = w - l in [0, T) runs its step t, all of them in one
// pointer-batched GEMM (each layer's recurrent product, and for l >= 1 its input product from
// layer l-1's output of step t, written at w - 1) and one cell launch. The first layer's input
// GEMM of every step runs before (TF32 where `tf32`); the others' input products run in the
// recurrence in full precision. Per layer l: w_ih[l] [4H, I_l] (I_0 = s.I, else H), w_hh[l]
// [4H, H], b_ih[l], b_hh[l] [4H] or null. h0, c0, h_n, c_n [L, B, H]; out [T, B, H] the last
// layer's output; inner [L-1, T, B, H] the others'; reserve [L, N, 5H] A and reserve_h [L, N, H]
// T: each layer's as forward() writes them (so backward() takes a layer's slices).
constexpr int kMaxStack = 8;
template <typename T>
struct StackWeights {
  const T* w_ih[kMaxStack];
  const T* w_hh[kMaxStack];
  const T* b_ih[kMaxStack];
  const T* b_hh[kMaxStack];
};
size_t stack_workspace(const Steps& s, int L, int t_bytes, int a_bytes);
size_t stack_state_bytes(const Steps& s, int L, int t_bytes, int a_bytes);
template <typename T>
void forward_stack(const Steps& s, int L, const T* x, const T* h0, const T* c0,
                   const StackWeights<T>& w, T* out, T* h_n, T* c_n, T* inner, void* reserve,
                   T* reserve_h, void* workspace, size_t workspace_size, cudaStream_t stream,
                   cublasHandle_t blas, size_t blas_workspace, bool tf32);

// dy [N, R]; dh_n [B, R], dc_n [B, H] or null (zero). Outputs: dx [N, I] (null: not computed),
// dh0 [B, R], dc0 [B, H], and with `weights`: dw_ih [4H, I], dw_hh [4H, R], db [4H] (the
// gradient of b_ih and of b_hh alike), dw_hr [R, H] (null without a projection).
template <typename T>
void backward(const Steps& s, const T* dy, const T* dh_n, const T* dc_n, const T* x,
              const T* w_ih, const T* w_hh, const T* w_hr, const void* reserve,
              const T* reserve_h, T* dx, T* dh0, T* dc0, bool weights, T* dw_ih, T* dw_hh, T* db,
              T* dw_hr, void* workspace, size_t workspace_size, cudaStream_t stream,
              cublasHandle_t blas, size_t blas_workspace, bool tf32);

}  // namespace lstm
}  // namespace fastlayers
