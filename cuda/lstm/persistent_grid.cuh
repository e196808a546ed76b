// What the cooperative (grid) persistent forward kernels share: the block's slice of units and
// batch rows, its shared-memory tail, the state and input loads and the cell of one step, and their
// arguments (persistent.cu, persistent_registers.cuh).
#pragma once
#include <cooperative_groups.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "../common/async_copy.cuh"
#include "sequence.cuh"

namespace fastlayers {
namespace lstm {
namespace {

namespace cg = cooperative_groups;

constexpr int kPThreads = 256;
constexpr int kWarps = kPThreads / 32;
constexpr int kRowBatch = 4;  // batch rows a warp's dot products share one weight load across

// h_{t-1} written by other blocks in this launch: read through L2 (ld.global.cg), never a stale
// L1 line.
__device__ __forceinline__ float load_cg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float load_cg(const __half* p) {
  return __half2float(__ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ float load_cg(const __nv_bfloat16* p) {
  return __bfloat162float(
      __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}

struct Geometry {
  int units;   // hidden units per block
  int blocks;  // ceil(H / units) times the batch parts (the register kernel: 1 or 2)
  size_t smem;
  const void* kernel = nullptr;
};

// Shared memory both kernels end with: pre_s [B, 4 units] (the gate products), xs_s [B, 4 units]
// (the step's input products), c_s [B, units] (the cell state), bias_s [2, 4 units] (b_ih, b_hh).
inline size_t tail_bytes(int64_t B, int units) {
  return (2 * B * 4 * units + B * units + 2 * 4 * units) * sizeof(float);
}

template <typename T>
size_t smem_bytes(int64_t B, int64_t H, int units) {
  // w_s [4 units, H] T | h_s [B, H] float | the tail
  return (4 * units * H * sizeof(T) + 15) / 16 * 16 + B * H * 4 + tail_bytes(B, units);
}

// The block's view of one layer: its units u0 .. u0 + nu of H, U per block, and its batch rows
// b0 .. b0 + nb of B (all of them but in the register kernel's batch halves). Shared memory holds
// the block's rows only: local row i is batch row b0 + i.
struct Slice {
  int B, H, U, u0, nu, b0, nb;
};

// The tail of shared memory (tail_bytes(nb, U)) at `base`.
struct Tail {
  float *pre, *xs, *c, *bias;
  __device__ Tail(float* base, const Slice& sl)
      : pre(base), xs(base + sl.nb * 4 * sl.U), c(xs + sl.nb * 4 * sl.U), bias(c + sl.nb * sl.U) {}
};

// Before the first step: the cell state from c0 and the biases (zeros where absent) of the
// block's units.
template <typename T>
__device__ void load_state(const Slice& sl, const Tail& tl, const T* c0, const T* b_ih,
                           const T* b_hh) {
  for (int k = threadIdx.x; k < sl.nb * sl.nu; k += kPThreads) {
    const int i = k / sl.nu, u = k - i * sl.nu;
    tl.c[i * sl.U + u] = to_compute(c0[static_cast<int64_t>(sl.b0 + i) * sl.H + sl.u0 + u]);
  }
  for (int k = threadIdx.x; k < 2 * 4 * sl.nu; k += kPThreads) {
    const int which = k / (4 * sl.nu), r = k - which * 4 * sl.nu, q = r / sl.nu, u = r - q * sl.nu;
    const T* bias = which == 0 ? b_ih : b_hh;
    tl.bias[which * 4 * sl.U + q * sl.U + u] =
        bias != nullptr ? to_compute(bias[q * sl.H + sl.u0 + u]) : 0.f;
  }
}

// Step t's input products of the block's units, xp[t B + b, q H + u0 + u] -> xs[i, q U + u], by
// cp.async: issued at the step's start, they arrive while h_{t-1} loads and multiplies (a global
// round trip off each step's critical path). Waited for before the barrier ahead of the cell.
__device__ __forceinline__ void stage_inputs(const Slice& sl, const Tail& tl, const float* xp,
                                             int64_t t) {
  const int per_b = 4 * sl.nu;
  for (int k = threadIdx.x; k < sl.nb * per_b; k += kPThreads) {
    const int i = k / per_b, r = k - i * per_b, q = r / sl.nu, u = r - q * sl.nu;
    cp_async4(tl.xs + i * 4 * sl.U + q * sl.U + u,
              xp + (t * sl.B + sl.b0 + i) * 4 * sl.H + q * sl.H + sl.u0 + u);
  }
  cp_async_commit();
}
__device__ __forceinline__ void inputs_arrived() { cp_async_wait<0>(); }

// The cell of the block's units at step `step` (time t), as cell_forward: the input and gate
// products, then the biases, then the gates; writes the reserve, h_t (out, the exchange buffer
// hn, h_n at the last step) and c. `h_prev(i, j)`: h_{t-1}[b0 + i, j] in T (exact).
template <typename T, typename HPrev>
__device__ void cell_step(const Slice& sl, const Tail& tl, int64_t step, int64_t steps, int64_t t,
                          bool has_b_ih, bool has_b_hh, HPrev h_prev, T* out, T* hn, T* h_n,
                          T* c_n, float* reserve, T* reserve_h) {
  const int B = sl.B, H = sl.H, U = sl.U, nu = sl.nu;
  for (int k = threadIdx.x; k < sl.nb * nu; k += kPThreads) {
    const int i = k / nu, u = k - i * nu, j = sl.u0 + u, b = sl.b0 + i;
    const int64_t row = t * B + b;
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float x = tl.xs[i * 4 * U + q * U + u] + tl.pre[i * 4 * U + q * U + u];
      if (has_b_ih) x += tl.bias[q * U + u];
      if (has_b_hh) x += tl.bias[4 * U + q * U + u];
      v[q] = x;
    }
    float cn, ht;
    cell_update(v, tl.c[i * U + u], reserve + row * 5 * H + j, H, cn, ht);
    tl.c[i * U + u] = cn;
    reserve_h[row * H + j] = h_prev(i, j);
    const T hv = from_compute<T>(ht);
    out[row * H + j] = hv;
    hn[static_cast<int64_t>(b) * H + j] = hv;
    if (step == steps - 1) {
      h_n[static_cast<int64_t>(b) * H + j] = hv;
      c_n[static_cast<int64_t>(b) * H + j] = from_compute<T>(cn);
    }
  }
}

// Both kernels' arguments: xp [T B, 4H] (the input GEMM's products), w_hh [4H, H]; hbuf
// [2, B, H] (the h exchange); out [T, B, H]; reserve [T B, 5H]; reserve_h [T B, H]; U units a
// block.
template <typename T>
struct Args {
  int64_t steps;
  int B, H, U;
  bool reverse;
  const float* xp;
  const T *b_ih, *b_hh, *w_hh, *h0, *c0;
  T *hbuf, *out, *h_n, *c_n;
  float* reserve;
  T* reserve_h;
};

}  // namespace
}  // namespace lstm
}  // namespace fastlayers
