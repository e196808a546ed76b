// Tensor maps for TMA copies (cp.async.bulk.tensor), encoded through the driver entry point the
// runtime gives (no link to the driver library).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fastlayers {

// A 4-D tiled tensor map of the tensor at `base` (dims innermost first, byte strides of dims
// 1..3), boxes of `box` elements laid out in shared memory with `swizzle`, zeros outside the
// tensor. False where the driver does not give cuTensorMapEncodeTiled or refuses the arguments
// (the caller copies otherwise).
inline bool encode_tensor_map_4d(CUtensorMap* map, CUtensorMapDataType type, const void* base,
                                 const cuuint64_t (&dims)[4], const cuuint64_t (&strides)[3],
                                 const cuuint32_t (&box)[4], CUtensorMapSwizzle swizzle) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t rc = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                            cudaEnableDefault, &status);
    if (rc != cudaSuccess || status != cudaDriverEntryPointSuccess) {
      if (rc != cudaSuccess) (void)cudaGetLastError();  // this lookup's error alone: not sticky
      return static_cast<Encode>(nullptr);
    }
    return reinterpret_cast<Encode>(fn);
  }();
  if (encode == nullptr) return false;
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return encode(map, type, 4, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A tensor map over a dense [n][c][h][w] tensor at `base` (w innermost) of `type`'s values, `elem`
// bytes each (the strides' unit: the two must agree), boxes of box_w x box_h x box_c values of one
// n. False where encode_tensor_map_4d refuses.
inline bool encode_nchw_map(CUtensorMap* map, CUtensorMapDataType type, size_t elem,
                            const void* base, int64_t n, int64_t c, int64_t h, int64_t w,
                            uint32_t box_w, uint32_t box_h, uint32_t box_c,
                            CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(w), static_cast<cuuint64_t>(h),
                              static_cast<cuuint64_t>(c), static_cast<cuuint64_t>(n)};
  const cuuint64_t row = dims[0] * elem, strides[3] = {row, row * dims[1], row * dims[1] * dims[2]};
  const cuuint32_t box[4] = {box_w, box_h, box_c, 1};
  return encode_tensor_map_4d(map, type, base, dims, strides, box, swizzle);
}

}  // namespace fastlayers
