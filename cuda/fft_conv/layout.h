// Geometry and workspace layout of an FFT-convolution pass: plain arithmetic, no CUDA, so the
// host side of either build (with or without CUDA) can size a pass.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "../common/conv_pass.h"
#include "../fbfft/limits.h"

namespace fastlayers {
namespace fft_conv {

struct Shape {
  int64_t S, C, K;  // batch, input channels, output channels
  int64_t H, W;     // input image
  int64_t kh, kw;   // kernel
  int64_t ph, pw;   // zero padding
  int64_t nh, nw;   // Fourier basis
  int64_t oh() const { return H + 2 * ph - kh + 1; }
  int64_t ow() const { return W + 2 * pw - kw + 1; }
  int64_t freqs() const { return nh * (nw / 2 + 1); }
};

// The transform library of a pass. cuFFT: padded copies, cuFFT R2C/C2R, transposes around the
// GEMM. fbfft: the transforms read the operands through windows (implicit padding), write the
// frequency-major layout the GEMM reads, and the inverse clips, scales and adds the bias; float
// arithmetic only, power-of-two basis sides from 2 to kFbfftConvMax (fbfft's 2-D limit).
enum class Backend : int { CuFFT = 0, FbFFT = 1 };
constexpr int64_t kFbfftConvMax = fbfft::kMax2d;

inline bool fbfft_basis_ok(int64_t nh, int64_t nw) {
  return fbfft::pow2_in(nh, kFbfftConvMax) && fbfft::pow2_in(nw, kFbfftConvMax);
}

// Whether the fbfft transforms of a basis go through a row-major staging buffer and a tiled
// transpose to and from the frequency-major layout of the GEMMs. The kernels of 128 x 128 and of
// non-square bases hold one image per block, and frequency-major accesses from one image use 8
// bytes of every 32-byte sector (docs/fbfft.md). Square bases up to 64 and 1 x n lines hold
// several images per block, adjacent in the frequency-major layout, and write it directly.
inline bool fbfft_staged(int64_t nh, int64_t nw) {
  return nh == nw ? nh >= 128 : nh != 1;
}

// Input channels up to this many (a network's first layer: C = 3), on the fbfft backend: the
// spectra stay row-major and the per-frequency products run as one kernel over them
// (small_products.cu), instead of cuBLAS GEMMs with a reduction or an output side of C (and, on
// staged bases, transposes), which move the large spectrum at a fraction of the memory bandwidth.
constexpr int64_t kFbfftSmallChannels = 4;
inline bool fbfft_small_channels(const Shape& s) {
  return s.C >= 1 && s.C <= kFbfftSmallChannels;
}

// Staging applies on a staged basis unless the spectra stay row-major (few channels).
inline bool fbfft_uses_staging(const Shape& s) {
  return fbfft_staged(s.nh, s.nw) && !fbfft_small_channels(s);
}

// The conjugate skip. Square bases of even side from 4 x 4 to 32 x 32 where the products are
// GEMMs (either backend; on fbfft not with few channels): the GEMMs skip the rows below n/2 of the
// DC and Nyquist columns, whose spectra are the conjugates of the rows above (real operands), so
// their products are too. fbfft's inverse takes those rows as implied (not read); before cuFFT's
// C2R one small kernel fills them in from their mirror rows. That is 2 (n/2 - 1) of n (n/2 + 1)
// frequencies; at 64 x 64 (3% fewer) the GEMMs gain nothing and the skip is left out
// (docs/fbfft.md).
// The shape rule (the workspace keeps room for the pointers whenever it holds):
inline bool conjugate_skip_shape(const Shape& s, Backend backend) {
  return s.nh == s.nw && s.nh % 2 == 0 && s.nh >= 4 && s.nh <= 32 &&
         (backend == Backend::CuFFT || !fbfft_small_channels(s));
}
inline int64_t conjugate_free_freqs(const Shape& s) { return s.freqs() - 2 * (s.nh / 2 - 1); }
// and the time rule: the GEMM time saved (8 S C K flops per frequency, at these GEMMs' rates on
// an H200, 45 TFLOP/s in fp32 and 135 in tf32) must beat about 4 us, the cost of the small kernels
// the skip adds (measured with the cuFFT pipeline's pointer and fill kernels; docs/fbfft.md).
inline bool skips_conjugates(const Shape& s, Backend backend, bool tf32) {
  if (!conjugate_skip_shape(s, backend)) return false;
  const double skipped = static_cast<double>(s.freqs() - conjugate_free_freqs(s));
  const double saved_s = 8.0 * s.S * s.C * s.K * skipped / (tf32 ? 135e12 : 45e12);
  return saved_s > 4e-6;
}

// Whether a pass's GEMMs skip the conjugate rows. Every mode computes the same result.
enum class ConjugateSkip : int {
  Never = 0,
  WherePays = 1,  // skips_conjugates: the ops' choice
  Always = 2,     // wherever conjugate_skip_shape allows
};
inline bool skip_conjugates(ConjugateSkip mode, const Shape& s, Backend backend, bool tf32) {
  switch (mode) {
    case ConjugateSkip::Never: return false;
    case ConjugateSkip::Always: return conjugate_skip_shape(s, backend);
    default: return skips_conjugates(s, backend, tf32);
  }
}

struct Operand {
  int64_t n, h, w, offh, offw;  // [n, h, w] placed at (offh, offw) of the basis
};

struct Plan {
  Operand a, b;
  int64_t n_out, oh, ow, offh, offw;  // output [n_out, oh, ow] clipped from (offh, offw)
};

inline Plan plan_for(Pass pass, const Shape& s) {
  switch (pass) {
    case Pass::Forward:
      return {{s.S * s.C, s.H, s.W, s.ph, s.pw}, {s.K * s.C, s.kh, s.kw, 0, 0},
              s.S * s.K, s.oh(), s.ow(), 0, 0};
    case Pass::InputGrad:
      return {{s.S * s.K, s.oh(), s.ow(), 0, 0}, {s.K * s.C, s.kh, s.kw, 0, 0},
              s.S * s.C, s.H, s.W, s.ph, s.pw};
    case Pass::WeightGrad:
      return {{s.S * s.K, s.oh(), s.ow(), 0, 0}, {s.S * s.C, s.H, s.W, s.ph, s.pw},
              s.K * s.C, s.kh, s.kw, 0, 0};
  }
  throw std::runtime_error("fastlayers: unknown pass");
}

constexpr size_t kAlign = 256;
inline size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Byte offsets of the buffers in one workspace; cuFFT's work area starts at `work` and is not
// counted in `total` (its size comes from the plans, which need a device).
struct BufferLayout {
  size_t at, bt, big, scratch, work;  // [F, n_a], [F, n_b], padded operands / GEMM output /
                                      // inverse output, transposes, cuFFT work area
  size_t ptrs;  // skipped conjugates: the GEMMs' operand pointers (3 per frequency)
  size_t total() const { return work; }
};

inline BufferLayout buffer_layout(Pass pass, const Shape& s, int real_bytes,
                                  Backend backend = Backend::CuFFT) {
  const Plan p = plan_for(pass, s);
  const size_t F = static_cast<size_t>(s.freqs());
  const size_t cb = 2 * static_cast<size_t>(real_bytes);
  const size_t plane = static_cast<size_t>(s.nh * s.nw) * real_bytes;
  const size_t na = p.a.n, nb = p.b.n, no = p.n_out;
  BufferLayout L{};
  size_t off = 0;
  L.at = off; off += align_up(na * F * cb);
  L.bt = off; off += align_up(nb * F * cb);
  if (backend == Backend::FbFFT) {  // the two spectra, the GEMM output, staging if it applies
    L.big = off; off += align_up(no * F * cb);
    L.scratch = off;
    if (fbfft_uses_staging(s)) off += align_up(std::max(std::max(na, nb), no) * F * cb);
    L.ptrs = off;
    if (conjugate_skip_shape(s, backend)) off += align_up(3 * F * sizeof(void*));
    L.work = off;
    return L;
  }
  // `big` holds the padded operands before the GEMM, the GEMM output, then the inverse output.
  L.big = off; off += align_up(std::max(no * F * cb, std::max(na, nb) * plane));
  L.scratch = off; off += align_up(std::max(std::max(na, nb), no) * F * cb);
  L.ptrs = off;
  if (conjugate_skip_shape(s, backend)) off += align_up(3 * F * sizeof(void*));
  L.work = off;
  return L;
}

}  // namespace fft_conv
}  // namespace fastlayers
