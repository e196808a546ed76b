// The forward 2-D lane kernels of 128 x 128 (lanes_2d.cuh).
#include "../lanes_2d.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_lanes_run<128>(const ForwardArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
