// CUDA host glue: tensors -> raw pointers, current stream, PyTorch's cuBLAS handle, a workspace
// from the caching allocator (common/workspace.h).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../common/cuda_types.h"
#include "../common/workspace.h"
#include "../../cuda/fft_conv/fft_conv.h"
#include "fft_conv.h"

namespace fastlayers {
namespace fft_conv_host {

// One untiled pass of the checked geometry `g`.
at::Tensor untiled_cuda(Pass pass, const Geometry& g, const at::Tensor& a_in,
                        const at::Tensor& b_in, const std::optional<at::Tensor>& bias_in,
                        bool tf32, const RunOptions& options) {
  c10::cuda::CUDAGuard guard(a_in.device());
  const auto a = a_in.contiguous();
  const auto b = b_in.contiguous();
  at::Tensor bias;
  if (bias_in.has_value()) bias = bias_in->contiguous();
  auto out = at::empty(output_shape(pass, g), a.options());
  if (out.numel() == 0) return out;
  if (a.numel() == 0 || b.numel() == 0) {  // a sum over no channel or sample: zeros, and the bias
    out.zero_();
    if (bias.defined()) out.add_(bias.view({1, -1, 1, 1}));
    return out;
  }

  const fft_conv::Shape s = g.shape();
  const int real_bytes = a.scalar_type() == at::kDouble ? 8 : 4;
  const size_t ws_bytes = fft_conv::workspace_bytes(pass, s, real_bytes, g.backend);
  const c10::DataPtr ws = cuda_workspace(ws_bytes);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cublasHandle_t blas = at::cuda::getCurrentCUDABlasHandle();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "fft_conv2d_cuda", [&] {
    using T = typename DeviceType<scalar_t>::type;
    fft_conv::run<T>(pass, s, reinterpret_cast<const T*>(a.const_data_ptr<scalar_t>()),
                     reinterpret_cast<const T*>(b.const_data_ptr<scalar_t>()),
                     bias.defined() ? reinterpret_cast<const T*>(bias.const_data_ptr<scalar_t>())
                                    : nullptr,
                     reinterpret_cast<T*>(out.mutable_data_ptr<scalar_t>()), ws.get(),
                     ws_bytes, stream, blas, tf32, g.backend, {options.conjugate_skip});
  });
  return out;
}

TORCH_LIBRARY_IMPL(fastlayers, CUDA, m) { DeviceOps<&untiled_cuda>::register_ops(m); }

}  // namespace fft_conv_host
}  // namespace fastlayers
