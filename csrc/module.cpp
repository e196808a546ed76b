// The Python module fastlayers._C: what the package reads of the build (with_cuda, the fbfft size
// limits), the tuner's workspace sizes, PyTorch's TF32 switch for convolution, the cuFFT plan
// cache, the convolution modules' eager call (Conv2dPlan, csrc/conv_module) and the LSTM's
// (lstm_call, csrc/lstm/lstm_eager.cpp); test and benchmark hooks in the submodule _C.testing
// (csrc/testing.cpp). The ops themselves are reached through torch.ops.fastlayers
// (csrc/fastlayers.cpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../cuda/fbfft/limits.h"
#include "conv_module/conv_module.h"
#include "fft_conv/module_api.h"
#include "lstm/lstm_eager.h"
#include "lstm/module_api.h"
#include "winograd/module_api.h"
#include "testing.h"

#ifdef FASTLAYERS_WITH_CUDA
#include "../cuda/common/cufft_plans.h"
#include "../cuda/common/step_graph.h"
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  namespace fft_conv = fastlayers::fft_conv_host;
  m.doc() = "fastlayers native library";
  // The fbfft size limits: powers of two up to FBFFT_MAX_1D in 1-D, FBFFT_MAX_2D per side in 2-D.
  m.attr("FBFFT_MAX_1D") = fastlayers::fbfft::kMax1d;
  m.attr("FBFFT_MAX_2D") = fastlayers::fbfft::kMax2d;
  // The FFT convolution's size bounds (module_api.h): elements per plane, values per pass's spectra.
  m.attr("FFT_CONV_MAX_PLANE") = fft_conv::kMaxPlane;
  m.attr("FFT_CONV_MAX_SPECTRUM") = fft_conv::kMaxSpectrum;
  m.def("conv_tf32_allowed", &fft_conv::conv_tf32_allowed);
  m.def("rnn_tf32_allowed", &fastlayers::lstm_host::rnn_tf32_allowed);
  m.def("fft_conv2d_workspace_bytes", &fft_conv::python_workspace_bytes, py::arg("pass_"),
        py::arg("S"), py::arg("C"), py::arg("K"), py::arg("H"), py::arg("W"), py::arg("kh"),
        py::arg("kw"), py::arg("ph"), py::arg("pw"), py::arg("nh"), py::arg("nw"),
        py::arg("real_bytes"), py::arg("backend") = "cufft", py::arg("th") = 0,
        py::arg("tw") = 0);
  m.def("winograd_conv2d_workspace_bytes", &fastlayers::winograd_host::python_workspace_bytes,
        py::arg("pass_"), py::arg("S"), py::arg("C"), py::arg("K"), py::arg("H"), py::arg("W"),
        py::arg("ph"), py::arg("pw"), py::arg("tile"), py::arg("store_bytes"),
        py::arg("acc_bytes"));
  m.def("winograd_fused_workspace_bytes",
        &fastlayers::winograd_host::python_fused_workspace_bytes, py::arg("pass_"), py::arg("C"),
        py::arg("K"), py::arg("store_bytes"));
  m.def("winograd_fused_weight_grad_workspace_bytes",
        &fastlayers::winograd_host::python_fused_weight_grad_workspace_bytes, py::arg("S"),
        py::arg("C"), py::arg("K"), py::arg("H"), py::arg("W"), py::arg("ph"), py::arg("pw"));
#ifdef FASTLAYERS_WITH_CUDA
  m.attr("with_cuda") = true;
  // The LSTM ops have CUDA kernels in this build (fastlayers.LSTM checks before using them).
  m.attr("with_lstm_cuda") = true;
  m.def("lstm_persistent_fits", &fastlayers::lstm_host::persistent_fits, py::arg("batch"),
        py::arg("hidden"), py::arg("dtype"), py::arg("device"), py::arg("backward") = false);
  m.def("lstm_persistent_kernel", &fastlayers::lstm_host::persistent_kernel, py::arg("batch"),
        py::arg("hidden"), py::arg("dtype"), py::arg("device"), py::arg("backward") = false);
  m.def("lstm_persistent_clusters", &fastlayers::lstm_host::persistent_clusters,
        py::arg("batch"), py::arg("hidden"), py::arg("dtype"), py::arg("device"),
        py::arg("backward") = false);
  m.def("cufft_plan_cache_size", &fastlayers::cufft_plans::cache_size);
  m.def("cufft_plan_cache_capacity", &fastlayers::cufft_plans::cache_capacity);
  m.def("set_cufft_plan_cache_capacity", &fastlayers::cufft_plans::set_cache_capacity);
  m.def("clear_cufft_plan_cache", &fastlayers::cufft_plans::clear_cache);
  m.def("cufft_version", &fastlayers::cufft_plans::library_version);
  // The step loops' CUDA graphs held now, the most held, their launches and recordings so far
  // (cuda/common/step_graph.h).
  m.def("step_graphs_cached", &fastlayers::step_graph::cached);
  m.attr("STEP_GRAPH_CAPACITY") = fastlayers::step_graph::kCapacity;
  m.def("step_graph_replays", &fastlayers::step_graph::replays);
  m.def("step_graph_recordings", &fastlayers::step_graph::recordings);
#else
  m.attr("with_cuda") = false;
  m.attr("with_lstm_cuda") = false;
#endif
  fastlayers::conv_module::bind(m);
  fastlayers::lstm_host::bind_eager(m);
  auto testing = m.def_submodule("testing", "Test and benchmark hooks (not a stable API)");
  fastlayers::testing::bind(testing);
}
