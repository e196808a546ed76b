// Complex arithmetic on float2 (x real, y imaginary) for the CUDA kernels.
#pragma once

#include <cuda_runtime.h>

namespace fastlayers {

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {  // a * b
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cmul_conj(float2 a, float2 b) {  // a * conj(b)
  return make_float2(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y);
}
__device__ __forceinline__ float2 cadd(float2 a, float2 b) {
  return make_float2(a.x + b.x, a.y + b.y);
}

}  // namespace fastlayers
