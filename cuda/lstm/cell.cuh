// The LSTM's point-wise kernels: one thread per (row, hidden unit), arithmetic in the
// accumulation type A (float; double for double), gate order i, f, g, o.
#pragma once

#include <cstdint>

#include "../common/storage.h"

namespace fastlayers {
namespace lstm {

template <typename A> __device__ __forceinline__ A sigmoid(A v) { return A(1) / (A(1) + exp(-v)); }
__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

// One (row, unit) of the cell from its four pre-activations v (i, f, g, o; biases added) and
// c_{t-1} = cp: the gates, c_t and h_t, and the reserve's five values at r (stride H): i, f, g, o,
// c_{t-1}, which the backward reads.
template <typename A>
__device__ __forceinline__ void cell_update(const A (&v)[4], A cp, A* r, int64_t H, A& cn, A& ht) {
  const A i = sigmoid(v[0]), f = sigmoid(v[1]), g = tanh(v[2]), o = sigmoid(v[3]);
  cn = f * cp + i * g;
  ht = o * tanh(cn);
  r[0] = i;
  r[H] = f;
  r[2 * H] = g;
  r[3 * H] = o;
  r[4 * H] = cp;
}

// What changes from call to call, read by the step kernels through a pointer (the step loop is
// replayed as a CUDA graph whose launches bake their arguments; step_graph.h): the forward's
// per-call inputs and outputs.
template <typename T>
struct ForwardRows {
  const T* x;              // [N, I] the input
  const T* w_ih;           // [4H, I]
  compute_t<T>* xp;        // [N, 4H] the input GEMM's products
  const T* b_ih;           // [4H] or null
  const T* b_hh;           // [4H] or null
  T* out;                  // [N, R]
  compute_t<T>* reserve;   // [N, 5H]
  T* reserve_h;            // [N, rh_cols]
};

// One forward step over the n active rows at row offset o. g [n, 4H]: the recurrent products
// h_{t-1} w_hh^T (null when R = 0); the pre-activations are rows->xp's step rows + g + biases.
// c [n, H] the cell state, updated; h [n, R] the hidden state: its old rows are saved as h_{t-1}
// into reserve_h, and without a projection (htil null) the new rows go to h and to out; with
// one, o tanh(c_t) goes to htil [n, H] and reserve_h.
template <typename T>
__global__ void cell_forward(int64_t n, int64_t H, int64_t R, int64_t rh_cols, int64_t o,
                             const ForwardRows<T>* __restrict__ rows,
                             const compute_t<T>* __restrict__ g, compute_t<T>* __restrict__ c,
                             T* __restrict__ h, T* __restrict__ htil) {
  using A = compute_t<T>;
  const ForwardRows<T> p = *rows;
  const A* xp = p.xp + o * 4 * H;
  T* out = p.out + o * R;
  A* reserve = p.reserve + o * 5 * H;
  T* reserve_h = p.reserve_h + o * rh_cols;
  const int64_t total = n * H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / H, j = k - b * H;
    if (j < R) reserve_h[b * rh_cols + j] = h[b * R + j];  // h_{t-1} (R <= H)
    A v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      A x = xp[b * 4 * H + q * H + j];
      if (g != nullptr) x += g[b * 4 * H + q * H + j];
      if (p.b_ih != nullptr) x += to_compute(p.b_ih[q * H + j]);
      if (p.b_hh != nullptr) x += to_compute(p.b_hh[q * H + j]);
      v[q] = x;
    }
    const A cp = c[b * H + j];
    A cn, ht;
    cell_update(v, cp, reserve + b * 5 * H + j, H, cn, ht);
    c[b * H + j] = cn;
    const T hv = from_compute<T>(ht);
    if (htil == nullptr) {
      h[b * R + j] = hv;
      out[b * R + j] = hv;
    } else {
      htil[b * H + j] = hv;
      reserve_h[b * rh_cols + R + j] = hv;
    }
  }
}

// With a projection: the step's output rows out [o, o + n) = h [n, R] (the projection GEMM's).
template <typename T>
__global__ void store_out(int64_t total, int64_t o, int64_t R,
                          const ForwardRows<T>* __restrict__ rows, const T* __restrict__ h) {
  T* out = rows->out + o * R;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x)
    out[k] = h[k];
}

// The backward's per-call inputs and outputs, as ForwardRows.
template <typename T>
struct BackwardRows {
  const T* dy;                   // [N, R]
  const compute_t<T>* reserve;   // [N, 5H]
  T* dgates;                     // [N, 4H]
  T* dhn;                        // [N, R] with a projection, else null
};

// One backward step over the n active rows at row offset o: the gradient on o tanh(c_t) is
// dy + dh (no projection: rows->dy's step rows and dh [n, R], R = H) or dhtil [n, H] (with one);
// c's gradient dc [n, H] is updated to c_{t-1}'s, and the gates' gradients go to gd [n, 4H] (the
// recurrent GEMM's operand) and rows->dgates' step rows. Without a projection dh comes in `parts`
// pieces `part_stride` apart (the recurrent GEMM split over the gates), summed in order for the
// rows the step before wrote (b < n_prev); the other rows' dh is the first piece alone.
template <typename T>
__global__ void cell_backward(int64_t n, int64_t H, int64_t o,
                              const BackwardRows<T>* __restrict__ rows,
                              const compute_t<T>* __restrict__ dh,
                              const compute_t<T>* __restrict__ dhtil,
                              compute_t<T>* __restrict__ dc, T* __restrict__ gd, int parts,
                              int64_t n_prev, int64_t part_stride) {
  using A = compute_t<T>;
  const BackwardRows<T> p = *rows;
  const T* dy = dhtil != nullptr ? nullptr : p.dy + o * H;  // R = H without a projection
  const A* reserve = p.reserve + o * 5 * H;
  T* dgates = p.dgates + o * 4 * H;
  const int64_t total = n * H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / H, j = k - b * H;
    A dhv = 0;
    if (dhtil == nullptr) {
      dhv = dh[k];
      if (b < n_prev)
        for (int q = 1; q < parts; ++q) dhv += dh[q * part_stride + k];
    }
    const A dht = dhtil != nullptr ? dhtil[k] : to_compute(dy[k]) + dhv;
    const A* r = reserve + b * 5 * H + j;
    const A i = r[0], f = r[H], g = r[2 * H], o = r[3 * H], cp = r[4 * H];
    const A tc = tanh(f * cp + i * g);
    const A dcn = dc[k] + dht * o * (A(1) - tc * tc);
    const T d[4] = {from_compute<T>(dcn * g * i * (A(1) - i)),
                    from_compute<T>(dcn * cp * f * (A(1) - f)),
                    from_compute<T>(dcn * i * (A(1) - g * g)),
                    from_compute<T>(dht * tc * o * (A(1) - o))};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      gd[b * 4 * H + q * H + j] = d[q];
      dgates[b * 4 * H + q * H + j] = d[q];
    }
    dc[k] = dcn * f;
  }
}

// With a projection: dhn = dy + dh over the step's n R values, in T (the projection GEMM's
// operand), into gdh [n, R] and rows->dhn's step rows (w_hr's gradient reads them all).
template <typename T>
__global__ void add_rows(int64_t total, int64_t o, int64_t R,
                         const BackwardRows<T>* __restrict__ rows,
                         const compute_t<T>* __restrict__ dh, T* __restrict__ gdh) {
  const T* dy = rows->dy + o * R;
  T* dhn = rows->dhn + o * R;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const T v = from_compute<T>(to_compute(dy[k]) + dh[k]);
    gdh[k] = v;
    dhn[k] = v;
  }
}

// The recurrent GEMM's pieces of dh [parts, ...] summed into the first over its first `total`
// values, in cell_backward's order.
template <typename A>
__global__ void fold_parts(int64_t total, A* __restrict__ dh, int parts, int64_t part_stride) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    A v = dh[k];
    for (int q = 1; q < parts; ++q) v += dh[q * part_stride + k];
    dh[k] = v;
  }
}

// convert(in[k]); in null: 0.
template <typename From, typename To>
__device__ __forceinline__ To converted(const From* in, int64_t k) {
  if (in == nullptr) return from_compute<To>(compute_t<To>(0));
  return from_compute<To>(static_cast<compute_t<To>>(to_compute(in[k])));
}

// out[k] = convert(in[k]); in null: out = 0.
template <typename From, typename To>
__global__ void convert(int64_t total, const From* __restrict__ in, To* __restrict__ out) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x)
    out[k] = converted<From, To>(in, k);
}

// A step loop's start or end in one launch: two conversions as convert's (the states in or out),
// and with `dst`, *dst = rows (the call's pointers, before the loop reads them).
template <typename Rows, typename F1, typename T1, typename F2, typename T2>
__global__ void loop_edge(Rows rows, Rows* __restrict__ dst, int64_t n1, const F1* __restrict__ in1,
                          T1* __restrict__ out1, int64_t n2, const F2* __restrict__ in2,
                          T2* __restrict__ out2) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (dst != nullptr && first == 0) *dst = rows;
  for (int64_t k = first; k < n1 + n2; k += int64_t{gridDim.x} * blockDim.x) {
    if (k < n1) {
      out1[k] = converted<F1, T1>(in1, k);
    } else {
      out2[k - n1] = converted<F2, T2>(in2, k - n1);
    }
  }
}

template <typename T>
__global__ void fill_ones(int64_t total, T* __restrict__ out) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x)
    out[k] = from_compute<T>(compute_t<T>(1));
}

}  // namespace lstm
}  // namespace fastlayers
