// Autocast for fastlayers ops: under torch.autocast an op runs in the autocast dtype, as the
// PyTorch layer it replaces does (nn.Conv2d for the convolutions). One boxed kernel serves every
// op; each feature registers its own ops with it, beside its other kernels.
#pragma once

#include <ATen/autocast_mode.h>
#include <ATen/core/stack.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <initializer_list>
#include <vector>

namespace fastlayers {

// The autocast kernel of device D (CPU or CUDA): casts every floating-point tensor argument of
// the device, and every tensor of a list argument, with at::autocast::cached_cast (float64 and
// other devices' tensors stay as they are) and calls the op again below autocast.
template <c10::DeviceType D>
void autocast_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static_assert(D == c10::DeviceType::CUDA || D == c10::DeviceType::CPU, "CPU or CUDA");
  constexpr c10::DispatchKey key =
      D == c10::DeviceType::CUDA ? c10::DispatchKey::AutocastCUDA : c10::DispatchKey::AutocastCPU;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(key);
  const auto dtype = at::autocast::get_autocast_dtype(D);
  const size_t args = op.schema().arguments().size();
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(args); it != stack->end(); ++it) {
    if (it->isTensor()) {
      *it = at::autocast::cached_cast(dtype, it->toTensor(), D);
    } else if (it->isTensorList()) {
      std::vector<at::Tensor> cast;
      for (const at::Tensor& t : it->toTensorVector())
        cast.push_back(at::autocast::cached_cast(dtype, t, D));
      *it = c10::IValue(cast);
    }
  }
  op.callBoxed(stack);
}

// Registers autocast_kernel<D> for `ops`, op names of the library `m` opened for D's autocast key
// (TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) or AutocastCPU).
template <c10::DeviceType D>
void register_autocast(torch::Library& m, std::initializer_list<const char*> ops) {
  for (const char* name : ops)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autocast_kernel<D>>());
}

}  // namespace fastlayers
