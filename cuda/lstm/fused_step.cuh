// One forward step of a float16 / bfloat16 layer without a projection in one kernel: the gate
// products h_{t-1} w_hh^T on tensor cores and the cell (cell.cuh's arithmetic) on them in the same
// block, where the step-wise loop runs a cuBLAS GEMM and then cell_forward. A block owns
// kFsUnits hidden units (their four gates: 4 kFsUnits rows of w_hh) for kFsRows batch rows. Its
// 16 warps are 4 groups of 16 batch rows x 4 quarters of H: each multiplies its rows of h_{t-1}
// by the block's gate rows over its quarter (mma.sync m16n8k16, float32 accumulation, as the
// GEMM's), the fragments read straight from memory (L2: the rows were written by the step
// before); the quarters' products, summed in order in shared memory, meet the cell, a thread per
// (row, unit). Blocks read h_{t-1} while others write h_t, so h_t goes to the other of two buffers
// (hn, not hp).
#pragma once

#include <cstdint>

#include "../common/mma.cuh"
#include "cell.cuh"
#include "lstm.h"

namespace fastlayers {
namespace lstm {

constexpr int kFsSplit = 4, kFsThreads = 32 * kFsSplit * (kFsRows / 16);
constexpr int kFsGates = 4 * kFsUnits, kFsLd = kFsGates + 1;  // the products' rows (floats)
static_assert(kFsRows * kFsUnits == kFsThreads, "a (row, unit) pair a thread");
static_assert(kFsUnits == 8, "an 8-row mma tile per gate");

__device__ __forceinline__ uint32_t ld_pair(const void* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Step over the n active rows at row offset o of B: rows < n from hp [B, H] to hn, c [B, H]
// updated in place, the step's out, reserve and reserve_h rows through `rows`; rows n.. B keep
// their h (copied from hp to hn). Grid: (H / kFsUnits, ceil(B / kFsRows)).
template <typename T>
__global__ void __launch_bounds__(kFsThreads)
    fused_step(int64_t n, int64_t B, int64_t H, int64_t o, const ForwardRows<T>* __restrict__ rows,
               const T* __restrict__ w_hh, const T* __restrict__ hp, T* __restrict__ hn,
               float* __restrict__ c) {
  __shared__ float part[kFsSplit * kFsRows * kFsLd];
  const int64_t j0 = int64_t{blockIdx.x} * kFsUnits, b0 = int64_t{blockIdx.y} * kFsRows;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, tq = lane & 3;
  const int64_t live = n - b0 < kFsRows ? n - b0 : kFsRows;  // active rows of this block

  // Warp (group rg, quarter kq): rows 16 rg.., gate tile q = gate q of units j0.. (row gr: unit
  // j0 + gr). Rows past the active ones read the last active row (their products are dropped).
  const int rg = warp % (kFsRows / 16), kq = warp / (kFsRows / 16);
  if (16 * rg < live) {
    const int steps = static_cast<int>(H / 16);
    const int k_begin = 16 * (steps * kq / kFsSplit), k_end = 16 * (steps * (kq + 1) / kFsSplit);
    const int64_t r0 = 16 * rg + gr < live ? 16 * rg + gr : live - 1;
    const int64_t r1 = 16 * rg + gr + 8 < live ? 16 * rg + gr + 8 : live - 1;
    const T* a0 = hp + (b0 + r0) * H + 2 * tq;
    const T* a1 = hp + (b0 + r1) * H + 2 * tq;
    const T* w0 = w_hh + (j0 + gr) * H + 2 * tq;
    float acc[4][4] = {};
#pragma unroll 4
    for (int k0 = k_begin; k0 < k_end; k0 += 16) {
      const uint32_t af[4] = {ld_pair(a0 + k0), ld_pair(a1 + k0), ld_pair(a0 + k0 + 8),
                              ld_pair(a1 + k0 + 8)};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const T* wq = w0 + q * H * H + k0;
        const uint32_t bf[2] = {__ldg(reinterpret_cast<const unsigned int*>(wq)),
                                __ldg(reinterpret_cast<const unsigned int*>(wq + 8))};
        mma16816(acc[q], af, bf, T{});
      }
    }
    // acc[q][i]: row 16 rg + gr (+8 for i >= 2), gate q of unit 2 tq (+1 for odd i)
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        part[(kq * kFsRows + 16 * rg + gr + (i >= 2 ? 8 : 0)) * kFsLd + q * kFsUnits + 2 * tq +
             (i & 1)] = acc[q][i];
  }
  __syncthreads();

  // The cell for (row b, unit u), as cell_forward with the products summed over the quarters in
  // order; rows n.. keep their h.
  const int bl = tid / kFsUnits, u = tid % kFsUnits;
  const int64_t b = b0 + bl, j = j0 + u;
  if (b >= B) return;
  if (b >= n) {
    hn[b * H + j] = hp[b * H + j];
    return;
  }
  const ForwardRows<T> p = *rows;
  const int64_t row = o + b;
  const float* xp = p.xp + row * 4 * H + j;
  float v[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float g = 0.f;
#pragma unroll
    for (int s = 0; s < kFsSplit; ++s) g += part[(s * kFsRows + bl) * kFsLd + q * kFsUnits + u];
    float x = xp[q * H] + g;
    if (p.b_ih != nullptr) x += to_compute(p.b_ih[q * H + j]);
    if (p.b_hh != nullptr) x += to_compute(p.b_hh[q * H + j]);
    v[q] = x;
  }
  p.reserve_h[row * H + j] = hp[b * H + j];  // h_{t-1} (no projection: H columns)
  const float cp = c[b * H + j];
  float cn, ht;
  cell_update(v, cp, p.reserve + row * 5 * H + j, H, cn, ht);
  c[b * H + j] = cn;
  const T hv = from_compute<T>(ht);
  hn[b * H + j] = hv;
  p.out[row * H + j] = hv;
}

}  // namespace lstm
}  // namespace fastlayers
