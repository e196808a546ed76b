// A prototype of the fused Winograd kernel's product stage in float32 as split TF32 by wgmma
// (sm_90a), with real layouts, checked against float64: for each item, M[p] (64 result channels
// x 32 tiles) = sum over the reduction channels of U[p] (64 x 8 a chunk) V[p] (8 x 32), for the
// 16 points p, streamed in chunks of 8 channels as the kernel streams them. Each chunk's U (the
// filter transform's 32 KB block: [point][channel][8]) and V (hi and lo planes, as a data
// transform would store them, each [point] a K-major 32 x 8 block of 8 x 4 core matrices) come
// by bulk copies on an mbarrier, 2 chunks ahead in 3 stages. Two warpgroups take 8 points each:
// A (U) read from shared memory into registers and split there (hi = cvt.rn.tf32, lo = v - hi),
// B by descriptor, each point's lo hi + hi lo + hi hi from zero into one of two temporaries, added
// into the sums after the next point's issue. What it leaves out of the kernel: the data
// transform (here V arrives by copy, already split) and the inverse transform; U is read
// unswizzled (2-way bank conflicts), where the kernel's U stage is swizzled. The rate runs write
// no sums (an item's raw sums are 4x the kernel's results) and run with V copied, V kept in
// shared memory (the kernel's case: its V comes from the transform, not from L2), and with no
// copies at all. The check runs two items a block, with V copied and with V kept, and fails
// (exit 1) where split TF32's error exceeds float32 FFMA's in order.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Icuda \
//     benchmarks/micro/wgmma_split.cu -o wgmma_split && ./wgmma_split
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include <utility>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "common/async_copy.cuh"

using fastlayers::bulk_copy;
using fastlayers::mbar_expect_tx;
using fastlayers::mbar_init_all;
using fastlayers::mbar_wait;
using fastlayers::smem_addr;

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  std::printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); return 1; } } while (0)

constexpr int kP = 16, kM = 64, kN = 32, kK = 8;
constexpr int kUBytes = kP * kM * kK * 4;  // 32 KB
constexpr int kVBytes = kP * kN * kK * 4;  // 16 KB a plane
constexpr int kStages = 3;
constexpr int kStageBytes = kUBytes + 2 * kVBytes;

__device__ __forceinline__ uint64_t gtime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// No swizzle: K-adjacent core matrices kLbo bytes apart, N-adjacent (8-row groups) kSbo, the
// layout V's planes are stored in.
constexpr uint32_t kLbo = 128, kSbo = 256;
__device__ __forceinline__ uint64_t desc(uint32_t saddr) {
  return uint64_t((saddr >> 4) & 0x3fff) | (uint64_t(kLbo >> 4) << 16) |
         (uint64_t(kSbo >> 4) << 32);
}
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma32(float (&d)[16], const uint32_t (&a)[4], uint64_t b,
                                        int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
}
__device__ __forceinline__ void split(float v, uint32_t& hi, uint32_t& lo) {
  asm volatile("cvt.rn.tf32.f32 %0, %1;" : "=r"(hi) : "f"(v));
  lo = __float_as_uint(v - __uint_as_float(hi));
}

struct Params {
  const float* U;   // [chunks][16][64][8]
  const float* V;   // [chunks][2 planes][16][32 x 8 in core matrices]
  float* M;         // [items][16][64][32]
  int chunks, items, static_v, only_hi, static_u;
  int store;        // the items' sums out (the check); else one checksum a thread at the end
  long long* cycles;
  unsigned long long* ns;
};

// The warp's A fragment of point p from U's stage ([p][m][k]): rows 16 w + g and + 8, columns t
// and t + 4 (g = lane / 4, t = lane % 4), as mma.m16n8k8's.
__device__ __forceinline__ void load_a(const float* us, int p, int w, int lane, float (&a)[4]) {
  const float* r = us + (p * kM + 16 * w + (lane >> 2)) * kK + (lane & 3);
  a[0] = r[0];
  a[1] = r[8 * kK];
  a[2] = r[4];
  a[3] = r[8 * kK + 4];
}

template <bool kOnlyHi>
__global__ void __launch_bounds__(256, 1) run(Params g) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[kStages];
  const uint32_t bar0 = smem_addr(bars);
  mbar_init_all(bar0, kStages);
  __syncthreads();
  const int wg = threadIdx.x >> 7, w = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int my_items = (g.items - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int total = my_items * g.chunks;
  auto issue = [&](int q) {
    const int s = q % kStages, c = q % g.chunks;
    const uint32_t dst = smem_addr(smem + s * kStageBytes), bar = bar0 + 8 * s;
    const uint32_t bytes = kUBytes + (g.static_v ? 0 : 2 * kVBytes);
    mbar_expect_tx(bar, bytes);
    bulk_copy(dst, g.U + size_t(c) * (kUBytes / 4), kUBytes, bar);
    if (!g.static_v)
      bulk_copy(dst + kUBytes, g.V + size_t(c) * (2 * kVBytes / 4), 2 * kVBytes, bar);
  };
  if (g.static_v) {  // chunk 0's V in every stage, once
    for (int s = 0; s < kStages; ++s)
      for (int i = threadIdx.x; i < 2 * kVBytes / 4; i += blockDim.x)
        reinterpret_cast<float*>(smem + s * kStageBytes + kUBytes)[i] = g.V[i];
    __syncthreads();
  }
  if (g.static_u) {  // no copies at all: chunk 0's U in every stage too (a rate probe)
    for (int s = 0; s < kStages; ++s)
      for (int i = threadIdx.x; i < kUBytes / 4; i += blockDim.x)
        reinterpret_cast<float*>(smem + s * kStageBytes)[i] = g.U[i];
    __syncthreads();
  }
  // the stores above are the generic proxy's; wgmma reads V through the async proxy
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0 && !g.static_u)
    for (int q = 0; q < kStages - 1 && q < total; ++q) issue(q);
  float acc[8][16];
  float tmp[2][16];
  uint32_t ahi[2][4], alo[2][4];
#pragma unroll
  for (int p = 0; p < 8; ++p)
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[p][i] = 0.f;
  const long long c0 = clock64();
  const uint64_t t0 = gtime();
  // a warpgroup's points' offset in V's planes, the same in each warp (a shuffle from lane 0)
  const uint32_t wgoff = __shfl_sync(~0u, uint32_t(wg) * 8 * 1024, 0);
  // each stage's chunks by their own copy of the body, so that the stage's offsets are constants
  auto body = [&](auto stage, int q) {
    constexpr int s = decltype(stage)::value;
    if (!g.static_u) {
      __syncthreads();  // every warp is done with chunk q - 1's stage, which chunk q + 2 takes
      if (threadIdx.x == 0 && q + kStages - 1 < total) issue(q + kStages - 1);
      mbar_wait(bar0 + 8 * s, (q / kStages) & 1);
    }
    const float* us = reinterpret_cast<const float*>(smem + s * kStageBytes);
    const uint32_t vhi = smem_addr(smem) + s * kStageBytes + kUBytes + wgoff, vlo = vhi + kVBytes;
    // A's raw values two points ahead, so that their shared-memory latency is off the path from
    // one point's issue to the next
    float raw[2][4];
    load_a(us, wg * 8, w, lane, raw[0]);
    load_a(us, wg * 8 + 1, w, lane, raw[1]);
#pragma unroll
    for (int i = 0; i < 4; ++i) split(raw[0][i], ahi[0][i], alo[0][i]);
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const int pt = wg * 8 + p;
      const uint64_t bh = desc(vhi + p * 1024), bl = desc(vlo + p * 1024);
      float (&t)[16] = tmp[p & 1];
      fence();
      if (kOnlyHi) {
        wgmma32(t, ahi[p & 1], bh, 0);
      } else {
        wgmma32(t, alo[p & 1], bh, 0);
        wgmma32(t, ahi[p & 1], bl, 1);
        wgmma32(t, ahi[p & 1], bh, 1);
      }
      commit();
      if (p + 2 < 8) load_a(us, pt + 2, w, lane, raw[p & 1]);
      // the previous point's group is done once at most this one is pending; then its A
      // registers take the next point's, and its temporary goes into the sums
      if (p > 0) wait<1>();
      if (p + 1 < 8) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          split(raw[(p + 1) & 1][i], ahi[(p + 1) & 1][i], alo[(p + 1) & 1][i]);
      }
      if (p > 0) {
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[p - 1][i] += tmp[(p + 1) & 1][i];
      }
      if (p == 7) {
        wait<0>();
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[7][i] += t[i];
      }
    }
    if (g.store && q % g.chunks == g.chunks - 1) {  // the item's end: its sums out, from zero
      const int item = blockIdx.x + (q / g.chunks) * gridDim.x;
      float* out = g.M + size_t(item) * kP * kM * kN;
      const int r = 16 * w + (lane >> 2), c = 2 * (lane & 3);
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        float* o = out + size_t(wg * 8 + p) * kM * kN;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          o[r * kN + 8 * j + c] = acc[p][4 * j];
          o[r * kN + 8 * j + c + 1] = acc[p][4 * j + 1];
          o[(r + 8) * kN + 8 * j + c] = acc[p][4 * j + 2];
          o[(r + 8) * kN + 8 * j + c + 1] = acc[p][4 * j + 3];
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[p][i] = 0.f;
      }
    }
  };
  for (int q = 0; q < total; q += kStages) {
    body(std::integral_constant<int, 0>(), q);
    if (q + 1 < total) body(std::integral_constant<int, 1>(), q + 1);
    if (q + 2 < total) body(std::integral_constant<int, 2>(), q + 2);
  }
  __syncthreads();  // the block's time is its slowest warp's
  const long long c1 = clock64();
  const uint64_t t1 = gtime();
  if (!g.store) {
    float sum = 0.f;
#pragma unroll
    for (int p = 0; p < 8; ++p)
#pragma unroll
      for (int i = 0; i < 16; ++i) sum += acc[p][i];
    g.M[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  }
  if (threadIdx.x == 0) {
    g.cycles[blockIdx.x] = c1 - c0;
    g.ns[blockIdx.x] = t1 - t0;
  }
}

static float tf32_rn(float v) {  // round to nearest even at TF32's 10 fraction bits
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t lsb = (u >> 13) & 1;
  u = (u + 0xfff + lsb) & 0xffffe000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

int main(int argc, char** argv) {
  const int C = 256, chunks = C / kK;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> U(size_t(chunks) * kP * kM * kK), Vw(size_t(chunks) * kP * kN * kK);
  for (auto& x : U) x = uni(rng);
  for (auto& x : Vw) x = uni(rng);  // [chunk][p][n][k], whole
  // V's planes as a data transform would store them: hi, lo; each point's 32 x 8 as core
  // matrices of 8 rows (n) x 4 values (k), (n / 8, k / 4) at ((n / 8) 2 + k / 4) x 32 values
  std::vector<float> V(size_t(chunks) * 2 * kP * kN * kK);
  for (int c = 0; c < chunks; ++c)
    for (int p = 0; p < kP; ++p)
      for (int n = 0; n < kN; ++n)
        for (int k = 0; k < kK; ++k) {
          const float v = Vw[((size_t(c) * kP + p) * kN + n) * kK + k], hi = tf32_rn(v);
          const size_t at = ((n / 8) * 2 + k / 4) * 32 + (n % 8) * 4 + k % 4;
          V[(size_t(c) * 2 + 0) * kP * 256 + p * 256 + at] = hi;
          V[(size_t(c) * 2 + 1) * kP * 256 + p * 256 + at] = v - hi;
        }
  // float64 references, M[p][m][n]: V of each chunk (copied), or chunk 0's V for every chunk
  // (kept); and float32 FFMA's error in order (k fastest) against each, for scale
  auto reference = [&](bool kept, std::vector<double>& ref, double& ffma_rel) {
    ref.assign(size_t(kP) * kM * kN, 0.0);
    double e2 = 0, r2 = 0;
    for (int p = 0; p < kP; ++p)
      for (int m = 0; m < kM; ++m)
        for (int n = 0; n < kN; ++n) {
          double d = 0;
          float f = 0.f;
          for (int c = 0; c < chunks; ++c)
            for (int k = 0; k < kK; ++k) {
              const float u = U[((size_t(c) * kP + p) * kM + m) * kK + k],
                          v = Vw[((size_t(kept ? 0 : c) * kP + p) * kN + n) * kK + k];
              d += double(u) * v;
              f = std::fmaf(u, v, f);
            }
          ref[(size_t(p) * kM + m) * kN + n] = d;
          e2 += (f - d) * (f - d);
          r2 += d * d;
        }
    ffma_rel = std::sqrt(e2 / r2);
  };
  std::vector<double> refs[2];
  double ffma_rel[2];
  reference(false, refs[0], ffma_rel[0]);
  reference(true, refs[1], ffma_rel[1]);
  float *dU, *dV, *dM;
  long long* dc;
  unsigned long long* dn;
  const int items_rate = sms * 8;
  CHECK(cudaMalloc(&dU, U.size() * 4));
  CHECK(cudaMalloc(&dV, V.size() * 4));
  CHECK(cudaMalloc(&dM, size_t(items_rate) * kP * kM * kN * 4));
  CHECK(cudaMalloc(&dc, sms * sizeof(long long)));
  CHECK(cudaMalloc(&dn, sms * sizeof(unsigned long long)));
  CHECK(cudaMemcpy(dU, U.data(), U.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dV, V.data(), V.size() * 4, cudaMemcpyHostToDevice));
  const int smem = kStages * kStageBytes;
  CHECK(cudaFuncSetAttribute(run<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(run<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto launch = [&](const Params& p, int blocks) {
    if (p.only_hi) run<true><<<blocks, 256, smem>>>(p);
    else run<false><<<blocks, 256, smem>>>(p);
  };
  std::printf("%s, %d SMs; C = %d (%d chunks), 16 points x 64 x 32 an item\n", prop.name, sms, C,
              chunks);
  // correctness: two items a block (the sums' reset between items), V copied and V kept; split
  // TF32, and hi hi alone (TF32) to show what the split buys
  bool ok = true;
  for (int kept = 0; kept < 2; ++kept)
    for (int only_hi = 0; only_hi < 2; ++only_hi) {
      Params p{dU, dV, dM, chunks, 2 * sms, kept, only_hi, 0, 1, dc, dn};
      CHECK(cudaMemset(dM, 0, size_t(2 * sms) * kP * kM * kN * 4));
      launch(p, sms);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      const std::vector<double>& ref = refs[kept];
      double worst = 0, worst_all = 0, rms = 0, rms_ref = 0;
      std::vector<float> got(size_t(kP) * kM * kN);
      for (int item : {0, sms - 1, sms, 2 * sms - 1}) {  // both items of the first and last block
        CHECK(cudaMemcpy(got.data(), dM + size_t(item) * got.size(), got.size() * 4,
                         cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < got.size(); ++i) {
          const double e = std::fabs(got[i] - ref[i]);
          worst = std::max(worst, e);
          rms += e * e;
          rms_ref += ref[i] * ref[i];
          worst_all = std::max(worst_all, std::fabs(ref[i]));
        }
      }
      const double rel = std::sqrt(rms / rms_ref);
      std::printf("%s, V %s: max error %.3g (of values up to %.3g), relative L2 %.3g (float32 "
                  "FFMA in order %.3g)\n", only_hi ? "hi hi alone (TF32)" : "split TF32        ",
                  kept ? "kept  " : "copied", worst, worst_all, rel, ffma_rel[kept]);
      if (!only_hi && !(rel <= ffma_rel[kept])) ok = false;
    }
  if (!ok) {
    std::printf("FAILED: split TF32 less accurate than float32 FFMA\n");
    return 1;
  }
  // rate: 8 items a block
  for (int copies = 0; copies < 3; ++copies)
    for (int only_hi = 0; only_hi < 2; ++only_hi) {
      const int static_v = copies > 0, static_u = copies > 1;
      // the median of 5 runs (rate, clock)
      std::vector<std::pair<double, double>> runs;
      for (int rep = 0; rep < 5; ++rep) {
        Params p{dU, dV, dM, chunks, items_rate, static_v, only_hi, static_u, 0, dc, dn};
        launch(p, sms);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::vector<long long> cyc(sms);
        std::vector<unsigned long long> ns(sms);
        CHECK(cudaMemcpy(cyc.data(), dc, sms * sizeof(long long), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(ns.data(), dn, sms * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        double cmax = 0, nsum = 0, csum = 0;
        for (int i = 0; i < sms; ++i) {
          cmax = std::max(cmax, double(cyc[i]));
          csum += cyc[i];
          nsum += ns[i];
        }
        const double flops = 8.0 * chunks * kP * kM * kN * kK * 2;  // a block's
        runs.push_back({flops / cmax, csum / nsum});
      }
      std::sort(runs.begin(), runs.end());
      const double best = runs[2].first, ghz = runs[2].second;
      std::printf("%-19s %-22s: %5.0f flop/cycle/SM (the slowest block), at %.2f GHz\n",
                  only_hi ? "hi hi alone (TF32)" : "split TF32",
                  static_u ? "no copies" : static_v ? "U copied, V static" : "U and V copied", best,
                  ghz);
    }
  (void)argc;
  (void)argv;
  return 0;
}
