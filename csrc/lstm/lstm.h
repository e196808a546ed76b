// Host side of the LSTM: argument checks and the step geometry shared by the CPU and CUDA kernels.
// Semantics and shapes: the schemas in csrc/fastlayers.cpp.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace fastlayers {
namespace lstm_host {

struct Geometry {
  int64_t T = 0, B = 0, I = 0, H = 0, R = 0;  // steps, batch, input, hidden, output (R = H
                                              // without a projection)
  int64_t N = 0;                              // rows of the input: T B, or the packed count
  bool proj = false, packed = false;
  std::vector<int64_t> bs;   // [T] active rows per step (all B when not packed)
  std::vector<int64_t> off;  // [T] first row of each step in the [N, .] layout
  // Columns of the two reserve tensors: [N, 5H] (i, f, g, o, c_{t-1}) in the accumulation type,
  // [N, R (+ H)] (h_{t-1}, and o tanh(c_t) with a projection) in the input dtype.
  int64_t reserve_cols() const { return 5 * H; }
  int64_t reserve_h_cols() const { return R + (proj ? H : 0); }
};

using Tensor = at::Tensor;
using OptTensor = std::optional<at::Tensor>;

// Checks lstm's arguments (op names the op in messages) and derives the geometry.
Geometry check(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0,
               const Tensor& w_ih, const Tensor& w_hh, const OptTensor& b_ih,
               const OptTensor& b_hh, const OptTensor& w_hr, const OptTensor& batch_sizes);

// Step order: the s-th step processed by the forward runs time step step_time(g, s, reverse).
inline int64_t step_time(const Geometry& g, int64_t s, bool reverse) {
  return reverse ? g.T - 1 - s : s;
}

// The accumulation type of a dtype: float64 for float64, float32 otherwise.
inline at::ScalarType acc_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

using Outputs = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
using Grads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

// The kernels of one device, on checked arguments.
Outputs forward_cpu(const Geometry& g, const Tensor& input, const Tensor& h0, const Tensor& c0,
                    const Tensor& w_ih, const Tensor& w_hh, const OptTensor& b_ih,
                    const OptTensor& b_hh, const OptTensor& w_hr, bool reverse, bool tf32);
Grads backward_cpu(const Geometry& g, const Tensor& grad_output, const OptTensor& grad_h_n,
                   const OptTensor& grad_c_n, const Tensor& input, const Tensor& h0,
                   const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                   const OptTensor& w_hr, const Tensor& reserve, const Tensor& reserve_h,
                   bool reverse, bool tf32, bool need_input, bool need_weights);

// lstm_stack: its arguments checked; the first layer's geometry (the others' have I = H) and the
// layer count L; per layer its weights (biases null without `has_biases`).
struct StackArgs {
  Geometry g;
  int64_t L = 0;
  std::vector<Tensor> w_ih, w_hh;
  std::vector<OptTensor> b_ih, b_hh;
};
StackArgs check_stack(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0,
                      at::TensorList weights, bool has_biases);
using StackOutputs = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

// Checks lstm_backward's extra arguments against the geometry.
void check_backward(const Geometry& g, const Tensor& input, const Tensor& grad_output,
                    const OptTensor& grad_h_n, const OptTensor& grad_c_n, const Tensor& reserve,
                    const Tensor& reserve_h);

}  // namespace lstm_host
}  // namespace fastlayers
