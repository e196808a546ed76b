// The fused weight gradient (fused_wgrad.cuh) in float32, float16 and bfloat16.
#include "fused_wgrad.cuh"

namespace fastlayers {
namespace winograd {

template void run_fused_weight_grad<float>(const Shape&, const float*, const float*, float*,
                                           void*, size_t, bool, cudaStream_t);
template void run_fused_weight_grad<__half>(const Shape&, const __half*, const __half*, __half*,
                                            void*, size_t, bool, cudaStream_t);
template void run_fused_weight_grad<__nv_bfloat16>(const Shape&, const __nv_bfloat16*,
                                                   const __nv_bfloat16*, __nv_bfloat16*, void*,
                                                   size_t, bool, cudaStream_t);

}  // namespace winograd
}  // namespace fastlayers
