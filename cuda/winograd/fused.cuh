// The fused Winograd kernel: F(2x2, 3x3) forward or input gradient in float16 / bfloat16. The
// data transform, the alpha^2 products on tensor cores (mma.sync m16n8k16, float32 accumulation)
// and the inverse transform run in one kernel; the transformed tiles live in shared memory and
// the products in registers, so no V or M buffer goes through global memory (the non-fused
// pipeline writes and reads both, 4x the input and 8x the result in bytes for F(2x2, 3x3), which
// bounds it below cuDNN's implicit GEMM on tensor cores). The filter transform stays its own
// kernel (U [alpha^2, result channels, reduction channels] padded to whole blocks, in the
// workspace); filter chunks arrive by cp.async and the next chunk's windows load while the
// current chunk multiplies (two stages).
//
// A block computes BM result channels x BP tiles for all alpha^2 points, looping over the
// reduction channels in chunks of BK: it loads U's chunk and transforms the data windows of its
// tiles into shared memory, then each of its 8 warps multiplies a 16-channel x 16-tile piece at
// every point. An mma accumulator holds the same (channel, tile) pairs at every point, so a
// thread ends with all alpha^2 products of its pairs and applies A^T M A in registers.
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>

#include "../common/check.h"
#include "../common/launch.cuh"
#include "../common/mma.cuh"
#include "../common/storage.h"
#include "transforms.cuh"
#include "winograd.h"

namespace fastlayers {
namespace winograd {
namespace fused {

constexpr int kThreads = 256;  // 8 warps
constexpr int kBM = static_cast<int>(kFusedBlockChannels);  // result channels per block (4 warps of 16)
constexpr int kBP = 32;  // tiles per block (2 warps of 16)
constexpr int kBK = static_cast<int>(kFusedChunk);  // reduction channels per chunk: one mma k-step
static_assert(kBK == 16, "a chunk is one mma k-step");
// Shared rows of 16 values padded to 24 (48 bytes: 16-byte aligned for cp.async): the fragment
// loads (row g, column pair t) of a warp fall in 32 distinct banks.
constexpr int kRow = 24;

// U[xi, o, r] = (G g G^T)[xi] of filter g: w[o, r] (forward) or w[r, o] turned 180 degrees
// (input gradient); zero in the padding. One thread per padded (o, r), r fastest.
template <typename T, typename Mat>
__global__ void filter_transform_padded(const T* __restrict__ w, T* __restrict__ U, FusedDims f,
                                        int64_t C, bool input_grad) {
  using F = compute_t<T>;
  constexpr int A = Mat::kAlpha, R = Mat::kR;
  const int64_t n = f.Mo_pad * f.R_pad;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = i / f.R_pad, r = i - o * f.R_pad;
    F out[A][A];
    if (o < f.Mo && r < f.R) {
      // forward: w[k = o, c = r]; input gradient: w[k = r, c = o], turned
      transform_filter<Mat>(w + (input_grad ? r * C + o : o * C + r) * R * R, input_grad, out);
    } else {
#pragma unroll
      for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < A; ++b) out[a][b] = F(0);
    }
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
      for (int b = 0; b < A; ++b) U[(a * A + b) * n + i] = from_compute<T>(out[a][b]);
  }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n"); }

template <typename T>
struct Args {
  const T* data;  // the data operand [n, R, ih, iw] (src)
  const T* U;     // padded transformed filters [alpha^2, Mo_pad, R_pad]
  const T* bias;  // [Mo] or null
  T* out;         // [n, Mo, oh, ow] (dst)
  FusedDims f;
  TileSource src;
  TileTarget dst;
};

// Shared memory of a block, two stages: U's chunk [a2][BM][kRow] and the transformed tiles
// [a2][BP][kRow] of each.
template <typename T, int A2>
constexpr size_t smem_bytes() {
  return 2 * sizeof(T) * A2 * (kBM + kBP) * kRow;
}

// The data windows of one thread for one chunk: 2 adjacent channels of one tile.
template <typename T, int A>
struct Windows {
  T v[2][A][A];
};

template <typename T, typename Mat>
__global__ void __launch_bounds__(kThreads) kernel(Args<T> g) {
  constexpr int A = Mat::kAlpha, A2 = A * A;
  constexpr int kUStage = A2 * kBM * kRow, kVStage = A2 * kBP * kRow;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Us = reinterpret_cast<T*>(smem_raw);  // [2][A2][kBM][kRow]
  T* Vs = Us + 2 * kUStage;                // [2][A2][kBP][kRow]

  const TileSource& src = g.src;
  const int64_t tiles = src.th * src.tw, P = src.n * tiles;
  const int64_t p0 = int64_t{blockIdx.x} * kBP, m0 = int64_t{blockIdx.y} * kBM;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gr = lane >> 2, tq = lane & 3;  // mma fragment row group and column pair
  const int wm = (warp & 3) * 16, wp = (warp >> 2) * 16;

  // The tile this thread transforms, with channels 2 cl and 2 cl + 1 of each chunk.
  const int pl = tid % kBP, cl = tid / kBP;
  const int64_t pg = p0 + pl;
  const bool p_in = pg < P;
  int64_t y0 = 0, x0 = 0;
  const T* plane0 = g.data;
  if (p_in) {
    const int64_t s = pg / tiles, t = pg - s * tiles;
    const int64_t ty = t / src.tw, tx = t - ty * src.tw;
    y0 = ty * src.step - src.oy;
    x0 = tx * src.step - src.ox;
    plane0 = g.data + s * src.ch * src.ih * src.iw;
  }
  const int64_t plane_size = src.ih * src.iw;
  const T zero = from_compute<T>(0.f);

  // U's chunk c0 into stage `st`: 16-byte rows, 8 per thread.
  auto load_u = [&](int st, int64_t c0) {
    constexpr int kVecs = A2 * kBM * (kBK / 8);
#pragma unroll
    for (int q = 0; q < kVecs / kThreads; ++q) {
      const int i = tid + q * kThreads;
      const int half = i & 1, row = i >> 1;  // row = xi * kBM + mm
      const int xi = row / kBM, mm = row - xi * kBM;
      const T* gsrc = g.U + (xi * g.f.Mo_pad + m0 + mm) * g.f.R_pad + c0 + 8 * half;
      cp_async16(Us + st * kUStage + row * kRow + 8 * half, gsrc);
    }
    cp_async_commit();
  };
  // The windows of chunk c0 into registers, zeros outside.
  auto load_windows = [&](Windows<T, A>& wv, int64_t c0) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t c = c0 + 2 * cl + j;
      const bool in = p_in && c < g.f.R;
      const T* plane = plane0 + (in ? c : 0) * plane_size;
#pragma unroll
      for (int u = 0; u < A; ++u) {
        const int64_t y = y0 + u;
        const bool row_in = in && y >= 0 && y < src.ih;
#pragma unroll
        for (int v = 0; v < A; ++v) {
          const int64_t x = x0 + v;
          wv.v[j][u][v] = row_in && x >= 0 && x < src.iw ? plane[y * src.iw + x] : zero;
        }
      }
    }
  };
  // B^T d B of both channels into stage `st`, the two channels as one 32-bit store per point.
  auto store_windows = [&](const Windows<T, A>& wv, int st) {
    float tv[2][A][A];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float d[A][A];
#pragma unroll
      for (int u = 0; u < A; ++u)
#pragma unroll
        for (int v = 0; v < A; ++v) d[u][v] = to_compute(wv.v[j][u][v]);
      two_sided<UseBT<Mat>>(d, tv[j]);
    }
    T* base = Vs + st * kVStage + pl * kRow + 2 * cl;
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
      for (int b = 0; b < A; ++b) {
        T pair[2] = {from_compute<T>(tv[0][a][b]), from_compute<T>(tv[1][a][b])};
        *reinterpret_cast<uint32_t*>(base + (a * A + b) * kBP * kRow) =
            *reinterpret_cast<const uint32_t*>(pair);
      }
  };

  float acc[A2][2][4];
#pragma unroll
  for (int xi = 0; xi < A2; ++xi)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[xi][j][r] = 0.f;

  // Two stages: while the warps multiply chunk k, chunk k + 1's filters arrive by cp.async and
  // its windows by loads issued before the products; one barrier per chunk.
  {
    Windows<T, A> wv;
    load_u(0, 0);
    load_windows(wv, 0);
    store_windows(wv, 0);
    cp_async_wait_all();
    __syncthreads();
  }
  const int64_t chunks = g.f.R_pad / kBK;
  for (int64_t k = 0; k < chunks; ++k) {
    const int st = static_cast<int>(k & 1);
    const bool more = k + 1 < chunks;
    Windows<T, A> wv;
    if (more) {
      load_u(st ^ 1, (k + 1) * kBK);
      load_windows(wv, (k + 1) * kBK);
    }
    const T* us = Us + st * kUStage;
    const T* vs = Vs + st * kVStage;
#pragma unroll
    for (int xi = 0; xi < A2; ++xi) {
      uint32_t af[4];
      load_a(af, us + (xi * kBM + wm + gr) * kRow + 2 * tq, kRow);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t bf[2];
        load_b(bf, vs + (xi * kBP + wp + 8 * j + gr) * kRow + 2 * tq);
        mma16816(acc[xi][j], af, bf, T{});
      }
    }
    if (more) {
      store_windows(wv, st ^ 1);
      cp_async_wait_all();
    }
    __syncthreads();
  }

  // Accumulator r of n-tile j: result channel wm + gr (+8 for r >= 2), tile wp + 8 j + 2 tq
  // (+1 for odd r). Y = A^T M A, clipped, with the bias.
  const TileTarget& dst = g.dst;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t o = m0 + wm + gr + (r >= 2 ? 8 : 0);
      const int64_t p = p0 + wp + 8 * j + 2 * tq + (r & 1);
      if (o >= g.f.Mo || p >= P) continue;
      const int64_t s = p / tiles, t = p - s * tiles;
      const int64_t ty = t / dst.tw, tx = t - ty * dst.tw;
      float v[A][A];
#pragma unroll
      for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < A; ++b) v[a][b] = acc[a * A + b][j][r];
      store_inverse<T, Mat>(v, g.bias != nullptr ? to_compute(g.bias[o]) : 0.f,
                            g.out + (s * dst.ch + o) * dst.oh * dst.ow, ty, tx, dst.oh, dst.ow);
    }
  }
}

}  // namespace fused

template <typename T>
void run_fused(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out,
               void* workspace, size_t workspace_size, cudaStream_t stream) {
  using Mat = Matrices<2, 3>;
  constexpr int A2 = Mat::kAlpha * Mat::kAlpha;
  if (!fused_ok(pass, s.tile))
    throw std::invalid_argument("fastlayers: the fused Winograd kernel takes F(2x2,3x3) for the "
                                "forward and the input gradient");
  if (workspace_size < fused_workspace_bytes(pass, s, sizeof(T)))
    throw std::invalid_argument("fastlayers: fused Winograd workspace too small");
  const Tiling t = tiling(pass, s);
  const FusedDims f = fused_dims(pass, s);
  T* U = static_cast<T*>(workspace);
  fused::filter_transform_padded<T, Mat><<<blocks_for(f.Mo_pad * f.R_pad), kThreads, 0, stream>>>(
      b, U, f, s.C, pass == Pass::InputGrad);
  FL_LAUNCH_CHECK();

  fused::Args<T> g{};
  g.data = a;
  g.U = U;
  g.bias = pass == Pass::Forward ? bias : nullptr;
  g.out = out;
  g.f = f;
  g.src = TileSource{s.S, t.data_ch, t.data_h, t.data_w, t.th, t.tw, t.step, t.oy, t.ox};
  g.dst = TileTarget{s.S, t.res_ch, t.res_h, t.res_w, t.th, t.tw};
  const int64_t P = s.S * t.tiles();
  const dim3 grid(static_cast<unsigned>((P + fused::kBP - 1) / fused::kBP),
                  static_cast<unsigned>(f.Mo_pad / fused::kBM));
  constexpr size_t smem = fused::smem_bytes<T, A2>();
  auto k = fused::kernel<T, Mat>;
  // The shared-memory opt-in once per device (a per-call attribute set costs host time).
  static std::atomic<uint64_t> opted{0};
  int dev = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if ((opted.load(std::memory_order_acquire) & bit) == 0) {
    FL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    opted.fetch_or(bit, std::memory_order_acq_rel);
  }
  k<<<grid, fused::kThreads, smem, stream>>>(g);
  FL_LAUNCH_CHECK();
}

}  // namespace winograd
}  // namespace fastlayers
