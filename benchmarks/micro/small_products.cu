// Variants of the small-channel spectral products (cuda/fft_conv/fft_conv.cu) on L1's shape
// (C = 3, S = 128, K = 96, 128x128 basis: F = 8320), CUDA-event times, each checked against v0:
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icuda benchmarks/micro/small_products.cu -o sp && ./sp
// v0 is the loop as it was (starting at threadIdx.y), v1 the loop from a constant 0 (taken for
// the gradients), v2 explicit groups of U iterations; the forward with and without streaming
// stores.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>

#include "common/complex.h"
using fastlayers::cadd;
using fastlayers::cmul;
using fastlayers::cmul_conj;

constexpr int R = 4;

// The gradient variants' accumulators (R outputs of the large side by C) and their store.
template <int C>
__device__ __forceinline__ void zero(float2 (&acc)[R][C]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = make_float2(0.f, 0.f);
}
template <int C>
__device__ __forceinline__ void store(const float2 (&acc)[R][C], float2* __restrict__ out,
                                      int64_t o0, int rows, int64_t F, int64_t f) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (r < rows) out[((o0 + r) * C + c) * F + f] = acc[r][c];
}

// V0 (FromZero = false): the kernel as it was with Y = 1, the loop starting at threadIdx.y;
// V1 (FromZero = true): the loop from a constant 0.
template <int C, bool WG, bool FromZero>
__global__ void __launch_bounds__(128) v01(const float2* __restrict__ gy, const float2* __restrict__ other,
                                           float2* __restrict__ out, int64_t S, int64_t K, int64_t F) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  const bool live = f < F;
  const int64_t large = WG ? K : S, loop = WG ? S : K;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * R;
  const int rows = static_cast<int>(large - o0 < R ? large - o0 : R);
  float2 acc[R][C];
  zero(acc);
  if (live) {
#pragma unroll 2
    for (int64_t j = FromZero ? 0 : threadIdx.y; j < loop; j += 1) {
      float2 v[C];
#pragma unroll
      for (int c = 0; c < C; ++c) v[c] = __ldg(other + (j * C + c) * F + f);
      float2 g[R];
#pragma unroll
      for (int r = 0; r < R; ++r)
        g[r] = r < rows ? gy[WG ? (j * K + o0 + r) * F + f : ((o0 + r) * K + j) * F + f]
                        : make_float2(0.f, 0.f);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c)
          acc[r][c] = cadd(acc[r][c], WG ? cmul_conj(v[c], g[r]) : cmul(g[r], v[c]));
    }
  }
  if (!live) return;
  store(acc, out, o0, rows, F, f);
}

// V2: loop from 0, pointers advanced per iteration (no 64-bit index products), unroll U,
// loads of a whole group of U iterations issued before its FMAs.
template <int C, bool WG, int U>
__global__ void __launch_bounds__(128) v2(const float2* __restrict__ gy, const float2* __restrict__ other,
                                          float2* __restrict__ out, int64_t S, int64_t K, int64_t F) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  if (f >= F) return;
  const int64_t large = WG ? K : S, loop = WG ? S : K;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * R;
  const int rows = static_cast<int>(large - o0 < R ? large - o0 : R);
  float2 acc[R][C];
  zero(acc);
  // row r's pointer at loop index j: WG: gy + (j*K + o0 + r)*F + f; else gy + ((o0+r)*K + j)*F + f
  const float2* gp[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    gp[r] = gy + (WG ? (o0 + (r < rows ? r : 0)) * F : ((o0 + (r < rows ? r : 0)) * K) * F) + f;
  const int64_t gstep = WG ? K * F : F;
  const float2* vp = other + f;
  const int64_t vstep = C * F;
  int64_t j = 0;
  for (; j + U <= loop; j += U) {
    float2 v[U][C], g[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int c = 0; c < C; ++c) v[u][c] = __ldg(vp + u * vstep + c * F);
#pragma unroll
      for (int r = 0; r < R; ++r) g[u][r] = __ldg(gp[r] + u * gstep);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c)
          acc[r][c] = cadd(acc[r][c], WG ? cmul_conj(v[u][c], g[u][r]) : cmul(g[u][r], v[u][c]));
    vp += U * vstep;
#pragma unroll
    for (int r = 0; r < R; ++r) gp[r] += U * gstep;
  }
  for (; j < loop; ++j) {
    float2 v[C], g[R];
#pragma unroll
    for (int c = 0; c < C; ++c) v[c] = __ldg(vp + c * F);
#pragma unroll
    for (int r = 0; r < R; ++r) g[r] = __ldg(gp[r]);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c)
        acc[r][c] = cadd(acc[r][c], WG ? cmul_conj(v[c], g[r]) : cmul(g[r], v[c]));
    vp += vstep;
#pragma unroll
    for (int r = 0; r < R; ++r) gp[r] += gstep;
  }
  store(acc, out, o0, rows, F, f);
}

// Forward as shipped (for reference); Z0: the loop from 0.
template <int C, bool Z0 = false, bool CS = false>
__global__ void __launch_bounds__(128) fwd(const float2* __restrict__ x, const float2* __restrict__ w,
                                           float2* __restrict__ y, int64_t S, int64_t K, int64_t F) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  if (f >= F) return;
  const int64_t s0 = static_cast<int64_t>(blockIdx.y) * R;
  const int rows = static_cast<int>(S - s0 < R ? S - s0 : R);
  float2 xs[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c)
      xs[r][c] = r < rows ? x[((s0 + r) * C + c) * F + f] : make_float2(0.f, 0.f);
#pragma unroll 2
  for (int64_t k = Z0 ? 0 : threadIdx.y; k < K; k += 1) {
    float2 wk[C];
#pragma unroll
    for (int c = 0; c < C; ++c) wk[c] = __ldg(w + (k * C + c) * F + f);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float2 acc = cmul_conj(xs[r][0], wk[0]);
#pragma unroll
      for (int c = 1; c < C; ++c) acc = cadd(acc, cmul_conj(xs[r][c], wk[c]));
      if (r < rows) { if (CS) __stcs(y + ((s0 + r) * K + k) * F + f, acc); else y[((s0 + r) * K + k) * F + f] = acc; }
    }
  }
}

template <typename L>
float time_it(L launch, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) launch();
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000.f / reps;
}

int main(int argc, char** argv) {
  constexpr int C = 3;
  const int64_t S = 128, K = 96, F = 128 * 65;
  const int64_t n_gy = S * K * F, n_w = K * C * F, n_x = S * C * F;
  float2 *gy, *w, *x, *out, *ref;
  cudaMalloc(&gy, n_gy * 8);
  cudaMalloc(&w, n_w * 8);
  cudaMalloc(&x, n_x * 8);
  cudaMalloc(&out, n_gy * 8);
  cudaMalloc(&ref, n_gy * 8);
  std::vector<float2> h(n_gy);
  srand(1);
  for (auto& v : h) v = make_float2(rand() / (float)RAND_MAX - 0.5f, rand() / (float)RAND_MAX - 0.5f);
  cudaMemcpy(gy, h.data(), n_gy * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(w, h.data() + 7, n_w * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(x, h.data() + 11, n_x * 8, cudaMemcpyHostToDevice);
  const int reps = 20;
  auto check = [&](const char* name, int64_t n) {
    std::vector<float2> a(n), b(n);
    cudaMemcpy(a.data(), out, n * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(b.data(), ref, n * 8, cudaMemcpyDeviceToHost);
    double md = 0;
    for (int64_t i = 0; i < n; ++i) md = fmax(md, fmax(fabs(a[i].x - b[i].x), fabs(a[i].y - b[i].y)));
    printf("  %s max|diff| vs v0 = %.3g\n", name, md);
  };
  dim3 blk(128);
  // input grad: grid y = S / R
  dim3 gi((F + 127) / 128, S / R), gw((F + 127) / 128, K / R), gf((F + 127) / 128, S / R);
  printf("input grad (C=3, S=128, K=96, F=8320), us:\n");
  float t;
  t = time_it([&] { v01<C, false, false><<<gi, blk>>>(gy, w, ref, S, K, F); }, reps);
  printf("  v0 shipped       %.1f\n", t);
  t = time_it([&] { v01<C, false, true><<<gi, blk>>>(gy, w, out, S, K, F); }, reps);
  printf("  v1 loop from 0   %.1f\n", t); check("v1", n_x);
  t = time_it([&] { v2<C, false, 1><<<gi, blk>>>(gy, w, out, S, K, F); }, reps);
  printf("  v2 U=1           %.1f\n", t); check("v2/1", n_x);
  t = time_it([&] { v2<C, false, 2><<<gi, blk>>>(gy, w, out, S, K, F); }, reps);
  printf("  v2 U=2           %.1f\n", t); check("v2/2", n_x);
  t = time_it([&] { v2<C, false, 4><<<gi, blk>>>(gy, w, out, S, K, F); }, reps);
  printf("  v2 U=4           %.1f\n", t); check("v2/4", n_x);
  printf("weight grad, us:\n");
  t = time_it([&] { v01<C, true, false><<<gw, blk>>>(gy, x, ref, S, K, F); }, reps);
  printf("  v0 shipped       %.1f\n", t);
  t = time_it([&] { v01<C, true, true><<<gw, blk>>>(gy, x, out, S, K, F); }, reps);
  printf("  v1 loop from 0   %.1f\n", t); check("v1", K * C * F);
  t = time_it([&] { v2<C, true, 2><<<gw, blk>>>(gy, x, out, S, K, F); }, reps);
  printf("  v2 U=2           %.1f\n", t); check("v2/2", K * C * F);
  t = time_it([&] { v2<C, true, 4><<<gw, blk>>>(gy, x, out, S, K, F); }, reps);
  printf("  v2 U=4           %.1f\n", t); check("v2/4", K * C * F);
  printf("forward, us:\n");
  t = time_it([&] { fwd<C><<<gf, blk>>>(x, w, out, S, K, F); }, reps);
  printf("  shipped          %.1f\n", t);
  t = time_it([&] { fwd<C, true><<<gf, blk>>>(x, w, out, S, K, F); }, reps);
  printf("  loop from 0      %.1f\n", t);
  t = time_it([&] { fwd<C><<<gf, blk>>>(x, w, out, S, K, F); }, reps);
  printf("  shipped again    %.1f\n", t);
  t = time_it([&] { fwd<C, true, true><<<gf, blk>>>(x, w, out, S, K, F); }, reps);
  printf("  from 0, __stcs   %.1f\n", t);
  t = time_it([&] { fwd<C, false, true><<<gf, blk>>>(x, w, out, S, K, F); }, reps);
  printf("  from ty, __stcs  %.1f\n", t);
  t = time_it([&] { fwd<C, true><<<gf, blk>>>(x, w, out, S, K, F); }, reps);
  printf("  loop from 0      %.1f\n", t);
  t = time_it([&] { cudaMemcpyAsync(out, gy, n_gy * 8, cudaMemcpyDeviceToDevice); }, reps);
  printf("copy of gy (%.0f MB each way): %.1f us\n", n_gy * 8 / 1e6, t);
  cudaError_t e = cudaGetLastError();
  printf("status: %s\n", cudaGetErrorString(e));
  return 0;
}
