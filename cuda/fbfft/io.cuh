// Moving data between global and shared memory for the register and 1-D lane kernels: the real
// rows (pair-interleaved) read through a window and written through a clipped window, and the
// half spectra in any strided layout.
#pragma once

#include <cuda_pipeline.h>

#include "common.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

// Commits this thread's asynchronous copies (__pipeline_memcpy_async) and waits for them.
__device__ __forceinline__ void wait_async_copies() {
  __pipeline_commit();
  __pipeline_wait_prior(0);
}

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
      // where the span is 16-byte aligned. A case of its own, not folded into the loop below
      // (where the image stride is a runtime factor): here the span's offsets are constants after
      // unrolling, which is faster (docs/fbfft.md).
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
        wait_async_copies();
      }
      return;
    }
  }
  if constexpr (IS > 0 && THREADS % G == 0 && (Store || NH < 64)) {
    // Frequency-major (images adjacent, frequency f at f * bin): a thread keeps one image
    // (g = tid mod G) and steps THREADS / G frequencies at a time, its offsets advanced by
    // constants; consecutive threads still take consecutive images. Faster than the general
    // loop below for every forward and for the inverses up to 32 x 32; the 64 x 64 inverse keeps
    // the loop (docs/fbfft.md).
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
          wait_async_copies();
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
        wait_async_copies();
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
    wait_async_copies();
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
  wait_async_copies();
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
  wait_async_copies();
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
  wait_async_copies();
}

// The window of G images of NH x NW at (oy, ox), zero-filled outside the input and past the
// batch, into the pair-interleaved real rows (coalesced). float32: asynchronous copies, all in
// flight at once; 16-bit storage: through registers, a chunk of loads in flight per round trip.
// An input wholly inside the window takes load_padded where rfft2_registers does not stage it
// (64 x 64 and 1-D): the convolution's zero-padded weights and gradients then skip the
// per-element path.
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
    wait_async_copies();
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

// Calls row(g, i) for every output row i < out_h of the images g < live, group `group` of
// `groups` taking one row at a time: the rows of an image across the groups, or, for images with
// fewer rows than there are groups, (image, row) pairs across them.
template <typename Row>
__device__ __forceinline__ void for_each_output_row(int groups, int group, int live, int out_h,
                                                    Row&& row) {
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
  for_each_output_row(groups, group, live, out_h, row);
}

// The inverse's last step: `live` images of real rows (pair-interleaved in shared memory) ->
// out[b0 + g] [out_h, out_w], the window at (oy, ox) of the nh x nw result, scaled, plus bias.
// Threads work in groups of L lanes (L = the largest power of two <= min(32, out_w)); a group
// writes one output row at a time, so the index arithmetic is per row, not per element.
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
  for_each_output_row(groups, group, live, out_h, row);
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

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
