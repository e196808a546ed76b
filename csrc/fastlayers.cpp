// The op surface of fastlayers: every public schema, in one place. Kernels are registered beside
// their implementations (CPU, CUDA, autocast); fake kernels and autograd in python/fastlayers/ops.py.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // the at::Tensor caster of the benchmark hooks
#include <torch/library.h>

#include "../cuda/fft_conv/layout.h"
#include "fbfft/fbfft.h"
#include "fft_conv/fft_conv.h"

#ifdef FASTLAYERS_WITH_CUDA
#include "../cuda/common/cufft_plans.h"
#include "../cuda/fbfft/fbfft.h"
#include "../cuda/fft_conv/fft_conv.h"
#endif

TORCH_LIBRARY(fastlayers, m) {
  // FFT convolution, stride 1, dilation 1, groups 1, zero padding (ph, pw); `basis` is the
  // Fourier basis size (nh, nw), at least the padded input. Cross-correlation as in nn.Conv2d.
  // `backend`: the transforms, "cufft" (any basis) or "fbfft" (power-of-two sides 2..128; not
  // float64 on CUDA); on CPU both run the same ATen pipeline.
  // `tile` (th, tw): [0, 0] untiled, else overlap-save tiles of that size over the pass's large
  // result (y for fft_conv2d and fft_conv2d_weight_grad, grad_input for fft_conv2d_input_grad);
  // the basis then needs only tile + kernel - 1 per side (csrc/fft_conv/fft_conv.h).
  // input [S, C, H, W], weight [K, C, kh, kw], bias [K]  ->  [S, K, H+2ph-kh+1, W+2pw-kw+1]
  m.def("fft_conv2d(Tensor input, Tensor weight, Tensor? bias, SymInt[2] padding, "
        "SymInt[2] basis, bool tf32=False, str backend=\"cufft\", "
        "SymInt[2] tile=[0, 0]) -> Tensor");
  // grad_output [S, K, oh, ow], weight [K, C, kh, kw]  ->  grad_input [S, C, oh+kh-1-2ph, ...]
  m.def("fft_conv2d_input_grad(Tensor grad_output, Tensor weight, SymInt[2] padding, "
        "SymInt[2] basis, bool tf32=False, str backend=\"cufft\", "
        "SymInt[2] tile=[0, 0]) -> Tensor");
  // grad_output [S, K, oh, ow], input [S, C, H, W]  ->  grad_weight [K, C, H+2ph-oh+1, ...]
  m.def("fft_conv2d_weight_grad(Tensor grad_output, Tensor input, SymInt[2] padding, "
        "SymInt[2] basis, bool tf32=False, str backend=\"cufft\", "
        "SymInt[2] tile=[0, 0]) -> Tensor");

  // fbfft: small power-of-two real FFTs with implicit padding, windows, clipping and layouts
  // (semantics in csrc/fbfft/fbfft.h). Unnormalised forward; the inverse scales by 1/n when
  // `normalized`. CPU kernels (any float dtype) and CUDA kernels (float32 arithmetic).
  // input [..., w] real -> [..., n/2+1] complex; reads input[..., i + offset], zeros outside
  m.def("fbfft_rfft(Tensor input, SymInt n, int offset=0) -> Tensor");
  // input [..., n/2+1] complex -> [..., out_size] real: inverse[..., i + offset], zeros outside
  m.def("fbfft_irfft(Tensor input, SymInt n, SymInt out_size, int offset=0, "
        "bool normalized=True) -> Tensor");
  // input [..., h, w] real -> [..., nh, nw/2+1] complex, or [..., nw/2+1, nh] when transposed
  m.def("fbfft_rfft2(Tensor input, SymInt[2] size, int[2] offset=[0, 0], "
        "bool transposed=False) -> Tensor");
  // input [..., nh, nw/2+1] (or transposed) complex -> [..., out_h, out_w] real
  m.def("fbfft_irfft2(Tensor input, SymInt[2] size, SymInt[2] out_size, int[2] offset=[0, 0], "
        "bool transposed=False, bool normalized=True) -> Tensor");
}

namespace fastlayers {
namespace {

// Under autocast the ops run in the autocast dtype, as nn.Conv2d does.
template <c10::DeviceType D>
constexpr c10::DispatchKey autocast_key() {
  return D == c10::DeviceType::CUDA ? c10::DispatchKey::AutocastCUDA : c10::DispatchKey::AutocastCPU;
}

template <c10::DeviceType D>
at::Tensor fft_conv2d_autocast(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, c10::SymIntArrayRef padding,
                               c10::SymIntArrayRef basis, bool tf32, c10::string_view backend,
                               c10::SymIntArrayRef tile) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(autocast_key<D>());
  const auto dt = at::autocast::get_autocast_dtype(D);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fastlayers::fft_conv2d", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                         const std::optional<at::Tensor>&, c10::SymIntArrayRef,
                                         c10::SymIntArrayRef, bool, c10::string_view,
                                         c10::SymIntArrayRef)>();
  return op.call(at::autocast::cached_cast(dt, input, D), at::autocast::cached_cast(dt, weight, D),
                 at::autocast::cached_cast(dt, bias, D), padding, basis, tf32, backend, tile);
}

template <c10::DeviceType D>
at::Tensor grad_autocast(const char* name, const at::Tensor& a, const at::Tensor& b,
                         c10::SymIntArrayRef padding, c10::SymIntArrayRef basis, bool tf32,
                         c10::string_view backend, c10::SymIntArrayRef tile) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(autocast_key<D>());
  const auto dt = at::autocast::get_autocast_dtype(D);
  auto op = c10::Dispatcher::singleton()
                .findSchemaOrThrow(name, "")
                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                  c10::SymIntArrayRef, bool, c10::string_view,
                                  c10::SymIntArrayRef)>();
  return op.call(at::autocast::cached_cast(dt, a, D), at::autocast::cached_cast(dt, b, D), padding,
                 basis, tf32, backend, tile);
}

template <c10::DeviceType D>
at::Tensor input_grad_autocast(const at::Tensor& grad_output, const at::Tensor& weight,
                               c10::SymIntArrayRef padding, c10::SymIntArrayRef basis, bool tf32,
                               c10::string_view backend, c10::SymIntArrayRef tile) {
  return grad_autocast<D>("fastlayers::fft_conv2d_input_grad", grad_output, weight, padding, basis,
                          tf32, backend, tile);
}

template <c10::DeviceType D>
at::Tensor weight_grad_autocast(const at::Tensor& grad_output, const at::Tensor& input,
                                c10::SymIntArrayRef padding, c10::SymIntArrayRef basis, bool tf32,
                                c10::string_view backend, c10::SymIntArrayRef tile) {
  return grad_autocast<D>("fastlayers::fft_conv2d_weight_grad", grad_output, input, padding, basis,
                          tf32, backend, tile);
}

}  // namespace
}  // namespace fastlayers

TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) {
  using namespace fastlayers;
  m.impl("fft_conv2d", &fft_conv2d_autocast<c10::DeviceType::CUDA>);
  m.impl("fft_conv2d_input_grad", &input_grad_autocast<c10::DeviceType::CUDA>);
  m.impl("fft_conv2d_weight_grad", &weight_grad_autocast<c10::DeviceType::CUDA>);
}

TORCH_LIBRARY_IMPL(fastlayers, AutocastCPU, m) {
  using namespace fastlayers;
  m.impl("fft_conv2d", &fft_conv2d_autocast<c10::DeviceType::CPU>);
  m.impl("fft_conv2d_input_grad", &input_grad_autocast<c10::DeviceType::CPU>);
  m.impl("fft_conv2d_weight_grad", &weight_grad_autocast<c10::DeviceType::CPU>);
}

// Build facts and cache controls for the Python package.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fastlayers native library";
  // PyTorch's effective TF32 switch for cuDNN convolution (legacy and new APIs both honoured).
  m.def("conv_tf32_allowed",
        [] { return at::globalContext().allowTF32CuDNN(at::Float32Op::CONV); });
  // Workspace bytes of one FFT-convolution pass (0 forward, 1 input grad, 2 weight grad) on the
  // device with the given transform backend ("cufft" or "fbfft"), cuFFT's work areas excluded
  // (small next to the buffers, and asking needs a device). Tiled (th, tw > 0): the bytes of one
  // chunk of tiles, tile copies included.
  m.def(
      "fft_conv2d_workspace_bytes",
      [](int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W, int64_t kh, int64_t kw,
         int64_t ph, int64_t pw, int64_t nh, int64_t nw, int real_bytes, const std::string& backend,
         int64_t th, int64_t tw) {
        namespace host = fastlayers::fft_conv_host;
        TORCH_CHECK(pass >= 0 && pass <= 2, "fft_conv2d_workspace_bytes: `pass_` must be 0, 1 or 2");
        TORCH_CHECK(th >= 0 && tw >= 0 && (th == 0) == (tw == 0),
                    "fft_conv2d_workspace_bytes: `tile` must be (0, 0) or positive");
        host::Geometry g{S, C, K, H, W, kh, kw, ph, pw, nh, nw};
        g.th = th;
        g.tw = tw;
        g.backend = host::parse_backend("fft_conv2d_workspace_bytes", backend);
        return host::workspace_bytes(static_cast<host::Pass>(pass), g, real_bytes);
      },
      pybind11::arg("pass_"), pybind11::arg("S"), pybind11::arg("C"), pybind11::arg("K"),
      pybind11::arg("H"), pybind11::arg("W"), pybind11::arg("kh"), pybind11::arg("kw"),
      pybind11::arg("ph"), pybind11::arg("pw"), pybind11::arg("nh"), pybind11::arg("nw"),
      pybind11::arg("real_bytes"), pybind11::arg("backend") = "cufft", pybind11::arg("th") = 0,
      pybind11::arg("tw") = 0);
  // Tiled passes run their tiles in chunks of whole samples whose bytes stay under this bound
  // (default kTileChunkBytes); samples per chunk as a tiled pass computes them. Internal: tests
  // make the bound tiny to exercise chunking; a value <= 0 restores the default.
  m.def("_tile_chunk_bytes", &fastlayers::fft_conv_host::tile_chunk_bytes);
  m.def("_set_tile_chunk_bytes", &fastlayers::fft_conv_host::set_tile_chunk_bytes);
  m.def("_tile_chunk_samples",
        [](int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W, int64_t kh, int64_t kw,
           int64_t ph, int64_t pw, int64_t nh, int64_t nw, int real_bytes, int64_t th, int64_t tw) {
          namespace host = fastlayers::fft_conv_host;
          TORCH_CHECK(pass >= 0 && pass <= 2 && th > 0 && tw > 0,
                      "_tile_chunk_samples: needs a pass 0..2 and a positive tile");
          host::Geometry g{S, C, K, H, W, kh, kw, ph, pw, nh, nw};
          g.th = th;
          g.tw = tw;
          return host::chunk_samples(static_cast<host::Pass>(pass), g, real_bytes);
        });
#ifdef FASTLAYERS_WITH_CUDA
  m.attr("with_cuda") = true;
  m.def("cufft_plan_cache_size", &fastlayers::cufft_plans::cache_size);
  m.def("cufft_plan_cache_capacity", &fastlayers::cufft_plans::cache_capacity);
  m.def("set_cufft_plan_cache_capacity", &fastlayers::cufft_plans::set_cache_capacity);
  m.def("clear_cufft_plan_cache", &fastlayers::cufft_plans::clear_cache);
  m.def("cufft_version", &fastlayers::cufft_plans::library_version);
  // Benchmark hook: the smallest square 2-D size the fbfft lane kernels take (64 or 128; the
  // default, 128, leaves 64 x 64 on the register kernels). Both kernels compute the same
  // transform; this only chooses which one runs.
  m.def("_fbfft_lanes_2d_min", &fastlayers::fbfft::lanes_2d_min);
  m.def("_fbfft_set_lanes_2d_min", [](int n) {
    TORCH_CHECK(n == 64 || n == 128, "_fbfft_set_lanes_2d_min: `n` must be 64 or 128, got ", n);
    fastlayers::fbfft::set_lanes_2d_min(n);
  });
  // Benchmark hook: how the 2-D register kernels and the 1-D lane kernels move a spectrum with
  // bin stride 1: 0 through shared memory, 1 directly where measured faster (default), 2 directly.
  m.def("_fbfft_direct_io", &fastlayers::fbfft::direct_io);
  m.def("_fbfft_set_direct_io", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "_fbfft_set_direct_io: `mode` must be 0, 1 or 2, got ",
                mode);
    fastlayers::fbfft::set_direct_io(mode);
  });
  // Test and benchmark hook: whether the convolution's GEMMs skip the conjugate rows of the DC and
  // Nyquist columns (0 never, 1 where it pays: the default, 2 wherever the basis allows).
  m.def("_fft_conv_conjugate_skip", &fastlayers::fft_conv::conjugate_skip);
  m.def("_fft_conv_set_conjugate_skip", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2,
                "_fft_conv_set_conjugate_skip: `mode` must be 0, 1 or 2, got ", mode);
    fastlayers::fft_conv::set_conjugate_skip(mode);
  });
  // Benchmark references: cuFFT called directly (cached plan, unnormalized, no framework); the
  // inverse overwrites its input, as cuFFT's C2R does. nh = 1: 1-D over the last dimension.
  m.def("_cufft_direct_rfft2", &fastlayers::fbfft_host::cufft_direct_rfft2, pybind11::arg("x"),
        pybind11::arg("nh"), pybind11::arg("nw"));
  m.def("_cufft_direct_irfft2_", &fastlayers::fbfft_host::cufft_direct_irfft2_,
        pybind11::arg("spectrum"), pybind11::arg("nh"), pybind11::arg("nw"));
  // Benchmark hook: threads per block of the 2-D fbfft register kernels (0: the measured choice;
  // 32, 64, 128 or 256 where built).
  m.def("_fbfft_block_threads", &fastlayers::fbfft::block_threads);
  m.def("_fbfft_set_block_threads", [](int threads) {
    TORCH_CHECK(threads == 0 || threads == 32 || threads == 64 || threads == 128 || threads == 256,
                "_fbfft_set_block_threads: `threads` must be 0, 32, 64, 128 or 256, got ", threads);
    fastlayers::fbfft::set_block_threads(threads);
  });
#else
  m.attr("with_cuda") = false;
#endif
}
