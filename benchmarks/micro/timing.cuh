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
