// The 2-D register kernels of 64 x 64, both directions (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<64, 64>(const ForwardArgs&);
template bool rfft2_registers_run_two<64, 64>(const ForwardArgs&, const ForwardArgs&);
template void irfft2_registers_run<64, 64>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
