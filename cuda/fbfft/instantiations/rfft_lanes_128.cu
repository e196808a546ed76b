// The forward 1-D lane kernels of 128 points (lanes_1d.cuh).
#include "../lanes_1d.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft_lanes_run<128>(const ForwardArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
