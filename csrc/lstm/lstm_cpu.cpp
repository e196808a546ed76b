// CPU kernels: the CUDA algorithm on ATen (the input GEMM of every step hoisted out of the loop,
// one recurrent GEMM per step, the point-wise cell in the accumulation type, the weight gradients
// as one GEMM each over every step), in float32 (float64 for float64; half types computed in
// float32).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "lstm.h"

namespace fastlayers {
namespace lstm_host {
namespace {

// [N, I] rows of the input in either layout.
Tensor rows(const Tensor& t, const Geometry& g) { return t.reshape({g.N, t.size(-1)}); }

Tensor acc(const Tensor& t) { return t.to(acc_type(t.scalar_type())); }

Outputs forward(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                const Tensor& w_hh, const OptTensor& b_ih, const OptTensor& b_hh,
                const OptTensor& w_hr, const OptTensor& batch_sizes, bool reverse, bool tf32) {
  const Geometry g =
      check("lstm", input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes);
  return forward_cpu(g, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, tf32);
}

// lstm_persistent on the CPU: lstm's kernel (the persistent kernel is CUDA's).
Outputs forward_persistent(const Tensor& input, const Tensor& h0, const Tensor& c0,
                           const Tensor& w_ih, const Tensor& w_hh, const OptTensor& b_ih,
                           const OptTensor& b_hh, const OptTensor& w_hr,
                           const OptTensor& batch_sizes, bool reverse, bool tf32) {
  const Geometry g =
      check("lstm_persistent", input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes);
  return forward_cpu(g, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, tf32);
}

// lstm_stack on the CPU: lstm's kernel layer by layer.
StackOutputs forward_stack(const Tensor& input, const Tensor& h0, const Tensor& c0,
                           at::TensorList weights, bool has_biases, bool tf32) {
  const StackArgs a = check_stack("lstm_stack", input, h0, c0, weights, has_biases);
  Geometry g = a.g;
  Tensor x = input;
  std::vector<Tensor> ys, h_n, c_n, reserve, reserve_h;
  for (int64_t l = 0; l < a.L; ++l) {
    if (l > 0) g.I = g.H;
    auto out = forward_cpu(g, x, h0[l], c0[l], a.w_ih[l], a.w_hh[l], a.b_ih[l], a.b_hh[l],
                           std::nullopt, false, tf32);
    x = std::get<0>(out).reshape({g.T, g.B, g.H});
    ys.push_back(x);
    h_n.push_back(std::get<1>(out));
    c_n.push_back(std::get<2>(out));
    reserve.push_back(std::get<3>(out));
    reserve_h.push_back(std::get<4>(out));
  }
  const Tensor inner = a.L > 1 ? at::stack(at::TensorList(ys).slice(0, a.L - 1))
                               : input.new_empty({0, g.T, g.B, g.H});
  return {ys.back().clone(), at::stack(h_n), at::stack(c_n), inner, at::stack(reserve),
          at::stack(reserve_h)};
}

// lstm_backward, and lstm_backward_persistent on the CPU (lstm_backward's kernel): `Op` names the
// op in errors.
constexpr char kBackward[] = "lstm_backward";
constexpr char kBackwardPersistent[] = "lstm_backward_persistent";

template <const char* Op>
Grads backward(const Tensor& grad_output, const OptTensor& grad_h_n, const OptTensor& grad_c_n,
               const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
               const Tensor& w_hh, const OptTensor& w_hr, const OptTensor& batch_sizes,
               const Tensor& reserve, const Tensor& reserve_h, bool reverse, bool tf32,
               bool need_input, bool need_weights) {
  const Geometry g = check(Op, input, h0, c0, w_ih, w_hh, std::nullopt, std::nullopt, w_hr,
                           batch_sizes);
  check_backward(g, input, grad_output, grad_h_n, grad_c_n, reserve, reserve_h);
  return backward_cpu(g, grad_output, grad_h_n, grad_c_n, input, h0, c0, w_ih, w_hh, w_hr,
                      reserve, reserve_h, reverse, tf32, need_input, need_weights);
}

}  // namespace

Outputs forward_cpu(const Geometry& g, const Tensor& input, const Tensor& h0, const Tensor& c0,
                    const Tensor& w_ih, const Tensor& w_hh, const OptTensor& b_ih,
                    const OptTensor& b_hh, const OptTensor& w_hr, bool reverse, bool /*tf32*/) {
  const auto dt = input.scalar_type();
  const auto ct = acc_type(dt);
  const auto opts = input.options().dtype(ct);
  // The input GEMM of every step at once, both biases folded in: [N, 4H].
  Tensor xp = at::matmul(acc(rows(input, g)), acc(w_ih).t());
  if (b_ih.has_value()) xp.add_(acc(*b_ih));
  if (b_hh.has_value()) xp.add_(acc(*b_hh));
  const Tensor whh_t = acc(w_hh).t();
  const Tensor whr_t = g.proj ? acc(*w_hr).t() : Tensor();
  Tensor h = acc(h0).clone(), c = acc(c0).clone();
  Tensor out = at::empty({g.N, g.R}, opts);
  Tensor reserve = at::empty({g.N, g.reserve_cols()}, opts);
  Tensor reserve_h = at::empty({g.N, g.reserve_h_cols()}, opts);
  const int64_t H = g.H;
  for (int64_t s = 0; s < g.T; ++s) {
    const int64_t t = step_time(g, s, reverse), n = g.bs[t], o = g.off[t];
    Tensor hp = h.narrow(0, 0, n), cp = c.narrow(0, 0, n);
    reserve_h.narrow(0, o, n).narrow(1, 0, g.R).copy_(hp);
    Tensor gates = at::addmm(xp.narrow(0, o, n), hp, whh_t);  // [n, 4H]
    Tensor i = gates.narrow(1, 0, H).sigmoid(), f = gates.narrow(1, H, H).sigmoid();
    Tensor gg = gates.narrow(1, 2 * H, H).tanh(), og = gates.narrow(1, 3 * H, H).sigmoid();
    Tensor r = reserve.narrow(0, o, n);
    r.narrow(1, 0, H).copy_(i);
    r.narrow(1, H, H).copy_(f);
    r.narrow(1, 2 * H, H).copy_(gg);
    r.narrow(1, 3 * H, H).copy_(og);
    r.narrow(1, 4 * H, H).copy_(cp);
    Tensor cn = f * cp + i * gg;
    Tensor ht = og * cn.tanh();
    Tensor hn = ht;
    if (g.proj) {
      reserve_h.narrow(0, o, n).narrow(1, g.R, H).copy_(ht);
      hn = at::matmul(ht, whr_t);
    }
    cp.copy_(cn);
    hp.copy_(hn);
    out.narrow(0, o, n).copy_(hn);
  }
  std::vector<int64_t> out_shape = g.packed ? std::vector<int64_t>{g.N, g.R}
                                            : std::vector<int64_t>{g.T, g.B, g.R};
  return {out.to(dt).view(out_shape), h.to(dt), c.to(dt), reserve, reserve_h.to(dt)};
}

Grads backward_cpu(const Geometry& g, const Tensor& grad_output, const OptTensor& grad_h_n,
                   const OptTensor& grad_c_n, const Tensor& input, const Tensor& h0,
                   const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                   const OptTensor& w_hr, const Tensor& reserve, const Tensor& reserve_h,
                   bool reverse, bool /*tf32*/, bool need_input, bool need_weights) {
  // The backward's sums in float64 (float32 data too): in float32, the sums over 4H of the input
  // and h0 gradients read up to 2.35x nn.LSTM's CPU error at H 300..600 (its bound is 2x).
  const auto dt = input.scalar_type();
  const auto ct = at::kDouble;
  const auto opts = input.options().dtype(ct);
  const auto up = [&](const Tensor& t) { return t.to(ct); };
  const int64_t H = g.H;
  Tensor dh = grad_h_n.has_value() ? up(*grad_h_n).clone() : at::zeros({g.B, g.R}, opts);
  Tensor dc = grad_c_n.has_value() ? up(*grad_c_n).clone() : at::zeros({g.B, g.H}, opts);
  const Tensor dy = up(rows(grad_output, g));
  const Tensor whh = up(w_hh), whr = g.proj ? up(*w_hr) : Tensor();
  Tensor dgates = at::empty({g.N, 4 * H}, opts);
  Tensor dh_all = g.proj && need_weights ? at::empty({g.N, g.R}, opts) : Tensor();
  // Backward runs the forward's steps in the opposite order.
  for (int64_t s = g.T - 1; s >= 0; --s) {
    const int64_t t = step_time(g, s, reverse), n = g.bs[t], o = g.off[t];
    Tensor dhn = dy.narrow(0, o, n) + dh.narrow(0, 0, n);  // the gradient on h_t
    Tensor dht = dhn;                                        // ... on o tanh(c_t)
    if (g.proj) {
      if (dh_all.defined()) dh_all.narrow(0, o, n).copy_(dhn);
      dht = at::matmul(dhn, whr);
    }
    Tensor r = up(reserve.narrow(0, o, n));
    Tensor i = r.narrow(1, 0, H), f = r.narrow(1, H, H), gg = r.narrow(1, 2 * H, H);
    Tensor og = r.narrow(1, 3 * H, H), cp = r.narrow(1, 4 * H, H);
    Tensor tc = (f * cp + i * gg).tanh();
    Tensor dcn = dc.narrow(0, 0, n) + dht * og * (1 - tc * tc);
    Tensor dg = dgates.narrow(0, o, n);
    dg.narrow(1, 0, H).copy_(dcn * gg * i * (1 - i));
    dg.narrow(1, H, H).copy_(dcn * cp * f * (1 - f));
    dg.narrow(1, 2 * H, H).copy_(dcn * i * (1 - gg * gg));
    dg.narrow(1, 3 * H, H).copy_(dht * tc * og * (1 - og));
    dc.narrow(0, 0, n).copy_(dcn * f);
    dh.narrow(0, 0, n).copy_(at::matmul(dg, whh));
  }
  Tensor gx, gw_ih, gw_hh, gb, gw_hr;
  if (need_input) {
    gx = at::matmul(dgates, up(w_ih)).to(dt);
    gx = g.packed ? gx : gx.view({g.T, g.B, g.I});
  } else {
    gx = at::empty({0}, input.options());
  }
  if (need_weights) {
    gw_ih = at::matmul(dgates.t(), up(rows(input, g))).to(dt);
    gw_hh = at::matmul(dgates.t(), up(reserve_h.narrow(1, 0, g.R))).to(dt);
    gb = dgates.sum(0).to(dt);
    gw_hr = g.proj ? at::matmul(dh_all.t(), up(reserve_h.narrow(1, g.R, H))).to(dt)
                   : at::empty({0}, input.options());
  } else {  // distinct tensors: the schema's outputs do not alias
    gw_ih = at::empty({0}, input.options());
    gw_hh = at::empty({0}, input.options());
    gb = at::empty({0}, input.options());
    gw_hr = at::empty({0}, input.options());
  }
  return {gx, dh.to(dt), dc.to(dt), gw_ih, gw_hh, gb, gw_hr};
}

TORCH_LIBRARY_IMPL(fastlayers, CPU, m) {
  m.impl("lstm", &forward);
  m.impl("lstm_persistent", &forward_persistent);
  m.impl("lstm_stack", &forward_stack);
  m.impl("lstm_backward", &backward<kBackward>);
  m.impl("lstm_backward_persistent", &backward<kBackwardPersistent>);
}

}  // namespace lstm_host
}  // namespace fastlayers
