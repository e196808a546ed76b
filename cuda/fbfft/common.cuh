// fbfft's shared pieces: compile-time index helpers (static_for keeps register arrays indexed by
// constants) and the host-side launch helpers every family's launchers use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "../common/check.h"
#include "../common/complex.h"
#include "../common/launch.cuh"
#include "../common/storage.h"
#include "fbfft.h"

namespace fastlayers {
namespace fbfft {
namespace detail {

__host__ __device__ constexpr int bit_reverse(int v, int bits) {
  int r = 0;
  for (int b = 0; b < bits; ++b) r = (r << 1) | ((v >> b) & 1);
  return r;
}

__host__ __device__ constexpr int ilog2(int n) { return n <= 1 ? 0 : 1 + ilog2(n / 2); }

// f(std::integral_constant<int, I>) for I = 0..N-1, expanded at compile time, so register arrays
// are only ever indexed by constants (a loop the compiler declines to unroll would move them to
// local memory).
template <typename F, int... Is>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, Is...>) {
  (f(std::integral_constant<int, Is>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl(f, std::make_integer_sequence<int, N>{});
}

inline unsigned grid_for(int64_t batch, int per_block) {
  const int64_t blocks = (batch + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) throw std::runtime_error("fastlayers: fbfft batch too large");
  return static_cast<unsigned>(blocks);
}

// Whether a kernel whose spectrum has bin stride 1 moves it directly: where `measured` says so,
// unless `mode` says never or always.
inline bool use_direct(DirectIo mode, bool bin_stride_1, bool measured) {
  return bin_stride_1 &&
         (mode == DirectIo::Always || (mode == DirectIo::Measured && measured));
}

// float32 output rows and window aligned to 4 floats: 16-byte stores.
inline bool vec4_output(const void* out, Real type, int out_w, int ox) {
  return type == Real::F32 && out_w % 4 == 0 && ((ox % 4) + 4) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(out) % 16 == 0;
}

// float32 rows of even width at an even offset, 8-byte aligned: every float pair of a lane kernel
// lies wholly inside or wholly outside a row.
inline bool float_pairs(const void* p, Real type, int w, int ox) {
  return type == Real::F32 && w % 2 == 0 && ox % 2 == 0 && reinterpret_cast<uintptr_t>(p) % 8 == 0;
}

// Floats per store of the lane kernels' output rows: 4 where vec4_output allows, 2 for float
// pairs, else 1.
inline int lane_output_width(const void* out, Real type, int out_w, int ox) {
  return vec4_output(out, type, out_w, ox) ? 4 : float_pairs(out, type, out_w, ox) ? 2 : 1;
}

inline bool vec4_window(const void* in, Real type, int nw, int w, int ox) {
  return type == Real::F32 && nw >= 4 && w % 4 == 0 && ((ox % 4) + 4) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(in) % 16 == 0;
}

// One launch: `per_block` images per block of Cfg::THREADS threads, Cfg::SMEM bytes of shared
// memory.
template <typename Cfg, typename Kernel, typename... Args>
void launch(Kernel kernel, int64_t batch, int per_block, cudaStream_t stream, Args... args) {
  allow_shared_memory(kernel, Cfg::SMEM);
  kernel<<<grid_for(batch, per_block), Cfg::THREADS, Cfg::SMEM, stream>>>(args...);
  FL_LAUNCH_CHECK();
}

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
