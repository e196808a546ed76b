// The inverse register kernels of 8 x 8 (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void irfft2_registers_run<8, 8>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
