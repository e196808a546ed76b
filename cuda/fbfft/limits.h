// The sizes fbfft serves, written once: the ops' checks (csrc/fbfft), the FFT convolution's
// fbfft backend (cuda/fft_conv/layout.h) and the Python package (_C.FBFFT_MAX_1D / _2D) read
// them. Plain C++, so builds without CUDA see them too.
#pragma once

#include <cstdint>

namespace fastlayers {
namespace fbfft {

constexpr int64_t kMax1d = 256;        // 1-D transforms: powers of two 2..256
constexpr int64_t kMax2d = 128;        // 2-D transforms: powers of two 2..128 per side
constexpr int64_t kMaxPoints = 16384;  // nh * nw of one transform (the kernels' bound)

constexpr bool pow2_in(int64_t n, int64_t max) { return n >= 2 && n <= max && (n & (n - 1)) == 0; }

}  // namespace fbfft
}  // namespace fastlayers
