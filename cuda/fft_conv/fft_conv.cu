// The FFT convolution's entry points (fft_conv.h): the backend's pipeline (pipeline.h).
#include "fft_conv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "pipeline.h"

namespace fastlayers {
namespace fft_conv {

size_t workspace_bytes(Pass pass, const Shape& s, int real_bytes, Backend backend) {
  if (backend == Backend::FbFFT) return buffer_layout(pass, s, real_bytes, backend).total();
  return detail::cufft_workspace_bytes(pass, s, real_bytes);
}

template <typename T>
void run(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* workspace,
         size_t workspace_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
         Backend backend, const Options& options) {
  if (backend == Backend::FbFFT) {
    detail::run_fbfft<T>(pass, s, a, b, bias, out, workspace, workspace_size, stream, blas, tf32, options);
    return;
  }
  detail::run_cufft<T>(pass, s, a, b, bias, out, workspace, workspace_size, stream, blas, tf32, options);
}

#define FL_INSTANTIATE(T)                                                                     \
  template void run<T>(Pass, const Shape&, const T*, const T*, const T*, T*, void*, size_t,       \
                       cudaStream_t, cublasHandle_t, bool, Backend, const Options&);
FL_INSTANTIATE(float)
FL_INSTANTIATE(double)
FL_INSTANTIATE(__half)
FL_INSTANTIATE(__nv_bfloat16)
#undef FL_INSTANTIATE

}  // namespace fft_conv
}  // namespace fastlayers
