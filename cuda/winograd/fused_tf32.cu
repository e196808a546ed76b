// The fused kernel in float32, TF32 or split TF32 products (fused.cuh), in a unit of its own so
// that it compiles beside the 16-bit ones.
#include "fused.cuh"

namespace fastlayers {
namespace winograd {

template void run_fused<float>(Pass, const Shape&, const float*, const float*, const float*,
                               float*, void*, size_t, bool, cudaStream_t);

}  // namespace winograd
}  // namespace fastlayers
