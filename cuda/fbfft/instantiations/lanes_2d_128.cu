// The 2-D lane kernels of 128 x 128, both directions (lanes_2d.cuh).
#include "../lanes_2d.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_lanes_run<128>(const ForwardArgs&);
template void irfft2_lanes_run<128>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
