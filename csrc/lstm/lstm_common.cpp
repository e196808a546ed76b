// Host side of the LSTM shared by both devices: argument checks, the step geometry, lstm_cell as a
// one-step lstm, and autocast registration.
#include "lstm.h"

#include <ATen/Context.h>
#include <torch/library.h>

#include <string>

#include "../common/autocast.h"
#include "../common/op_handle.h"
#include "module_api.h"

namespace fastlayers {
namespace lstm_host {
namespace {

bool floating(const Tensor& t) {
  const auto d = t.scalar_type();
  return d == at::kFloat || d == at::kDouble || d == at::kHalf || d == at::kBFloat16;
}

// `t` has shape `shape`, the dtype and device of `like` (named `like_name`).
void check_operand(const char* op, const char* name, const Tensor& t,
                   std::initializer_list<int64_t> shape, const Tensor& like,
                   const char* like_name) {
  TORCH_CHECK(t.sizes().equals(shape), op, ": `", name, "` must have shape ",
              at::IntArrayRef(shape), ", got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), op, ": `", name, "` has dtype ",
              t.scalar_type(), " but `", like_name, "` has ", like.scalar_type());
  TORCH_CHECK(t.device() == like.device(), op, ": `", name, "` is on ", t.device(), " but `",
              like_name, "` is on ", like.device());
}

}  // namespace

Geometry check(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0,
               const Tensor& w_ih, const Tensor& w_hh, const OptTensor& b_ih,
               const OptTensor& b_hh, const OptTensor& w_hr, const OptTensor& batch_sizes) {
  Geometry g;
  TORCH_CHECK(floating(input), op, ": `input` has dtype ", input.scalar_type(),
              "; supported: float32, float64, float16, bfloat16");
  TORCH_CHECK(w_ih.dim() == 2 && w_ih.size(0) % 4 == 0, op,
              ": `w_ih` must be 2-D [4 hidden_size, input_size], got shape ", w_ih.sizes());
  g.H = w_ih.size(0) / 4;
  g.I = w_ih.size(1);
  g.proj = w_hr.has_value();
  TORCH_CHECK(!g.proj || w_hr->dim() == 2, op,
              ": `w_hr` must be 2-D [proj_size, hidden_size], got shape ", w_hr->sizes());
  g.R = g.proj ? w_hr->size(0) : g.H;
  g.packed = batch_sizes.has_value();
  if (g.packed) {
    const Tensor& bs = *batch_sizes;
    TORCH_CHECK(input.dim() == 2, op, ": a packed `input` (with `batch_sizes`) must be 2-D "
                "[rows, input_size], got shape ", input.sizes());
    TORCH_CHECK(bs.dim() == 1 && bs.scalar_type() == at::kLong && bs.device().is_cpu(), op,
                ": `batch_sizes` must be a 1-D int64 CPU tensor (PackedSequence.batch_sizes), got ",
                bs.scalar_type(), " of shape ", bs.sizes(), " on ", bs.device());
    TORCH_CHECK(h0.dim() == 2 && c0.dim() == 2, op, ": `h0` and `c0` must be 2-D [B, ",
                g.proj ? "proj_size" : "hidden_size", "] and [B, hidden_size], got shapes ",
                h0.sizes(), " and ", c0.sizes());
    g.T = bs.size(0);
    const auto* p = bs.contiguous().const_data_ptr<int64_t>();
    g.bs.assign(p, p + g.T);
    g.B = h0.size(0);
    int64_t sum = 0;
    for (int64_t t = 0; t < g.T; ++t) {
      TORCH_CHECK(g.bs[t] >= 1 && (t == 0 || g.bs[t] <= g.bs[t - 1]), op,
                  ": `batch_sizes` must be positive and non-increasing, got ",
                  at::IntArrayRef(g.bs));
      g.off.push_back(sum);
      sum += g.bs[t];
    }
    TORCH_CHECK(g.T == 0 || g.bs[0] == g.B, op, ": `batch_sizes`[0] (", g.T ? g.bs[0] : 0,
                ") must equal the batch of `h0` (", g.B, ")");
    TORCH_CHECK(input.size(0) == sum, op, ": `input` has ", input.size(0),
                " rows but `batch_sizes` sums to ", sum);
    g.N = sum;
  } else {
    TORCH_CHECK(input.dim() == 3, op, ": `input` must be 3-D [T, B, input_size] (or 2-D packed "
                "with `batch_sizes`), got shape ", input.sizes());
    g.T = input.size(0);
    g.B = input.size(1);
    g.N = g.T * g.B;
    g.bs.assign(g.T, g.B);
    for (int64_t t = 0; t < g.T; ++t) g.off.push_back(t * g.B);
  }
  TORCH_CHECK(input.size(-1) == g.I, op, ": `input` has ", input.size(-1),
              " features but `w_ih` expects ", g.I, " (w_ih is [4 hidden_size, input_size])");
  check_operand(op, "w_ih", w_ih, {4 * g.H, g.I}, input, "input");
  check_operand(op, "w_hh", w_hh, {4 * g.H, g.R}, input, "input");
  check_operand(op, "h0", h0, {g.B, g.R}, input, "input");
  check_operand(op, "c0", c0, {g.B, g.H}, input, "input");
  if (b_ih.has_value()) check_operand(op, "b_ih", *b_ih, {4 * g.H}, input, "input");
  if (b_hh.has_value()) check_operand(op, "b_hh", *b_hh, {4 * g.H}, input, "input");
  if (g.proj) {
    TORCH_CHECK(g.R >= 1, op, ": `w_hr` must have at least one row, got shape ",
                w_hr->sizes());
    check_operand(op, "w_hr", *w_hr, {g.R, g.H}, input, "input");
  }
  return g;
}

void check_backward(const Geometry& g, const Tensor& input, const Tensor& grad_output,
                    const OptTensor& grad_h_n, const OptTensor& grad_c_n, const Tensor& reserve,
                    const Tensor& reserve_h) {
  const char* op = "lstm_backward";
  std::vector<int64_t> out = g.packed ? std::vector<int64_t>{g.N, g.R}
                                      : std::vector<int64_t>{g.T, g.B, g.R};
  TORCH_CHECK(grad_output.sizes().equals(out), op, ": `grad_output` must have shape ",
              at::IntArrayRef(out), ", got ", grad_output.sizes());
  TORCH_CHECK(grad_output.scalar_type() == input.scalar_type() &&
                  grad_output.device() == input.device(),
              op, ": `grad_output` must have the dtype and device of `input`");
  if (grad_h_n.has_value()) check_operand(op, "grad_h_n", *grad_h_n, {g.B, g.R}, input, "input");
  if (grad_c_n.has_value()) check_operand(op, "grad_c_n", *grad_c_n, {g.B, g.H}, input, "input");
  TORCH_CHECK(reserve.sizes().equals({g.N, g.reserve_cols()}) &&
                  reserve.scalar_type() == acc_type(input.scalar_type()) &&
                  reserve.device() == input.device(),
              op, ": `reserve` is not what lstm saved for these arguments (shape ",
              reserve.sizes(), ", dtype ", reserve.scalar_type(), ")");
  TORCH_CHECK(reserve_h.sizes().equals({g.N, g.reserve_h_cols()}) &&
                  reserve_h.scalar_type() == input.scalar_type() &&
                  reserve_h.device() == input.device(),
              op, ": `reserve_h` is not what lstm saved for these arguments (shape ",
              reserve_h.sizes(), ", dtype ", reserve_h.scalar_type(), ")");
}

StackArgs check_stack(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0,
                      at::TensorList weights, bool has_biases) {
  StackArgs a;
  const int64_t per = has_biases ? 4 : 2;
  TORCH_CHECK(!weights.empty() && static_cast<int64_t>(weights.size()) % per == 0, op,
              ": `weights` must hold ", per, " tensors a layer (w_ih, w_hh",
              has_biases ? ", b_ih, b_hh" : "", "), got ", weights.size());
  a.L = static_cast<int64_t>(weights.size()) / per;
  TORCH_CHECK(h0.dim() == 3 && c0.dim() == 3 && h0.size(0) == a.L && c0.size(0) == a.L, op,
              ": `h0` and `c0` must be [layers, B, hidden_size] with ", a.L,
              " layers (from `weights`), got ", h0.sizes(), " and ", c0.sizes());
  for (int64_t l = 0; l < a.L; ++l) {
    a.w_ih.push_back(weights[per * l]);
    a.w_hh.push_back(weights[per * l + 1]);
    a.b_ih.push_back(has_biases ? OptTensor(weights[per * l + 2]) : std::nullopt);
    a.b_hh.push_back(has_biases ? OptTensor(weights[per * l + 3]) : std::nullopt);
  }
  // h0 and c0 whole, where the first layer's weights and the input give their shape (else the
  // first layer's check names what is wrong)
  if (input.dim() == 3 && a.w_ih[0].dim() == 2 && a.w_ih[0].size(0) % 4 == 0) {
    const int64_t H = a.w_ih[0].size(0) / 4;
    check_operand(op, "h0", h0, {a.L, input.size(1), H}, input, "input");
    check_operand(op, "c0", c0, {a.L, input.size(1), H}, input, "input");
  }
  a.g = check(op, input, h0[0], c0[0], a.w_ih[0], a.w_hh[0], a.b_ih[0], a.b_hh[0], std::nullopt,
              std::nullopt);
  const int64_t H = a.g.H;  // (h0 and c0 whole were checked above: check() needs what that did)
  for (int64_t l = 1; l < a.L; ++l) {
    const std::string at = "weights[" + std::to_string(per * l);
    check_operand(op, (at + "] (w_ih of layer " + std::to_string(l) + ")").c_str(), a.w_ih[l],
                  {4 * H, H}, input, "input");
    check_operand(op, ("weights[" + std::to_string(per * l + 1) + "] (w_hh of layer " +
                       std::to_string(l) + ")").c_str(), a.w_hh[l], {4 * H, H}, input, "input");
    for (int k = 2; k < per; ++k)
      check_operand(op, ("weights[" + std::to_string(per * l + k) + "] (a bias of layer " +
                         std::to_string(l) + ")").c_str(), weights[per * l + k], {4 * H},
                    input, "input");
  }
  return a;
}

bool rnn_tf32_allowed() { return at::globalContext().allowTF32CuDNN(at::Float32Op::RNN); }

namespace {

std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const Tensor& hx, const Tensor& cx,
                                     const Tensor& w_ih, const Tensor& w_hh, const OptTensor& b_ih,
                                     const OptTensor& b_hh, const OptTensor& w_hr, bool tf32) {
  TORCH_CHECK(input.dim() == 2, "lstm_cell: `input` must be 2-D [B, input_size], got shape ",
              input.sizes());
  // the states by their own names (lstm's check would call them h0 and c0)
  if (w_ih.dim() == 2 && w_ih.size(0) % 4 == 0 && (!w_hr.has_value() || w_hr->dim() == 2)) {
    const int64_t B = input.size(0), H = w_ih.size(0) / 4;
    check_operand("lstm_cell", "hx", hx, {B, w_hr.has_value() ? w_hr->size(0) : H}, input,
                  "input");
    check_operand("lstm_cell", "cx", cx, {B, H}, input, "input");
  }
  static const auto op =
      op_handle<Outputs(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const OptTensor&, const OptTensor&, const OptTensor&, const OptTensor&,
                        bool, bool)>("fastlayers::lstm");
  auto out = op.call(input.unsqueeze(0), hx, cx, w_ih, w_hh, b_ih, b_hh, w_hr, std::nullopt,
                     false, tf32);
  return {std::get<1>(out), std::get<2>(out)};
}

}  // namespace
}  // namespace lstm_host
}  // namespace fastlayers

TORCH_LIBRARY_IMPL(fastlayers, CompositeImplicitAutograd, m) {
  m.impl("lstm_cell", &fastlayers::lstm_host::lstm_cell);
}

// Autocast: the LSTM runs in the autocast dtype, as nn.LSTM does.
TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) {
  fastlayers::register_autocast<c10::DeviceType::CUDA>(m, {"lstm", "lstm_persistent", "lstm_stack"});
}
TORCH_LIBRARY_IMPL(fastlayers, AutocastCPU, m) {
  fastlayers::register_autocast<c10::DeviceType::CPU>(m, {"lstm", "lstm_persistent", "lstm_stack"});
}
