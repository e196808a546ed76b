// The 2-D lane kernels (fbfft.h): 128 x 128, one image per block; kernels and launchers.
// Instantiated in instantiations/lanes_2d_128.cu.
#pragma once

#include <type_traits>

#include "io.cuh"
#include "lanes.cuh"
#include "launch.h"

namespace fastlayers {
namespace fbfft {
namespace detail {

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
  // shuffles (blocked_mirror); the half spectra into the columns.
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
      const float2 m = blocked_mirror<N, L, r>(z, k2, src);
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

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
