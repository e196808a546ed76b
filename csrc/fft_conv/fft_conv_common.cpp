// Host side of FFT convolution shared by both devices: argument checks, geometry, the Python
// module's queries, and autocast registration.
#include "fft_conv.h"

#include <ATen/Context.h>

#include <algorithm>

#include "../common/autocast.h"
#include "../common/conv_checks.h"
#include "module_api.h"

namespace fastlayers {
namespace fft_conv_host {
namespace {

const char* op_name(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "fft_conv2d";
    case Pass::InputGrad: return "fft_conv2d_input_grad";
    case Pass::WeightGrad: return "fft_conv2d_weight_grad";
  }
  return "fft_conv2d";
}

static_assert(kMaxPlane == kConvMaxPlane, "one plane bound for every convolution op");
bool plane_ok(int64_t h, int64_t w) { return conv_plane_ok(h, w); }

// A pair argument (`padding`, `basis`) within [0, kMaxPlane] per side, so that sums of sizes
// cannot overflow; negative values get their own messages below.
void check_side_bound(const char* op, const char* name, at::IntArrayRef v) {
  TORCH_CHECK(v[0] <= kMaxPlane && v[1] <= kMaxPlane, op, ": `", name, "` ", v,
              " is too large: the ops take at most ", kMaxPlane, " elements per side and plane");
}

}  // namespace

Backend parse_backend(const char* op, c10::string_view backend) {
  if (backend == "cufft") return Backend::CuFFT;
  if (backend == "fbfft") return Backend::FbFFT;
  TORCH_CHECK(false, op, ": `backend` must be \"cufft\" or \"fbfft\", got \"",
              std::string(backend.data(), backend.size()), "\"");
  return Backend::CuFFT;
}

Geometry check(Pass pass, const at::Tensor& a, const at::Tensor& b,
               const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
               at::IntArrayRef basis, c10::string_view backend, at::IntArrayRef tile) {
  const char* op = op_name(pass);
  const char* an = pass == Pass::Forward ? "input" : "grad_output";
  const char* bn = pass == Pass::WeightGrad ? "input" : "weight";
  check_conv_operand(op, an, a);
  check_conv_operand(op, bn, b);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": `", an, "` (", a.scalar_type(), ") and `",
              bn, "` (", b.scalar_type(), ") must have the same dtype");
  TORCH_CHECK(a.device() == b.device(), op, ": `", an, "` is on ", a.device(), " but `", bn,
              "` is on ", b.device());
  TORCH_CHECK(padding.size() == 2, op, ": `padding` must have 2 values (ph, pw), got ", padding);
  TORCH_CHECK(padding[0] >= 0 && padding[1] >= 0, op, ": `padding` must be >= 0, got ", padding);
  check_side_bound(op, "padding", padding);
  TORCH_CHECK(basis.size() == 2, op, ": `basis` must have 2 values (nh, nw), got ", basis);
  check_side_bound(op, "basis", basis);
  Geometry g{};
  g.backend = parse_backend(op, backend);
  g.ph = padding[0];
  g.pw = padding[1];
  g.nh = basis[0];
  g.nw = basis[1];
  switch (pass) {
    case Pass::Forward:
      g.S = a.size(0); g.C = a.size(1); g.H = a.size(2); g.W = a.size(3);
      g.K = b.size(0); g.kh = b.size(2); g.kw = b.size(3);
      TORCH_CHECK(b.size(1) == g.C, op, ": `weight` has ", b.size(1),
                  " input channels but `input` has ", g.C, " (groups are not supported)");
      break;
    case Pass::InputGrad:
      g.S = a.size(0); g.K = a.size(1);
      g.C = b.size(1); g.kh = b.size(2); g.kw = b.size(3);
      TORCH_CHECK(b.size(0) == g.K, op, ": `weight` has ", b.size(0),
                  " output channels but `grad_output` has ", g.K);
      g.H = a.size(2) + g.kh - 1 - 2 * g.ph;
      g.W = a.size(3) + g.kw - 1 - 2 * g.pw;
      TORCH_CHECK(g.H >= 1 && g.W >= 1, op, ": `grad_output` of spatial size (", a.size(2), ", ",
                  a.size(3), ") with kernel (", g.kh, ", ", g.kw, ") and `padding` ", padding,
                  " implies an input of size (", g.H, ", ", g.W, "), which is empty");
      break;
    case Pass::WeightGrad:
      g.S = a.size(0); g.K = a.size(1);
      TORCH_CHECK(b.size(0) == g.S, op, ": `input` has batch ", b.size(0), " but `grad_output` has ",
                  g.S);
      g.C = b.size(1); g.H = b.size(2); g.W = b.size(3);
      g.kh = g.H + 2 * g.ph - a.size(2) + 1;
      g.kw = g.W + 2 * g.pw - a.size(3) + 1;
      TORCH_CHECK(g.kh >= 1 && g.kw >= 1, op, ": `grad_output` of spatial size (", a.size(2), ", ",
                  a.size(3), ") is larger than the padded `input` (", g.H + 2 * g.ph, ", ",
                  g.W + 2 * g.pw, ")");
      break;
  }
  TORCH_CHECK(g.H >= 1 && g.W >= 1, op, ": input spatial size must be >= 1, got (", g.H, ", ", g.W,
              ")");
  TORCH_CHECK(g.kh >= 1 && g.kw >= 1, op, ": kernel spatial size must be >= 1, got (", g.kh, ", ",
              g.kw, ")");
  TORCH_CHECK(g.kh <= g.H + 2 * g.ph && g.kw <= g.W + 2 * g.pw, op, ": kernel size (", g.kh, ", ",
              g.kw, ") is larger than the padded input (", g.H + 2 * g.ph, ", ", g.W + 2 * g.pw, ")");
  TORCH_CHECK(plane_ok(g.H + 2 * g.ph, g.W + 2 * g.pw), op, ": the padded input (",
              g.H + 2 * g.ph, ", ", g.W + 2 * g.pw, ") of input size (", g.H, ", ", g.W,
              ") and `padding` ", padding, " is too large: the ops take at most ", kMaxPlane,
              " elements per plane");
  TORCH_CHECK(tile.size() == 2, op, ": `tile` must have 2 values (th, tw), got ", tile);
  TORCH_CHECK(tile[0] >= 0 && tile[1] >= 0, op, ": `tile` must be >= 0, got ", tile);
  TORCH_CHECK((tile[0] == 0) == (tile[1] == 0), op, ": `tile` must be [0, 0] (untiled) or have "
              "both sides positive, got ", tile);
  g.th = tile[0];
  g.tw = tile[1];
  if (g.tiled()) {
    const bool ig = pass == Pass::InputGrad;
    const int64_t rh = ig ? g.H : g.oh(), rw = ig ? g.W : g.ow();
    TORCH_CHECK(g.th <= rh && g.tw <= rw, op, ": `tile` ", tile, " is larger than the ",
                ig ? "input gradient" : "output", " (", rh, ", ", rw, ") it divides");
    TORCH_CHECK(g.nh >= g.th + g.kh - 1 && g.nw >= g.tw + g.kw - 1, op, ": `basis` ", basis,
                " must be at least `tile` + kernel - 1 (", g.th + g.kh - 1, ", ",
                g.tw + g.kw - 1, ") with `tile` ", tile);
  } else {
    TORCH_CHECK(g.nh >= g.H + 2 * g.ph && g.nw >= g.W + 2 * g.pw, op, ": `basis` ", basis,
                " must be at least the padded input size (", g.H + 2 * g.ph, ", ",
                g.W + 2 * g.pw, ")");
  }
  TORCH_CHECK(plane_ok(g.nh, g.nw), op, ": `basis` ", basis, " has ", g.nh * g.nw,
              " elements; the ops take at most ", kMaxPlane, " per plane");
  {
    // The spectra over every sample (and tile): the largest of the S C, K C and S K planes the
    // pass transforms or multiplies, times the basis. In double: the product may exceed int64.
    const double n = static_cast<double>(g.S) * (g.tiled() ? tiles_per_sample(pass, g) : 1);
    const double planes = std::max({n * g.C, n * g.K, static_cast<double>(g.K) * g.C});
    const double values = planes * static_cast<double>(g.nh * g.nw);
    TORCH_CHECK(values <= static_cast<double>(kMaxSpectrum), op, ": `basis` ", basis,
                g.tiled() ? c10::str(" with `tile` ", tile) : std::string(), " gives spectra of ",
                values, " values for S = ", g.S, ", C = ", g.C, ", K = ", g.K,
                "; the ops take at most 2^54");
  }
  if (g.backend == Backend::FbFFT) {
    TORCH_CHECK(fft_conv::fbfft_basis_ok(g.nh, g.nw), op, ": `basis` ", basis,
                " is not supported by `backend` \"fbfft\", which needs power-of-two sides from 2 to ",
                fft_conv::kFbfftConvMax, " (backend \"cufft\" takes any basis)");
    TORCH_CHECK(!(a.is_cuda() && a.scalar_type() == at::kDouble), op,
                ": `backend` \"fbfft\" computes in float32 on CUDA and does not take float64; "
                "float64 runs with backend \"cufft\"");
  }
  check_conv_bias(op, pass, bias, g.K, a);
  return g;
}

std::vector<int64_t> output_shape(Pass pass, const Geometry& g) {
  switch (pass) {
    case Pass::Forward: return {g.S, g.K, g.oh(), g.ow()};
    case Pass::InputGrad: return {g.S, g.C, g.H, g.W};
    case Pass::WeightGrad: return {g.K, g.C, g.kh, g.kw};
  }
  return {};
}

bool conv_tf32_allowed() { return at::globalContext().allowTF32CuDNN(at::Float32Op::CONV); }

size_t python_workspace_bytes(int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W,
                              int64_t kh, int64_t kw, int64_t ph, int64_t pw, int64_t nh,
                              int64_t nw, int real_bytes, const std::string& backend, int64_t th,
                              int64_t tw) {
  TORCH_CHECK(pass >= 0 && pass <= 2, "fft_conv2d_workspace_bytes: `pass_` must be 0, 1 or 2");
  TORCH_CHECK(th >= 0 && tw >= 0 && (th == 0) == (tw == 0),
              "fft_conv2d_workspace_bytes: `tile` must be (0, 0) or positive");
  Geometry g{S, C, K, H, W, kh, kw, ph, pw, nh, nw};
  g.th = th;
  g.tw = tw;
  g.backend = parse_backend("fft_conv2d_workspace_bytes", backend);
  return workspace_bytes(static_cast<Pass>(pass), g, real_bytes);
}

at::Tensor run_pass(Pass pass, const at::Tensor& a, const at::Tensor& b,
                    const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
                    at::IntArrayRef basis, bool tf32, c10::string_view backend,
                    at::IntArrayRef tile, const RunOptions& options) {
  TORCH_CHECK(options.tile_chunk_bytes > 0, op_name(pass), ": the tile chunk bound must be > 0");
  if (a.is_cuda()) {
#ifdef FASTLAYERS_WITH_CUDA
    return DeviceOps<&untiled_cuda>::run(pass, a, b, bias, padding, basis, tf32, backend, tile,
                                         options);
#else
    TORCH_CHECK(false, op_name(pass), ": fastlayers was built without CUDA");
#endif
  }
  TORCH_CHECK(a.is_cpu(), op_name(pass), ": runs on CPU and CUDA tensors, got ", a.device());
  return DeviceOps<&untiled_cpu>::run(pass, a, b, bias, padding, basis, tf32, backend, tile,
                                      options);
}

}  // namespace fft_conv_host
}  // namespace fastlayers

// Autocast: the three passes run in the autocast dtype, as nn.Conv2d does.
namespace {

template <c10::DeviceType D>
void register_autocast_passes(torch::Library& m) {
  fastlayers::register_autocast<D>(
      m, {"fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad"});
}

}  // namespace

TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) {
  register_autocast_passes<c10::DeviceType::CUDA>(m);
}
TORCH_LIBRARY_IMPL(fastlayers, AutocastCPU, m) { register_autocast_passes<c10::DeviceType::CPU>(m); }
