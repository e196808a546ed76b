// A process-wide LRU cache of batched 2-D cuFFT plans (nh = 1: 1-D plans). Plans are created
// without their own work area; the caller passes one (from whatever allocator it owns) at
// execution time.
#pragma once

#include <cuda_runtime.h>
#include <cufft.h>

#include <cstddef>
#include <cstdint>

namespace fastlayers {
namespace cufft_plans {

enum class Transform : int { R2C_F32 = 0, C2R_F32 = 1, R2C_F64 = 2, C2R_F64 = 3 };

// Bytes of work area the plan for `batch` transforms of nh x nw needs (creates and caches it).
size_t work_bytes(Transform t, int64_t nh, int64_t nw, int64_t batch);

// in:  [batch, nh, nw] real      out: [batch, nh, nw/2+1] complex   (unnormalised)
void rfft2(const float* in, float2* out, int64_t nh, int64_t nw, int64_t batch, void* work,
           cudaStream_t stream);
void rfft2(const double* in, double2* out, int64_t nh, int64_t nw, int64_t batch, void* work,
           cudaStream_t stream);
// in:  [batch, nh, nw/2+1] complex (overwritten)   out: [batch, nh, nw] real   (unnormalised)
void irfft2(float2* in, float* out, int64_t nh, int64_t nw, int64_t batch, void* work,
            cudaStream_t stream);
void irfft2(double2* in, double* out, int64_t nh, int64_t nw, int64_t batch, void* work,
            cudaStream_t stream);

// Cache control.
size_t cache_size();
size_t cache_capacity();
void set_cache_capacity(size_t capacity);
void clear_cache();
int library_version();

}  // namespace cufft_plans
}  // namespace fastlayers
