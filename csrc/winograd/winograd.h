// Host side of Winograd convolution: argument checks and the three ops of each device. The
// geometry and tiling (shared with the CUDA kernels): cuda/winograd/layout.h.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "../../cuda/winograd/layout.h"

namespace fastlayers {
namespace winograd_host {

using winograd::Shape;

// The ops' bound on one chunk's workspace (transformed operands and products); larger batches
// run in chunks of samples.
constexpr int64_t kChunkBytes = int64_t{512} << 20;

// Checks the arguments of one pass and derives its shape. `a`, `b` are the pass's two tensor
// arguments in schema order: (input, weight), (grad_output, weight), (grad_output, input).
// `fused`: the fused kernel asked for (fused_ok, CUDA, float16 or bfloat16, or float32: for the
// forward and input gradient, data whose width is a multiple of 4).
Shape check(Pass pass, const at::Tensor& a, const at::Tensor& b,
            const std::optional<at::Tensor>& bias, at::IntArrayRef padding, int64_t tile,
            bool fused = false, bool tf32 = false);

// The forward's `transformed_weight`, where given: [alpha^2, K, C] of the checked shape `s`, the
// dtype and device of `weight`, no gradient wanted of it, not with `fused`.
void check_transformed(const Shape& s, const at::Tensor& weight,
                       const std::optional<at::Tensor>& transformed, bool fused);

// winograd_filter_transform's checks: `weight` [K, C, 3, 3], floating, and a forward tile.
void check_filter_transform(const at::Tensor& weight, int64_t tile);

// The result's shape: [S, K, oh, ow], [S, C, H, W] or [K, C, 3, 3].
std::vector<int64_t> output_shape(Pass pass, const Shape& s);

// The device kernel of one checked pass (nonempty S, C, K), in chunks of samples whose buffers
// stay under `chunk_bytes` (the ops: kChunkBytes; the test hooks set others); `fused`: the fused
// kernel (CUDA; check() refuses it elsewhere); `transformed`: the forward's filters already
// transformed (check_transformed), or nullptr.
using Kernel = at::Tensor (*)(Pass pass, const Shape& s, const at::Tensor& a, const at::Tensor& b,
                              const std::optional<at::Tensor>& bias, bool tf32,
                              int64_t chunk_bytes, bool fused, const at::Tensor* transformed);

at::Tensor run_cpu(Pass pass, const Shape& s, const at::Tensor& a, const at::Tensor& b,
                   const std::optional<at::Tensor>& bias, bool tf32, int64_t chunk_bytes,
                   bool fused, const at::Tensor* transformed);
at::Tensor run_cuda(Pass pass, const Shape& s, const at::Tensor& a, const at::Tensor& b,
                    const std::optional<at::Tensor>& bias, bool tf32, int64_t chunk_bytes,
                    bool fused, const at::Tensor* transformed);

// winograd_filter_transform on each device (checked by check_filter_transform).
at::Tensor filter_transform_cpu(const at::Tensor& weight, int64_t tile);
at::Tensor filter_transform_cuda(const at::Tensor& weight, int64_t tile);

// A pass with an empty batch or channel count: zeros (and the bias, forward).
at::Tensor empty_result(Pass pass, const Shape& s, const at::Tensor& a,
                        const std::optional<at::Tensor>& bias);

// Checks the arguments, then runs the pass with the device's kernel.
template <Kernel Run, at::Tensor (*FilterTransform)(const at::Tensor&, int64_t)>
struct DeviceOps {
  static at::Tensor run(Pass pass, const at::Tensor& a, const at::Tensor& b,
                        const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
                        int64_t tile, bool tf32, int64_t chunk_bytes = kChunkBytes,
                        bool fused = false,
                        const std::optional<at::Tensor>& transformed = std::nullopt) {
    const Shape s = check(pass, a, b, bias, padding, tile, fused, tf32);
    check_transformed(s, b, transformed, fused);
    if (s.S == 0 || s.C == 0 || s.K == 0) return empty_result(pass, s, a, bias);
    return Run(pass, s, a, b, bias, tf32, chunk_bytes, fused,
               transformed.has_value() ? &*transformed : nullptr);
  }
  static at::Tensor forward(const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
                            int64_t tile, bool tf32, bool fused,
                            const std::optional<at::Tensor>& transformed_weight) {
    return run(Pass::Forward, input, weight, bias, padding, tile, tf32, kChunkBytes, fused,
               transformed_weight);
  }
  static at::Tensor filter_transform(const at::Tensor& weight, int64_t tile) {
    check_filter_transform(weight, tile);
    return FilterTransform(weight, tile);
  }
  static at::Tensor input_grad(const at::Tensor& grad_output, const at::Tensor& weight,
                               at::IntArrayRef padding, int64_t tile, bool tf32, bool fused) {
    return run(Pass::InputGrad, grad_output, weight, std::nullopt, padding, tile, tf32,
               kChunkBytes, fused);
  }
  static at::Tensor weight_grad(const at::Tensor& grad_output, const at::Tensor& input,
                                at::IntArrayRef padding, int64_t tile, bool tf32, bool fused) {
    return run(Pass::WeightGrad, grad_output, input, std::nullopt, padding, tile, tf32,
               kChunkBytes, fused);
  }
  static void register_ops(torch::Library& m) {
    m.impl("winograd_conv2d", &forward);
    m.impl("winograd_conv2d_input_grad", &input_grad);
    m.impl("winograd_conv2d_weight_grad", &weight_grad);
    m.impl("winograd_filter_transform", &filter_transform);
  }
};

// One pass as its op computes it, on the tensors' device, with chunks under `chunk_bytes` (> 0)
// and, for the forward, filters transformed ahead where given: the test hooks' entry.
at::Tensor run_pass(Pass pass, const at::Tensor& a, const at::Tensor& b,
                    const std::optional<at::Tensor>& bias, at::IntArrayRef padding, int64_t tile,
                    bool tf32, int64_t chunk_bytes,
                    const std::optional<at::Tensor>& transformed = std::nullopt);

}  // namespace winograd_host
}  // namespace fastlayers
