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

// One forward step over n active rows. pre [n, 4H]: the gates' pre-activations without biases
// (the input and recurrent GEMMs); c [n, H] the cell state, updated; h [n, R] the hidden state:
// its old rows are saved as h_{t-1} into reserve_h, and without a projection (htil null) the new
// rows go to h and to out [n, R]; with one, o tanh(c_t) goes to htil [n, H] and reserve_h.
template <typename T>
__global__ void cell_forward(int64_t n, int64_t H, int64_t R, const compute_t<T>* __restrict__ pre,
                             const T* __restrict__ b_ih, const T* __restrict__ b_hh,
                             compute_t<T>* __restrict__ c, T* __restrict__ h, T* __restrict__ out,
                             T* __restrict__ htil, compute_t<T>* __restrict__ reserve,
                             T* __restrict__ reserve_h, int64_t rh_cols) {
  using A = compute_t<T>;
  const int64_t total = n * H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / H, j = k - b * H;
    if (j < R) reserve_h[b * rh_cols + j] = h[b * R + j];  // h_{t-1} (R <= H)
    A v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      A x = pre[b * 4 * H + q * H + j];
      if (b_ih != nullptr) x += to_compute(b_ih[q * H + j]);
      if (b_hh != nullptr) x += to_compute(b_hh[q * H + j]);
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

// One backward step over n active rows: the gradient on o tanh(c_t) is dy + dh (no projection:
// dy [n, R] and dh [n, R] with R = H) or dhtil [n, H] (with one); c's gradient dc [n, H] is
// updated to c_{t-1}'s, and the gates' gradients go to dgates [n, 4H].
template <typename T>
__global__ void cell_backward(int64_t n, int64_t H, const T* __restrict__ dy,
                              const compute_t<T>* __restrict__ dh,
                              const compute_t<T>* __restrict__ dhtil,
                              const compute_t<T>* __restrict__ reserve,
                              compute_t<T>* __restrict__ dc, T* __restrict__ dgates) {
  using A = compute_t<T>;
  const int64_t total = n * H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / H, j = k - b * H;
    const A dht = dhtil != nullptr ? dhtil[k] : to_compute(dy[k]) + dh[k];
    const A* r = reserve + b * 5 * H + j;
    const A i = r[0], f = r[H], g = r[2 * H], o = r[3 * H], cp = r[4 * H];
    const A tc = tanh(f * cp + i * g);
    const A dcn = dc[k] + dht * o * (A(1) - tc * tc);
    T* d = dgates + b * 4 * H + j;
    d[0] = from_compute<T>(dcn * g * i * (A(1) - i));
    d[H] = from_compute<T>(dcn * cp * f * (A(1) - f));
    d[2 * H] = from_compute<T>(dcn * i * (A(1) - g * g));
    d[3 * H] = from_compute<T>(dht * tc * o * (A(1) - o));
    dc[k] = dcn * f;
  }
}

// out[k] = dy[k] + dh[k] over n R values, in T (the projection's GEMM operand).
template <typename T>
__global__ void add_rows(int64_t total, const T* __restrict__ dy,
                         const compute_t<T>* __restrict__ dh, T* __restrict__ out) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x)
    out[k] = from_compute<T>(to_compute(dy[k]) + dh[k]);
}

// out[k] = convert(in[k]); in null: out = 0.
template <typename From, typename To>
__global__ void convert(int64_t total, const From* __restrict__ in, To* __restrict__ out) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    if (in == nullptr) {
      out[k] = from_compute<To>(compute_t<To>(0));
    } else {
      out[k] = from_compute<To>(static_cast<compute_t<To>>(to_compute(in[k])));
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
