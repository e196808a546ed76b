// The forward register kernels of 32 x 32 (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<32, 32>(const ForwardArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
