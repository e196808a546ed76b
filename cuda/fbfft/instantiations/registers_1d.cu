// The 1-D register kernels of 8..64 points (large batches), both directions (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<1, 8>(const ForwardArgs&);
template void irfft2_registers_run<1, 8>(const InverseArgs&);
template void rfft2_registers_run<1, 16>(const ForwardArgs&);
template void irfft2_registers_run<1, 16>(const InverseArgs&);
template void rfft2_registers_run<1, 32>(const ForwardArgs&);
template void irfft2_registers_run<1, 32>(const InverseArgs&);
template void rfft2_registers_run<1, 64>(const ForwardArgs&);
template void irfft2_registers_run<1, 64>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
