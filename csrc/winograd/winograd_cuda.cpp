// CUDA host glue: tensors -> raw pointers, current stream, a workspace from the caching allocator
// (common/workspace.h); the pipeline's GEMMs run on the step-graph cache's cuBLAS handle with a
// workspace of PyTorch's size (run_replayed).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../../cuda/winograd/winograd.h"
#include "../common/cuda_types.h"
#include "../common/workspace.h"
#include "winograd.h"

namespace fastlayers {
namespace winograd_host {

at::Tensor run_cuda(Pass pass, const Shape& s, const at::Tensor& a_in, const at::Tensor& b_in,
                    const std::optional<at::Tensor>& bias_in, bool tf32, int64_t chunk_bytes,
                    bool fused, const at::Tensor* transformed_in) {
  c10::cuda::CUDAGuard guard(a_in.device());
  auto a = a_in.contiguous();
  // The fused kernel reads float32 data by TMA alone, from a 16-byte aligned start (a view's
  // may not be): such data is copied.
  if (fused && pass != Pass::WeightGrad && a.scalar_type() == at::kFloat &&
      reinterpret_cast<uintptr_t>(a.const_data_ptr()) % 16 != 0)
    a = a.clone();
  const auto b = b_in.contiguous();
  at::Tensor bias, transformed;
  if (bias_in.has_value()) bias = bias_in->contiguous();
  if (transformed_in != nullptr) transformed = transformed_in->contiguous();
  auto out = at::empty(output_shape(pass, s), a.options());
  if (fused && pass == Pass::WeightGrad) {  // float16, bfloat16 or float32 (check())
    const size_t bytes = winograd::fused_wgrad_workspace_bytes(s);
    const c10::DataPtr ws = cuda_workspace(bytes);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const auto dtype = a.scalar_type();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "winograd_fused_wgrad", [&] {
      using T = typename DeviceType<scalar_t>::type;
      if constexpr (std::is_same<scalar_t, double>::value) {
        TORCH_CHECK(false, "winograd: the fused kernel takes no float64 (check())");
      } else {
        winograd::run_fused_weight_grad<T>(
            s, reinterpret_cast<const T*>(a.const_data_ptr<scalar_t>()),
            reinterpret_cast<const T*>(b.const_data_ptr<scalar_t>()),
            reinterpret_cast<T*>(out.mutable_data_ptr<scalar_t>()), ws.get(), bytes, tf32, stream);
      }
    });
    return out;
  }
  if (fused) {  // float16, bfloat16 or float32 (check())
    const size_t bytes = winograd::fused_workspace_bytes(pass, s, static_cast<int>(a.element_size()));
    const c10::DataPtr ws = cuda_workspace(bytes);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "winograd_fused", [&] {
      using T = typename DeviceType<scalar_t>::type;
      if constexpr (std::is_same<scalar_t, double>::value) {
        TORCH_CHECK(false, "winograd: the fused kernel takes no float64 (check())");
      } else {
        winograd::run_fused<T>(
            pass, s, reinterpret_cast<const T*>(a.const_data_ptr<scalar_t>()),
            reinterpret_cast<const T*>(b.const_data_ptr<scalar_t>()),
            bias.defined() ? reinterpret_cast<const T*>(bias.const_data_ptr<scalar_t>()) : nullptr,
            reinterpret_cast<T*>(out.mutable_data_ptr<scalar_t>()), ws.get(), bytes, tf32,
            stream);
      }
    });
    return out;
  }
  const int store = static_cast<int>(a.element_size());
  const int acc = a.scalar_type() == at::kDouble ? 8 : 4;
  const bool given = transformed.defined();
  const int64_t chunk = winograd::chunk_samples(pass, s, store, acc, chunk_bytes, given);
  const size_t ws_bytes = winograd::buffers(pass, s, chunk, store, acc, given).total;
  const c10::DataPtr ws = cuda_workspace(ws_bytes);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "winograd_cuda", [&] {
    using T = typename DeviceType<scalar_t>::type;
    winograd::run_replayed<T>(
        pass, s, reinterpret_cast<const T*>(a.const_data_ptr<scalar_t>()),
        reinterpret_cast<const T*>(b.const_data_ptr<scalar_t>()),
        bias.defined() ? reinterpret_cast<const T*>(bias.const_data_ptr<scalar_t>()) : nullptr,
        reinterpret_cast<T*>(out.mutable_data_ptr<scalar_t>()), ws.get(), ws_bytes, chunk, stream,
        at::cuda::getChosenWorkspaceSize(), tf32,
        transformed.defined() ? reinterpret_cast<const T*>(transformed.const_data_ptr<scalar_t>())
                              : nullptr);
  });
  return out;
}

at::Tensor filter_transform_cuda(const at::Tensor& weight_in, int64_t tile) {
  c10::cuda::CUDAGuard guard(weight_in.device());
  const auto w = weight_in.contiguous();
  const int64_t K = w.size(0), C = w.size(1), a = tile + winograd::kKernel - 1;
  auto U = at::empty({a * a, K, C}, w.options());
  if (U.numel() == 0) return U;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "winograd_filters", [&] {
    using T = typename DeviceType<scalar_t>::type;
    winograd::transform_filters<T>(reinterpret_cast<const T*>(w.const_data_ptr<scalar_t>()),
                                   reinterpret_cast<T*>(U.mutable_data_ptr<scalar_t>()), K, C,
                                   tile, at::cuda::getCurrentCUDAStream());
  });
  return U;
}

TORCH_LIBRARY_IMPL(fastlayers, CUDA, m) {
  DeviceOps<&run_cuda, &filter_transform_cuda>::register_ops(m);
}

}  // namespace winograd_host
}  // namespace fastlayers
