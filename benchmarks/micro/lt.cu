// cuBLASLt's algorithms against cublasGemmStridedBatchedEx (CUBLAS_GEMM_DEFAULT) for the
// per-frequency complex GEMMs of Table 4's L2-L5, fp32 (operands as in fft_conv.cu):
//   nvcc -O2 -std=c++17 -arch=sm_90 benchmarks/micro/lt.cu -lcublasLt -lcublas -o lt && ./lt
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuComplex.h>
#include <cstdio>
#include <vector>
#include "table4_gemms.h"
#define CK(x) do { auto s_ = (x); if ((int)s_ != 0) { printf("err %d at %s:%d\n", (int)s_, __FILE__, __LINE__); } } while (0)
int main() {
  cublasHandle_t h; CK(cublasCreate(&h));
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  size_t ws_size = 256 << 20; void* ws; cudaMalloc(&ws, ws_size);
  cuComplex *A, *B, *Cm; size_t big = size_t(1) << 28;
  cudaMalloc(&A, big); cudaMalloc(&B, big); cudaMalloc(&Cm, big);
  cudaMemset(A, 0, big); cudaMemset(B, 0, big);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (const Table4Gemm& p : kTable4Gemms) {
    const GemmArgs g = gemm_args(p);
    const auto ta = g.ta, tb = g.tb;
    const int m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
    const long long sa = g.sa, sb = g.sb, sc = g.sc;
    const int F = p.freqs();
    cuComplex one = {1, 0}, zero = {0, 0};
    auto time = [&](auto fn) {
      for (int i = 0; i < 3; ++i) fn();
      cudaEventRecord(e0); for (int i = 0; i < 10; ++i) fn(); cudaEventRecord(e1);
      cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); return ms * 100.f;  // us
    };
    float t_def = time([&] {
      cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, A, CUDA_C_32F, lda, sa, B, CUDA_C_32F, ldb, sb,
                                 &zero, Cm, CUDA_C_32F, ldc, sc, F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    double flop = 8.0 * m * n * k * F;
    printf("%s %-7s m=%d n=%d k=%d F=%d: default %.1f us (%.1f TF/s)\n", p.name, kPassNames[p.pass], m, n, k, F, t_def, flop / t_def / 1e6);
    cublasLtMatmulDesc_t desc; CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_C_32F));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_C_32F, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_C_32F, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_C_32F, m, n, ldc));
    int bc = F;
    for (auto [l, s] : {std::pair{la, sa}, std::pair{lb, sb}, std::pair{lc, sc}}) {
      CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
      CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof(s)));
    }
    cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)));
    cublasLtMatmulHeuristicResult_t res[32]; int nres = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 32, res, &nres));
    float best = 1e30; int bi = -1;
    for (int i = 0; i < nres; ++i) {
      float t = time([&] {
        cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, Cm, lc, Cm, lc, &res[i].algo, ws, ws_size, 0);
      });
      if (cudaGetLastError() != cudaSuccess) continue;
      if (t < best) { best = t; bi = i; }
    }
    printf("    Lt: %d algos, heuristic #0 %.1f us, best #%d %.1f us (%.2fx default, ws %zu)\n", nres,
           nres ? time([&] { cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, Cm, lc, Cm, lc, &res[0].algo, ws, ws_size, 0); }) : 0.f,
           bi, best, t_def / best, bi >= 0 ? res[bi].workspaceSize : 0);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
