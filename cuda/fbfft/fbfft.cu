#include "fbfft.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <type_traits>
#include <utility>
#include <stdexcept>
#include <string>

#include "../common/check.h"
#include "../common/complex.h"
#include "../common/storage.h"

namespace fastlayers {
namespace fbfft {
namespace {

// ---------------------------------------------------------------------------------------------
// Twiddles: w[m] = exp(-2 pi i m / 256), m < SIZE, computed at compile time in double.

template <int SIZE>
struct TwiddleTable {
  float2 w[SIZE];
};

constexpr double kPi = 3.141592653589793238462643383279502884;

constexpr double series_sin(double x) {
  double term = x, sum = x;
  for (int k = 1; k < 40; ++k) {
    term *= -x * x / ((2.0 * k) * (2.0 * k + 1.0));
    sum += term;
  }
  return sum;
}

constexpr double series_cos(double x) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 40; ++k) {
    term *= -x * x / ((2.0 * k - 1.0) * (2.0 * k));
    sum += term;
  }
  return sum;
}

template <int SIZE>
constexpr TwiddleTable<SIZE> make_twiddles() {
  TwiddleTable<SIZE> t{};
  for (int m = 0; m < SIZE; ++m) {
    const double a = 2.0 * kPi * m / 256.0;
    t.w[m].x = static_cast<float>(series_cos(a));
    t.w[m].y = static_cast<float>(-series_sin(a));
  }
  return t;
}

__host__ __device__ constexpr int bit_reverse(int v, int bits) {
  int r = 0;
  for (int b = 0; b < bits; ++b) r = (r << 1) | ((v >> b) & 1);
  return r;
}

__host__ __device__ constexpr int ilog2(int n) { return n <= 1 ? 0 : 1 + ilog2(n / 2); }

// f(std::integral_constant<int, I>) for I = 0..N-1, expanded at compile time, so register arrays
// are only ever indexed by constants (a loop the compiler declines to unroll would move them to
// local memory).
template <typename F, int... Is>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, Is...>) {
  (f(std::integral_constant<int, Is>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl(f, std::make_integer_sequence<int, N>{});
}

// Twiddles w[m] = exp(-2 pi i m / 256), m < 128, as scale * (1 + i ratio) where |cos| >= |sin|
// (m <= 32 or m >= 96) and scale * (ratio + i) elsewhere (|ratio| <= 1 both ways): a twiddled
// butterfly a +- b w then costs six fused multiply-adds (two for b (1 + i ratio), four for
// a +- scale * that) instead of a complex product and four additions.
struct ScaledTwiddle {
  float scale, ratio;
};
__host__ __device__ constexpr bool scaled_by_cos(int m) { return m <= 32 || m >= 96; }

constexpr ScaledTwiddle scaled_twiddle(int m) {
  const double a = 2.0 * kPi * m / 256.0, c = series_cos(a), s = -series_sin(a);
  return ScaledTwiddle{static_cast<float>(scaled_by_cos(m) ? c : s),
                       static_cast<float>(scaled_by_cos(m) ? s / c : c / s)};
}
// Each twiddle is a compile-time constant of the instruction that uses it (an immediate
// operand), not a constant-bank load: in short kernels every SM's first warps would otherwise
// wait on constant-cache misses, and they wait together (NOTES, fbfft v9).
template <int M>
struct Scaled {
  static constexpr ScaledTwiddle value = scaled_twiddle(M);
};

// One radix-2 decimation-in-time stage of half-span H over N registers, then the stages below
// it. Natural order in, bit-reversed order out: group g of 2H registers takes the single twiddle
// w_{2G}^{bit_reverse(g)} (G = N / 2H groups), so the first two stages are multiplication-free.
template <int N, int H, bool Inverse>
__device__ __forceinline__ void dit_stages(float2 (&x)[N]) {
  if constexpr (H >= 1) {
    constexpr int GROUPS = N / (2 * H), LOG_GROUPS = ilog2(GROUPS);
    static_for<N / 2>([&](auto T) {
      constexpr int t = decltype(T)::value;
      constexpr int g = t / H, lo = g * 2 * H + t % H, hi = lo + H;
      constexpr int m = bit_reverse(g, LOG_GROUPS) * (128 / GROUPS);
      const float2 a = x[lo], b = x[hi];
      if constexpr (m == 0 || m == 64) {
        // w = 1, or -i (forward) / +i (inverse)
        const float2 t2 = m == 0 ? b : (Inverse ? make_float2(-b.y, b.x) : make_float2(b.y, -b.x));
        x[lo] = make_float2(a.x + t2.x, a.y + t2.y);
        x[hi] = make_float2(a.x - t2.x, a.y - t2.y);
      } else {
        constexpr float sc = Scaled<m>::value.scale, r = Scaled<m>::value.ratio;
        float2 u;
        if constexpr (scaled_by_cos(m)) {  // w = sc (1 + i r); the inverse's conj: sc (1 - i r)
          u = Inverse ? make_float2(fmaf(r, b.y, b.x), fmaf(-r, b.x, b.y))
                      : make_float2(fmaf(-r, b.y, b.x), fmaf(r, b.x, b.y));
        } else {  // w = sc (r + i); the inverse's conj: sc (r - i)
          u = Inverse ? make_float2(fmaf(r, b.x, b.y), fmaf(r, b.y, -b.x))
                      : make_float2(fmaf(r, b.x, -b.y), fmaf(r, b.y, b.x));
        }
        x[lo] = make_float2(fmaf(sc, u.x, a.x), fmaf(sc, u.y, a.y));
        x[hi] = make_float2(fmaf(-sc, u.x, a.x), fmaf(-sc, u.y, a.y));
      }
    });
    dit_stages<N, H / 2, Inverse>(x);
  }
}

// In-register radix-2 FFT of N points (N <= 256): natural order in, bit-reversed order out
// (x[bit_reverse(k)] = X[k]). Every index is a compile-time constant after unrolling, so x stays
// in registers and each twiddle is an immediate operand.
template <int N, bool Inverse>
__device__ __forceinline__ void fft_registers(float2 (&x)[N]) {
  if constexpr (N >= 2) dit_stages<N, N / 2, Inverse>(x);
}

// ---------------------------------------------------------------------------------------------
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

template <int NW>
__device__ __forceinline__ int real_row_offset(int r) {
  return (r >> 1) * (4 * ((NW / 2) | 1)) + (r & 1) * NW;
}

// VW consecutive floats of shared memory (VW = 2 or 4, aligned).
template <int VW>
__device__ __forceinline__ void load_vec(const float* p, float (&v)[VW]) {
  if constexpr (VW == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
  } else {
    const float2 t = *reinterpret_cast<const float2*>(p);
    v[0] = t.x; v[1] = t.y;
  }
}
template <int VW>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[VW]) {
  if constexpr (VW == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  }
}

// Two real rows (at r and r + ROW2, 16-byte aligned) <-> K complex values: row 1 the real parts,
// row 2 the imaginary parts, VW floats per shared-memory access. The store takes z in bit-reversed
// order (z[bit_reverse(j)] is element j), as fft_registers leaves it.
template <int K, int VW, int ROW2>
__device__ __forceinline__ void load_row_pair(const float* r, float2 (&z)[K]) {
  static_for<K / VW>([&](auto V) {
    constexpr int v = decltype(V)::value;
    float a[VW], b[VW];
    load_vec<VW>(r + v * VW, a);
    load_vec<VW>(r + ROW2 + v * VW, b);
    static_for<VW>([&](auto U) {
      constexpr int u = decltype(U)::value;
      z[v * VW + u] = make_float2(a[u], b[u]);
    });
  });
}
template <int K, int VW, int ROW2>
__device__ __forceinline__ void store_row_pair_bitrev(float* r, const float2 (&z)[K]) {
  static_for<K / VW>([&](auto V) {
    constexpr int v = decltype(V)::value;
    float a[VW], b[VW];
    static_for<VW>([&](auto U) {
      constexpr int u = decltype(U)::value;
      const float2 t = z[bit_reverse(v * VW + u, ilog2(K))];
      a[u] = t.x;
      b[u] = t.y;
    });
    store_vec<VW>(r + v * VW, a);
    store_vec<VW>(r + ROW2 + v * VW, b);
  });
}

// Whole 8 x 8 images in float32, 16-byte aligned: the forward's row-pair thread reads its two
// rows, 64 consecutive bytes, straight from global memory, skipping the pass through shared
// memory and a barrier (zeros past the batch). Measured, H200, B = 16384: 1.94x cuFFT against
// 1.78x; at 16 x 16 it measured slower (1.85x against 2.10x), and so did the inverse's mirror,
// row pairs written straight to global memory (8 x 8 2.39x against 3.07x).
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

// Moves the G half spectra of a block between shared memory and global memory in any strided
// layout, coalesced: consecutive threads take consecutive images when images are adjacent in
// memory (the frequency-major layout of a convolution), else consecutive frequencies of one
// image. Store: shared -> global; load: global -> shared with asynchronous copies, zeros past
// the batch. Shared layout: IS > 0: row-major per image, image g at g * IS (the register
// kernels); IS = 0: column k of image g at (g * BINS + k) * CS, row i of a column at i + i / PAD
// when PAD is given (the lane kernels' padded columns), else at i.
// implied (load, frequency-major, NH <= 32 only): the rows below NH/2 of the DC and Nyquist
// columns are not read (conjugates of the rows above, which the caller uses instead: the
// convolution's GEMMs skip them); zeros land there.
template <int NH, int NW, int THREADS, int G, bool Store, int IS, int CS = 1, int PAD = 0>
__device__ __forceinline__ void spectrum_io(
    float2* cols, std::conditional_t<Store, float2*, const float2*> spectrum, const Strides st,
    int64_t b0, int64_t batch, bool implied = false) {
  constexpr int BINS = NW / 2 + 1, F = NH * BINS;
  const bool images_inner = st.image == 1;
  // Row-major and frequency-major layouts place frequency f = i * BINS + k at f * bin.
  const bool f_linear = st.row == BINS * st.bin;
  if constexpr (IS > 0) {
    // Row-major and contiguous in global memory (bin stride 1, image stride F), row-major in
    // shared memory (image g at g * IS): the block's spectra are one span. Other row-major
    // layouts take the general loop below, which for IS > 0 walks the same order.
    if (f_linear && st.bin == 1 && st.image == F) {
      const int live = static_cast<int>(batch - b0 < G ? batch - b0 : G);
      // The block's spectra are one span: element e of the span at e + (e / F) * (IS - F) in
      // shared memory; stores 16 bytes (two frequencies of one image: F is even) at a time
      // where the span is 16-byte aligned. (Folding this case into the loop below, with the
      // image stride a runtime 32-bit factor, measured slower: C2R 64x64 3.19x against 3.51x,
      // 8x8 2.71x against 2.97-3.11x; the span's offsets are constants after unrolling.)
      auto span = spectrum + b0 * F;
      if constexpr (Store && F % 2 == 0) {
        if (reinterpret_cast<uintptr_t>(span) % 16 == 0) {
          float4* dst = reinterpret_cast<float4*>(span);
          for (int u = threadIdx.x; u < live * (F / 2); u += THREADS) {
            const int g = G == 1 ? 0 : u / (F / 2);
            const float2* sh = cols + 2 * u + g * (IS - F);
            const float2 v0 = sh[0], v1 = sh[1];
            dst[u] = make_float4(v0.x, v0.y, v1.x, v1.y);
          }
          return;
        }
      }
      for (int e = threadIdx.x; e < G * F; e += THREADS) {
        const int g = G == 1 ? 0 : e / F;
        float2* sh = cols + e + g * (IS - F);
        if constexpr (Store) {
          if (g < live) span[e] = *sh;
        } else {
          __pipeline_memcpy_async(sh, g < live ? span + e : spectrum, 8, g < live ? 0 : 8);
        }
      }
      if constexpr (!Store) {
        __pipeline_commit();
        __pipeline_wait_prior(0);
      }
      return;
    }
  }
  if constexpr (IS > 0 && THREADS % G == 0 && (Store || NH < 64)) {
    // Frequency-major (images adjacent, frequency f at f * bin): a thread keeps one image
    // (g = tid mod G) and steps THREADS / G frequencies at a time, its offsets advanced by
    // constants; consecutive threads still take consecutive images. Against the general loop
    // below (H200, the Table 4 convolutions' transforms): forward 64x64 124 -> 116 us, 32x32
    // 55 -> 46 us, 16x16 15.0 -> 12.8 us, L5's 3x3 weights 84 -> 71 us; inverse 32x32 53 -> 51
    // us, 16x16 19.8 -> 17.0 us; the 64x64 inverse keeps the loop (154 against 156 us). Pairs of
    // images in 16-byte stores: 64x64 forward 2% faster, 32x32 2% slower; not taken.
    if (images_inner && f_linear) {
      constexpr int STEP = THREADS / G;
      const int g = threadIdx.x % G;
      const bool live = b0 + g < batch;
      const int64_t step = STEP * st.bin;
      float2* sh = cols + g * IS + threadIdx.x / G;
      auto at = spectrum + (b0 + g) + (threadIdx.x / G) * st.bin;
      int f = threadIdx.x / G;
      if constexpr (!Store) {
        if (implied) {
          // Rows 0 .. NH/2 whole, then the rows below without bins 0 and NW/2: f's bin k steps
          // down by one per iteration (square bases: STEP = NH/2 = BINS - 1).
          constexpr int TOP = (NH / 2 + 1) * BINS;
#pragma unroll 4
          for (; f < TOP; f += STEP, sh += STEP, at += step)
            __pipeline_memcpy_async(sh, live ? at : spectrum, 8, live ? 0 : 8);
          int k = f % BINS;
#pragma unroll 4
          for (; f < F; f += STEP, sh += STEP, at += step) {
            const bool read = live && k != 0 && k != BINS - 1;
            __pipeline_memcpy_async(sh, read ? at : spectrum, 8, read ? 0 : 8);
            k = k == 0 ? BINS - 1 : k - 1;
          }
          __pipeline_commit();
          __pipeline_wait_prior(0);
          return;
        }
      }
#pragma unroll 4
      for (; f < F; f += STEP, sh += STEP, at += step) {
        if constexpr (Store) {
          if (live) *at = *sh;
        } else {
          __pipeline_memcpy_async(sh, live ? at : spectrum, 8, live ? 0 : 8);
        }
      }
      if constexpr (!Store) {
        __pipeline_commit();
        __pipeline_wait_prior(0);
      }
      return;
    }
  }
  for (int e = threadIdx.x; e < G * F; e += THREADS) {
    int g, f;
    if (images_inner) {
      g = e % G;
      f = e / G;
    } else {
      g = e / F;
      f = e % F;
    }
    const int i = f / BINS, k = f - i * BINS;
    float2* sh = IS > 0 ? cols + g * IS + f
                        : cols + (g * BINS + k) * CS + (PAD ? i + i / (PAD ? PAD : 1) : i);
    const bool live = b0 + g < batch;
    const int64_t at = (b0 + g) * st.image + (f_linear ? f * st.bin : i * st.row + k * st.bin);
    if constexpr (Store) {
      if (live) spectrum[at] = *sh;
    } else {
      __pipeline_memcpy_async(sh, spectrum + (live ? at : 0), 8, live ? 0 : 8);
    }
  }
  if constexpr (!Store) {
    __pipeline_commit();
    __pipeline_wait_prior(0);
  }
}

// load_window when rows and window are aligned to 4 floats (w % 4 == 0, ox % 4 == 0): a group of
// 4 is wholly inside or wholly outside the input, one 16-byte asynchronous copy each.
template <int NH, int NW, int THREADS, int G>
__device__ __forceinline__ void load_window_vec4(float* rows, const float* __restrict__ src_f,
                                                 int64_t b0, int64_t batch, int h, int w, int oy,
                                                 int ox) {
  constexpr int LOG_NW = ilog2(NW);
  const int tid = threadIdx.x;
  const int64_t in_plane = static_cast<int64_t>(h) * w;
  constexpr int VEC_ITEMS = G * NH * NW / THREADS / 4;
  static_assert(VEC_ITEMS * 4 * THREADS == G * NH * NW, "whole vectors per thread");
#pragma unroll 8
  for (int u = 0; u < VEC_ITEMS; ++u) {
    const int e = tid + u * THREADS;
    const int r = e >> (LOG_NW - 2), j = (e & (NW / 4 - 1)) * 4;
    const int g = r >> ilog2(NH), si = (r & (NH - 1)) + oy, sj = j + ox;
    const bool inside = b0 + g < batch && si >= 0 && si < h && sj >= 0 && sj < w;
    const int64_t src = inside ? (b0 + g) * in_plane + static_cast<int64_t>(si) * w + sj : 0;
    __pipeline_memcpy_async(rows + real_row_offset<NW>(r) + j, src_f + src, 16,
                            inside ? 0 : 16);
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
}

// load_window when the window is the whole input (h = NH, w = NW, oy = ox = 0, float32, 16-byte
// aligned): the block's images are one contiguous span, copied 16 bytes at a time, consecutive
// threads on consecutive units. A thread's units lie a constant distance apart in both the input
// and the rows, so after unrolling only the batch-tail test varies per unit.
template <int NH, int NW, int THREADS, int G>
__device__ __forceinline__ void load_full(float* rows, const float* __restrict__ src_f, int64_t b0,
                                          int64_t batch) {
  constexpr int Q = NW / 4, UNITS = G * NH * Q, ITEMS = UNITS / THREADS;
  static_assert(ITEMS * THREADS == UNITS && (2 * THREADS) % NW == 0,
                "whole units per thread, whole row pairs per round");
  const int tid = threadIdx.x;
  const float* src = src_f + b0 * (NH * NW) + 4 * tid;
  float* dst = rows + real_row_offset<NW>(tid / Q) + 4 * (tid % Q);
  constexpr int DST_STEP = THREADS / (2 * Q) * 4 * ((NW / 2) | 1);  // THREADS units: whole pairs
  if (b0 + G <= batch) {
#pragma unroll
    for (int u = 0; u < ITEMS; ++u)
      __pipeline_memcpy_async(dst + u * DST_STEP, src + u * 4 * THREADS, 16);
  } else {
    const int live_units = static_cast<int>(batch - b0) * (NH * Q);
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      const bool live = tid + u * THREADS < live_units;
      __pipeline_memcpy_async(dst + u * DST_STEP, live ? src + u * 4 * THREADS : src_f, 16,
                              live ? 0 : 16);
    }
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
}

// load_window when the whole input lies inside the window (implicit zero padding: oy, ox <= 0,
// h - oy <= NH, w - ox <= NW), float32: the block's rows are zeroed, then its images, adjacent in
// memory, are copied in with 4-byte asynchronous copies, consecutive threads on consecutive
// floats; no bounds tests and no zero-fill copies per element, and the position in the window
// advances without divisions.
template <int NH, int NW, int THREADS, int G>
__device__ __forceinline__ void load_padded(float* rows, const float* __restrict__ src_f,
                                            int64_t b0, int64_t batch, int h, int w, int oy,
                                            int ox) {
  constexpr int VW = NW < 4 ? NW : 4, LOG_VECS = ilog2(NW / VW);
  const float zero[VW] = {};
  for (int e = threadIdx.x; e < G * NH * NW / VW; e += THREADS) {
    const int r = e >> LOG_VECS, j = (e & ((NW / VW) - 1)) * VW;
    store_vec<VW>(rows + real_row_offset<NW>(r) + j, zero);
  }
  __syncthreads();  // the zeros land before the copies
  const int plane = h * w;
  const int live = static_cast<int>(batch - b0 < G ? batch - b0 : G);
  const float* src = src_f + b0 * plane;
  // element e of the block's images: image g, row si, column sj of the input
  int g = threadIdx.x / plane, si = (threadIdx.x - g * plane) / w;
  int sj = threadIdx.x - g * plane - si * w;
  const int step_g = THREADS / plane, step_i = THREADS % plane / w, step_j = THREADS % w;
  for (int e = threadIdx.x; e < live * plane; e += THREADS) {
    __pipeline_memcpy_async(rows + real_row_offset<NW>(g * NH + si - oy) + sj - ox, src + e,
                            4);
    g += step_g;
    si += step_i;
    sj += step_j;
    if (sj >= w) {
      sj -= w;
      ++si;
    }
    if (si >= h) {
      si -= h;
      ++g;
    }
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
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
  __pipeline_commit();
  __pipeline_wait_prior(0);
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

// The window of G images of NH x NW at (oy, ox), zero-filled outside the input and past the
// batch, into the pair-interleaved real rows (coalesced). float32: asynchronous copies, all in
// flight at once; 16-bit storage: through registers, a chunk of loads in flight per round trip.
// An input wholly inside the window takes load_padded where rfft2_registers does not stage it
// (64 x 64 and 1-D; at 64 x 64 with staged stores it leaves the kernel's 56 spilled bytes
// unchanged, and the convolution's zero-padded weights and gradients skip the per-element path:
// L2 forward transforms 211 -> 193 us on an H200).
template <int NH, int NW, int THREADS, int G>
__device__ __forceinline__ void load_window(float* rows, const void* __restrict__ in, Real type,
                                            int64_t b0, int64_t batch, int h, int w, int oy,
                                            int ox, bool vec4) {
  constexpr int LOG_NW = ilog2(NW), LOG_PLANE = ilog2(NH) + ilog2(NW);
  const int tid = threadIdx.x;
  const int64_t in_plane = static_cast<int64_t>(h) * w;
  constexpr int ITEMS = G * NH * NW / THREADS;
  static_assert(ITEMS * THREADS == G * NH * NW, "whole items per thread");
  auto locate = [&](int e, int64_t* src, int* dst) {
    const int g = e >> LOG_PLANE, r = e >> LOG_NW, j = e & (NW - 1);
    const int si = (r & (NH - 1)) + oy, sj = j + ox;
    *dst = real_row_offset<NW>(r) + j;
    const bool inside = b0 + g < batch && si >= 0 && si < h && sj >= 0 && sj < w;
    *src = inside ? (b0 + g) * in_plane + static_cast<int64_t>(si) * w + sj : -1;
  };
  if constexpr (NW >= 4) {
    if (type == Real::F32 && vec4 && h == NH && w == NW && oy == 0 && ox == 0) {
      load_full<NH, NW, THREADS, G>(rows, static_cast<const float*>(in), b0, batch);
      return;
    }
    if (type == Real::F32 && vec4) {
      load_window_vec4<NH, NW, THREADS, G>(rows, static_cast<const float*>(in), b0, batch, h, w,
                                           oy, ox);
      return;
    }
  }
  if (type == Real::F32 && oy <= 0 && ox <= 0 && h - oy <= NH && w - ox <= NW) {
    load_padded<NH, NW, THREADS, G>(rows, static_cast<const float*>(in), b0, batch, h, w, oy, ox);
    return;
  }
  if (type == Real::F32) {
    const float* src_f = static_cast<const float*>(in);
#pragma unroll 8
    for (int u = 0; u < ITEMS; ++u) {
      int64_t src;
      int dst;
      locate(tid + u * THREADS, &src, &dst);
      __pipeline_memcpy_async(rows + dst, src_f + (src >= 0 ? src : 0), 4, src >= 0 ? 0 : 4);
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
  } else {
    constexpr int CHUNK = ITEMS < 16 ? ITEMS : 16;
    for (int u0 = 0; u0 < ITEMS; u0 += CHUNK) {
      float v[CHUNK];
      int dst[CHUNK];
#pragma unroll
      for (int u = 0; u < CHUNK; ++u) {
        int64_t src;
        locate(tid + (u0 + u) * THREADS, &src, &dst[u]);
        v[u] = src >= 0 ? load_real(in, src, type) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < CHUNK; ++u) rows[dst[u]] = v[u];
    }
  }
}

// Direct: the spectrum is row-major with bin stride 1 (checked by the launcher); the column pass
// writes it straight to global memory instead of through shared memory.
// Whole (8 x 8 only): the launcher found the input to be whole float32 images, 16-byte aligned;
// the kernel then holds that path alone (1424 SASS instructions against 4328). Its code runs
// straight through, where the general kernel jumps past the other loads, and a kernel this short
// waits on instruction fetch at its start (Nsight Compute: 20% of stall samples). B = 16384,
// H200: 3.8 -> 3.6 us per call, graph-replayed (benchmarks/micro/fm.cu).
template <int NH, int NW, bool Direct, int T, bool Whole = false>
__global__ void __launch_bounds__(Config<NH, NW, T>::THREADS, Config<NH, NW, T>::MIN_BLOCKS)
    rfft2_registers(const void* __restrict__ in, Real type, float2* __restrict__ out, Strides os,
                    int64_t batch, int h, int w, int oy, int ox, bool vec4) {
  static_assert(!Whole || rows_in_global<NH, NW>(), "whole-image kernels are 8 x 8 only");
  using Cfg = Config<NH, NW, T>;
  constexpr int G = Cfg::G, BINS = Cfg::BINS, IS = Cfg::IS;
  constexpr int LOG_NW = ilog2(NW);
  extern __shared__ float4 smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * G;

  // 1. The window of G images into the pair-interleaved real rows (whole 8 x 8 images: each
  // row-pair thread reads its rows itself, in step 2).
  constexpr bool whole = Whole;
  // An input wholly inside the window (implicit zero padding), rows not 16-byte aligned, up to
  // 32 x 32: the block's images are staged as they lie in memory, 16 bytes per copy, and each
  // row-pair thread picks its rows out, instead of load_padded's zero pass and 4-byte copies.
  // Measured (H200, benchmarks/micro/fm.cu): row-major 13 -> 16 12.9 -> 12.2 us, 27 -> 32 46.6 ->
  // 44.2 us; the convolution's windows 9 -> 32 39.4 -> 35.1, 7 -> 16 11.5 -> 10.6, 13 -> 16
  // 36.6 -> 34.0, 3 -> 16 70.8 -> 61.6 us; at 64 x 64 load_padded stays (57 -> 64 182.8
  // against 188.5 us staged; 9 -> 64 the same).
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

// The inverse's last step when the window is the whole result (out_h = NH, out_w = NW,
// oy = ox = 0), float32 with 16-byte aligned rows and no bias: the block's images are one
// contiguous span of the output, written 16 bytes at a time, consecutive threads on consecutive
// units (the mirror of load_full).
template <int NH, int NW, int THREADS, int G>
__device__ __forceinline__ void store_full(const float* rows, float* __restrict__ out, int64_t b0,
                                           int live, float scale) {
  constexpr int Q = NW / 4, UNITS = G * NH * Q, ITEMS = UNITS / THREADS;
  static_assert(ITEMS * THREADS == UNITS && (2 * THREADS) % NW == 0,
                "whole units per thread, whole row pairs per round");
  const int tid = threadIdx.x;
  const float* src = rows + real_row_offset<NW>(tid / Q) + 4 * (tid % Q);
  float4* dst = reinterpret_cast<float4*>(out + b0 * (NH * NW)) + tid;
  constexpr int SRC_STEP = THREADS / (2 * Q) * 4 * ((NW / 2) | 1);
  const int live_units = live * (NH * Q);
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    if (live == G || tid + u * THREADS < live_units) {
      const float4 t = *reinterpret_cast<const float4*>(src + u * SRC_STEP);
      dst[u * THREADS] = make_float4(t.x * scale, t.y * scale, t.z * scale, t.w * scale);
    }
  }
}

// store_window in float32 when the output rows and the window are aligned to 4 floats
// (out_w % 4 == 0, ox % 4 == 0, 16-byte aligned output): one 16-byte access per 4 outputs, and a
// group of 4 is wholly inside or wholly outside the basis.
template <int NH, int NW, int THREADS>
__device__ __forceinline__ void store_window_vec4(const float* rows, float* __restrict__ out,
                                                  int64_t b0, int live, int out_h, int out_w,
                                                  int oy, int ox, float scale,
                                                  const float* __restrict__ bias,
                                                  int64_t channels) {
  const int quads = out_w / 4;
  int lanes = 1;
  while (lanes * 2 <= quads && lanes < 32) lanes *= 2;
  const int groups = THREADS / lanes, group = threadIdx.x / lanes;
  const int lane = threadIdx.x - group * lanes;
  const int64_t plane = static_cast<int64_t>(out_h) * out_w;
  auto row = [&](int g, int i) {
    const int si = i + oy;
    const float add = bias != nullptr ? bias[(b0 + g) % channels] : 0.f;
    float4* dst =
        reinterpret_cast<float4*>(out + (b0 + g) * plane + static_cast<int64_t>(i) * out_w);
    const bool row_in = si >= 0 && si < NH;
    const float* src = rows + real_row_offset<NW>(g * NH + (row_in ? si : 0));
    for (int j = lane; j < quads; j += lanes) {
      const int sj = 4 * j + ox;
      float4 v = make_float4(add, add, add, add);
      if (row_in && sj >= 0 && sj < NW) {
        const float4 t = *reinterpret_cast<const float4*>(src + sj);
        v = make_float4(fmaf(t.x, scale, add), fmaf(t.y, scale, add), fmaf(t.z, scale, add),
                        fmaf(t.w, scale, add));
      }
      dst[j] = v;
    }
  };
  if (out_h >= groups) {  // the rows of one image keep every group busy
    for (int g = 0; g < live; ++g)
      for (int i = group; i < out_h; i += groups) row(g, i);
  } else {  // small images: (image, row) pairs across the groups
    for (int e = group; e < live * out_h; e += groups) {
      const int g = e / out_h;
      row(g, e - g * out_h);
    }
  }
}

// The inverse's last step: `live` images of real rows (pair-interleaved in shared memory) ->
// out[b0 + g] [out_h, out_w], the window at (oy, ox) of the nh x nw result, scaled, plus bias.
// Threads work in groups of L lanes (L = the largest power of two <= min(32, out_w)); a group
// writes one output row at a time, so the index arithmetic is per row, not per element; images
// with fewer rows than there are groups are written several at a time.
template <int NH, int NW, int THREADS, typename T>
__device__ __forceinline__ void store_window(const float* rows, T* __restrict__ out, int64_t b0,
                                             int live, int out_h, int out_w, int oy, int ox,
                                             float scale, const T* __restrict__ bias,
                                             int64_t channels, bool vec4) {
  if constexpr (std::is_same<T, float>::value && NW >= 4) {
    if (vec4) {
      store_window_vec4<NH, NW, THREADS>(rows, out, b0, live, out_h, out_w, oy, ox, scale, bias,
                                         channels);
      return;
    }
  }
  int lanes = 1;
  while (lanes * 2 <= out_w && lanes < 32) lanes *= 2;
  const int groups = THREADS / lanes, group = threadIdx.x / lanes;
  const int lane = threadIdx.x - group * lanes;
  const int64_t plane = static_cast<int64_t>(out_h) * out_w;
  auto row = [&](int g, int i) {
    const int si = i + oy;
    const float add = bias != nullptr ? to_compute(bias[(b0 + g) % channels]) : 0.f;
    T* dst = out + (b0 + g) * plane + static_cast<int64_t>(i) * out_w;
    if (si >= 0 && si < NH) {
      const float* src = rows + real_row_offset<NW>(g * NH + si);
      for (int j = lane; j < out_w; j += lanes) {
        const int sj = j + ox;
        const float v = sj >= 0 && sj < NW ? src[sj] * scale : 0.f;
        dst[j] = from_compute<T>(v + add);
      }
    } else {
      for (int j = lane; j < out_w; j += lanes) dst[j] = from_compute<T>(add);
    }
  };
  if (out_h >= groups) {  // the rows of one image keep every group busy
    for (int g = 0; g < live; ++g)
      for (int i = group; i < out_h; i += groups) row(g, i);
  } else {  // small images: (image, row) pairs across the groups
    for (int e = group; e < live * out_h; e += groups) {
      const int g = e / out_h;
      row(g, e - g * out_h);
    }
  }
}

// store_window in the storage type `type` (16-byte stores only for float32).
template <int NH, int NW, int THREADS>
__device__ __forceinline__ void store_window_as(Real type, const float* rows, void* out, int64_t b0,
                                                int live, int out_h, int out_w, int oy, int ox,
                                                float scale, const void* bias, int64_t channels,
                                                bool vec4) {
  switch (type) {
    case Real::F16:
      store_window<NH, NW, THREADS>(rows, static_cast<__half*>(out), b0, live, out_h, out_w, oy, ox,
                                    scale, static_cast<const __half*>(bias), channels, false);
      break;
    case Real::BF16:
      store_window<NH, NW, THREADS>(rows, static_cast<__nv_bfloat16*>(out), b0, live, out_h, out_w,
                                    oy, ox, scale, static_cast<const __nv_bfloat16*>(bias),
                                    channels, false);
      break;
    default:
      store_window<NH, NW, THREADS>(rows, static_cast<float*>(out), b0, live, out_h, out_w, oy, ox,
                                    scale, static_cast<const float*>(bias), channels, vec4);
      break;
  }
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

// ---------------------------------------------------------------------------------------------
// Lane kernels (1-D, n = 8..256): a line FFT spread over L lanes of a warp, M = n / L points per
// lane, so a batch of 16384 lines still fills the GPU (a line per thread would leave a few warps
// per SM). n = L * M factors the transform in two: M-point FFTs in each lane's registers,
// L-point FFTs across the lanes (radix-2 butterflies between lanes `s` apart, values exchanged
// with shuffles), and a twiddle between them. Two distributions of a line over the lanes:
//   blocked (lane l holds x[l M + j]): lanes first, then registers; out X[k2 + L k1];
//   cyclic (lane l holds x[j L + l]): registers first, then lanes; out X[k1 + M k2];
// with k1 in register bit_reverse_M(k1) and k2 in lane bit_reverse_L(k2) in both. The forward
// uses the blocked one (its output is lane-contiguous for the spectrum stores), the inverse the
// cyclic one (its input is lane-contiguous for the spectrum loads, and each lane writes M
// consecutive reals).

// The whole circle, exp(-2 pi i m / 256), m < 256, in global memory: the lanes read different
// entries, which the constant bank would serialise.
__device__ const TwiddleTable<256> kCircle = make_twiddles<256>();

template <bool Inverse>
__device__ __forceinline__ float2 circle(int m) {
  const float2 w = __ldg(&kCircle.w[m]);
  return Inverse ? make_float2(w.x, -w.y) : w;
}

template <int L>
__device__ __forceinline__ int lane_reverse(int l) {
  return L == 1 ? 0 : static_cast<int>(__brev(static_cast<unsigned>(l)) >> (32 - ilog2(L)));
}

// Per-lane twiddles, loaded once (before the data arrive, where a kernel allows):
//   stage[S]: the L-point cross-lane stage of half-span s = L >> (S + 1): W_{2s}^(lane mod s) in
//     the upper lane of each pair, 1 in the lower;
//   inner[j]: between the two factors: W_N^(j k2), k2 = bit_reverse_L(lane) (blocked), or in
//     register r W_N^(lane k1), k1 = bit_reverse_M(r) (cyclic).
template <int N, int L, bool Inverse>
struct LaneTwiddles {
  float2 stage[ilog2(L)];
  float2 inner[N / L];
};

template <int N, int L, bool Inverse, bool Blocked>
__device__ __forceinline__ LaneTwiddles<N, L, Inverse> lane_twiddles(int lane) {
  constexpr int M = N / L;
  LaneTwiddles<N, L, Inverse> t;
  static_for<ilog2(L)>([&](auto S) {
    constexpr int st = decltype(S)::value, s = L >> (1 + st);
    t.stage[st] = s > 1 && (lane & s) ? circle<Inverse>((lane & (s - 1)) * (128 / (s > 1 ? s : 1)))
                                      : make_float2(1.f, 0.f);
  });
  const int k2 = lane_reverse<L>(lane);
  static_for<M>([&](auto R) {
    constexpr int r = decltype(R)::value;
    constexpr int k1 = bit_reverse(r, ilog2(M));
    const int e = Blocked ? r * k2 : lane * k1;
    t.inner[r] = (Blocked ? r : k1) == 0 ? make_float2(1.f, 0.f) : circle<Inverse>(e * (256 / N));
  });
  return t;
}

// L-point DIF across the lanes of each group of L, for each of the M registers: natural order in
// (lane l), bit-reversed out (lane l holds index bit_reverse_L(l)).
template <int N, int L, bool Inverse>
__device__ __forceinline__ void dif_lanes(float2 (&z)[N / L], int lane,
                                          const LaneTwiddles<N, L, Inverse>& t) {
  constexpr int M = N / L;
  static_for<ilog2(L)>([&](auto S) {
    constexpr int st = decltype(S)::value, s = L >> (1 + st);  // L/2, L/4, ..., 1
    // lower lane: a + b; upper lane: (a - b) W_{2s}^(lane mod s)
    const float sg = (lane & s) ? -1.f : 1.f;
    static_for<M>([&](auto R) {
      constexpr int r = decltype(R)::value;
      const float px = __shfl_xor_sync(0xffffffffu, z[r].x, s);
      const float py = __shfl_xor_sync(0xffffffffu, z[r].y, s);
      const float2 v = make_float2(fmaf(sg, z[r].x, px), fmaf(sg, z[r].y, py));
      z[r] = s > 1 ? cmul(v, t.stage[st]) : v;
    });
  });
}

// Blocked: z[j] = x[lane M + j] in; z[r] = X[bit_reverse_L(lane) + L bit_reverse_M(r)] out.
template <int N, int L, bool Inverse>
__device__ __forceinline__ void fft_blocked(float2 (&z)[N / L], int lane,
                                            const LaneTwiddles<N, L, Inverse>& t) {
  constexpr int M = N / L;
  dif_lanes<N, L, Inverse>(z, lane, t);
  static_for<M - 1>([&](auto J) {
    constexpr int j = decltype(J)::value + 1;
    z[j] = cmul(z[j], t.inner[j]);
  });
  fft_registers<M, Inverse>(z);
}
template <int N, int L, bool Inverse>
__device__ __forceinline__ void fft_blocked(float2 (&z)[N / L], int lane) {
  fft_blocked<N, L, Inverse>(z, lane, lane_twiddles<N, L, Inverse, true>(lane));
}

// Cyclic: z[j] = x[j L + lane] in; z[r] = X[bit_reverse_M(r) + M bit_reverse_L(lane)] out.
template <int N, int L, bool Inverse>
__device__ __forceinline__ void fft_cyclic(float2 (&z)[N / L], int lane,
                                           const LaneTwiddles<N, L, Inverse>& t) {
  constexpr int M = N / L;
  fft_registers<M, Inverse>(z);
  static_for<M>([&](auto R) {
    constexpr int r = decltype(R)::value, k1 = bit_reverse(r, ilog2(M));
    if constexpr (k1 != 0) z[r] = cmul(z[r], t.inner[r]);
  });
  dif_lanes<N, L, Inverse>(z, lane, t);
}
template <int N, int L, bool Inverse>
__device__ __forceinline__ void fft_cyclic(float2 (&z)[N / L], int lane) {
  fft_cyclic<N, L, Inverse>(z, lane, lane_twiddles<N, L, Inverse, false>(lane));
}

template <int N>
struct LaneConfig {
  static constexpr int M = N >= 64 ? 8 : (N >= 16 ? 4 : 2);  // points per lane
  static constexpr int L = N / M;                            // lanes per line pair
  static constexpr int THREADS = 128;
  static constexpr int PAIRS = THREADS / L;  // row pairs (two real lines each) per block
  static constexpr int G = 2 * PAIRS;        // lines per block
  static constexpr int BINS = N / 2 + 1;
  static constexpr int PS = 4 * ((N / 2) | 1);
  static constexpr int VW = M < 4 ? M : 4;
  static constexpr size_t SMEM =
      PAIRS * PS * 4 > G * BINS * 8 ? PAIRS * PS * 4 : G * BINS * 8;
  static_assert(L >= 2 && L <= 32 && M >= 2, "lane split");
};

// Direct: the spectrum's bins are adjacent in memory (bin stride 1, checked by the launcher); the
// split spectra go straight to global memory (a group's lanes write consecutive bins) instead of
// through shared memory. The inverse reads them the same way.
template <int N, bool Direct>
__global__ void __launch_bounds__(LaneConfig<N>::THREADS)
    rfft_lanes(const void* __restrict__ in, Real type, float2* __restrict__ out, Strides os,
               int64_t batch, int h, int w, int oy, int ox, bool vec4) {
  using Cfg = LaneConfig<N>;
  constexpr int M = Cfg::M, L = Cfg::L, G = Cfg::G, BINS = Cfg::BINS, VW = Cfg::VW;
  extern __shared__ float4 smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x, pair = tid / L, lane = tid % L;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * G;
  const auto tw = lane_twiddles<N, L, false, true>(lane);  // in flight with the window

  load_window<1, N, Cfg::THREADS, G>(rows, in, type, b0, batch, h, w, oy, ox, vec4);
  __syncthreads();

  // Lines 2p (real part) and 2p+1 (imaginary part) as one complex line, M points per lane.
  float2 z[M];
  load_row_pair<M, VW, N>(rows + pair * Cfg::PS + lane * M, z);
  fft_blocked<N, L, false>(z, lane, tw);

  // Hermitian split: Z[-k] for k = k2 + L k1 is at lane bit_reverse_L(-k2 mod L), register
  // r ^ (M - 1) when k2 != 0; in this lane, register bit_reverse_M(-k1 mod M) when k2 == 0.
  const int k2 = lane_reverse<L>(lane);
  const int src = lane_reverse<L>((L - k2) & (L - 1));
  float2 zm[M];
  static_for<M>([&](auto R) {
    constexpr int r = decltype(R)::value, k1 = bit_reverse(r, ilog2(M));
    constexpr int own = bit_reverse((M - k1) & (M - 1), ilog2(M));
    const float2 o = z[r ^ (M - 1)];
    const float mx = __shfl_sync(0xffffffffu, o.x, src, L);
    const float my = __shfl_sync(0xffffffffu, o.y, src, L);
    zm[r] = k2 == 0 ? z[own] : make_float2(mx, my);
  });
  if constexpr (Direct) {
    const int64_t ia = b0 + 2 * pair;
    float2* ga = out + ia * os.image;
    float2* gb = ga + os.image;
    const bool live_a = ia < batch, live_b = ia + 1 < batch;
    static_for<M>([&](auto R) {
      constexpr int r = decltype(R)::value, k1 = bit_reverse(r, ilog2(M));
      const int k = k2 + L * k1;
      if (k <= N / 2) {
        const float2 a = z[r], m = zm[r];
        if (live_a) ga[k] = make_float2(0.5f * (a.x + m.x), 0.5f * (a.y - m.y));
        if (live_b) gb[k] = make_float2(0.5f * (a.y + m.y), 0.5f * (m.x - a.x));
      }
    });
  } else {
    __syncthreads();  // the spectra overwrite the real rows
    float2* ca = cols + (2 * pair) * BINS;
    float2* cb = ca + BINS;
    static_for<M>([&](auto R) {
      constexpr int r = decltype(R)::value, k1 = bit_reverse(r, ilog2(M));
      const int k = k2 + L * k1;
      if (k <= N / 2) {
        const float2 a = z[r], m = zm[r];
        ca[k] = make_float2(0.5f * (a.x + m.x), 0.5f * (a.y - m.y));
        cb[k] = make_float2(0.5f * (a.y + m.y), 0.5f * (m.x - a.x));
      }
    });
    __syncthreads();
    spectrum_io<1, N, Cfg::THREADS, G, true, N / 2 + 1>(cols, out, os, b0, batch);
  }
}

template <int N, bool Direct>
__global__ void __launch_bounds__(LaneConfig<N>::THREADS)
    irfft_lanes(const float2* __restrict__ in, Strides is, void* __restrict__ out, Real type,
                int64_t batch, int out_h, int out_w, int oy, int ox, float scale,
                const void* __restrict__ bias, int64_t channels, bool vec4) {
  using Cfg = LaneConfig<N>;
  constexpr int M = Cfg::M, L = Cfg::L, G = Cfg::G, BINS = Cfg::BINS, VW = Cfg::VW;
  extern __shared__ float4 smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x, pair = tid / L, lane = tid % L;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * G;
  const auto tw = lane_twiddles<N, L, true, false>(lane);  // in flight with the spectra

  if constexpr (!Direct) {
    spectrum_io<1, N, Cfg::THREADS, G, false, N / 2 + 1>(cols, in, is, b0, batch);
    __syncthreads();
  }

  // Half spectra A, B of lines 2p, 2p+1 -> Z = A + iB extended by Hermitian symmetry (the DC and
  // Nyquist bins taken real), cyclic over the lanes.
  float2 z[M];
  const int64_t ia = b0 + 2 * pair;
  const bool live_a = !Direct || ia < batch, live_b = !Direct || ia + 1 < batch;
  const float2* ca = Direct ? in + (live_a ? ia : 0) * is.image : cols + (2 * pair) * BINS;
  const float2* cb = Direct ? in + (live_b ? ia + 1 : 0) * is.image : ca + BINS;
  static_for<M>([&](auto J) {
    constexpr int j = decltype(J)::value;
    const int m = j * L + lane;
    const bool mirror = m > N / 2;
    const int at = mirror ? N - m : m;
    float2 a = live_a ? ca[at] : make_float2(0.f, 0.f);
    float2 b = live_b ? cb[at] : make_float2(0.f, 0.f);
    if (at == 0 || at == N / 2) {
      a.y = 0.f;
      b.y = 0.f;
    }
    z[j] = mirror ? make_float2(a.x + b.y, b.x - a.y) : make_float2(a.x - b.y, a.y + b.x);
  });
  fft_cyclic<N, L, true>(z, lane, tw);
  __syncthreads();  // the real rows overwrite the spectra
  // Lane l holds reals M k2 .. M k2 + M - 1, k2 = bit_reverse_L(l).
  store_row_pair_bitrev<M, VW, N>(rows + pair * Cfg::PS + M * lane_reverse<L>(lane), z);
  __syncthreads();

  const int live = static_cast<int>(batch - b0 < G ? batch - b0 : G);
  // Whole lines in float32, no bias: the block's lines are one contiguous span, 16 bytes a store.
  if (type == Real::F32 && vec4 && bias == nullptr && out_h == 1 && out_w == N && oy == 0 &&
      ox == 0) {
    store_full<1, N, Cfg::THREADS, G>(rows, static_cast<float*>(out), b0, live, scale);
    return;
  }
  store_window_as<1, N, Cfg::THREADS>(type, rows, out, b0, live, out_h, out_w, oy, ox, scale, bias,
                                      channels, vec4);
}

// 2-D lane kernels (n x n; they serve 128 x 128): one image per block of 256 threads, each line
// over L = n / 8 lanes, 8 points per lane. The real rows are read from and written to global memory
// directly (no staging), so shared memory holds only the half spectrum, column-major: column k
// at k * CS, row i at i + i / 16. The padding makes both the row pass's writes (one row, L
// consecutive columns) and the column pass's strided accesses free of bank conflicts; CS is
// odd. 128 x 128 takes 71 KB: three blocks per SM.
template <int N>
struct Lane2Config {
  static constexpr int M = 8, L = N / M;
  static constexpr int THREADS = 256;
  static constexpr int MIN_BLOCKS = 3;                // what shared memory allows at 128
  static constexpr int GROUPS = THREADS / L;          // lines in flight per block
  static constexpr int ROUNDS = (N / 2) / GROUPS;     // row pairs (and columns) per group
  static constexpr int PAD = 16;
  static constexpr int CS = (N + N / PAD) | 1;
  static constexpr int BINS = N / 2 + 1;
  static constexpr size_t SMEM = size_t{BINS} * CS * sizeof(float2);
  static_assert(ROUNDS * GROUPS == N / 2, "whole rounds");
};

__device__ __forceinline__ int padded(int i) { return i + i / 16; }

template <int L>
__device__ __forceinline__ unsigned group_mask() {
  const unsigned lanes = L == 32 ? 0xffffffffu : ((1u << L) - 1u);
  return lanes << ((threadIdx.x & 31) & ~(L - 1));
}

// The 8 reals of `row` at columns c0 .. c0 + 7 of the window, zero outside the input. VW floats
// per load: 4 (float32, rows and window 4-aligned), 2 (float32, even rows and offset: whole pairs
// inside or outside the row), else 1.
template <int VW>
__device__ __forceinline__ void load_row8(const void* __restrict__ in, Real type, int64_t plane0,
                                          int h, int w, int si, int sj0, float (&v)[8]) {
  const bool row_in = si >= 0 && si < h;
  const int64_t base = plane0 + static_cast<int64_t>(si) * w;
  if constexpr (VW == 2) {
    // each lane's 8 columns lie 32 bytes from its neighbour's: pairs halve the load requests
    const float* f = static_cast<const float*>(in);
    static_for<4>([&](auto C) {
      constexpr int c = decltype(C)::value;
      const int sj = sj0 + 2 * c;
      float2 t = make_float2(0.f, 0.f);
      if (row_in && sj >= 0 && sj < w) t = __ldg(reinterpret_cast<const float2*>(f + base + sj));
      v[2 * c] = t.x; v[2 * c + 1] = t.y;
    });
  } else if constexpr (VW == 4) {
    const float* f = static_cast<const float*>(in);
    static_for<2>([&](auto C) {
      constexpr int c = decltype(C)::value;
      const int sj = sj0 + 4 * c;
      float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row_in && sj >= 0 && sj < w) t = __ldg(reinterpret_cast<const float4*>(f + base + sj));
      v[4 * c] = t.x; v[4 * c + 1] = t.y; v[4 * c + 2] = t.z; v[4 * c + 3] = t.w;
    });
  } else {
    static_for<8>([&](auto J) {
      constexpr int j = decltype(J)::value;
      const int sj = sj0 + j;
      v[j] = row_in && sj >= 0 && sj < w ? load_real(in, base + sj, type) : 0.f;
    });
  }
}

template <int N, int VW>
__device__ __forceinline__ void rfft2_lanes_body(const void* __restrict__ in, Real type,
                                                 float2* __restrict__ out, Strides os,
                                                 int64_t batch, int h, int w, int oy, int ox) {
  using Cfg = Lane2Config<N>;
  constexpr int M = Cfg::M, L = Cfg::L, CS = Cfg::CS, HALF = N / 2;
  extern __shared__ float4 smem_raw[];
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x, group = tid / L, lane = tid % L;
  const int64_t b = blockIdx.x;
  const int64_t plane0 = b * h * static_cast<int64_t>(w);
  const int k2 = lane_reverse<L>(lane);
  const int src = lane_reverse<L>((L - k2) & (L - 1));

  // Rows: pairs (2p, 2p + 1) as one complex line, blocked over the lanes; Hermitian split with
  // shuffles (as in rfft_lanes); the half spectra into the columns.
#pragma unroll 1
  for (int round = 0; round < Cfg::ROUNDS; ++round) {
    const int i0 = 2 * (round * Cfg::GROUPS + group);
    float a[8], bb[8];
    load_row8<VW>(in, type, plane0, h, w, i0 + oy, lane * M + ox, a);
    load_row8<VW>(in, type, plane0, h, w, i0 + 1 + oy, lane * M + ox, bb);
    float2 z[M];
    static_for<M>([&](auto J) {
      constexpr int j = decltype(J)::value;
      z[j] = make_float2(a[j], bb[j]);
    });
    fft_blocked<N, L, false>(z, lane);
    static_for<M>([&](auto R) {
      constexpr int r = decltype(R)::value, k1 = bit_reverse(r, ilog2(M));
      constexpr int own = bit_reverse((M - k1) & (M - 1), ilog2(M));
      const float2 o = z[r ^ (M - 1)];
      const float mx = __shfl_sync(0xffffffffu, o.x, src, L);
      const float my = __shfl_sync(0xffffffffu, o.y, src, L);
      const float2 m = k2 == 0 ? z[own] : make_float2(mx, my);
      const int k = k2 + L * k1;
      if (k <= HALF) {
        const float2 v = z[r];
        cols[k * CS + padded(i0)] = make_float2(0.5f * (v.x + m.x), 0.5f * (v.y - m.y));
        cols[k * CS + padded(i0 + 1)] = make_float2(0.5f * (v.y + m.y), 0.5f * (m.x - v.x));
      }
    });
  }
  __syncthreads();

  // Columns, cyclic over the lanes, in place; column 0 carries DC + i Nyquist and is split after.
#pragma unroll 1
  for (int round = 0; round < Cfg::ROUNDS; ++round) {
    const int q = round * Cfg::GROUPS + group;
    float2* col = cols + q * CS;
    const float2* nyq = cols + HALF * CS;
    float2 z[M];
    static_for<M>([&](auto J) {
      constexpr int j = decltype(J)::value;
      const int at = padded(j * L + lane);
      z[j] = q != 0 ? col[at] : make_float2(col[at].x, nyq[at].x);
    });
    fft_cyclic<N, L, false>(z, lane);
    const unsigned gm = group_mask<L>();
    __syncwarp(gm);
    static_for<M>([&](auto K) {
      constexpr int k1 = decltype(K)::value;
      col[padded(M * k2 + k1)] = z[bit_reverse(k1, ilog2(M))];
    });
    if (q == 0) {
      __syncwarp(gm);
      float2 zk[M], zm[M];
      static_for<M>([&](auto K) {
        constexpr int k1 = decltype(K)::value;
        const int k = M * k2 + k1;
        zk[k1] = col[padded(k)];
        zm[k1] = col[padded((N - k) & (N - 1))];
      });
      __syncwarp(gm);
      float2* ny = cols + HALF * CS;
      static_for<M>([&](auto K) {
        constexpr int k1 = decltype(K)::value;
        const int at = padded(M * k2 + k1);
        const float2 v = zk[k1], m = zm[k1];
        col[at] = make_float2(0.5f * (v.x + m.x), 0.5f * (v.y - m.y));
        ny[at] = make_float2(0.5f * (v.y + m.y), 0.5f * (m.x - v.x));
      });
    }
  }
  __syncthreads();
  spectrum_io<N, N, Cfg::THREADS, 1, true, 0, CS, Cfg::PAD>(cols, out, os, b, batch);
}

// One kernel per load width (one body each: the forward is at the register limit already).
template <int N, int VW>
__global__ void __launch_bounds__(Lane2Config<N>::THREADS, Lane2Config<N>::MIN_BLOCKS)
    rfft2_lanes(const void* __restrict__ in, Real type, float2* __restrict__ out, Strides os,
                int64_t batch, int h, int w, int oy, int ox) {
  rfft2_lanes_body<N, VW>(in, type, out, os, batch, h, w, oy, ox);
}

// Row pass of the inverse: reals of rows 2p, 2p + 1 straight to the output window.
template <int N, typename T>
__device__ __forceinline__ void irfft2_lanes_rows(const float2* cols, T* __restrict__ out,
                                                  int64_t b, int out_h, int out_w, int oy, int ox,
                                                  float scale, float add, int vw) {
  using Cfg = Lane2Config<N>;
  constexpr int M = Cfg::M, L = Cfg::L, CS = Cfg::CS, HALF = N / 2;
  const int tid = threadIdx.x, group = tid / L, lane = tid % L;
  const int k2 = lane_reverse<L>(lane);
  const int64_t plane0 = b * out_h * static_cast<int64_t>(out_w);
#pragma unroll 1
  for (int round = 0; round < Cfg::ROUNDS; ++round) {
    const int i0 = 2 * (round * Cfg::GROUPS + group);
    float2 z[M];
    static_for<M>([&](auto J) {
      constexpr int j = decltype(J)::value;
      const int m = j * L + lane;
      const bool mirror = m > HALF;
      const int at = mirror ? N - m : m;
      float2 a = cols[at * CS + padded(i0)], bb = cols[at * CS + padded(i0 + 1)];
      if (at == 0 || at == HALF) {
        a.y = 0.f;
        bb.y = 0.f;
      }
      z[j] = mirror ? make_float2(a.x + bb.y, bb.x - a.y) : make_float2(a.x - bb.y, a.y + bb.x);
    });
    fft_cyclic<N, L, true>(z, lane);
    // This lane holds columns M k2 .. M k2 + 7 of rows i0 (real parts) and i0 + 1 (imaginary).
    static_for<2>([&](auto P) {
      constexpr int p = decltype(P)::value;
      const int oi = i0 + p - oy;
      if (oi >= 0 && oi < out_h) {
        T* dst = out + plane0 + static_cast<int64_t>(oi) * out_w;
        const int oj0 = M * k2 - ox;
        static_for<2>([&](auto C) {
          constexpr int c = decltype(C)::value;
          float v[4];
          static_for<4>([&](auto U) {
            constexpr int u = decltype(U)::value;
            const float2 t = z[bit_reverse(4 * c + u, ilog2(M))];
            v[u] = (p == 0 ? t.x : t.y) * scale + add;
          });
          const int oj = oj0 + 4 * c;
          bool done = false;
          if constexpr (std::is_same<T, float>::value) {
            if (vw == 4) {  // 4-aligned chunks, wholly inside or outside the output row
              if (oj >= 0 && oj < out_w)
                *reinterpret_cast<float4*>(dst + oj) = make_float4(v[0], v[1], v[2], v[3]);
              done = true;
            } else if (vw == 2) {  // even rows (L1's 118 x 118): pairs, half the store requests
              static_for<2>([&](auto U) {
                constexpr int u = 2 * decltype(U)::value;
                if (oj + u >= 0 && oj + u < out_w)
                  *reinterpret_cast<float2*>(dst + oj + u) = make_float2(v[u], v[u + 1]);
              });
              done = true;
            }
          }
          if (!done) {
            static_for<4>([&](auto U) {
              constexpr int u = decltype(U)::value;
              if (oj + u >= 0 && oj + u < out_w) dst[oj + u] = from_compute<T>(v[u]);
            });
          }
        });
      }
    });
  }
  // Output pixels whose source lies outside the n x n basis: the bias alone.
  if (oy < 0 || ox < 0 || oy + out_h > N || ox + out_w > N) {
    for (int e = tid; e < out_h * out_w; e += Cfg::THREADS) {
      const int i = e / out_w, j = e - i * out_w;
      const int si = i + oy, sj = j + ox;
      if (si < 0 || si >= N || sj < 0 || sj >= N) out[plane0 + e] = from_compute<T>(add);
    }
  }
}

template <int N>
__global__ void __launch_bounds__(Lane2Config<N>::THREADS, Lane2Config<N>::MIN_BLOCKS)
    irfft2_lanes(const float2* __restrict__ in, Strides is, void* __restrict__ out, Real type,
                 int64_t batch, int out_h, int out_w, int oy, int ox, float scale,
                 const void* __restrict__ bias, int64_t channels, int vw) {
  using Cfg = Lane2Config<N>;
  constexpr int M = Cfg::M, L = Cfg::L, CS = Cfg::CS, HALF = N / 2;
  extern __shared__ float4 smem_raw[];
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x, group = tid / L, lane = tid % L;
  const int64_t b = blockIdx.x;
  const int k2 = lane_reverse<L>(lane);

  spectrum_io<N, N, Cfg::THREADS, 1, false, 0, CS, Cfg::PAD>(cols, in, is, b, batch);
  __syncthreads();

  // Columns, inverse, in place; column 0 takes the Hermitian parts of the DC and Nyquist
  // columns as one complex column (DC + i Nyquist), whose inverse splits into two real ones.
#pragma unroll 1
  for (int round = 0; round < Cfg::ROUNDS; ++round) {
    const int q = round * Cfg::GROUPS + group;
    float2* col = cols + q * CS;
    float2* nyq = cols + HALF * CS;
    float2 z[M];
    static_for<M>([&](auto J) {
      constexpr int j = decltype(J)::value;
      const int m = j * L + lane;
      if (q != 0) {
        z[j] = col[padded(m)];
      } else {
        const int mm = (N - m) & (N - 1);
        const float2 di = col[padded(m)], dm = col[padded(mm)];
        const float2 ni = nyq[padded(m)], nm = nyq[padded(mm)];
        const float2 hd = make_float2(0.5f * (di.x + dm.x), 0.5f * (di.y - dm.y));
        const float2 hn = make_float2(0.5f * (ni.x + nm.x), 0.5f * (ni.y - nm.y));
        z[j] = make_float2(hd.x - hn.y, hd.y + hn.x);
      }
    });
    fft_cyclic<N, L, true>(z, lane);
    __syncwarp(group_mask<L>());
    static_for<M>([&](auto K) {
      constexpr int k1 = decltype(K)::value;
      const int at = padded(M * k2 + k1);
      const float2 v = z[bit_reverse(k1, ilog2(M))];
      if (q != 0) {
        col[at] = v;
      } else {
        col[at] = make_float2(v.x, 0.f);
        nyq[at] = make_float2(v.y, 0.f);
      }
    });
  }
  __syncthreads();

  switch (type) {
    case Real::F16: {
      const float add =
          bias != nullptr ? to_compute(static_cast<const __half*>(bias)[b % channels]) : 0.f;
      irfft2_lanes_rows<N>(cols, static_cast<__half*>(out), b, out_h, out_w, oy, ox, scale, add,
                           1);
      break;
    }
    case Real::BF16: {
      const float add =
          bias != nullptr ? to_compute(static_cast<const __nv_bfloat16*>(bias)[b % channels])
                          : 0.f;
      irfft2_lanes_rows<N>(cols, static_cast<__nv_bfloat16*>(out), b, out_h, out_w, oy, ox, scale,
                           add, 1);
      break;
    }
    default: {
      const float add = bias != nullptr ? static_cast<const float*>(bias)[b % channels] : 0.f;
      irfft2_lanes_rows<N>(cols, static_cast<float*>(out), b, out_h, out_w, oy, ox, scale, add,
                           vw);
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Shared-memory kernels (every size): one image per block, radix-2 passes in shared memory.

__device__ __forceinline__ int bitrev(int v, int bits) {
  return bits == 0 ? 0 : static_cast<int>(__brev(static_cast<unsigned>(v)) >> (32 - bits));
}


// In-place radix-2 decimation-in-time passes over `count` independent lines of length 2^bits,
// stored in shared memory with element stride `es` and line stride `ls`; input bit-reversed,
// output in natural order. sign = -1 forward, +1 inverse.
__device__ void fft_lines(float2* buf, int count, int bits, int es, int ls, float sign) {
  const int half_n = (1 << bits) >> 1;
  for (int s = 1; s <= bits; ++s) {
    const int half = 1 << (s - 1);
    for (int t = threadIdx.x; t < count * half_n; t += blockDim.x) {
      const int line = t / half_n, k = t - line * half_n;
      const int pos = k & (half - 1);
      const int i0 = ((k >> (s - 1)) << s) + pos, i1 = i0 + half;
      float sn, cs;
      sincospif(sign * static_cast<float>(pos) / static_cast<float>(half), &sn, &cs);
      float2* p0 = buf + line * ls + i0 * es;
      float2* p1 = buf + line * ls + i1 * es;
      const float2 a = *p0, b = cmul(*p1, make_float2(cs, sn));
      *p0 = make_float2(a.x + b.x, a.y + b.y);
      *p1 = make_float2(a.x - b.x, a.y - b.y);
    }
    __syncthreads();
  }
}

// Bit-reverses the row index of columns [0, cols) of an nh x nw buffer, in place.
__device__ void bitrev_rows(float2* buf, int nh, int hb, int nw, int cols) {
  for (int t = threadIdx.x; t < nh * cols; t += blockDim.x) {
    const int i = t / cols, k = t - i * cols, r = bitrev(i, hb);
    if (i < r) {
      const float2 v = buf[i * nw + k];
      buf[i * nw + k] = buf[r * nw + k];
      buf[r * nw + k] = v;
    }
  }
  __syncthreads();
}

__global__ void rfft2_shared(const void* __restrict__ in, Real type, float2* __restrict__ out,
                             Strides os, int64_t batch, int h, int w, int nh, int nw, int hb,
                             int wb, int oy, int ox) {
  extern __shared__ float4 smem_raw[];
  float2* buf = reinterpret_cast<float2*>(smem_raw);  // [nh][nw]
  const int bins = nw / 2 + 1;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const int64_t base = b * static_cast<int64_t>(h) * w;
    // Window, zero-filled, into rows with bit-reversed column order.
    for (int t = threadIdx.x; t < nh * nw; t += blockDim.x) {
      const int i = t >> wb, j = t & (nw - 1);
      const int si = i + oy, sj = j + ox;
      const float v = (si >= 0 && si < h && sj >= 0 && sj < w)
                          ? load_real(in, base + static_cast<int64_t>(si) * w + sj, type) : 0.f;
      buf[i * nw + bitrev(j, wb)] = make_float2(v, 0.f);
    }
    __syncthreads();
    fft_lines(buf, nh, wb, 1, nw, -1.f);      // rows
    bitrev_rows(buf, nh, hb, nw, bins);
    fft_lines(buf, bins, hb, nw, 1, -1.f);    // columns 0..nw/2
    float2* dst = out + b * os.image;
    for (int t = threadIdx.x; t < nh * bins; t += blockDim.x) {
      const int i = t / bins, k = t - i * bins;
      dst[i * os.row + k * os.bin] = buf[i * nw + k];
    }
    __syncthreads();
  }
}

__global__ void irfft2_shared(const float2* __restrict__ in, Strides is, void* __restrict__ out,
                              Real type, int64_t batch, int nh, int nw, int hb, int wb, int out_h,
                              int out_w, int oy, int ox, float scale, const void* __restrict__ bias,
                              int64_t channels) {
  extern __shared__ float4 smem_raw[];
  float2* buf = reinterpret_cast<float2*>(smem_raw);  // [nh][nw]
  const int bins = nw / 2 + 1;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float2* src = in + b * is.image;
    // Half spectrum into columns 0..nw/2, rows bit-reversed for the column inverses.
    for (int t = threadIdx.x; t < nh * bins; t += blockDim.x) {
      const int i = t / bins, k = t - i * bins;
      buf[bitrev(i, hb) * nw + k] = src[i * is.row + k * is.bin];
    }
    __syncthreads();
    fft_lines(buf, bins, hb, nw, 1, 1.f);     // columns 0..nw/2, natural row order after
    // Each row's spectrum, its edge bins taken real, extended by Hermitian symmetry.
    for (int t = threadIdx.x; t < nh; t += blockDim.x) {
      buf[t * nw].y = 0.f;
      buf[t * nw + nw / 2].y = 0.f;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < nh * (nw - bins); t += blockDim.x) {
      const int i = t / (nw - bins), k = bins + (t - i * (nw - bins));
      const float2 v = buf[i * nw + (nw - k)];
      buf[i * nw + k] = make_float2(v.x, -v.y);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < nh * nw; t += blockDim.x) {
      const int i = t >> wb, j = t & (nw - 1), r = bitrev(j, wb);
      if (j < r) {
        const float2 v = buf[i * nw + j];
        buf[i * nw + j] = buf[i * nw + r];
        buf[i * nw + r] = v;
      }
    }
    __syncthreads();
    fft_lines(buf, nh, wb, 1, nw, 1.f);       // rows; the real part is the result
    const float add = bias != nullptr ? load_real(bias, b % channels, type) : 0.f;
    const int64_t plane = static_cast<int64_t>(out_h) * out_w;
    for (int t = threadIdx.x; t < out_h * out_w; t += blockDim.x) {
      const int i = t / out_w, j = t - i * out_w;
      const int si = i + oy, sj = j + ox;
      const bool in_basis = si >= 0 && si < nh && sj >= 0 && sj < nw;
      const float v = in_basis ? buf[si * nw + sj].x * scale : 0.f;
      store_real(out, b * plane + t, v + add, type);
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------------
// Launch

int log2i(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

unsigned grid_for(int64_t batch, int per_block) {
  const int64_t blocks = (batch + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) throw std::runtime_error("fastlayers: fbfft batch too large");
  return static_cast<unsigned>(blocks);
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t smem) {
  if (smem > 48 * 1024)
    FL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
}

// Whether a kernel whose spectrum has bin stride 1 moves it directly: where `measured` says so,
// unless `mode` says never or always.
bool use_direct(DirectIo mode, bool bin_stride_1, bool measured) {
  return bin_stride_1 &&
         (mode == DirectIo::Always || (mode == DirectIo::Measured && measured));
}

// float32 output rows and window aligned to 4 floats: 16-byte stores.
bool vec4_output(const void* out, Real type, int out_w, int ox) {
  return type == Real::F32 && out_w % 4 == 0 && ((ox % 4) + 4) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(out) % 16 == 0;
}

// float32 rows of even width at an even offset, 8-byte aligned: every float pair of a lane kernel
// lies wholly inside or wholly outside a row.
bool float_pairs(const void* p, Real type, int w, int ox) {
  return type == Real::F32 && w % 2 == 0 && ox % 2 == 0 && reinterpret_cast<uintptr_t>(p) % 8 == 0;
}

// Floats per store of the lane kernels' output rows: 4 where vec4_output allows, 2 for float
// pairs, else 1.
int lane_output_width(const void* out, Real type, int out_w, int ox) {
  return vec4_output(out, type, out_w, ox) ? 4 : float_pairs(out, type, out_w, ox) ? 2 : 1;
}

bool vec4_window(const void* in, Real type, int nw, int w, int ox) {
  return type == Real::F32 && nw >= 4 && w % 4 == 0 && ((ox % 4) + 4) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(in) % 16 == 0;
}

// One launch: `per_block` images per block of Cfg::THREADS threads, Cfg::SMEM bytes of shared
// memory.
template <typename Cfg, typename Kernel, typename... Args>
void launch(Kernel kernel, int64_t batch, int per_block, cudaStream_t stream, Args... args) {
  allow_smem(kernel, Cfg::SMEM);
  kernel<<<grid_for(batch, per_block), Cfg::THREADS, Cfg::SMEM, stream>>>(args...);
  FL_LAUNCH_CHECK();
}

// The arguments of one transform as rfft2 / irfft2 take them (fbfft.h), for the launchers of every
// family.
struct ForwardArgs {
  const void* in;
  Real type;
  float2* out;
  Strides os;
  int64_t batch;
  int h, w, nh, nw, oy, ox;
  cudaStream_t stream;
  DirectIo direct_io;
};
struct InverseArgs {
  const float2* in;
  Strides is;
  void* out;
  Real type;
  int64_t batch;
  int nh, nw, out_h, out_w, oy, ox;
  float scale;
  const void* bias;
  int64_t channels;
  bool implied;
  cudaStream_t stream;
  DirectIo direct_io;
};

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

template <int N>
void rfft_lanes_run(const ForwardArgs& a) {
  // Direct stores pay off from n = 128; below, shared memory is as fast or faster (docs/fbfft.md).
  launch<LaneConfig<N>>(use_direct(a.direct_io, a.os.bin == 1, N >= 128) ? rfft_lanes<N, true>
                                                                         : rfft_lanes<N, false>,
                        a.batch, LaneConfig<N>::G, a.stream, a.in, a.type, a.out, a.os, a.batch,
                        a.h, a.w, a.oy, a.ox, vec4_window(a.in, a.type, N, a.w, a.ox));
}

template <int N>
void irfft_lanes_run(const InverseArgs& a) {
  launch<LaneConfig<N>>(use_direct(a.direct_io, a.is.bin == 1, true) ? irfft_lanes<N, true>
                                                                      : irfft_lanes<N, false>,
                        a.batch, LaneConfig<N>::G, a.stream, a.in, a.is, a.out, a.type, a.batch,
                        a.out_h, a.out_w, a.oy, a.ox, a.scale, a.bias, a.channels,
                        vec4_output(a.out, a.type, a.out_w, a.ox));
}

template <int N>
void rfft2_lanes_run(const ForwardArgs& a) {
  using Cfg = Lane2Config<N>;
  if (vec4_window(a.in, a.type, N, a.w, a.ox)) {
    launch<Cfg>(rfft2_lanes<N, 4>, a.batch, 1, a.stream, a.in, a.type, a.out, a.os, a.batch, a.h,
                a.w, a.oy, a.ox);
  } else if (float_pairs(a.in, a.type, a.w, a.ox)) {
    launch<Cfg>(rfft2_lanes<N, 2>, a.batch, 1, a.stream, a.in, a.type, a.out, a.os, a.batch, a.h,
                a.w, a.oy, a.ox);
  } else {
    launch<Cfg>(rfft2_lanes<N, 1>, a.batch, 1, a.stream, a.in, a.type, a.out, a.os, a.batch, a.h,
                a.w, a.oy, a.ox);
  }
}

template <int N>
void irfft2_lanes_run(const InverseArgs& a) {
  launch<Lane2Config<N>>(irfft2_lanes<N>, a.batch, 1, a.stream, a.in, a.is, a.out, a.type,
                         a.batch, a.out_h, a.out_w, a.oy, a.ox, a.scale, a.bias, a.channels,
                         lane_output_width(a.out, a.type, a.out_w, a.ox));
}

void rfft2_shared_run(const ForwardArgs& a) {
  const size_t smem = sizeof(float2) * static_cast<size_t>(a.nh) * a.nw;
  allow_smem(rfft2_shared, smem);
  const int threads = std::min(256, std::max(32, a.nh * a.nw / 2));
  rfft2_shared<<<static_cast<unsigned>(std::min<int64_t>(a.batch, 1 << 20)), threads, smem,
                 a.stream>>>(a.in, a.type, a.out, a.os, a.batch, a.h, a.w, a.nh, a.nw,
                             log2i(a.nh), log2i(a.nw), a.oy, a.ox);
  FL_LAUNCH_CHECK();
}

void irfft2_shared_run(const InverseArgs& a) {
  const size_t smem = sizeof(float2) * static_cast<size_t>(a.nh) * a.nw;
  allow_smem(irfft2_shared, smem);
  const int threads = std::min(256, std::max(32, a.nh * a.nw / 2));
  irfft2_shared<<<static_cast<unsigned>(std::min<int64_t>(a.batch, 1 << 20)), threads, smem,
                  a.stream>>>(a.in, a.is, a.out, a.type, a.batch, a.nh, a.nw, log2i(a.nh),
                              log2i(a.nw), a.out_h, a.out_w, a.oy, a.ox, a.scale, a.bias,
                              a.channels);
  FL_LAUNCH_CHECK();
}

// The family that serves a size, in the order tried; sizes no entry takes go to the
// shared-memory kernels.
struct Family {
  int nh, nw;
  int64_t min_batch;  // the entry serves batches from this size
  void (*forward)(const ForwardArgs&);
  void (*inverse)(const InverseArgs&);
};

// 1-D sizes 8..64 go back to the register kernels (a line pair per thread) from this many lines:
// with enough lines to fill the GPU many times over they stream faster than the lane kernels
// (docs/fbfft.md).
constexpr int64_t kRegisters1dMinBatch = int64_t{1} << 20;

constexpr Family kFamilies[] = {
    // 2-D lane kernels
    {128, 128, 0, &rfft2_lanes_run<128>, &irfft2_lanes_run<128>},
    // register kernels
    {1, 2, 0, &rfft2_registers_run<1, 2>, &irfft2_registers_run<1, 2>},
    {1, 4, 0, &rfft2_registers_run<1, 4>, &irfft2_registers_run<1, 4>},
    {2, 2, 0, &rfft2_registers_run<2, 2>, &irfft2_registers_run<2, 2>},
    {4, 4, 0, &rfft2_registers_run<4, 4>, &irfft2_registers_run<4, 4>},
    {8, 8, 0, &rfft2_registers_run<8, 8>, &irfft2_registers_run<8, 8>},
    {16, 16, 0, &rfft2_registers_run<16, 16>, &irfft2_registers_run<16, 16>},
    {32, 32, 0, &rfft2_registers_run<32, 32>, &irfft2_registers_run<32, 32>},
    {64, 64, 0, &rfft2_registers_run<64, 64>, &irfft2_registers_run<64, 64>},
    {1, 8, kRegisters1dMinBatch, &rfft2_registers_run<1, 8>, &irfft2_registers_run<1, 8>},
    {1, 16, kRegisters1dMinBatch, &rfft2_registers_run<1, 16>, &irfft2_registers_run<1, 16>},
    {1, 32, kRegisters1dMinBatch, &rfft2_registers_run<1, 32>, &irfft2_registers_run<1, 32>},
    {1, 64, kRegisters1dMinBatch, &rfft2_registers_run<1, 64>, &irfft2_registers_run<1, 64>},
    // 1-D lane kernels
    {1, 8, 0, &rfft_lanes_run<8>, &irfft_lanes_run<8>},
    {1, 16, 0, &rfft_lanes_run<16>, &irfft_lanes_run<16>},
    {1, 32, 0, &rfft_lanes_run<32>, &irfft_lanes_run<32>},
    {1, 64, 0, &rfft_lanes_run<64>, &irfft_lanes_run<64>},
    {1, 128, 0, &rfft_lanes_run<128>, &irfft_lanes_run<128>},
    {1, 256, 0, &rfft_lanes_run<256>, &irfft_lanes_run<256>},
};

const Family* family_for(int nh, int nw, int64_t batch) {
  for (const Family& f : kFamilies)
    if (f.nh == nh && f.nw == nw && batch >= f.min_batch) return &f;
  return nullptr;
}

void check_sizes(int nh, int nw) {
  if (nh < 1 || nw < 2 || (nh & (nh - 1)) || (nw & (nw - 1)) || int64_t{nh} * nw > kMaxPoints)
    throw std::runtime_error("fastlayers: fbfft sizes must be powers of two with nh * nw <= " +
                             std::to_string(kMaxPoints));
}

}  // namespace

void rfft2(const void* in, Real type, float2* out, Strides os, int64_t batch, int h, int w, int nh,
           int nw, int oy, int ox, cudaStream_t stream, const Options& options) {
  check_sizes(nh, nw);
  if (batch == 0) return;
  const ForwardArgs a{in, type, out, os, batch, h, w, nh, nw, oy, ox, stream, options.direct_io};
  if (const Family* f = family_for(nh, nw, batch)) return f->forward(a);
  rfft2_shared_run(a);
}

void irfft2(const float2* in, Strides is, void* out, Real type, int64_t batch, int nh, int nw,
            int out_h, int out_w, int oy, int ox, float scale, const void* bias, int64_t channels,
            cudaStream_t stream, bool implied_conjugates, const Options& options) {
  check_sizes(nh, nw);
  if (implied_conjugates &&
      !(nh == nw && nh >= 4 && nh <= 32 && is.image == 1 && is.row == (nw / 2 + 1) * is.bin))
    throw std::runtime_error("fastlayers: fbfft irfft2 with implied conjugates needs a square "
                             "basis from 4 to 32 and a frequency-major spectrum");
  if (batch == 0 || out_h * out_w == 0) return;
  if (bias != nullptr && channels < 1)
    throw std::runtime_error("fastlayers: fbfft bias needs channels >= 1");
  const InverseArgs a{in,    is,    out,  type,     batch,   nh,
                      nw,    out_h, out_w, oy,      ox,      scale,
                      bias,  channels, implied_conjugates, stream, options.direct_io};
  if (const Family* f = family_for(nh, nw, batch)) return f->inverse(a);
  irfft2_shared_run(a);
}

}  // namespace fbfft
}  // namespace fastlayers
