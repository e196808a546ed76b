// The forward register kernels of 1-D 64 points (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<1, 64>(const ForwardArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
