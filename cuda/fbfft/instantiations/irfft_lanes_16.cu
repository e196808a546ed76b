// The inverse 1-D lane kernels of 16 points (lanes_1d.cuh).
#include "../lanes_1d.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void irfft_lanes_run<16>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
