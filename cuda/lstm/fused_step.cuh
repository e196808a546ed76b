// One forward step of a float16 / bfloat16 layer without a projection in one kernel: the gate
// products h_{t-1} w_hh^T on tensor cores and the cell (cell.cuh's arithmetic) on them in the same
// block, where the step-wise loop runs a cuBLAS GEMM and then cell_forward. A block owns
// kFsUnits hidden units (their four gates: 4 kFsUnits rows of w_hh) for kFsRows batch rows; it
// stages the whole of h_{t-1}'s rows and its w_hh rows in shared memory (cp.async, every load in
// flight at once) and each warp multiplies 16 batch rows by the 4 kFsUnits gate rows (mma.sync
// m16n8k16, float32 accumulation, as the GEMM's); the products meet the cell in shared memory.
// Blocks read h_{t-1} while others write h_t, so h_t goes to the other of two buffers (hn, not hp).
#pragma once

#include <cstdint>

#include "../common/mma.cuh"
#include "cell.cuh"
#include "lstm.h"

namespace fastlayers {
namespace lstm {

constexpr int kFsThreads = 128;  // 4 warps of 16 rows (kFsRows)
constexpr int kFsGates = 4 * kFsUnits;
static_assert(kFsRows == 16 * (kFsThreads / 32), "a warp per 16 batch rows");
static_assert(kFsRows * kFsUnits % kFsThreads == 0, "whole (row, unit) pairs a thread");

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
  float* g_s = reinterpret_cast<float*>(w_s + kFsGates * ld);  // [kFsRows, kFsGates + 1]
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

  // Warp w: batch rows 16 w.., all kFsGates gate rows (kFsGates / 8 tiles of 8).
  if (16 * warp < live) {
    float acc[kFsGates / 8][4] = {};
    const T* ha = h_s + (16 * warp + gr) * ld + 2 * tq;
    const T* wb = w_s + gr * ld + 2 * tq;
    for (int k0 = 0; k0 < static_cast<int>(H); k0 += 16) {
      uint32_t af[4];
      load_a(af, ha + k0, static_cast<int>(ld));
#pragma unroll
      for (int nt = 0; nt < kFsGates / 8; ++nt) {
        uint32_t bf[2];
        load_b(bf, wb + nt * 8 * ld + k0);
        mma16816(acc[nt], af, bf, T{});
      }
    }
#pragma unroll
    for (int nt = 0; nt < kFsGates / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        g_s[(16 * warp + gr + (i >= 2 ? 8 : 0)) * (kFsGates + 1) + nt * 8 + 2 * tq + (i & 1)] =
            acc[nt][i];
  }
  __syncthreads();

  // The cell for (row b, unit u), as cell_forward with g from g_s; rows n.. keep their h. A
  // thread's pairs load their pre-activations first, all at once (xp comes from memory).
  const ForwardRows<T> p = *rows;
  const float* __restrict__ xp = p.xp;
  constexpr int kPer = kFsRows * kFsUnits / kFsThreads;
  float v[kPer][4];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int k = tid + i * kFsThreads, bl = k / kFsUnits, u = k % kFsUnits;
    const int64_t b = b0 + bl, j = j0 + u;
    if (b >= n || j >= H) continue;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float x = xp[(o + b) * 4 * H + q * H + j] + g_s[bl * (kFsGates + 1) + q * kFsUnits + u];
      if (p.b_ih != nullptr) x += to_compute(p.b_ih[q * H + j]);
      if (p.b_hh != nullptr) x += to_compute(p.b_hh[q * H + j]);
      v[i][q] = x;
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int k = tid + i * kFsThreads, bl = k / kFsUnits, u = k % kFsUnits;
    const int64_t b = b0 + bl, j = j0 + u;
    if (b >= B || j >= H) continue;
    if (b >= n) {
      hn[b * H + j] = hp[b * H + j];
      continue;
    }
    const int64_t row = o + b;
    p.reserve_h[row * H + j] = hp[b * H + j];  // h_{t-1} (no projection: H columns)
    const float cp = c[b * H + j];
    float cn, ht;
    cell_update(v[i], cp, p.reserve + row * 5 * H + j, H, cn, ht);
    c[b * H + j] = cn;
    const T hv = from_compute<T>(ht);
    hn[b * H + j] = hv;
    p.out[row * H + j] = hv;
  }
}

}  // namespace lstm
}  // namespace fastlayers
