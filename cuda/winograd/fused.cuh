// The fused Winograd kernel: F(2x2, 3x3) forward or input gradient in float16 / bfloat16. The
// data transform, the alpha^2 products on tensor cores (mma.sync m16n8k16, float32 accumulation)
// and the inverse transform run in one kernel; the transformed tiles live in shared memory and
// the products in registers, so no V or M buffer goes through global memory (the non-fused
// pipeline writes and reads both, 4x the input and 8x the result in bytes for F(2x2, 3x3), which
// bounds it below cuDNN's implicit GEMM on tensor cores). The filter transform stays its own
// kernel (U [alpha^2, K, C] in the workspace).
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
#include "../common/storage.h"
#include "transforms.cuh"
#include "winograd.h"

namespace fastlayers {
namespace winograd {
namespace fused {

constexpr int kThreads = 256;  // 8 warps
constexpr int kBM = 64;        // result channels per block (4 warps of 16)
constexpr int kBP = 32;        // tiles per block (2 warps of 16)
constexpr int kBK = 16;        // reduction channels per chunk: one mma k-step
// Shared rows of 16 values padded to 24: the fragment loads (row g, column pair t) of a warp
// fall in 32 distinct banks.
constexpr int kRow = 24;

// D += A B, A 16x16 row-major, B 16x8 column-major, D float 16x8 (PTX mma.m16n8k16).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                    __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                    __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <typename T>
struct Args {
  const T* data;  // the data operand [n, R, ih, iw] (src)
  const T* U;     // transformed filters, element (xi, out, red) at xi u_xi + out u_out + red u_red
  const T* bias;  // [Mo] or null
  T* out;         // [n, Mo, oh, ow] (dst)
  int64_t R, Mo;  // reduction and result channels
  int64_t u_xi, u_out, u_red;
  TileSource src;
  TileTarget dst;
};

// Shared memory of a block: U's chunk [a2][BM][kRow] and the transformed tiles [a2][BP][kRow].
template <typename T, int A2>
constexpr size_t smem_bytes() {
  return sizeof(T) * A2 * (kBM + kBP) * kRow;
}

template <typename T, typename Mat>
__global__ void __launch_bounds__(kThreads) kernel(Args<T> g) {
  constexpr int A = Mat::kAlpha, A2 = A * A, m = Mat::kM;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Us = reinterpret_cast<T*>(smem_raw);  // [A2][kBM][kRow]
  T* Vs = Us + A2 * kBM * kRow;            // [A2][kBP][kRow]

  const TileSource& src = g.src;
  const int64_t tiles = src.th * src.tw, P = src.n * tiles;
  const int64_t p0 = int64_t{blockIdx.x} * kBP, m0 = int64_t{blockIdx.y} * kBM;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gr = lane >> 2, tq = lane & 3;  // mma fragment row group and column pair
  const int wm = (warp & 3) * 16, wp = (warp >> 2) * 16;

  // The tile this thread transforms (with channels (tid / BP) + 8 j of each chunk).
  const int pl = tid % kBP, cl = tid / kBP;
  constexpr int kChPerThread = kBK / (kThreads / kBP);  // 2
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

  float acc[A2][2][4];
#pragma unroll
  for (int xi = 0; xi < A2; ++xi)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[xi][j][r] = 0.f;

  const T zero = from_compute<T>(0.f);
  for (int64_t c0 = 0; c0 < g.R; c0 += kBK) {
    // U's chunk, zero outside [Mo] x [R]; consecutive threads on U's contiguous side.
    for (int i = tid; i < A2 * kBM * kBK; i += kThreads) {
      int mm, cc;
      const int xi = i / (kBM * kBK), rest = i - xi * (kBM * kBK);
      if (g.u_red == 1) {
        mm = rest / kBK;
        cc = rest - mm * kBK;
      } else {
        cc = rest / kBM;
        mm = rest - cc * kBM;
      }
      const int64_t o = m0 + mm, c = c0 + cc;
      Us[(xi * kBM + mm) * kRow + cc] =
          o < g.Mo && c < g.R ? g.U[xi * g.u_xi + o * g.u_out + c * g.u_red] : zero;
    }
    // The data windows of this chunk's channels, transformed (B^T d B), zero outside.
#pragma unroll
    for (int j = 0; j < kChPerThread; ++j) {
      const int cc = cl + j * (kThreads / kBP);
      const int64_t c = c0 + cc;
      float d[A][A];
      const bool in = p_in && c < g.R;
      const T* plane = plane0 + (in ? c : 0) * src.ih * src.iw;
#pragma unroll
      for (int u = 0; u < A; ++u) {
        const int64_t y = y0 + u;
        const bool row_in = in && y >= 0 && y < src.ih;
#pragma unroll
        for (int v = 0; v < A; ++v) {
          const int64_t x = x0 + v;
          d[u][v] = row_in && x >= 0 && x < src.iw ? to_compute(plane[y * src.iw + x]) : 0.f;
        }
      }
      float tv[A][A];
      two_sided<UseBT<Mat>>(d, tv);
#pragma unroll
      for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < A; ++b)
          Vs[((a * A + b) * kBP + pl) * kRow + cc] = from_compute<T>(tv[a][b]);
    }
    __syncthreads();
#pragma unroll
    for (int xi = 0; xi < A2; ++xi) {
      const T* ua = Us + (xi * kBM + wm + gr) * kRow + 2 * tq;
      uint32_t af[4];
      af[0] = *reinterpret_cast<const uint32_t*>(ua);
      af[1] = *reinterpret_cast<const uint32_t*>(ua + 8 * kRow);
      af[2] = *reinterpret_cast<const uint32_t*>(ua + 8);
      af[3] = *reinterpret_cast<const uint32_t*>(ua + 8 * kRow + 8);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const T* vb = Vs + (xi * kBP + wp + 8 * j + gr) * kRow + 2 * tq;
        uint32_t bf[2];
        bf[0] = *reinterpret_cast<const uint32_t*>(vb);
        bf[1] = *reinterpret_cast<const uint32_t*>(vb + 8);
        mma(acc[xi][j], af, bf, T{});
      }
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
      if (o >= g.Mo || p >= P) continue;
      const int64_t s = p / tiles, t = p - s * tiles;
      const int64_t ty = t / dst.tw, tx = t - ty * dst.tw;
      float t1[m][A];  // A^T M
#pragma unroll
      for (int a = 0; a < m; ++a) {
#pragma unroll
        for (int b = 0; b < A; ++b) {
          float sum = 0.f;
#pragma unroll
          for (int k = 0; k < A; ++k)
            if (Mat::AT(a, k) != 0.0) sum += static_cast<float>(Mat::AT(a, k)) * acc[k * A + b][j][r];
          t1[a][b] = sum;
        }
      }
      const float bv = g.bias != nullptr ? to_compute(g.bias[o]) : 0.f;
      T* plane = g.out + (s * dst.ch + o) * dst.oh * dst.ow;
#pragma unroll
      for (int a = 0; a < m; ++a) {
        const int64_t y = ty * m + a;
        if (y >= dst.oh) break;
#pragma unroll
        for (int b = 0; b < m; ++b) {
          const int64_t x = tx * m + b;
          if (x >= dst.ow) break;
          float sum = bv;
#pragma unroll
          for (int k = 0; k < A; ++k)
            if (Mat::AT(b, k) != 0.0) sum += t1[a][k] * static_cast<float>(Mat::AT(b, k));
          plane[y * dst.ow + x] = from_compute<T>(sum);
        }
      }
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
  if (workspace_size < fused_workspace_bytes(s, sizeof(T)))
    throw std::invalid_argument("fastlayers: fused Winograd workspace too small");
  const Tiling t = tiling(pass, s);
  T* U = static_cast<T*>(workspace);
  filter_transform<T, Mat><<<blocks_for(s.K * s.C), kThreads, 0, stream>>>(
      b, U, s.K, s.C, pass == Pass::InputGrad);
  FL_LAUNCH_CHECK();

  fused::Args<T> g{};
  g.data = a;
  g.U = U;
  g.bias = pass == Pass::Forward ? bias : nullptr;
  g.out = out;
  g.u_xi = s.K * s.C;
  if (pass == Pass::Forward) {  // M [K, P] = U [K, C] V [C, P]
    g.R = s.C; g.Mo = s.K; g.u_out = s.C; g.u_red = 1;
  } else {  // M [C, P] = U^T [C, K] V [K, P]
    g.R = s.K; g.Mo = s.C; g.u_out = 1; g.u_red = s.C;
  }
  g.src = TileSource{s.S, t.data_ch, t.data_h, t.data_w, t.th, t.tw, t.step, t.oy, t.ox};
  g.dst = TileTarget{s.S, t.res_ch, t.res_h, t.res_w, t.th, t.tw};
  const int64_t P = s.S * t.tiles();
  const dim3 grid(static_cast<unsigned>((P + fused::kBP - 1) / fused::kBP),
                  static_cast<unsigned>((g.Mo + fused::kBM - 1) / fused::kBM));
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
