// The register kernels of 1 x 2, 1 x 4, 2 x 2 and 4 x 4, both directions (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<1, 2>(const ForwardArgs&);
template void irfft2_registers_run<1, 2>(const InverseArgs&);
template void rfft2_registers_run<1, 4>(const ForwardArgs&);
template void irfft2_registers_run<1, 4>(const InverseArgs&);
template void rfft2_registers_run<2, 2>(const ForwardArgs&);
template bool rfft2_registers_run_two<2, 2>(const ForwardArgs&, const ForwardArgs&);
template void irfft2_registers_run<2, 2>(const InverseArgs&);
template void rfft2_registers_run<4, 4>(const ForwardArgs&);
template bool rfft2_registers_run_two<4, 4>(const ForwardArgs&, const ForwardArgs&);
template void irfft2_registers_run<4, 4>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
