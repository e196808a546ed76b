// The 1-D lane kernels (fbfft.h): n = 8..256, two lines per group of lanes; kernels and
// launchers. Instantiated in instantiations/lanes_1d_*.cu.
#pragma once

#include "io.cuh"
#include "lanes.cuh"
#include "launch.h"

namespace fastlayers {
namespace fbfft {
namespace detail {

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

  // Hermitian split: zm[r] = Z[-k] for the Z[k] of z[r] (blocked_mirror).
  const int k2 = lane_reverse<L>(lane);
  const int src = lane_reverse<L>((L - k2) & (L - 1));
  float2 zm[M];
  static_for<M>([&](auto R) {
    constexpr int r = decltype(R)::value;
    zm[r] = blocked_mirror<N, L, r>(z, k2, src);
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

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
