// A prototype of the fused Winograd kernel's product stage in float32 as split TF32 by wgmma
// (sm_90a), with real layouts, checked against float64: for each item, M[p] (64 result channels x
// 32 tiles) = sum over the reduction channels of U[p] (64 x 8 a chunk) V[p] (8 x 32), for the 16
// points p, streamed in chunks of 8 channels as the kernel streams them. Each chunk's U (the filter
// transform's 32 KB block: [point][channel][8]) and V (hi and lo planes, as a data transform would
// store them, each [point] a K-major 32 x 8 block of 8 x 4 core matrices) come by bulk copies on an
// mbarrier, 2 chunks ahead in 3 stages. Two warpgroups take 8 points each: A (U) read from shared
// memory into registers and split there (hi = cvt.rn.tf32, lo = v - hi), B by descriptor, each
// point's lo hi + hi lo + hi hi from zero into one of two temporaries, added into the sums after
// the next point's issue. The transform mode makes V as the kernel would: each chunk's input patch
// (8 channels x 10 x 18) comes with U, and after issuing a chunk's first point the warps transform
// the next chunk's patch (B^T d B, split, stored into the other V stage); a proxy fence and a
// barrier end each chunk; in its second form (run_ws) a third warpgroup copies and transforms while
// the two others multiply. What it leaves out of the kernel: the inverse transform, and the patch's
// real layout and copies; elsewhere V arrives by copy, already split; U is read unswizzled (2-way
// bank conflicts), where the kernel's U stage is swizzled. The rate runs write no sums (an item's
// raw sums are 4x the kernel's results) and run with V copied, V kept in shared memory (the
// kernel's case: its V comes from the transform, not from L2), with no copies at all, and in both
// forms of the transform mode; transform_rate times the transform alone. The check runs two items a
// block, with V copied, kept and transformed, and fails (exit 1) where split TF32's error exceeds
// float32 FFMA's in order.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Icuda \
//     benchmarks/micro/wgmma_split.cu -o wgmma_split && ./wgmma_split
#include <cuda_runtime.h>
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/async_copy.cuh"
#include "winograd/matrices.h"
#include "timing.cuh"
#include "wgmma_tf32.cuh"

using fastlayers::bulk_copy;
using fastlayers::mbar_expect_tx;
using fastlayers::mbar_init_all;
using fastlayers::mbar_wait;
using fastlayers::smem_addr;

constexpr int kP = 16, kM = 64, kN = 32, kK = 8;
constexpr int kUBytes = kP * kM * kK * 4;  // 32 KB
constexpr int kVBytes = kP * kN * kK * 4;  // 16 KB a plane
constexpr int kStages = 3;
constexpr int kStageBytes = kUBytes + 2 * kVBytes;
// The transform mode's input patch a chunk: 8 channels x 10 rows x 18 columns, the overlapping
// 4 x 4 windows of the item's 4 x 8 tiles (F(2x2,3x3)), in 3 stages after the others.
constexpr int kPatchRows = 10, kPatchCols = 18, kPatch = kK * kPatchRows * kPatchCols;
constexpr int kPatchBytes = kPatch * 4;



struct Params {
  const float* U;   // [chunks][16][64][8]
  const float* V;   // [chunks][2 planes][16][32 x 8 in core matrices]
  const float* D;   // the transform mode's patches, [chunks][8][10][18]
  float* M;         // [items][16][64][32]
  int chunks, items, static_v, only_hi, static_u, transform;
  int store;        // the items' sums out (the check); else one checksum a thread at the end
  long long* cycles;
  unsigned long long* ns;
};

// The warp's A fragment of point p from U's stage ([p][m][k]): rows 16 w + g and + 8, columns t
// and t + 4 (g = lane / 4, t = lane % 4), as mma.m16n8k8's.
__device__ __forceinline__ void load_a(const float* us, int p, int w, int lane, float (&a)[4]) {
  const float* r = us + (p * kM + 16 * w + (lane >> 2)) * kK + (lane & 3);
  a[0] = r[0];
  a[1] = r[8 * kK];
  a[2] = r[4];
  a[3] = r[8 * kK + 4];
}

// B^T d B of F(2x2,3x3) for the window at (2 ty, 2 tx) of channel k's patch, split into hi and
// lo and stored in V's planes at point xi = 4 row + column, tile n, channel k. A warp's lanes take
// 4 channels x 8 tiles, so that its stores of a point fill 32 consecutive words.
// The window at d (rows kPatchCols apart) into V's planes at `at` (point xi at at + 256 xi).
__device__ __forceinline__ void transform_window(const float* d, uint32_t* at) {
  float t[4][4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const float d0 = d[c], d1 = d[kPatchCols + c], d2 = d[2 * kPatchCols + c],
                d3 = d[3 * kPatchCols + c];
    t[0][c] = d2 - d0;  // B^T's rows as the kernel's (cuda/winograd/matrices.h)
    t[1][c] = d1 + d2;
    t[2][c] = d2 - d1;
    t[3][c] = d3 - d1;
  }
  // plain stores (no asm): a thread's two windows' loads and stores may interleave
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float v[4] = {t[r][2] - t[r][0], t[r][1] + t[r][2], t[r][2] - t[r][1],
                        t[r][3] - t[r][1]};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      uint32_t hi, lo;
      split_tf32(v[c], hi, lo);
      at[(4 * r + c) * 256] = hi;
      at[(4 * r + c) * 256 + kVBytes / 4] = lo;
    }
  }
}
// Warp `warp`'s lanes take channels k and tiles n as above.
__device__ __forceinline__ uint32_t* window_at(uint32_t* vstage, int warp, int lane, int& k,
                                               int& n) {
  k = (warp & 1) * 4 + (lane & 3);
  n = (warp >> 1) * 8 + (lane >> 2);
  return vstage + ((n >> 3) * 2 + (k >> 2)) * 32 + (n & 7) * 4 + (k & 3);
}
__device__ __forceinline__ void transform(const float* patch, uint32_t* vstage, int warp,
                                          int lane) {
  int k, n;
  uint32_t* at = window_at(vstage, warp, lane, k, n);
  transform_window(patch + (k * kPatchRows + 2 * (n >> 3)) * kPatchCols + 2 * (n & 7), at);
}

// A chunk's products for a warpgroup's 8 points: A (U's stage `us`) read into registers two
// points ahead and split there, B by descriptor from V's planes (`vhi`, `vlo`: the warpgroup's
// first point), each point's three wgmma from zero into one of two temporaries, added into the
// sums once the next point's group is issued and the previous one waited for; drained at the end.
// `between(p)` runs after point p's issue (the transform mode's work).
template <bool kOnlyHi, typename Between>
__device__ __forceinline__ void multiply(const float* us, uint32_t vhi, uint32_t vlo, int wg, int w,
                                         int lane, float (&acc)[8][16], float (&tmp)[2][16],
                                         uint32_t (&ahi)[2][4], uint32_t (&alo)[2][4],
                                         Between between) {
  // A's raw values two points ahead, so that their shared-memory latency is off the path from
  // one point's issue to the next
  float raw[2][4];
  load_a(us, wg * 8, w, lane, raw[0]);
  load_a(us, wg * 8 + 1, w, lane, raw[1]);
#pragma unroll
  for (int i = 0; i < 4; ++i) split_tf32(raw[0][i], ahi[0][i], alo[0][i]);
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    const int pt = wg * 8 + p;
    const uint64_t bh = desc(vhi + p * 1024), bl = desc(vlo + p * 1024);
    float (&t)[16] = tmp[p & 1];
    fence();
    if (kOnlyHi) {
      wgmma32(t, ahi[p & 1], bh, 0);
    } else {
      wgmma32(t, alo[p & 1], bh, 0);
      wgmma32(t, ahi[p & 1], bl, 1);
      wgmma32(t, ahi[p & 1], bh, 1);
    }
    commit();
    between(p);
    if (p + 2 < 8) load_a(us, pt + 2, w, lane, raw[p & 1]);
    // the previous point's group is done once at most this one is pending; then its A
    // registers take the next point's, and its temporary goes into the sums
    if (p > 0) wait<1>();
    if (p + 1 < 8) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        split_tf32(raw[(p + 1) & 1][i], ahi[(p + 1) & 1][i], alo[(p + 1) & 1][i]);
    }
    if (p > 0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[p - 1][i] += tmp[(p + 1) & 1][i];
    }
    if (p == 7) {
      wait<0>();
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[7][i] += t[i];
    }
  }
}

// The rate runs' one value a thread, so that no product is dead code.
__device__ __forceinline__ void checksum(float* out, const float (&acc)[8][16]) {
  float sum = 0.f;
#pragma unroll
  for (int p = 0; p < 8; ++p)
#pragma unroll
    for (int i = 0; i < 16; ++i) sum += acc[p][i];
  *out = sum;
}

__device__ __forceinline__ void zero(float (&acc)[8][16]) {
#pragma unroll
  for (int p = 0; p < 8; ++p)
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[p][i] = 0.f;
}

// The transform alone, to time it apart from the products: kWarps warps transform one chunk's
// 256 windows (each thread 256 / (32 kWarps) of them) into V's stage, a proxy fence and a barrier
// a chunk, `chunks` times over one patch in shared memory. kRegs takes the window's values from
// registers (changing every chunk) in place of the patch's reads.
template <int kWarps, bool kRegs>
__global__ void __launch_bounds__(kWarps * 32, 1) transform_rate(const float* D, int chunks,
                                                                   Out* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  float* patch = reinterpret_cast<float*>(smem + 2 * kVBytes);
  for (int i = threadIdx.x; i < kPatch; i += blockDim.x) patch[i] = D[i];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float bump = 0.f;
  const long long c0 = clock64();
  const uint64_t t0 = gtime();
  for (int q = 0; q < chunks; ++q) {
    bump += 1.f;
#pragma unroll
    for (int j = 0; j < 8 / kWarps; ++j) {
      if (kRegs) {  // the window's 16 values from registers: a patch of 4 x 4 around one value
        float local[4 * kPatchCols];
#pragma unroll
        for (int i = 0; i < 4 * kPatchCols; ++i) local[i] = bump + float(i & 7) + lane;
        int k, n;
        transform_window(local, window_at(reinterpret_cast<uint32_t*>(smem), warp + kWarps * j,
                                          lane, k, n));
      } else {
        transform(patch, reinterpret_cast<uint32_t*>(smem), warp + kWarps * j, lane);
      }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
  }
  const long long c1 = clock64();
  const uint64_t t1 = gtime();
  block_out(out, c1 - c0, t1 - t0, bump);
}

// An item's sums out ([point][channel][tile]), a warpgroup's 8 points, and from zero again.
__device__ __forceinline__ void store_item(const Params& g, int item, int wg, int w, int lane,
                                           float (&acc)[8][16]) {
  float* out = g.M + size_t(item) * kP * kM * kN;
  const int r = 16 * w + (lane >> 2), c = 2 * (lane & 3);
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    float* o = out + size_t(wg * 8 + p) * kM * kN;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      o[r * kN + 8 * j + c] = acc[p][4 * j];
      o[r * kN + 8 * j + c + 1] = acc[p][4 * j + 1];
      o[(r + 8) * kN + 8 * j + c] = acc[p][4 * j + 2];
      o[(r + 8) * kN + 8 * j + c + 1] = acc[p][4 * j + 3];
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[p][i] = 0.f;
  }
}

template <bool kOnlyHi, bool kTransform>
__global__ void __launch_bounds__(256, 1) run(Params g) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[kStages];
  const uint32_t bar0 = smem_addr(bars);
  mbar_init_all(bar0, kStages);
  __syncthreads();
  const int wg = threadIdx.x >> 7, w = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int my_items = (g.items - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int total = my_items * g.chunks;
  if (total == 0) return;  // (block-uniform) no waits on copies never issued
  auto issue = [&](int q) {
    const int s = q % kStages, c = q % g.chunks;
    const uint32_t dst = smem_addr(smem + s * kStageBytes), bar = bar0 + 8 * s;
    const uint32_t bytes =
        kUBytes + (kTransform ? kPatchBytes : g.static_v ? 0 : 2 * kVBytes);
    mbar_expect_tx(bar, bytes);
    bulk_copy(dst, g.U + size_t(c) * (kUBytes / 4), kUBytes, bar);
    if (kTransform)
      bulk_copy(smem_addr(smem + kStages * kStageBytes + s * kPatchBytes),
                g.D + size_t(c) * kPatch, kPatchBytes, bar);
    else if (!g.static_v)
      bulk_copy(dst + kUBytes, g.V + size_t(c) * (2 * kVBytes / 4), 2 * kVBytes, bar);
  };
  if (g.static_v) {  // chunk 0's V in every stage, once
    for (int s = 0; s < kStages; ++s)
      for (int i = threadIdx.x; i < 2 * kVBytes / 4; i += blockDim.x)
        reinterpret_cast<float*>(smem + s * kStageBytes + kUBytes)[i] = g.V[i];
    __syncthreads();
  }
  if (g.static_u) {  // no copies at all: chunk 0's U in every stage too (a rate probe)
    for (int s = 0; s < kStages; ++s)
      for (int i = threadIdx.x; i < kUBytes / 4; i += blockDim.x)
        reinterpret_cast<float*>(smem + s * kStageBytes)[i] = g.U[i];
    __syncthreads();
  }
  // the stores above are the generic proxy's; wgmma reads V through the async proxy
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0 && !g.static_u)
    for (int q = 0; q < kStages - 1 && q < total; ++q) issue(q);
  // the transform mode: chunk 0's V before the stream; then each chunk's products transform the
  // next chunk's patch into the next stage's V, and a proxy fence and a barrier end the chunk
  auto patch_of = [&](int s) {
    return reinterpret_cast<const float*>(smem + kStages * kStageBytes + s * kPatchBytes);
  };
  if (kTransform) {
    mbar_wait(bar0, 0);
    transform(patch_of(0), reinterpret_cast<uint32_t*>(smem + kUBytes), threadIdx.x >> 5,
              threadIdx.x & 31);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
  }
  float acc[8][16];
  float tmp[2][16];
  uint32_t ahi[2][4], alo[2][4];
  zero(acc);
  const long long c0 = clock64();
  const uint64_t t0 = gtime();
  // a warpgroup's points' offset in V's planes, the same in each warp (a shuffle from lane 0)
  const uint32_t wgoff = __shfl_sync(~0u, uint32_t(wg) * 8 * 1024, 0);
  // each stage's chunks by their own copy of the body, so that the stage's offsets are constants
  auto body = [&](auto stage, int q) {
    constexpr int s = decltype(stage)::value;
    if (kTransform) {  // chunk q - 1's stage is done with (the barrier that ended it)
      if (threadIdx.x == 0 && q + kStages - 1 < total) issue(q + kStages - 1);
    } else if (!g.static_u) {
      __syncthreads();  // every warp is done with chunk q - 1's stage, which chunk q + 2 takes
      if (threadIdx.x == 0 && q + kStages - 1 < total) issue(q + kStages - 1);
      mbar_wait(bar0 + 8 * s, (q / kStages) & 1);
    }
    const float* us = reinterpret_cast<const float*>(smem + s * kStageBytes);
    const uint32_t vhi = smem_addr(smem) + s * kStageBytes + kUBytes + wgoff, vlo = vhi + kVBytes;
    multiply<kOnlyHi>(us, vhi, vlo, wg, w, lane, acc, tmp, ahi, alo, [&](int p) {
      if (kTransform && p == 0 && q + 1 < total) {  // the next chunk's V, while these multiply
        constexpr int sn = (s + 1) % kStages;
        mbar_wait(bar0 + 8 * sn, ((q + 1) / kStages) & 1);
        transform(patch_of(sn), reinterpret_cast<uint32_t*>(smem + sn * kStageBytes + kUBytes),
                  threadIdx.x >> 5, threadIdx.x & 31);
      }
    });
    if (kTransform) {  // the next chunk's V for wgmma (the async proxy) and for every warp
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
    }
    if (g.store && q % g.chunks == g.chunks - 1)  // the item's end: its sums out, from zero
      store_item(g, blockIdx.x + (q / g.chunks) * gridDim.x, wg, w, lane, acc);
  };
  for (int q = 0; q < total; q += kStages) {
    body(std::integral_constant<int, 0>(), q);
    if (q + 1 < total) body(std::integral_constant<int, 1>(), q + 1);
    if (q + 2 < total) body(std::integral_constant<int, 2>(), q + 2);
  }
  __syncthreads();  // the block's time is its slowest warp's
  const long long c1 = clock64();
  const uint64_t t1 = gtime();
  if (!g.store) checksum(g.M + blockIdx.x * blockDim.x + threadIdx.x, acc);
  if (threadIdx.x == 0) {
    g.cycles[blockIdx.x] = c1 - c0;
    g.ns[blockIdx.x] = t1 - t0;
  }
}

// The transform mode with warps of their own for it: two multiplying warpgroups and a third that
// copies and transforms (transform = 2). U and the patch in 4 stages, V in 2; mbarriers pass the
// stages between them: U's full (the copies' bytes), U's empty (the 256 multiplying threads, a
// chunk done), V's full (the 128 transforming threads, after a proxy fence), V's empty. The
// transforming warpgroup gives its registers to the others (setmaxnreg).
constexpr int kWsStages = 4;
constexpr int kWsPatch = kWsStages * kUBytes;
constexpr int kWsV = (kWsPatch + kWsStages * kPatchBytes + 1023) / 1024 * 1024;
constexpr int kWsBytes = kWsV + 2 * 2 * kVBytes;
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

template <bool kOnlyHi>
__global__ void __launch_bounds__(384, 1) run_ws(Params g) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[2 * kWsStages + 4];
  const uint32_t b = smem_addr(bars), s0 = smem_addr(smem);
  const uint32_t full_u = b, empty_u = b + 8 * kWsStages, full_v = b + 16 * kWsStages,
                 empty_v = full_v + 16;
  if (threadIdx.x == 0) {
    for (int k = 0; k < kWsStages; ++k) {
      fastlayers::mbar_init(full_u + 8 * k, 1);
      fastlayers::mbar_init(empty_u + 8 * k, 256);
    }
    for (int k = 0; k < 2; ++k) {
      fastlayers::mbar_init(full_v + 8 * k, 128);
      fastlayers::mbar_init(empty_v + 8 * k, 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int my_items = (g.items - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int total = my_items * g.chunks;
  if (total == 0) return;  // (block-uniform) no waits on copies never issued
  const long long c0 = clock64();
  const uint64_t t0 = gtime();
  float acc[8][16];
  if (threadIdx.x >= 256) {  // copies and transforms
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    const int pt = threadIdx.x - 256, pw = pt >> 5, lane = pt & 31;
    auto issue = [&](int q) {
      const int st = q % kWsStages, c = q % g.chunks;
      const uint32_t bar = full_u + 8 * st;
      mbar_expect_tx(bar, kUBytes + kPatchBytes);
      bulk_copy(s0 + st * kUBytes, g.U + size_t(c) * (kUBytes / 4), kUBytes, bar);
      bulk_copy(s0 + kWsPatch + st * kPatchBytes, g.D + size_t(c) * kPatch, kPatchBytes, bar);
    };
    if (pt == 0)
      for (int q = 0; q < kWsStages - 1 && q < total; ++q) issue(q);
    for (int q = 0; q < total; ++q) {
      mbar_wait(full_u + 8 * (q % kWsStages), (q / kWsStages) & 1);
      if (q >= 2) mbar_wait(empty_v + 8 * (q % 2), ((q - 2) / 2) & 1);
      const float* patch = reinterpret_cast<const float*>(smem + kWsPatch +
                                                          (q % kWsStages) * kPatchBytes);
      uint32_t* vst = reinterpret_cast<uint32_t*>(smem + kWsV + (q % 2) * 2 * kVBytes);
      transform(patch, vst, pw, lane);
      transform(patch, vst, pw + 4, lane);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      mbar_arrive(full_v + 8 * (q % 2));
      // then chunk q + 2's copies into chunk q - 1's stage, once multiplied: after this chunk's
      // V, so that no transforming thread waits for the multiplying ones before it
      if (pt == 0 && q + kWsStages - 1 < total) {
        if (q >= 1) mbar_wait(empty_u + 8 * ((q - 1) % kWsStages), ((q - 1) / kWsStages) & 1);
        issue(q + kWsStages - 1);
      }
    }
  } else {  // multiplies
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int wg = threadIdx.x >> 7, w = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const uint32_t wgoff = __shfl_sync(~0u, uint32_t(wg) * 8 * 1024, 0);
    float tmp[2][16];
    uint32_t ahi[2][4], alo[2][4];
    zero(acc);
    for (int q = 0; q < total; ++q) {
      mbar_wait(full_u + 8 * (q % kWsStages), (q / kWsStages) & 1);
      mbar_wait(full_v + 8 * (q % 2), (q / 2) & 1);
      const float* us = reinterpret_cast<const float*>(smem + (q % kWsStages) * kUBytes);
      const uint32_t vhi = s0 + kWsV + (q % 2) * 2 * kVBytes + wgoff, vlo = vhi + kVBytes;
      multiply<kOnlyHi>(us, vhi, vlo, wg, w, lane, acc, tmp, ahi, alo, [](int) {});
      mbar_arrive(empty_v + 8 * (q % 2));
      mbar_arrive(empty_u + 8 * (q % kWsStages));
      if (g.store && q % g.chunks == g.chunks - 1)
        store_item(g, blockIdx.x + (q / g.chunks) * gridDim.x, wg, w, lane, acc);
    }
    if (!g.store) checksum(g.M + blockIdx.x * 256 + threadIdx.x, acc);
  }
  __syncthreads();  // the block's time is its slowest warp's
  const long long c1 = clock64();
  const uint64_t t1 = gtime();
  if (threadIdx.x == 0) {
    g.cycles[blockIdx.x] = c1 - c0;
    g.ns[blockIdx.x] = t1 - t0;
  }
}

static float tf32_rn(float v) {  // round to nearest even at TF32's 10 fraction bits
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t lsb = (u >> 13) & 1;
  u = (u + 0xfff + lsb) & 0xffffe000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

int main(int argc, char** argv) {
  const int C = 256, chunks = C / kK;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> U(size_t(chunks) * kP * kM * kK), Vw(size_t(chunks) * kP * kN * kK);
  for (auto& x : U) x = uni(rng);
  for (auto& x : Vw) x = uni(rng);  // [chunk][p][n][k], whole
  // V's planes as a data transform would store them: hi, lo; each point's 32 x 8 as core
  // matrices of 8 rows (n) x 4 values (k), (n / 8, k / 4) at ((n / 8) 2 + k / 4) x 32 values
  std::vector<float> V(size_t(chunks) * 2 * kP * kN * kK);
  for (int c = 0; c < chunks; ++c)
    for (int p = 0; p < kP; ++p)
      for (int n = 0; n < kN; ++n)
        for (int k = 0; k < kK; ++k) {
          const float v = Vw[((size_t(c) * kP + p) * kN + n) * kK + k], hi = tf32_rn(v);
          const size_t at = ((n / 8) * 2 + k / 4) * 32 + (n % 8) * 4 + k % 4;
          V[(size_t(c) * 2 + 0) * kP * 256 + p * 256 + at] = hi;
          V[(size_t(c) * 2 + 1) * kP * 256 + p * 256 + at] = v - hi;
        }
  // the transform mode's patches, and their V: in float (for FFMA's order) and exact in double,
  // [chunk][p][n][k]
  std::vector<float> D(size_t(chunks) * kPatch), Vf(Vw.size());
  std::vector<double> Vd(Vw.size());
  for (auto& x : D) x = uni(rng);
  for (int c = 0; c < chunks; ++c)
    for (int k = 0; k < kK; ++k)
      for (int n = 0; n < kN; ++n) {
        const float* d = &D[size_t(c) * kPatch + (k * kPatchRows + 2 * (n / 8)) * kPatchCols +
                            2 * (n % 8)];
        // B^T d B by a generic 4 x 4 product with the generated matrix, in float (each sum has
        // at most two terms that are not zero, so the kernel's adds round alike) and in double
        using BT = fastlayers::winograd::Matrices<2, 3>;
        // row o of B^T times the vector xf(i) in float, xd(i) in double
        const auto bt_row = [](int o, auto xf, auto xd, float& f, double& e) {
          f = 0.f;
          e = 0.0;
          for (int i = 0; i < 4; ++i)
            if (BT::BT(o, i) != 0.0) {
              f += float(BT::BT(o, i)) * xf(i);
              e += BT::BT(o, i) * xd(i);
            }
        };
        float tf[4][4];
        double td[4][4];
        for (int r = 0; r < 4; ++r)
          for (int j = 0; j < 4; ++j) {
            const auto dij = [&](int i) { return d[i * kPatchCols + j]; };
            bt_row(r, dij, dij, tf[r][j], td[r][j]);
          }
        for (int r = 0; r < 4; ++r)
          for (int col = 0; col < 4; ++col) {
            const size_t at = ((size_t(c) * kP + 4 * r + col) * kN + n) * kK + k;
            bt_row(col, [&](int j) { return tf[r][j]; }, [&](int j) { return td[r][j]; }, Vf[at],
                   Vd[at]);
          }
      }
  // float64 references, M[p][m][n]: V of each chunk (mode 0, copied), chunk 0's V for every
  // chunk (1, kept), or each chunk's V transformed from its patch (2); and float32 FFMA's error
  // in order (k fastest, on V as float adds give it) against each, for scale
  auto reference = [&](int mode, std::vector<double>& ref, double& ffma_rel) {
    ref.assign(size_t(kP) * kM * kN, 0.0);
    double e2 = 0, r2 = 0;
    for (int p = 0; p < kP; ++p)
      for (int m = 0; m < kM; ++m)
        for (int n = 0; n < kN; ++n) {
          double d = 0;
          float f = 0.f;
          for (int c = 0; c < chunks; ++c)
            for (int k = 0; k < kK; ++k) {
              const float u = U[((size_t(c) * kP + p) * kM + m) * kK + k];
              const size_t at = ((size_t(mode == 1 ? 0 : c) * kP + p) * kN + n) * kK + k;
              d += double(u) * (mode == 2 ? Vd[at] : double(Vw[at]));
              f = std::fmaf(u, mode == 2 ? Vf[at] : Vw[at], f);
            }
          ref[(size_t(p) * kM + m) * kN + n] = d;
          e2 += (f - d) * (f - d);
          r2 += d * d;
        }
    ffma_rel = std::sqrt(e2 / r2);
  };
  std::vector<double> refs[3];
  double ffma_rel[3];
  for (int mode = 0; mode < 3; ++mode) reference(mode, refs[mode], ffma_rel[mode]);
  float *dU, *dV, *dD, *dM;
  long long* dc;
  unsigned long long* dn;
  const int items_rate = sms * 8;
  CHECK(cudaMalloc(&dU, U.size() * 4));
  CHECK(cudaMalloc(&dV, V.size() * 4));
  CHECK(cudaMalloc(&dD, D.size() * 4));
  CHECK(cudaMemcpy(dD, D.data(), D.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&dM, size_t(items_rate) * kP * kM * kN * 4));
  CHECK(cudaMalloc(&dc, sms * sizeof(long long)));
  CHECK(cudaMalloc(&dn, sms * sizeof(unsigned long long)));
  CHECK(cudaMemcpy(dU, U.data(), U.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dV, V.data(), V.size() * 4, cudaMemcpyHostToDevice));
  const int smem = kStages * (kStageBytes + kPatchBytes);
  CHECK(cudaFuncSetAttribute(run<false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(run<true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(run<false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(run<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(run_ws<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kWsBytes));
  CHECK(cudaFuncSetAttribute(run_ws<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kWsBytes));
  auto launch = [&](const Params& p, int blocks) {
    if (p.transform == 2) {
      if (p.only_hi) run_ws<true><<<blocks, 384, kWsBytes>>>(p);
      else run_ws<false><<<blocks, 384, kWsBytes>>>(p);
    } else if (p.transform) {
      if (p.only_hi) run<true, true><<<blocks, 256, smem>>>(p);
      else run<false, true><<<blocks, 256, smem>>>(p);
    } else {
      if (p.only_hi) run<true, false><<<blocks, 256, smem>>>(p);
      else run<false, false><<<blocks, 256, smem>>>(p);
    }
  };
  std::printf("%s, %d SMs; C = %d (%d chunks), 16 points x 64 x 32 an item\n", prop.name, sms, C,
              chunks);
  // correctness: two items a block (the sums' reset between items), V copied, V kept and V
  // transformed; split TF32, and hi hi alone (TF32) to show what the split buys
  bool ok = true;
  const char* kModes[4] = {"copied     ", "kept       ", "transformed", "transformed, own warps"};
  for (int mode = 0; mode < 4; ++mode)
    for (int only_hi = 0; only_hi < 2; ++only_hi) {
      Params p{dU, dV, dD, dM, chunks, 2 * sms, mode == 1, only_hi, 0, mode < 2 ? 0 : mode - 1,
               1, dc, dn};
      CHECK(cudaMemset(dM, 0, size_t(2 * sms) * kP * kM * kN * 4));
      launch(p, sms);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      const int r = mode < 3 ? mode : 2;
      const std::vector<double>& ref = refs[r];
      double worst = 0, worst_all = 0, rms = 0, rms_ref = 0;
      std::vector<float> got(size_t(kP) * kM * kN);
      for (int item : {0, sms - 1, sms, 2 * sms - 1}) {  // both items of the first and last block
        CHECK(cudaMemcpy(got.data(), dM + size_t(item) * got.size(), got.size() * 4,
                         cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < got.size(); ++i) {
          const double e = std::fabs(got[i] - ref[i]);
          worst = std::max(worst, e);
          rms += e * e;
          rms_ref += ref[i] * ref[i];
          worst_all = std::max(worst_all, std::fabs(ref[i]));
        }
      }
      const double rel = std::sqrt(rms / rms_ref);
      std::printf("%s, V %s: max error %.3g (of values up to %.3g), relative L2 %.3g (float32 "
                  "FFMA in order %.3g)\n", only_hi ? "hi hi alone (TF32)" : "split TF32        ",
                  kModes[mode], worst, worst_all, rel, ffma_rel[r]);
      if (!only_hi && !(rel <= ffma_rel[r])) ok = false;
    }
  if (!ok) {
    std::printf("FAILED: split TF32 less accurate than float32 FFMA\n");
    return 1;
  }
  // rate: 8 items a block
  const char* kRuns[5] = {"U and V copied", "U copied, V static", "no copies",
                          "U, patch copied, V made", "V made by own warps"};
  for (int copies = 0; copies < 5; ++copies)
    for (int only_hi = 0; only_hi < 2; ++only_hi) {
      const int static_v = copies == 1 || copies == 2, static_u = copies == 2,
                transform = copies == 3 ? 1 : copies == 4 ? 2 : 0;
      // the median of 5 runs (rate, clock)
      std::vector<std::pair<double, double>> runs;
      for (int rep = 0; rep < 5; ++rep) {
        Params p{dU, dV, dD, dM, chunks, items_rate, static_v, only_hi, static_u, transform, 0,
                 dc, dn};
        launch(p, sms);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::vector<long long> cyc(sms);
        std::vector<unsigned long long> ns(sms);
        CHECK(cudaMemcpy(cyc.data(), dc, sms * sizeof(long long), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(ns.data(), dn, sms * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        std::vector<BlockTime> t(sms);
        for (int i = 0; i < sms; ++i) t[i] = {cyc[i], ns[i]};
        const std::pair<double, double> gt = grid_time(t);
        const double flops = 8.0 * chunks * kP * kM * kN * kK * 2;  // a block's
        runs.push_back({flops / gt.first, gt.second});
      }
      const double best = median(runs).first, ghz = median(runs).second;
      std::printf("%-19s %-23s: %5.0f flop/cycle/SM (the slowest block), at %.2f GHz\n",
                  only_hi ? "hi hi alone (TF32)" : "split TF32", kRuns[copies], best, ghz);
    }
  // the transform alone, cycles a chunk (the slowest block, median of 5): 8 warps (the same-warps
  // mode's), 4 warps (run_ws's transforming warpgroup), and 8 warps with the window's values
  // from registers
  {
    Out* dout;
    CHECK(cudaMalloc(&dout, sms * sizeof(Out)));
    const int tsmem = 2 * kVBytes + kPatchBytes;
    auto probe = [&](auto kernel, int threads, const char* name) {
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, tsmem));
      std::vector<std::pair<double, double>> runs;
      for (int rep = 0; rep < 5; ++rep) {
        const int n = 8 * chunks;
        kernel<<<sms, threads, tsmem>>>(dD, n, dout);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::vector<Out> h(sms);
        CHECK(cudaMemcpy(h.data(), dout, sms * sizeof(Out), cudaMemcpyDeviceToHost));
        std::vector<BlockTime> t(sms);
        for (int i = 0; i < sms; ++i) t[i] = {h[i].cycles, h[i].ns};
        const std::pair<double, double> gt = grid_time(t);
        runs.push_back({gt.first / n, gt.second});
      }
      std::printf("transform alone, %-28s: %5.0f cycles a chunk\n", name, median(runs).first);
      return 0;
    };
    if (probe(transform_rate<8, false>, 256, "8 warps") ||
        probe(transform_rate<4, false>, 128, "4 warps, 2 windows each") ||
        probe(transform_rate<8, true>, 256, "8 warps, values in registers"))
      return 1;
  }
  (void)argc;
  (void)argv;
  return 0;
}
