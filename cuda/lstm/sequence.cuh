// The LSTM's sequence drivers (lstm.h): GEMMs on cuBLAS and the point-wise kernels of cell.cuh,
// instantiated per storage type in lstm_*.cu.
#pragma once

#include <algorithm>
#include <stdexcept>

#include "../common/check.h"
#include "../common/gemm.h"
#include "../common/launch.cuh"
#include "cell.cuh"
#include "lstm.h"

namespace fastlayers {
namespace lstm {

// Carves a workspace into 256-byte aligned pieces.
class Carve {
 public:
  explicit Carve(void* base) : base_(static_cast<char*>(base)) {}
  template <typename U> U* take(int64_t count) {
    U* p = reinterpret_cast<U*>(base_ + used_);
    used_ += (static_cast<size_t>(count) * sizeof(U) + 255) & ~size_t{255};
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// C [m, n] (column-major, ld ldc) = op_a(A) op_b(B) (+ C with beta 1), one GEMM on the handle
// pinned for the whole sequence: operands of type `ab`, result of type `c`.
inline void gemm1(const gemm::Pinned& blas, gemm::Type ab, gemm::Type c, bool tf32,
                  cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k,
                  const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc,
                  double beta = 0) {
  gemm::Scale scale;
  scale.beta = beta;
  blas.strided_batched(ab, c, tf32, gemm::Dims{op_a, op_b, m, n, k, lda, ldb, ldc}, A, 0, B, 0,
                       C, 0, 1, scale);
}

template <typename From, typename To>
void convert_n(int64_t n, const From* in, To* out, cudaStream_t stream) {
  if (n <= 0) return;
  convert<From, To><<<blocks_for(n), kThreads, 0, stream>>>(n, in, out);
  FL_LAUNCH_CHECK();
}

// TF32 (`tf32`, fp32 data) goes to the input GEMM and the input gradient, the GEMMs over every
// step whose operands are the layer's input. The GEMMs inside the recurrence (w_hh, w_hr, both
// ways) stay in full fp32: their error compounds over the steps, and cuDNN's RNN keeps them in
// fp32 on small layers. So do the weight gradients: over few rows (T B = 9 at H 512) TF32 there
// read 2.8x cuDNN's error on w_hh's gradient on an H100. Either would be less precise than the
// nn.LSTM being replaced.

// Forward workspace: xp [N, 4H] A, c [B, H] A, h [B, R] T, htil [B, H] T (projection).
template <typename T>
void forward(const Steps& s, const T* x, const T* h0, const T* c0, const T* w_ih,
                  const T* w_hh, const T* b_ih, const T* b_hh, const T* w_hr, T* out, T* h_n,
                  T* c_n, void* reserve_v, T* reserve_h, void* workspace, size_t workspace_size,
                  cudaStream_t stream, cublasHandle_t blas, bool tf32) {
  using A = compute_t<T>;
  using G = GemmTypes<T>;
  if (workspace_size < forward_workspace(s, sizeof(T), sizeof(A)))
    throw std::invalid_argument("fastlayers: LSTM forward workspace too small");
  const int64_t H = s.H, R = s.R, rh_cols = R + (s.proj ? H : 0);
  Carve ws(workspace);
  const gemm::Pinned pin(blas, stream);
  A* xp = ws.take<A>(s.N * 4 * H);
  A* c = ws.take<A>(s.B * H);
  T* h = ws.take<T>(s.B * R);
  T* htil = s.proj ? ws.take<T>(s.B * H) : nullptr;
  A* reserve = static_cast<A*>(reserve_v);

  // The input GEMM of every step: xp [N, 4H] = x [N, I] w_ih^T.
  if (s.N > 0) {
    if (s.I > 0) {
      gemm1(pin, G::store, G::acc, tf32, CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, s.N, s.I, w_ih,
            s.I, x, s.I, xp, 4 * H);
    } else {
      FL_CUDA_CHECK(cudaMemsetAsync(xp, 0, sizeof(A) * s.N * 4 * H, stream));
    }
  }
  if (s.B > 0) {
    FL_CUDA_CHECK(cudaMemcpyAsync(h, h0, sizeof(T) * s.B * R, cudaMemcpyDeviceToDevice, stream));
    convert_n<T, A>(s.B * H, c0, c, stream);
  }
  for (int64_t step = 0; step < s.T; ++step) {
    const int64_t t = s.reverse ? s.T - 1 - step : step, n = s.bs[t], o = s.off[t];
    A* pre = xp + o * 4 * H;
    // pre [n, 4H] += h [n, R] w_hh^T
    if (R > 0)
      gemm1(pin, G::store, G::acc, false, CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, n, R, w_hh, R,
            h, R, pre, 4 * H, 1.0);
    cell_forward<T><<<blocks_for(n * H), kThreads, 0, stream>>>(
        n, H, R, pre, b_ih, b_hh, c, h, out + o * R, htil, reserve + o * 5 * H,
        reserve_h + o * rh_cols, rh_cols);
    FL_LAUNCH_CHECK();
    if (s.proj) {
      // h [n, R] = htil [n, H] w_hr^T, then the step's output rows
      gemm1(pin, G::store, G::store, false, CUBLAS_OP_T, CUBLAS_OP_N, R, n, H, w_hr, H,
            htil, H, h, R);
      FL_CUDA_CHECK(cudaMemcpyAsync(out + o * R, h, sizeof(T) * n * R, cudaMemcpyDeviceToDevice,
                                    stream));
    }
  }
  if (s.B > 0) {
    FL_CUDA_CHECK(cudaMemcpyAsync(h_n, h, sizeof(T) * s.B * R, cudaMemcpyDeviceToDevice, stream));
    convert_n<A, T>(s.B * H, c, c_n, stream);
  }
}

// The backward after its recurrence, from the gates' gradients dgates [N, 4H] of every row: the
// input gradient (if dx) and, with `weights`, each weight gradient as one GEMM over every row
// (ones [N]: scratch for the bias gradient; dhn [N, R]: the gradient on h_t with a projection).
template <typename T>
void backward_gemms(const Steps& s, const gemm::Pinned& pin, const T* dgates, T* ones,
                    const T* dhn, const T* x, const T* w_ih, const T* reserve_h, T* dx,
                    bool weights, T* dw_ih, T* dw_hh, T* db, T* dw_hr, cudaStream_t stream,
                    bool tf32) {
  using G = GemmTypes<T>;
  const int64_t H = s.H, R = s.R, rh_cols = R + (s.proj ? H : 0);
  const bool rows = s.N > 0;
  if (dx != nullptr && s.I > 0) {  // dx [N, I] = dgates [N, 4H] w_ih
    if (rows)
      gemm1(pin, G::store, G::store, tf32, CUBLAS_OP_N, CUBLAS_OP_N, s.I, s.N, 4 * H,
            w_ih, s.I, dgates, 4 * H, dx, s.I);
  }
  if (!weights) return;
  if (!rows) {  // no step ran: the weight gradients are zero
    FL_CUDA_CHECK(cudaMemsetAsync(dw_ih, 0, sizeof(T) * 4 * H * s.I, stream));
    FL_CUDA_CHECK(cudaMemsetAsync(dw_hh, 0, sizeof(T) * 4 * H * R, stream));
    FL_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(T) * 4 * H, stream));
    if (s.proj) FL_CUDA_CHECK(cudaMemsetAsync(dw_hr, 0, sizeof(T) * R * H, stream));
    return;
  }
  // dw_ih [4H, I] = dgates^T x;  dw_hh [4H, R] = dgates^T h_{t-1};  db [4H] = dgates^T 1 (fp32:
  // see above)
  if (s.I > 0)
    gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_T, s.I, 4 * H, s.N, x,
          s.I, dgates, 4 * H, dw_ih, s.I);
  if (R > 0)
    gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_T, R, 4 * H, s.N,
          reserve_h, rh_cols, dgates, 4 * H, dw_hh, R);
  fill_ones<T><<<blocks_for(s.N), kThreads, 0, stream>>>(s.N, ones);
  FL_LAUNCH_CHECK();
  gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_N, 4 * H, 1, s.N, dgates,
        4 * H, ones, s.N, db, 4 * H);
  if (s.proj)  // dw_hr [R, H] = dhn^T (o tanh(c))
    gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_T, H, R, s.N,
          reserve_h + R, rh_cols, dhn, R, dw_hr, H);
}

// Backward workspace: dh [B, R] A, dc [B, H] A, dgates [N, 4H] T, ones [N] T; with a projection
// dhn [N, R] T (the gradient on h_t of every row, for w_hr's gradient) and dhtil [B, H] A.
template <typename T>
void backward(const Steps& s, const T* dy, const T* dh_n, const T* dc_n, const T* x,
                   const T* w_ih, const T* w_hh, const T* w_hr, const void* reserve_v,
                   const T* reserve_h, T* dx, T* dh0, T* dc0, bool weights, T* dw_ih, T* dw_hh,
                   T* db, T* dw_hr, void* workspace, size_t workspace_size, cudaStream_t stream,
                   cublasHandle_t blas, bool tf32) {
  using A = compute_t<T>;
  using G = GemmTypes<T>;
  if (workspace_size < backward_workspace(s, sizeof(T), sizeof(A)))
    throw std::invalid_argument("fastlayers: LSTM backward workspace too small");
  const int64_t H = s.H, R = s.R;
  Carve ws(workspace);
  const gemm::Pinned pin(blas, stream);
  A* dh = ws.take<A>(s.B * R);
  A* dc = ws.take<A>(s.B * H);
  T* dgates = ws.take<T>(s.N * 4 * H);
  T* ones = ws.take<T>(s.N);
  T* dhn = s.proj ? ws.take<T>(s.N * R) : nullptr;
  A* dhtil = s.proj ? ws.take<A>(s.B * H) : nullptr;
  const A* reserve = static_cast<const A*>(reserve_v);

  convert_n<T, A>(s.B * R, dh_n, dh, stream);  // null: zeros
  convert_n<T, A>(s.B * H, dc_n, dc, stream);
  for (int64_t step = s.T - 1; step >= 0; --step) {
    const int64_t t = s.reverse ? s.T - 1 - step : step, n = s.bs[t], o = s.off[t];
    if (s.proj) {
      // dhn [n, R] = dy + dh; dhtil [n, H] = dhn w_hr
      add_rows<T><<<blocks_for(n * R), kThreads, 0, stream>>>(n * R, dy + o * R, dh,
                                                             dhn + o * R);
      FL_LAUNCH_CHECK();
      gemm1(pin, G::store, G::acc, false, CUBLAS_OP_N, CUBLAS_OP_N, H, n, R, w_hr, H,
            dhn + o * R, R, dhtil, H);
    }
    cell_backward<T><<<blocks_for(n * H), kThreads, 0, stream>>>(
        n, H, dy + o * R, dh, dhtil, reserve + o * 5 * H, dc, dgates + o * 4 * H);
    FL_LAUNCH_CHECK();
    // dh [n, R] = dgates [n, 4H] w_hh
    if (R > 0)
      gemm1(pin, G::store, G::acc, false, CUBLAS_OP_N, CUBLAS_OP_N, R, n, 4 * H, w_hh, R,
            dgates + o * 4 * H, 4 * H, dh, R);
  }
  convert_n<A, T>(s.B * R, dh, dh0, stream);
  convert_n<A, T>(s.B * H, dc, dc0, stream);
  backward_gemms(s, pin, dgates, ones, dhn, x, w_ih, reserve_h, dx, weights, dw_ih, dw_hh, db,
                 dw_hr, stream, tf32);
}

// Explicit instantiations of forward and backward for storage type T (lstm_*.cu).
#define FL_LSTM_INSTANTIATE(T)                                                                   \
  template void forward<T>(const Steps&, const T*, const T*, const T*, const T*, const T*,       \
                           const T*, const T*, const T*, T*, T*, T*, void*, T*, void*, size_t,   \
                           cudaStream_t, cublasHandle_t, bool);                                  \
  template void backward<T>(const Steps&, const T*, const T*, const T*, const T*, const T*,      \
                            const T*, const T*, const void*, const T*, T*, T*, T*, bool, T*, T*, \
                            T*, T*, void*, size_t, cudaStream_t, cublasHandle_t, bool);

}  // namespace lstm
}  // namespace fastlayers
