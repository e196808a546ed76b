// Host side of FFT convolution: argument checks, geometry and tiling shared by the CPU and CUDA
// kernels.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/string_view.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "../../cuda/fft_conv/layout.h"

namespace fastlayers {
namespace fft_conv_host {

using Backend = fft_conv::Backend;

struct Geometry {
  int64_t S, C, K, H, W, kh, kw, ph, pw, nh, nw;
  int64_t th = 0, tw = 0;  // tile of the pass's large spatial result; (0, 0): untiled
  Backend backend = Backend::CuFFT;
  int64_t oh() const { return H + 2 * ph - kh + 1; }
  int64_t ow() const { return W + 2 * pw - kw + 1; }
  bool tiled() const { return th > 0; }
  fft_conv::Shape shape() const { return {S, C, K, H, W, kh, kw, ph, pw, nh, nw}; }
};

// "cufft" -> CuFFT, "fbfft" -> FbFFT; anything else is an error naming `backend` (op: for the
// message).
Backend parse_backend(const char* op, c10::string_view backend);

// Checks the arguments of one pass and derives the geometry. `a`, `b` are the pass's two tensor
// arguments in schema order: (input, weight), (grad_output, weight), (grad_output, input).
// `tile` is (0, 0) (untiled) or the tile size of the pass's large result: the output y for
// Forward and WeightGrad, grad_input for InputGrad.
Geometry check(Pass pass, const at::Tensor& a, const at::Tensor& b,
               const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
               at::IntArrayRef basis, c10::string_view backend, at::IntArrayRef tile);

// The output's shape: [S, K, oh, ow], [S, C, H, W] or [K, C, kh, kw].
std::vector<int64_t> output_shape(Pass pass, const Geometry& g);

// --- tiling (overlap-save), fft_conv_tiled.cpp -------------------------------------------------
//
// A tiled pass cuts its large result into tiles of (th, tw), puts the tiles in the batch
// dimension and runs the untiled pass on them with a basis of at least (th + kh - 1, tw + kw - 1):
//   Forward     input tiles of (th + kh - 1, tw + kw - 1), stride (th, tw), from the padded
//               input (zeros past its end); untiled forward, padding 0; reassembled and cropped.
//   InputGrad   grad_output windows of (th + kh - 1, tw + kw - 1) at stride (th, tw); untiled
//               input grad with padding (kh - 1, kw - 1), which keeps the (th, tw) part of the
//               full convolution that no window edge touches; reassembled and cropped.
//   WeightGrad  input tiles as in Forward and the matching (th, tw) grad_output tiles; the
//               untiled weight grad sums over them (the batch dimension holds samples x tiles).
// Tiles go in chunks of whole samples so that one chunk's workspace stays under a bound
// (RunOptions::tile_chunk_bytes); weight gradients of chunks are summed in the compute precision.

// The ops' bound on the bytes of one chunk of tiles.
constexpr int64_t kTileChunkBytes = int64_t{512} << 20;

// Choices that change how a pass runs, never what it computes: the ops take the defaults; the
// test hooks (csrc/testing.cpp) set them.
struct RunOptions {
  fft_conv::ConjugateSkip conjugate_skip = fft_conv::ConjugateSkip::WherePays;  // CUDA GEMMs
  int64_t tile_chunk_bytes = kTileChunkBytes;  // bound on one chunk of tiles (> 0)
};

// The untiled kernel of one device; `g` is already checked (and may be a tile geometry whose
// InputGrad basis holds H + ph rather than H + 2 ph, see tile_geometry).
using UntiledKernel = at::Tensor (*)(Pass pass, const Geometry& g, const at::Tensor& a,
                                     const at::Tensor& b, const std::optional<at::Tensor>& bias,
                                     bool tf32, const RunOptions& options);

at::Tensor run_tiled(Pass pass, const Geometry& g, const at::Tensor& a, const at::Tensor& b,
                     const std::optional<at::Tensor>& bias, bool tf32, UntiledKernel untiled,
                     const RunOptions& options);

// Tiles per sample: ceil(rh / th) * ceil(rw / tw) over the pass's large result (rh, rw).
int64_t tiles_per_sample(Pass pass, const Geometry& g);

// The untiled geometry that runs `samples` samples' worth of tiles of the tiled geometry `g`.
Geometry tile_geometry(Pass pass, const Geometry& g, int64_t samples);

// Bytes one chunk of `samples` samples takes: the untiled pass's buffers (fft_conv::buffer_layout)
// plus the tile copies of the operands and the chunk's untiled output, at `real_bytes` per real.
size_t chunk_bytes(Pass pass, const Geometry& g, int64_t samples, int real_bytes);

// Samples per chunk: the most (at least 1, at most S) whose chunk_bytes fit `bound`.
int64_t chunk_samples(Pass pass, const Geometry& g, int real_bytes,
                      int64_t bound = kTileChunkBytes);

// Workspace of a pass as the tuner bounds it: buffer_layout's total untiled, the bytes of one
// chunk tiled under the ops' bound (cuFFT's work areas excluded either way).
size_t workspace_bytes(Pass pass, const Geometry& g, int real_bytes);

// --- the three ops of one device ---------------------------------------------------------------

// The untiled kernels of the two devices (fft_conv_cpu.cpp; fft_conv_cuda.cpp in CUDA builds).
at::Tensor untiled_cpu(Pass pass, const Geometry& g, const at::Tensor& a, const at::Tensor& b,
                       const std::optional<at::Tensor>& bias, bool tf32,
                       const RunOptions& options);
at::Tensor untiled_cuda(Pass pass, const Geometry& g, const at::Tensor& a, const at::Tensor& b,
                        const std::optional<at::Tensor>& bias, bool tf32,
                        const RunOptions& options);

// Checks the arguments, then runs the pass untiled or in tiles with the device's untiled kernel.
template <UntiledKernel Untiled>
struct DeviceOps {
  static at::Tensor run(Pass pass, const at::Tensor& a, const at::Tensor& b,
                        const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
                        at::IntArrayRef basis, bool tf32, c10::string_view backend,
                        at::IntArrayRef tile, const RunOptions& options = {}) {
    const Geometry g = check(pass, a, b, bias, padding, basis, backend, tile);
    if (g.tiled()) return run_tiled(pass, g, a, b, bias, tf32, Untiled, options);
    return Untiled(pass, g, a, b, bias, tf32, options);
  }
  static at::Tensor forward(const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
                            at::IntArrayRef basis, bool tf32, c10::string_view backend,
                            at::IntArrayRef tile) {
    return run(Pass::Forward, input, weight, bias, padding, basis, tf32, backend, tile);
  }
  static at::Tensor input_grad(const at::Tensor& grad_output, const at::Tensor& weight,
                               at::IntArrayRef padding, at::IntArrayRef basis, bool tf32,
                               c10::string_view backend, at::IntArrayRef tile) {
    return run(Pass::InputGrad, grad_output, weight, std::nullopt, padding, basis, tf32, backend,
               tile);
  }
  static at::Tensor weight_grad(const at::Tensor& grad_output, const at::Tensor& input,
                                at::IntArrayRef padding, at::IntArrayRef basis, bool tf32,
                                c10::string_view backend, at::IntArrayRef tile) {
    return run(Pass::WeightGrad, grad_output, input, std::nullopt, padding, basis, tf32, backend,
               tile);
  }
  // The three ops' kernels for the dispatch key of `m`.
  static void register_ops(torch::Library& m) {
    m.impl("fft_conv2d", &forward);
    m.impl("fft_conv2d_input_grad", &input_grad);
    m.impl("fft_conv2d_weight_grad", &weight_grad);
  }
};

// One pass as its op computes it (the same checks, tiling and kernels), on the tensors' device
// (CPU, or CUDA in CUDA builds), with `options`: the test hooks' entry.
at::Tensor run_pass(Pass pass, const at::Tensor& a, const at::Tensor& b,
                    const std::optional<at::Tensor>& bias, at::IntArrayRef padding,
                    at::IntArrayRef basis, bool tf32, c10::string_view backend,
                    at::IntArrayRef tile, const RunOptions& options);

}  // namespace fft_conv_host
}  // namespace fastlayers
