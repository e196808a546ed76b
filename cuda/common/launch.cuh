// What the kernels of every family share at launch: the element-wise kernels' block size and grid
// for a count of threads (grid-stride loops cover the rest), the GEMM types of a storage type, and
// the shared-memory opt-in of kernels that take more than 48 KB.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

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

// Raises kernel k's dynamic shared-memory limit to `bytes` on the current device, once per device
// and record (an attribute set on every call costs host time): `record` is the caller's, one per
// kernel and size (it remembers devices, bit d for device d, not the size: a record whose kernel
// may ask for more takes fbfft's allow_smem, which keeps the largest); devices from 64 on opt in on
// every call. Returns the device.
template <typename Kernel>
inline int opt_in_shared_memory(Kernel k, size_t bytes, std::atomic<uint64_t>& record) {
  int dev = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit == 0 || (record.load(std::memory_order_acquire) & bit) == 0) {
    FL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
    record.fetch_or(bit, std::memory_order_acq_rel);
  }
  return dev;
}

}  // namespace fastlayers
