// Twiddle factors, computed at compile time, and the in-register FFT of a line (radix-2, every
// twiddle an immediate operand), the building block of the register and lane kernels.
#pragma once

#include "common.cuh"

namespace fastlayers {
namespace fbfft {
namespace detail {

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
// wait on constant-cache misses, and they wait together (docs/fbfft.md).
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

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
