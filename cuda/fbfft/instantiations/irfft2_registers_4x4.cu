// The inverse register kernels of 4 x 4 (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void irfft2_registers_run<4, 4>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
