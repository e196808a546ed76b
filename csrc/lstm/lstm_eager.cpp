// The eager call of fastlayers.LSTM's layers: one C++ autograd node (a torch::autograd::Function)
// per lstm or lstm_persistent call, whose forward and backward call the ops below autograd. The
// ops' registered autograd (lstm.py, torch.library) enters Python twice a call, on the way in and
// in the backward, and materialises zero gradients for the reserve outputs nobody reads: at small
// batches a training step's host time was twice its device time (about 1.5 ms against 0.6-0.8 at
// hidden 512, batch 1-4, on an H100). torch.compile traces the ops themselves (rnn.py), so their
// registered autograd stays what a graph sees.
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

struct Ops {
  c10::TypedOperatorHandle<Forward> lstm = op_handle<Forward>("fastlayers::lstm");
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
// projection on CUDA, batches up to 16: above, every block reading the whole batch's gate
// gradients each step costs more than the step-wise GEMMs), else lstm_backward.
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
    return {out, h_n, c_n};
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
    Tensor g_out = grads[0];
    if (!g_out.defined()) {  // only h_n or c_n was differentiated: a zero output gradient
      auto shape = input.sizes().vec();
      shape.back() = w_hr.defined() ? w_hr.size(0) : w_hh.size(1);
      g_out = at::zeros(shape, input.options());
    }
    const auto& op = persistent && persistent_backward(input, w_hh, batch_sizes.defined(),
                                                       w_hr.defined())
                         ? ops().backward_persistent
                         : ops().backward;
    // With create_graph the op's own autograd records it (and refuses a double backward, as
    // lstm_backward's does); otherwise it runs below autograd.
    std::optional<at::AutoDispatchBelowADInplaceOrView> below;
    if (!at::GradMode::is_enabled()) below.emplace();
    auto [gx, gh0, gc0, gw_ih, gw_hh, gb, gw_hr] =
        op.call(g_out.contiguous(), given(grads[1]), given(grads[2]), input, h0, c0, w_ih, w_hh,
                given(w_hr), given(batch_sizes), reserve, reserve_h, reverse, tf32, need[0],
                need_weights);
    const bool b_ih_grad = has_b_ih && need[5];
    // The two biases' gradients are equal: the second is a tensor of its own where the first is
    // returned too (one object for both would let an in-place change of one alter the other).
    Tensor gb_hh = has_b_hh && need[6] ? (b_ih_grad ? gb.clone() : gb) : Tensor();
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

// lstm_call(persistent, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, reverse, tf32)
// -> (output, h_n, c_n): lstm (or lstm_persistent) with this node's autograd. Positional only;
// b_ih, b_hh, w_hr and batch_sizes tensors or None. A plain CPython function (METH_FASTCALL):
// pybind11's generic dispatch costs microseconds a call.
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
  PyObject* out = PyTuple_New(3);
  if (out == nullptr) return nullptr;
  for (int i = 0; i < 3; ++i) PyTuple_SET_ITEM(out, i, THPVariable_Wrap(std::move(r[i])));
  return out;
  END_HANDLE_TH_ERRORS
}

PyMethodDef lstm_call_def = {
    "lstm_call",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&lstm_call)),
    METH_FASTCALL,
    "lstm_call(persistent, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes, reverse, "
    "tf32) -> (output, h_n, c_n): one LSTM layer (fastlayers::lstm, or lstm_persistent where "
    "`persistent`) with a C++ autograd node; what fastlayers.LSTM calls eagerly."};

}  // namespace

void bind_eager(pybind11::module_& m) {
  PyObject* fn = PyCFunction_NewEx(&lstm_call_def, nullptr, nullptr);
  if (fn == nullptr) throw pybind11::error_already_set();
  m.add_object("lstm_call", pybind11::reinterpret_steal<pybind11::object>(fn));
}

}  // namespace lstm_host
}  // namespace fastlayers
