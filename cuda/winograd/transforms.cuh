// The Winograd transform kernels: filters (G g G^T), tiles of an operand (T d T^T with T = B^T,
// or G for grad_output tiles of the weight gradient) and the inverse (A^T M A) into the result.
// One thread per (channel, tile) or (filter pair); every matrix entry is an immediate operand
// (matrices.h), so a transform is a short sequence of FMAs on registers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/launch.cuh"
#include "../common/storage.h"
#include "matrices.h"

namespace fastlayers {
namespace winograd {

// A transform matrix, rows x cols: B^T (alpha x alpha) or G (alpha x r) of Mat.
template <typename Mat> struct UseBT {
  static constexpr int kRows = Mat::kAlpha, kCols = Mat::kAlpha;
  __host__ __device__ static constexpr double at(int i, int j) { return Mat::BT(i, j); }
};
template <typename Mat> struct UseG {
  static constexpr int kRows = Mat::kAlpha, kCols = Mat::kR;
  __host__ __device__ static constexpr double at(int i, int j) { return Mat::G(i, j); }
};

// out = Tm d Tm^T: d [N][N] -> out [R][R], Tm R x N (Tf: UseBT / UseG); zero entries skipped.
template <typename Tf, typename F>
__device__ __forceinline__ void two_sided(const F (&d)[Tf::kCols][Tf::kCols],
                                          F (&out)[Tf::kRows][Tf::kRows]) {
  constexpr int R = Tf::kRows, N = Tf::kCols;
  F t[R][N];  // Tm d
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      F acc = 0;
#pragma unroll
      for (int k = 0; k < N; ++k)
        if (Tf::at(i, k) != 0.0) acc += static_cast<F>(Tf::at(i, k)) * d[k][j];
      t[i][j] = acc;
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      F acc = 0;
#pragma unroll
      for (int k = 0; k < N; ++k)
        if (Tf::at(j, k) != 0.0) acc += t[i][k] * static_cast<F>(Tf::at(j, k));
      out[i][j] = acc;
    }
  }
}

// out = G g G^T for one r x r filter g (turned 180 degrees where `rotate`), in T's arithmetic.
template <typename Mat, typename T>
__device__ __forceinline__ void transform_filter(const T* g, bool rotate,
                                                 compute_t<T> (&out)[Mat::kAlpha][Mat::kAlpha]) {
  constexpr int R = Mat::kR;
  compute_t<T> d[R][R];
#pragma unroll
  for (int u = 0; u < R; ++u)
#pragma unroll
    for (int v = 0; v < R; ++v)
      d[u][v] = to_compute(rotate ? g[(R - 1 - u) * R + (R - 1 - v)] : g[u * R + v]);
  two_sided<UseG<Mat>>(d, out);
}

// U [alpha^2, K, C] (storage T) = G w[k, c] G^T, w [K, C, 3, 3]; `rotate`: w turned 180 degrees
// (the input gradient's filters). One thread per (k, c), a grid-stride loop over `blocks` blocks
// from `block`. The pointers are __restrict__ parameters (not members of the job): nvcc takes the
// qualifier there only, and the operands' loads then go through the read-only path.
template <typename T, typename Mat>
__device__ __forceinline__ void filter_transform(const T* __restrict__ w, T* __restrict__ U,
                                                 int64_t K, int64_t C, bool rotate,
                                                 unsigned block, unsigned blocks) {
  using F = compute_t<T>;
  constexpr int A = Mat::kAlpha, R = Mat::kR;
  const int64_t n = K * C;
  for (int64_t i = block * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blocks} * blockDim.x) {
    F out[A][A];
    transform_filter<Mat>(w + i * R * R, rotate, out);
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
      for (int b = 0; b < A; ++b) U[(a * A + b) * n + i] = from_compute<T>(out[a][b]);
  }
}

// filter_transform as a job (run_job, run_two_jobs).
template <typename T, typename Mat>
struct FilterJob {
  const T* w;
  T* U;
  int64_t K, C;
  bool rotate;

  int64_t threads() const { return K * C; }

  __device__ __forceinline__ void operator()(unsigned block, unsigned blocks) const {
    filter_transform<T, Mat>(w, U, K, C, rotate, block, blocks);
  }
};

// The least r >= n for which r values of `bytes` each fill an odd count of 4-byte words (8-byte
// values: r odd), so that rows of r values start in distinct banks (8-byte values: within each
// half-warp, which is how 8-byte accesses are served).
__host__ __device__ constexpr int odd_words(int n, int bytes) {
  while (bytes == 8 ? n % 2 == 0 : (n * bytes) % 8 != 4) ++n;
  return n;
}

// TurnedFilterJob's tiles of filters: 32 k x 8 c, a block's threads.
constexpr int kTurnedK = 32, kTurnedC = kThreads / kTurnedK;

// The input gradient's filters: U [alpha^2, C, K] (storage T) = G w'[k, c] G^T, w' = w [K, C, 3,
// 3] turned 180 degrees. Stored by c, so that the products read U^T untransposed (pipeline.cuh
// says where). A tile of filters, 32 k x 8 c: the block copies each k's 8 filters (contiguous in
// w) into shared memory, then thread (c, k) transforms one and stores its alpha^2 values beside
// its neighbours' k, so both the reads and the writes coalesce. Tiles by a grid-stride loop over
// `blocks` blocks from `block` (block-uniform, as the barriers need); blockDim.x == kThreads.
template <typename T, typename Mat>
__device__ __forceinline__ void turned_filter_transform(const T* __restrict__ w,
                                                        T* __restrict__ U, int64_t K, int64_t C,
                                                        unsigned block, unsigned blocks) {
  using F = compute_t<T>;
  constexpr int A = Mat::kAlpha, RR = Mat::kR * Mat::kR;
  constexpr int Tk = kTurnedK, Tc = kTurnedC, kSpan = Tc * RR;
  // A k's row in shared memory: threads at consecutive k read distinct banks (odd_words).
  constexpr int kRow = odd_words(kSpan, sizeof(T));
  __shared__ T tile[Tk * kRow];
  const int64_t tiles_k = (K + Tk - 1) / Tk, tiles = tiles_k * ((C + Tc - 1) / Tc), n = K * C;
  const int kk = threadIdx.x % Tk, cc = threadIdx.x / Tk;
  for (int64_t i = block; i < tiles; i += blocks) {
    const int64_t k0 = (i % tiles_k) * Tk, c0 = (i / tiles_k) * Tc;
    const int span = static_cast<int>(C - c0 < Tc ? C - c0 : Tc) * RR;
    for (int j = threadIdx.x; j < Tk * kSpan; j += kThreads) {
      const int r = j / kSpan, e = j % kSpan;
      if (k0 + r < K && e < span) tile[r * kRow + e] = w[((k0 + r) * C + c0) * RR + e];
    }
    __syncthreads();
    if (k0 + kk < K && c0 + cc < C) {
      F out[A][A];
      transform_filter<Mat>(tile + kk * kRow + cc * RR, true, out);
      const int64_t row = (c0 + cc) * K + k0 + kk;
#pragma unroll
      for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < A; ++b) U[(a * A + b) * n + row] = from_compute<T>(out[a][b]);
    }
    __syncthreads();  // the tile is rewritten next
  }
}

// turned_filter_transform as a job (run_job, run_two_jobs).
template <typename T, typename Mat>
struct TurnedFilterJob {
  const T* w;
  T* U;
  int64_t K, C;

  int64_t threads() const {
    return (K + kTurnedK - 1) / kTurnedK * ((C + kTurnedC - 1) / kTurnedC) * kThreads;
  }

  __device__ __forceinline__ void operator()(unsigned block, unsigned blocks) const {
    turned_filter_transform<T, Mat>(w, U, K, C, block, blocks);
  }
};

// Where a tile reads its operand: [n, ch, ih, iw], tiles th x tw of `step`, the window of tile
// (ty, tx) at (ty * step - oy, tx * step - ox), zeros outside.
struct TileSource {
  int64_t n, ch, ih, iw;
  int64_t th, tw, step, oy, ox;
};

// V [rows^2, ch, P] (storage T) = Tm d Tm^T over each window d of src (P = n th tw, p =
// (sample, ty, tx)). One thread per (channel, tile), consecutive threads on consecutive tiles; a
// grid-stride loop as filter_transform's.
template <typename T, typename Tf>
__device__ __forceinline__ void tile_transform(const T* __restrict__ in, T* __restrict__ V,
                                               const TileSource& src, unsigned block,
                                               unsigned blocks) {
  using F = compute_t<T>;
  constexpr int R = Tf::kRows, N = Tf::kCols;
  const int64_t tiles = src.th * src.tw, P = src.n * tiles, total = src.ch * P;
  // The flat index split into coordinates in 32-bit arithmetic where it fits (the usual case);
  // the stride and a thread's first index stay below 2^32 by blocks_for's 2^20 blocks.
  const auto run = [&](auto zero) {
    using I = decltype(zero);
    const I tiles_i = static_cast<I>(tiles), P_i = static_cast<I>(P);
    const I tw_i = static_cast<I>(src.tw);
    for (I i = static_cast<I>(block * blockDim.x + threadIdx.x); i < static_cast<I>(total);
         i += static_cast<I>(blocks) * blockDim.x) {
      const I c = i / P_i, p = i - c * P_i;
      const I s = p / tiles_i, t = p - s * tiles_i;
      const I ty = t / tw_i, tx = t - ty * tw_i;
      const int64_t y0 = int64_t{ty} * src.step - src.oy, x0 = int64_t{tx} * src.step - src.ox;
      const T* plane = in + (int64_t{s} * src.ch + c) * src.ih * src.iw;
      F d[N][N];
#pragma unroll
      for (int u = 0; u < N; ++u) {
        const int64_t y = y0 + u;
        const bool row_in = y >= 0 && y < src.ih;
#pragma unroll
        for (int v = 0; v < N; ++v) {
          const int64_t x = x0 + v;
          d[u][v] = row_in && x >= 0 && x < src.iw ? to_compute(plane[y * src.iw + x]) : F(0);
        }
      }
      F out[R][R];
      two_sided<Tf>(d, out);
#pragma unroll
      for (int a = 0; a < R; ++a)
#pragma unroll
        for (int b = 0; b < R; ++b)
          V[(a * R + b) * total + int64_t{i}] = from_compute<T>(out[a][b]);
    }
  };
  if (total < (int64_t{1} << 31))
    run(uint32_t{0});
  else
    run(int64_t{0});
}

// tile_transform as a job.
template <typename T, typename Tf>
struct TileJob {
  const T* in;
  T* V;
  TileSource src;

  int64_t threads() const { return src.ch * src.n * src.th * src.tw; }

  __device__ __forceinline__ void operator()(unsigned block, unsigned blocks) const {
    tile_transform<T, Tf>(in, V, src, block, blocks);
  }
};

// One job over the whole grid.
template <typename Job>
__global__ void run_job(Job job) {
  job(blockIdx.x, gridDim.x);
}

// Two independent jobs in one launch (a launch costs microseconds of host time, which a pass's
// call pays on every step): blocks [0, first_blocks) run `first`, the rest `second`.
template <typename A, typename B>
__global__ void run_two_jobs(A first, unsigned first_blocks, B second) {
  if (blockIdx.x < first_blocks)
    first(blockIdx.x, first_blocks);
  else
    second(blockIdx.x - first_blocks, gridDim.x - first_blocks);
}

// A result row of m values at q (aligned to the row's bytes): one vector store where the row is 4
// or 8 bytes of 16-bit values or 8 or 16 bytes of float32, else value by value. The values are
// the same either way; a warp's rows of consecutive tiles then fill whole sectors, where single
// values reach a quarter of each at m = 4.
template <typename T, int m, typename F>
__device__ __forceinline__ void store_row(T* q, const F (&v)[m]) {
  constexpr bool k16 = std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
  constexpr bool k32 = std::is_same<T, float>::value;
  if constexpr (k32 && m == 4) {
    *reinterpret_cast<float4*>(q) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (k32 && m == 2) {
    *reinterpret_cast<float2*>(q) = make_float2(v[0], v[1]);
  } else if constexpr (k16 && (m == 2 || m == 4)) {
    uint32_t w[m / 2];
#pragma unroll
    for (int k = 0; k < m / 2; ++k) {
      const T lo = from_compute<T>(v[2 * k]), hi = from_compute<T>(v[2 * k + 1]);
      w[k] = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&lo)) |
             static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&hi)) << 16;
    }
    if constexpr (m == 4)
      *reinterpret_cast<uint2*>(q) = make_uint2(w[0], w[1]);
    else
      *reinterpret_cast<uint32_t*>(q) = w[0];
  } else {
#pragma unroll
    for (int b = 0; b < m; ++b) q[b] = from_compute<T>(v[b]);
  }
}

// The m x m output tile (ty, tx) of `plane` [oh, ow] = A^T v A + bias, clipped at the edges, in
// storage type T (v: one tile's alpha x alpha products, accumulation type F). `vec`: rows by
// store_row's vector stores where the tile lies wholly inside (the caller checks the alignment:
// plane and ow * sizeof(T) multiples of the row's bytes).
template <typename T, typename Mat, typename F>
__device__ __forceinline__ void store_inverse(const F (&v)[Mat::kAlpha][Mat::kAlpha], F bias,
                                              T* plane, int64_t ty, int64_t tx, int64_t oh,
                                              int64_t ow, bool vec = false) {
  constexpr int A = Mat::kAlpha, m = Mat::kM;
  F t1[m][A];  // A^T v
#pragma unroll
  for (int a = 0; a < m; ++a) {
#pragma unroll
    for (int b = 0; b < A; ++b) {
      F acc = 0;
#pragma unroll
      for (int k = 0; k < A; ++k)
        if (Mat::AT(a, k) != 0.0) acc += static_cast<F>(Mat::AT(a, k)) * v[k][b];
      t1[a][b] = acc;
    }
  }
  const bool inside = vec && ty * m + m <= oh && tx * m + m <= ow;
#pragma unroll
  for (int a = 0; a < m; ++a) {
    const int64_t y = ty * m + a;
    if (y >= oh) break;
    F row[m];
#pragma unroll
    for (int b = 0; b < m; ++b) {
      F acc = bias;
#pragma unroll
      for (int k = 0; k < A; ++k)
        if (Mat::AT(b, k) != 0.0) acc += t1[a][k] * static_cast<F>(Mat::AT(b, k));
      row[b] = acc;
    }
    if (inside) {
      store_row<T, m>(plane + y * ow + tx * m, row);
      continue;
    }
#pragma unroll
    for (int b = 0; b < m; ++b) {
      const int64_t x = tx * m + b;
      if (x >= ow) break;
      plane[y * ow + x] = from_compute<T>(row[b]);
    }
  }
}

// Where the inverse transforms write: [n, ch, oh, ow], tiles th x tw of m x m.
struct TileTarget {
  int64_t n, ch, oh, ow;
  int64_t th, tw;
};

// out tile = A^T M A (+ bias[channel]) for each (channel, tile) of M [alpha^2, ch, P]
// (accumulation type), clipped to oh x ow and stored as T.
template <typename T, typename Mat>
__global__ void output_transform(const compute_t<T>* __restrict__ M, const T* __restrict__ bias,
                                 T* __restrict__ out, TileTarget dst) {
  using F = compute_t<T>;
  constexpr int A = Mat::kAlpha;
  constexpr int m = Mat::kM;
  const int64_t tiles = dst.th * dst.tw, P = dst.n * tiles, total = dst.ch * P;
  // Rows by vector stores: every row start (y ow + m tx) a multiple of m values, and out aligned.
  const bool vec = dst.ow % m == 0 && reinterpret_cast<uintptr_t>(out) % (m * sizeof(T)) == 0;
  // 32-bit coordinates where they fit, as tile_transform's (and on the same grid bound).
  const auto run = [&](auto zero) {
    using I = decltype(zero);
    const I tiles_i = static_cast<I>(tiles), P_i = static_cast<I>(P);
    const I tw_i = static_cast<I>(dst.tw);
    for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < static_cast<I>(total);
         i += static_cast<I>(gridDim.x) * blockDim.x) {
      const I c = i / P_i, p = i - c * P_i;
      const I s = p / tiles_i, t = p - s * tiles_i;
      const I ty = t / tw_i, tx = t - ty * tw_i;
      F v[A][A];
#pragma unroll
      for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < A; ++b) v[a][b] = M[(a * A + b) * total + int64_t{i}];
      const F bv = bias != nullptr ? to_compute(bias[c]) : F(0);
      store_inverse<T, Mat>(v, bv, out + (int64_t{s} * dst.ch + c) * dst.oh * dst.ow, ty, tx,
                            dst.oh, dst.ow, vec);
    }
  };
  if (total < (int64_t{1} << 31))
    run(uint32_t{0});
  else
    run(int64_t{0});
}

}  // namespace winograd
}  // namespace fastlayers
