// Division by a divisor fixed at launch, for kernels that split a flat index into coordinates:
// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by one 32x32 -> 64-bit multiply and a shift
// (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994):
// m = ceil(2^p / d), p = 31 + ceil(log2 d), so m < 2^32 and floor(n m / 2^p) = floor(n / d)
// (m d - 2^p < d, so n m / 2^p exceeds n / d by less than n / 2^p < 1 / d).
#pragma once

#include <cstdint>
#include <stdexcept>

#ifdef __CUDACC__
#define FL_FAST_DIV_HD __host__ __device__
#else
#define FL_FAST_DIV_HD
#endif

namespace fastlayers {

struct FastDiv {
  uint32_t d = 1, m = 1u << 31;
  int p = 31;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    if (d == 0 || d > 0x7fffffffu) throw std::invalid_argument("fastlayers: FastDiv divisor");
    int l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    p = 31 + l;
    m = static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d);
  }
  FL_FAST_DIV_HD uint32_t div(uint32_t n) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> p);
  }
};

}  // namespace fastlayers
