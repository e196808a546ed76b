// A prototype, measured by wino_pi.cu and not part of the library (docs/winograd.md, "Where not,
// and why"): the Winograd products and the inverse transform in one kernel (forward and input
// gradient, 16-bit storage). The non-fused pipeline's transforms (FilterJob, TileJob) write U and V
// to memory, and one kernel multiplies them and applies A^T M A where the products are, so the
// products M (float32, 2.25x the result's values at F(4x4, 3x3), read and written once each) never
// go through memory.
//
// A block computes BM result channels x BN tiles at all alpha^2 points, reduced over the
// reduction channels in chunks of BK: U's rows (the forward: U [xi] [Mo, R]; the input gradient:
// U [xi] [R, Mo], read transposed) and V's (V [xi] [R, P]) of one row of alpha points a stage,
// the stages 16-byte cp.async copies kStages - 1 ahead. The result tiles' A^T M A is linear in M,
// so the point rows run in turn: a warp's accumulators hold one row's alpha points for its 16 x 16
// (channel, tile) share, and at the row's end each (channel, tile) adds that row's part of the
// 4 x 4 result (Y += A^T[:, a] (M[a, :] A)) to Y, which stays in registers (16 values per pair at
// F(4x4, 3x3)) until the item's end, where the bias is added and the tiles stored, clipped.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/async_copy.cuh"
#include "common/mma.cuh"
#include "common/storage.h"
#include "winograd/fused.cuh"  // Pack: two values into a 32-bit word
#include "winograd/transforms.cuh"

namespace fastlayers {
namespace winograd {
namespace pi {

constexpr int kBM = 64, kBN = 32, kBK = 32, kThreads = 256, kStages = 5;


template <typename T>
struct Args {
  // Rows of U and V by 16-byte copies: ldu and ldv multiples of 8 values, U and V 16-byte aligned.
  const T* U;     // [alpha^2, u_rows, ldu]: the forward [xi, Mo, R], the input gradient [xi, R, Mo]
  const T* V;     // [alpha^2, R, ldv]
  const T* bias;  // [Mo] or null
  T* out;         // [n, Mo, oh, ow]
  int64_t Mo, R, P, ldu, ldv, u_rows;
  TileTarget dst;
  int blocks_m;
  // The result tiles' rows by vector stores: vec16, two tiles' rows side by side (16 bytes: ow a
  // multiple of 8, out 16-byte aligned); vec8, a tile's row (8 bytes: ow a multiple of 4).
  bool vec16, vec8;
};

// 16 bytes from gmem to shared address `dst`, or zeros where `in` is false (nothing is read, so
// gmem may then lie outside the operand).
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* gmem, bool in) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(in ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Stage layouts (16-bit values), 16-byte chunks of a row swizzled so that ldmatrix's 8 rows fall
// in 8 distinct chunks of 128 bytes: U forward [b][m 64][k 32] (64-byte rows, chunk ^ (m / 2) % 4),
// U input gradient [b][k 32][m 64] (128-byte rows, chunk ^ k % 8), V [b][k 32][n 32] (chunk ^
// (k / 2) % 4).
template <int A>
struct Stage {
  static constexpr int kU = A * kBM * kBK, kV = A * kBK * kBN, kAll = kU + kV;
  static constexpr size_t bytes(int stages) { return size_t{2} * stages * kAll; }
};

// kDiag (prototype timing): bit 0 no U copies, bit 1 no V copies, bit 2 no products.
template <typename T, typename Mat, bool kInputGrad, int kDiag = 0>
__global__ void __launch_bounds__(kThreads, 1) kernel(Args<T> g) {
  constexpr int A = Mat::kAlpha, m = Mat::kM;
  using St = Stage<A>;
  static_assert(A % 2 == 0, "V's copies: A / 2 a thread");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const Us = reinterpret_cast<T*>(smem_raw);
  T* const Vs = Us + kStages * St::kU;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int bm = static_cast<int>(blockIdx.x % g.blocks_m);
  const int64_t bp = blockIdx.x / g.blocks_m;
  const int64_t m0 = int64_t{bm} * kBM, p0 = bp * kBN;
  const int nk = static_cast<int>((g.R + kBK - 1) / kBK);
  const int total = A * nk;

  // Copies: thread tid, U: point j's row/chunk (constant over j); V: points 2 j + tid / 128. The
  // next stage's sources advance by a chunk, or to the next point row.
  const int64_t point_u = g.u_rows * g.ldu, point_v = g.R * g.ldv;
  int u_row, u_chunk, u_soff;
  if constexpr (kInputGrad) {
    u_row = tid >> 3;  // k
    u_chunk = tid & 7;  // m / 8
    u_soff = u_row * kBM + 8 * (u_chunk ^ (u_row & 7));
  } else {
    u_row = tid >> 2;  // m
    u_chunk = tid & 3;  // k / 8
    u_soff = u_row * kBK + 8 * (u_chunk ^ ((u_row >> 1) & 3));
  }
  const int v_row = (tid & 127) >> 2, v_chunk = tid & 3, v_b = tid >> 7;
  const int v_soff = v_b * (kBK * kBN) + v_row * kBN + 8 * (v_chunk ^ ((v_row >> 1) & 3));
  const bool v_p_in = p0 + 8 * v_chunk < g.P;
  const T* const v_base = g.V + v_b * point_v + v_row * g.ldv + p0 + 8 * v_chunk;
  bool u_m_in;
  const T* u_base;
  int u_r;  // the reduction index of this thread's copy, from the chunk's first
  if constexpr (kInputGrad) {
    u_m_in = m0 + 8 * u_chunk < g.Mo;
    u_base = g.U + int64_t{u_row} * g.ldu + m0 + 8 * u_chunk;
    u_r = u_row;
  } else {
    u_m_in = m0 + u_row < g.Mo;
    u_base = g.U + (m0 + u_row) * g.ldu + 8 * u_chunk;
    u_r = 8 * u_chunk;
  }
  const int64_t u_kstep = kInputGrad ? kBK * g.ldu : kBK, v_kstep = kBK * g.ldv;
  const uint32_t us_dst = smem_addr(Us + u_soff), vs_dst = smem_addr(Vs + v_soff);
  const int R = static_cast<int>(g.R);
  const T* u_next = u_base;
  const T* v_next = v_base;
  int next_a = 0, next_kc = 0;
  auto load_next = [&](int slot) {
    const int r0 = next_kc * kBK;
    const bool uin = u_m_in && r0 + u_r < R, vin = v_p_in && r0 + v_row < R;
    const uint32_t ud = us_dst + slot * (St::kU * 2), vd = vs_dst + slot * (St::kV * 2);
#pragma unroll
    for (int j = 0; j < A; ++j)
      if constexpr (!(kDiag & 1))
        cp_async16_zfill(ud + j * (kBM * kBK * 2), u_next + j * point_u, uin);
#pragma unroll
    for (int j = 0; j < A / 2; ++j)
      if constexpr (!(kDiag & 2))
        cp_async16_zfill(vd + j * (2 * kBK * kBN * 2), v_next + 2 * j * point_v, vin);
    if (++next_kc == nk) {
      next_kc = 0;
      ++next_a;
      u_next = u_base + next_a * (A * point_u);
      v_next = v_base + next_a * (A * point_v);
    } else {
      u_next += u_kstep;
      v_next += v_kstep;
    }
  };

  // Fragment addresses (values from a stage's start) for point b = 0, k-step kk = 0; +b * (BM BK)
  // or (BK BN); kk moves the chunk (forward U, V: xor'd) or the row (input gradient U).
  const int wm = warp & 3, wn = warp >> 2;
  const int li = lane >> 3, lr = lane & 7;
  int a_off[2], b_off[2];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    if constexpr (kInputGrad) {
      const int k = 16 * kk + lr + 8 * (li >> 1);
      a_off[kk] = k * kBM + 8 * ((2 * wm + (li & 1)) ^ (k & 7));
    } else {
      const int mm = 16 * wm + lr + 8 * (li & 1);
      a_off[kk] = mm * kBK + 8 * ((2 * kk + (li >> 1)) ^ ((mm >> 1) & 3));
    }
    const int k = 16 * kk + lr + 8 * (li & 1);
    b_off[kk] = k * kBN + 8 * ((2 * wn + (li >> 1)) ^ ((k >> 1) & 3));
  }

  float acc[A][2][4];
  float y[2][4][m][m];
#pragma unroll
  for (int b = 0; b < A; ++b)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[b][nt][r] = 0.f;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int i = 0; i < m; ++i)
#pragma unroll
        for (int j = 0; j < m; ++j) y[nt][r][i][j] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < total) load_next(s);
    cp_async_commit();
  }
  int slot = 0, load_slot = kStages - 1, kc = 0, a = 0;
  for (int s = 0; s < total; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (s + kStages - 1 < total) load_next(load_slot);
    cp_async_commit();
    load_slot = load_slot == kStages - 1 ? 0 : load_slot + 1;
    const T* const us = Us + slot * St::kU;
    const T* const vs = Vs + slot * St::kV;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
#pragma unroll
      for (int b = 0; b < A; ++b) {
        uint32_t af[4], bf[4];
        if constexpr (kInputGrad)
          ldmatrix_x4_trans(af, us + b * (kBM * kBK) + a_off[kk]);
        else
          ldmatrix_x4(af, us + b * (kBM * kBK) + a_off[kk]);
        ldmatrix_x4_trans(bf, vs + b * (kBK * kBN) + b_off[kk]);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        if constexpr ((kDiag & 4) != 0) {
          acc[b][0][0] += __uint_as_float(af[0] ^ bf[0]);
          continue;
        }
        mma16816(acc[b][0], af, b0, T{});
        mma16816(acc[b][1], af, b1, T{});
      }
    slot = slot == kStages - 1 ? 0 : slot + 1;
    if (++kc == nk) {
      kc = 0;
      // Row a's part of each result tile: Y += A^T[:, a] (M[a, :] A).
      float col[m];
#pragma unroll
      for (int i = 0; i < m; ++i) {
        col[i] = 0.f;
#pragma unroll
        for (int aa = 0; aa < A; ++aa)
          if (aa == a) col[i] = static_cast<float>(Mat::AT(i, aa));
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          float z[m];
#pragma unroll
          for (int j = 0; j < m; ++j) {
            float sum = 0.f;
#pragma unroll
            for (int b = 0; b < A; ++b)
              if (Mat::AT(j, b) != 0.0) sum += acc[b][nt][r] * static_cast<float>(Mat::AT(j, b));
            z[j] = sum;
          }
#pragma unroll
          for (int i = 0; i < m; ++i)
#pragma unroll
            for (int j = 0; j < m; ++j) y[nt][r][i][j] += col[i] * z[j];
#pragma unroll
          for (int b = 0; b < A; ++b) acc[b][nt][r] = 0.f;
        }
      ++a;
    }
  }
  cp_async_wait<0>();

  // The result tiles: accumulator r of n-tile nt is channel 16 wm + g (+8 for r >= 2), tile
  // 16 wn + 8 nt + 2 t (+1 for odd r): a lane holds tiles p (even) and p + 1 of two channels.
  const int gq = lane >> 2, tq = lane & 3;
  const TileTarget& d = g.dst;
  const int64_t tiles = d.th * d.tw;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int64_t ch = m0 + 16 * wm + gq + 8 * rr;
      const int64_t p = p0 + 16 * wn + 8 * nt + 2 * tq;
      if (ch >= g.Mo || p >= g.P) continue;
      const float bv = g.bias != nullptr ? to_compute(g.bias[ch]) : 0.f;
      T* const plane = g.out + ch * d.oh * d.ow;
      const int64_t sm = p / tiles, t = p - sm * tiles;
      const int64_t ty = t / d.tw, tx = t - ty * d.tw;
      const auto& y0 = y[nt][2 * rr];
      const auto& y1 = y[nt][2 * rr + 1];
      if (m == 4 && g.vec16 && (tx & 1) == 0 && tx + 1 < d.tw && m * tx + 2 * m <= d.ow &&
          m * ty + m <= d.oh) {
        T* q = plane + sm * d.ch * d.oh * d.ow + (m * ty) * d.ow + m * tx;
#pragma unroll
        for (int i = 0; i < m; ++i, q += d.ow) {
          uint4 w;
          w.x = fused::Pack<T>::two(y0[i][0] + bv, y0[i][1 % m] + bv);
          w.y = fused::Pack<T>::two(y0[i][2 % m] + bv, y0[i][3 % m] + bv);
          w.z = fused::Pack<T>::two(y1[i][0] + bv, y1[i][1 % m] + bv);
          w.w = fused::Pack<T>::two(y1[i][2 % m] + bv, y1[i][3 % m] + bv);
          *reinterpret_cast<uint4*>(q) = w;
        }
        continue;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const auto& yv = h ? y1 : y0;
        const int64_t ph = p + h;
        if (ph >= g.P) break;
        const int64_t sh = ph / tiles, th_ = ph - sh * tiles;
        const int64_t tyh = th_ / d.tw, txh = th_ - tyh * d.tw;
        T* const ph_plane = plane + sh * d.ch * d.oh * d.ow;
        if (m == 4 && g.vec8 && m * txh + m <= d.ow && m * tyh + m <= d.oh) {
          T* q = ph_plane + (m * tyh) * d.ow + m * txh;
#pragma unroll
          for (int i = 0; i < m; ++i, q += d.ow) {
            uint2 w;
            w.x = fused::Pack<T>::two(yv[i][0] + bv, yv[i][1 % m] + bv);
            w.y = fused::Pack<T>::two(yv[i][2 % m] + bv, yv[i][3 % m] + bv);
            *reinterpret_cast<uint2*>(q) = w;
          }
          continue;
        }
#pragma unroll
        for (int i = 0; i < m; ++i) {
          const int64_t yy = tyh * m + i;
          if (yy >= d.oh) break;
#pragma unroll
          for (int j = 0; j < m; ++j) {
            const int64_t xx = txh * m + j;
            if (xx >= d.ow) break;
            ph_plane[yy * d.ow + xx] = from_compute<T>(yv[i][j] + bv);
          }
        }
      }
    }
}

}  // namespace pi
}  // namespace winograd
}  // namespace fastlayers
