// What the product-rate programs (mma_rate, wgmma_rate, wgmma_split) share: a checked CUDA call,
// the global timer, and a grid's time from its blocks' own: the slowest block's cycles (the grid
// is done when its last block is), the clock from all blocks' cycles over their time, and the
// median of a program's 5 runs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  std::printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); return 1; } } while (0)

__device__ __forceinline__ uint64_t gtime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A block's cycles and nanoseconds over its loop (thread 0's reads, after a block barrier).
struct BlockTime {
  long long cycles;
  unsigned long long ns;
};

// A block's time and the sum of its threads' values (so that none of their work is dead code),
// written by thread 0.
struct Out {
  long long cycles;
  unsigned long long ns;
  float sum;
};
__device__ __forceinline__ void block_out(Out* out, long long cycles, unsigned long long ns,
                                          float s) {
  __shared__ float red;
  if (threadIdx.x == 0) red = 0.f;
  __syncthreads();
  atomicAdd(&red, s);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = Out{cycles, ns, red};
}

// The slowest block's cycles and the clock in GHz (cycles per nanosecond over all blocks).
inline std::pair<double, double> grid_time(const std::vector<BlockTime>& t) {
  double cmax = 0, csum = 0, nsum = 0;
  for (const BlockTime& b : t) {
    cmax = std::max(cmax, double(b.cycles));
    csum += double(b.cycles);
    nsum += double(b.ns);
  }
  return {cmax, csum / nsum};
}

// The median of runs of (rate, clock), by rate.
inline std::pair<double, double> median(std::vector<std::pair<double, double>> runs) {
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// The device's name and SM count printed; its SM count, or -1.
inline int device_sms() {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return -1;
  std::printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
  return p.multiProcessorCount;
}

// One line of a rate: flops a cycle an SM, the clock it ran at, and TFLOP/s at that clock and at
// 1.83 GHz (the clock behind the published dense rates).
inline void print_rate(const char* name, int warps, std::pair<double, double> rate, int sms) {
  std::printf("%-28s %2d warps/SM: %7.0f flop/cycle/SM, at %.2f GHz %6.1f TFLOP/s, at 1.83 GHz "
              "%6.1f\n", name, warps, rate.first, rate.second,
              rate.first * rate.second * 1e9 * sms / 1e12, rate.first * 1.83e9 * sms / 1e12);
}
