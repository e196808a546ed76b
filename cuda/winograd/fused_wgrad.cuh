// The fused weight gradient: F(3x3, 2x2) with both transforms, the products and the sum over tiles
// in one kernel, and no transformed operand in global memory.
//
// grad_w[k, c] = A^T (sum over tiles of (G gy_tile G^T) * (B^T x_window B)) A: the sum runs over
// every 2 x 2 tile of grad_output of every sample, and the 4 x 4 input window under it. A block
// owns 32 output channels (k) x 32 input channels (c) at all 16 points, its 16 x 32 x 32 sums in
// registers, and walks a run of chunks of 16 tiles (layout.h: wgrad_dims):
//   1. every thread transforms one (channel, tile) pair of x and one of grad_output, loaded
//      straight from global memory, into shared memory as [point][channel][tile];
//   2. each warp multiplies its point's 32 x 16 by 16 x 32 (TF32 or 16-bit mma.sync, or FFMA in
//      float32 without TF32) into its accumulators.
// Its partial sums go to the workspace, [split][point][Kp][Cp] float; a second kernel, `finish`,
// adds the splits in order (so the result does not depend on timing) and applies A^T . A.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "../common/check.h"
#include "../common/fast_div.h"
#include "../common/mma.cuh"
#include "../common/storage.h"
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

// Shared memory of a chunk, [point][channel][tile], in S: float for float32 (FFMA, or TF32 bit
// patterns), else the 16-bit type. Rows of 20 floats (24 halves) put the 8 rows of an mma
// fragment's lanes on distinct banks (and the FFMA reads' 8 rows, though a 16-byte read shared by
// 4 lanes still takes several wavefronts: docs/winograd.md); channels c and c + 4, the
// transform's two half-warps, are 16 banks apart. Two stages: one is filled while the other is
// multiplied.
template <typename S> struct Stage {
  static constexpr int kRow = sizeof(S) == 4 ? 20 : 24;
  static constexpr int kPoint = kB * kRow;
  static constexpr int kValues = kP * kPoint;          // one operand
  static constexpr size_t kBytes = 2 * kValues * sizeof(S);  // both operands
};
static_assert(2 * Stage<float>::kBytes <= 227 * 1024, "two stages in an SM's shared memory");

template <typename T> struct Args {
  const T* gy;    // [S, K, oh, ow]
  const T* x;     // [S, C, H, W]
  float* part;    // [splits, 16, Kp, Cp]
  int K, C, H, W, oh, ow, ph, pw;
  int Kp, Cp;
  int tiles;      // S * th * tw
  int chunks, per;
  FastDiv img;    // th * tw
  FastDiv row;    // tw
};

// A thread's raw values of one chunk: its x window (zeros outside the image, the channels and the
// tiles) and its grad_output tile, as stored.
template <typename T> struct Raw {
  T x[4][4];
  T g[2][2];
};

// The thread's (channel, tile) of a chunk: tile lane % 16; channel (warp % 4) + 4 (lane / 16) +
// 8 (warp / 4), the same for x (channel c0 + it) and grad_output (k0 + it).
__device__ __forceinline__ int my_tile() { return threadIdx.x & 15; }
__device__ __forceinline__ int my_channel() {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  return (warp & 3) + 4 * (lane >> 4) + 8 * (warp >> 2);
}

template <typename T>
__device__ __forceinline__ void load_raw(const Args<T>& g, int chunk, int k0, int c0,
                                         Raw<T>& r) {
  const int tile = chunk * kT + my_tile(), lc = my_channel();
  const T zero = from_compute<T>(0.0f);
  bool ok = tile < g.tiles;
  int n = 0, y = 0, x = 0;
  if (ok) {
    const uint32_t nn = g.img.div(static_cast<uint32_t>(tile));
    const uint32_t rem = static_cast<uint32_t>(tile) - nn * g.img.d;
    const uint32_t ty = g.row.div(rem);
    n = static_cast<int>(nn);
    y = 2 * static_cast<int>(ty);
    x = 2 * static_cast<int>(rem - ty * g.row.d);
  }
  {  // the x window: rows y - ph .., columns x - pw ..
    const int c = c0 + lc;
    const bool any = ok && c < g.C;
    const T* src = g.x + ((static_cast<int64_t>(n) * g.C + (any ? c : 0)) * g.H + (y - g.ph)) *
                             static_cast<int64_t>(g.W) + (x - g.pw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool row = any && y - g.ph + i >= 0 && y - g.ph + i < g.H;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        r.x[i][j] = row && x - g.pw + j >= 0 && x - g.pw + j < g.W
                        ? src[static_cast<int64_t>(i) * g.W + j]
                        : zero;
    }
  }
  {  // the grad_output tile: rows y, y + 1, columns x, x + 1
    const int k = k0 + lc;
    const bool any = ok && k < g.K;
    const T* src = g.gy + ((static_cast<int64_t>(n) * g.K + (any ? k : 0)) * g.oh + y) *
                              static_cast<int64_t>(g.ow) + x;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        r.g[i][j] = any && y + i < g.oh && x + j < g.ow ? src[static_cast<int64_t>(i) * g.ow + j]
                                                        : zero;
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

// Tm d Tm^T of one raw operand (Tf: UseBT for the x window, UseG for the grad_output tile) into
// its 16 points of a stage, at the thread's (channel, tile).
template <typename Tf, typename S, bool kTf32, typename T>
__device__ __forceinline__ void transform_into(const T (&raw)[Tf::kCols][Tf::kCols],
                                               S* __restrict__ stage) {
  using St = Stage<S>;
  constexpr int N = Tf::kCols;
  const int at = my_channel() * St::kRow + my_tile();
  float d[N][N], v[4][4];
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) d[i][j] = to_compute(raw[i][j]);
  two_sided<Tf>(d, v);
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b)
      stage[(a * 4 + b) * St::kPoint + at] = stage_value<S, kTf32>(v[a][b]);
}

// B^T d B of the window and G g G^T of the tile into a stage (gs: grad_output, xs: x).
template <typename T, typename S, bool kTf32>
__device__ __forceinline__ void store_raw(const Raw<T>& r, S* __restrict__ gs,
                                          S* __restrict__ xs) {
  transform_into<UseBT<Mat>, S, kTf32>(r.x, xs);
  transform_into<UseG<Mat>, S, kTf32>(r.g, gs);
}

// The products, tensor cores: warp w owns point w, M [32 k, 32 c] += Gs [32 k, 16 t] Xs^T
// [16 t, 32 c] as 2 x 4 fragments of 16 x 8. acc[mi][ni][4]: the mma D layout (mma.cuh),
// k = 16 mi + g (+8), c = 8 ni + 2 t4 (+1).
template <typename S>
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
      uint32_t a[2][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const S* p = gp + (16 * mi + gq) * St::kRow + kt + t4;
        a[mi][0] = __float_as_uint(p[0]);
        a[mi][1] = __float_as_uint(p[8 * St::kRow]);
        a[mi][2] = __float_as_uint(p[4]);
        a[mi][3] = __float_as_uint(p[8 * St::kRow + 4]);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const S* p = xp + (8 * ni + gq) * St::kRow + kt + t4;
        b[ni][0] = __float_as_uint(p[0]);
        b[ni][1] = __float_as_uint(p[4]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma1688_tf32(acc[mi][ni], a[mi], b[ni]);
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

// The products by FFMA (float32 without TF32): warp w owns point w, a thread k = kg + 8 i (i < 4),
// c = cg + 4 j (j < 8), kg = lane / 4, cg = lane % 4, reading 4 tiles a 16-byte load.
__device__ __forceinline__ void products_ffma(const float* __restrict__ gs,
                                              const float* __restrict__ xs,
                                              float (&acc)[4][8]) {
  using St = Stage<float>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kg = lane >> 2, cg = lane & 3;
  const float* gp = gs + warp * St::kPoint + kg * St::kRow;
  const float* xp = xs + warp * St::kPoint + cg * St::kRow;
#pragma unroll
  for (int t0 = 0; t0 < kT; t0 += 4) {
    float4 a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      a[i] = *reinterpret_cast<const float4*>(gp + 8 * i * St::kRow + t0);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float4 b = *reinterpret_cast<const float4*>(xp + 4 * j * St::kRow + t0);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[i][j] = fmaf(a[i].x, b.x, acc[i][j]);
        acc[i][j] = fmaf(a[i].y, b.y, acc[i][j]);
        acc[i][j] = fmaf(a[i].z, b.z, acc[i][j]);
        acc[i][j] = fmaf(a[i].w, b.w, acc[i][j]);
      }
    }
  }
}

// Block (c block, k block, split): its run of chunks, then its partial sums. The next chunk's
// raw values are loaded before this chunk's products and transformed after them, into the other
// stage: the loads' latency passes under the products. kMode: 0 FFMA (float32), 1 TF32 (float32),
// 2 16-bit tensor cores. (The FFMA form takes all 128 registers that 512 threads an SM leave a
// thread: check ptxas -v for spills after changing it.)
template <typename T, int kMode>
__global__ void __launch_bounds__(kThreads, 1) kernel(const Args<T> g) {
  using S = std::conditional_t<kMode == 2, T, float>;
  using St = Stage<S>;
  constexpr bool kFfma = kMode == 0, kTf32 = kMode == 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S* stage = reinterpret_cast<S*>(smem_raw);  // [2][grad_output, x][kValues]
  const int c0 = blockIdx.x * kB, k0 = blockIdx.y * kB, split = blockIdx.z;
  const int first = split * g.per, last = min(g.chunks, first + g.per);
  // 32 accumulators a thread: [4][8] (FFMA) or [mi][ni][4] (mma)
  float acc_flat[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc_flat[i] = 0.0f;
  auto& facc = reinterpret_cast<float(&)[4][8]>(acc_flat);
  auto& macc = reinterpret_cast<float(&)[2][4][4]>(acc_flat);
  (void)facc;
  (void)macc;
  Raw<T> raw;
  if (first < last) {
    load_raw(g, first, k0, c0, raw);
    store_raw<T, S, kTf32>(raw, stage, stage + St::kValues);
  }
  __syncthreads();
  int cur = 0;
  for (int chunk = first; chunk < last; ++chunk) {
    const bool more = chunk + 1 < last;
    if (more) load_raw(g, chunk + 1, k0, c0, raw);
    const S* gs = stage + cur * 2 * St::kValues;
    if constexpr (kFfma)
      products_ffma(gs, gs + St::kValues, facc);
    else
      products_mma<S>(gs, gs + St::kValues, macc);
    if (more) {
      S* next = stage + (cur ^ 1) * 2 * St::kValues;
      store_raw<T, S, kTf32>(raw, next, next + St::kValues);
    }
    __syncthreads();
    cur ^= 1;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* out = g.part + (static_cast<int64_t>(split) * kP + warp) * g.Kp * g.Cp;
  if constexpr (kFfma) {
    const int kg = lane >> 2, cg = lane & 3;
    float* o = out + static_cast<int64_t>(k0 + kg) * g.Cp + c0 + cg;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) o[static_cast<int64_t>(8 * i) * g.Cp + 4 * j] = facc[i][j];
  } else {
    const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int k = k0 + 16 * mi + gq + 8 * (r >> 1), c = c0 + 8 * ni + 2 * t4 + (r & 1);
          out[static_cast<int64_t>(k) * g.Cp + c] = macc[mi][ni][r];
        }
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
  const Tiling t = tiling(Pass::WeightGrad, s);
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  // (int tile indices reach chunks * 16 - 1, and finish's pair indices K C + 15)
  if (d.chunks * kWgradChunk > kIntMax || d.Kp > kIntMax || d.Cp > kIntMax ||
      s.K * s.C + 15 > kIntMax || d.Kp / wgrad::kB > 65535 || d.splits > 65535 ||
      s.H > kIntMax || s.W > kIntMax)
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
  g.tiles = static_cast<int>(s.S * t.tiles());
  g.chunks = static_cast<int>(d.chunks);
  g.per = static_cast<int>(d.per);
  g.img = FastDiv(static_cast<uint32_t>(t.tiles()));
  g.row = FastDiv(static_cast<uint32_t>(t.tw));

  constexpr bool kF32 = std::is_same<T, float>::value;
  const int mode = kF32 ? (tf32 ? 1 : 0) : 2;
  using S = std::conditional_t<kF32, float, T>;
  const size_t smem = 2 * wgrad::Stage<S>::kBytes;  // two stages
  decltype(&wgrad::kernel<T, kF32 ? 0 : 2>) k;
  if constexpr (kF32)
    k = mode == 1 ? wgrad::kernel<T, 1> : wgrad::kernel<T, 0>;
  else
    k = wgrad::kernel<T, 2>;
  // The shared-memory opt-in once per device and kernel (as run_fused).
  static std::atomic<uint64_t> opted[2]{};
  int dev = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  std::atomic<uint64_t>& k_opted = opted[mode & 1];
  if (bit == 0 || (k_opted.load(std::memory_order_acquire) & bit) == 0) {
    FL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    k_opted.fetch_or(bit, std::memory_order_acq_rel);
  }
  const dim3 grid(static_cast<unsigned>(d.Cp / wgrad::kB), static_cast<unsigned>(d.Kp / wgrad::kB),
                  static_cast<unsigned>(d.splits));
  k<<<grid, wgrad::kThreads, smem, stream>>>(g);
  FL_LAUNCH_CHECK();
  const int64_t pairs = s.K * s.C;
  wgrad::finish<T><<<static_cast<unsigned>(ceil_div(pairs, 16)), 256, 0, stream>>>(
      g.part, out, g.K, g.C, g.Kp, g.Cp, static_cast<int>(d.splits));
  FL_LAUNCH_CHECK();
}

}  // namespace winograd
}  // namespace fastlayers
