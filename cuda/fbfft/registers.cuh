// The register kernels (fbfft.h): 2-D n x n up to 64 x 64, and 1-D lines (NH = 1), every line FFT
// in one thread's registers; kernels and launchers. Instantiated in
// instantiations/registers_*.cu.
#pragma once

#include <cuda_pipeline.h>

#include "io.cuh"
#include "launch.h"
#include "twiddles.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

// Register kernels. A block holds G images. Shared memory holds, one after the other in time
// (the same bytes):
//   the real rows, pair-interleaved: row r of the block (r = g * NH + i) at
//     (r / 2) * PS + (r % 2) * NW, PS = 4 (NW/2 | 1): 16-byte aligned rows, and an odd number of
//     16-byte units between the pairs, so the thread of a row pair reads and writes its rows in
//     float4 units without bank conflicts;
//   the half spectra, row-major per image: bin k of row i of image g at g * IS + i * BINS + k.
//     IS = NH * BINS + 1 (3 at 16 x 16) when NH > 1: the odd image stride keeps the frequency-
//     major moves (consecutive threads on consecutive images) free of bank conflicts and leaves
//     the row and column passes no more conflicted than a column-major layout would, while a
//     row-major spectrum in global memory moves as one span per image, without index arithmetic.

// T: threads per block of the 2-D kernels (a block holds T / (n/2) images); 1-D ignores it.
template <int NH, int NW, int T = 128>
struct Config {
  static constexpr int BINS = NW / 2 + 1;
  // image stride of the half spectra in shared memory (the comment above)
  static constexpr int IS = NH > 1 ? NH * BINS + (NH == 16 ? 3 : 1) : BINS;
  static constexpr int PER_IMAGE = NH > 1 ? (NH > NW ? NH : NW) / 2 : 0;
  // images per block: T threads for 2-D; 32 row pairs (one warp) for 1-D
  static constexpr int G = NH > 1 ? (T / PER_IMAGE > 1 ? T / PER_IMAGE : 1) : 64;
  // the register budget must allow 384 threads per SM at 64 points (the 64-point kernels would
  // take 210 registers and leave 256 threads; 384 hide more of the load latency)
  static constexpr int MIN_BLOCKS = NH == 64 ? (384 / T > 1 ? 384 / T : 1) : 1;
  static constexpr int THREADS = NH > 1 ? G * PER_IMAGE : G / 2;
  static constexpr int PAIRS = G * NH / 2;  // row pairs of the block
  static constexpr int PS = 4 * ((NW / 2) | 1);  // pair stride in floats
  static constexpr int VW = NW < 4 ? NW : 4;      // floats per vector access of a row
  static constexpr int REAL_FLOATS = PAIRS * PS;
  static constexpr int COMPLEX = G * IS;
  static constexpr size_t SMEM =
      (REAL_FLOATS * 4 > COMPLEX * 8 ? REAL_FLOATS * 4 : COMPLEX * 8);
};

// Whole 8 x 8 images in float32, 16-byte aligned: the forward's row-pair thread reads its two
// rows, 64 consecutive bytes, straight from global memory, skipping the pass through shared
// memory and a barrier (zeros past the batch). At 8 x 8 only: at 16 x 16 it is slower, and so is
// the inverse's mirror, row pairs written straight to global memory (docs/fbfft.md).
template <int NH, int NW>
constexpr bool rows_in_global() {
  return NH > 1 && NW == 8;
}
template <int NW>
__device__ __forceinline__ void load_row_pair_global(const float* __restrict__ src, bool live,
                                                     float2 (&z)[NW]) {
  const float4* p = reinterpret_cast<const float4*>(src);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  static_for<NW / 4>([&](auto V) {
    constexpr int v = decltype(V)::value;
    const float4 a = live ? __ldg(p + v) : zero, b = live ? __ldg(p + NW / 4 + v) : zero;
    z[4 * v] = make_float2(a.x, b.x);
    z[4 * v + 1] = make_float2(a.y, b.y);
    z[4 * v + 2] = make_float2(a.z, b.z);
    z[4 * v + 3] = make_float2(a.w, b.w);
  });
}

// The G images of a block (count floats from src: adjacent in memory) into shared memory as they
// are, 16 bytes per asynchronous copy: element e lands at stage[a + e], where a = the 4-byte
// offset of src within its 16-byte unit, so that units align in both memories. The units that
// straddle either end of the span copy only their floats inside it. Returns a.
template <int THREADS>
__device__ __forceinline__ int stage_span(float* stage, const float* __restrict__ src, int count) {
  const int a = static_cast<int>((reinterpret_cast<uintptr_t>(src) >> 2) & 3);
  const float* base = src - a;  // 16-byte aligned; read only inside [src, src + count)
  const int units = (a + count + 3) >> 2;
  for (int u = threadIdx.x; u < units; u += THREADS) {
    const int lo = 4 * u - a;  // first float of the unit, relative to src
    if (lo >= 0 && lo + 4 <= count) {
      __pipeline_memcpy_async(stage + 4 * u, base + 4 * u, 16);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (lo + k >= 0 && lo + k < count)
          __pipeline_memcpy_async(stage + 4 * u + k, src + lo + k, 4);
      }
    }
  }
  wait_async_copies();
  return a;
}

// A row pair of a staged padded window (row 1 at r, row 2 at r + w, both inside the input or
// dropped by live1 / live2): column j of the window is column j + ox of the rows, zero outside
// [0, w). The column offsets are compile-time after unrolling; one compare and one predicated
// shared load per element, no zero pass.
template <int NW>
__device__ __forceinline__ void load_row_pair_staged(const float* r, int w, int ox, bool live1,
                                                     bool live2, float2 (&z)[NW]) {
  const float* p = r + ox;
  const unsigned uw = static_cast<unsigned>(w);
  static_for<NW>([&](auto J) {
    constexpr int j = decltype(J)::value;
    const bool in = static_cast<unsigned>(j + ox) < uw;
    z[j] = make_float2(in && live1 ? p[j] : 0.f, in && live2 ? p[w + j] : 0.f);
  });
}

// Direct: the spectrum is row-major with bin stride 1 (checked by the launcher); the column pass
// writes it straight to global memory instead of through shared memory.
// Whole (8 x 8 only): the launcher found the input to be whole float32 images, 16-byte aligned;
// the kernel then holds that path alone, a third of the general kernel's instructions. Its code
// runs straight through, where the general kernel jumps past the other loads, and a kernel this
// short waits on instruction fetch at its start (docs/fbfft.md).
// One block's images: block `block` of the transform (rfft2_registers passes its blockIdx.x,
// rfft2_registers_two its index within the operand's blocks).
template <int NH, int NW, bool Direct, int T, bool Whole>
__device__ __forceinline__ void rfft2_block(const void* __restrict__ in, Real type,
                                            float2* __restrict__ out, Strides os, int64_t batch,
                                            int h, int w, int oy, int ox, bool vec4,
                                            unsigned block) {
  static_assert(!Whole || rows_in_global<NH, NW>(), "whole-image kernels are 8 x 8 only");
  using Cfg = Config<NH, NW, T>;
  constexpr int G = Cfg::G, BINS = Cfg::BINS, IS = Cfg::IS;
  constexpr int LOG_NW = ilog2(NW);
  extern __shared__ float4 smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x;
  const int64_t b0 = static_cast<int64_t>(block) * G;

  // 1. The window of G images into the pair-interleaved real rows (whole 8 x 8 images: each
  // row-pair thread reads its rows itself, in step 2).
  constexpr bool whole = Whole;
  // An input wholly inside the window (implicit zero padding), rows not 16-byte aligned, up to
  // 32 x 32: the block's images are staged as they lie in memory, 16 bytes per copy, and each
  // row-pair thread picks its rows out, instead of load_padded's zero pass and 4-byte copies:
  // faster up to 32 x 32; at 64 x 64 load_padded stays (docs/fbfft.md).
  constexpr bool kStageable = NH > 1 && NW <= 32;
  const bool staged = !Whole && kStageable && type == Real::F32 && !vec4 && oy <= 0 &&
                      ox <= 0 && h - oy <= NH && w - ox <= NW;
  const int plane = h * w;
  const int live_images = static_cast<int>(batch - b0 < G ? batch - b0 : G);
  int stage_at = 0;
  if (staged) {
    stage_at = stage_span<Cfg::THREADS>(rows, static_cast<const float*>(in) + b0 * plane,
                                        live_images * plane);
    __syncthreads();
  } else if (!whole) {
    load_window<NH, NW, Cfg::THREADS, G>(rows, in, type, b0, batch, h, w, oy, ox, vec4);
    __syncthreads();
  }

  // 2. Rows: one complex FFT per row pair (row 2p real part, row 2p+1 imaginary part).
  float2 z[NW];
  const bool row_thread = tid < Cfg::PAIRS;
  if (row_thread) {
    if (whole) {
      load_row_pair_global<NW>(static_cast<const float*>(in) + (b0 * NH + 2 * tid) * NW,
                               b0 + (2 * tid) / NH < batch, z);
    } else if (staged) {
      const int g = (2 * tid) / NH, si = (2 * tid) % NH + oy;  // row 1 of the pair in the input
      const bool live = g < live_images;
      load_row_pair_staged<NW>(rows + stage_at + g * plane + si * w, w, ox,
                               live && si >= 0 && si < h, live && si + 1 >= 0 && si + 1 < h, z);
    } else {
      load_row_pair<NW, Cfg::VW, NW>(rows + tid * Cfg::PS, z);
    }
    fft_registers<NW, false>(z);
  }
  // Whole 8 x 8 images into a contiguous, 16-byte aligned row-major spectrum: every step after
  // the load touches only the images of the thread's own warp (row pairs, columns and the
  // warp's span of the output), so warps synchronise alone and run through the steps
  // independently.
  constexpr int F = NH * BINS;
  const bool warp_local =
      whole && !Direct && Cfg::PAIRS == Cfg::THREADS &&
      G * (NW / 2) == Cfg::THREADS && os.bin == 1 && os.row == BINS && os.image == F &&
      reinterpret_cast<uintptr_t>(out + b0 * F) % 16 == 0;
  if (!warp_local) __syncthreads();  // the spectra overwrite the real rows
  if (row_thread) {
    const int r0 = 2 * tid, g0 = r0 / NH, i0 = r0 % NH;
    const int r1 = r0 + 1, g1 = r1 / NH, i1 = r1 % NH;
    static_for<BINS>([&](auto K) {
      constexpr int k = decltype(K)::value;
      // X0[k] = (Z[k] + conj(Z[-k])) / 2, X1[k] = (Z[k] - conj(Z[-k])) / 2i
      const float2 a = z[bit_reverse(k, LOG_NW)];
      const float2 m = z[bit_reverse((NW - k) & (NW - 1), LOG_NW)];
      if constexpr (NH > 1 && k == 0) {
        // 2-D: the DC and Nyquist bins (both real) share bin 0's slot, DC in the real part,
        // Nyquist in the imaginary part: the column pass takes them as one complex column.
        const float2 n = z[bit_reverse(NW / 2, LOG_NW)];
        cols[g0 * IS + i0 * BINS] = make_float2(a.x, n.x);
        cols[g1 * IS + i1 * BINS] = make_float2(a.y, n.y);
      } else if constexpr (NH == 1 || k != NW / 2) {
        cols[g0 * IS + i0 * BINS + k] = make_float2(0.5f * (a.x + m.x), 0.5f * (a.y - m.y));
        cols[g1 * IS + i1 * BINS + k] = make_float2(0.5f * (a.y + m.y), 0.5f * (m.x - a.x));
      }
    });
  }
  if (warp_local) {
    __syncwarp();
  } else {
    __syncthreads();
  }

  if constexpr (NH == 1) {
    // 1-D: the row spectra are the result.
    spectrum_io<NH, NW, Cfg::THREADS, G, true, IS>(cols, out, os, b0, batch);
  } else {
    // 3. Columns: thread q of an image transforms column q; thread 0 the DC and Nyquist columns
    // together (slot 0 holds them as one complex column), in the same instructions.
    constexpr int HALF = NW / 2;
    constexpr int LOG_NH = ilog2(NH);
    constexpr bool direct = Direct;
    if (tid < G * HALF) {
      const int g = tid / HALF, q = tid - g * HALF;
      float2 c[NH];
      float2* col = cols + g * IS + q;
      static_for<NH>([&](auto I) {
        constexpr int i = decltype(I)::value;
        c[i] = col[i * BINS];
      });
      fft_registers<NH, false>(c);
      // Natural order; DC and Nyquist split apart. Bins adjacent in memory (row-major: bin
      // stride 1): straight to global memory, consecutive threads on consecutive bins; else back
      // into the thread's own column(s) for one coalesced pass over the block.
      float2* nyq = cols + g * IS + HALF;
      if constexpr (direct) {
        // Every thread stores its own column (thread 0 the DC column) in the same instructions;
        // the Nyquist column goes through shared memory and out over all the image's threads.
        const bool live = b0 + g < batch;
        float2* dst = out + (live ? b0 + g : 0) * os.image;
        float2* p = dst + q;
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          float2 v = c[bit_reverse(i, LOG_NH)];
          if (q == 0) {
            const float2 m = c[bit_reverse((NH - i) & (NH - 1), LOG_NH)];
            nyq[i * BINS] = make_float2(0.5f * (v.y + m.y), 0.5f * (m.x - v.x));
            v = make_float2(0.5f * (v.x + m.x), 0.5f * (v.y - m.y));
          }
          if (live) *p = v;
          p += os.row;
        });
        __syncwarp();  // an image's HALF threads are in one warp
        if (live) {
          for (int i = q; i < NH; i += HALF) dst[i * os.row + HALF] = nyq[i * BINS];
        }
      } else if (q != 0) {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          col[i * BINS] = c[bit_reverse(i, LOG_NH)];
        });
      } else {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          const float2 a = c[bit_reverse(i, LOG_NH)];
          const float2 m = c[bit_reverse((NH - i) & (NH - 1), LOG_NH)];
          col[i * BINS] = make_float2(0.5f * (a.x + m.x), 0.5f * (a.y - m.y));
          nyq[i * BINS] = make_float2(0.5f * (a.y + m.y), 0.5f * (m.x - a.x));
        });
      }
    }
    if constexpr (!direct) {
      if (warp_local) {
        // the warp's images [g0, g0 + 32 / HALF), 16 bytes (two frequencies of one image) a lane
        __syncwarp();
        constexpr int IMAGES = 32 / HALF;
        const int lane = tid & 31, g0 = (tid >> 5) * IMAGES;
        const int64_t left = batch - b0 - g0;
        const int live = static_cast<int>(left < 0 ? 0 : left < IMAGES ? left : IMAGES);
        float4* dst = reinterpret_cast<float4*>(out + (b0 + g0) * F);
        for (int u = lane; u < live * (F / 2); u += 32) {
          const int g = (2 * u) / F;
          const float2* sh = cols + (g0 + g) * IS + 2 * u - g * F;
          const float2 v0 = sh[0], v1 = sh[1];
          dst[u] = make_float4(v0.x, v0.y, v1.x, v1.y);
        }
      } else {
        __syncthreads();
        spectrum_io<NH, NW, Cfg::THREADS, G, true, IS>(cols, out, os, b0, batch);
      }
    }
  }
}

template <int NH, int NW, bool Direct, int T, bool Whole = false>
__global__ void __launch_bounds__(Config<NH, NW, T>::THREADS, Config<NH, NW, T>::MIN_BLOCKS)
    rfft2_registers(const void* __restrict__ in, Real type, float2* __restrict__ out, Strides os,
                    int64_t batch, int h, int w, int oy, int ox, bool vec4) {
  rfft2_block<NH, NW, Direct, T, Whole>(in, type, out, os, batch, h, w, oy, ox, vec4, blockIdx.x);
}

// One operand of rfft2_registers_two, with its window's vec4 (vec4_window).
struct RegisterJob {
  Rfft2Operand op;
  bool vec4;
};

// Two transforms of one size in one launch (a convolution's two operands, fbfft.h's rfft2_two):
// blocks [0, first_blocks) transform `a`, the rest `b`. The frequency-major layout only (T = 128,
// spectra written through shared memory), the one the convolution's GEMMs read. The body is
// inlined once per operand, so each reads its arguments as the one-operand kernel does and the
// kernel keeps that kernel's registers (selecting one job's arguments first keeps both live).
template <int NH, int NW>
__global__ void __launch_bounds__(Config<NH, NW, 128>::THREADS, Config<NH, NW, 128>::MIN_BLOCKS)
    rfft2_registers_two(RegisterJob a, unsigned first_blocks, RegisterJob b, Real type) {
  const Rfft2Operand &x = a.op, &y = b.op;
  if (blockIdx.x < first_blocks)
    rfft2_block<NH, NW, false, 128, false>(x.in, type, x.out, x.out_strides, x.batch, x.h, x.w,
                                           x.oy, x.ox, a.vec4, blockIdx.x);
  else
    rfft2_block<NH, NW, false, 128, false>(y.in, type, y.out, y.out_strides, y.batch, y.h, y.w,
                                           y.oy, y.ox, b.vec4, blockIdx.x - first_blocks);
}

// Column pass of the inverse, thread 0 of an image: from the DC column (d) and the Nyquist column
// (n) at rows i and -i, their Hermitian parts H = (X[i] + conj(X[-i])) / 2 combined as one
// complex column DC + i Nyquist, at i and (its conjugate) at -i.
__device__ __forceinline__ void hermitian_pair(float2 di, float2 dm, float2 ni, float2 nm,
                                               float2* ci, float2* cm) {
  const float2 hd = make_float2(0.5f * (di.x + dm.x), 0.5f * (di.y - dm.y));
  const float2 hn = make_float2(0.5f * (ni.x + nm.x), 0.5f * (ni.y - nm.y));
  *ci = make_float2(hd.x - hn.y, hd.y + hn.x);
  *cm = make_float2(hd.x + hn.y, hn.x - hd.y);
}

// The same with the DC column in c (overwritten) and the Nyquist column in shared memory (row i
// at nyq[i * STRIDE]).
template <int NH, int STRIDE>
__device__ __forceinline__ void hermitian_dc_nyquist(float2 (&c)[NH], const float2* nyq) {
  static_for<NH / 2 + 1>([&](auto I) {
    constexpr int i = decltype(I)::value;
    constexpr int m = (NH - i) & (NH - 1);
    hermitian_pair(c[i], c[m], nyq[i * STRIDE], nyq[m * STRIDE], &c[i], &c[m]);
  });
}

// Direct: the spectrum is row-major with bin stride 1 (checked by the launcher); the column pass
// reads it straight from global memory instead of through shared memory.
template <int NH, int NW, bool Direct, int T>
__global__ void __launch_bounds__(Config<NH, NW, T>::THREADS, Config<NH, NW, T>::MIN_BLOCKS)
    irfft2_registers(const float2* __restrict__ in, Strides is, void* __restrict__ out, Real type,
                     int64_t batch, int out_h, int out_w, int oy, int ox, float scale,
                     const void* __restrict__ bias, int64_t channels, bool vec4, bool implied) {
  using Cfg = Config<NH, NW, T>;
  constexpr int G = Cfg::G, BINS = Cfg::BINS, IS = Cfg::IS, HALF = NW / 2;
  constexpr int LOG_NW = ilog2(NW);
  extern __shared__ float4 smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * G;

  // 1. The half spectra: bins adjacent in memory (row-major: bin stride 1): the column pass
  // reads them straight from global memory, consecutive threads on consecutive bins; else into
  // shared memory first, in one coalesced asynchronous pass over the block.
  constexpr bool direct = Direct && NH > 1;
  if constexpr (!direct)
    spectrum_io<NH, NW, Cfg::THREADS, G, false, IS>(cols, in, is, b0, batch, implied);
  __syncthreads();
  if constexpr (NH > 1) {
    // Columns, inverse. Thread 0 of an image takes the Hermitian parts of the DC and Nyquist
    // columns, whose inverses are real, as one complex column (DC + i Nyquist).
    constexpr int LOG_NH = ilog2(NH);
    if (tid < G * HALF) {
      const int g = tid / HALF, q = tid - g * HALF;
      float2* col = cols + g * IS + q;
      const bool live = b0 + g < batch;
      const float2* src = in + (live ? b0 + g : 0) * is.image;
      const float2* nyq = cols + g * IS + HALF;
      float2 c[NH];
      if constexpr (direct) {
        // Every thread loads its own column (thread 0 the DC column) in the same instructions,
        // zeros past the batch; the Nyquist column comes in over all the image's threads into
        // shared memory, for thread 0.
        const float2 zero = make_float2(0.f, 0.f);
        const float2* p = src + q;
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          c[i] = live ? __ldg(p) : zero;
          p += is.row;
        });
        float2* nyq_in = cols + g * IS + HALF;
        for (int i = q; i < NH; i += HALF)
          nyq_in[i * BINS] = live ? __ldg(src + i * is.row + HALF) : zero;
        __syncwarp();  // an image's HALF threads are in one warp
        if (q == 0) {
          hermitian_dc_nyquist<NH, BINS>(c, nyq_in);
        }
      } else if (q != 0) {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          c[i] = col[i * BINS];
        });
      } else {
        // the DC column from shared memory, as the direct path has it in registers; implied:
        // rows below NH/2 as the conjugates of their mirrors (not loaded)
        static_for<NH / 2 + 1>([&](auto I) {
          constexpr int i = decltype(I)::value;
          constexpr int m = (NH - i) & (NH - 1);
          const float2 di = col[i * BINS], ni = nyq[i * BINS];
          const float2 dm = implied ? make_float2(di.x, -di.y) : col[m * BINS];
          const float2 nm = implied ? make_float2(ni.x, -ni.y) : nyq[m * BINS];
          hermitian_pair(di, dm, ni, nm, &c[i], &c[m]);
        });
      }
      fft_registers<NH, true>(c);
      if (q != 0) {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          col[i * BINS] = c[bit_reverse(i, LOG_NH)];
        });
      } else {
        float2* nyq_w = cols + g * IS + HALF;
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          const float2 v = c[bit_reverse(i, LOG_NH)];
          col[i * BINS] = make_float2(v.x, 0.f);
          nyq_w[i * BINS] = make_float2(v.y, 0.f);
        });
      }
    }
  }
  __syncthreads();

  // 2. Rows, inverse: two half spectra A, B (rows 2p, 2p+1) as one Hermitian-extended complex
  // sequence A + iB; the real part of its inverse is row 2p, the imaginary part row 2p+1.
  float2 z[NW];
  const bool row_thread = tid < Cfg::PAIRS;
  if (row_thread) {
    const int r0 = 2 * tid, g0 = r0 / NH, i0 = r0 % NH;
    const int r1 = r0 + 1, g1 = r1 / NH, i1 = r1 % NH;
    static_for<HALF + 1>([&](auto K) {
      constexpr int k = decltype(K)::value;
      float2 a = cols[g0 * IS + i0 * BINS + k];
      float2 bb = cols[g1 * IS + i1 * BINS + k];
      if constexpr (k == 0 || k == HALF) {
        a.y = 0.f;
        bb.y = 0.f;
      }
      z[k] = make_float2(a.x - bb.y, a.y + bb.x);
      if constexpr (k != 0 && k != HALF) z[NW - k] = make_float2(a.x + bb.y, bb.x - a.y);
    });
    fft_registers<NW, true>(z);
  }
  __syncthreads();  // the real rows overwrite the spectra
  if (row_thread) store_row_pair_bitrev<NW, Cfg::VW, NW>(rows + tid * Cfg::PS, z);
  __syncthreads();

  // 3. The clipped window, scaled, plus bias, in the storage type (coalesced).
  const int live = static_cast<int>(batch - b0 < G ? batch - b0 : G);
  if constexpr (NW >= 4) {
    if (type == Real::F32 && vec4 && bias == nullptr && out_h == NH && out_w == NW && oy == 0 &&
        ox == 0) {
      store_full<NH, NW, Cfg::THREADS, G>(rows, static_cast<float*>(out), b0, live, scale);
      return;
    }
  }
  store_window_as<NH, NW, Cfg::THREADS>(type, rows, out, b0, live, out_h, out_w, oy, ox, scale,
                                        bias, channels, vec4);
}

// Threads per block of the 2-D register kernels (T / (n/2) images per block) for a row-major (or
// transposed) spectrum: 64 at 8 x 8, one warp from 16 x 16 except the 64 x 64 inverse (128); 128
// below 8 x 8 and for 1-D. A frequency-major spectrum (images adjacent in memory: the
// convolution) takes 128, whose 4 or more images per block fill 32-byte sectors. Measured choices:
// docs/fbfft.md.
template <int NH, bool Inverse>
constexpr int row_major_threads() {
  return NH < 8 ? 128 : NH == 8 ? 64 : (Inverse && NH == 64) ? 128 : 32;
}

template <int NH, int NW, int T>
void rfft2_registers_launch(const ForwardArgs& a, bool vec4, bool direct) {
  using Cfg = Config<NH, NW, T>;
  if constexpr (rows_in_global<NH, NW>()) {
    if (a.type == Real::F32 && vec4 && a.h == NH && a.w == NW && a.oy == 0 && a.ox == 0) {
      launch<Cfg>(direct ? rfft2_registers<NH, NW, true, T, true>
                         : rfft2_registers<NH, NW, false, T, true>,
                  a.batch, Cfg::G, a.stream, a.in, a.type, a.out, a.os, a.batch, a.h, a.w, a.oy,
                  a.ox, vec4);
      return;
    }
  }
  launch<Cfg>(direct ? rfft2_registers<NH, NW, true, T> : rfft2_registers<NH, NW, false, T>,
              a.batch, Cfg::G, a.stream, a.in, a.type, a.out, a.os, a.batch, a.h, a.w, a.oy, a.ox,
              vec4);
}

template <int NH, int NW>
void rfft2_registers_run(const ForwardArgs& a) {
  const bool vec4 = vec4_window(a.in, a.type, NW, a.w, a.ox);
  // Direct stores pay off at 64 x 64 where the window is read element by element (a padded
  // input); elsewhere the staged stores, one 16-byte span per block, are faster (docs/fbfft.md).
  const bool direct = NH > 1 && use_direct(a.direct_io, a.os.bin == 1, NH >= 64 && !vec4);
  if (a.os.image == 1) return rfft2_registers_launch<NH, NW, 128>(a, vec4, direct);
  rfft2_registers_launch<NH, NW, row_major_threads<NH, false>()>(a, vec4, direct);
}

// One launch for both where each alone would take rfft2_registers<NH, NW, false, 128, false> (a
// frequency-major spectrum, stores through shared memory, not a whole 8 x 8 image), the kernel
// rfft2_registers_two runs per operand; false where not (nothing launched).
template <int NH, int NW>
bool rfft2_registers_run_two(const ForwardArgs& a, const ForwardArgs& b) {
  using Cfg = Config<NH, NW, 128>;
  auto job = [](const ForwardArgs& x, RegisterJob* j) {
    const bool vec4 = vec4_window(x.in, x.type, NW, x.w, x.ox);
    const bool direct = NH > 1 && use_direct(x.direct_io, x.os.bin == 1, NH >= 64 && !vec4);
    const bool whole = rows_in_global<NH, NW>() && x.type == Real::F32 && vec4 && x.h == NH &&
                       x.w == NW && x.oy == 0 && x.ox == 0;
    *j = RegisterJob{{x.in, x.out, x.os, x.batch, x.h, x.w, x.oy, x.ox}, vec4};
    return NH > 1 && x.os.image == 1 && !direct && !whole;
  };
  RegisterJob ja, jb;
  if (!job(a, &ja) || !job(b, &jb)) return false;
  const unsigned fa = grid_for(a.batch, Cfg::G), fb = grid_for(b.batch, Cfg::G);
  if (static_cast<uint64_t>(fa) + fb > 0x7fffffffu) return false;
  allow_shared_memory(rfft2_registers_two<NH, NW>, Cfg::SMEM);
  rfft2_registers_two<NH, NW><<<fa + fb, Cfg::THREADS, Cfg::SMEM, a.stream>>>(ja, fa, jb, a.type);
  FL_LAUNCH_CHECK();
  return true;
}

template <int NH, int NW, int T>
void irfft2_registers_launch(const InverseArgs& a) {
  using Cfg = Config<NH, NW, T>;
  // Direct loads pay off at 16 x 16, and at 8 x 8 from 2^17 images; staged loads move a
  // contiguous spectrum as one span, faster at 32 x 32 and 64 x 64, where direct loads also cost
  // registers (docs/fbfft.md).
  const bool measured = NH == 16 || (NH == 8 && a.batch >= (int64_t{1} << 17));
  const bool direct = NH > 1 && !a.implied && use_direct(a.direct_io, a.is.bin == 1, measured);
  launch<Cfg>(direct ? irfft2_registers<NH, NW, true, T> : irfft2_registers<NH, NW, false, T>,
              a.batch, Cfg::G, a.stream, a.in, a.is, a.out, a.type, a.batch, a.out_h, a.out_w,
              a.oy, a.ox, a.scale, a.bias, a.channels, vec4_output(a.out, a.type, a.out_w, a.ox),
              a.implied);
}

template <int NH, int NW>
void irfft2_registers_run(const InverseArgs& a) {
  if (a.is.image == 1) return irfft2_registers_launch<NH, NW, 128>(a);
  irfft2_registers_launch<NH, NW, row_major_threads<NH, true>()>(a);
}

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
