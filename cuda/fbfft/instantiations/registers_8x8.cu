// The 2-D register kernels of 8 x 8, both directions (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void rfft2_registers_run<8, 8>(const ForwardArgs&);
template bool rfft2_registers_run_two<8, 8>(const ForwardArgs&, const ForwardArgs&);
template void irfft2_registers_run<8, 8>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
