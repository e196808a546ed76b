// The eager call of fastlayers.LSTM's layers: one C++ autograd node (a torch::autograd::Function)
// per lstm, lstm_persistent or lstm_stack call, whose forward and backward call the ops below
// autograd. The ops' registered autograd (lstm.py, torch.library) enters Python twice a call, on
// the way in and in the backward, and materialises zero gradients for the reserve outputs nobody
// reads: at small batches a training step's host time was twice its device time (about 1.5 ms
// against 0.6-0.8 at hidden 512, batch 1-4, on an H100). torch.compile traces the ops themselves
// (rnn.py), so their registered autograd stays what a graph sees.
#include "lstm_eager.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Exceptions.h>  // HANDLE_TH_ERRORS
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Check, _Unpack, _Wrap

#include <optional>
#include <tuple>

#include "../common/op_handle.h"
#include "module_api.h"

namespace fastlayers {
namespace lstm_host {
namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Schemas: csrc/fastlayers.cpp.
using Forward = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const OptTensor&,
    const OptTensor&, const OptTensor&, const OptTensor&, bool, bool);
using Backward = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const OptTensor&, const OptTensor&, const Tensor&, const Tensor&,
    const Tensor&, const Tensor&, const Tensor&, const OptTensor&, const OptTensor&,
    const Tensor&, const Tensor&, bool, bool, bool, bool);

using Stack = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, at::TensorList, bool, bool);

struct Ops {
  c10::TypedOperatorHandle<Forward> lstm = op_handle<Forward>("fastlayers::lstm");
  c10::TypedOperatorHandle<Stack> stack = op_handle<Stack>("fastlayers::lstm_stack");
  c10::TypedOperatorHandle<Forward> persistent = op_handle<Forward>("fastlayers::lstm_persistent");
  c10::TypedOperatorHandle<Backward> backward = op_handle<Backward>("fastlayers::lstm_backward");
  c10::TypedOperatorHandle<Backward> backward_persistent =
      op_handle<Backward>("fastlayers::lstm_backward_persistent");
};

const Ops& ops() {
  static const Ops o;
  return o;
}

OptTensor given(const Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; }

// lstm_persistent's gradient: lstm_backward_persistent where it serves (padded input without a
// projection on CUDA, batches up to 16 on the grid: above, every block reading the whole batch's
// gate gradients each step costs more than the step-wise GEMMs; on clusters where they fit, by
// the forward's rule), else lstm_backward.
bool persistent_backward(const Tensor& input, const Tensor& w_hh, bool packed, bool proj) {
#ifdef FASTLAYERS_WITH_CUDA
  if (packed || proj || !input.is_cuda() || input.dim() != 3) return false;
  const auto d = input.scalar_type();
  const char* name = d == at::kFloat ? "float32" : d == at::kHalf ? "float16"
                     : d == at::kBFloat16 ? "bfloat16" : nullptr;
  return name != nullptr &&
         persistent_fits(input.size(1), w_hh.size(1), name, input.device().index(), true);
#else
  (void)input, (void)w_hh, (void)packed, (void)proj;
  return false;
#endif
}

// The second bias's gradient: the two biases' gradients are equal, so it is a tensor of its own
// where the first is returned too (one object for both would let an in-place change of one alter
// the other).
Tensor second_bias_grad(const Tensor& gb, bool first_returned) {
  return first_returned ? gb.clone() : gb;
}

// A zero output gradient for a node whose output only h_n or c_n was differentiated: the
// backward ops take grad_output as a tensor.
Tensor zero_output_grad(const Tensor& input, int64_t cols) {
  auto shape = input.sizes().vec();
  shape.back() = cols;
  return at::zeros(shape, input.options());
}

struct LayerFn : torch::autograd::Function<LayerFn> {
  // Inputs 0-7: input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr (the gradients' order).
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& h0,
                               const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                               const OptTensor& b_ih, const OptTensor& b_hh,
                               const OptTensor& w_hr, const OptTensor& batch_sizes, bool reverse,
                               bool tf32, bool persistent) {
    // An output nobody differentiates gets no zeros made for it: the backward takes its gradient
    // as absent (the op reads a missing grad_h_n / grad_c_n as zero).
    ctx->set_materialize_grads(false);
    // Function::apply only turns grad mode off: the op's registered autograd would still be
    // entered (a round trip through Python) without this guard.
    at::AutoDispatchBelowADInplaceOrView below;
    const auto& op = persistent ? ops().persistent : ops().lstm;
    auto [out, h_n, c_n, reserve, reserve_h] =
        op.call(input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, reverse, tf32);
    ctx->save_for_backward({input, h0, c0, w_ih, w_hh, w_hr.value_or(Tensor()), reserve,
                            reserve_h, batch_sizes.value_or(Tensor())});
    ctx->saved_data["flags"] = static_cast<int64_t>(reverse) | int64_t(tf32) << 1 |
                               int64_t(persistent) << 2 |
                               int64_t(b_ih.has_value() && b_ih->defined()) << 3 |
                               int64_t(b_hh.has_value() && b_hh->defined()) << 4;
    // The states as [1, B, .]: a one-layer module returns them as they are, and, reshaped here
    // below autograd, they are no views (nn.LSTM's h_n.detach_() works on them, as on its own).
    return {out, h_n.unsqueeze(0), c_n.unsqueeze(0)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &input = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3],
                 &w_hh = saved[4], &w_hr = saved[5], &reserve = saved[6], &reserve_h = saved[7],
                 &batch_sizes = saved[8];
    const int64_t flags = ctx->saved_data["flags"].toInt();
    const bool reverse = flags & 1, tf32 = flags & 2, persistent = flags & 4;
    const bool has_b_ih = flags & 8, has_b_hh = flags & 16;
    // needs_input_grad counts the defined tensor inputs only (an absent bias has no edge).
    const bool present[8] = {true, true, true, true, true, has_b_ih, has_b_hh, w_hr.defined()};
    bool need[8];
    for (int i = 0, edge = 0; i < 8; ++i) need[i] = present[i] && ctx->needs_input_grad(edge++);
    const bool need_weights = need[3] || need[4] || need[5] || need[6] || need[7];
    // The states' gradients arrive as [1, B, .].
    const Tensor g_h = grads[1].defined() ? grads[1].squeeze(0) : Tensor();
    const Tensor g_c = grads[2].defined() ? grads[2].squeeze(0) : Tensor();
    const Tensor g_out = grads[0].defined()
                             ? grads[0]
                             : zero_output_grad(input, w_hr.defined() ? w_hr.size(0) : w_hh.size(1));
    const auto& op = persistent && persistent_backward(input, w_hh, batch_sizes.defined(),
                                                       w_hr.defined())
                         ? ops().backward_persistent
                         : ops().backward;
    // With create_graph the op's own autograd records it (and refuses a double backward, as
    // lstm_backward's does); otherwise it runs below autograd.
    std::optional<at::AutoDispatchBelowADInplaceOrView> below;
    if (!at::GradMode::is_enabled()) below.emplace();
    auto [gx, gh0, gc0, gw_ih, gw_hh, gb, gw_hr] =
        op.call(g_out.contiguous(), given(g_h), given(g_c), input, h0, c0, w_ih, w_hh,
                given(w_hr), given(batch_sizes), reserve, reserve_h, reverse, tf32, need[0],
                need_weights);
    const bool b_ih_grad = has_b_ih && need[5];
    Tensor gb_hh = has_b_hh && need[6] ? second_bias_grad(gb, b_ih_grad) : Tensor();
    return {need[0] ? gx : Tensor(),
            need[1] ? gh0 : Tensor(),
            need[2] ? gc0 : Tensor(),
            need[3] ? gw_ih : Tensor(),
            need[4] ? gw_hh : Tensor(),
            b_ih_grad ? gb : Tensor(),
            gb_hh,
            w_hr.defined() && need[7] ? gw_hr : Tensor(),
            Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// lstm_stack's node: inputs input, h0, c0 and the flat weights (per layer w_ih, w_hh and with
// biases b_ih, b_hh). Its backward runs lstm_backward layer by layer from the top on the slices of
// what the stack saved; a layer's input gradient is the output gradient of the layer below.
struct StackFn : torch::autograd::Function<StackFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& h0,
                               const Tensor& c0, at::TensorList weights, bool has_biases,
                               bool tf32) {
    ctx->set_materialize_grads(false);
    at::AutoDispatchBelowADInplaceOrView below;  // as LayerFn's
    auto [out, h_n, c_n, inner, reserve, reserve_h] =
        ops().stack.call(input, h0, c0, weights, has_biases, tf32);
    std::vector<Tensor> saved{input, h0, c0, inner, reserve, reserve_h};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["flags"] = int64_t(has_biases) | int64_t(tf32) << 1;
    return {out, h_n, c_n};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &input = saved[0], &h0 = saved[1], &c0 = saved[2], &inner = saved[3],
                 &reserve = saved[4], &reserve_h = saved[5];
    const int64_t flags = ctx->saved_data["flags"].toInt();
    const bool has_biases = flags & 1, tf32 = flags & 2;
    const int64_t per = has_biases ? 4 : 2, L = h0.size(0);
    const size_t n_weights = saved.size() - 6;
    // Every input is a defined tensor: edge i is input i (the weights from 3 on).
    std::vector<bool> need(3 + n_weights);
    for (size_t i = 0; i < need.size(); ++i) need[i] = ctx->needs_input_grad(i);
    bool any_weight = false;
    for (size_t i = 3; i < need.size(); ++i) any_weight = any_weight || need[i];
    const Tensor &g_out = grads[0], &g_h = grads[1], &g_c = grads[2];
    Tensor g = g_out.defined() ? g_out : zero_output_grad(input, h0.size(2));
    std::optional<at::AutoDispatchBelowADInplaceOrView> below;  // as LayerFn's backward
    if (!at::GradMode::is_enabled()) below.emplace();
    std::vector<Tensor> gh0(L), gc0(L);
    variable_list out(3 + n_weights + 2);
    for (int64_t l = L - 1; l >= 0; --l) {
      const Tensor x = l == 0 ? input : inner[l - 1];
      const Tensor &w_ih = saved[6 + per * l], &w_hh = saved[6 + per * l + 1];
      auto [gx, gh, gc, gw_ih, gw_hh, gb, gw_hr] = ops().backward.call(
          g.contiguous(), g_h.defined() ? OptTensor(g_h[l]) : std::nullopt,
          g_c.defined() ? OptTensor(g_c[l]) : std::nullopt, x, h0[l], c0[l], w_ih, w_hh,
          std::nullopt, std::nullopt, reserve[l], reserve_h[l], false, tf32, l > 0 || need[0],
          any_weight);
      gh0[l] = gh;
      gc0[l] = gc;
      const size_t w = 3 + per * l;  // this layer's first weight among the inputs
      if (need[w]) out[w] = gw_ih;
      if (need[w + 1]) out[w + 1] = gw_hh;
      if (has_biases) {
        if (need[w + 2]) out[w + 2] = gb;
        if (need[w + 3]) out[w + 3] = second_bias_grad(gb, need[w + 2]);
      }
      g = gx;
    }
    if (need[0]) out[0] = g;
    if (need[1]) out[1] = at::stack(gh0);
    if (need[2]) out[2] = at::stack(gc0);
    return out;
  }
};

// Autocast as the ops' autocast kernel has it (csrc/common/autocast.h), applied before the node so
// that autograd records the casts and the node sees the operands it runs on: every floating-point
// operand of the device in the autocast dtype (float64 and other devices' tensors as they are).
struct Cast {
  bool on = false;
  c10::DeviceType device = c10::DeviceType::CPU;
  at::ScalarType dtype = at::kFloat;
  explicit Cast(const Tensor& input) : device(input.device().type()) {
    on = (device == c10::DeviceType::CUDA || device == c10::DeviceType::CPU) &&
         at::autocast::is_autocast_enabled(device);
    if (on) dtype = at::autocast::get_autocast_dtype(device);
  }
  Tensor operator()(const Tensor& t) const {
    return on && t.defined() ? at::autocast::cached_cast(dtype, t, device) : t;
  }
  OptTensor operator()(const OptTensor& t) const {
    return t.has_value() ? OptTensor((*this)(*t)) : std::nullopt;
  }
};

// A node's three results as a Python tuple.
PyObject* results(variable_list&& r) {
  PyObject* out = PyTuple_New(3);
  if (out == nullptr) return nullptr;
  for (int i = 0; i < 3; ++i) {
    PyObject* t = THPVariable_Wrap(std::move(r[i]));
    if (t == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, i, t);
  }
  return out;
}

// lstm_call(persistent, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, reverse, tf32)
// -> (output, h_n [1, B, R], c_n [1, B, H]): lstm (or lstm_persistent) with this node's
// autograd. Positional only; b_ih, b_hh, w_hr and batch_sizes tensors or None. A plain CPython
// function (METH_FASTCALL): pybind11's generic dispatch costs microseconds a call.
constexpr Py_ssize_t kArgs = 12;

PyObject* lstm_call(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  const char* usage =
      "lstm_call(persistent, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, "
      "reverse, tf32)";
  if (nargs != kArgs) {
    PyErr_Format(PyExc_TypeError, "%s: %zd positional arguments, got %zd", usage, kArgs, nargs);
    return nullptr;
  }
  for (Py_ssize_t i = 1; i < 10; ++i) {
    if (!THPVariable_Check(args[i]) && !(i >= 6 && args[i] == Py_None)) {
      PyErr_Format(PyExc_TypeError, "%s: argument %zd must be a tensor%s", usage, i,
                   i >= 6 ? " or None" : "");
      return nullptr;
    }
  }
  int flags[3];
  const Py_ssize_t at_flag[3] = {0, 10, 11};
  for (int k = 0; k < 3; ++k) {
    flags[k] = PyObject_IsTrue(args[at_flag[k]]);
    if (flags[k] < 0) return nullptr;
  }
  const auto opt = [&](Py_ssize_t i) {
    return args[i] == Py_None ? OptTensor() : OptTensor(THPVariable_Unpack(args[i]));
  };
  const Tensor& input = THPVariable_Unpack(args[1]);
  const Cast cast(input);
  variable_list r;
  {
    // The casts above the node; the node's forward below autocast (its operands are cast).
    Tensor x = cast(input), h0 = cast(THPVariable_Unpack(args[2])),
           c0 = cast(THPVariable_Unpack(args[3])), w_ih = cast(THPVariable_Unpack(args[4])),
           w_hh = cast(THPVariable_Unpack(args[5]));
    OptTensor b_ih = cast(opt(6)), b_hh = cast(opt(7)), w_hr = cast(opt(8));
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    r = LayerFn::apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, opt(9), flags[1] != 0,
                       flags[2] != 0, flags[0] != 0);
  }
  return results(std::move(r));
  END_HANDLE_TH_ERRORS
}

// lstm_stack_call(input, h0, c0, weights, has_biases, tf32) -> (output, h_n, c_n): lstm_stack with
// StackFn's autograd; `weights` a list or tuple of tensors. Positional only, as lstm_call.
PyObject* lstm_stack_call(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  const char* usage = "lstm_stack_call(input, h0, c0, weights, has_biases, tf32)";
  if (nargs != 6) {
    PyErr_Format(PyExc_TypeError, "%s: 6 positional arguments, got %zd", usage, nargs);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < 3; ++i) {
    if (!THPVariable_Check(args[i])) {
      PyErr_Format(PyExc_TypeError, "%s: argument %zd must be a tensor", usage, i);
      return nullptr;
    }
  }
  if (!PyList_Check(args[3]) && !PyTuple_Check(args[3])) {
    PyErr_Format(PyExc_TypeError, "%s: weights must be a list or tuple of tensors", usage);
    return nullptr;
  }
  const int has_biases = PyObject_IsTrue(args[4]), tf32 = PyObject_IsTrue(args[5]);
  if (has_biases < 0 || tf32 < 0) return nullptr;
  const Tensor& input = THPVariable_Unpack(args[0]);
  const Cast cast(input);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(args[3]);
  PyObject** items = PySequence_Fast_ITEMS(args[3]);
  std::vector<Tensor> weights;
  weights.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!THPVariable_Check(items[i])) {
      PyErr_Format(PyExc_TypeError, "%s: weights[%zd] must be a tensor", usage, i);
      return nullptr;
    }
    weights.push_back(cast(THPVariable_Unpack(items[i])));
  }
  variable_list r;
  {
    Tensor x = cast(input), h0 = cast(THPVariable_Unpack(args[1])),
           c0 = cast(THPVariable_Unpack(args[2]));
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    r = StackFn::apply(x, h0, c0, at::TensorList(weights), has_biases != 0, tf32 != 0);
  }
  return results(std::move(r));
  END_HANDLE_TH_ERRORS
}

PyMethodDef stack_call_def = {
    "lstm_stack_call",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&lstm_stack_call)),
    METH_FASTCALL,
    "lstm_stack_call(input, h0, c0, weights, has_biases, tf32) -> (output, h_n, c_n): "
    "fastlayers::lstm_stack with a C++ autograd node; what fastlayers.LSTM calls eagerly for a "
    "unidirectional stack."};

PyMethodDef lstm_call_def = {
    "lstm_call",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&lstm_call)),
    METH_FASTCALL,
    "lstm_call(persistent, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, reverse, "
    "tf32) -> (output, h_n [1, B, R], c_n [1, B, H]): one LSTM layer (fastlayers::lstm, or "
    "lstm_persistent where "
    "`persistent`) with a C++ autograd node; what fastlayers.LSTM calls eagerly."};

}  // namespace

void bind_eager(pybind11::module_& m) {
  for (PyMethodDef* def : {&lstm_call_def, &stack_call_def}) {
    PyObject* fn = PyCFunction_NewEx(def, nullptr, nullptr);
    if (fn == nullptr) throw pybind11::error_already_set();
    m.add_object(def->ml_name, pybind11::reinterpret_steal<pybind11::object>(fn));
  }
}

}  // namespace lstm_host
}  // namespace fastlayers
