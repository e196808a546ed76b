// forward_stack (lstm.h): a stack of layers as one wavefront, recorded as one CUDA graph per
// geometry (step_graph.h). Every per-call pointer, the weights' included, reaches the recorded
// launches through the state: the rows, and the GEMMs' pointer arrays, which the first kernel
// of a call fills; so neither the weights' addresses nor their casts (autocast) are in the key.
#pragma once

#include "sequence.cuh"

namespace fastlayers {
namespace lstm {

// What changes from call to call, as ForwardRows, for every layer.
template <typename T>
struct StackRows {
  const compute_t<T>* xp;  // [N, 4H] the first layer's input products
  T* out;                  // [T, B, H]
  T* inner;                // [L-1, T, B, H]
  compute_t<T>* reserve;   // [L, N, 5H]
  T* reserve_h;            // [L, N, H]
  const T* b_ih[kMaxStack];
  const T* b_hh[kMaxStack];
};

// Layers active at wavefront step w: [lo, hi].
__host__ __device__ inline int wave_lo(int64_t w, int64_t T) { return static_cast<int>(w < T ? 0 : w - T + 1); }
__host__ __device__ inline int wave_hi(int64_t w, int L) { return static_cast<int>(w < L - 1 ? w : L - 1); }

// The state (stack_state_bytes): rows; the GEMMs' pointer arrays a[w][p], b[w][p], c[w][p]
// (2L problems a step at most); per layer g [B, 4H] A (recurrent products), gi [B, 4H] A (input
// products), c [B, H] A, h [B, H] T, each as one [L, ...] piece.
template <typename T>
struct StackState {
  StackRows<T>* rows;
  const void** a;
  const void** b;
  void** c;
  compute_t<T>* g;
  compute_t<T>* gi;
  compute_t<T>* cell;
  T* h;
};

template <typename T>
StackState<T> stack_state(void* base, const Steps& s, int L) {
  static_assert(sizeof(StackRows<T>) <= kRowsBytes, "rows exceed their piece");
  const int64_t slots = (s.T + L - 1) * 2 * L;
  Carve ws(base);
  StackState<T> st;
  st.rows = ws.take<StackRows<T>>(1);
  st.a = ws.take<const void*>(slots);
  st.b = ws.take<const void*>(slots);
  st.c = ws.take<void*>(slots);
  st.g = ws.take<compute_t<T>>(L * s.B * 4 * s.H);
  st.gi = ws.take<compute_t<T>>(L * s.B * 4 * s.H);
  st.cell = ws.take<compute_t<T>>(L * s.B * s.H);
  st.h = ws.take<T>(L * s.B * s.H);
  return st;
}

// A call's start, in one launch: the rows; every wavefront step's GEMM operands (first the
// recurrent products of layers lo..hi, then the input products of layers max(lo, 1)..hi); each
// layer's h and c from h0, c0.
template <typename T>
struct StackBegin {
  StackRows<T> rows;
  const T* w_ih[kMaxStack];
  const T* w_hh[kMaxStack];
  StackState<T> st;
  const T* h0;
  const T* c0;
  int64_t T_, B, H;
  int L;
};

template <typename T>
__global__ void stack_begin(const StackBegin<T> p) {
  using A = compute_t<T>;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int L = p.L;
  if (first == 0) *p.st.rows = p.rows;
  const int64_t waves = p.T_ + L - 1, BH = p.B * p.H, B4H = p.B * 4 * p.H;
  for (int64_t k = first; k < waves * L; k += stride) {
    const int64_t w = k / L;
    const int j = static_cast<int>(k - w * L), lo = wave_lo(w, p.T_), hi = wave_hi(w, L);
    const int active = hi - lo + 1;
    const int64_t slot = w * 2 * L;
    if (j < active) {  // layer lo + j's recurrent product: g_l = h_l w_hh_l^T
      const int l = lo + j;
      p.st.a[slot + j] = p.w_hh[l];
      p.st.b[slot + j] = p.st.h + l * BH;
      p.st.c[slot + j] = p.st.g + l * B4H;
    }
    const int in_lo = lo > 1 ? lo : 1;
    if (j < hi - in_lo + 1) {  // layer in_lo + j's input product from layer l-1's output at t
      const int l = in_lo + j;
      const int64_t t = w - l;
      const T* y = l - 1 == L - 1 ? p.rows.out : p.rows.inner + (l - 1) * p.T_ * BH;
      p.st.a[slot + active + j] = p.w_ih[l];
      p.st.b[slot + active + j] = y + t * BH;
      p.st.c[slot + active + j] = p.st.gi + l * B4H;
    }
  }
  for (int64_t k = first; k < L * BH; k += stride) {
    p.st.h[k] = p.h0[k];
    p.st.cell[k] = static_cast<A>(to_compute(p.c0[k]));
  }
}

// Wavefront step w's cells: layer l = lo + blockIdx.y at t = w - l, as cell_forward with the
// pre-activations (l == 0 ? xp's step rows : gi_l) + g_l + biases; the hidden state goes to the
// layer's h and to the last layer's out or inner.
template <typename T>
__global__ void stack_cells(int64_t T_, int64_t B, int64_t H, int64_t w, int lo, int L,
                            const StackRows<T>* __restrict__ rows,
                            const compute_t<T>* __restrict__ g_all,
                            const compute_t<T>* __restrict__ gi_all,
                            compute_t<T>* __restrict__ c_all, T* __restrict__ h_all) {
  using A = compute_t<T>;
  const int l = lo + static_cast<int>(blockIdx.y);
  const int64_t t = w - l, BH = B * H, N = T_ * B;
  const StackRows<T>& p = *rows;
  const A* in = l == 0 ? p.xp + t * B * 4 * H : gi_all + l * B * 4 * H;
  const A* g = g_all + l * B * 4 * H;
  A* c = c_all + l * BH;
  T* h = h_all + l * BH;
  T* y = (l == L - 1 ? p.out : p.inner + l * T_ * BH) + t * BH;
  A* reserve = p.reserve + (l * N + t * B) * 5 * H;
  T* reserve_h = p.reserve_h + (l * N + t * B) * H;
  const T* b_ih = p.b_ih[l];
  const T* b_hh = p.b_hh[l];
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < BH;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / H, j = k - b * H;
    reserve_h[k] = h[k];  // h_{t-1}
    A v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      A x = in[b * 4 * H + q * H + j] + g[b * 4 * H + q * H + j];
      if (b_ih != nullptr) x += to_compute(b_ih[q * H + j]);
      if (b_hh != nullptr) x += to_compute(b_hh[q * H + j]);
      v[q] = x;
    }
    A cn, ht;
    cell_update(v, c[k], reserve + b * 5 * H + j, H, cn, ht);
    c[k] = cn;
    const T hv = from_compute<T>(ht);
    h[k] = hv;
    y[k] = hv;
  }
}

// The recorded wavefront: per step one pointer-batched GEMM and one cell launch.
template <typename T>
void stack_steps(const Steps& s, int L, void* state, cudaStream_t stream, cublasHandle_t blas) {
  using G = GemmTypes<T>;
  const int64_t H = s.H;
  const StackState<T> st = stack_state<T>(state, s, L);
  const gemm::Pinned pin(blas, stream);
  for (int64_t w = 0; w < s.T + L - 1; ++w) {
    const int lo = wave_lo(w, s.T), hi = wave_hi(w, L), active = hi - lo + 1;
    const int inputs = hi - (lo > 1 ? lo : 1) + 1;
    const int64_t slot = w * 2 * L;
    // every product is [B, 4H] = [B, H] [4H, H]^T (I = H past the first layer)
    pin.pointer_batched(G::store, G::acc, false,
                        gemm::Dims{CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, s.B, H, H, H, 4 * H},
                        st.a + slot, st.b + slot, st.c + slot, active + (inputs > 0 ? inputs : 0));
    stack_cells<T><<<dim3(blocks_for(s.B * H), active), kThreads, 0, stream>>>(
        s.T, s.B, H, w, lo, L, st.rows, st.g, st.gi, st.cell, st.h);
    FL_LAUNCH_CHECK();
  }
}

// Each layer's h_n, c_n from its state.
template <typename T>
__global__ void stack_end(int64_t total, const T* __restrict__ h, const compute_t<T>* __restrict__ c,
                          T* __restrict__ h_n, T* __restrict__ c_n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    h_n[k] = h[k];
    c_n[k] = from_compute<T>(c[k]);
  }
}

template <typename T>
void forward_stack(const Steps& s, int L, const T* x, const T* h0, const T* c0,
                   const StackWeights<T>& w, T* out, T* h_n, T* c_n, T* inner, void* reserve,
                   T* reserve_h, void* workspace, size_t workspace_size, cudaStream_t stream,
                   cublasHandle_t blas, size_t blas_workspace, bool tf32) {
  using A = compute_t<T>;
  using G = GemmTypes<T>;
  if (L < 1 || L > kMaxStack || s.proj || s.reverse || s.N != s.T * s.B)
    throw std::invalid_argument("fastlayers: the LSTM stack takes 1 to 8 unidirectional layers "
                                "over padded input without a projection");
  if (workspace_size < stack_workspace(s, L, sizeof(T), sizeof(A)))
    throw std::invalid_argument("fastlayers: LSTM stack workspace too small");
  const int64_t H = s.H;
  Carve ws(workspace);
  A* xp = ws.take<A>(s.N * 4 * H);
  const size_t state_bytes = stack_state_bytes(s, L, sizeof(T), sizeof(A));
  void* fallback = ws.take<char>(static_cast<int64_t>(state_bytes));
  if (s.N > 0) {
    if (s.I > 0) {  // the first layer's input GEMM of every step: xp [N, 4H] = x [N, I] w_ih^T
      const gemm::Pinned pin(blas, stream);
      gemm1(pin, G::store, G::acc, tf32, CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, s.N, s.I, w.w_ih[0],
            s.I, x, s.I, xp, 4 * H);
    } else {
      FL_CUDA_CHECK(cudaMemsetAsync(xp, 0, sizeof(A) * s.N * 4 * H, stream));
    }
  }
  if (s.B == 0 || H == 0) return;
  const bool loop = s.T > 0;
  step_graph::Run run;
  if (loop) {
    std::string key = loop_key<T>("lstm-stack", s, nullptr, nullptr);
    key += std::to_string(L);
    run = step_graph::prepare(key, stream, state_bytes, fallback, blas_workspace,
                              [&](const step_graph::Streams& ss, void* state) {
                                stack_steps<T>(s, L, state, ss.stream, ss.blas);
                              });
  }
  const StackState<T> st = stack_state<T>(loop ? run.state() : fallback, s, L);
  StackBegin<T> begin{};
  begin.rows.xp = xp;
  begin.rows.out = out;
  begin.rows.inner = inner;
  begin.rows.reserve = static_cast<A*>(reserve);
  begin.rows.reserve_h = reserve_h;
  for (int l = 0; l < L; ++l) {
    begin.rows.b_ih[l] = w.b_ih[l];
    begin.rows.b_hh[l] = w.b_hh[l];
    begin.w_ih[l] = w.w_ih[l];
    begin.w_hh[l] = w.w_hh[l];
  }
  begin.st = st;
  begin.h0 = h0;
  begin.c0 = c0;
  begin.T_ = s.T;
  begin.B = s.B;
  begin.H = H;
  begin.L = L;
  const int64_t work = std::max<int64_t>((s.T + L - 1) * L, L * s.B * H);
  stack_begin<T><<<blocks_for(work), kThreads, 0, stream>>>(begin);
  FL_LAUNCH_CHECK();
  if (loop) run.launch(stream);
  stack_end<T><<<blocks_for(L * s.B * H), kThreads, 0, stream>>>(L * s.B * H, st.h, st.cell,
                                                                 h_n, c_n);
  FL_LAUNCH_CHECK();
}

#define FL_LSTM_STACK_INSTANTIATE(T)                                                          \
  template void forward_stack<T>(const Steps&, int, const T*, const T*, const T*,              \
                                 const StackWeights<T>&, T*, T*, T*, T*, void*, T*, void*,     \
                                 size_t, cudaStream_t, cublasHandle_t, size_t, bool);

}  // namespace lstm
}  // namespace fastlayers
