// What the kernels of every family share at launch: the element-wise kernels' block size and grid
// for a count of threads (grid-stride loops cover the rest), the GEMM types of a storage type, and
// the shared-memory opt-in of kernels that take more than 48 KB.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "check.h"
#include "gemm.h"
#include "storage.h"

namespace fastlayers {

constexpr int kThreads = 256;

// Blocks for `n` threads' worth of work, at most 2^20.
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20)));
}

// The GEMM types of storage type T: `store` for operands stored as T, `acc` for products kept in
// T's accumulation type (float; double for double).
template <typename T> struct GemmTypes;
template <> struct GemmTypes<float> {
  static constexpr gemm::Type store = gemm::Type::F32, acc = gemm::Type::F32;
};
template <> struct GemmTypes<double> {
  static constexpr gemm::Type store = gemm::Type::F64, acc = gemm::Type::F64;
};
template <> struct GemmTypes<__half> {
  static constexpr gemm::Type store = gemm::Type::F16, acc = gemm::Type::F32;
};
template <> struct GemmTypes<__nv_bfloat16> {
  static constexpr gemm::Type store = gemm::Type::BF16, acc = gemm::Type::F32;
};

namespace detail {
// The largest dynamic shared-memory size set so far per (device, kernel), process-wide.
struct SharedMemoryRecord {
  std::mutex mutex;
  std::map<std::pair<int, const void*>, size_t> allowed;
};
inline SharedMemoryRecord& shared_memory_record() {
  static SharedMemoryRecord record;
  return record;
}
}  // namespace detail

// Allows kernel k `bytes` of dynamic shared memory on the current device. Up to 48 KB a kernel
// needs no opt-in (the callers' kernels declare no static shared memory), so such a launch returns
// before asking anything of the runtime. The attribute is a limit, so each (device, kernel) is set
// once to the largest size asked for so far and smaller launches stay valid. Setting it costs
// microseconds of host time, so a call that finds it set takes no lock: each thread keeps the sizes
// it has seen set (8 entries a kernel signature, by kernel address and device) in front of the
// record.
template <typename Kernel>
inline void allow_shared_memory(Kernel k, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int dev = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  const void* key = reinterpret_cast<const void*>(k);
  struct Seen {
    const void* kernel;
    int dev;
    size_t bytes;
  };
  thread_local Seen seen[8] = {};
  Seen& mine = seen[((reinterpret_cast<uintptr_t>(key) >> 4) + static_cast<uintptr_t>(dev)) & 7];
  if (mine.kernel == key && mine.dev == dev && mine.bytes >= bytes) return;
  detail::SharedMemoryRecord& record = detail::shared_memory_record();
  std::lock_guard<std::mutex> lock(record.mutex);
  size_t& have = record.allowed[{dev, key}];
  if (have < bytes) {
    FL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
    have = bytes;
  }
  mine = Seen{key, dev, have};
}

// The current device's multiprocessor count, for grids of one block an SM. Each thread keeps the
// count of the device it asked last, so a launch asks the runtime for the current device alone.
inline int sm_count() {
  thread_local int seen_dev = -1, seen_sms = 0;
  int dev = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev != seen_dev) {
    FL_CUDA_CHECK(cudaDeviceGetAttribute(&seen_sms, cudaDevAttrMultiProcessorCount, dev));
    seen_dev = dev;
  }
  return seen_sms;
}

}  // namespace fastlayers
