// The forward register kernels of 64 x 64 (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<64, 64>(const ForwardArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
