// The inverse register kernels of 32 x 32 (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void irfft2_registers_run<32, 32>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
