// The float32 persistent forward with w_hh's rows in registers ("grid-registers"), its geometry
// and its instantiations (persistent.cu plans and launches it).
#pragma once
#include <cooperative_groups.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "../common/async_copy.cuh"
#include "persistent_grid.cuh"

namespace fastlayers {
namespace lstm {
namespace {

namespace cg = cooperative_groups;
// The 32 values of every lane summed over the warp, scattered: lane l returns the sum of value l
// (a butterfly that halves the values each level: 31 shuffles for 32 sums instead of 160).
template <int N>
__device__ __forceinline__ void scatter_level(float* v, int lane) {
  if constexpr (N > 1) {
    constexpr int half = N / 2;
    const bool upper = (lane & half) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? v[i] : v[i + half];
      const float keep = upper ? v[i + half] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, half);
    }
    scatter_level<half>(v, lane);
  }
}

// Float32 where a block's rows of w_hh fit its registers (U H = 1024 KC, KC 1, 2 or 4: hidden
// 512 at 4 or 8 units a block, 256 at 4, 128 at 8). The grid kernel above reads each weight from
// shared memory for every four batch rows and h_{t-1} through L2 a few loads in flight at a time:
// at hidden 512 and batch 64 on an H100 its step took 34 us. Here the weights stay in registers
// for the whole sequence: a warp holds 4 gate rows (a row tile) over 32 slices of H, KC chunks of
// 4 columns a lane (chunk s + 32 W c of lane s, so a warp's 16-byte loads of h are consecutive);
// W = 8 / U warps share a row tile. Each lane multiplies every batch row's slice by its rows, 16
// products a 16-byte load; a group of 8 batch rows gives a lane 32 partial sums (8 rows x 4 gate
// rows), summed over the warp by scatter_level, and the W warps of a row tile through shared
// memory in warp order, so the result does not depend on timing. h_{t-1} arrives by 16-byte
// cp.async through L2, one commit group per group of batch rows, so a group multiplies while the
// later ones load. Every block reads all of its batch rows' h_{t-1} each step: at batch 32 and
// above the batch is split in two halves (grid: halves x blocks of units, twice the units a
// block), which halves that traffic for the same products a block.
constexpr int kRegRows = 4;   // gate rows a lane holds
constexpr int kRegBatch = 8;  // batch rows a product group: kRegRows kRegBatch = 32 sums a lane
constexpr int kRegSplitBatch = 32;  // batches from which the rows are split in two halves

__host__ __device__ inline int reg_warps(int U) { return kWarps / U; }
__host__ __device__ inline int reg_rows(int B, int parts) { return (B + parts - 1) / parts; }

inline size_t reg_smem_bytes(int64_t B, int64_t H, int U, int parts) {
  // h_s [nb, H] float | part_s [W - 1, nb, 4U] float | the tail, nb rows a block
  const int64_t nb = reg_rows(static_cast<int>(B), parts);
  return (nb * H + (reg_warps(U) - 1) * nb * 4 * U) * sizeof(float) + tail_bytes(nb, U);
}

inline bool reg_kc_ok(int64_t U, int64_t H) {
  const int64_t kc = U * H / 1024;
  return U <= kWarps && U * H % 1024 == 0 && (kc == 1 || kc == 2 || kc == 4);
}

// Units a block for the register kernel at H on `sms` SMs, or 0 where none serves: the least
// power of two up to kWarps (a row tile at least a warp) that spreads H over the SMs with KC a
// power of two up to 4.
inline int reg_units(int64_t H, int sms) {
  for (int U = 1; U <= kWarps; U *= 2)
    if (static_cast<int64_t>(U) * sms >= H && reg_kc_ok(U, H)) return U;
  return 0;
}

// Waits until at most n of this thread's cp.async groups are pending (at most 7: a stricter wait
// above, which is still correct).
__device__ __forceinline__ void wait_pending(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

template <int KC>
__global__ void __launch_bounds__(kPThreads, 1) persistent_forward_reg_kernel(const Args<float> args) {
  const auto& [steps, B, H, U, reverse, xp, b_ih, b_hh, w_hh, h0, c0, hbuf, out, h_n, c_n,
               reserve, reserve_h] = args;
  extern __shared__ __align__(16) unsigned char smem[];
  const int W = reg_warps(U), lanes = 32 * W;  // warps a row tile; slices of H
  const int ublocks = (H + U - 1) / U, parts = static_cast<int>(gridDim.x) / ublocks;
  const int ub = static_cast<int>(blockIdx.x) % ublocks, bp = static_cast<int>(blockIdx.x) / ublocks;
  const int nbp = reg_rows(B, parts), b0 = bp * nbp;
  const Slice sl{B, H, U, ub * U, min(U, H - ub * U), b0, max(0, min(nbp, B - b0))};
  float* h_s = reinterpret_cast<float*>(smem);
  float* part_s = h_s + nbp * H;
  const Tail tl(part_s + (W - 1) * nbp * 4 * U, sl);
  cg::grid_group grid = cg::this_grid();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rt = warp / W, wi = warp - rt * W, s = wi * 32 + lane;

  // w[j][4 c + e] = w_hh row (gate q, unit u0 + u) for block row rt 4 + j = q U + u, column
  // 4 (s + lanes c) + e; zeros for units past H.
  float w[kRegRows][4 * KC];
#pragma unroll
  for (int j = 0; j < kRegRows; ++j) {
    const int r = rt * kRegRows + j, q = r / U, u = r - q * U;
#pragma unroll
    for (int c = 0; c < KC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        w[j][4 * c + e] = u < sl.nu ? w_hh[(static_cast<int64_t>(q) * H + sl.u0 + u) * H +
                                           4 * (s + lanes * c) + e]
                                    : 0.f;
  }
  load_state(sl, tl, c0, b_ih, b_hh);

  const int64_t BH = static_cast<int64_t>(B) * H;
  const int groups = (sl.nb + kRegBatch - 1) / kRegBatch, chunks = H / 4;
  const bool h0_aligned = (reinterpret_cast<uintptr_t>(h0) & 15) == 0;  // a view may not be
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t t = reverse ? steps - 1 - step : step;
    const float* hp = (step == 0 ? h0 : hbuf + ((step - 1) & 1) * BH) + static_cast<int64_t>(b0) * H;
    float* hn = hbuf + (step & 1) * BH;
    const bool vec = step > 0 || h0_aligned;
    if (vec) {  // .cg: through L2, as other blocks wrote it; a commit group per product group
      for (int g = 0; g < groups; ++g) {
        const int n = min(kRegBatch, sl.nb - g * kRegBatch) * chunks, at = g * kRegBatch * H;
        for (int k = tid; k < n; k += kPThreads) cp_async16(h_s + at + 4 * k, hp + at + 4 * k);
        cp_async_commit();
      }
    } else {
      for (int k = tid; k < sl.nb * H; k += kPThreads) h_s[k] = load_cg(hp + k);
    }
    // The inputs, needed only by the cell, queue behind h_{t-1} (their group is the newest).
    stage_inputs(sl, tl, xp, t);
    for (int g = 0; g < groups; ++g) {
      wait_pending(vec ? groups - g : 0);
      __syncthreads();
      const int i0 = g * kRegBatch;
      float acc[kRegRows * kRegBatch];
#pragma unroll
      for (int i = 0; i < kRegRows * kRegBatch; ++i) acc[i] = 0.f;
#pragma unroll
      for (int i = 0; i < kRegBatch; ++i) {
        if (i0 + i < sl.nb) {
          const float* hr = h_s + (i0 + i) * H;
#pragma unroll
          for (int c = 0; c < KC; ++c) {
            const float4 h = *reinterpret_cast<const float4*>(hr + 4 * (s + lanes * c));
#pragma unroll
            for (int j = 0; j < kRegRows; ++j) {
              float a = acc[i * kRegRows + j];
              a = fmaf(w[j][4 * c], h.x, a);
              a = fmaf(w[j][4 * c + 1], h.y, a);
              a = fmaf(w[j][4 * c + 2], h.z, a);
              a = fmaf(w[j][4 * c + 3], h.w, a);
              acc[i * kRegRows + j] = a;
            }
          }
        }
      }
      scatter_level<kRegRows * kRegBatch>(acc, lane);
      // lane l: local batch row i0 + l / 4, block row rt 4 + l % 4
      const int i = i0 + lane / kRegRows, r = rt * kRegRows + lane % kRegRows;
      if (i < sl.nb) (wi == 0 ? tl.pre : part_s + (wi - 1) * nbp * 4 * U)[i * 4 * U + r] = acc[0];
    }
    inputs_arrived();
    __syncthreads();
    if (W > 1) {
      for (int k = tid; k < sl.nb * 4 * U; k += kPThreads) {
        float v = tl.pre[k];
        for (int i = 1; i < W; ++i) v += part_s[(i - 1) * nbp * 4 * U + k];
        tl.pre[k] = v;
      }
      __syncthreads();
    }
    cell_step(sl, tl, step, steps, t, b_ih != nullptr, b_hh != nullptr,
              [h_s, ld = args.H](int i, int j) { return h_s[i * ld + j]; }, out, hn, h_n, c_n,
              reserve, reserve_h);
    grid.sync();  // h_t of every unit written before any block reads it
  }
}

// The instantiation for U units a block at H (reg_kc_ok(U, H) holds).
inline const void* reg_kernel_for(int U, int64_t H) {
  switch (U * H / 1024) {
    case 1: return reinterpret_cast<const void*>(persistent_forward_reg_kernel<1>);
    case 2: return reinterpret_cast<const void*>(persistent_forward_reg_kernel<2>);
    case 4: return reinterpret_cast<const void*>(persistent_forward_reg_kernel<4>);
    default: throw std::logic_error("fastlayers: no register kernel for these units and H");
  }
}

}  // namespace
}  // namespace lstm
}  // namespace fastlayers
