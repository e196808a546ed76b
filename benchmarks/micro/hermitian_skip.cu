// The per-frequency complex GEMMs of Table 4's L2-L5 (fp32, operands as in fft_conv.cu) over
// every frequency of the half spectrum against only the non-redundant ones: the rows below n/2
// of the DC and Nyquist columns are conjugates of rows above, so their products are too.
//   strided F     cublasGemmStridedBatchedEx over all n (n/2 + 1) frequencies (what runs now)
//   strided F'    the same over the F' = F - 2 (n/2 - 1) non-redundant ones, as if compacted
//   pointers F'   cublasGemmBatchedEx over the F' non-redundant ones in the full layout
// each in fp32 (CUBLAS_COMPUTE_32F) and in tf32 (CUBLAS_COMPUTE_32F_FAST_TF32).
//   nvcc -O2 -std=c++17 -arch=sm_90 benchmarks/micro/hermitian_skip.cu -lcublas -o hs && ./hs
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include "table4_gemms.h"
#define CK(x) do { auto s_ = (x); if ((int)s_ != 0) printf("err %d at %s:%d\n", (int)s_, __FILE__, __LINE__); } while (0)
__global__ void fill(float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = __sinf(0.37f * float(i % 100003));
}
int main() {
  cublasHandle_t h; CK(cublasCreate(&h));
  cuComplex *A, *B, *Cm; size_t big = size_t(1) << 30;
  cudaMalloc(&A, big); cudaMalloc(&B, big); cudaMalloc(&Cm, big);
  fill<<<1024, 256>>>((float*)A, big / 4); fill<<<1024, 256>>>((float*)B, big / 4);
  void** ptrs; cudaMalloc(&ptrs, 3 * 4096 * sizeof(void*));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (cublasComputeType_t ct : {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32})
  for (const Table4Gemm& p : kTable4Gemms) {
    const GemmArgs g = gemm_args(p);
    const auto ta = g.ta, tb = g.tb;
    const int m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
    const long long sa = g.sa, sb = g.sb, sc = g.sc;
    const int bins = p.n / 2 + 1, F = p.freqs();
    std::vector<int> keep;
    for (int i = 0; i < p.n; ++i)
      for (int kk = 0; kk < bins; ++kk)
        if (!(i > p.n / 2 && (kk == 0 || kk == p.n / 2))) keep.push_back(i * bins + kk);
    const int Fp = (int)keep.size();
    std::vector<void*> hp(3 * Fp);
    for (int j = 0; j < Fp; ++j) {
      hp[j] = A + keep[j] * sa; hp[Fp + j] = B + keep[j] * sb; hp[2 * Fp + j] = Cm + keep[j] * sc;
    }
    cudaMemcpy(ptrs, hp.data(), hp.size() * sizeof(void*), cudaMemcpyHostToDevice);
    cuComplex one = {1, 0}, zero = {0, 0};
    auto time = [&](auto fn) {
      for (int i = 0; i < 3; ++i) fn();
      float best = 1e30f;
      for (int t = 0; t < 3; ++t) {
        cudaEventRecord(e0); for (int i = 0; i < 10; ++i) fn(); cudaEventRecord(e1);
        cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1);
        best = std::min(best, ms * 100.f);
      }
      return best;  // us per call
    };
    auto strided = [&](int count) {
      return time([&] {
        cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, A, CUDA_C_32F, lda, sa, B, CUDA_C_32F, ldb, sb,
                                   &zero, Cm, CUDA_C_32F, ldc, sc, count, ct, CUBLAS_GEMM_DEFAULT);
      });
    };
    const float tF = strided(F), tFp = strided(Fp);
    const float tP = time([&] {
      cublasGemmBatchedEx(h, ta, tb, m, n, k, &one, (const void* const*)ptrs, CUDA_C_32F, lda,
                          (const void* const*)(ptrs + Fp), CUDA_C_32F, ldb, &zero, (void* const*)(ptrs + 2 * Fp),
                          CUDA_C_32F, ldc, Fp, ct, CUBLAS_GEMM_DEFAULT);
    });
    printf("%s %s %-7s F=%4d F'=%4d: strided F %7.1f us, strided F' %7.1f us (%.3fx), pointers F' %7.1f us (%.3fx)\n",
           ct == CUBLAS_COMPUTE_32F ? "fp32" : "tf32", p.name, kPassNames[p.pass], F, Fp, tF, tFp, tF / tFp, tP, tF / tP);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
