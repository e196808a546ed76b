// What split TF32 could deliver by wgmma (sm_90a) instead of mma.sync: the issue rate of the
// products alone, no transform, no copies, in flops a cycle an SM (clock64 over %globaltimer
// gives the clock). A warpgroup takes 64 result channels x N tiles of a point; A (the filters,
// 64 x 8) comes from registers, B (the data, 8 x N) from shared memory by descriptor. The
// operands' values are whatever the memory holds: only the rate is measured. Cases:
//   wgmma tf32            one wgmma a point straight into the sums (the TF32 product, hi alone)
//   split3 by wgmma       lo*hi + hi*lo + hi*hi a point from zero into a temporary (two, taking
//                         turns), then 16 FADD into the sums after the next point's three are
//                         issued; B's hi and lo already split in shared memory
// In both, A's 4 registers are split each point (cvt.rn.tf32, lo by FADD), from values that
// change every point (one FADD), so that the splits stay in the loop.
// Two warpgroups an SM (one block of 256 threads), as the fused kernel's 8 warps.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a benchmarks/micro/wgmma_rate.cu \
//     -o wgmma_rate && ./wgmma_rate
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "timing.cuh"
#include "wgmma_tf32.cuh"

constexpr int kIters = 512;

// 8 points a warpgroup, their sums 8 x 16 registers a thread.
constexpr int kPoints = 8;

template <int Case>
__global__ void __launch_bounds__(256, 1) run(Out* out, float seed) {
  __shared__ __align__(1024) float stage[8192];  // B's hi and lo planes, 16 KB each
  for (int i = threadIdx.x; i < 8192; i += blockDim.x) stage[i] = seed * __sinf(0.1f * i);
  // the stores are the generic proxy's; wgmma reads B through the async proxy
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t sb = uint32_t(__cvta_generic_to_shared(stage));
  float acc[kPoints][16];
#pragma unroll
  for (int p = 0; p < kPoints; ++p)
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[p][i] = 0.f;
  float tmp[2][16];
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int i = 0; i < 16; ++i) tmp[t][i] = 0.f;
  float av[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) av[i] = seed * (threadIdx.x + i);
  // A's registers for two points, taking turns: a wgmma's A registers may change only after it
  // is done (else ptxas serializes every wgmma), so point p + 1's are split once point p - 1's
  // group is waited for
  uint32_t ahi[2][4], alo[2][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) split_tf32(av[i], ahi[0][i], alo[0][i]);
  float bump = 0.f;
  const long long c0 = clock64();
  const uint64_t t0 = gtime();
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int p = 0; p < kPoints; ++p) {
      const uint32_t off = ((it * kPoints + p) & 7) * 1024;
      const uint64_t bhi = desc(sb + off), blo = desc(sb + 16384 + off);
      fence();
      if (Case == 0) {
        wgmma32(acc[p], ahi[p & 1], bhi, 1);
        commit();
        wait<1>();
      } else {
        float (&t)[16] = tmp[p & 1];
        wgmma32(t, alo[p & 1], bhi, 0);
        wgmma32(t, ahi[p & 1], blo, 1);
        wgmma32(t, ahi[p & 1], bhi, 1);
        commit();
        // the previous point's three are done once at most this group is pending (the
        // pipeline drains at the end of the points: ptxas serializes every wgmma where a sum
        // is read across the loop's back edge)
        if (p > 0) {
          wait<1>();
#pragma unroll
          for (int i = 0; i < 16; ++i) acc[p - 1][i] += tmp[(p + 1) & 1][i];
        }
        if (p == kPoints - 1) {
          wait<0>();
#pragma unroll
          for (int i = 0; i < 16; ++i) acc[p][i] += t[i];
        }
      }
      bump += 1.f;  // A changes every point, or ptxas takes the splits out of the loop
#pragma unroll
      for (int i = 0; i < 4; ++i)
        split_tf32(av[i] + bump, ahi[(p + 1) & 1][i], alo[(p + 1) & 1][i]);
    }
  }
  wait<0>();
  __syncthreads();  // the block's time is its slowest warp's
  const long long c1 = clock64();
  const uint64_t t1 = gtime();
  float s = 0.f;
#pragma unroll
  for (int p = 0; p < kPoints; ++p)
#pragma unroll
    for (int i = 0; i < 16; ++i) s += acc[p][i];
  block_out(out, c1 - c0, t1 - t0, s);
}

const char* kNames[2] = {"wgmma tf32 (m64n32k8)", "split3 by wgmma (delivered)"};

template <int Case>
int measure(int sms) {
  Out* d;
  CHECK(cudaMalloc(&d, sizeof(Out) * sms));
  std::vector<Out> h(sms);
  // the median of 5 runs (rate, clock)
  std::vector<std::pair<double, double>> runs;
  for (int rep = 0; rep < 5; ++rep) {
    run<Case><<<sms, 256>>>(d, 1.0f + rep * 1e-3f);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h.data(), d, sizeof(Out) * sms, cudaMemcpyDeviceToHost));
    std::vector<BlockTime> t(sms);
    for (int i = 0; i < sms; ++i) t[i] = {h[i].cycles, h[i].ns};
    const std::pair<double, double> g = grid_time(t);
    // two warpgroups an SM, kPoints points an iteration, 64 x 32 x 8 products a point
    const double flops = 2.0 * kIters * kPoints * 64 * 32 * 8 * 2;
    runs.push_back({flops / g.first, g.second});
  }
  print_rate(kNames[Case], 8, median(runs), sms);
  cudaFree(d);
  return 0;
}

int main() {
  const int sms = device_sms();
  return sms < 0 || measure<0>(sms) || measure<1>(sms);
}
