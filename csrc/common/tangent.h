// Forward-mode AD as host code sees it.
#pragma once

#include <ATen/core/Tensor.h>

namespace fastlayers {

// A tensor's tangent at the first forward-AD level, or an undefined tensor: read without taking
// autograd's lock where the tensor has no autograd data (most calls' operands), and undefined for
// an undefined tensor.
inline at::Tensor tangent_of(const at::Tensor& t) {
  if (!t.defined() || t.unsafeGetTensorImpl()->autograd_meta() == nullptr) return {};
  return t._fw_grad(0);
}

}  // namespace fastlayers
