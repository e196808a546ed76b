#include "autocast.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace fastlayers {
namespace {

template <c10::DeviceType D>
void autocast_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  constexpr c10::DispatchKey key =
      D == c10::DeviceType::CUDA ? c10::DispatchKey::AutocastCUDA : c10::DispatchKey::AutocastCPU;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(key);
  const auto dtype = at::autocast::get_autocast_dtype(D);
  const size_t args = op.schema().arguments().size();
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(args); it != stack->end(); ++it) {
    if (it->isTensor()) *it = at::autocast::cached_cast(dtype, it->toTensor(), D);
  }
  op.callBoxed(stack);
}

}  // namespace

void register_autocast(torch::Library& m, c10::DeviceType device,
                       std::initializer_list<const char*> ops) {
  TORCH_CHECK(device == c10::DeviceType::CUDA || device == c10::DeviceType::CPU,
              "fastlayers: autocast is registered for CPU and CUDA, not ", device);
  using torch::CppFunction;
  constexpr auto cuda = &autocast_kernel<c10::DeviceType::CUDA>;
  constexpr auto cpu = &autocast_kernel<c10::DeviceType::CPU>;
  for (const char* name : ops) {
    m.impl(name, device == c10::DeviceType::CUDA ? CppFunction::makeFromBoxedFunction<cuda>()
                                                 : CppFunction::makeFromBoxedFunction<cpu>());
  }
}

}  // namespace fastlayers
