// The forward 1-D lane kernels of 8..256 points (lanes_1d.cuh).
#include "../lanes_1d.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft_lanes_run<8>(const ForwardArgs&);
template void rfft_lanes_run<16>(const ForwardArgs&);
template void rfft_lanes_run<32>(const ForwardArgs&);
template void rfft_lanes_run<64>(const ForwardArgs&);
template void rfft_lanes_run<128>(const ForwardArgs&);
template void rfft_lanes_run<256>(const ForwardArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
