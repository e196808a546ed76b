// CPU kernels: the CUDA pipeline's algorithm (the same matrices, tiling, chunks and GEMM
// decomposition) on ATen tensors: windows by unfold, transforms and the alpha^2 products by
// matmul. Half and bfloat16 are computed in float, float64 in double.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../../cuda/winograd/matrices.h"
#include "winograd.h"

namespace fastlayers {
namespace winograd_host {
namespace {

using winograd::Tiling;

// AT [m, alpha], G [alpha, r], BT [alpha, alpha] of F(M, R), in `dtype`.
struct Mats {
  at::Tensor AT, G, BT;
};

template <typename Mat>
Mats mats_of(at::ScalarType dtype) {
  constexpr int A = Mat::kAlpha, m = Mat::kM, r = Mat::kR;
  auto opts = at::TensorOptions().dtype(at::kDouble);
  auto at_ = at::empty({m, A}, opts), g = at::empty({A, r}, opts), bt = at::empty({A, A}, opts);
  auto pa = at_.accessor<double, 2>(), pg = g.accessor<double, 2>(), pb = bt.accessor<double, 2>();
  for (int i = 0; i < A; ++i) {
    for (int j = 0; j < m; ++j) pa[j][i] = Mat::AT(j, i);
    for (int j = 0; j < r; ++j) pg[i][j] = Mat::G(i, j);
    for (int j = 0; j < A; ++j) pb[i][j] = Mat::BT(i, j);
  }
  return {at_.to(dtype), g.to(dtype), bt.to(dtype)};
}

Mats mats(Pass pass, int64_t tile, at::ScalarType dtype) {
  using winograd::Matrices;
  if (pass == Pass::WeightGrad)
    return tile == 2 ? mats_of<Matrices<3, 2>>(dtype) : mats_of<Matrices<3, 4>>(dtype);
  switch (tile) {
    case 2: return mats_of<Matrices<2, 3>>(dtype);
    case 4: return mats_of<Matrices<4, 3>>(dtype);
    default: return mats_of<Matrices<6, 3>>(dtype);
  }
}

// t [n, ch, ih, iw] -> [rows^2, ch, n * th * tw]: Tm d Tm^T of every window d (win x win at
// (ty * step - oy, tx * step - ox), zeros outside), Tm [rows, win].
at::Tensor tile_transform(const at::Tensor& t, const at::Tensor& Tm, int64_t th, int64_t tw,
                          int64_t step, int64_t oy, int64_t ox) {
  const int64_t n = t.size(0), ch = t.size(1), ih = t.size(2), iw = t.size(3);
  const int64_t win = Tm.size(1), rows = Tm.size(0);
  const int64_t ch_h = (th - 1) * step + win, ch_w = (tw - 1) * step + win;
  auto canvas = at::zeros({n, ch, ch_h, ch_w}, t.options());
  // canvas[y][x] = t[y - oy][x - ox] where both exist
  const int64_t y0 = std::max<int64_t>(0, oy), y1 = std::min(ch_h, ih + oy);
  const int64_t x0 = std::max<int64_t>(0, ox), x1 = std::min(ch_w, iw + ox);
  if (y1 > y0 && x1 > x0)
    canvas.narrow(2, y0, y1 - y0).narrow(3, x0, x1 - x0)
        .copy_(t.narrow(2, y0 - oy, y1 - y0).narrow(3, x0 - ox, x1 - x0));
  auto tiles = canvas.unfold(2, win, step).unfold(3, win, step);  // [n, ch, th, tw, win, win]
  auto v = at::matmul(at::matmul(Tm, tiles), Tm.t());            // [n, ch, th, tw, rows, rows]
  return v.permute({4, 5, 1, 0, 2, 3}).reshape({rows * rows, ch, n * th * tw});
}

// M [alpha^2, ch, n * th * tw] -> [n, ch, oh, ow]: A^T M A of each tile, m x m at stride m,
// clipped.
at::Tensor output_transform(const at::Tensor& M, const at::Tensor& AT, int64_t n, int64_t th,
                            int64_t tw, int64_t oh, int64_t ow) {
  const int64_t m = AT.size(0), alpha = AT.size(1), ch = M.size(1);
  auto tiles = M.view({alpha, alpha, ch, n, th, tw}).permute({3, 2, 4, 5, 0, 1});
  auto y = at::matmul(at::matmul(AT, tiles), AT.t());  // [n, ch, th, tw, m, m]
  y = y.permute({0, 1, 2, 4, 3, 5}).reshape({n, ch, th * m, tw * m});
  return y.narrow(2, 0, oh).narrow(3, 0, ow);
}

// U [a2, K, C] = G w G^T per filter of w [K, C, 3, 3], in G's dtype.
at::Tensor filters(const at::Tensor& w, const at::Tensor& G) {
  const int64_t a = G.size(0), K = w.size(0), C = w.size(1);
  return at::matmul(at::matmul(G, w), G.t()).permute({2, 3, 0, 1}).reshape({a * a, K, C});
}

at::ScalarType compute_type(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

at::Tensor filter_transform_cpu(const at::Tensor& weight, int64_t tile) {
  const auto ct = compute_type(weight);
  // the transformed filters as the pipelines store them: in the weight's dtype
  return filters(weight.to(ct), mats(Pass::Forward, tile, ct).G)
      .to(weight.scalar_type())
      .contiguous();
}

at::Tensor run_cpu(Pass pass, const Shape& s, const at::Tensor& a_in, const at::Tensor& b_in,
                   const std::optional<at::Tensor>& bias, bool /*tf32*/, int64_t chunk_bytes,
                   bool /*fused: check() refuses it on CPU*/, const at::Tensor* transformed) {
  const auto ct = compute_type(a_in);
  const auto a = a_in.to(ct), b = b_in.to(ct);
  const Mats mt = mats(pass, s.tile, ct);
  const Tiling t = winograd::tiling(pass, s);
  const int store = static_cast<int>(a_in.element_size());
  const int acc = ct == at::kDouble ? 8 : 4;
  // chunks as the CUDA pipeline's (given filters take no workspace there)
  const int64_t chunk =
      winograd::chunk_samples(pass, s, store, acc, chunk_bytes, transformed != nullptr);
  at::Tensor out;
  if (pass == Pass::WeightGrad) {
    // M [a2, C, K] = sum over chunks of X [a2, C, P] Gy^T [a2, P, K]
    at::Tensor M;
    for (int64_t s0 = 0; s0 < s.S; s0 += chunk) {
      const int64_t n = std::min(chunk, s.S - s0);
      auto X = tile_transform(b.narrow(0, s0, n), mt.BT, t.th, t.tw, t.step, t.oy, t.ox);
      auto Gy = tile_transform(a.narrow(0, s0, n), mt.G, t.th, t.tw, t.step, 0, 0);
      auto prod = at::matmul(X, Gy.transpose(1, 2));
      M = M.defined() ? M.add_(prod) : prod;
    }
    // [a2, C, K] as C channels of K one-tile samples -> [K, C, 3, 3]
    out = output_transform(M, mt.AT, s.K, 1, 1, t.res_h, t.res_w);
  } else {
    // U [a2, K, C] = G w G^T (w turned 180 degrees for the input gradient), or the forward's
    // as given
    auto U = transformed != nullptr ? transformed->to(ct)
                                    : filters(pass == Pass::InputGrad ? b.flip({2, 3}) : b, mt.G);
    if (pass == Pass::InputGrad) U = U.transpose(1, 2);  // [a2, C, K]
    std::vector<at::Tensor> parts;
    for (int64_t s0 = 0; s0 < s.S; s0 += chunk) {
      const int64_t n = std::min(chunk, s.S - s0);
      auto V = tile_transform(a.narrow(0, s0, n), mt.BT, t.th, t.tw, t.step, t.oy, t.ox);
      parts.push_back(output_transform(at::matmul(U, V), mt.AT, n, t.th, t.tw, t.res_h, t.res_w));
    }
    out = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
    if (bias.has_value()) out = out + bias->to(ct).view({1, -1, 1, 1});
  }
  return out.to(a_in.scalar_type()).contiguous();
}

TORCH_LIBRARY_IMPL(fastlayers, CPU, m) {
  DeviceOps<&run_cpu, &filter_transform_cpu>::register_ops(m);
}

}  // namespace winograd_host
}  // namespace fastlayers
