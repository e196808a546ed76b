// The products-and-inverse kernel (wino_pi.cuh) against the non-fused
// pipeline (pipeline.cuh: transforms, cuBLAS strided-batched GEMMs, inverse) at F(4x4, 3x3), VGG-E
// layers, forward and input gradient, fp16 and bf16: each pass's calls captured 10 to a CUDA graph
// and replayed, the median of 7 replays' CUDA-event time a call; values checked against a direct
// float32 convolution (the largest element error over the largest result). From the repository
// root:
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -Icuda -Icsrc \
//     benchmarks/micro/wino_pi.cu cuda/winograd/winograd_half.cu cuda/common/gemm.cu \
//     cuda/common/step_graph.cu -lcublas -lcuda -o wino_pi && ./wino_pi
// `./wino_pi stages` times the pipeline's stages apart, `./wino_pi gemms` its GEMMs by pass and
// layout, `./wino_pi layouts` the TF32 input gradient's two filter layouts with their GEMMs; `./wino_pi fp16` (or bf16) runs one dtype; `./wino_pi fp16 conv3_2 64 fwd` (or igrad) one pass,
// with timing variants of the kernel that leave out U's copies, V's, both, the products, or all.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/launch.cuh"
#include "winograd/layout.h"
#include "wino_pi.cuh"
#include "winograd/winograd.h"

using namespace fastlayers;
using namespace fastlayers::winograd;

#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { std::printf("%s: error %d (line %d)\n", #x, (int)e_, __LINE__); std::exit(1); } } while (0)

template <typename T>
__global__ void fill(T* x, int64_t n, float scale, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = from_compute<T>(scale * (float(h & 0xffffff) / float(0x800000) - 1.f));
  }
}

// Direct correlation in float32: forward y[s,k] = sum_c x[s,c] * w[k,c] (+ bias); input gradient
// gx[s,c] = sum_k gy[s,k] * w[k,c] turned 180 degrees, full padding.
template <typename T>
__global__ void direct(const T* a, const T* w, const T* bias, float* out, int S, int C, int K,
                       int H, int W, int ph, int pw, bool igrad) {
  const int oh = H + 2 * ph - 2, ow = W + 2 * pw - 2;
  const int RC = igrad ? C : K, DC = igrad ? K : C, RH = igrad ? H : oh, RW = igrad ? W : ow;
  const int DH = igrad ? oh : H, DW = igrad ? ow : W;
  const int64_t n = int64_t(S) * RC * RH * RW;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int x = i % RW, y = (i / RW) % RH, r = (i / RW / RH) % RC, s = i / RW / RH / RC;
    float acc = (!igrad && bias) ? to_compute(bias[r]) : 0.f;
    for (int c = 0; c < DC; ++c)
      for (int u = 0; u < 3; ++u)
        for (int v = 0; v < 3; ++v) {
          int yy, xx; float wv;
          if (!igrad) { yy = y + u - ph; xx = x + v - pw; wv = to_compute(w[((r * C + c) * 3 + u) * 3 + v]); }
          else { yy = y + u - (2 - ph); xx = x + v - (2 - pw); wv = to_compute(w[((c * C + r) * 3 + 2 - u) * 3 + 2 - v]); }
          if (yy < 0 || yy >= DH || xx < 0 || xx >= DW) continue;
          acc += to_compute(a[((int64_t(s) * DC + c) * DH + yy) * DW + xx]) * wv;
        }
    out[i] = acc;
  }
}

template <typename T, typename R>
__global__ void err(const T* y, const R* ref, int64_t n, float* out) {
  float e = 0, m = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float diff = fabsf(to_compute(y[i]) - to_compute(ref[i]));
    e = fmaxf(e, isfinite(diff) ? diff : INFINITY);  // fmaxf would drop a NaN
    m = fmaxf(m, fabsf(to_compute(ref[i])));
  }
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(e));
  atomicMax(reinterpret_cast<int*>(out + 1), __float_as_int(m));
}

struct Layer { const char* name; int C, K, H; };
// The VGG-E layers from conv1_2 (conv1_1's 3 channels are not a multiple of 8).
constexpr Layer kLayers[] = {{"conv1_2", 64, 64, 224},  {"conv2_1", 64, 128, 112},
                             {"conv2_2", 128, 128, 112}, {"conv3_1", 128, 256, 56},
                             {"conv3_2", 256, 256, 56},  {"conv4_1", 256, 512, 28},
                             {"conv4_2", 512, 512, 28},  {"conv5", 512, 512, 14}};

// The pipeline's transforms (unless kernel_only), then the products-and-inverse kernel. Its
// 16-byte copies take U's rows of C values and V's of P: both multiples of 8 here (every layer
// below, N 8 and 64).
template <typename T>
void run_pi(Pass pass, const Shape& s, const T* a, const T* w, const T* bias, T* out, T* U, T* V,
            cudaStream_t st, bool kernel_only = false, int diag = 0) {
  using Mat = Matrices<4, 3>;
  const Tiling t = tiling(pass, s);
  const bool ig = pass == Pass::InputGrad;
  const int64_t P = s.S * t.tiles(), ldv = P, ldu = s.C;
  const int64_t Mo = ig ? s.C : s.K, R = ig ? s.K : s.C;
  if (ldu % 8 != 0 || ldv % 8 != 0) {
    std::printf("run_pi: C = %lld and P = %lld must be multiples of 8\n", (long long)ldu,
                (long long)ldv);
    std::exit(1);
  }
  if (!kernel_only) {
    const FilterJob<T, Mat> filters{w, U, s.K, s.C, ig};
    const TileSource src{s.S, t.data_ch, t.data_h, t.data_w, t.th, t.tw, t.step, t.oy, t.ox};
    const TileJob<T, UseBT<Mat>> tiles{a, V, src};
    run_job<<<blocks_for(filters.threads()), kThreads, 0, st>>>(filters);
    run_job<<<blocks_for(tiles.threads()), kThreads, 0, st>>>(tiles);
  }
  pi::Args<T> g{U, V, ig ? nullptr : bias, out, Mo, R, P, ldu, ldv, s.K,
                TileTarget{s.S, t.res_ch, t.res_h, t.res_w, t.th, t.tw}, 0, false, false};
  g.blocks_m = int((Mo + pi::kBM - 1) / pi::kBM);
  g.vec16 = t.res_w % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  g.vec8 = t.res_w % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
  const int64_t blocks = g.blocks_m * ((P + pi::kBN - 1) / pi::kBN);
  const size_t smem = pi::Stage<6>::bytes(pi::kStages);
  auto launch = [&](auto k) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    k<<<unsigned(blocks), pi::kThreads, smem, st>>>(g);
  };
  if (ig) {
    launch(pi::kernel<T, Mat, true>);
  } else {
    switch (diag) {
      case 1: launch(pi::kernel<T, Mat, false, 1>); break;
      case 2: launch(pi::kernel<T, Mat, false, 2>); break;
      case 3: launch(pi::kernel<T, Mat, false, 3>); break;
      case 4: launch(pi::kernel<T, Mat, false, 4>); break;
      case 7: launch(pi::kernel<T, Mat, false, 7>); break;
      default: launch(pi::kernel<T, Mat, false>); break;
    }
  }
  CK(cudaGetLastError());
}

template <typename F>
float graph_ms(cudaStream_t st, F&& fn) {
  fn(); CK(cudaStreamSynchronize(st));
  cudaGraph_t gr; cudaGraphExec_t ex;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 10; ++i) fn();
  CK(cudaStreamEndCapture(st, &gr));
  CK(cudaGraphInstantiate(&ex, gr, 0));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  CK(cudaGraphLaunch(ex, st));
  std::vector<float> v;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(e0, st); CK(cudaGraphLaunch(ex, st)); cudaEventRecord(e1, st);
    CK(cudaEventSynchronize(e1)); float ms; cudaEventElapsedTime(&ms, e0, e1); v.push_back(ms / 10);
  }
  cudaGraphExecDestroy(ex); cudaGraphDestroy(gr);
  std::sort(v.begin(), v.end());
  return v[3];
}

static const char* g_only_layer = nullptr;  // argv: dtype layer N pass (run just that one)
static int g_only_n = 0, g_only_ig = -1;

template <typename T>
void go(const char* tname) {
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t blas; CK(cublasCreate(&blas)); CK(cublasSetStream(blas, st));
  for (int N : {8, 64})
    for (const Layer& L : kLayers)
      for (Pass pass : {Pass::Forward, Pass::InputGrad}) {
        if (g_only_layer && (std::strcmp(g_only_layer, L.name) || g_only_n != N ||
                             g_only_ig != (pass == Pass::InputGrad)))
          continue;
        const Shape s{N, L.C, L.K, L.H, L.H, 1, 1, 4};
        const bool ig = pass == Pass::InputGrad;
        const int64_t nx = int64_t(N) * L.C * L.H * L.H, ny = int64_t(N) * L.K * L.H * L.H;
        const int64_t na = ig ? ny : nx, nout = ig ? nx : ny;
        T *a, *w, *bias, *y1, *y2, *U, *V; float *ref, *e;
        const Tiling t = tiling(pass, s);
        const int64_t P = N * t.tiles();
        CK(cudaMalloc(&a, na * sizeof(T))); CK(cudaMalloc(&w, int64_t(L.K) * L.C * 9 * sizeof(T)));
        CK(cudaMalloc(&bias, L.K * sizeof(T))); CK(cudaMalloc(&y1, nout * sizeof(T)));
        CK(cudaMalloc(&y2, nout * sizeof(T)));
        CK(cudaMalloc(&U, 36 * int64_t(L.K) * L.C * sizeof(T)));
        CK(cudaMalloc(&V, 36 * int64_t(ig ? L.K : L.C) * P * sizeof(T)));
        CK(cudaMalloc(&e, 8));
        fill<<<1024, 256, 0, st>>>(a, na, 1.f, 1u);
        fill<<<1024, 256, 0, st>>>(w, int64_t(L.K) * L.C * 9, 1.f, 2u);
        fill<<<1, 256, 0, st>>>(bias, L.K, 1.f, 3u);
        const size_t wsb = buffers(pass, s, N, sizeof(T), 4, false).total;
        void* ws; CK(cudaMalloc(&ws, wsb));
        auto pipe = [&] { run<T>(pass, s, a, w, bias, y1, ws, wsb, N, st, blas, false, nullptr); };
        auto mine = [&] { run_pi<T>(pass, s, a, w, bias, y2, U, V, st); };
        pipe(); mine(); CK(cudaStreamSynchronize(st));
        float e_pipe[2] = {0, 0}, e_mine[2] = {0, 0};
        if (N == 8) {  // both against a direct float32 convolution
          CK(cudaMalloc(&ref, nout * 4));
          direct<<<2048, 256, 0, st>>>(a, w, bias, ref, N, L.C, L.K, L.H, L.H, 1, 1, ig);
          for (int k = 0; k < 2; ++k) {
            CK(cudaMemsetAsync(e, 0, 8, st));
            err<<<1024, 256, 0, st>>>(k ? y2 : y1, ref, nout, e);
            CK(cudaMemcpyAsync(k ? e_mine : e_pipe, e, 8, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
          }
          cudaFree(ref);
        } else {  // against the pipeline's result
          CK(cudaMemsetAsync(e, 0, 8, st));
          err<<<1024, 256, 0, st>>>(y2, y1, nout, e);
          CK(cudaMemcpyAsync(e_mine, e, 8, cudaMemcpyDeviceToHost, st));
          CK(cudaStreamSynchronize(st));
        }
        const float tp = graph_ms(st, pipe), tm = graph_ms(st, mine);
        const float tk = graph_ms(st, [&] { run_pi<T>(pass, s, a, w, bias, y2, U, V, st, true); });
        if (g_only_layer)
          for (int dg : {1, 2, 3, 4, 7}) {
            const float td = graph_ms(st, [&] { run_pi<T>(pass, s, a, w, bias, y2, U, V, st, true, dg); });
            std::printf("  diag %d (no%s%s%s): kernel %.4f ms\n", dg, dg & 1 ? " U" : "",
                        dg & 2 ? " V" : "", dg & 4 ? " mma" : "", td);
          }
        std::printf("%s %-8s N%-3d %-6s pipeline %.4f ms  pi %.4f ms (kernel %.4f)  pipeline/pi %.2f",
                    tname, L.name, N, ig ? "igrad" : "fwd", tp, tm, tk, tp / tm);
        if (N == 8)
          std::printf("  err/max pipeline %.2e pi %.2e", e_pipe[0] / e_pipe[1], e_mine[0] / e_mine[1]);
        else
          std::printf("  pi vs pipeline %.2e", e_mine[0] / e_mine[1]);
        std::printf("\n");
        std::fflush(stdout);
        cudaFree(a); cudaFree(w); cudaFree(bias); cudaFree(y1); cudaFree(y2); cudaFree(U); cudaFree(V);
        cudaFree(e); cudaFree(ws);
      }
}

// The pipeline's three stages timed apart (forward, F(m x m, 3x3)): the data transform, the
// alpha^2 GEMMs (cuBLAS; TF32 for float), the inverse; each stage's bytes over its time.
template <typename T, int M>
void stages(const char* tname) {
  using Mat = Matrices<M, 3>;
  using G = GemmTypes<T>;
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t blas; CK(cublasCreate(&blas)); CK(cublasSetStream(blas, st));
  for (int N : {8, 64})
    for (const Layer& L : kLayers) {
      const Shape s{N, L.C, L.K, L.H, L.H, 1, 1, M};
      const Tiling t = tiling(Pass::Forward, s);
      const int64_t a2 = t.alpha * t.alpha, P = N * t.tiles();
      const int64_t nx = int64_t(N) * L.C * L.H * L.H, ny = int64_t(N) * L.K * L.H * L.H;
      T *x, *U, *V, *y; float* Mb;
      CK(cudaMalloc(&x, nx * sizeof(T))); CK(cudaMalloc(&y, ny * sizeof(T)));
      CK(cudaMalloc(&U, a2 * L.K * L.C * sizeof(T))); CK(cudaMalloc(&V, a2 * L.C * P * sizeof(T)));
      CK(cudaMalloc(&Mb, a2 * L.K * P * sizeof(float)));
      fill<<<1024, 256, 0, st>>>(x, nx, 1.f, 1u);
      fill<<<1024, 256, 0, st>>>(U, a2 * L.K * L.C, 1.f, 2u);
      const TileSource src{N, t.data_ch, t.data_h, t.data_w, t.th, t.tw, t.step, t.oy, t.ox};
      const TileJob<T, UseBT<Mat>> tiles{x, V, src};
      const float t1 = graph_ms(st, [&] { run_job<<<blocks_for(tiles.threads()), kThreads, 0, st>>>(tiles); });
      const gemm::Dims d{CUBLAS_OP_N, CUBLAS_OP_N, P, s.K, s.C, P, s.C, P};
      const float t2 = graph_ms(st, [&] {
        gemm::strided_batched(blas, st, G::store, G::acc, true, d, V, s.C * P, U, s.K * s.C, Mb, s.K * P, a2);
      });
      const TileTarget dst{N, t.res_ch, t.res_h, t.res_w, t.th, t.tw};
      const float t3 = graph_ms(st, [&] {
        output_transform<T, Mat><<<blocks_for(t.res_ch * P), kThreads, 0, st>>>(Mb, nullptr, y, dst);
      });
      const double b1 = double(nx + a2 * L.C * P) * sizeof(T), b2 = double(a2 * L.C * P + a2 * L.K * L.C) * sizeof(T) + 4.0 * a2 * L.K * P;
      const double b3 = 4.0 * a2 * L.K * P + double(ny) * sizeof(T);
      std::printf("%s F(%dx%d) %-8s N%-3d transform %.4f ms (%.2f TB/s)  gemm %.4f ms (%.2f TB/s, %.0f TFLOP/s)  inverse %.4f ms (%.2f TB/s)\n",
                  tname, M, M, L.name, N, t1, b1 / t1 / 1e9, t2, b2 / t2 / 1e9, 2.0 * a2 * L.K * L.C * P / t2 / 1e9, t3, b3 / t3 / 1e9);
      std::fflush(stdout);
      cudaFree(x); cudaFree(y); cudaFree(U); cudaFree(V); cudaFree(Mb);
    }
}

// The alpha^2 GEMMs of each pass alone (F(4x4,3x3), cuBLAS, TF32 for float), on V [alpha^2, R,
// P] and U [alpha^2, K, C]: the forward's (U V, both as stored), the input gradient's with U
// transposed by cuBLAS (U^T V) and with U stored [alpha^2, C, K], as the pipeline does; at N 16
// also the input gradient's filter transform, into U [alpha^2, K, C] in w's order (FilterJob) and
// into U [alpha^2, C, K] (TurnedFilterJob).
template <typename T>
void gemms(const char* tname) {
  using G = GemmTypes<T>;
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t blas; CK(cublasCreate(&blas)); CK(cublasSetStream(blas, st));
  for (int N : {16, 64})
    for (const Layer& L : kLayers) {
      const Shape s{N, L.C, L.K, L.H, L.H, 1, 1, 4};
      const Tiling t = tiling(Pass::Forward, s);
      const int64_t a2 = t.alpha * t.alpha, P = N * t.tiles(), R = std::max(L.C, L.K);
      T *U, *V; float* Mb;
      CK(cudaMalloc(&U, a2 * L.K * L.C * sizeof(T))); CK(cudaMalloc(&V, a2 * R * P * sizeof(T)));
      CK(cudaMalloc(&Mb, a2 * R * P * sizeof(float)));
      fill<<<1024, 256, 0, st>>>(V, a2 * R * P, 1.f, 1u);
      fill<<<1024, 256, 0, st>>>(U, a2 * L.K * L.C, 1.f, 2u);
      auto time = [&](const gemm::Dims& d, int64_t sv, int64_t sm) {
        return graph_ms(st, [&] {
          gemm::strided_batched(blas, st, G::store, G::acc, true, d, V, sv, U, s.K * s.C, Mb, sm, a2);
        });
      };
      const float fwd = time({CUBLAS_OP_N, CUBLAS_OP_N, P, s.K, s.C, P, s.C, P}, s.C * P, s.K * P);
      const float nt = time({CUBLAS_OP_N, CUBLAS_OP_T, P, s.C, s.K, P, s.C, P}, s.K * P, s.C * P);
      const float nn = time({CUBLAS_OP_N, CUBLAS_OP_N, P, s.C, s.K, P, s.K, P}, s.K * P, s.C * P);
      std::printf("%s %-8s N%-3d forward %.4f ms  input gradient U^T %.4f ms  U stored [C, K] %.4f ms  (T/N %.3f)",
                  tname, L.name, N, fwd, nt, nn, nt / nn);
      if (N == 16) {  // the input gradient's filter transforms: by k (w's order) and by c
        T* w; CK(cudaMalloc(&w, int64_t(L.K) * L.C * 9 * sizeof(T)));
        fill<<<1024, 256, 0, st>>>(w, int64_t(L.K) * L.C * 9, 1.f, 3u);
        const FilterJob<T, Matrices<4, 3>> by_k{w, U, s.K, s.C, true};
        const TurnedFilterJob<T, Matrices<4, 3>> by_c{w, U, s.K, s.C};
        const float tk = graph_ms(st, [&] { run_job<<<blocks_for(by_k.threads()), kThreads, 0, st>>>(by_k); });
        const float tc = graph_ms(st, [&] { run_job<<<blocks_for(by_c.threads()), kThreads, 0, st>>>(by_c); });
        std::printf("  filters by k %.4f ms, by c %.4f ms", tk, tc);
        cudaFree(w);
      }
      std::printf("\n");
      std::fflush(stdout);
      cudaFree(U); cudaFree(V); cudaFree(Mb);
    }
}

// The input gradient's first launch and products in TF32, both ways (VGG-E layers, N 1..64): the
// turned filters in w's order (FilterJob) beside the tiles' transform in one launch, then U^T V
// with U transposed by cuBLAS; against TurnedFilterJob (U [alpha^2, C, K]) and U^T V untransposed,
// as the pipeline runs TF32. The inverse, the same either way, is left out. "by k again" repeats
// the first (an A/A of the timing).
template <int M>
void igrad_layouts() {
  using T = float;
  using Mat = Matrices<M, 3>;
  using G = GemmTypes<T>;
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t blas; CK(cublasCreate(&blas)); CK(cublasSetStream(blas, st));
  const auto two = [&](const auto& first, const auto& second) {
    const unsigned fb = blocks_for(first.threads()), sb = blocks_for(second.threads());
    run_two_jobs<<<fb + sb, kThreads, 0, st>>>(first, fb, second);
  };
  for (int N : {1, 2, 4, 8, 16, 64})
    for (const Layer& L : kLayers) {
      const Shape s{N, L.C, L.K, L.H, L.H, 1, 1, M};
      const Tiling t = tiling(Pass::InputGrad, s);
      const int64_t a2 = t.alpha * t.alpha, P = N * t.tiles();
      const int64_t ngy = int64_t(N) * L.K * s.oh() * s.ow(), nw = int64_t(L.K) * L.C * 9;
      T *gy, *w, *U, *V; float* Mb;
      CK(cudaMalloc(&gy, ngy * sizeof(T))); CK(cudaMalloc(&w, nw * sizeof(T)));
      CK(cudaMalloc(&U, a2 * L.K * L.C * sizeof(T))); CK(cudaMalloc(&V, a2 * L.K * P * sizeof(T)));
      CK(cudaMalloc(&Mb, a2 * L.C * P * sizeof(float)));
      fill<<<1024, 256, 0, st>>>(gy, ngy, 1.f, 1u);
      fill<<<1024, 256, 0, st>>>(w, nw, 1.f, 2u);
      const TileSource src{N, t.data_ch, t.data_h, t.data_w, t.th, t.tw, t.step, t.oy, t.ox};
      const TileJob<T, UseBT<Mat>> tiles{gy, V, src};
      const auto by_k = [&] {
        two(FilterJob<T, Mat>{w, U, s.K, s.C, true}, tiles);
        const gemm::Dims d{CUBLAS_OP_N, CUBLAS_OP_T, P, s.C, s.K, P, s.C, P};
        gemm::strided_batched(blas, st, G::store, G::acc, true, d, V, s.K * P, U, s.K * s.C, Mb,
                              s.C * P, a2);
      };
      const auto by_c = [&] {
        two(TurnedFilterJob<T, Mat>{w, U, s.K, s.C}, tiles);
        const gemm::Dims d{CUBLAS_OP_N, CUBLAS_OP_N, P, s.C, s.K, P, s.K, P};
        gemm::strided_batched(blas, st, G::store, G::acc, true, d, V, s.K * P, U, s.K * s.C, Mb,
                              s.C * P, a2);
      };
      const float k1 = graph_ms(st, by_k), c1 = graph_ms(st, by_c), k2 = graph_ms(st, by_k);
      std::printf("tf32 F(%dx%d) %-8s N%-3d P %-7lld by k %.4f ms  by c %.4f ms  by k again %.4f ms"
                  "  (by k / by c %.3f)\n", M, M, L.name, N, (long long)P, k1, c1, k2,
                  0.5f * (k1 + k2) / c1);
      std::fflush(stdout);
      cudaFree(gy); cudaFree(w); cudaFree(U); cudaFree(V); cudaFree(Mb);
    }
}

int main(int argc, char** argv) {
  if (argc == 2 && !std::strcmp(argv[1], "stages")) {
    stages<__half, 4>("fp16");
    stages<float, 4>("tf32");
    stages<__half, 2>("fp16");
    stages<float, 2>("tf32");
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "layouts")) {
    igrad_layouts<2>();
    igrad_layouts<4>();
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "gemms")) {
    gemms<float>("tf32");
    gemms<__half>("fp16");
    return 0;
  }
  if (argc == 5) {
    g_only_layer = argv[2];
    g_only_n = std::atoi(argv[3]);
    g_only_ig = std::strcmp(argv[4], "igrad") == 0;
    if (!std::strcmp(argv[1], "bf16")) go<__nv_bfloat16>("bf16"); else go<__half>("fp16");
    return 0;
  }
  if (argc != 2 || std::strcmp(argv[1], "bf16")) go<__half>("fp16");
  if (argc != 2 || std::strcmp(argv[1], "fp16")) go<__nv_bfloat16>("bf16");
  return 0;
}
