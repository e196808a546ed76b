// Winograd pipelines for float16 and bfloat16 storage (pipeline.cuh) and the fused kernel
// (fused.cuh).
#include "fused.cuh"
#include "pipeline.cuh"

namespace fastlayers {
namespace winograd {

template void run<__half>(Pass, const Shape&, const __half*, const __half*, const __half*,
                          __half*, void*, size_t, int64_t, cudaStream_t, cublasHandle_t, bool,
                          const __half*);
template void run<__nv_bfloat16>(Pass, const Shape&, const __nv_bfloat16*,
                                 const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                 void*, size_t, int64_t, cudaStream_t, cublasHandle_t, bool,
                                 const __nv_bfloat16*);
template void run_replayed<__half>(Pass, const Shape&, const __half*, const __half*,
                                   const __half*, __half*, void*, size_t, int64_t, cudaStream_t,
                                   size_t, bool, const __half*);
template void run_replayed<__nv_bfloat16>(Pass, const Shape&, const __nv_bfloat16*,
                                          const __nv_bfloat16*, const __nv_bfloat16*,
                                          __nv_bfloat16*, void*, size_t, int64_t, cudaStream_t,
                                          size_t, bool, const __nv_bfloat16*);
template void transform_filters<__half>(const __half*, __half*, int64_t, int64_t, int64_t,
                                        cudaStream_t);
template void transform_filters<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, int64_t,
                                               int64_t, int64_t, cudaStream_t);

template void run_fused<__half>(Pass, const Shape&, const __half*, const __half*, const __half*,
                                __half*, void*, size_t, bool, cudaStream_t);
template void run_fused<__nv_bfloat16>(Pass, const Shape&, const __nv_bfloat16*,
                                       const __nv_bfloat16*, const __nv_bfloat16*,
                                       __nv_bfloat16*, void*, size_t, bool, cudaStream_t);

}  // namespace winograd
}  // namespace fastlayers
