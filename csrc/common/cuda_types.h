// ATen's scalar types -> the CUDA types the framework-free kernels in cuda/ take.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fastlayers {

template <typename T> struct DeviceType { using type = T; };
template <> struct DeviceType<at::Half> { using type = __half; };
template <> struct DeviceType<at::BFloat16> { using type = __nv_bfloat16; };

}  // namespace fastlayers
