// fbfft's 128x128 R2C and C2R at B = 16384 (row-major spectrum; whole, padded and clipped images),
// CUDA-event times. From the repository root:
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -Icuda -Icsrc \
//     benchmarks/micro/lanes128.cu cuda/fbfft/*.cu \
//     cuda/fbfft/instantiations/*.cu -o lanes128 && ./lanes128
#include <cuda_runtime.h>
#include <cstdio>
#include "fbfft/fbfft.h"
using namespace fastlayers::fbfft;
using fastlayers::Real;
int main() {
  const int64_t B = 16384; const int n = 128;
  float* x; float2* X; float* y;
  cudaMalloc(&x, B * n * n * 4); cudaMalloc(&X, B * n * (n / 2 + 1) * 8); cudaMalloc(&y, B * n * n * 4);
  cudaMemset(x, 0, B * n * n * 4);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  struct Job { const char* name; int dir, oh, off; };  // forward: oh = the input's side
  // the inverse clipped as L1's forward output (118 x 118, even rows) and an odd clip (117)
  const Job jobs[] = {{"R2C 128x128", 0, 128, 0}, {"R2C 128x128 <- 118", 0, 118, 0},
                      {"R2C 128x128 <- 117", 0, 117, 0}, {"C2R 128x128 -> 128", 1, 128, 0},
                      {"C2R 128x128 -> 118", 1, 118, 0}, {"C2R 128x128 -> 118 at 10", 1, 118, 10},
                      {"C2R 128x128 -> 117", 1, 117, 0}};
  for (int pass = 0; pass < 2; ++pass) {
    for (const Job& j : jobs) {
      auto go = [&] {
        if (j.dir == 0) rfft2(x, Real::F32, X, row_major(n, n), B, j.oh, j.oh, n, n, 0, 0, 0);
        else irfft2(X, row_major(n, n), y, Real::F32, B, n, n, j.oh, j.oh, j.off, j.off, 1.f / (n * n), nullptr, 1, 0);
      };
      for (int i = 0; i < 3; ++i) go();
      cudaEventRecord(a);
      for (int i = 0; i < 20; ++i) go();
      cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b);
      printf("%-26s B=16384: %.1f us\n", j.name, ms * 1000 / 20);
    }
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
