// The per-frequency complex GEMMs of Table 4's L2-L5 as cuBLAS sees them (column-major, operands
// as in cuda/fft_conv/fft_conv.cu's spectral_gemm), for the standalone GEMM timers here.
#pragma once
#include <cublas_v2.h>

struct Table4Gemm {
  const char* name;
  int S, C, K, n, pass;  // batch, channels in / out, basis side; pass 0 fprop, 1 bprop, 2 accGrad
  int freqs() const { return n * (n / 2 + 1); }
};

inline const Table4Gemm kTable4Gemms[] = {
    {"L2", 128, 64, 64, 64, 0},    {"L2", 128, 64, 64, 64, 1},    {"L2", 128, 64, 64, 64, 2},
    {"L3", 128, 128, 128, 32, 0},  {"L3", 128, 128, 128, 32, 1},  {"L3", 128, 128, 128, 32, 2},
    {"L4", 128, 128, 128, 16, 0},  {"L4", 128, 128, 128, 16, 1},  {"L4", 128, 128, 128, 16, 2},
    {"L5", 128, 384, 384, 16, 0},  {"L5", 128, 384, 384, 16, 1},  {"L5", 128, 384, 384, 16, 2}};
inline const char* const kPassNames[] = {"fprop", "bprop", "accGrad"};

// One frequency's GEMM: C (m x n) = op(A) op(B), and the element strides between frequencies.
struct GemmArgs {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  long long sa, sb, sc;
};

inline GemmArgs gemm_args(const Table4Gemm& p) {
  GemmArgs g{};
  if (p.pass == 0) {  // Y[S,K] = X[S,C] conj(W[K,C])^T
    g = {CUBLAS_OP_C, CUBLAS_OP_N, p.K, p.S, p.C, p.C, p.C, p.K};
  } else if (p.pass == 1) {  // GX[S,C] = GY[S,K] W[K,C]
    g = {CUBLAS_OP_N, CUBLAS_OP_N, p.C, p.S, p.K, p.C, p.K, p.C};
  } else {  // GW[K,C] = conj(GY[S,K])^T X[S,C]
    g = {CUBLAS_OP_N, CUBLAS_OP_C, p.C, p.K, p.S, p.C, p.K, p.C};
  }
  g.sa = g.ta == CUBLAS_OP_N ? (long long)g.lda * g.k : (long long)g.lda * g.m;
  g.sb = g.tb == CUBLAS_OP_N ? (long long)g.ldb * g.n : (long long)g.ldb * g.k;
  g.sc = (long long)g.ldc * g.n;
  return g;
}
