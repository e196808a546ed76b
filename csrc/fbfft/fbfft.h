// Host side of fbfft: argument checks and the CPU kernels (ATen's pocketfft), whose semantics
// the CUDA transforms reproduce.
//
// Windows. Every transform reads (rfft) or writes (irfft) its real side through a window: with
// offset o and size n, window(x)[i] = x[i + o] where 0 <= i + o < len(x), and 0 elsewhere.
// A negative offset is implicit zero padding in front, n > len(x) - o implicit padding behind,
// a positive offset a window that starts inside x (tiling); on the inverse the window clips.
//
// Layouts. rfft2 returns [..., nh, nw/2+1], or [..., nw/2+1, nh] when `transposed` (the two
// innermost dimensions swapped, the layout the per-frequency GEMMs of a convolution read).
// The inverses read the same layouts. As in every C2R transform, the imaginary parts of the bins
// that must be real (the DC and Nyquist bins of the halved dimension) are ignored.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include "../../cuda/fbfft/limits.h"

namespace fastlayers {
namespace fbfft_host {

// Sizes: powers of two 2..fbfft::kMax1d in 1-D, 2..fbfft::kMax2d per side in 2-D.

// Argument checks shared by the CPU and CUDA kernels (`dims`: 1 or 2; sizes and offsets have
// `dims` values).
void check_forward(const char* op, const at::Tensor& input, at::IntArrayRef size,
                   at::IntArrayRef offset, int64_t dims);
void check_inverse(const char* op, const at::Tensor& input, at::IntArrayRef size,
                   at::IntArrayRef out_size, at::IntArrayRef offset, bool transposed,
                   int64_t dims);

// The kernels of the four ops on one device, registered for its dispatch key with register_ops.
struct Kernels {
  at::Tensor (*rfft)(const at::Tensor& input, int64_t n, int64_t offset);
  at::Tensor (*irfft)(const at::Tensor& input, int64_t n, int64_t out_size, int64_t offset,
                      bool normalized);
  at::Tensor (*rfft2)(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef offset,
                      bool transposed);
  at::Tensor (*irfft2)(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef out_size,
                       at::IntArrayRef offset, bool transposed, bool normalized);
};
void register_ops(torch::Library& m, const Kernels& kernels);

at::Tensor fbfft_rfft_cpu(const at::Tensor& input, int64_t n, int64_t offset);
at::Tensor fbfft_irfft_cpu(const at::Tensor& input, int64_t n, int64_t out_size, int64_t offset,
                           bool normalized);
at::Tensor fbfft_rfft2_cpu(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef offset,
                           bool transposed);
at::Tensor fbfft_irfft2_cpu(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef out_size,
                            at::IntArrayRef offset, bool transposed, bool normalized);

// The CUDA kernels (CUDA builds) with fbfft's spectrum movement explicit: `direct_io` is an
// fbfft::DirectIo (0 always through shared memory, 1 the measured choice, which the ops take,
// 2 always direct). The same checks and results as the ops.
at::Tensor fbfft_rfft_cuda(const at::Tensor& input, int64_t n, int64_t offset, int direct_io);
at::Tensor fbfft_irfft_cuda(const at::Tensor& input, int64_t n, int64_t out_size, int64_t offset,
                            bool normalized, int direct_io);
at::Tensor fbfft_rfft2_cuda(const at::Tensor& input, at::IntArrayRef size, at::IntArrayRef offset,
                            bool transposed, int direct_io);
at::Tensor fbfft_irfft2_cuda(const at::Tensor& input, at::IntArrayRef size,
                             at::IntArrayRef out_size, at::IntArrayRef offset, bool transposed,
                             bool normalized, int direct_io);

// Benchmark references (CUDA builds): cuFFT called directly, one cufftExec on a cached plan,
// unnormalized; nh = 1 is a 1-D transform of [B, nw], else [B, nh, nw]. The inverse overwrites
// `spectrum`, as cuFFT's C2R does.
at::Tensor cufft_direct_rfft2(const at::Tensor& x, int64_t nh, int64_t nw);
at::Tensor cufft_direct_irfft2_(const at::Tensor& spectrum, int64_t nh, int64_t nw);

}  // namespace fbfft_host
}  // namespace fastlayers
