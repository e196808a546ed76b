// The per-frequency products of both pipelines as cuBLAS GEMMs (../common/gemm.h), the conjugate
// skip's pointer and fill kernels, and the transposes to and from the GEMMs' frequency-major
// layout.
#include <algorithm>
#include <type_traits>

#include "../common/check.h"
#include "../common/gemm.h"
#include "pipeline.h"

namespace fastlayers {
namespace fft_conv {
namespace detail {
namespace {

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

}  // namespace

template <typename R>
void spectral_gemm(Pass pass, const Shape& s, const typename Complex<R>::type* at,
                   const typename Complex<R>::type* bt, typename Complex<R>::type* big_c,
                   int64_t F, bool tf32, cudaStream_t stream, cublasHandle_t blas,
                   void** ptrs, bool fill) {
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

template <typename C>
void transpose(const C* in, C* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t tiles = ((rows + 31) / 32) * ((cols + 31) / 32);
  if (tiles == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, 1 << 20));
  transpose_kernel<C><<<blocks, dim3(32, 8), 0, stream>>>(in, out, rows, cols);
  FL_LAUNCH_CHECK();
}

template void transpose<float2>(const float2*, float2*, int64_t, int64_t, cudaStream_t);
template void transpose<double2>(const double2*, double2*, int64_t, int64_t, cudaStream_t);
template void spectral_gemm<float>(Pass, const Shape&, const float2*, const float2*, float2*,
                                   int64_t, bool, cudaStream_t, cublasHandle_t, void**, bool);
template void spectral_gemm<double>(Pass, const Shape&, const double2*, const double2*, double2*,
                                    int64_t, bool, cudaStream_t, cublasHandle_t, void**, bool);

}  // namespace detail
}  // namespace fft_conv
}  // namespace fastlayers
