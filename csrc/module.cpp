// The Python module fastlayers._C: what the package reads of the build (with_cuda, the fbfft size
// limits), the tuner's workspace sizes, PyTorch's TF32 switch for convolution and the cuFFT plan
// cache; test and benchmark hooks in the submodule _C.testing (csrc/testing.cpp). The ops
// themselves are reached through torch.ops.fastlayers (csrc/fastlayers.cpp).
#include <ATen/Context.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../cuda/fbfft/limits.h"
#include "fft_conv/fft_conv.h"
#include "testing.h"

#ifdef FASTLAYERS_WITH_CUDA
#include "../cuda/common/cufft_plans.h"
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.doc() = "fastlayers native library";
  // The fbfft size limits: powers of two up to FBFFT_MAX_1D in 1-D, FBFFT_MAX_2D per side in 2-D.
  m.attr("FBFFT_MAX_1D") = fastlayers::fbfft::kMax1d;
  m.attr("FBFFT_MAX_2D") = fastlayers::fbfft::kMax2d;
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
        return host::workspace_bytes(static_cast<fastlayers::Pass>(pass), g, real_bytes);
      },
      py::arg("pass_"), py::arg("S"), py::arg("C"), py::arg("K"), py::arg("H"), py::arg("W"),
      py::arg("kh"), py::arg("kw"), py::arg("ph"), py::arg("pw"), py::arg("nh"), py::arg("nw"),
      py::arg("real_bytes"), py::arg("backend") = "cufft", py::arg("th") = 0, py::arg("tw") = 0);
#ifdef FASTLAYERS_WITH_CUDA
  m.attr("with_cuda") = true;
  m.def("cufft_plan_cache_size", &fastlayers::cufft_plans::cache_size);
  m.def("cufft_plan_cache_capacity", &fastlayers::cufft_plans::cache_capacity);
  m.def("set_cufft_plan_cache_capacity", &fastlayers::cufft_plans::set_cache_capacity);
  m.def("clear_cufft_plan_cache", &fastlayers::cufft_plans::clear_cache);
  m.def("cufft_version", &fastlayers::cufft_plans::library_version);
#else
  m.attr("with_cuda") = false;
#endif
  auto testing = m.def_submodule("testing", "Test and benchmark hooks (not a stable API)");
  fastlayers::testing::bind(testing);
}
