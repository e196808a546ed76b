// The inverse register kernels of 16 x 16 (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void irfft2_registers_run<16, 16>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
