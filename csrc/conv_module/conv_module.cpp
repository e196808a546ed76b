// The eager call of a fastlayers convolution module once each pass's algorithm is chosen: one
// autograd node (a C++ torch::autograd::Function) whose forward and gradients call the chosen ops
// through the dispatcher. The same node in Python (nn.py's _ConvFunction) cost a training step
// more host time than the kernels it chose saved: the module's autograd lives here, and Python
// keeps the decisions (the tuner, the plan per input signature) and torch.compile's path.
//
// A plan is bound once per (labels, padding, TF32, 1-D) in Python (algorithms.conv2d_cpp_plan)
// and called as plan(x, w, b, need_backward). Its passes are the registry's choices in numbers:
// each family that can run here says how (Family.cpp_pass); any other family keeps the Python
// node.
#include "conv_module.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/Exceptions.h>  // HANDLE_TH_ERRORS
#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Check, _Unpack, _Wrap
#include <torch/csrc/utils/pybind.h>  // at::Tensor <-> torch.Tensor, intrusive_ptr holders

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "../common/op_handle.h"
#include "../common/tangent.h"

namespace fastlayers {
namespace conv_module {
namespace {

namespace py = pybind11;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One pass's algorithm. Native: PyTorch's convolution (at::convolution, convolution_backward).
// Fft: fastlayers::fft_conv2d* with `backend`, `basis`, `tile`. Winograd: winograd_conv2d* with
// tile `tile[0]`, the fused kernel where `backend` is "fused".
enum class Algo : int64_t { Native = 0, Fft = 1, Winograd = 2 };

struct PassCall {
  Algo algo = Algo::Native;
  std::string backend;  // Fft: "cufft" or "fbfft"; Winograd: "fused" or ""
  bool fused = false;   // Winograd: backend == "fused", read once when the plan is made
  std::array<int64_t, 2> basis{0, 0};
  std::array<int64_t, 2> tile{0, 0};
};

// A module's three choices, bound with the layer's constants. Held by Python (the module's plan)
// and by every autograd node its calls make, so it outlives both.
struct Plan : torch::CustomClassHolder {
  PassCall pass[3];  // forward, input_grad, weight_grad
  std::array<int64_t, 2> padding{0, 0};
  bool tf32 = false;
  bool height_one = false;  // Conv1d: [N, C, L] operands run as [N, C, 1, L]
};

// The ops' handles, found once. Schemas: csrc/fastlayers.cpp.
using FftForward = at::Tensor(const at::Tensor&, const at::Tensor&,
                              const std::optional<at::Tensor>&, c10::SymIntArrayRef,
                              c10::SymIntArrayRef, bool, c10::string_view, c10::SymIntArrayRef);
using FftGrad = at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                           c10::SymIntArrayRef, bool, c10::string_view, c10::SymIntArrayRef);
using WinogradForward = at::Tensor(const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&, c10::SymIntArrayRef, int64_t,
                                   bool, bool, const std::optional<at::Tensor>&);
using WinogradInputGrad = at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                     int64_t, bool, bool);
using WinogradGrad = at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef, int64_t,
                                bool, bool);

struct Ops {
  c10::TypedOperatorHandle<FftForward> fft = op_handle<FftForward>("fastlayers::fft_conv2d");
  c10::TypedOperatorHandle<FftGrad> fft_igrad =
      op_handle<FftGrad>("fastlayers::fft_conv2d_input_grad");
  c10::TypedOperatorHandle<FftGrad> fft_wgrad =
      op_handle<FftGrad>("fastlayers::fft_conv2d_weight_grad");
  c10::TypedOperatorHandle<WinogradForward> wino =
      op_handle<WinogradForward>("fastlayers::winograd_conv2d");
  c10::TypedOperatorHandle<WinogradInputGrad> wino_igrad =
      op_handle<WinogradInputGrad>("fastlayers::winograd_conv2d_input_grad");
  c10::TypedOperatorHandle<WinogradGrad> wino_wgrad =
      op_handle<WinogradGrad>("fastlayers::winograd_conv2d_weight_grad");
};

const Ops& ops() {
  static const Ops o;
  return o;
}

c10::SymIntArrayRef sym(const std::array<int64_t, 2>& a) {
  return c10::fromIntArrayRefSlow(at::IntArrayRef(a.data(), 2));
}

// PyTorch's convolution returns channels_last where the input or the weight suggests it (their
// strides, also where both formats fit them, as with one channel or a 1x1 kernel).
bool channels_last(const at::Tensor& t) {
  return t.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

constexpr std::array<int64_t, 2> kOnes{1, 1};
constexpr std::array<int64_t, 2> kZeros{0, 0};
// The bias gradient sums grad_output over these dimensions (4-D, and a Conv1d's 3-D).
constexpr std::array<int64_t, 3> kSum2d{0, 2, 3};
constexpr std::array<int64_t, 2> kSum1d{0, 2};

// The forward on 4-D operands. A fastlayers op's result takes nn.Conv2d's layout: channels_last
// where the input or the weight is, except float64 on CUDA (cuDNN has no channels_last for it, so
// PyTorch returns contiguous); PyTorch's own convolution gives that layout itself. A Conv1d's
// result is contiguous, as nn.Conv1d's.
at::Tensor run_forward(const Plan& p, const at::Tensor& x, const at::Tensor& w,
                       const std::optional<at::Tensor>& b,
                       const std::optional<at::Tensor>& filters = std::nullopt) {
  const PassCall& c = p.pass[0];
  at::Tensor y;
  switch (c.algo) {
    case Algo::Native:
      return at::convolution(x, w, b, kOnes, p.padding, kOnes, false, kZeros, 1);
    case Algo::Fft:
      y = ops().fft.call(x, w, b, sym(p.padding), sym(c.basis), p.tf32, c.backend, sym(c.tile));
      break;
    case Algo::Winograd:
      y = ops().wino.call(x, w, b, sym(p.padding), c.tile[0], p.tf32, c.fused, filters);
      break;
  }
  if (!p.height_one && (channels_last(x) || channels_last(w)) &&
      !(x.scalar_type() == at::kDouble && x.is_cuda()))
    y = y.contiguous(at::MemoryFormat::ChannelsLast);
  return y;
}

// The input and weight gradients (4-D), each where asked for: one convolution_backward when both
// passes are PyTorch's, else each pass's own call.
std::pair<at::Tensor, at::Tensor> run_grads(const Plan& p, const at::Tensor& x,
                                            const at::Tensor& w, const at::Tensor& gy,
                                            bool need_x, bool need_w) {
  const PassCall& ci = p.pass[1];
  const PassCall& cw = p.pass[2];
  auto native = [&](bool nx, bool nw) {
    auto r = at::convolution_backward(gy, x, w, std::nullopt, kOnes, p.padding, kOnes, false,
                                      kZeros, 1, {nx, nw, false});
    return std::make_pair(std::get<0>(r), std::get<1>(r));
  };
  if (ci.algo == Algo::Native && cw.algo == Algo::Native) {
    if (!need_x && !need_w) return {};
    return native(need_x, need_w);
  }
  at::Tensor gx, gw;
  if (need_x) {
    switch (ci.algo) {
      case Algo::Native:
        gx = native(true, false).first;
        break;
      case Algo::Fft:
        gx = ops().fft_igrad.call(gy, w, sym(p.padding), sym(ci.basis), p.tf32, ci.backend,
                                  sym(ci.tile));
        break;
      case Algo::Winograd:
        gx = ops().wino_igrad.call(gy, w, sym(p.padding), ci.tile[0], p.tf32, ci.fused);
        break;
    }
  }
  if (need_w) {
    switch (cw.algo) {
      case Algo::Native:
        gw = native(false, true).second;
        break;
      case Algo::Fft:
        gw = ops().fft_wgrad.call(gy, x, sym(p.padding), sym(cw.basis), p.tf32, cw.backend,
                                  sym(cw.tile));
        break;
      case Algo::Winograd:
        gw = ops().wino_wgrad.call(gy, x, sym(p.padding), cw.tile[0], p.tf32, cw.fused);
        break;
    }
  }
  return {gx, gw};
}

at::Tensor as_2d(const at::Tensor& t, bool height_one) {
  return height_one ? t.unsqueeze(2) : t;
}

at::Tensor as_given(const at::Tensor& t, bool height_one) {
  return height_one && t.defined() ? t.squeeze(2) : t;
}

// The forward (no autograd): the operands in the plan's dimensions. A Conv1d's result leaves its
// height by _unsafe_view, which autograd does not take for a view: the node's output is then no
// view, and may be changed in place (a ReLU(inplace=True) after the layer) as nn.Conv1d's may.
at::Tensor forward_call(const Plan& p, const at::Tensor& x, const at::Tensor& w,
                        const std::optional<at::Tensor>& b,
                        const std::optional<at::Tensor>& filters = std::nullopt) {
  at::Tensor y = run_forward(p, as_2d(x, p.height_one), as_2d(w, p.height_one), b, filters);
  if (!p.height_one) return y;
  y = y.contiguous();
  return at::_unsafe_view(y, {y.size(0), y.size(1), y.size(3)});
}

struct PlannedConv : torch::autograd::Function<PlannedConv> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b,
                            const c10::intrusive_ptr<Plan>& plan) {
    // Function::apply only turns grad mode off: without this guard the ops' registered autograd
    // (Python, torch.library) would still be entered on every call.
    at::AutoDispatchBelowADInplaceOrView below;
    ctx->save_for_backward({x, w});
    ctx->saved_data["plan"] = c10::IValue::make_capsule(plan);
    ctx->saved_data["bias"] = b.has_value() && b->defined();
    return forward_call(*plan, x, w, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const auto plan = c10::static_intrusive_pointer_cast<Plan>(ctx->saved_data["plan"].toCapsule());
    const Plan& p = *plan;
    const bool has_bias = ctx->saved_data["bias"].toBool();
    const at::Tensor& gy = grads[0];
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const bool need_b = has_bias && ctx->needs_input_grad(2);
    at::Tensor gx, gw, gb;
    if (gy.defined()) {
      // With create_graph the ops' own autograd records them; otherwise they run below it.
      std::optional<at::AutoDispatchBelowADInplaceOrView> below;
      if (!at::GradMode::is_enabled()) below.emplace();
      std::tie(gx, gw) = run_grads(p, as_2d(x, p.height_one), as_2d(w, p.height_one),
                                   as_2d(gy, p.height_one), need_x, need_w);
      gx = as_given(gx, p.height_one);
      gw = as_given(gw, p.height_one);
      if (need_b) gb = gy.sum(gy.dim() == 4 ? at::IntArrayRef(kSum2d) : at::IntArrayRef(kSum1d));
    }
    return {gx, gw, gb, at::Tensor()};
  }
};

// plan(x, w, b, need_backward[, filters]): operands already in the autocast dtype where autocast
// is on (the module casts them), so the ops' autocast kernels are left out. `filters`: the
// forward's filters transformed ahead (a Winograd forward's transformed_weight; a forward that
// needs no backward only).
at::Tensor call_plan(const c10::intrusive_ptr<Plan>& plan, const at::Tensor& x,
                     const at::Tensor& w, const std::optional<at::Tensor>& b,
                     bool need_backward, const std::optional<at::Tensor>& filters) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  if (!need_backward) {
    at::AutoDispatchBelowADInplaceOrView below;
    return forward_call(*plan, x, w, b, filters);
  }
  TORCH_CHECK(!filters.has_value(), "Conv2dPlan call: `filters` serve a call with no backward");
  return PlannedConv::apply(x, w, b, plan);
}

// What both plain CPython functions below check first: `want` positional arguments (or up to
// `most`), the first three (input, weight, bias) tensors, bias also None. False with a TypeError
// naming `usage`.
bool check_operands(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t want, const char* usage,
                    Py_ssize_t most = 0) {
  if (nargs < want || nargs > std::max(want, most)) {
    if (most > want)
      PyErr_Format(PyExc_TypeError, "%s: %zd to %zd positional arguments, got %zd", usage, want,
                   most, nargs);
    else
      PyErr_Format(PyExc_TypeError, "%s: %zd positional arguments, got %zd", usage, want, nargs);
    return false;
  }
  if (!THPVariable_Check(args[0]) || !THPVariable_Check(args[1]) ||
      (args[2] != Py_None && !THPVariable_Check(args[2]))) {
    PyErr_Format(PyExc_TypeError, "%s: input and weight must be tensors, bias a tensor or None",
                 usage);
    return false;
  }
  return true;
}

// Plan.fast_call(): call_plan as a plain CPython function (METH_FASTCALL) bound to the plan (held
// in a capsule as `self`), since pybind11's generic dispatch of a bound method costs microseconds
// every eager call pays (the reason conv_signature is one too).
constexpr const char* kPlanCapsule = "fastlayers.Conv2dPlan";

void release_plan(PyObject* capsule) {
  auto* p = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
  if (p != nullptr) c10::intrusive_ptr<Plan>::reclaim(p);  // drops the capsule's reference
}

// f(input, weight, bias, need_backward[, filters]) -> output, positional only. Errors:
// TypeError for arguments of the wrong kind; the ops' errors and warnings as PyTorch raises them
// (torch.OutOfMemoryError included; TORCH_WARN as a Python warning).
PyObject* plan_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  const char* usage = "Conv2dPlan call(input, weight, bias, need_backward[, filters])";
  if (!check_operands(args, nargs, 4, usage, 5)) return nullptr;
  std::optional<at::Tensor> filters;
  if (nargs == 5 && args[4] != Py_None) {
    if (!THPVariable_Check(args[4])) {
      PyErr_Format(PyExc_TypeError, "%s: filters must be a tensor or None", usage);
      return nullptr;
    }
    filters = THPVariable_Unpack(args[4]);
  }
  const int need_backward = PyObject_IsTrue(args[3]);
  if (need_backward < 0) return nullptr;
  auto* raw = static_cast<Plan*>(PyCapsule_GetPointer(self, kPlanCapsule));
  if (raw == nullptr) return nullptr;
  const auto plan = c10::intrusive_ptr<Plan>::unsafe_reclaim_from_nonowning(raw);
  std::optional<at::Tensor> bias;
  if (args[2] != Py_None) bias = THPVariable_Unpack(args[2]);
  return THPVariable_Wrap(call_plan(plan, THPVariable_Unpack(args[0]),
                                    THPVariable_Unpack(args[1]), bias, need_backward != 0,
                                    filters));
  END_HANDLE_TH_ERRORS
}

PyMethodDef plan_call_def = {
    "conv2d_plan_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(
                            &plan_call)),
    METH_FASTCALL,
    "f(input, weight, bias, need_backward[, filters]) -> output: a Conv2dPlan's call "
    "(Conv2dPlan.fast_call)."};

py::object fast_call(const c10::intrusive_ptr<Plan>& plan) {
  c10::intrusive_ptr<Plan> owned = plan;
  PyObject* capsule = PyCapsule_New(owned.get(), kPlanCapsule, &release_plan);
  if (capsule == nullptr) throw py::error_already_set();
  static_cast<void>(owned.release());  // the capsule holds this reference now
  PyObject* fn = PyCFunction_NewEx(&plan_call_def, capsule, nullptr);
  Py_DECREF(capsule);  // the function holds the capsule
  if (fn == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}

PassCall parse_pass(const py::tuple& t, int index) {
  // (algo, backend, (bh, bw), (th, tw)): see Family.cpp_pass
  TORCH_CHECK(t.size() == 4, "Conv2dPlan: pass ", index, " must be (algo, backend, basis, tile)");
  PassCall c;
  const int64_t algo = t[0].cast<int64_t>();
  TORCH_CHECK(algo >= 0 && algo <= 2, "Conv2dPlan: pass ", index, ": unknown algo ", algo);
  c.algo = static_cast<Algo>(algo);
  c.backend = t[1].cast<std::string>();
  c.fused = c.algo == Algo::Winograd && c.backend == "fused";
  c.basis = t[2].cast<std::array<int64_t, 2>>();
  c.tile = t[3].cast<std::array<int64_t, 2>>();
  return c;
}

// Why a call must run PyTorch's own layer whatever fastlayers would choose, or nullptr: the
// contexts fastlayers' autograd cannot serve (the modules' C++ node and the ops' registered
// autograd have neither functorch's rules nor forward AD's) and tracing by torch.jit.trace (which
// records the ops a call makes, not the node). Forward AD is seen through the operands' tangents
// at the first level (undefined operands are skipped; one with no autograd data has none).
const char* pytorch_only_context(c10::ArrayRef<at::Tensor> operands) {
  if (torch::jit::tracer::isTracing()) return "torch.jit.trace records PyTorch's own layer";
  // functorch includes its front key in the thread's dispatch keys while any transform is on
  if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerFrontMode))
    return "a torch.func transform (vmap, grad, jvp, ...) runs PyTorch's own layer";
  for (const auto& t : operands)
    if (tangent_of(t).defined()) return "forward-mode AD runs PyTorch's own layer";
  return nullptr;
}

// Everything a module's route depends on besides its own attributes, packed for a byte
// comparison: the input's sizes, dtype, device and contiguity, the weight's sizes and dtype,
// whether a bias is given, autocast's dtype on the input's device (-1: off), grad mode and which
// operands need gradients, deterministic mode, PyTorch's TF32 switch for convolution, and the
// tuner's generation and transforms switch (passed in), and whether the call is in a context
// only PyTorch's path serves (pytorch_only_context). The module asks on every eager call:
// built in Python, the same signature cost several microseconds of host time a layer, which a
// host-bound step (autocast, small layers) pays in full.
PyObject* signature_bytes(const at::Tensor& input, const at::Tensor& weight,
                          const at::Tensor* bias, int64_t generation, bool transforms) {
  // Inline storage for 4-D operands; an input of any rank (nn.Conv*d's own error comes later)
  // only grows it.
  c10::SmallVector<int64_t, 24> v;
  const auto put = [&](int64_t x) { v.push_back(x); };
  put(input.dim());
  for (const auto s : input.sizes()) put(s);
  put(weight.dim());
  for (const auto s : weight.sizes()) put(s);
  const auto dev = input.device();
  put(static_cast<int64_t>(input.scalar_type()));
  put(static_cast<int64_t>(dev.type()));
  put(dev.index());
  put(static_cast<int64_t>(weight.scalar_type()));
  const bool has_bias = bias != nullptr && bias->defined();
  int64_t autocast = -1;
  if (at::autocast::is_autocast_available(dev.type()) &&
      at::autocast::is_autocast_enabled(dev.type()))
    autocast = static_cast<int64_t>(at::autocast::get_autocast_dtype(dev.type()));
  put(autocast);
  const int64_t flags = int64_t(input.is_contiguous()) | int64_t(has_bias) << 1 |
                        int64_t(c10::GradMode::is_enabled()) << 2 |
                        int64_t(input.requires_grad()) << 3 |
                        int64_t(weight.requires_grad()) << 4 |
                        int64_t(has_bias && bias->requires_grad()) << 5 |
                        int64_t(at::globalContext().deterministicAlgorithms()) << 6 |
                        int64_t(at::globalContext().allowTF32CuDNN(at::Float32Op::CONV)) << 7 |
                        int64_t(transforms) << 8 |
                        int64_t(pytorch_only_context(
                                    {input, weight, has_bias ? *bias : at::Tensor()}) != nullptr)
                            << 9;
  put(flags);
  put(generation);
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(v.data()),
                                   static_cast<Py_ssize_t>(v.size() * sizeof(int64_t)));
}

// fastlayers._C.conv_signature(input, weight, bias, generation, transforms) -> bytes: a plain
// CPython function (METH_FASTCALL), since pybind11's generic dispatch (overload records, argument
// vectors, casters) costs microseconds a call that a host-bound step pays on every layer.
// TypeError where input or weight is not a tensor (the module then lets nn.Conv*d raise its own
// error).
PyObject* conv_signature(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_operands(args, nargs, 5,
                      "conv_signature(input, weight, bias, generation, transforms)"))
    return nullptr;
  const long long generation = PyLong_AsLongLong(args[3]);
  if (generation == -1 && PyErr_Occurred()) return nullptr;
  const int transforms = PyObject_IsTrue(args[4]);
  if (transforms < 0) return nullptr;
  try {
    return signature_bytes(THPVariable_Unpack(args[0]), THPVariable_Unpack(args[1]),
                           args[2] == Py_None ? nullptr : &THPVariable_Unpack(args[2]),
                           generation, transforms != 0);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef conv_signature_def = {
    "conv_signature", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(
                          &conv_signature)),
    METH_FASTCALL,
    "conv_signature(input, weight, bias, generation, transforms) -> bytes: what a convolution "
    "module's route depends on besides its own attributes."};

}  // namespace

void bind(py::module_& m) {
  PyObject* signature_fn = PyCFunction_NewEx(&conv_signature_def, nullptr, nullptr);
  if (signature_fn == nullptr) throw py::error_already_set();
  m.add_object("conv_signature", py::reinterpret_steal<py::object>(signature_fn));
  m.def("pytorch_only_context",
        [](const std::vector<std::optional<at::Tensor>>& operands) -> std::optional<std::string> {
          std::vector<at::Tensor> ts;
          for (const auto& t : operands) ts.push_back(t.has_value() ? *t : at::Tensor());
          const char* why = pytorch_only_context(ts);
          return why == nullptr ? std::nullopt : std::optional<std::string>(why);
        },
        py::arg("operands"),
        "Why a layer's call must run PyTorch's own path whatever fastlayers would choose "
        "(torch.jit.trace, a torch.func transform, forward-mode AD on an operand), or None; "
        "conv_signature flags the same. `operands`: tensors or None.");
  m.def("channels_last",
        [](const at::Tensor& t) { return channels_last(t); }, py::arg("t"),
        "Whether PyTorch's convolution reads `t` as channels_last (its strides suggest it).");
  py::class_<Plan, c10::intrusive_ptr<Plan>>(m, "Conv2dPlan",
      "A convolution module's three passes as the C++ autograd node runs them; see "
      "fastlayers.algorithms.conv2d_cpp_plan.")
      .def(py::init([](const py::tuple& forward, const py::tuple& input_grad,
                       const py::tuple& weight_grad, std::array<int64_t, 2> padding, bool tf32,
                       bool height_one) {
             auto p = c10::make_intrusive<Plan>();
             p->pass[0] = parse_pass(forward, 0);
             p->pass[1] = parse_pass(input_grad, 1);
             p->pass[2] = parse_pass(weight_grad, 2);
             p->padding = padding;
             p->tf32 = tf32;
             p->height_one = height_one;
             return p;
           }),
           py::arg("forward"), py::arg("input_grad"), py::arg("weight_grad"), py::arg("padding"),
           py::arg("tf32"), py::arg("height_one"))
      .def("fast_call", &fast_call,
           "The plan's call as a plain function f(input, weight, bias, need_backward[, filters]), "
           "without pybind11's dispatch: what the modules call on every eager step.");
}

}  // namespace conv_module
}  // namespace fastlayers
