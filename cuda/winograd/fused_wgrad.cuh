// The fused weight gradient: F(3x3, 2x2) with both transforms, the products and the sum over tiles
// in one kernel, and no transformed operand in global memory.
//
// grad_w[k, c] = A^T (sum over tiles of (G gy_tile G^T) * (B^T x_window B)) A: the sum runs over
// every 2 x 2 tile of grad_output of every sample, and the 4 x 4 input window under it. A block
// owns 32 output channels (k) x 32 input channels (c) at all 16 points, its 16 x 32 x 32 sums in
// registers, and walks a run of chunks of 16 tiles, each a rectangle of one sample's tile grid
// (layout.h: wgrad_dims):
//   1. the block copies the chunk's input rows and grad_output rows of its 64 channels into
//      shared memory, each value once, zeros outside (float32: two TMA boxes where the rows allow,
//      else 4-byte cp.async; 16 bits: loads and stores);
//   2. every thread transforms one (channel, tile) window of x and one tile of grad_output from
//      there into a second shared-memory stage, [point][channel][tile];
//   3. each warp multiplies its point's 32 x 16 by 16 x 32 (TF32 or 16-bit mma.sync; float32
//      without TF32 as four TF32 products of split values, hi and lo) into its accumulators.
// Its partial sums go to the workspace, [split][point][Kp][Cp] float; a second kernel, `finish`,
// adds the splits in order (so the result does not depend on timing) and applies A^T . A.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "../common/async_copy.cuh"
#include "../common/check.h"
#include "../common/fast_div.h"
#include "../common/launch.cuh"
#include "../common/mma.cuh"
#include "../common/storage.h"
#include "../common/tensor_map.h"
#include "layout.h"
#include "matrices.h"
#include "transforms.cuh"
#include "winograd.h"

namespace fastlayers {
namespace winograd {
namespace wgrad {

using Mat = Matrices<3, 2>;
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kB = static_cast<int>(kWgradBlock);  // K and C channels a block
constexpr int kT = static_cast<int>(kWgradChunk);  // tiles a chunk
constexpr int kP = Mat::kAlpha * Mat::kAlpha;      // 16 points, a warp each
static_assert(kB == 32 && kT == 16 && kP == kWarps, "the thread maps below assume these");

// Shared memory of a chunk, [point][channel][tile], in S: float for float32 (TF32 bit patterns
// under TF32, else whole values, split as the products read them), else the 16-bit type. Rows of
// 20 floats (24 halves) put the 8 rows of an mma fragment's lanes on distinct banks; channels c
// and c + 4, the transform's two half-warps, are 16 banks apart. Two stages: one is filled while
// the other is multiplied.
template <typename S> struct Stage {
  static constexpr int kRow = sizeof(S) == 4 ? 20 : 24;
  static constexpr int kPoint = kB * kRow;
  static constexpr int kValues = kP * kPoint;          // one operand
  static constexpr size_t kBytes = 2 * kValues * sizeof(S);  // both operands
};

// A chunk's raw values in shared memory, [x: channel][row][column], then [grad_output: channel]
// [row][column], in T. kRows tile rows x kCols tile columns: x rows 2 kRows + 2 and columns
// 2 kCols + 2 (the windows overlap by 2), grad_output 2 kRows x 2 kCols. x's rows may start
// `xoff` values in (Args::xoff: a TMA box starts at a 16-byte aligned column). Row strides: 40 and
// 32 values for one tile row (in float32 the TMA boxes' widths, multiples of 16 bytes), 12 for
// four. In float32 a half-warp's 16 pair reads of a row of its windows fill all 32 banks once; in
// 16 bits the two half-warps' channels (c, c + 4) meet on the same banks but for x with four tile
// rows (2 wavefronts a read where 1 would do: a channel stride of 8 mod 16 halves would mend it).
template <typename T, int kRows> struct RawChunk {
  static constexpr int kCols = kT / kRows;
  static constexpr int kXh = 2 * kRows + 2, kXw = 2 * kCols + 2;
  static constexpr int kGh = 2 * kRows, kGw = 2 * kCols;
  static constexpr int kXld = kRows == 1 ? 40 : 12, kGld = kRows == 1 ? kGw : 12;
  static constexpr int kXc = kXh * kXld, kGc = kGh * kGld;  // a channel's values
  static constexpr int kValues = kB * (kXc + kGc);
  static constexpr size_t kXBytes = kB * kXc * sizeof(T);  // x's part (a TMA box)
  static constexpr size_t kBytes = kValues * sizeof(T);
  static_assert(kRows * kCols == kT && kXw + (kRows == 1 ? 3 : 0) <= kXld && kGw <= kGld,
                "a chunk's rectangle (one tile row: and a TMA box's 3 values before it)");
  static_assert(kXc % 2 == 0 && kGc % 2 == 0 && kXld % 2 == 0 && kGld % 2 == 0,
                "value pairs stay aligned");
  static_assert(kXBytes % 128 == 0 && kBytes % 128 == 0, "TMA destinations 128-byte aligned");
};

template <typename T> struct Args {
  const T* gy;    // [S, K, oh, ow]
  const T* x;     // [S, C, H, W]
  float* part;    // [splits, 16, Kp, Cp]
  int K, C, H, W, oh, ow, ph, pw;
  int Kp, Cp;
  int chunks, splits;
  int xoff;       // x's first column in a buffer's rows (TMA: (-pw) mod 4, else 0)
  FastDiv img;    // gh * gw: chunks a sample
  FastDiv row;    // gw
};

// One value from global memory into shared memory, zero where !ok: a 4-byte cp.async (zero fill)
// in float32, else a load and a store (cp.async copies no fewer than 4 bytes).
template <typename T>
__device__ __forceinline__ void copy_value(T* dst, const T* src, bool ok) {
  if constexpr (sizeof(T) == 4)
    cp_async4(dst, src, ok ? 4 : 0);  // (src is not read where !ok)
  else
    *dst = ok ? *src : from_compute<T>(0.0f);
}

// One warp's copy of a kH x kW region of one channel plane (rows of `w` values, `h` of them;
// `plane` its first value; the region's corner at row y, column x, either possibly outside) into
// shared-memory rows of kLd, zeros outside the plane or where !any. The lanes go along the rows,
// a row an instruction (kW >= 32; the columns past 32 then by one more instruction) or
// 32 / kW rows an instruction, so each lane's column, and its test, holds for every instruction.
template <typename T, int kH, int kW, int kLd>
__device__ __forceinline__ void copy_region(T* __restrict__ dst, const T* plane, int h, int w,
                                            int y, int x, bool any) {
  constexpr int kLanes = kW < 32 ? kW : 32;  // lanes a row
  constexpr int kPer = 32 / kLanes;          // rows an instruction
  const int lane = threadIdx.x & 31;
  const int sub = lane / kLanes, col = lane - sub * kLanes;
  const bool cok = any && sub < kPer && static_cast<unsigned>(x + col) < static_cast<unsigned>(w);
  const T* src = plane + static_cast<int64_t>(y + sub) * w + (x + col);
#pragma unroll
  for (int j = 0; j * kPer < kH; ++j) {
    const int r = j * kPer + sub;
    if (sub < kPer && (kH % kPer == 0 || r < kH)) {
      const bool ok = cok && static_cast<unsigned>(y + r) < static_cast<unsigned>(h);
      copy_value(dst + r * kLd + col, src + static_cast<int64_t>(j) * kPer * w, ok);
    }
  }
  if constexpr (kW > 32) {
    constexpr int kX = kW - 32;  // columns past 32, kX a row
    static_assert(kX * kH <= 32, "the columns past 32 in one instruction");
    if (lane < kX * kH) {
      const int r = lane / kX, c = 32 + lane - r * kX;
      const bool ok = any && static_cast<unsigned>(y + r) < static_cast<unsigned>(h) &&
                      static_cast<unsigned>(x + c) < static_cast<unsigned>(w);
      copy_value(dst + r * kLd + c, plane + static_cast<int64_t>(y + r) * w + (x + c), ok);
    }
  }
}

// A chunk's sample n and the grad_output row y and column x of its first tile.
template <typename T, int kRows>
__device__ __forceinline__ void chunk_origin(const Args<T>& g, int chunk, uint32_t& n, int& y,
                                             int& x) {
  n = g.img.div(static_cast<uint32_t>(chunk));
  const uint32_t rem = static_cast<uint32_t>(chunk) - n * g.img.d;
  const uint32_t ry = g.row.div(rem);
  y = 2 * kRows * static_cast<int>(ry);
  x = 2 * RawChunk<T, kRows>::kCols * static_cast<int>(rem - ry * g.row.d);
}

// The block's copy of one chunk: warp w copies channels w and w + 16 of x (c0 + ..) and of
// grad_output (k0 + ..).
template <typename T, int kRows>
__device__ __forceinline__ void copy_chunk(const Args<T>& g, int chunk, int k0, int c0,
                                           T* __restrict__ raw) {
  using Rc = RawChunk<T, kRows>;
  const int warp = threadIdx.x >> 5;
  uint32_t n;
  int y, x;
  chunk_origin<T, kRows>(g, chunk, n, y, x);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int lc = warp + 16 * h, c = c0 + lc, k = k0 + lc;
    const bool xany = c < g.C, gany = k < g.K;
    const T* xp = g.x + (static_cast<int64_t>(n) * g.C + (xany ? c : 0)) *
                            (static_cast<int64_t>(g.H) * g.W);
    const T* gp = g.gy + (static_cast<int64_t>(n) * g.K + (gany ? k : 0)) *
                             (static_cast<int64_t>(g.oh) * g.ow);
    copy_region<T, Rc::kXh, Rc::kXw, Rc::kXld>(raw + lc * Rc::kXc, xp, g.H, g.W, y - g.ph,
                                               x - g.pw, xany);
    copy_region<T, Rc::kGh, Rc::kGw, Rc::kGld>(raw + kB * Rc::kXc + lc * Rc::kGc, gp, g.oh, g.ow,
                                               y, x, gany);
  }
}

// The thread's (channel, tile) of a chunk: tile lane % 16; channel (warp % 4) + 4 (lane / 16) +
// 8 (warp / 4), the same for x (channel c0 + it) and grad_output (k0 + it).
__device__ __forceinline__ int my_tile() { return threadIdx.x & 15; }
__device__ __forceinline__ int my_channel() {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  return (warp & 3) + 4 * (lane >> 4) + 8 * (warp >> 2);
}

// Two adjacent values of a row (an aligned pair) as floats.
template <typename T>
__device__ __forceinline__ void read_pair(const T* p, float& a, float& b) {
  if constexpr (sizeof(T) == 4) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    a = v.x;
    b = v.y;
  } else {
    struct alignas(4) Pair { T lo, hi; };
    const Pair v = *reinterpret_cast<const Pair*>(p);
    a = to_compute(v.lo);
    b = to_compute(v.hi);
  }
}

// A transformed value as the products read it: TF32 bits, a float, or the 16-bit type.
template <typename S, bool kTf32>
__device__ __forceinline__ S stage_value(float v) {
  if constexpr (sizeof(S) == 2)
    return from_compute<S>(v);
  else if constexpr (kTf32)
    return __uint_as_float(to_tf32(v));
  else
    return v;
}

// Tm d Tm^T of one operand (Tf: UseBT for the x window, UseG for the grad_output tile; d as
// floats) into its 16 points of a stage, at the thread's (channel, tile).
template <typename Tf, typename S, bool kTf32>
__device__ __forceinline__ void transform_into(const float (&d)[Tf::kCols][Tf::kCols],
                                               S* __restrict__ stage) {
  using St = Stage<S>;
  const int at = my_channel() * St::kRow + my_tile();
  float v[4][4];
  two_sided<Tf>(d, v);
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b)
      stage[(a * 4 + b) * St::kPoint + at] = stage_value<S, kTf32>(v[a][b]);
}

// The thread's x window and grad_output tile from a chunk's raw values, transformed into a stage
// (gs: grad_output, xs: x).
template <typename T, int kRows, typename S, bool kTf32>
__device__ __forceinline__ void transform_chunk(const T* __restrict__ raw, int xoff,
                                                S* __restrict__ gs, S* __restrict__ xs) {
  using Rc = RawChunk<T, kRows>;
  const int t = my_tile(), lc = my_channel();
  const int ty = t / Rc::kCols, tx = t - ty * Rc::kCols;
  {
    const T* p = raw + lc * Rc::kXc + 2 * ty * Rc::kXld + 2 * tx + xoff;
    float d[4][4];
    if (xoff & 1) {  // the window starts at an odd value: three aligned pairs a row
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float lo, hi;
        read_pair(p + i * Rc::kXld - 1, lo, d[i][0]);
        read_pair(p + i * Rc::kXld + 1, d[i][1], d[i][2]);
        read_pair(p + i * Rc::kXld + 3, d[i][3], hi);
        (void)lo;
        (void)hi;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        read_pair(p + i * Rc::kXld, d[i][0], d[i][1]);
        read_pair(p + i * Rc::kXld + 2, d[i][2], d[i][3]);
      }
    }
    transform_into<UseBT<Mat>, S, kTf32>(d, xs);
  }
  {
    const T* p = raw + kB * Rc::kXc + lc * Rc::kGc + 2 * ty * Rc::kGld + 2 * tx;
    float d[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) read_pair(p + i * Rc::kGld, d[i][0], d[i][1]);
    transform_into<UseG<Mat>, S, kTf32>(d, gs);
  }
}

// The products, tensor cores: warp w owns point w, M [32 k, 32 c] += Gs [32 k, 16 t] Xs^T
// [16 t, 32 c] as 2 x 4 fragments of 16 x 8. acc[mi][ni][4]: the mma D layout (mma.cuh),
// k = 16 mi + g (+8), c = 8 ni + 2 t4 (+1). kSplit (float32 without TF32): the stage holds whole
// float32 values, each split into TF32 hi + lo as it is read, a k-step's 8 products by
// mma1688_tf32_split (mma.cuh: four TF32 mma from zero, added by FADD, so that the sums over a
// run's thousands of tiles round to nearest).
template <typename S, bool kSplit>
__device__ __forceinline__ void products_mma(const S* __restrict__ gs, const S* __restrict__ xs,
                                             float (&acc)[2][4][4]) {
  using St = Stage<S>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gq = lane >> 2, t4 = lane & 3;
  const S* gp = gs + warp * St::kPoint;
  const S* xp = xs + warp * St::kPoint;
  if constexpr (sizeof(S) == 4) {  // TF32, m16n8k8: two k-steps of 8 tiles
#pragma unroll
    for (int kt = 0; kt < kT; kt += 8) {
      float av[2][4], bv[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const S* p = gp + (16 * mi + gq) * St::kRow + kt + t4;
        av[mi][0] = p[0];
        av[mi][1] = p[8 * St::kRow];
        av[mi][2] = p[4];
        av[mi][3] = p[8 * St::kRow + 4];
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const S* p = xp + (8 * ni + gq) * St::kRow + kt + t4;
        bv[ni][0] = p[0];
        bv[ni][1] = p[4];
      }
      uint32_t a[2][4], b[4][2];
      if constexpr (kSplit) {
        uint32_t al[2][4], bl[4][2];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int r = 0; r < 4; ++r) split_tf32(av[mi][r], a[mi][r], al[mi][r]);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int r = 0; r < 2; ++r) split_tf32(bv[ni][r], b[ni][r], bl[ni][r]);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int ni = 0; ni < 4; ++ni)
            mma1688_tf32_split<true>(acc[mi][ni], a[mi], al[mi], b[ni], bl[ni]);
      } else {  // the stage holds TF32 bit patterns
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int r = 0; r < 4; ++r) a[mi][r] = __float_as_uint(av[mi][r]);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int r = 0; r < 2; ++r) b[ni][r] = __float_as_uint(bv[ni][r]);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) mma1688_tf32(acc[mi][ni], a[mi], b[ni]);
      }
    }
  } else {  // 16-bit, m16n8k16: the chunk's 16 tiles in one k-step
    uint32_t a[2][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      load_a(a[mi], gp + (16 * mi + gq) * St::kRow + 2 * t4, St::kRow);
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) load_b(b[ni], xp + (8 * ni + gq) * St::kRow + 2 * t4);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma16816(acc[mi][ni], a[mi], b[ni], S{});
  }
}

// Block (c block, k block, split): its run of chunks, then its partial sums. Raw values in two
// buffers and transformed values in two stages: while a chunk's products run, the next chunk's
// raw values (copied during the last chunk) are transformed into the other stage and the one
// after's are copied. One barrier a chunk. kMode: 0 float32 as split TF32 (four products), 1 TF32,
// 2 16-bit tensor cores; kRows: the chunk's tile rows; kTma: thread 0 copies a chunk's x and
// grad_output as two TMA boxes (xmap, gmap: [S][C or K][rows][columns]) completing the buffer's
// mbarrier, else the block copies them value by value (copy_chunk). (512 threads an SM leave a
// thread 128 registers: check ptxas -v for spills after changing it.)
template <typename T, int kMode, int kRows, bool kTma>
__global__ void __launch_bounds__(kThreads, 1)
    kernel(const Args<T> g, const __grid_constant__ CUtensorMap xmap,
           const __grid_constant__ CUtensorMap gmap) {
  using S = std::conditional_t<kMode == 2, T, float>;
  using St = Stage<S>;
  using Rc = RawChunk<T, kRows>;
  constexpr bool kSplit = kMode == 0, kTf32 = kMode == 1;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  S* stage = reinterpret_cast<S*>(smem_raw);  // [2][grad_output, x][kValues]
  T* raw = reinterpret_cast<T*>(smem_raw + 2 * St::kBytes);  // [2][Rc::kValues]
  const uint32_t bars = smem_addr(smem_raw + 2 * St::kBytes + 2 * Rc::kBytes);  // 2 (kTma)
  const int c0 = blockIdx.x * kB, k0 = blockIdx.y * kB, split = blockIdx.z;
  // runs of chunks / splits chunks, rounded down or up
  const int first = static_cast<int>(static_cast<int64_t>(split) * g.chunks / g.splits);
  const int last = static_cast<int>(static_cast<int64_t>(split + 1) * g.chunks / g.splits);
  float acc[2][4][4];  // the mma D layout
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;
  (void)xmap;
  (void)gmap;
  // Chunk `chunk`'s raw values into buffer b.
  auto fetch = [&](int chunk, int b) {
    T* dst = raw + b * Rc::kValues;
    if constexpr (kTma) {
      if (threadIdx.x == 0) {
        uint32_t n;
        int y, x;
        chunk_origin<T, kRows>(g, chunk, n, y, x);
        // The buffer's reads by the transform (generic proxy), ordered before this by the
        // block's barrier, go before the async writes.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        mbar_expect_tx(bars + 8 * b, static_cast<uint32_t>(Rc::kBytes));
        tensor_copy_4d(smem_addr(dst), &xmap, x - g.pw - g.xoff, y - g.ph, c0, static_cast<int>(n),
                       bars + 8 * b);
        tensor_copy_4d(smem_addr(dst + kB * Rc::kXc), &gmap, x, y, k0, static_cast<int>(n),
                       bars + 8 * b);
      }
    } else {
      copy_chunk<T, kRows>(g, chunk, k0, c0, dst);
    }
  };
  uint32_t phase = 0;  // bit b: the parity of buffer b's next completion (kTma)
  auto ready = [&](int b) {  // buffer b's values here (cp.async: waited for before the barrier)
    if constexpr (kTma) {
      mbar_wait(bars + 8 * b, (phase >> b) & 1u);
      phase ^= 1u << b;
    }
  };
  if constexpr (kTma) {
    mbar_init_all(bars, 2);
    __syncthreads();
  }
  if (first < last) fetch(first, 0);
  cp_async_commit();
  if (first + 1 < last) fetch(first + 1, 1);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  if (first < last) {
    ready(0);
    transform_chunk<T, kRows, S, kTf32>(raw, g.xoff, stage, stage + St::kValues);
  }
  cp_async_wait<0>();
  __syncthreads();
  // At the top of each step: stage cur holds chunk's values, raw buffer cur ^ 1 chunk + 1's,
  // raw buffer cur is free.
  int cur = 0;
  for (int chunk = first; chunk < last; ++chunk) {
    if (chunk + 2 < last) fetch(chunk + 2, cur);
    cp_async_commit();
    const S* gs = stage + cur * 2 * St::kValues;
    products_mma<S, kSplit>(gs, gs + St::kValues, acc);
    if (chunk + 1 < last) {
      S* next = stage + (cur ^ 1) * 2 * St::kValues;
      ready(cur ^ 1);
      transform_chunk<T, kRows, S, kTf32>(raw + (cur ^ 1) * Rc::kValues, g.xoff, next,
                                          next + St::kValues);
    }
    cp_async_wait<0>();
    __syncthreads();
    cur ^= 1;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* out = g.part + (static_cast<int64_t>(split) * kP + warp) * g.Kp * g.Cp;
  const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int k = k0 + 16 * mi + gq + 8 * (r >> 1), c = c0 + 8 * ni + 2 * t4 + (r & 1);
        out[static_cast<int64_t>(k) * g.Cp + c] = acc[mi][ni][r];
      }
}

// grad_w [K, C, 3, 3] = A^T (sum of the splits' partial sums) A. Block: 16 (k, c) pairs x 16
// points; a thread sums one point of one pair over the splits in order.
template <typename T>
__global__ void __launch_bounds__(256) finish(const float* __restrict__ part, T* __restrict__ out,
                                              int K, int C, int Kp, int Cp, int splits) {
  __shared__ float m[16][17];
  const int pair = blockIdx.x * 16 + (threadIdx.x & 15), point = threadIdx.x >> 4;
  const bool ok = pair < K * C;
  const int k = ok ? pair / C : 0, c = ok ? pair - k * C : 0;
  float sum = 0.0f;
  if (ok) {
    const int64_t stride = static_cast<int64_t>(kP) * Kp * Cp;
    const float* p = part + (static_cast<int64_t>(point) * Kp + k) * Cp + c;
    for (int s = 0; s < splits; ++s) sum += p[s * stride];
  }
  m[threadIdx.x & 15][point] = sum;
  __syncthreads();
  if (threadIdx.x < 16 && ok) {
    float v[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) v[a][b] = m[threadIdx.x][a * 4 + b];
    store_inverse<T, Mat>(v, 0.0f, out + static_cast<int64_t>(pair) * 9, 0, 0, 3, 3);
  }
}

}  // namespace wgrad

template <typename T>
void run_fused_weight_grad(const Shape& s, const T* gy, const T* x, T* out, void* workspace,
                           size_t workspace_size, bool tf32, cudaStream_t stream) {
  if (s.tile != kFusedTile)
    throw std::invalid_argument("fastlayers: the fused Winograd weight gradient takes F(3x3,2x2)");
  const WgradDims d = wgrad_dims(s);
  if (workspace_size < d.bytes())
    throw std::invalid_argument("fastlayers: fused Winograd workspace too small");
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  // (int chunk indices, rows and columns reach a chunk's rectangle past grad_output's edge, and
  // finish's pair indices K C + 15)
  if (d.chunks > kIntMax || d.Kp > kIntMax || d.Cp > kIntMax || s.K * s.C + 15 > kIntMax ||
      d.Kp / wgrad::kB > 65535 || d.splits > 65535 || s.H > kIntMax || s.W > kIntMax ||
      s.oh() + 2 * kWgradChunk > kIntMax || s.ow() + 2 * kWgradChunk > kIntMax)
    throw std::invalid_argument("fastlayers: too large for the fused Winograd weight gradient");
  wgrad::Args<T> g{};
  g.gy = gy;
  g.x = x;
  g.part = static_cast<float*>(workspace);
  g.K = static_cast<int>(s.K);
  g.C = static_cast<int>(s.C);
  g.H = static_cast<int>(s.H);
  g.W = static_cast<int>(s.W);
  g.oh = static_cast<int>(s.oh());
  g.ow = static_cast<int>(s.ow());
  g.ph = static_cast<int>(s.ph);
  g.pw = static_cast<int>(s.pw);
  g.Kp = static_cast<int>(d.Kp);
  g.Cp = static_cast<int>(d.Cp);
  g.chunks = static_cast<int>(d.chunks);
  g.splits = static_cast<int>(d.splits);
  g.img = FastDiv(static_cast<uint32_t>(d.gh * d.gw));
  g.row = FastDiv(static_cast<uint32_t>(d.gw));

  constexpr bool kF32 = std::is_same<T, float>::value;
  const int mode = kF32 ? (tf32 ? 1 : 0) : 2;
  const bool four = d.rows == 4;
  // float32 copies its chunks of one tile row by TMA where both operands' rows are multiples of
  // 16 bytes and their starts 16-byte aligned (the tensor maps' terms), else value by value: the
  // same values either way. A box's first column is a multiple of 4 (16 bytes): x's boxes start
  // (-pw) mod 4 values left of the windows' first column.
  CUtensorMap xmap{}, gmap{};
  bool tma = kF32 && !four && s.W % 4 == 0 && s.ow() % 4 == 0 &&
             reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(gy) % 16 == 0;
  if (tma) {
    using R1 = wgrad::RawChunk<T, 1>;
    tma = encode_nchw_map(&xmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sizeof(T), x, s.S, s.C, s.H,
                          s.W, R1::kXld, R1::kXh, wgrad::kB, CU_TENSOR_MAP_SWIZZLE_NONE) &&
          encode_nchw_map(&gmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sizeof(T), gy, s.S, s.K,
                          s.oh(), s.ow(), R1::kGld, R1::kGh, wgrad::kB, CU_TENSOR_MAP_SWIZZLE_NONE);
  }
  g.xoff = tma ? static_cast<int>(((-s.pw) % 4 + 4) % 4) : 0;
  using S = std::conditional_t<kF32, float, T>;
  // two stages, two raw buffers (the larger, one tile row, for either) and their mbarriers
  const size_t smem = 2 * wgrad::Stage<S>::kBytes + 2 * wgrad::RawChunk<T, 1>::kBytes + 16;
  static_assert(wgrad::RawChunk<T, 4>::kBytes <= wgrad::RawChunk<T, 1>::kBytes &&
                    2 * wgrad::Stage<S>::kBytes + 2 * wgrad::RawChunk<T, 1>::kBytes + 16 <=
                        227 * 1024,
                "the stages and raw buffers in an SM's shared memory");
  using Kernel = decltype(&wgrad::kernel<T, kF32 ? 0 : 2, 1, false>);
  Kernel k;
  if constexpr (kF32) {
    const Kernel table[2][2][2] = {
        {{wgrad::kernel<T, 0, 1, false>, wgrad::kernel<T, 0, 1, true>},
         {wgrad::kernel<T, 0, 4, false>, nullptr}},
        {{wgrad::kernel<T, 1, 1, false>, wgrad::kernel<T, 1, 1, true>},
         {wgrad::kernel<T, 1, 4, false>, nullptr}}};  // (TMA: one tile row)
    k = table[mode][four ? 1 : 0][tma ? 1 : 0];
  } else {
    k = four ? wgrad::kernel<T, 2, 4, false> : wgrad::kernel<T, 2, 1, false>;
  }
  allow_shared_memory(k, smem);
  const dim3 grid(static_cast<unsigned>(d.Cp / wgrad::kB), static_cast<unsigned>(d.Kp / wgrad::kB),
                  static_cast<unsigned>(d.splits));
  k<<<grid, wgrad::kThreads, smem, stream>>>(g, xmap, gmap);
  FL_LAUNCH_CHECK();
  const int64_t pairs = s.K * s.C;
  wgrad::finish<T><<<static_cast<unsigned>(ceil_div(pairs, 16)), 256, 0, stream>>>(
      g.part, out, g.K, g.C, g.Kp, g.Cp, static_cast<int>(d.splits));
  FL_LAUNCH_CHECK();
}

}  // namespace winograd
}  // namespace fastlayers
