// fastlayers._C.testing: the hooks tests and benchmarks need, and the only place they live. Each
// is a function of its arguments: what an op decides by itself (how fbfft moves a spectrum,
// whether the GEMMs skip the conjugate rows, the bound on a chunk of tiles) is an explicit
// argument here whose default is the op's own choice.
#include "testing.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // at::Tensor <-> torch.Tensor

#include <optional>
#include <string>
#include <vector>

#include "../cuda/common/recent_keys.h"
#include "fbfft/fbfft.h"
#include "fft_conv/fft_conv.h"
#include "winograd/winograd.h"

namespace fastlayers {
namespace testing {
namespace {

namespace py = pybind11;
using Ints = std::vector<int64_t>;

// The fbfft hooks take CUDA tensors: the CPU kernels have no spectrum movement to choose.
void require_cuda(const char* hook, const at::Tensor& t) {
  TORCH_CHECK(t.is_cuda(), "testing.", hook, ": takes CUDA tensors (fbfft's CUDA kernels), got a ",
              t.device(), " tensor");
}

void check_mode(const char* hook, const char* name, int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "testing.", hook, ": `", name, "` must be 0, 1 or 2, got ",
              mode);
}

void bind_fbfft(py::module_& m) {
  // The fbfft ops' CUDA kernels with the spectrum movement explicit: `direct_io` 0 always through
  // shared memory, 1 directly where measured faster (the ops' choice), 2 always directly. The
  // same checks and results as the ops.
  m.def(
      "fbfft_rfft",
      [](const at::Tensor& x, int64_t n, int64_t offset, int direct_io) {
        require_cuda("fbfft_rfft", x);
        return fbfft_host::fbfft_rfft_cuda(x, n, offset, direct_io);
      },
      py::arg("x"), py::arg("n"), py::arg("offset") = 0, py::arg("direct_io") = 1);
  m.def(
      "fbfft_irfft",
      [](const at::Tensor& X, int64_t n, int64_t out_size, int64_t offset, bool normalized,
         int direct_io) {
        require_cuda("fbfft_irfft", X);
        return fbfft_host::fbfft_irfft_cuda(X, n, out_size, offset, normalized, direct_io);
      },
      py::arg("X"), py::arg("n"), py::arg("out_size"), py::arg("offset") = 0,
      py::arg("normalized") = true, py::arg("direct_io") = 1);
  m.def(
      "fbfft_rfft2",
      [](const at::Tensor& x, const Ints& size, const Ints& offset, bool transposed,
         int direct_io) {
        require_cuda("fbfft_rfft2", x);
        return fbfft_host::fbfft_rfft2_cuda(x, size, offset, transposed, direct_io);
      },
      py::arg("x"), py::arg("size"), py::arg("offset") = Ints{0, 0},
      py::arg("transposed") = false, py::arg("direct_io") = 1);
  m.def(
      "fbfft_irfft2",
      [](const at::Tensor& X, const Ints& size, const Ints& out_size, const Ints& offset,
         bool transposed, bool normalized, int direct_io) {
        require_cuda("fbfft_irfft2", X);
        return fbfft_host::fbfft_irfft2_cuda(X, size, out_size, offset, transposed, normalized,
                                             direct_io);
      },
      py::arg("X"), py::arg("size"), py::arg("out_size"), py::arg("offset") = Ints{0, 0},
      py::arg("transposed") = false, py::arg("normalized") = true, py::arg("direct_io") = 1);
#ifdef FASTLAYERS_WITH_CUDA
  // Benchmark references: cuFFT called directly (one cufftExec on a cached plan, unnormalized, no
  // framework around it); the inverse overwrites `spectrum`, as cuFFT's C2R does. nh = 1: 1-D over
  // the last dimension ([B, nw]), else [B, nh, nw].
  m.def("cufft_direct_rfft2", &fbfft_host::cufft_direct_rfft2, py::arg("x"), py::arg("nh"),
        py::arg("nw"));
  m.def("cufft_direct_irfft2_", &fbfft_host::cufft_direct_irfft2_, py::arg("spectrum"),
        py::arg("nh"), py::arg("nw"));
#endif
}

void bind_fft_conv(py::module_& m) {
  namespace host = fft_conv_host;
  // One FFT-convolution pass (0 forward, 1 input grad, 2 weight grad) as its op computes it (the
  // same checks, tiling and kernels; CPU or CUDA tensors) with two of the op's own choices
  // explicit: `conjugate_skip`, whether the CUDA GEMMs skip the conjugate rows of the DC and
  // Nyquist columns (0 never, 1 where it pays: the op's choice, 2 wherever the basis allows; no
  // effect on CPU), and `tile_chunk_bytes`, the bound on one chunk of tiles (0: the op's bound,
  // TILE_CHUNK_BYTES). a, b: the pass's tensor arguments in schema order.
  m.def(
      "fft_conv2d_pass",
      [](int pass, const at::Tensor& a, const at::Tensor& b,
         const std::optional<at::Tensor>& bias, const Ints& padding, const Ints& basis, bool tf32,
         const std::string& backend, const Ints& tile, int conjugate_skip,
         int64_t tile_chunk_bytes) {
        check_mode("fft_conv2d_pass", "pass_", pass);
        check_mode("fft_conv2d_pass", "conjugate_skip", conjugate_skip);
        TORCH_CHECK(tile_chunk_bytes >= 0,
                    "testing.fft_conv2d_pass: `tile_chunk_bytes` must be >= 0, got ",
                    tile_chunk_bytes);
        host::RunOptions options;
        options.conjugate_skip = static_cast<fft_conv::ConjugateSkip>(conjugate_skip);
        if (tile_chunk_bytes > 0) options.tile_chunk_bytes = tile_chunk_bytes;
        return host::run_pass(static_cast<Pass>(pass), a, b, bias, padding, basis, tf32,
                              backend, tile, options);
      },
      py::arg("pass_"), py::arg("a"), py::arg("b"), py::arg("bias"), py::arg("padding"),
      py::arg("basis"), py::arg("tf32"), py::arg("backend"), py::arg("tile"),
      py::arg("conjugate_skip") = 1, py::arg("tile_chunk_bytes") = 0);
  // Samples per chunk of a tiled pass (th, tw > 0) under the bound `tile_chunk_bytes` (0: the
  // ops' bound, TILE_CHUNK_BYTES), as the pass computes it.
  m.def(
      "tile_chunk_samples",
      [](int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W, int64_t kh, int64_t kw,
         int64_t ph, int64_t pw, int64_t nh, int64_t nw, int real_bytes, int64_t th, int64_t tw,
         int64_t tile_chunk_bytes) {
        TORCH_CHECK(pass >= 0 && pass <= 2 && th > 0 && tw > 0,
                    "testing.tile_chunk_samples: needs a pass 0..2 and a positive tile");
        TORCH_CHECK(tile_chunk_bytes >= 0,
                    "testing.tile_chunk_samples: `tile_chunk_bytes` must be >= 0, got ",
                    tile_chunk_bytes);
        host::Geometry g{S, C, K, H, W, kh, kw, ph, pw, nh, nw};
        g.th = th;
        g.tw = tw;
        return host::chunk_samples(static_cast<Pass>(pass), g, real_bytes,
                                   tile_chunk_bytes > 0 ? tile_chunk_bytes
                                                        : host::kTileChunkBytes);
      },
      py::arg("pass_"), py::arg("S"), py::arg("C"), py::arg("K"), py::arg("H"), py::arg("W"),
      py::arg("kh"), py::arg("kw"), py::arg("ph"), py::arg("pw"), py::arg("nh"), py::arg("nw"),
      py::arg("real_bytes"), py::arg("th"), py::arg("tw"), py::arg("tile_chunk_bytes") = 0);
  m.attr("TILE_CHUNK_BYTES") = host::kTileChunkBytes;
}

void bind_winograd(py::module_& m) {
  namespace host = fastlayers::winograd_host;
  // One Winograd pass (0 forward, 1 input grad, 2 weight grad) as its op computes it, with the
  // bound on one chunk's buffers explicit (0: the ops' bound, WINOGRAD_CHUNK_BYTES), so that tests
  // reach several chunks (the weight gradient's sum over them) on small problems.
  m.def(
      "winograd_conv2d_pass",
      [](int pass, const at::Tensor& a, const at::Tensor& b,
         const std::optional<at::Tensor>& bias, const Ints& padding, int64_t tile, bool tf32,
         int64_t chunk_bytes, const std::optional<at::Tensor>& transformed_weight) {
        check_mode("winograd_conv2d_pass", "pass_", pass);
        TORCH_CHECK(chunk_bytes >= 0,
                    "testing.winograd_conv2d_pass: `chunk_bytes` must be >= 0, got ", chunk_bytes);
        return host::run_pass(static_cast<Pass>(pass), a, b, bias, padding, tile, tf32,
                              chunk_bytes > 0 ? chunk_bytes : host::kChunkBytes,
                              transformed_weight);
      },
      py::arg("pass_"), py::arg("a"), py::arg("b"), py::arg("bias"), py::arg("padding"),
      py::arg("tile"), py::arg("tf32") = false, py::arg("chunk_bytes") = 0,
      py::arg("transformed_weight") = py::none());
  // Samples per chunk of a pass under `chunk_bytes` (0: the ops' bound), as the pass computes it.
  m.def(
      "winograd_chunk_samples",
      [](int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W, int64_t ph, int64_t pw,
         int64_t tile, int store_bytes, int acc_bytes, int64_t chunk_bytes, bool filters_given) {
        check_mode("winograd_chunk_samples", "pass_", pass);
        const winograd::Shape s{S, C, K, H, W, ph, pw, tile};
        return winograd::chunk_samples(static_cast<Pass>(pass), s, store_bytes, acc_bytes,
                                       chunk_bytes > 0 ? chunk_bytes : host::kChunkBytes,
                                       filters_given);
      },
      py::arg("pass_"), py::arg("S"), py::arg("C"), py::arg("K"), py::arg("H"), py::arg("W"),
      py::arg("ph"), py::arg("pw"), py::arg("tile"), py::arg("store_bytes"), py::arg("acc_bytes"),
      py::arg("chunk_bytes") = 0, py::arg("filters_given") = false);
  m.attr("WINOGRAD_CHUNK_BYTES") = host::kChunkBytes;
}

void bind_step_graph(py::module_& m) {
  // The step-graph cache's rule for recording a key (plain C++: tested without a GPU).
  using step_graph::Admission;
  py::class_<Admission>(m, "GraphAdmission")
      .def(py::init<size_t, int>(), py::arg("limit"), py::arg("max_evictions"))
      .def("record", &Admission::record, py::arg("key"))
      .def("evicted", &Admission::evicted, py::arg("key"));
  m.attr("STEP_GRAPH_MAX_EVICTIONS") = step_graph::kMaxEvictions;
  m.attr("STEP_GRAPH_PAID_LAUNCHES") = step_graph::kPaidLaunches;
}

}  // namespace

void bind(py::module_& m) {
  bind_fbfft(m);
  bind_fft_conv(m);
  bind_winograd(m);
  bind_step_graph(m);
}

}  // namespace testing
}  // namespace fastlayers
