// fbfft: batched real 2-D (and, with nh = 1, 1-D) FFTs of small power-of-two sizes. The real side
// is read and written through windows (implicit zero padding, tiling offsets, clipping); the
// spectrum side in any strided layout (row-major, its two innermost dimensions transposed, or
// frequency-major [F, batch] as a per-frequency GEMM reads it). Semantics: csrc/fbfft/fbfft.h.
//
// Three kernel families:
// - register kernels, for nh = nw <= 64 (and 1-D 8..64 from 2^20 lines, 1-D 2 and 4): every line
//   FFT runs in one thread's registers (radix-2, twiddles as immediate operands). Two real rows
//   share one complex FFT (Hermitian split); the DC and Nyquist columns, both real, share one
//   column FFT, so an n x n image keeps n/2 threads busy in both passes. The row -> column
//   transpose goes once through shared memory.
// - lane kernels, for 1-D 8..256 and 128 x 128: a line over several lanes of a warp (M-point FFTs
//   in registers, the rest across lanes with shuffles), so small batches still fill the GPU and
//   128-point lines fit in registers.
// - a shared-memory kernel for non-square sizes (one image per block, radix-2 passes in shared
//   memory), correct and slower.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/storage.h"
#include "limits.h"

namespace fastlayers {
namespace fbfft {

// Real operands are stored as a Real (../common/storage.h: float32, float16, bfloat16); arithmetic
// is float32 throughout.

// Where spectrum element (image b, row i < nh, bin k <= nw/2) lives, in complex elements:
// b * image + i * row + k * bin.
struct Strides {
  int64_t image, row, bin;
};
inline Strides row_major(int nh, int nw) { return {int64_t{nh} * (nw / 2 + 1), nw / 2 + 1, 1}; }
inline Strides transposed(int nh, int nw) { return {int64_t{nh} * (nw / 2 + 1), 1, nh}; }
// [F, batch], F = nh * (nw/2 + 1) in row-major order: the layout of the per-frequency GEMMs.
inline Strides frequency_major(int nh, int nw, int64_t batch) {
  return {1, (nw / 2 + 1) * batch, batch};
}

// How the register kernels (2-D) and the 1-D lane kernels move a spectrum whose bins are adjacent
// (bin stride 1) between registers and global memory. Every mode computes the same transform.
enum class DirectIo : int {
  Never = 0,     // always through shared memory, as other layouts are
  Measured = 1,  // directly where measured faster, per size and direction (docs/fbfft.md)
  Always = 2,    // always directly
};

// Choices that change how a transform runs, never what it computes; the defaults are the
// measured ones.
struct Options {
  DirectIo direct_io = DirectIo::Measured;
};

// nh, nw: powers of two, nh >= 1, nw >= 2, nh * nw <= kMaxPoints.
// in [batch, h, w] (`type`), window at (oy, ox) of size nh x nw -> spectrum at `out`,
// unnormalised.
void rfft2(const void* in, Real type, float2* out, Strides out_strides, int64_t batch, int h, int w,
           int nh, int nw, int oy, int ox, cudaStream_t stream, const Options& options = {});

// One operand of rfft2_two: rfft2's arguments less those both share.
struct Rfft2Operand {
  const void* in;
  float2* out;
  Strides out_strides;
  int64_t batch;
  int h, w, oy, ox;
};

// rfft2 of two operands of one type and basis (a convolution's two), in one launch where one
// kernel serves both (the register kernels, frequency-major spectra), else one launch each: the
// same results as two rfft2 calls, one launch's host time less. The two may run at once, so
// neither spectrum may overlap the other operand's input or spectrum.
void rfft2_two(const Rfft2Operand& first, const Rfft2Operand& second, Real type, int nh, int nw,
               cudaStream_t stream, const Options& options = {});

// spectrum at `in` -> out [batch, out_h, out_w] (`type`): the inverse at (i + oy, j + ox) times
// `scale` (0 outside the nh x nw basis), plus bias[b % channels] when `bias` (of `type`) is given.
// The imaginary parts of the DC and Nyquist bins of the halved dimension are ignored.
// implied_conjugates (square bases 4..32, frequency-major spectra; throws otherwise): the rows
// below nh/2 of the DC and Nyquist columns are not read, but taken as the conjugates of the rows
// nh - i above them (what a real image's spectrum holds there).
void irfft2(const float2* in, Strides in_strides, void* out, Real type, int64_t batch, int nh,
            int nw, int out_h, int out_w, int oy, int ox, float scale, const void* bias,
            int64_t channels, cudaStream_t stream, bool implied_conjugates = false,
            const Options& options = {});

}  // namespace fbfft
}  // namespace fastlayers
