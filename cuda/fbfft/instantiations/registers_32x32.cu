// The 2-D register kernels of 32 x 32, both directions (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<32, 32>(const ForwardArgs&);
template bool rfft2_registers_run_two<32, 32>(const ForwardArgs&, const ForwardArgs&);
template void irfft2_registers_run<32, 32>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
