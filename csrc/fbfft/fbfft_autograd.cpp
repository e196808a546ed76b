// Autograd of the fbfft transforms, in C++: each transform's backward is the other one, through
// the dispatcher (so a backward under create_graph is recorded, and double backward works).
// The transforms are launch-sized ops that users call eagerly, one call per batch: a Python
// autograd kernel (torch.library.register_autograd) is entered on every call, gradients wanted
// or not, and its round trip through Python cost more host time than the kernel takes. Here a
// call that needs no graph goes straight below autograd.
//
// Forward-mode AD: the transforms are linear, so a result's tangent is the same transform of
// the input's tangent (a tangent does not make its tensor require grad, so the check is its own).
//
// A half spectrum holds each interior bin once for two of the full spectrum. With d = 2 on the
// interior bins of the halved dimension and 1 on its DC and Nyquist bins:
//   rfft:   X = R(window(x))        ->  grad x = C(grad X / d) read back through window(-offset)
//   irfft:  y = window(C(X) / s)    ->  grad X = R(window(grad y, -offset)) * d / s
// where R is the unnormalised real FFT, C the unnormalised C2R inverse and s the scale (1, or
// the transform's size when `normalized`). The gradient of a real input has the input's dtype.
#include <ATen/ATen.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <vector>

#include "../common/op_handle.h"
#include "../common/tangent.h"

namespace fastlayers {
namespace fbfft_host {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Schemas: csrc/fastlayers.cpp.
using Rfft = at::Tensor(const at::Tensor&, c10::SymInt, int64_t);
using Irfft = at::Tensor(const at::Tensor&, c10::SymInt, c10::SymInt, int64_t, bool);
using Rfft2 = at::Tensor(const at::Tensor&, c10::SymIntArrayRef, at::IntArrayRef, bool);
using Irfft2 = at::Tensor(const at::Tensor&, c10::SymIntArrayRef, c10::SymIntArrayRef,
                          at::IntArrayRef, bool, bool);

struct Ops {
  c10::TypedOperatorHandle<Rfft> rfft = op_handle<Rfft>("fastlayers::fbfft_rfft");
  c10::TypedOperatorHandle<Irfft> irfft = op_handle<Irfft>("fastlayers::fbfft_irfft");
  c10::TypedOperatorHandle<Rfft2> rfft2 = op_handle<Rfft2>("fastlayers::fbfft_rfft2");
  c10::TypedOperatorHandle<Irfft2> irfft2 = op_handle<Irfft2>("fastlayers::fbfft_irfft2");
};

const Ops& ops() {
  static const Ops o;
  return o;
}

bool needs_graph(const at::Tensor& input) {
  return at::GradMode::is_enabled() && input.requires_grad();
}

// The Autograd kernel of a transform whose call is `op` and whose backward is the Function `Fn`
// (applied to `input` and `args`): a call that builds no graph runs the device kernel directly;
// either way the result takes `op` of the input's tangent as its own. The Function gets the input
// without its tangent (a C++ Function has no jvp rule and refuses a dual input).
template <typename Fn, typename Op, typename... Args>
at::Tensor differentiable(const at::Tensor& input, const Op& op, const Args&... args) {
  const at::Tensor tangent = tangent_of(input);
  at::Tensor out;
  if (!needs_graph(input)) {
    at::AutoDispatchBelowADInplaceOrView below;
    out = op(input);
  } else {
    out = Fn::apply(tangent.defined() ? input._fw_primal(0) : input, args...);
  }
  if (tangent.defined()) out._set_fw_grad(op(tangent), 0, false);
  return out;
}

// d over the halved dimension's n/2+1 bins, real, on the gradient's device: [bins], or
// [bins, 1] when that dimension is the second innermost (transposed 2-D spectra).
at::Tensor half_spectrum_weights(const c10::SymInt& n, const at::Tensor& like, bool column) {
  const auto real = like.is_complex() ? c10::toRealValueType(like.scalar_type())
                                      : like.scalar_type();
  const c10::SymInt bins = n / 2 + 1;
  auto d = at::full_symint({bins}, 2.0, like.options().dtype(real));
  d.narrow_symint(0, 0, 1).fill_(1.0);
  d.narrow_symint(0, bins - 1, 1).fill_(1.0);  // Nyquist: the sizes are even
  return column ? d.unsqueeze(-1) : d;
}

// The gradient of an input with no values along a transformed dimension (`last`: its sizes
// there): nothing was read, so an empty tensor of its shape, the gradient's leading dimensions
// then `last` (the inverse takes no out_size of 0).
bool reads_nothing(c10::ArrayRef<c10::SymInt> last) {
  for (const auto& v : last)
    if (v == 0) return true;
  return false;
}
at::Tensor nothing_read(const at::Tensor& g, c10::ArrayRef<c10::SymInt> last, at::ScalarType dt) {
  auto sizes = g.sym_sizes().slice(0, g.dim() - last.size()).vec();
  sizes.insert(sizes.end(), last.begin(), last.end());
  return at::zeros_symint(sizes, g.options().dtype(dt));
}

std::vector<int64_t> negated(at::IntArrayRef v) {
  std::vector<int64_t> out(v.begin(), v.end());
  for (auto& x : out) x = -x;
  return out;
}

struct RfftFn : torch::autograd::Function<RfftFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, c10::SymInt n,
                            int64_t offset) {
    ctx->saved_data["n"] = n;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["w"] = input.sym_size(-1);
    ctx->saved_data["dtype"] = input.scalar_type();
    return ops().rfft.call(input, n, offset);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = grads[0];
    const c10::SymInt n = ctx->saved_data["n"].toSymInt(), w = ctx->saved_data["w"].toSymInt();
    const auto dtype = ctx->saved_data["dtype"].toScalarType();
    if (reads_nothing({w})) return {nothing_read(g, {w}, dtype), at::Tensor(), at::Tensor()};
    const auto gx = ops().irfft.call(g / half_spectrum_weights(n, g, false), n, w,
                                     -ctx->saved_data["offset"].toInt(), false);
    return {gx.to(dtype), at::Tensor(), at::Tensor()};
  }
};

struct IrfftFn : torch::autograd::Function<IrfftFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, c10::SymInt n,
                            c10::SymInt out_size, int64_t offset, bool normalized) {
    ctx->saved_data["n"] = n;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["normalized"] = normalized;
    return ops().irfft.call(input, n, out_size, offset, normalized);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = grads[0];
    const c10::SymInt n = ctx->saved_data["n"].toSymInt();
    auto gX = ops().rfft.call(g, n, -ctx->saved_data["offset"].toInt()) *
              half_spectrum_weights(n, g, false);
    if (ctx->saved_data["normalized"].toBool()) gX = gX / c10::Scalar(n);
    return {gX, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct Rfft2Fn : torch::autograd::Function<Rfft2Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            c10::SymIntArrayRef size, at::IntArrayRef offset, bool transposed) {
    ctx->saved_data["size"] = size;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["hw"] = input.sym_sizes().slice(input.dim() - 2);
    ctx->saved_data["dtype"] = input.scalar_type();
    return ops().rfft2.call(input, size, offset, transposed);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = grads[0];
    const auto size = ctx->saved_data["size"].toSymIntVector();
    const auto hw = ctx->saved_data["hw"].toSymIntVector();
    const bool transposed = ctx->saved_data["transposed"].toBool();
    const auto dtype = ctx->saved_data["dtype"].toScalarType();
    if (reads_nothing(hw))
      return {nothing_read(g, hw, dtype), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto gx = ops().irfft2.call(g / half_spectrum_weights(size[1], g, transposed), size, hw,
                                      negated(ctx->saved_data["offset"].toIntVector()),
                                      transposed, false);
    return {gx.to(dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct Irfft2Fn : torch::autograd::Function<Irfft2Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            c10::SymIntArrayRef size, c10::SymIntArrayRef out_size,
                            at::IntArrayRef offset, bool transposed, bool normalized) {
    ctx->saved_data["size"] = size;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["normalized"] = normalized;
    return ops().irfft2.call(input, size, out_size, offset, transposed, normalized);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = grads[0];
    const auto size = ctx->saved_data["size"].toSymIntVector();
    const bool transposed = ctx->saved_data["transposed"].toBool();
    auto gX = ops().rfft2.call(g, size, negated(ctx->saved_data["offset"].toIntVector()),
                               transposed) *
              half_spectrum_weights(size[1], g, transposed);
    if (ctx->saved_data["normalized"].toBool()) gX = gX / c10::Scalar(size[0] * size[1]);
    return {gX, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The Autograd kernels.
at::Tensor rfft(const at::Tensor& input, c10::SymInt n, int64_t offset) {
  return differentiable<RfftFn>(
      input, [&](const at::Tensor& x) { return ops().rfft.call(x, n, offset); }, n, offset);
}

at::Tensor irfft(const at::Tensor& input, c10::SymInt n, c10::SymInt out_size, int64_t offset,
                 bool normalized) {
  return differentiable<IrfftFn>(
      input,
      [&](const at::Tensor& x) { return ops().irfft.call(x, n, out_size, offset, normalized); },
      n, out_size, offset, normalized);
}

at::Tensor rfft2(const at::Tensor& input, c10::SymIntArrayRef size, at::IntArrayRef offset,
                 bool transposed) {
  return differentiable<Rfft2Fn>(
      input, [&](const at::Tensor& x) { return ops().rfft2.call(x, size, offset, transposed); },
      size, offset, transposed);
}

at::Tensor irfft2(const at::Tensor& input, c10::SymIntArrayRef size, c10::SymIntArrayRef out_size,
                  at::IntArrayRef offset, bool transposed, bool normalized) {
  return differentiable<Irfft2Fn>(
      input,
      [&](const at::Tensor& x) {
        return ops().irfft2.call(x, size, out_size, offset, transposed, normalized);
      },
      size, out_size, offset, transposed, normalized);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastlayers, Autograd, m) {
  m.impl("fbfft_rfft", TORCH_FN(rfft));
  m.impl("fbfft_irfft", TORCH_FN(irfft));
  m.impl("fbfft_rfft2", TORCH_FN(rfft2));
  m.impl("fbfft_irfft2", TORCH_FN(irfft2));
}

}  // namespace fbfft_host
}  // namespace fastlayers
