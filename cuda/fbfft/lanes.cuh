// The FFT of a line spread over the lanes of a warp (part in each lane's registers, part across
// lanes with shuffles), shared by the 1-D and 2-D lane kernels.
#pragma once

#include "twiddles.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

// Lane kernels (the 1-D lines of 8..256 points, and the rows and columns of the 2-D lane
// kernels): a line FFT spread over L lanes of a warp, M = n / L points per lane, so a batch of
// 16384 lines still fills the GPU (a line per thread would leave a few warps per SM). n = L * M factors the transform in two: M-point FFTs in each lane's registers,
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


// After fft_blocked, register r of this lane holds Z[k], k = k2 + L k1 (k2 = bit_reverse_L(lane),
// k1 = bit_reverse_M(r)); returns Z[-k], the Hermitian split's other half: at lane
// src = bit_reverse_L(-k2 mod L), register r ^ (M - 1), when k2 != 0; in this lane, register
// bit_reverse_M(-k1 mod M), when k2 == 0. Every lane of the group calls it (shuffles).
template <int N, int L, int R>
__device__ __forceinline__ float2 blocked_mirror(const float2 (&z)[N / L], int k2, int src) {
  constexpr int M = N / L, k1 = bit_reverse(R, ilog2(M));
  constexpr int own = bit_reverse((M - k1) & (M - 1), ilog2(M));
  const float2 o = z[R ^ (M - 1)];
  const float mx = __shfl_sync(0xffffffffu, o.x, src, L);
  const float my = __shfl_sync(0xffffffffu, o.y, src, L);
  return k2 == 0 ? z[own] : make_float2(mx, my);
}

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
