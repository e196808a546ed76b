// CPU kernels: the same pipeline as the CUDA one (pad, R2C, frequency-major batched complex
// GEMM, C2R, clip), on ATen's FFT (pocketfft) and matmul. Half and bfloat16 are computed in float.
// Both backends run this one pipeline (the transforms differ on CUDA only), so "cufft" and "fbfft"
// give identical results here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fft_conv.h"

namespace fastlayers {
namespace fft_conv_host {
namespace {

// t [n0, n1, h, w] -> spectrum [F, n0, n1] of t zero-padded into nh x nw at (offh, offw).
at::Tensor spectrum(const at::Tensor& t, const Geometry& g, int64_t offh, int64_t offw,
                    at::ScalarType compute) {
  auto padded = at::zeros({t.size(0), t.size(1), g.nh, g.nw}, t.options().dtype(compute));
  padded.narrow(2, offh, t.size(2)).narrow(3, offw, t.size(3)).copy_(t);
  auto f = at::fft_rfft2(padded);  // [n0, n1, nh, nw/2+1]
  return f.reshape({t.size(0), t.size(1), -1}).permute({2, 0, 1});
}

// prod [F, n0, n1] -> real [n0, n1, oh, ow] clipped from (offh, offw).
at::Tensor inverse(const at::Tensor& prod, const Geometry& g, int64_t offh, int64_t offw, int64_t oh,
                   int64_t ow) {
  auto spec = prod.permute({1, 2, 0}).reshape({prod.size(1), prod.size(2), g.nh, g.nw / 2 + 1});
  auto real = at::fft_irfft2(spec, at::IntArrayRef{g.nh, g.nw});
  return real.narrow(2, offh, oh).narrow(3, offw, ow);
}

at::ScalarType compute_type(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

// One untiled pass of the checked geometry `g` (tf32 and the conjugate skip concern the CUDA
// GEMMs only).
at::Tensor untiled_cpu(Pass pass, const Geometry& g, const at::Tensor& a, const at::Tensor& b,
                       const std::optional<at::Tensor>& bias, bool /*tf32*/,
                       const RunOptions& /*options*/) {
  const auto out_shape = output_shape(pass, g);
  const auto ct = compute_type(a);
  at::Tensor out;
  if (a.numel() == 0 || b.numel() == 0) {
    out = at::zeros(out_shape, a.options().dtype(ct));
  } else {
    switch (pass) {
      case Pass::Forward: {  // Y[S,K] = X[S,C] conj(W[K,C])^T per frequency
        auto X = spectrum(a, g, g.ph, g.pw, ct);
        auto Wf = spectrum(b, g, 0, 0, ct);
        out = inverse(at::matmul(X, Wf.conj().transpose(1, 2)), g, 0, 0, g.oh(), g.ow());
        break;
      }
      case Pass::InputGrad: {  // GX[S,C] = GY[S,K] W[K,C]
        auto GY = spectrum(a, g, 0, 0, ct);
        auto Wf = spectrum(b, g, 0, 0, ct);
        out = inverse(at::matmul(GY, Wf), g, g.ph, g.pw, g.H, g.W);
        break;
      }
      case Pass::WeightGrad: {  // GW[K,C] = conj(GY[S,K])^T X[S,C]
        auto GY = spectrum(a, g, 0, 0, ct);
        auto X = spectrum(b, g, g.ph, g.pw, ct);
        out = inverse(at::matmul(GY.conj().transpose(1, 2), X), g, 0, 0, g.kh, g.kw);
        break;
      }
    }
  }
  if (bias.has_value()) out = out + bias->to(ct).view({1, -1, 1, 1});
  return out.to(a.scalar_type()).contiguous();
}

TORCH_LIBRARY_IMPL(fastlayers, CPU, m) { DeviceOps<&untiled_cpu>::register_ops(m); }

}  // namespace fft_conv_host
}  // namespace fastlayers
