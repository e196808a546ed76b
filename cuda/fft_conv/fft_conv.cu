#include "fft_conv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "../common/check.h"
#include "../common/complex.h"
#include "../common/cufft_plans.h"
#include "../common/gemm.h"
#include "../common/storage.h"
#include "../fbfft/fbfft.h"

namespace fastlayers {
namespace fft_conv {
namespace {

template <typename R> struct Complex;
template <> struct Complex<float> { using type = float2; };
template <> struct Complex<double> { using type = double2; };

// in [n, h, w] (T) -> out [n, nh, nw] (R), `in` placed at (offh, offw), zeros elsewhere.
// Grid: x over the elements of one basis plane, y over planes (strided); index arithmetic is done
// once per thread, not per element.
template <typename T, typename R>
__global__ void pad_kernel(const T* __restrict__ in, R* __restrict__ out, int64_t n, int h, int w,
                           int nh, int nw, int offh, int offw) {
  const int plane = nh * nw;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= plane) return;
  const int i = e / nw, j = e - (e / nw) * nw;
  const int si = i - offh, sj = j - offw;
  const bool inside = si >= 0 && si < h && sj >= 0 && sj < w;
  const int64_t src = inside ? static_cast<int64_t>(si) * w + sj : 0;
  const int64_t in_plane = static_cast<int64_t>(h) * w;
  for (int64_t b = blockIdx.y; b < n; b += gridDim.y)
    out[b * plane + e] = inside ? to_compute(in[b * in_plane + src]) : R(0);
}

// in [rows, cols] -> out [cols, rows]
template <typename C>
__global__ void transpose_kernel(const C* __restrict__ in, C* __restrict__ out, int64_t rows,
                                 int64_t cols) {
  __shared__ C tile[32][33];
  const int64_t col_tiles = (cols + 31) / 32, row_tiles = (rows + 31) / 32;
  for (int64_t t = blockIdx.x; t < col_tiles * row_tiles; t += gridDim.x) {
    const int64_t c0 = (t % col_tiles) * 32, r0 = (t / col_tiles) * 32;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t c = c0 + k, r = r0 + threadIdx.x;
      if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

// in [n, nh, nw] (R) -> out [n, oh, ow] (T): out = in[offh + i, offw + j] * scale + bias[n % ch]
template <typename R, typename T>
__global__ void clip_kernel(const R* __restrict__ in, T* __restrict__ out, int64_t n, int nh, int nw,
                            int offh, int offw, int oh, int ow, R scale, const T* __restrict__ bias,
                            int64_t channels) {
  const int plane = oh * ow;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= plane) return;
  const int i = e / ow, j = e - (e / ow) * ow;
  const int64_t src = static_cast<int64_t>(offh + i) * nw + offw + j;
  const int64_t in_plane = static_cast<int64_t>(nh) * nw;
  for (int64_t b = blockIdx.y; b < n; b += gridDim.y) {
    R v = in[b * in_plane + src] * scale;
    if (bias != nullptr) v += to_compute(bias[b % channels]);
    out[b * plane + e] = from_compute<T>(v);
  }
}

inline dim3 plane_grid(int64_t plane, int64_t n, int threads) {
  return dim3(static_cast<unsigned>((plane + threads - 1) / threads),
              static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(n, 65535))));
}

template <typename T, typename R>
void pad(const T* in, R* out, int64_t n, int64_t h, int64_t w, const Shape& s, int64_t offh,
         int64_t offw, cudaStream_t stream) {
  if (n == 0) return;
  pad_kernel<T, R><<<plane_grid(s.nh * s.nw, n, 256), 256, 0, stream>>>(
      in, out, n, static_cast<int>(h), static_cast<int>(w), static_cast<int>(s.nh),
      static_cast<int>(s.nw), static_cast<int>(offh), static_cast<int>(offw));
  FL_LAUNCH_CHECK();
}

template <typename C>
void transpose(const C* in, C* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t tiles = ((rows + 31) / 32) * ((cols + 31) / 32);
  if (tiles == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, 1 << 20));
  transpose_kernel<C><<<blocks, dim3(32, 8), 0, stream>>>(in, out, rows, cols);
  FL_LAUNCH_CHECK();
}

template <typename R, typename T>
void clip(const R* in, T* out, int64_t n, const Shape& s, int64_t offh, int64_t offw, int64_t oh,
          int64_t ow, const T* bias, int64_t channels, cudaStream_t stream) {
  if (n == 0 || oh * ow == 0) return;
  const R scale = R(1) / static_cast<R>(s.nh * s.nw);
  clip_kernel<R, T><<<plane_grid(oh * ow, n, 256), 256, 0, stream>>>(
      in, out, n, static_cast<int>(s.nh), static_cast<int>(s.nw), static_cast<int>(offh),
      static_cast<int>(offw), static_cast<int>(oh), static_cast<int>(ow), scale, bias, channels);
  FL_LAUNCH_CHECK();
}

// A subset of the frequencies for the GEMMs (skips_conjugates): rows 0 .. nh/2 whole, then rows
// nh/2 + 1 .. nh - 1 without their DC and Nyquist bins; `ptrs` holds 3 x kept device pointers.
struct FreqSubset {
  int nh, bins;
  int64_t kept;
  void** ptrs;
};

template <typename C>
__global__ void subset_pointers(const C* a, const C* b, C* c, int64_t sa, int64_t sb, int64_t sc,
                                int nh, int bins, int64_t kept, void** ptrs) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= kept) return;
  const int64_t top = static_cast<int64_t>(nh / 2 + 1) * bins;
  int64_t f = j;
  if (j >= top) {
    const int64_t r = (j - top) / (bins - 2), k = (j - top) - r * (bins - 2);
    f = (nh / 2 + 1 + r) * bins + 1 + k;
  }
  ptrs[j] = const_cast<C*>(a + f * sa);
  ptrs[kept + j] = const_cast<C*>(b + f * sb);
  ptrs[2 * kept + j] = c + f * sc;
}

// The frequencies the GEMMs skipped: row i > nh/2 of the DC and Nyquist columns is the conjugate
// of row nh - i (M values per frequency, frequency-major). float32: pairs of values (16 bytes)
// when M is even.
template <typename C>
__global__ void fill_conjugates(C* c, int64_t M, int nh, int bins) {
  const int r = blockIdx.y, i = nh / 2 + 1 + r / 2, k = (r % 2) * (bins - 1);
  const C* src = c + (static_cast<int64_t>(nh - i) * bins + k) * M;
  C* dst = c + (static_cast<int64_t>(i) * bins + k) * M;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (std::is_same_v<C, float2>) {
    if (M % 2 == 0) {
      const float4* s4 = reinterpret_cast<const float4*>(src);
      float4* d4 = reinterpret_cast<float4*>(dst);
      for (int64_t j = first; j < M / 2; j += step) {
        const float4 v = s4[j];
        d4[j] = make_float4(v.x, -v.y, v.z, -v.w);
      }
      return;
    }
  }
  for (int64_t j = first; j < M; j += step) {
    C v = src[j];
    v.y = -v.y;
    dst[j] = v;
  }
}

// One complex GEMM per frequency, column-major as cuBLAS sees it: every frequency (strided), or
// those of `subset` (pointer arrays).
template <typename R>
void frequency_gemms(cublasHandle_t blas, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                     int64_t n, int64_t k, const typename Complex<R>::type* A, int64_t lda,
                     const typename Complex<R>::type* B, int64_t ldb,
                     typename Complex<R>::type* Cm, int64_t ldc, int64_t batch, bool tf32,
                     cudaStream_t stream, const FreqSubset* subset) {
  using C = typename Complex<R>::type;
  const int64_t sa = ta == CUBLAS_OP_N ? lda * k : lda * m;
  const int64_t sb = tb == CUBLAS_OP_N ? ldb * n : ldb * k;
  const gemm::Type type = sizeof(R) == 8 ? gemm::Type::C64 : gemm::Type::C32;
  const gemm::Dims dims{ta, tb, m, n, k, lda, ldb, ldc};
  if (subset == nullptr) {
    gemm::strided_batched(blas, stream, type, tf32, dims, A, sa, B, sb, Cm, ldc * n, batch);
    return;
  }
  // The subset's operand pointers, on the GEMMs' stream.
  subset_pointers<C><<<static_cast<unsigned>((subset->kept + 127) / 128), 128, 0, stream>>>(
      A, B, Cm, sa, sb, ldc * n, subset->nh, subset->bins, subset->kept, subset->ptrs);
  FL_LAUNCH_CHECK();
  void** p = subset->ptrs;
  const int64_t kept = subset->kept;
  gemm::pointer_batched(blas, stream, type, tf32, dims, p, p + kept, p + 2 * kept, kept);
}

// The per-frequency products of a pass: at [F, n_a], bt [F, n_b] -> out [F, n_out]. ptrs:
// workspace for the operand pointers when the GEMMs skip the conjugate rows, which are then
// filled in (for cuFFT's C2R; fbfft's inverse takes them as implied instead: fill = false);
// nullptr: every frequency.
template <typename R>
void spectral_gemm(Pass pass, const Shape& s, const typename Complex<R>::type* at,
                   const typename Complex<R>::type* bt, typename Complex<R>::type* big_c,
                   int64_t F, bool tf32, cudaStream_t stream, cublasHandle_t blas,
                   void** ptrs = nullptr, bool fill = true) {
  const int nh = static_cast<int>(s.nh), bins = static_cast<int>(s.nw / 2 + 1);
  const FreqSubset whole_subset{nh, bins, conjugate_free_freqs(s), ptrs};
  const FreqSubset* subset = ptrs != nullptr ? &whole_subset : nullptr;
  // Per frequency, row-major: at = [S, C] (x) or [S, K] (grad_y); bt = [K, C] (w) or [S, C] (x).
  switch (pass) {
    case Pass::Forward:  // Y[S,K] = X[S,C] conj(W[K,C])^T
      frequency_gemms<R>(blas, CUBLAS_OP_C, CUBLAS_OP_N, s.K, s.S, s.C, bt, s.C, at, s.C,
                         big_c, s.K, F, tf32, stream, subset);
      break;
    case Pass::InputGrad:  // GX[S,C] = GY[S,K] W[K,C]
      frequency_gemms<R>(blas, CUBLAS_OP_N, CUBLAS_OP_N, s.C, s.S, s.K, bt, s.C, at, s.K,
                         big_c, s.C, F, tf32, stream, subset);
      break;
    case Pass::WeightGrad:  // GW[K,C] = conj(GY[S,K])^T X[S,C]
      frequency_gemms<R>(blas, CUBLAS_OP_N, CUBLAS_OP_C, s.C, s.K, s.S, bt, s.C, at, s.K,
                         big_c, s.C, F, tf32, stream, subset);
      break;
  }
  if (subset != nullptr && fill) {
    const int64_t M = plan_for(pass, s).n_out;  // values per frequency of the output
    const int64_t blocks = std::min<int64_t>((M + 511) / 512, 1024);
    fill_conjugates<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(nh - 2)), 256, 0,
                      stream>>>(big_c, M, nh, bins);
    FL_LAUNCH_CHECK();
  }
}

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
// more threads in flight), 128 x 1 from 4096 frequencies (128 x 128); measured on an H200,
// benchmarks/NOTES.md.
constexpr int kSmallR = 4;
template <int Y> constexpr int small_bx() { return Y == 1 ? 128 : 32; }

template <int C, int Y>
__global__ void __launch_bounds__(small_bx<Y>() * Y)
    small_forward_kernel(const float2* __restrict__ x, const float2* __restrict__ w,
                         float2* __restrict__ y, int64_t S, int64_t K, int64_t F) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * small_bx<Y>() + threadIdx.x;
  if (f >= F) return;
  const int64_t s0 = static_cast<int64_t>(blockIdx.y) * kSmallR;
  const int rows = static_cast<int>(S - s0 < kSmallR ? S - s0 : kSmallR);
  float2 xs[kSmallR][C];
#pragma unroll
  for (int r = 0; r < kSmallR; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c)
      xs[r][c] = r < rows ? x[((s0 + r) * C + c) * F + f] : make_float2(0.f, 0.f);
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
      // Streaming stores: the large spectrum is written once and read once, by the inverse
      // (L1 on an H200: 250 -> 237 us; with the loop started at a constant 0 instead, 268 us).
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
  // unrolled iteration's loads issue together (from threadIdx.y, L1's input gradient took 343
  // against 236 us on an H200; the weight gradient 244 against 237 us).
  const int tx = threadIdx.x, ty = Y > 1 ? static_cast<int>(threadIdx.y) : 0;
  const int64_t f = static_cast<int64_t>(blockIdx.x) * BX + tx;
  const bool live = f < F;
  // Input grad: outputs (s0 + r, c), loop over k; weight grad: outputs (k0 + r, c), loop over s.
  const int64_t large = WeightGrad ? K : S, loop = WeightGrad ? S : K;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kSmallR;
  const int rows = static_cast<int>(large - o0 < kSmallR ? large - o0 : kSmallR);
  float2 acc[kSmallR][C];
#pragma unroll
  for (int r = 0; r < kSmallR; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = make_float2(0.f, 0.f);
  if (live) {
#pragma unroll 2
    for (int64_t j = ty; j < loop; j += Y) {
      float2 v[C];  // w[j, c] (input grad) or x[j, c] (weight grad)
#pragma unroll
      for (int c = 0; c < C; ++c) v[c] = __ldg(other + (j * C + c) * F + f);
      // Predicated loads: all R in flight at once (loading each row's value beside its FMAs
      // measured slower on L1's 128 x 128 basis: input grad 388 against 347 us, weight grad 368
      // against 248 us).
      float2 g[kSmallR];
#pragma unroll
      for (int r = 0; r < kSmallR; ++r)
        g[r] = r < rows ? gy[WeightGrad ? (j * K + o0 + r) * F + f : ((o0 + r) * K + j) * F + f]
                        : make_float2(0.f, 0.f);
#pragma unroll
      for (int r = 0; r < kSmallR; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c)
          acc[r][c] = cadd(acc[r][c], WeightGrad ? cmul_conj(v[c], g[r]) : cmul(g[r], v[c]));
    }
  }
  if constexpr (Y == 1) {
    if (!live) return;
#pragma unroll
    for (int r = 0; r < kSmallR; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c)
        if (r < rows) out[((o0 + r) * C + c) * F + f] = acc[r][c];
  } else {
#pragma unroll
    for (int r = 0; r < kSmallR; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) part[ty][r * C + c][tx] = acc[r][c];
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

struct Layout : BufferLayout {
  size_t work_bytes, total;
};

// The buffers plus cuFFT's work area (the plans are created and cached here).
Layout layout_for(Pass pass, const Shape& s, int real_bytes) {
  Layout L{};
  static_cast<BufferLayout&>(L) = buffer_layout(pass, s, real_bytes);
  const Plan p = plan_for(pass, s);
  const int64_t na = p.a.n, nb = p.b.n, no = p.n_out;
  using cufft_plans::Transform;
  const bool dbl = real_bytes == 8;
  const Transform fwd = dbl ? Transform::R2C_F64 : Transform::R2C_F32;
  const Transform inv = dbl ? Transform::C2R_F64 : Transform::C2R_F32;
  L.work_bytes = std::max({na ? cufft_plans::work_bytes(fwd, s.nh, s.nw, na) : size_t{0},
                           nb ? cufft_plans::work_bytes(fwd, s.nh, s.nw, nb) : size_t{0},
                           no ? cufft_plans::work_bytes(inv, s.nh, s.nw, no) : size_t{0}});
  L.total = L.work + align_up(L.work_bytes);
  return L;
}

template <typename T>
void run_impl(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* ws,
              size_t ws_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
              const Options& options) {
  using R = compute_t<T>;
  using C = typename Complex<R>::type;
  const Plan p = plan_for(pass, s);
  if (p.n_out == 0 || p.oh * p.ow == 0) return;
  const Layout L = layout_for(pass, s, sizeof(R));
  if (ws_size < L.total)
    throw std::runtime_error("fastlayers: fft_conv workspace too small: " + std::to_string(ws_size) +
                             " < " + std::to_string(L.total));
  char* base = static_cast<char*>(ws);
  C* at = reinterpret_cast<C*>(base + L.at);
  C* bt = reinterpret_cast<C*>(base + L.bt);
  R* big_r = reinterpret_cast<R*>(base + L.big);
  C* big_c = reinterpret_cast<C*>(base + L.big);
  C* scratch = reinterpret_cast<C*>(base + L.scratch);
  void* work = base + L.work;
  const int64_t F = s.freqs();

  const int64_t M = p.n_out;  // [n_out] = product of the output's two leading dims
  if (p.a.n == 0 || p.b.n == 0) {
    // An empty reduction (S == 0 for the weight gradient, C == 0 or K == 0): zeros, plus bias.
    FL_CUDA_CHECK(cudaMemsetAsync(big_r, 0, sizeof(R) * M * s.nh * s.nw, stream));
  } else {
    // Operand a: pad, R2C, transpose to [F, n_a].
    pad<T, R>(a, big_r, p.a.n, p.a.h, p.a.w, s, p.a.offh, p.a.offw, stream);
    cufft_plans::rfft2(big_r, scratch, s.nh, s.nw, p.a.n, work, stream);
    transpose<C>(scratch, at, p.a.n, F, stream);
    // Operand b.
    pad<T, R>(b, big_r, p.b.n, p.b.h, p.b.w, s, p.b.offh, p.b.offw, stream);
    cufft_plans::rfft2(big_r, scratch, s.nh, s.nw, p.b.n, work, stream);
    transpose<C>(scratch, bt, p.b.n, F, stream);

    void** ptrs = reinterpret_cast<void**>(base + L.ptrs);
    spectral_gemm<R>(pass, s, at, bt, big_c, F, tf32, stream, blas,
                     skip_conjugates(options.conjugate_skip, s, Backend::CuFFT, tf32) ? ptrs
                                                                                     : nullptr);
    // [F, n_out] -> [n_out, F] -> C2R into `big`.
    transpose<C>(big_c, scratch, F, M, stream);
    cufft_plans::irfft2(scratch, big_r, s.nh, s.nw, M, work, stream);
  }
  clip<R, T>(big_r, out, M, s, p.offh, p.offw, p.oh, p.ow, bias, s.K, stream);
}

}  // namespace

size_t workspace_bytes(Pass pass, const Shape& s, int real_bytes, Backend backend) {
  if (backend == Backend::FbFFT) return buffer_layout(pass, s, real_bytes, backend).total();
  return layout_for(pass, s, real_bytes).total;
}

template <typename T>
void run_fbfft(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* ws,
               size_t ws_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
               const Options& options) {
  if constexpr (std::is_same_v<T, double>) {
    throw std::runtime_error("fastlayers: the fbfft backend computes in float32; float64 runs on "
                             "the cuFFT backend");
  } else {
    if (!fbfft_basis_ok(s.nh, s.nw))
      throw std::runtime_error("fastlayers: the fbfft backend needs power-of-two basis sides from "
                               "2 to " + std::to_string(kFbfftConvMax));
    const Plan p = plan_for(pass, s);
    if (p.n_out == 0 || p.oh * p.ow == 0) return;
    const BufferLayout L = buffer_layout(pass, s, 4, Backend::FbFFT);
    if (ws_size < L.total())
      throw std::runtime_error("fastlayers: fft_conv workspace too small: " +
                               std::to_string(ws_size) + " < " + std::to_string(L.total()));
    char* base = static_cast<char*>(ws);
    float2* at = reinterpret_cast<float2*>(base + L.at);
    float2* bt = reinterpret_cast<float2*>(base + L.bt);
    float2* big_c = reinterpret_cast<float2*>(base + L.big);
    float2* staging = reinterpret_cast<float2*>(base + L.scratch);
    const int64_t F = s.freqs(), M = p.n_out;
    const int nh = static_cast<int>(s.nh), nw = static_cast<int>(s.nw);
    const Real type = real_of<T>();
    // Few input channels: row-major spectra throughout, the products in one kernel. Else the
    // GEMMs' frequency-major layout, written directly, or on a staged basis row-major and
    // transposed to and from it.
    const bool small = fbfft_small_channels(s), staged = fbfft_uses_staging(s);
    // GEMMs without the conjugate rows, which the inverse then takes as implied (no fill)
    const bool skip = skip_conjugates(options.conjugate_skip, s, Backend::FbFFT, tf32);
    // An operand through a window at minus its offset in the basis (implicit zero padding) into
    // its spectrum: row-major (few channels), or the GEMMs' frequency-major layout, directly or
    // row-major and then transposed.
    auto forward = [&](const T* src, const Operand& op, float2* spectrum) {
      const int h = static_cast<int>(op.h), w = static_cast<int>(op.w);
      const int oy = static_cast<int>(-op.offh), ox = static_cast<int>(-op.offw);
      if (small) {
        fbfft::rfft2(src, type, spectrum, fbfft::row_major(nh, nw), op.n, h, w, nh, nw, oy, ox,
                     stream);
      } else if (staged) {
        fbfft::rfft2(src, type, staging, fbfft::row_major(nh, nw), op.n, h, w, nh, nw, oy, ox,
                     stream);
        transpose<float2>(staging, spectrum, op.n, F, stream);
      } else {
        fbfft::rfft2(src, type, spectrum, fbfft::frequency_major(nh, nw, op.n), op.n, h, w, nh,
                     nw, oy, ox, stream);
      }
    };
    if (p.a.n == 0 || p.b.n == 0) {
      // An empty reduction: a zero spectrum, so the inverse writes zeros (plus bias).
      FL_CUDA_CHECK(cudaMemsetAsync(big_c, 0, sizeof(float2) * M * F, stream));
    } else {
      forward(a, p.a, at);
      forward(b, p.b, bt);
      if (small) {
        spectral_product_small(pass, s, at, bt, big_c, F, stream);
      } else {
        void** ptrs = reinterpret_cast<void**>(base + L.ptrs);
        spectral_gemm<float>(pass, s, at, bt, big_c, F, tf32, stream, blas,
                             skip ? ptrs : nullptr, /*fill=*/false);
      }
    }
    // Inverse from [F, n_out] (staged: transposed to [n_out, F] first; few channels: [n_out, F]
    // already), clipped to the output at (offh, offw), scaled, plus bias, cast.
    const float2* spectrum = big_c;
    fbfft::Strides strides =
        small ? fbfft::row_major(nh, nw) : fbfft::frequency_major(nh, nw, M);
    if (staged) {
      transpose<float2>(big_c, staging, F, M, stream);
      spectrum = staging;
      strides = fbfft::row_major(nh, nw);
    }
    fbfft::irfft2(spectrum, strides, out, type, M, nh, nw, static_cast<int>(p.oh),
                  static_cast<int>(p.ow), static_cast<int>(p.offh), static_cast<int>(p.offw),
                  1.f / static_cast<float>(s.nh * s.nw), bias, s.K, stream,
                  skip && p.a.n != 0 && p.b.n != 0);
  }
}

template <typename T>
void run(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* workspace,
         size_t workspace_size, cudaStream_t stream, cublasHandle_t blas, bool tf32,
         Backend backend, const Options& options) {
  if (backend == Backend::FbFFT) {
    run_fbfft<T>(pass, s, a, b, bias, out, workspace, workspace_size, stream, blas, tf32, options);
    return;
  }
  run_impl<T>(pass, s, a, b, bias, out, workspace, workspace_size, stream, blas, tf32, options);
}

#define FL_INSTANTIATE(T)                                                                     \
  template void run<T>(Pass, const Shape&, const T*, const T*, const T*, T*, void*, size_t,       \
                       cudaStream_t, cublasHandle_t, bool, Backend, const Options&);
FL_INSTANTIATE(float)
FL_INSTANTIATE(double)
FL_INSTANTIATE(__half)
FL_INSTANTIATE(__nv_bfloat16)
#undef FL_INSTANTIATE

}  // namespace fft_conv
}  // namespace fastlayers
