// Winograd pipelines for float and double storage (pipeline.cuh).
#include "pipeline.cuh"

namespace fastlayers {
namespace winograd {

template void run<float>(Pass, const Shape&, const float*, const float*, const float*, float*,
                         void*, size_t, int64_t, cudaStream_t, cublasHandle_t, bool,
                         const float*);
template void run<double>(Pass, const Shape&, const double*, const double*, const double*,
                          double*, void*, size_t, int64_t, cudaStream_t, cublasHandle_t, bool,
                          const double*);
template void run_replayed<float>(Pass, const Shape&, const float*, const float*, const float*,
                                  float*, void*, size_t, int64_t, cudaStream_t, size_t, bool,
                                  const float*);
template void run_replayed<double>(Pass, const Shape&, const double*, const double*,
                                   const double*, double*, void*, size_t, int64_t, cudaStream_t,
                                   size_t, bool, const double*);
template void transform_filters<float>(const float*, float*, int64_t, int64_t, int64_t,
                                       cudaStream_t);
template void transform_filters<double>(const double*, double*, int64_t, int64_t, int64_t,
                                        cudaStream_t);

}  // namespace winograd
}  // namespace fastlayers
