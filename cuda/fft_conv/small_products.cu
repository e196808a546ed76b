// The fbfft pipeline's per-frequency products when the input channels are few
// (fbfft_small_channels, layout.h): one kernel over row-major spectra instead of GEMMs.
#include <stdexcept>

#include "../common/check.h"
#include "../common/complex.h"
#include "pipeline.h"

namespace fastlayers {
namespace fft_conv {
namespace detail {
namespace {

// The per-frequency products of a pass when the input channels C are few, on row-major spectra
// (image i's frequency f at i * F + f) and without transposes, every product in fp32 FMA:
//   forward:     y[s, k]  = sum_c x[s, c] conj(w[k, c])     (a = x [S, C], b = w [K, C])
//   input grad:  gx[s, c] = sum_k gy[s, k] w[k, c]          (a = gy [S, K], b = w [K, C])
//   weight grad: gw[k, c] = sum_s conj(gy[s, k]) x[s, c]    (a = gy [S, K], b = x [S, C])
// A block is BX consecutive frequencies (threadIdx.x) by Y slices (threadIdx.y) of the loop
// over the other large side (k, or s for the weight grad), for kSmallR indices of its large
// output side (blockIdx.y); the C-sized side sits in registers. The gradients' partial sums meet
// in shared memory and are added in slice order (deterministic). Every element of the large
// spectrum is read or written once; the small operand (C images per index) is re-read from L2 by
// each block row. 32 x 8 threads where the frequencies are few (the 32 x 32 and 64 x 64 bases:
// more threads in flight), 128 x 1 from 4096 frequencies (128 x 128), as measured (docs/fbfft.md).
constexpr int kSmallR = 4;
template <int Y> constexpr int small_bx() { return Y == 1 ? 128 : 32; }

// f(r, c) for each element of a block's kSmallR x C register tile, unrolled, so that the tile is
// only indexed by constants (registers).
template <int C, typename F>
__device__ __forceinline__ void for_tile(F&& f) {
#pragma unroll
  for (int r = 0; r < kSmallR; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) f(r, c);
}

// The block's first index o0 of the large output side (kSmallR per block row) and how many of the
// kSmallR from there exist.
__device__ __forceinline__ int tile_rows(int64_t large, int64_t* o0) {
  *o0 = static_cast<int64_t>(blockIdx.y) * kSmallR;
  return static_cast<int>(large - *o0 < kSmallR ? large - *o0 : kSmallR);
}

template <int C, int Y>
__global__ void __launch_bounds__(small_bx<Y>() * Y)
    small_forward_kernel(const float2* __restrict__ x, const float2* __restrict__ w,
                         float2* __restrict__ y, int64_t S, int64_t K, int64_t F) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * small_bx<Y>() + threadIdx.x;
  if (f >= F) return;
  int64_t s0;
  const int rows = tile_rows(S, &s0);
  float2 xs[kSmallR][C];
  for_tile<C>([&](int r, int c) {
    xs[r][c] = r < rows ? x[((s0 + r) * C + c) * F + f] : make_float2(0.f, 0.f);
  });
#pragma unroll 2
  for (int64_t k = threadIdx.y; k < K; k += Y) {
    float2 wk[C];
#pragma unroll
    for (int c = 0; c < C; ++c) wk[c] = __ldg(w + (k * C + c) * F + f);
#pragma unroll
    for (int r = 0; r < kSmallR; ++r) {
      float2 acc = cmul_conj(xs[r][0], wk[0]);
#pragma unroll
      for (int c = 1; c < C; ++c) acc = cadd(acc, cmul_conj(xs[r][c], wk[c]));
      // Streaming stores: the large spectrum is written once and read once, by the inverse.
      if (r < rows) __stcs(y + ((s0 + r) * K + k) * F + f, acc);
    }
  }
}

// The gradients: thread (x, y) sums the loop indices y, y + Y, ...; the slices' sums of each
// output are then added in slice order, the outputs of a frequency shared among the slices.
template <int C, bool WeightGrad, int Y>
__global__ void __launch_bounds__(small_bx<Y>() * Y)
    small_grad_kernel(const float2* __restrict__ gy, const float2* __restrict__ other,
                      float2* __restrict__ out, int64_t S, int64_t K, int64_t F) {
  constexpr int OUT = kSmallR * C, BX = small_bx<Y>();
  __shared__ float2 part[Y > 1 ? Y : 1][Y > 1 ? OUT : 1][BX];
  // With one slice the loop starts at a constant 0: the address arithmetic stays uniform and each
  // unrolled iteration's loads issue together (docs/fbfft.md).
  const int tx = threadIdx.x, ty = Y > 1 ? static_cast<int>(threadIdx.y) : 0;
  const int64_t f = static_cast<int64_t>(blockIdx.x) * BX + tx;
  const bool live = f < F;
  // Input grad: outputs (s0 + r, c), loop over k; weight grad: outputs (k0 + r, c), loop over s.
  const int64_t large = WeightGrad ? K : S, loop = WeightGrad ? S : K;
  int64_t o0;
  const int rows = tile_rows(large, &o0);
  float2 acc[kSmallR][C];
  for_tile<C>([&](int r, int c) { acc[r][c] = make_float2(0.f, 0.f); });
  if (live) {
#pragma unroll 2
    for (int64_t j = ty; j < loop; j += Y) {
      float2 v[C];  // w[j, c] (input grad) or x[j, c] (weight grad)
#pragma unroll
      for (int c = 0; c < C; ++c) v[c] = __ldg(other + (j * C + c) * F + f);
      // Predicated loads: all R in flight at once (faster than loading each row's value beside
      // its FMAs; docs/fbfft.md).
      float2 g[kSmallR];
#pragma unroll
      for (int r = 0; r < kSmallR; ++r)
        g[r] = r < rows ? gy[WeightGrad ? (j * K + o0 + r) * F + f : ((o0 + r) * K + j) * F + f]
                        : make_float2(0.f, 0.f);
      for_tile<C>([&](int r, int c) {
        acc[r][c] = cadd(acc[r][c], WeightGrad ? cmul_conj(v[c], g[r]) : cmul(g[r], v[c]));
      });
    }
  }
  if constexpr (Y == 1) {
    if (!live) return;
    for_tile<C>([&](int r, int c) {
      if (r < rows) out[((o0 + r) * C + c) * F + f] = acc[r][c];
    });
  } else {
    for_tile<C>([&](int r, int c) { part[ty][r * C + c][tx] = acc[r][c]; });
    __syncthreads();
    if (!live) return;
    for (int o = ty; o < OUT; o += Y) {
      const int r = o / C, c = o - r * C;
      if (r >= rows) continue;
      float2 sum = part[0][o][tx];
#pragma unroll
      for (int t = 1; t < Y; ++t) sum = cadd(sum, part[t][o][tx]);
      out[((o0 + r) * C + c) * F + f] = sum;
    }
  }
}

template <int C, int Y>
void spectral_product_small_cy(Pass pass, const Shape& s, const float2* a, const float2* b,
                               float2* out, int64_t F, cudaStream_t stream) {
  constexpr int BX = small_bx<Y>();
  const int64_t large = pass == Pass::WeightGrad ? s.K : s.S;
  const int64_t blocks_y = (large + kSmallR - 1) / kSmallR;
  if (blocks_y > 65535)
    throw std::runtime_error("fastlayers: fft_conv small-channel product: batch too large");
  const dim3 grid(static_cast<unsigned>((F + BX - 1) / BX), static_cast<unsigned>(blocks_y));
  const dim3 block(BX, Y);
  switch (pass) {
    case Pass::Forward:
      small_forward_kernel<C, Y><<<grid, block, 0, stream>>>(a, b, out, s.S, s.K, F);
      break;
    case Pass::InputGrad:
      small_grad_kernel<C, false, Y><<<grid, block, 0, stream>>>(a, b, out, s.S, s.K, F);
      break;
    case Pass::WeightGrad:
      small_grad_kernel<C, true, Y><<<grid, block, 0, stream>>>(a, b, out, s.S, s.K, F);
      break;
  }
  FL_LAUNCH_CHECK();
}

template <int C>
void spectral_product_small_c(Pass pass, const Shape& s, const float2* a, const float2* b,
                              float2* out, int64_t F, cudaStream_t stream) {
  if (F >= 4096) return spectral_product_small_cy<C, 1>(pass, s, a, b, out, F, stream);
  spectral_product_small_cy<C, 8>(pass, s, a, b, out, F, stream);
}

}  // namespace

void spectral_product_small(Pass pass, const Shape& s, const float2* a, const float2* b,
                            float2* out, int64_t F, cudaStream_t stream) {
  static_assert(kFbfftSmallChannels == 4, "one instantiation per channel count");
  switch (s.C) {
    case 1: return spectral_product_small_c<1>(pass, s, a, b, out, F, stream);
    case 2: return spectral_product_small_c<2>(pass, s, a, b, out, F, stream);
    case 3: return spectral_product_small_c<3>(pass, s, a, b, out, F, stream);
    case 4: return spectral_product_small_c<4>(pass, s, a, b, out, F, stream);
  }
  throw std::runtime_error("fastlayers: fft_conv small-channel product: C out of range");
}

}  // namespace detail
}  // namespace fft_conv
}  // namespace fastlayers
