// The inverse register kernels of 1-D 32 points (registers.cuh).
#include "../registers.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

template void irfft2_registers_run<1, 32>(const InverseArgs&);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
