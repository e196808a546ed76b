// Storage types of real data and their conversions, for every kernel family. Tensors are stored in
// float32, float64, float16 or bfloat16; arithmetic runs in float32, or float64 for float64 data.
// A kernel either takes the storage type as a template parameter T (to_compute / from_compute) or,
// to build one kernel per size rather than per type, as a runtime Real (load_real / store_real).
#pragma once

#include <cstdint>

namespace fastlayers {

// A real operand's storage type as a runtime argument (float32 arithmetic).
enum class Real : int { F32 = 0, F16 = 1, BF16 = 2 };

}  // namespace fastlayers

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fastlayers {

// The arithmetic type of storage type T.
template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };
template <typename T> using compute_t = typename Compute<T>::type;

// Storage -> arithmetic.
__device__ __forceinline__ float to_compute(float v) { return v; }
__device__ __forceinline__ double to_compute(double v) { return v; }
__device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 v) { return __bfloat162float(v); }

// Arithmetic -> storage, rounding to nearest: from_compute<T>(v).
template <typename T> __device__ __forceinline__ T from_compute(compute_t<T> v) {
  return static_cast<T>(v);
}
template <> __device__ __forceinline__ __half from_compute<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_compute<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The Real of storage type T (float, __half, __nv_bfloat16).
template <typename T> constexpr Real real_of() { return Real::F32; }
template <> constexpr Real real_of<__half>() { return Real::F16; }
template <> constexpr Real real_of<__nv_bfloat16>() { return Real::BF16; }

// Element i of p, stored as t, in float32; and back.
__device__ __forceinline__ float load_real(const void* p, int64_t i, Real t) {
  switch (t) {
    case Real::F16: return to_compute(static_cast<const __half*>(p)[i]);
    case Real::BF16: return to_compute(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_real(void* p, int64_t i, float v, Real t) {
  switch (t) {
    case Real::F16: static_cast<__half*>(p)[i] = from_compute<__half>(v); break;
    case Real::BF16: static_cast<__nv_bfloat16*>(p)[i] = from_compute<__nv_bfloat16>(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

}  // namespace fastlayers
#endif  // __CUDACC__
