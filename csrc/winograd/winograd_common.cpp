// Host side of Winograd convolution shared by both devices: argument checks, shapes, the Python
// module's workspace query, and autocast registration.
#include "winograd.h"

#include "../common/autocast.h"
#include "../common/conv_checks.h"
#include "module_api.h"

namespace fastlayers {
namespace winograd_host {
namespace {

const char* op_name(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "winograd_conv2d";
    case Pass::InputGrad: return "winograd_conv2d_input_grad";
    case Pass::WeightGrad: return "winograd_conv2d_weight_grad";
  }
  return "winograd_conv2d";
}

// Sides and planes beyond int32 are refused before any arithmetic on them (as the FFT ops do).
constexpr int64_t kMaxPlane = kConvMaxPlane;

}  // namespace

Shape check(Pass pass, const at::Tensor& a, const at::Tensor& b,
            const std::optional<at::Tensor>& bias, at::IntArrayRef padding, int64_t tile,
            bool fused, bool tf32) {
  const char* op = op_name(pass);
  const char* an = pass == Pass::Forward ? "input" : "grad_output";
  const char* bn = pass == Pass::WeightGrad ? "input" : "weight";
  check_conv_operand(op, an, a);
  check_conv_operand(op, bn, b);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": `", an, "` (", a.scalar_type(), ") and `",
              bn, "` (", b.scalar_type(), ") must have the same dtype");
  TORCH_CHECK(a.device() == b.device(), op, ": `", an, "` is on ", a.device(), " but `", bn,
              "` is on ", b.device());
  TORCH_CHECK(padding.size() == 2, op, ": `padding` must have 2 values (ph, pw), got ", padding);
  TORCH_CHECK(padding[0] >= 0 && padding[1] >= 0, op, ": `padding` must be >= 0, got ", padding);
  TORCH_CHECK(padding[0] <= kMaxPlane && padding[1] <= kMaxPlane, op, ": `padding` ", padding,
              " is too large: the ops take at most ", kMaxPlane, " elements per side");
  TORCH_CHECK(winograd::tile_ok(pass, tile), op, ": `tile` must be ",
              pass == Pass::WeightGrad ? "2 or 4 (grad_output tiles of F(3x3, tile x tile))"
                                       : "2, 4 or 6 (output tiles of F(tile x tile, 3x3))",
              ", got ", tile);
  if (fused) {
    TORCH_CHECK(winograd::fused_ok(pass, tile), op, ": `fused` takes `tile` ",
                winograd::kFusedTile, " (the fused kernels compute ",
                pass == Pass::WeightGrad ? "F(3x3, 2x2)" : "F(2x2, 3x3)", "), got ", tile);
    TORCH_CHECK(a.is_cuda(), op, ": `fused` runs on CUDA tensors, got ", a.device(),
                " (pass fused=False)");
    const bool f32 = a.scalar_type() == at::kFloat;
    TORCH_CHECK(a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16 || f32, op,
                ": `fused` takes float16, bfloat16 and float32, got ", a.scalar_type(),
                " (pass fused=False)");
    // float32's patch comes by TMA alone, whose rows are multiples of 16 bytes (the weight
    // gradient's kernel copies by TMA where the rows allow, else value by value: any width)
    TORCH_CHECK(!f32 || pass == Pass::WeightGrad || a.size(3) % 4 == 0, op,
                ": `fused` in float32 takes `", an, "` of a width that is a multiple of 4, got ",
                a.size(3), " (pass fused=False)");
  }
  constexpr int64_t k = winograd::kKernel;
  Shape s{};
  s.ph = padding[0];
  s.pw = padding[1];
  s.tile = tile;
  switch (pass) {
    case Pass::Forward:
      s.S = a.size(0); s.C = a.size(1); s.H = a.size(2); s.W = a.size(3); s.K = b.size(0);
      TORCH_CHECK(b.size(2) == k && b.size(3) == k, op, ": `weight` must be 3x3, got ",
                  b.size(2), "x", b.size(3), " (Winograd convolution here takes 3x3 filters)");
      TORCH_CHECK(b.size(1) == s.C, op, ": `weight` has ", b.size(1),
                  " input channels but `input` has ", s.C, " (groups are not supported)");
      break;
    case Pass::InputGrad:
      s.S = a.size(0); s.K = a.size(1); s.C = b.size(1);
      TORCH_CHECK(b.size(2) == k && b.size(3) == k, op, ": `weight` must be 3x3, got ",
                  b.size(2), "x", b.size(3), " (Winograd convolution here takes 3x3 filters)");
      TORCH_CHECK(b.size(0) == s.K, op, ": `weight` has ", b.size(0),
                  " output channels but `grad_output` has ", s.K);
      s.H = a.size(2) + k - 1 - 2 * s.ph;
      s.W = a.size(3) + k - 1 - 2 * s.pw;
      TORCH_CHECK(s.H >= 1 && s.W >= 1, op, ": `grad_output` of spatial size (", a.size(2), ", ",
                  a.size(3), ") with a 3x3 kernel and `padding` ", padding,
                  " implies an input of size (", s.H, ", ", s.W, "), which is empty");
      break;
    case Pass::WeightGrad:
      s.S = a.size(0); s.K = a.size(1);
      TORCH_CHECK(b.size(0) == s.S, op, ": `input` has batch ", b.size(0),
                  " but `grad_output` has ", s.S);
      s.C = b.size(1); s.H = b.size(2); s.W = b.size(3);
      TORCH_CHECK(s.oh() == a.size(2) && s.ow() == a.size(3), op, ": `grad_output` has spatial size (",
                  a.size(2), ", ", a.size(3), ") but a 3x3 kernel over `input` (", s.H, ", ", s.W,
                  ") with `padding` ", padding, " gives (", s.oh(), ", ", s.ow(),
                  ") (Winograd convolution here takes 3x3 filters)");
      break;
  }
  TORCH_CHECK(s.H >= 1 && s.W >= 1, op, ": input spatial size must be >= 1, got (", s.H, ", ", s.W,
              ")");
  TORCH_CHECK(s.oh() >= 1 && s.ow() >= 1, op, ": the 3x3 kernel is larger than the padded input (",
              s.H + 2 * s.ph, ", ", s.W + 2 * s.pw, ")");
  TORCH_CHECK(s.H + 2 * s.ph <= kMaxPlane && s.W + 2 * s.pw <= kMaxPlane, op,
              ": the padded input (", s.H + 2 * s.ph, ", ", s.W + 2 * s.pw,
              ") is too large: the ops take at most ", kMaxPlane, " elements per side");
  check_conv_bias(op, pass, bias, s.K, a);
  return s;
}

void check_transformed(const Shape& s, const at::Tensor& weight,
                       const std::optional<at::Tensor>& transformed, bool fused) {
  if (!transformed.has_value()) return;
  const char* op = "winograd_conv2d";
  const at::Tensor& u = *transformed;
  TORCH_CHECK(!fused, op, ": `transformed_weight` serves the non-fused pipeline (fused=False)");
  const int64_t a = s.tile + winograd::kKernel - 1;
  TORCH_CHECK(u.dim() == 3 && u.size(0) == a * a && u.size(1) == s.K && u.size(2) == s.C, op,
              ": `transformed_weight` must be [alpha^2, K, C] = [", a * a, ", ", s.K, ", ", s.C,
              "] (winograd_filter_transform of `weight` at tile ", s.tile, "), got ", u.sizes());
  TORCH_CHECK(u.scalar_type() == weight.scalar_type() && u.device() == weight.device(), op,
              ": `transformed_weight` must have `weight`'s dtype and device (", weight.scalar_type(),
              " on ", weight.device(), "), got ", u.scalar_type(), " on ", u.device());
}

void check_filter_transform(const at::Tensor& weight, int64_t tile) {
  const char* op = "winograd_filter_transform";
  check_conv_operand(op, "weight", weight);
  TORCH_CHECK(weight.size(2) == winograd::kKernel && weight.size(3) == winograd::kKernel, op,
              ": `weight` must be 3x3, got ", weight.size(2), "x", weight.size(3),
              " (Winograd convolution here takes 3x3 filters)");
  TORCH_CHECK(winograd::tile_ok(Pass::Forward, tile), op,
              ": `tile` must be 2, 4 or 6 (output tiles of F(tile x tile, 3x3)), got ", tile);
}

std::vector<int64_t> output_shape(Pass pass, const Shape& s) {
  switch (pass) {
    case Pass::Forward: return {s.S, s.K, s.oh(), s.ow()};
    case Pass::InputGrad: return {s.S, s.C, s.H, s.W};
    case Pass::WeightGrad: return {s.K, s.C, winograd::kKernel, winograd::kKernel};
  }
  return {};
}

at::Tensor empty_result(Pass pass, const Shape& s, const at::Tensor& a,
                        const std::optional<at::Tensor>& bias) {
  auto out = at::zeros(output_shape(pass, s), a.options());
  if (pass == Pass::Forward && bias.has_value() && out.numel() > 0)
    out.add_(bias->view({1, -1, 1, 1}));
  return out;
}

at::Tensor run_pass(Pass pass, const at::Tensor& a, const at::Tensor& b,
                    const std::optional<at::Tensor>& bias, at::IntArrayRef padding, int64_t tile,
                    bool tf32, int64_t chunk_bytes, const std::optional<at::Tensor>& transformed) {
  TORCH_CHECK(chunk_bytes > 0, op_name(pass), ": the chunk bound must be > 0");
  TORCH_CHECK(!transformed.has_value() || pass == Pass::Forward, op_name(pass),
              ": transformed filters serve the forward");
  if (a.is_cuda()) {
#ifdef FASTLAYERS_WITH_CUDA
    return DeviceOps<&run_cuda, &filter_transform_cuda>::run(pass, a, b, bias, padding, tile,
                                                             tf32, chunk_bytes, false, transformed);
#else
    TORCH_CHECK(false, op_name(pass), ": fastlayers was built without CUDA");
#endif
  }
  TORCH_CHECK(a.is_cpu(), op_name(pass), ": runs on CPU and CUDA tensors, got ", a.device());
  return DeviceOps<&run_cpu, &filter_transform_cpu>::run(pass, a, b, bias, padding, tile, tf32,
                                                         chunk_bytes, false, transformed);
}

size_t python_workspace_bytes(int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W,
                              int64_t ph, int64_t pw, int64_t tile, int store_bytes,
                              int acc_bytes) {
  TORCH_CHECK(pass >= 0 && pass <= 2, "winograd_conv2d_workspace_bytes: `pass_` must be 0, 1 or 2");
  const Pass p = static_cast<Pass>(pass);
  TORCH_CHECK(winograd::tile_ok(p, tile), "winograd_conv2d_workspace_bytes: bad `tile` ", tile);
  const Shape s{S, C, K, H, W, ph, pw, tile};
  const int64_t chunk = winograd::chunk_samples(p, s, store_bytes, acc_bytes, kChunkBytes);
  return winograd::buffers(p, s, chunk, store_bytes, acc_bytes).total;
}

size_t python_fused_weight_grad_workspace_bytes(int64_t S, int64_t C, int64_t K, int64_t H,
                                                int64_t W, int64_t ph, int64_t pw) {
  TORCH_CHECK(S >= 0 && C >= 0 && K >= 0 && H >= 1 && W >= 1 && ph >= 0 && pw >= 0 &&
                  H + 2 * ph >= winograd::kKernel && W + 2 * pw >= winograd::kKernel,
              "winograd_fused_weight_grad_workspace_bytes: a 3x3 kernel over (", H, ", ", W,
              ") with padding (", ph, ", ", pw, ") and S, C, K >= 0");
  const Shape s{S, C, K, H, W, ph, pw, winograd::kFusedTile};
  return winograd::fused_wgrad_workspace_bytes(s);
}

size_t python_fused_workspace_bytes(int pass, int64_t C, int64_t K, int store_bytes) {
  TORCH_CHECK(pass == 0 || pass == 1,
              "winograd_fused_workspace_bytes: `pass_` must be 0 or 1 (forward, input gradient)");
  TORCH_CHECK(store_bytes == 2 || store_bytes == 4,
              "winograd_fused_workspace_bytes: `store_bytes` must be 2 (float16, bfloat16) or 4 "
              "(float32), got ", store_bytes);
  Shape s{};
  s.C = C;
  s.K = K;
  s.tile = winograd::kFusedTile;
  return winograd::fused_workspace_bytes(static_cast<Pass>(pass), s, store_bytes);
}

}  // namespace winograd_host
}  // namespace fastlayers

// Autocast: the three passes run in the autocast dtype, as nn.Conv2d does.
TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) {
  fastlayers::register_autocast<c10::DeviceType::CUDA>(
      m, {"winograd_conv2d", "winograd_conv2d_input_grad", "winograd_conv2d_weight_grad",
          "winograd_filter_transform"});
}
TORCH_LIBRARY_IMPL(fastlayers, AutocastCPU, m) {
  fastlayers::register_autocast<c10::DeviceType::CPU>(
      m, {"winograd_conv2d", "winograd_conv2d_input_grad", "winograd_conv2d_weight_grad",
          "winograd_filter_transform"});
}
