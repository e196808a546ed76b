#include "fbfft.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <type_traits>
#include <utility>
#include <stdexcept>

#include "../common/check.h"

namespace fastlayers {
namespace fbfft {
namespace {

// ---------------------------------------------------------------------------------------------
// Storage conversions (the storage type is a runtime argument: one kernel per size, not per type)

__device__ __forceinline__ float load_real(const void* p, int64_t i, Real t) {
  switch (t) {
    case Real::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case Real::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_real(void* p, int64_t i, float v, Real t) {
  switch (t) {
    case Real::F16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case Real::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// ---------------------------------------------------------------------------------------------
// Twiddles: kTwiddle.w[m] = exp(-2 pi i m / 256), m < 128, computed at compile time in double.

struct TwiddleTable {
  float2 w[128];
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

constexpr TwiddleTable make_twiddles() {
  TwiddleTable t{};
  for (int m = 0; m < 128; ++m) {
    const double a = 2.0 * kPi * m / 256.0;
    t.w[m].x = static_cast<float>(series_cos(a));
    t.w[m].y = static_cast<float>(-series_sin(a));
  }
  return t;
}

__constant__ TwiddleTable kTwiddle = make_twiddles();

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

// One radix-2 stage of span LEN over N registers, then the stages below it.
template <int N, int LEN, bool Inverse>
__device__ __forceinline__ void dif_stages(float2 (&x)[N]) {
  if constexpr (LEN >= 2) {
    constexpr int HALF = LEN / 2;
    static_for<N / 2>([&](auto T) {
      constexpr int t = decltype(T)::value;
      constexpr int j = t % HALF, lo = (t / HALF) * LEN + j, hi = lo + HALF;
      const float2 a = x[lo], b = x[hi];
      x[lo] = make_float2(a.x + b.x, a.y + b.y);
      const float2 d = make_float2(a.x - b.x, a.y - b.y);
      if constexpr (j == 0) {
        x[hi] = d;
      } else if constexpr (4 * j == LEN) {  // the twiddle is -i (forward) or +i (inverse)
        x[hi] = Inverse ? make_float2(-d.y, d.x) : make_float2(d.y, -d.x);
      } else {
        const float2 w = kTwiddle.w[j * (256 / LEN)];
        const float wy = Inverse ? -w.y : w.y;
        x[hi] = make_float2(d.x * w.x - d.y * wy, d.x * wy + d.y * w.x);
      }
    });
    dif_stages<N, HALF, Inverse>(x);
  }
}

// In-register radix-2 FFT of N points, decimation in frequency: natural order in, bit-reversed
// order out (x[bit_reverse(k)] = X[k]). Every index is a compile-time constant after unrolling,
// so x stays in registers and each twiddle is a constant-bank operand.
template <int N, bool Inverse>
__device__ __forceinline__ void fft_registers(float2 (&x)[N]) {
  dif_stages<N, N, Inverse>(x);
}

// ---------------------------------------------------------------------------------------------
// Register kernels. A block holds G images. Shared memory holds, one after the other in time
// (the same bytes):
//   the real rows, pair-interleaved: row r of the block (r = g * NH + i) at
//     (r / 2) * PS + (r % 2) * NW, PS = 4 (NW/2 | 1): 16-byte aligned rows, and an odd number of
//     16-byte units between the pairs, so the thread of a row pair reads and writes its rows in
//     float4 units without bank conflicts;
//   the half spectra of the rows, column-major per image: (g * BINS + k) * CS + i, CS = NH + 1
//     (odd) when NH > 1.

template <int NH, int NW>
struct Config {
  static constexpr int BINS = NW / 2 + 1;
  static constexpr int CS = NH > 1 ? NH + 1 : 1;
  static constexpr int PER_IMAGE = NH > 1 ? (NH > NW ? NH : NW) / 2 : 0;
  // images per block: 128 threads for 2-D; 32 row pairs (one warp) for 1-D
  static constexpr int G = NH > 1 ? (128 / PER_IMAGE > 2 ? 128 / PER_IMAGE : 2) : 64;
  // blocks per SM the register budget must allow (the 64-point kernels would take 210 registers
  // and leave 2 blocks of 4 warps; 3 blocks hide more of the load latency)
  static constexpr int MIN_BLOCKS = NH == 64 ? 3 : 1;
  static constexpr int THREADS = NH > 1 ? G * PER_IMAGE : G / 2;
  static constexpr int PAIRS = G * NH / 2;  // row pairs of the block
  static constexpr int PS = 4 * ((NW / 2) | 1);  // pair stride in floats
  static constexpr int VW = NW < 4 ? NW : 4;      // floats per vector access of a row
  static constexpr int REAL_FLOATS = PAIRS * PS;
  static constexpr int COMPLEX = G * BINS * CS;
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

// Moves the G half spectra of a block between shared memory (column-major per image, as the
// column pass keeps them) and global memory in any strided layout, coalesced: consecutive
// threads take consecutive images when images are adjacent in memory (the frequency-major
// layout of a convolution), else consecutive frequencies of one image. Store: shared -> global;
// load: global -> shared with asynchronous copies, zeros past the batch.
template <int NH, int NW, int THREADS, int G, bool Store>
__device__ __forceinline__ void spectrum_io(
    float2* cols, std::conditional_t<Store, float2*, const float2*> spectrum, const Strides st,
    int64_t b0, int64_t batch) {
  constexpr int BINS = NW / 2 + 1, CS = NH > 1 ? NH + 1 : 1, F = NH * BINS;
  const bool images_inner = st.image == 1;
  // Row-major and frequency-major layouts place frequency f = i * BINS + k at f * bin.
  const bool f_linear = st.row == BINS * st.bin;
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
    float2* sh = cols + (g * BINS + k) * CS + i;
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

template <int NH, int NW>
__global__ void __launch_bounds__(Config<NH, NW>::THREADS, Config<NH, NW>::MIN_BLOCKS)
    rfft2_registers(const void* __restrict__ in, Real type, float2* __restrict__ out, Strides os,
                    int64_t batch, int h, int w, int oy, int ox, bool vec4) {
  using Cfg = Config<NH, NW>;
  constexpr int G = Cfg::G, BINS = Cfg::BINS, CS = Cfg::CS;
  constexpr int LOG_NW = ilog2(NW), LOG_PLANE = ilog2(NH) + ilog2(NW);
  extern __shared__ float4 smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * G;
  const int64_t in_plane = static_cast<int64_t>(h) * w;

  // 1. The window of G images, zero-filled, into the pair-interleaved real rows (coalesced).
  // float32: asynchronous copies (zero-filled outside the input), all in flight at once; 16-bit
  // storage: through registers, a chunk of loads in flight per round trip.
  constexpr int ITEMS = G * NH * NW / Cfg::THREADS;
  auto locate = [&](int e, int64_t* src, int* dst) {
    const int g = e >> LOG_PLANE, r = e >> LOG_NW, j = e & (NW - 1);
    const int si = (r & (NH - 1)) + oy, sj = j + ox;
    *dst = real_row_offset<NW>(r) + j;
    const bool inside = b0 + g < batch && si >= 0 && si < h && sj >= 0 && sj < w;
    *src = inside ? (b0 + g) * in_plane + static_cast<int64_t>(si) * w + sj : -1;
  };
  if (type == Real::F32 && vec4) {
    // Rows and window aligned to 4 floats (w % 4 == 0, ox % 4 == 0): a group of 4 is wholly
    // inside or wholly outside the input, one 16-byte copy each.
    const float* src_f = static_cast<const float*>(in);
    constexpr int VEC_ITEMS = ITEMS / 4;
#pragma unroll 8
    for (int u = 0; u < VEC_ITEMS; ++u) {
      const int e = tid + u * Cfg::THREADS;
      const int r = e >> (LOG_NW - 2), j = (e & (NW / 4 - 1)) * 4;
      const int g = r >> ilog2(NH), si = (r & (NH - 1)) + oy, sj = j + ox;
      const bool inside = b0 + g < batch && si >= 0 && si < h && sj >= 0 && sj < w;
      const int64_t src = inside ? (b0 + g) * in_plane + static_cast<int64_t>(si) * w + sj : 0;
      __pipeline_memcpy_async(rows + real_row_offset<NW>(r) + j, src_f + src, 16,
                              inside ? 0 : 16);
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
  } else if (type == Real::F32) {
    const float* src_f = static_cast<const float*>(in);
#pragma unroll 8
    for (int u = 0; u < ITEMS; ++u) {
      int64_t src;
      int dst;
      locate(tid + u * Cfg::THREADS, &src, &dst);
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
        locate(tid + (u0 + u) * Cfg::THREADS, &src, &dst[u]);
        v[u] = src >= 0 ? load_real(in, src, type) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < CHUNK; ++u) rows[dst[u]] = v[u];
    }
  }
  __syncthreads();

  // 2. Rows: one complex FFT per row pair (row 2p real part, row 2p+1 imaginary part).
  float2 z[NW];
  const bool row_thread = tid < Cfg::PAIRS;
  if (row_thread) {
    constexpr int VW = Cfg::VW;
    const float* r0 = rows + tid * Cfg::PS;
    static_for<NW / VW>([&](auto M) {
      constexpr int m = decltype(M)::value;
      float a[VW], b[VW];
      load_vec<VW>(r0 + m * VW, a);
      load_vec<VW>(r0 + NW + m * VW, b);
      static_for<VW>([&](auto U) {
        constexpr int u = decltype(U)::value;
        z[m * VW + u] = make_float2(a[u], b[u]);
      });
    });
    fft_registers<NW, false>(z);
  }
  __syncthreads();  // the spectra overwrite the real rows
  if (row_thread) {
    const int r0 = 2 * tid, g0 = r0 / NH, i0 = r0 % NH;
    const int r1 = r0 + 1, g1 = r1 / NH, i1 = r1 % NH;
    static_for<BINS>([&](auto K) {
      constexpr int k = decltype(K)::value;
      // X0[k] = (Z[k] + conj(Z[-k])) / 2, X1[k] = (Z[k] - conj(Z[-k])) / 2i
      const float2 a = z[bit_reverse(k, LOG_NW)];
      const float2 m = z[bit_reverse((NW - k) & (NW - 1), LOG_NW)];
      cols[(g0 * BINS + k) * CS + i0] = make_float2(0.5f * (a.x + m.x), 0.5f * (a.y - m.y));
      cols[(g1 * BINS + k) * CS + i1] = make_float2(0.5f * (a.y + m.y), 0.5f * (m.x - a.x));
    });
  }
  __syncthreads();

  if constexpr (NH == 1) {
    // 1-D: the row spectra are the result.
    spectrum_io<NH, NW, Cfg::THREADS, G, true>(cols, out, os, b0, batch);
  } else {
    // 3. Columns: thread q of an image transforms column q; thread 0 the DC and Nyquist columns
    // together (both real: DC in the real part, Nyquist in the imaginary part).
    constexpr int HALF = NW / 2;
    constexpr int LOG_NH = ilog2(NH);
    if (tid < G * HALF) {
      const int g = tid / HALF, q = tid - g * HALF;
      float2 c[NH];
      float2* col = cols + (g * BINS + q) * CS;
      if (q == 0) {
        const float2* nyq = cols + (g * BINS + HALF) * CS;
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          c[i] = make_float2(col[i].x, nyq[i].x);
        });
      } else {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          c[i] = col[i];
        });
      }
      fft_registers<NH, false>(c);
      // Back into the thread's own column(s), natural order; DC and Nyquist split apart.
      if (q != 0) {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          col[i] = c[bit_reverse(i, LOG_NH)];
        });
      } else {
        float2* nyq = cols + (g * BINS + HALF) * CS;
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          const float2 a = c[bit_reverse(i, LOG_NH)];
          const float2 m = c[bit_reverse((NH - i) & (NH - 1), LOG_NH)];
          col[i] = make_float2(0.5f * (a.x + m.x), 0.5f * (a.y - m.y));
          nyq[i] = make_float2(0.5f * (a.y + m.y), 0.5f * (m.x - a.x));
        });
      }
    }
    __syncthreads();
    spectrum_io<NH, NW, Cfg::THREADS, G, true>(cols, out, os, b0, batch);
  }
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The inverse's last step: `live` images of real rows (pair-interleaved in shared memory) ->
// out[b0 + g] [out_h, out_w], the window at (oy, ox) of the nh x nw result, scaled, plus bias.
// Threads work in groups of L lanes (L = the largest power of two <= min(32, out_w)); a group
// writes one output row at a time, so the index arithmetic is per row, not per element.
template <int NH, int NW, int THREADS, typename T>
__device__ __forceinline__ void store_window(const float* rows, T* __restrict__ out, int64_t b0,
                                             int live, int out_h, int out_w, int oy, int ox,
                                             float scale, const T* __restrict__ bias,
                                             int64_t channels) {
  int lanes = 1;
  while (lanes * 2 <= out_w && lanes < 32) lanes *= 2;
  const int groups = THREADS / lanes, group = threadIdx.x / lanes;
  const int lane = threadIdx.x - group * lanes;
  const int64_t plane = static_cast<int64_t>(out_h) * out_w;
  auto row = [&](int g, int i) {
    const int si = i + oy;
    const float add = bias != nullptr ? to_float(bias[(b0 + g) % channels]) : 0.f;
    T* dst = out + (b0 + g) * plane + static_cast<int64_t>(i) * out_w;
    if (si >= 0 && si < NH) {
      const float* src = rows + real_row_offset<NW>(g * NH + si);
      for (int j = lane; j < out_w; j += lanes) {
        const int sj = j + ox;
        const float v = sj >= 0 && sj < NW ? src[sj] * scale : 0.f;
        dst[j] = from_float<T>(v + add);
      }
    } else {
      for (int j = lane; j < out_w; j += lanes) dst[j] = from_float<T>(add);
    }
  };
  if (out_h == 1) {  // one row per image: images across the groups
    for (int g = group; g < live; g += groups) row(g, 0);
  } else {
    for (int g = 0; g < live; ++g)
      for (int i = group; i < out_h; i += groups) row(g, i);
  }
}

template <int NH, int NW>
__global__ void __launch_bounds__(Config<NH, NW>::THREADS, Config<NH, NW>::MIN_BLOCKS)
    irfft2_registers(const float2* __restrict__ in, Strides is, void* __restrict__ out, Real type,
                     int64_t batch, int out_h, int out_w, int oy, int ox, float scale,
                     const void* __restrict__ bias, int64_t channels) {
  using Cfg = Config<NH, NW>;
  constexpr int G = Cfg::G, BINS = Cfg::BINS, CS = Cfg::CS, HALF = NW / 2;
  constexpr int LOG_NW = ilog2(NW);
  extern __shared__ float4 smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  float2* cols = reinterpret_cast<float2*>(smem_raw);
  const int tid = threadIdx.x;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * G;

  // 1. The half spectra into shared memory (coalesced, asynchronous).
  spectrum_io<NH, NW, Cfg::THREADS, G, false>(cols, in, is, b0, batch);
  __syncthreads();
  if constexpr (NH > 1) {
    // Columns, inverse. Thread 0 of an image takes the Hermitian parts of the DC and Nyquist
    // columns, whose inverses are real, as one complex column (DC + i Nyquist).
    constexpr int LOG_NH = ilog2(NH);
    if (tid < G * HALF) {
      const int g = tid / HALF, q = tid - g * HALF;
      float2* col = cols + (g * BINS + q) * CS;
      float2 c[NH];
      if (q != 0) {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          c[i] = col[i];
        });
      } else {
        const float2* nyq = cols + (g * BINS + HALF) * CS;
        static_for<NH / 2 + 1>([&](auto I) {
          constexpr int i = decltype(I)::value;
          constexpr int m = (NH - i) & (NH - 1);
          const float2 di = col[i], dm = col[m], ni = nyq[i], nm = nyq[m];
          // Hermitian parts: H[i] = (X[i] + conj(X[-i])) / 2; then DC + i Nyquist.
          const float2 hd = make_float2(0.5f * (di.x + dm.x), 0.5f * (di.y - dm.y));
          const float2 hn = make_float2(0.5f * (ni.x + nm.x), 0.5f * (ni.y - nm.y));
          c[i] = make_float2(hd.x - hn.y, hd.y + hn.x);
          // at -i: H[-i] = conj(H[i])
          c[m] = make_float2(hd.x + hn.y, hn.x - hd.y);
        });
      }
      fft_registers<NH, true>(c);
      if (q != 0) {
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          col[i] = c[bit_reverse(i, LOG_NH)];
        });
      } else {
        float2* nyq = cols + (g * BINS + HALF) * CS;
        static_for<NH>([&](auto I) {
          constexpr int i = decltype(I)::value;
          const float2 v = c[bit_reverse(i, LOG_NH)];
          col[i] = make_float2(v.x, 0.f);
          nyq[i] = make_float2(v.y, 0.f);
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
      float2 a = cols[(g0 * BINS + k) * CS + i0];
      float2 bb = cols[(g1 * BINS + k) * CS + i1];
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
  if (row_thread) {
    constexpr int VW = Cfg::VW;
    float* r0 = rows + tid * Cfg::PS;
    static_for<NW / VW>([&](auto M) {
      constexpr int m = decltype(M)::value;
      float a[VW], b[VW];
      static_for<VW>([&](auto U) {
        constexpr int u = decltype(U)::value;
        const float2 v = z[bit_reverse(m * VW + u, LOG_NW)];
        a[u] = v.x;
        b[u] = v.y;
      });
      store_vec<VW>(r0 + m * VW, a);
      store_vec<VW>(r0 + NW + m * VW, b);
    });
  }
  __syncthreads();

  // 3. The clipped window, scaled, plus bias, in the storage type (coalesced).
  const int live = static_cast<int>(batch - b0 < G ? batch - b0 : G);
  switch (type) {
    case Real::F16:
      store_window<NH, NW, Cfg::THREADS>(rows, static_cast<__half*>(out), b0, live, out_h, out_w, oy,
                                         ox, scale, static_cast<const __half*>(bias), channels);
      break;
    case Real::BF16:
      store_window<NH, NW, Cfg::THREADS>(rows, static_cast<__nv_bfloat16*>(out), b0, live, out_h,
                                         out_w, oy, ox, scale,
                                         static_cast<const __nv_bfloat16*>(bias), channels);
      break;
    default:
      store_window<NH, NW, Cfg::THREADS>(rows, static_cast<float*>(out), b0, live, out_h, out_w, oy,
                                         ox, scale, static_cast<const float*>(bias), channels);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Shared-memory kernels (every size): one image per block, radix-2 passes in shared memory.

__device__ __forceinline__ int bitrev(int v, int bits) {
  return bits == 0 ? 0 : static_cast<int>(__brev(static_cast<unsigned>(v)) >> (32 - bits));
}

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
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
      const float v = (si >= 0 && si < nh && sj >= 0 && sj < nw) ? buf[si * nw + sj].x * scale : 0.f;
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

void check_sizes(int nh, int nw) {
  if (nh < 1 || nw < 2 || (nh & (nh - 1)) || (nw & (nw - 1)) || nh * nw > 16384)
    throw std::runtime_error("fastlayers: fbfft sizes must be powers of two with nh * nw <= 16384");
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

template <int NH, int NW>
void rfft2_fast(const void* in, Real type, float2* out, Strides os, int64_t batch, int h, int w,
                int oy, int ox, cudaStream_t stream) {
  using Cfg = Config<NH, NW>;
  auto kernel = rfft2_registers<NH, NW>;
  allow_smem(kernel, Cfg::SMEM);
  const bool vec4 = type == Real::F32 && NW >= 4 && w % 4 == 0 && ((ox % 4) + 4) % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(in) % 16 == 0;
  kernel<<<grid_for(batch, Cfg::G), Cfg::THREADS, Cfg::SMEM, stream>>>(in, type, out, os, batch, h,
                                                                       w, oy, ox, vec4);
  FL_LAUNCH_CHECK();
}

template <int NH, int NW>
void irfft2_fast(const float2* in, Strides is, void* out, Real type, int64_t batch, int out_h,
                 int out_w, int oy, int ox, float scale, const void* bias, int64_t channels,
                 cudaStream_t stream) {
  using Cfg = Config<NH, NW>;
  auto kernel = irfft2_registers<NH, NW>;
  allow_smem(kernel, Cfg::SMEM);
  kernel<<<grid_for(batch, Cfg::G), Cfg::THREADS, Cfg::SMEM, stream>>>(
      in, is, out, type, batch, out_h, out_w, oy, ox, scale, bias, channels);
  FL_LAUNCH_CHECK();
}

// The sizes the register kernels serve.
#define FL_FBFFT_FAST_SIZES(X)                                                   \
  X(1, 2) X(1, 4) X(1, 8) X(1, 16) X(1, 32) X(1, 64)                             \
  X(2, 2) X(4, 4) X(8, 8) X(16, 16) X(32, 32) X(64, 64)

}  // namespace

void rfft2(const void* in, Real type, float2* out, Strides os, int64_t batch, int h, int w, int nh,
           int nw, int oy, int ox, cudaStream_t stream) {
  check_sizes(nh, nw);
  if (batch == 0) return;
#define FL_CASE(H, W)                                                       \
  if (nh == H && nw == W) {                                                 \
    rfft2_fast<H, W>(in, type, out, os, batch, h, w, oy, ox, stream);       \
    return;                                                                 \
  }
  FL_FBFFT_FAST_SIZES(FL_CASE)
#undef FL_CASE
  const size_t smem = sizeof(float2) * static_cast<size_t>(nh) * nw;
  allow_smem(rfft2_shared, smem);
  const int threads = std::min(256, std::max(32, nh * nw / 2));
  rfft2_shared<<<static_cast<unsigned>(std::min<int64_t>(batch, 1 << 20)), threads, smem, stream>>>(
      in, type, out, os, batch, h, w, nh, nw, log2i(nh), log2i(nw), oy, ox);
  FL_LAUNCH_CHECK();
}

void irfft2(const float2* in, Strides is, void* out, Real type, int64_t batch, int nh, int nw,
            int out_h, int out_w, int oy, int ox, float scale, const void* bias, int64_t channels,
            cudaStream_t stream) {
  check_sizes(nh, nw);
  if (batch == 0 || out_h * out_w == 0) return;
  if (bias != nullptr && channels < 1) throw std::runtime_error("fastlayers: fbfft bias needs channels >= 1");
#define FL_CASE(H, W)                                                                   \
  if (nh == H && nw == W) {                                                             \
    irfft2_fast<H, W>(in, is, out, type, batch, out_h, out_w, oy, ox, scale, bias, channels, \
                      stream);                                                          \
    return;                                                                             \
  }
  FL_FBFFT_FAST_SIZES(FL_CASE)
#undef FL_CASE
  const size_t smem = sizeof(float2) * static_cast<size_t>(nh) * nw;
  allow_smem(irfft2_shared, smem);
  const int threads = std::min(256, std::max(32, nh * nw / 2));
  irfft2_shared<<<static_cast<unsigned>(std::min<int64_t>(batch, 1 << 20)), threads, smem,
                  stream>>>(in, is, out, type, batch, nh, nw, log2i(nh), log2i(nw), out_h, out_w,
                            oy, ox, scale, bias, channels);
  FL_LAUNCH_CHECK();
}

}  // namespace fbfft
}  // namespace fastlayers
