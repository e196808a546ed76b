// What the element-wise kernels of every family share: the block size, the grid for a count of
// threads (grid-stride loops cover the rest), and the GEMM types of a storage type.
#pragma once

#include <algorithm>
#include <cstdint>

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

}  // namespace fastlayers
