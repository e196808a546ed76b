// One forward step of a float16 / bfloat16 layer without a projection in one kernel: the gate
// products h_{t-1} w_hh^T on tensor cores and the cell (cell.cuh's arithmetic) on them in the same
// block, where the step-wise loop runs a cuBLAS GEMM and then cell_forward. A block owns
// kFsUnits hidden units (their four gates: 4 kFsUnits rows of w_hh) for kFsRows batch rows; it
// stages the whole of h_{t-1}'s rows and its w_hh rows in shared memory (cp.async, every load in
// flight at once) and its warps multiply 16 batch rows each by the 4 kFsUnits gate rows over a
// quarter of H (mma.sync
// m16n8k16, float32 accumulation, as the GEMM's); the quarters' products meet the cell in shared
// memory.
// Blocks read h_{t-1} while others write h_t, so h_t goes to the other of two buffers (hn, not hp).
#pragma once

#include <cstdint>

#include "../common/mma.cuh"
#include "cell.cuh"
#include "lstm.h"

namespace fastlayers {
namespace lstm {

// 16 warps: 4 groups of 16 batch rows (kFsRows) x 4 quarters of H, summed at the end: one block of
// 4 warps per SM left each warp's 32 k16 steps and its cells in sequence (15 us a step at 512/64
// on an H200, against nn.LSTM's 6.6).
constexpr int kFsSplit = 4, kFsThreads = 32 * kFsSplit * (kFsRows / 16);
constexpr int kFsGates = 4 * kFsUnits, kFsLd = kFsGates + 1;  // the products' rows (floats)
static_assert(kFsRows * kFsUnits == kFsThreads, "a (row, unit) pair a thread");

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}

// Step over the n active rows at row offset o of B: rows < n from hp [B, H] to hn, c [B, H]
// updated in place, the step's out, reserve and reserve_h rows through `rows`; rows n.. B keep
// their h (copied from hp to hn). Grid: (ceil(H / kFsUnits), ceil(B / kFsRows)).
template <typename T>
__global__ void __launch_bounds__(kFsThreads)
    fused_step(int64_t n, int64_t B, int64_t H, int64_t o, const ForwardRows<T>* __restrict__ rows,
               const T* __restrict__ w_hh, const T* __restrict__ hp, T* __restrict__ hn,
               float* __restrict__ c) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t ld = H + 8;  // fused_step_smem's rows
  T* h_s = reinterpret_cast<T*>(smem);
  T* w_s = h_s + kFsRows * ld;
  const int64_t j0 = int64_t{blockIdx.x} * kFsUnits, b0 = int64_t{blockIdx.y} * kFsRows;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, tq = lane & 3;
  const int64_t live = n - b0 < kFsRows ? n - b0 : kFsRows;  // active rows of this block (<= 0: none)

  // Stage h_{t-1}'s active rows and this block's gate rows (row q kFsUnits + u: gate q of unit
  // j0 + u), 16 bytes a copy, a warp per row (no index division); rows past the data read as
  // zeros.
  const int vec = static_cast<int>(H / 8);
  if (live > 0) {
    for (int r = warp; r < kFsRows + kFsGates; r += kFsThreads / 32) {
      const T* src = nullptr;
      if (r < kFsRows) {
        if (r < live) src = hp + (b0 + r) * H;
      } else {
        const int q = (r - kFsRows) / kFsUnits, u = (r - kFsRows) % kFsUnits;
        if (j0 + u < H) src = w_hh + (q * H + j0 + u) * H;
      }
      T* dst = h_s + r * ld;  // w_s follows h_s: row r >= kFsRows is w_s's r - kFsRows
      for (int v = lane; v < vec; v += 32) {
        if (src != nullptr) {
          cp_async16(dst + 8 * v, src + 8 * v);
        } else {
          *reinterpret_cast<uint4*>(dst + 8 * v) = make_uint4(0, 0, 0, 0);
        }
      }
    }
    asm volatile("cp.async.commit_group;\n");
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  }
  __syncthreads();

  // Warp (group rg, quarter kq): batch rows 16 rg.. over its quarter of the k16 steps, all
  // kFsGates gate rows (kFsGates / 8 tiles of 8).
  const int rg = warp % (kFsRows / 16), kq = warp / (kFsRows / 16);
  const bool busy = 16 * rg < live;
  float acc[kFsGates / 8][4] = {};
  if (busy) {
    const int steps = static_cast<int>(H / 16);
    const int k_begin = 16 * (steps * kq / kFsSplit), k_end = 16 * (steps * (kq + 1) / kFsSplit);
    const T* ha = h_s + (16 * rg + gr) * ld + 2 * tq;
    const T* wb = w_s + gr * ld + 2 * tq;
    for (int k0 = k_begin; k0 < k_end; k0 += 16) {
      uint32_t af[4];
      load_a(af, ha + k0, static_cast<int>(ld));
#pragma unroll
      for (int nt = 0; nt < kFsGates / 8; ++nt) {
        uint32_t bf[2];
        load_b(bf, wb + nt * 8 * ld + k0);
        mma16816(acc[nt], af, bf, T{});
      }
    }
  }
  __syncthreads();  // the staged rows are read: the quarters' products take their place
  float* part = reinterpret_cast<float*>(smem);  // [kFsSplit, kFsRows, kFsLd]
  if (busy) {
#pragma unroll
    for (int nt = 0; nt < kFsGates / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        part[(kq * kFsRows + 16 * rg + gr + (i >= 2 ? 8 : 0)) * kFsLd + nt * 8 + 2 * tq + (i & 1)] =
            acc[nt][i];
  }
  __syncthreads();

  // The cell for (row b, unit u), as cell_forward with the products summed over the quarters in
  // order; rows n.. keep their h.
  const ForwardRows<T> p = *rows;
  const int bl = tid / kFsUnits, u = tid % kFsUnits;
  const int64_t b = b0 + bl, j = j0 + u;
  if (b >= B || j >= H) return;
  if (b >= n) {
    hn[b * H + j] = hp[b * H + j];
    return;
  }
  const int64_t row = o + b;
  float v[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float g = 0.f;
#pragma unroll
    for (int s = 0; s < kFsSplit; ++s) g += part[(s * kFsRows + bl) * kFsLd + q * kFsUnits + u];
    float x = p.xp[row * 4 * H + q * H + j] + g;
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
