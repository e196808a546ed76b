// Issue rates of the float32 products' building blocks on one GPU, operands in registers (no
// shared memory, no transform): the ceiling a kernel built from them cannot pass. Each case runs
// a grid of `blocks per SM` x SMs blocks for a fixed number of iterations; the rate is counted in
// flops per cycle per SM (clock64 inside the kernel over %globaltimer gives the clock it ran at),
// so that it scales to any clock. Cases:
//   tf32 mma        mma.sync.m16n8k8 tf32, float32 sums, 8 independent fragments a warp
//   split3 + FADD   the fused kernel's split TF32 products: per fragment lo*hi + hi*lo + hi*hi,
//                   three mma chained from zero, then 4 FADD into the sums (8 fragments a warp)
//   f16 mma         mma.sync.m16n8k16 f16, float32 sums (for comparison with the 16-bit kernel)
//   ffma            float32 FFMA, 16 independent chains a thread
//   split3 from smem a warp's point as the fused kernel multiplies it: 4 ldmatrix.x4 of its U
//                   and V fragments, their 16 registers split (cvt.rn.tf32.f32, lo by FADD),
//                   then split3 + FADD over the 8 fragments: the products' part of a chunk,
//                   nothing else
// From the repository root:
//   nvcc -O3 -std=c++17 -arch=sm_90 benchmarks/micro/mma_rate.cu -o mma_rate && ./mma_rate
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "../../cuda/common/mma.cuh"
#include "timing.cuh"

constexpr int kIters = 4096;
constexpr int kFrags = 8;

// The kernels' own products (cuda/common/mma.cuh): mma1688_tf32, mma16816, split_tf32 and
// mma1688_tf32_split<false>, the fused kernel's split TF32 product.
using fastlayers::mma16816;
using fastlayers::mma1688_tf32;
using fastlayers::mma1688_tf32_split;
using fastlayers::split_tf32;

__device__ __forceinline__ void ldmatrix(uint32_t (&r)[4], uint32_t saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
}

template <int Case>
__global__ void run(Out* out, float seed) {
  uint32_t a[4], a2[4], b[2], b2[2];
  for (int i = 0; i < 4; ++i) {
    a[i] = __float_as_uint(seed * (threadIdx.x + i));
    a2[i] = __float_as_uint(seed * 1e-4f * (threadIdx.x + 3 * i));
  }
  for (int i = 0; i < 2; ++i) {
    b[i] = __float_as_uint(seed * (threadIdx.x - i));
    b2[i] = __float_as_uint(seed * 1e-4f * (threadIdx.x + 5 * i));
  }
  float acc[kFrags][4];
  for (int f = 0; f < kFrags; ++f)
    for (int i = 0; i < 4; ++i) acc[f][i] = 0.f;
  float x[16];
  for (int i = 0; i < 16; ++i) x[i] = seed * i;
  // 32 KB of operands for the shared-memory case (16 row offsets x 1 KB, A and B halves)
  __shared__ __align__(128) float stage[8192];
  for (int i = threadIdx.x; i < 8192; i += blockDim.x) stage[i] = seed * __sinf(0.1f * i);
  const uint32_t sbase =
      uint32_t(__cvta_generic_to_shared(stage)) + (threadIdx.x & 31) * 16;
  __syncthreads();
  const long long c0 = clock64();
  const uint64_t t0 = gtime();
  // 4 iterations unrolled: a chunk's 4 points in the shared-memory case
#pragma unroll 4
  for (int it = 0; it < kIters; ++it) {
    if (Case == 0) {  // (cases 0 and 2: equal operands, but each fragment its own sums)
#pragma unroll
      for (int f = 0; f < kFrags; ++f) mma1688_tf32(acc[f], a, b);
    } else if (Case == 1) {
      // As a warp's point in the kernel: 2 A fragments (result channels) by 4 B fragments
      // (tiles). A changes every iteration (or ptxas hoists the products out of the loop), and
      // the B fragments differ from each other (or it computes equal fragments once).
      const uint32_t ha[2][4] = {{a[0] + it, a[1], a[2], a[3]}, {a[0] - it, a[1], a[2], a[3]}};
      const uint32_t la[2][4] = {{a2[0] + it, a2[1], a2[2], a2[3]},
                                 {a2[0] - it, a2[1], a2[2], a2[3]}};
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        const uint32_t hb[2] = {b[0] + (f & 3), b[1]}, lb[2] = {b2[0] + (f & 3), b2[1]};
        mma1688_tf32_split<false>(acc[f], ha[f >> 2], la[f >> 2], hb, lb);
      }
    } else if (Case == 4) {
      // A warp's point as the kernel multiplies it: 2 A fragments (U, 32 result channels) and
      // 4 B fragments (V, 32 tiles) by 4 ldmatrix.x4 from shared memory, the 16 registers split
      // into hi and lo, then the 8 fragments' three mma and 4 FADD each.
      // (ldmatrix by a 32-bit shared address made once: mma.cuh's ldmatrix_x4 converts a generic
      // pointer at each call, address arithmetic the kernel's chunk loop does not have)
      const uint32_t off = (it & 15) * 1024;
      uint32_t ra[2][4], rb[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) ldmatrix(ra[m], sbase + off + m * 512);
#pragma unroll
      for (int n = 0; n < 2; ++n) ldmatrix(rb[n], sbase + off + 16384 + n * 512);
      uint32_t ha[2][4], la[2][4], hb[4][2], lb[4][2];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32(__uint_as_float(ra[m][i]), ha[m][i], la[m][i]);
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int i = 0; i < 2; ++i)
          split_tf32(__uint_as_float(rb[n >> 1][(n & 1) * 2 + i]), hb[n][i], lb[n][i]);
#pragma unroll
      for (int f = 0; f < kFrags; ++f)
        mma1688_tf32_split<false>(acc[f], ha[f >> 2], la[f >> 2], hb[f & 3], lb[f & 3]);
    } else if (Case == 2) {
#pragma unroll
      for (int f = 0; f < kFrags; ++f) mma16816(acc[f], a, b, __half());
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k)
#pragma unroll
        for (int i = 0; i < 16; ++i) x[i] = fmaf(x[i], 0.999f, seed);
    }
  }
  __syncthreads();  // the block's time is its slowest warp's
  const long long c1 = clock64();
  const uint64_t t1 = gtime();
  float s = 0.f;
  for (int f = 0; f < kFrags; ++f)
    for (int i = 0; i < 4; ++i) s += acc[f][i];
  for (int i = 0; i < 16; ++i) s += x[i];
  block_out(out, c1 - c0, t1 - t0, s);
}

// flops a warp issues per iteration (a product counted as 2 flops; the split cases count the
// product they deliver once, not the three mma they spend)
constexpr double kFlopsPerIter[5] = {kFrags * 16 * 8 * 8 * 2.0, kFrags * 16 * 8 * 8 * 2.0,
                                     kFrags * 16 * 8 * 16 * 2.0, 32 * 8 * 16 * 2.0,
                                     kFrags * 16 * 8 * 8 * 2.0};
const char* kNames[5] = {"tf32 mma (m16n8k8)", "split3 + FADD (delivered)", "f16 mma (m16n8k16)",
                         "ffma", "split3 from smem (delivered)"};

template <int Case>
int measure(int sms, int blocks_per_sm, int warps) {
  const int blocks = sms * blocks_per_sm;
  Out* d;
  CHECK(cudaMalloc(&d, sizeof(Out) * blocks));
  std::vector<Out> h(blocks);
  // the median of 5 runs (rate, clock)
  std::vector<std::pair<double, double>> runs;
  for (int rep = 0; rep < 5; ++rep) {
    run<Case><<<blocks, warps * 32>>>(d, 1.0f + rep * 1e-3f);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h.data(), d, sizeof(Out) * blocks, cudaMemcpyDeviceToHost));
    std::vector<BlockTime> t(blocks);
    for (int i = 0; i < blocks; ++i) t[i] = {h[i].cycles, h[i].ns};
    const std::pair<double, double> g = grid_time(t);
    // rate per SM per cycle: every block of an SM runs at once (blocks_per_sm fit by design)
    const double flops_sm = double(blocks_per_sm) * warps * kIters * kFlopsPerIter[Case];
    runs.push_back({flops_sm / g.first, g.second});
  }
  print_rate(kNames[Case], blocks_per_sm * warps, median(runs), sms);
  cudaFree(d);
  return 0;
}

int main() {
  const int sms = device_sms();
  if (sms < 0) return 1;
  for (int w : {4, 8, 16}) {
    if (measure<0>(sms, 1, w) || measure<1>(sms, 1, w) || measure<4>(sms, 1, w) ||
        measure<2>(sms, 1, w) || measure<3>(sms, 1, w))
      return 1;
  }
  return 0;
}
