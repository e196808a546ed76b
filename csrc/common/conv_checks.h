// Argument checks every convolution family's ops make the same way (FFT, Winograd): a 4-D
// floating operand within the plane bound, and the forward's bias. Messages name the op and the
// argument.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "../../cuda/common/conv_pass.h"

namespace fastlayers {

// Elements per side and per plane the convolution ops take (kernels index a plane with int).
constexpr int64_t kConvMaxPlane = 2147483647;  // INT32_MAX

// Whether an h x w plane (h, w >= 0) stays within kConvMaxPlane elements, without overflow.
inline bool conv_plane_ok(int64_t h, int64_t w) {
  return h <= kConvMaxPlane && w <= kConvMaxPlane && h * w <= kConvMaxPlane;
}

// `t` (named `name`) is 4-D, float32/float64/float16/bfloat16, and its plane within the bound.
inline void check_conv_operand(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 4, op, ": `", name, "` must be 4-D, got ", t.dim(), "-D tensor of shape ",
              t.sizes());
  const auto dt = t.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kDouble || dt == at::kHalf || dt == at::kBFloat16, op,
              ": `", name, "` has dtype ", dt, "; supported: float32, float64, float16, bfloat16");
  TORCH_CHECK(conv_plane_ok(t.size(2), t.size(3)), op, ": `", name, "` has spatial size (",
              t.size(2), ", ", t.size(3), "); the ops take at most ", kConvMaxPlane,
              " elements per plane");
}

// The bias of a pass: only the forward takes one, [K], of the input's dtype and device.
inline void check_conv_bias(const char* op, Pass pass, const std::optional<at::Tensor>& bias,
                            int64_t K, const at::Tensor& input) {
  if (!bias.has_value()) return;
  const at::Tensor& t = *bias;
  TORCH_CHECK(pass == Pass::Forward, op, ": takes no bias");
  TORCH_CHECK(t.dim() == 1 && t.size(0) == K, op, ": `bias` must have shape [", K, "], got ",
              t.sizes());
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), op, ": `bias` has dtype ", t.scalar_type(),
              " but `input` has ", input.scalar_type());
  TORCH_CHECK(t.device() == input.device(), op, ": `bias` is on ", t.device(),
              " but `input` is on ", input.device());
}

}  // namespace fastlayers
