// The inverse 1-D lane kernels of 8..256 points (lanes_1d.cuh).
#include "../lanes_1d.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void irfft_lanes_run<8>(const InverseArgs&);
template void irfft_lanes_run<16>(const InverseArgs&);
template void irfft_lanes_run<32>(const InverseArgs&);
template void irfft_lanes_run<64>(const InverseArgs&);
template void irfft_lanes_run<128>(const InverseArgs&);
template void irfft_lanes_run<256>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
