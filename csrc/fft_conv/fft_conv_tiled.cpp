// Tiled FFT convolution (overlap-save; Vasilache et al., "Fast Convolutional Nets with fbfft",
// ICLR 2015, Section 6), device-agnostic: tiles are cut and reassembled with ATen views and
// copies, and each chunk of tiles runs through the untiled kernel of the tensors' device.
#include <ATen/ATen.h>

#include <algorithm>

#include "fft_conv.h"

namespace fastlayers {
namespace fft_conv_host {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The pass's large spatial result, the one `tile` divides: y for Forward and WeightGrad,
// grad_input for InputGrad.
std::pair<int64_t, int64_t> result_hw(Pass pass, const Geometry& g) {
  return pass == Pass::InputGrad ? std::make_pair(g.H, g.W) : std::make_pair(g.oh(), g.ow());
}

// t [n, c, h, w] -> overlapping windows [n * th_count * tw_count, c, wh, ww] at stride (sh, sw),
// samples outermost, then tile rows, then tile columns.
at::Tensor cut(const at::Tensor& t, int64_t wh, int64_t ww, int64_t sh, int64_t sw) {
  auto u = t.unfold(2, wh, sh).unfold(3, ww, sw);  // [n, c, nth, ntw, wh, ww]
  const int64_t n = u.size(0), c = u.size(1), nth = u.size(2), ntw = u.size(3);
  return u.permute({0, 2, 3, 1, 4, 5}).reshape({n * nth * ntw, c, wh, ww});
}

// r [n * nth * ntw, c, th, tw] -> [n, c, nth * th, ntw * tw]
at::Tensor assemble(const at::Tensor& r, int64_t n, int64_t nth, int64_t ntw) {
  const int64_t c = r.size(1), th = r.size(2), tw = r.size(3);
  return r.view({n, nth, ntw, c, th, tw})
      .permute({0, 3, 1, 4, 2, 5})
      .reshape({n, c, nth * th, ntw * tw});
}

at::ScalarType accumulate_type(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

int64_t tiles_per_sample(Pass pass, const Geometry& g) {
  const auto [rh, rw] = result_hw(pass, g);
  return ceil_div(rh, g.th) * ceil_div(rw, g.tw);
}

Geometry tile_geometry(Pass pass, const Geometry& g, int64_t samples) {
  Geometry t = g;
  t.th = t.tw = 0;
  t.S = samples * tiles_per_sample(pass, g);
  if (pass == Pass::InputGrad) {
    // grad_output windows of th + kh - 1; the padding (kh - 1) keeps the th rows of the full
    // convolution that see the whole kernel. The basis needs H + ph = th + kh - 1 rows here:
    // the window fits, and the kept rows end before any circular wrap reaches them.
    t.H = g.th;
    t.W = g.tw;
    t.ph = g.kh - 1;
    t.pw = g.kw - 1;
  } else {
    t.H = g.th + g.kh - 1;
    t.W = g.tw + g.kw - 1;
    t.ph = t.pw = 0;
  }
  return t;
}

size_t chunk_bytes(Pass pass, const Geometry& g, int64_t samples, int real_bytes) {
  const Geometry t = tile_geometry(pass, g, samples);
  size_t bytes = fft_conv::buffer_layout(pass, t.shape(), real_bytes, g.backend).total();
  const fft_conv::Plan plan = fft_conv::plan_for(pass, t.shape());
  // The tile copies of the operands (the weight is used as it is) and the chunk's output.
  const size_t rb = static_cast<size_t>(real_bytes);
  bytes += static_cast<size_t>(plan.a.n * plan.a.h * plan.a.w) * rb;
  if (pass == Pass::WeightGrad) bytes += static_cast<size_t>(plan.b.n * plan.b.h * plan.b.w) * rb;
  if (pass != Pass::WeightGrad) bytes += static_cast<size_t>(plan.n_out * plan.oh * plan.ow) * rb;
  return bytes;
}

int64_t chunk_samples(Pass pass, const Geometry& g, int real_bytes, int64_t bound_bytes) {
  const size_t bound = static_cast<size_t>(bound_bytes);
  int64_t lo = 1, hi = std::max<int64_t>(g.S, 1);  // the answer lies in [lo, hi]
  if (chunk_bytes(pass, g, hi, real_bytes) <= bound) return hi;
  while (lo < hi) {  // bytes grow with the sample count
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (chunk_bytes(pass, g, mid, real_bytes) <= bound) lo = mid; else hi = mid - 1;
  }
  return lo;
}

size_t workspace_bytes(Pass pass, const Geometry& g, int real_bytes) {
  if (!g.tiled()) return fft_conv::buffer_layout(pass, g.shape(), real_bytes, g.backend).total();
  return chunk_bytes(pass, g, chunk_samples(pass, g, real_bytes), real_bytes);
}

at::Tensor run_tiled(Pass pass, const Geometry& g, const at::Tensor& a, const at::Tensor& b,
                     const std::optional<at::Tensor>& bias, bool tf32, UntiledKernel untiled,
                     const RunOptions& options) {
  const auto [rh, rw] = result_hw(pass, g);
  const int64_t nth = ceil_div(rh, g.th), ntw = ceil_div(rw, g.tw);
  const int64_t eh = nth * g.th, ew = ntw * g.tw;  // the result extended to whole tiles
  const auto out_shape = output_shape(pass, g);
  const int real_bytes = a.scalar_type() == at::kDouble ? 8 : 4;
  const int64_t step = chunk_samples(pass, g, real_bytes, options.tile_chunk_bytes);

  if (g.S == 0) {  // no tiles: an empty result, or a weight gradient of zeros
    return pass == Pass::WeightGrad ? at::zeros(out_shape, a.options())
                                    : at::empty(out_shape, a.options());
  }
  at::Tensor out;  // Forward, InputGrad: the result, filled chunk by chunk
  at::Tensor acc;  // WeightGrad over several chunks: their sum, in the accumulation type
  if (pass != Pass::WeightGrad) {
    out = at::empty(out_shape, a.options());
  } else if (g.S > step) {
    acc = at::zeros(out_shape, a.options().dtype(accumulate_type(a)));
  }

  for (int64_t s0 = 0; s0 < g.S; s0 += step) {
    const int64_t n = std::min(step, g.S - s0);
    const Geometry t = tile_geometry(pass, g, n);
    switch (pass) {
      case Pass::Forward: {
        // The padded input, extended with zeros to eh + kh - 1 rows (partial last tiles).
        const auto x = at::constant_pad_nd(
            a.narrow(0, s0, n),
            {g.pw, ew + g.kw - 1 - g.W - g.pw, g.ph, eh + g.kh - 1 - g.H - g.ph}, 0);
        const auto tiles = cut(x, g.th + g.kh - 1, g.tw + g.kw - 1, g.th, g.tw);
        const auto r = untiled(pass, t, tiles, b, bias, tf32, options);  // [n * T, K, th, tw]
        out.narrow(0, s0, n).copy_(assemble(r, n, nth, ntw).narrow(2, 0, rh).narrow(3, 0, rw));
        break;
      }
      case Pass::InputGrad: {
        // Row i of the padded grad_input needs grad_output rows i - kh + 1 .. i; its tile row
        // a * th + ph + i therefore reads window rows a * th .. a * th + th + kh - 2 of
        // grad_output shifted down by kh - 1 - ph (a negative shift crops).
        const int64_t top = g.kh - 1 - g.ph, left = g.kw - 1 - g.pw;
        const auto& gy = a;
        const auto y = at::constant_pad_nd(
            gy.narrow(0, s0, n),
            {left, ew + g.kw - 1 - left - gy.size(3), top, eh + g.kh - 1 - top - gy.size(2)}, 0);
        const auto tiles = cut(y, g.th + g.kh - 1, g.tw + g.kw - 1, g.th, g.tw);
        const auto r = untiled(pass, t, tiles, b, std::nullopt, tf32, options);  // [n * T, C, th, tw]
        out.narrow(0, s0, n).copy_(assemble(r, n, nth, ntw).narrow(2, 0, rh).narrow(3, 0, rw));
        break;
      }
      case Pass::WeightGrad: {
        // Over several chunks the tiles go in the accumulation type, so that each chunk's sum
        // leaves the untiled kernel unrounded (half storage would round every partial sum).
        const auto ct = acc.defined() ? acc.scalar_type() : a.scalar_type();
        const auto& gy = a;
        const auto x = at::constant_pad_nd(
            b.narrow(0, s0, n).to(ct),
            {g.pw, ew + g.kw - 1 - g.W - g.pw, g.ph, eh + g.kh - 1 - g.H - g.ph}, 0);
        const auto y =
            at::constant_pad_nd(gy.narrow(0, s0, n).to(ct), {0, ew - rw, 0, eh - rh}, 0);
        const auto x_tiles = cut(x, g.th + g.kh - 1, g.tw + g.kw - 1, g.th, g.tw);
        const auto y_tiles = cut(y, g.th, g.tw, g.th, g.tw);
        auto r = untiled(pass, t, y_tiles, x_tiles, std::nullopt, tf32, options);  // [K, C, kh, kw]
        if (!acc.defined()) return r;  // a single chunk
        acc.add_(r);
        break;
      }
    }
  }
  return pass == Pass::WeightGrad ? acc.to(a.scalar_type()) : out;
}

}  // namespace fft_conv_host
}  // namespace fastlayers
