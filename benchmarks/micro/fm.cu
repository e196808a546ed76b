// Frequency-major fbfft transforms (the convolution's [F, batch] layout) with the batches and
// windows of Table 4's L2-L5 convolutions, and the padded row-major cases of bench_fbfft.py:
// 20 calls captured in a CUDA graph, replayed, CUDA-event time per call (device time; the short
// 8 x 8 kernels would otherwise time the host's launch rate). From the repository root:
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -Icuda -Icsrc \
//     benchmarks/micro/fm.cu cuda/fbfft/*.cu cuda/fbfft/instantiations/*.cu -o fm && ./fm
#include <cuda_runtime.h>
#include <cstdio>
#include <cmath>
#include <vector>
#include "fbfft/fbfft.h"
using namespace fastlayers::fbfft;
using fastlayers::Real;
__global__ void fill(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __sinf(0.37f * float(i % 100003)) + 0.25f * __cosf(0.011f * float(i % 7919));
}
struct Job { const char* name; int64_t B; int n, h, oh; bool inverse; bool row_major = false; };
int main() {
  Job jobs[] = {
    {"L2 x   64 <- 64", 8192, 64, 64, 0, false}, {"L2 w   64 <- 9", 4096, 64, 9, 0, false},
    {"L2 gy  64 <- 56", 8192, 64, 56, 0, false}, {"L2 y   64 -> 56", 8192, 64, 0, 56, true},
    {"L2 gw  64 -> 9", 4096, 64, 0, 9, true},
    {"L3 x   32 <- 32", 16384, 32, 32, 0, false}, {"L3 w   32 <- 9", 16384, 32, 9, 0, false},
    {"L3 y   32 -> 24", 16384, 32, 0, 24, true},
    {"L4 x   16 <- 16", 16384, 16, 16, 0, false}, {"L4 w   16 <- 7", 16384, 16, 7, 0, false},
    {"L4 y   16 -> 10", 16384, 16, 0, 10, true},
    {"L5 x   16 <- 13", 49152, 16, 13, 0, false}, {"L5 w   16 <- 3", 147456, 16, 3, 0, false},
    {"L5 y   16 -> 11", 49152, 16, 0, 11, true}, {"L5 gw  16 -> 3", 147456, 16, 0, 3, true},
    // row-major, the padded rows of bench_fbfft.py
    {"rm   16 <- 13", 16384, 16, 13, 0, false, true}, {"rm   32 <- 27", 16384, 32, 27, 0, false, true},
    {"rm   64 <- 57", 16384, 64, 57, 0, false, true}, {"rm   16 <- 16", 16384, 16, 16, 0, false, true},
    {"rm   64 <- 64", 16384, 64, 64, 0, false, true},
    // row-major whole images both ways, the B = 16384 rows of bench_fbfft.py
    {"rm    8 <- 8", 16384, 8, 8, 0, false, true}, {"rm    8 -> 8", 16384, 8, 0, 8, true, true},
    {"rm   16 -> 16", 16384, 16, 0, 16, true, true}, {"rm   32 <- 32", 16384, 32, 32, 0, false, true},
    {"rm   32 -> 32", 16384, 32, 0, 32, true, true}, {"rm   64 -> 64", 16384, 64, 0, 64, true, true},
  };
  float *x; float2* X;
  cudaMalloc(&x, size_t(1) << 30); cudaMalloc(&X, size_t(1) << 31);
  fill<<<1024, 256>>>(x, (size_t(1) << 30) / 4); cudaMemset(X, 0, size_t(1) << 31);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  for (auto& j : jobs) {
    const Strides fm = j.row_major ? row_major(j.n, j.n) : frequency_major(j.n, j.n, j.B);
    auto go = [&] {
      if (!j.inverse) rfft2(x, Real::F32, X, fm, j.B, j.h, j.h, j.n, j.n, 0, 0, st);
      else irfft2(X, fm, x, Real::F32, j.B, j.n, j.n, j.oh, j.oh, 0, 0, 1.f, nullptr, 1, st);
    };
    for (int i = 0; i < 3; ++i) go();
    cudaGraph_t graph; cudaGraphExec_t exec;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < 20; ++i) go();
    cudaStreamEndCapture(st, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphLaunch(exec, st);
    float ms = 1e30f;
    for (int t = 0; t < 5; ++t) {  // best of five replays
      cudaEventRecord(a, st);
      cudaGraphLaunch(exec, st);
      cudaEventRecord(b, st); cudaEventSynchronize(b);
      float m; cudaEventElapsedTime(&m, a, b);
      ms = m < ms ? m : ms;
    }
    cudaGraphExecDestroy(exec); cudaGraphDestroy(graph);
    // a checksum of the forward's spectrum (first 2^20 values), to compare builds
    double sum = 0;
    if (!j.inverse) {
      std::vector<float2> hX(1 << 20);
      cudaStreamSynchronize(st);
      cudaMemcpy(hX.data(), X, sizeof(float2) << 20, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < hX.size(); ++i) sum += hX[i].x * std::cos(0.001 * i) + hX[i].y * std::sin(0.002 * i);
    }
    printf("%-18s B=%-7lld %8.1f us  %.6e\n", j.name, (long long)j.B, ms * 1000 / 20, sum);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
