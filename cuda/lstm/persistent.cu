// The persistent LSTM forward (lstm.h): after the input GEMM of every step (cuBLAS, as the
// step-wise forward), one cooperative kernel runs the whole recurrence. Each block owns a slice of
// hidden units and keeps their four gates' rows of w_hh in shared memory for every step, with
// their cell state; per step it reads h_{t-1} of the whole batch, computes its units' gates and
// cell, writes h_t, and the grid synchronises. Per step this costs one grid barrier instead of a
// GEMM launch and a point-wise launch, which is what small batches are bound by.
#include <cooperative_groups.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "../common/mma.cuh"
#include "persistent_cluster.cuh"
#include "persistent_cluster_backward.cuh"
#include "persistent_grid.cuh"
#include "persistent_registers.cuh"
#include "sequence.cuh"

namespace fastlayers {
namespace lstm {
namespace {

namespace cg = cooperative_groups;

template <typename T>
__global__ void __launch_bounds__(kPThreads) persistent_forward_kernel(const Args<T> args) {
  const auto& [steps, B, H, U, reverse, xp, b_ih, b_hh, w_hh, h0, c0, hbuf, out, h_n, c_n,
               reserve, reserve_h] = args;
  extern __shared__ __align__(16) unsigned char smem[];
  T* w_s = reinterpret_cast<T*>(smem);
  float* h_s = reinterpret_cast<float*>(smem + (4 * U * H * sizeof(T) + 15) / 16 * 16);
  const Slice sl{B, H, U, static_cast<int>(blockIdx.x) * U, min(U, H - static_cast<int>(blockIdx.x) * U), 0, B};
  const Tail tl(h_s + B * H, sl);
  float* pre_s = tl.pre;
  cg::grid_group grid = cg::this_grid();
  const int u0 = sl.u0, nu = sl.nu;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  for (int k = tid; k < 4 * nu * H; k += kPThreads) {  // rows q U + u: gate q of unit u0 + u
    const int r = k / H, col = k - r * H, q = r / nu, u = r - q * nu;
    w_s[(q * U + u) * H + col] = w_hh[(static_cast<int64_t>(q) * H + u0 + u) * H + col];
  }
  load_state(sl, tl, c0, b_ih, b_hh);

  const int groups = (B + kRowBatch - 1) / kRowBatch;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t t = reverse ? steps - 1 - step : step;
    const T* hp = step == 0 ? h0 : hbuf + ((step - 1) & 1) * static_cast<int64_t>(B) * H;
    T* hn = hbuf + (step & 1) * static_cast<int64_t>(B) * H;
    stage_inputs(sl, tl, xp, t);
    for (int k = tid; k < B * H; k += kPThreads) h_s[k] = load_cg(hp + k);
    __syncthreads();
    // pre_s[b, q U + u] = h_{t-1}[b] . w_hh[q H + u0 + u]: a warp per (row, group of batch rows),
    // lanes over H, then a shuffle reduction.
    for (int item = warp; item < 4 * nu * groups; item += kWarps) {
      const int r = item / groups, b0 = (item - r * groups) * kRowBatch;
      const int q = r / nu, u = r - q * nu;
      const T* wr = w_s + (q * U + u) * H;
      float acc[kRowBatch] = {};
      for (int k = lane; k < H; k += 32) {
        const float w = to_compute(wr[k]);
#pragma unroll
        for (int j = 0; j < kRowBatch; ++j)
          if (b0 + j < B) acc[j] += w * h_s[(b0 + j) * H + k];
      }
#pragma unroll
      for (int j = 0; j < kRowBatch; ++j) {
        float v = acc[j];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && b0 + j < B) pre_s[(b0 + j) * 4 * U + q * U + u] = v;
      }
    }
    inputs_arrived();
    __syncthreads();
    cell_step(sl, tl, step, steps, t, b_ih != nullptr, b_hh != nullptr,
              [h_s, ld = args.H](int b, int j) { return from_compute<T>(h_s[b * ld + j]); },
              out, hn, h_n, c_n, reserve, reserve_h);
    grid.sync();  // h_t of every unit written before any block reads it
  }
}

// Half types at batches above kMmaMinBatch: the gate products on tensor cores. A block's
// products are h_{t-1} [B, H] times its rows of w_hh^T [H, 4U]: mma.sync m16n8k16 tiles (16 batch
// rows x 8 gate rows, float32 accumulation), a warp per tile looping over H, operands in shared
// memory as T (h_{t-1} is stored in T anyway, so the products read the same values). Up to it
// the per-warp dot products above are as fast (one tile row leaves most warps idle): at hidden
// 512 on an H100 they took 4.6 us a step at batch 4 and 6.0 at batch 8, the tensor-core products
// 4.4 at batch 16.
constexpr int kMmaMinBatch = 4;

// Shared rows of H padded to a multiple of 16 plus 8 halves: the fragment loads of a warp (rows
// g, column pairs t) fall in distinct banks.
__host__ __device__ inline int mma_pad_h(int H) { return (H + 15) / 16 * 16; }
__host__ __device__ inline int mma_stride(int H) { return mma_pad_h(H) + 8; }
__host__ __device__ inline int mma_rows(int U) { return (4 * U + 7) / 8 * 8; }
__host__ __device__ inline int mma_batch(int B) { return (B + 15) / 16 * 16; }

template <typename T>
size_t mma_smem_bytes(int64_t B, int64_t H, int units) {
  // w_s [rows, stride] T | h_s [B pad 16, stride] T | the tail
  const int st = mma_stride(static_cast<int>(H));
  return (static_cast<size_t>(mma_rows(units)) * st * sizeof(T) + 15) / 16 * 16 +
         (static_cast<size_t>(mma_batch(static_cast<int>(B))) * st * sizeof(T) + 15) / 16 * 16 +
         tail_bytes(B, units);
}

// persistent_forward_kernel with the gate products on tensor cores (T: __half, __nv_bfloat16).
template <typename T>
__global__ void __launch_bounds__(kPThreads) persistent_forward_mma_kernel(const Args<T> args) {
  const auto& [steps, B, H, U, reverse, xp, b_ih, b_hh, w_hh, h0, c0, hbuf, out, h_n, c_n,
               reserve, reserve_h] = args;
  extern __shared__ __align__(16) unsigned char smem[];
  const int st = mma_stride(H), hp16 = mma_pad_h(H), rows = mma_rows(U), bp = mma_batch(B);
  T* w_s = reinterpret_cast<T*>(smem);
  T* h_s = reinterpret_cast<T*>(smem + (static_cast<size_t>(rows) * st * sizeof(T) + 15) / 16 * 16);
  const Slice sl{B, H, U, static_cast<int>(blockIdx.x) * U, min(U, H - static_cast<int>(blockIdx.x) * U), 0, B};
  const Tail tl(reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(h_s) +
                                         (static_cast<size_t>(bp) * st * sizeof(T) + 15) / 16 * 16),
                sl);
  float* pre_s = tl.pre;
  cg::grid_group grid = cg::this_grid();
  const int u0 = sl.u0, nu = sl.nu;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gr = lane >> 2, tq = lane & 3;
  const T zero = from_compute<T>(0.f);

  // w_s row q U + u: gate q of unit u0 + u; rows past 4 nu and columns past H are zeros.
  for (int k = tid; k < rows * st; k += kPThreads) {
    const int r = k / st, col = k - r * st, q = r / U, u = r - q * U;
    w_s[k] = q < 4 && u < nu && col < H
                 ? w_hh[(static_cast<int64_t>(q) * H + u0 + u) * H + col]
                 : zero;
  }
  for (int k = tid; k < bp * st; k += kPThreads) h_s[k] = zero;  // padding stays zero
  load_state(sl, tl, c0, b_ih, b_hh);
  __syncthreads();

  const int mt = bp / 16, nt = rows / 8, tiles = mt * nt;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t t = reverse ? steps - 1 - step : step;
    const T* hp = step == 0 ? h0 : hbuf + ((step - 1) & 1) * static_cast<int64_t>(B) * H;
    T* hn = hbuf + (step & 1) * static_cast<int64_t>(B) * H;
    stage_inputs(sl, tl, xp, t);
    // h_{t-1} through L2 (other blocks wrote it): 16 bytes a load where rows allow (h0 may be a
    // view at any element offset).
    if (H % 8 == 0 && (reinterpret_cast<uintptr_t>(hp) & 15) == 0) {
      const int per_row = H / 8;
      for (int k = tid; k < B * per_row; k += kPThreads) {
        const int b = k / per_row, c = (k - b * per_row) * 8;
        const uint4 v = __ldcg(reinterpret_cast<const uint4*>(hp + static_cast<int64_t>(b) * H + c));
        *reinterpret_cast<uint4*>(h_s + b * st + c) = v;
      }
    } else {
      for (int k = tid; k < B * H; k += kPThreads) {
        const int b = k / H, c = k - b * H;
        h_s[b * st + c] = from_compute<T>(load_cg(hp + k));
      }
    }
    __syncthreads();
    // pre_s[b, r] = h_{t-1}[b] . w_s[r]: tile (m, n) = batch rows 16 m.., gate rows 8 n..
    for (int tile = warp; tile < tiles; tile += kWarps) {
      const int m = tile / nt, n = tile - m * nt;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      const T* ha = h_s + (m * 16 + gr) * st + 2 * tq;
      const T* wb = w_s + (n * 8 + gr) * st + 2 * tq;
      for (int k0 = 0; k0 < hp16; k0 += 16) {
        uint32_t af[4], bf[2];
        load_a(af, ha + k0, st);
        load_b(bf, wb + k0);
        mma16816(acc, af, bf, T{});
      }
      // acc: (batch m 16 + gr (+8 for 2, 3), gate row n 8 + 2 tq (+1 for 1, 3))
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int b = m * 16 + gr + (i >= 2 ? 8 : 0), r = n * 8 + 2 * tq + (i & 1);
        const int q = r / U, u = r - q * U;
        if (b < B && q < 4 && u < nu) pre_s[b * 4 * U + q * U + u] = acc[i];
      }
    }
    inputs_arrived();
    __syncthreads();
    cell_step(sl, tl, step, steps, t, b_ih != nullptr, b_hh != nullptr,
              [&](int b, int j) { return h_s[b * st + j]; }, out, hn, h_n, c_n, reserve,
              reserve_h);
    grid.sync();  // h_t of every unit written before any block reads it
  }
}

// The kernel a (T, B) runs and its shared memory.
template <typename T> constexpr bool has_mma() { return false; }
template <> constexpr bool has_mma<__half>() { return true; }
template <> constexpr bool has_mma<__nv_bfloat16>() { return true; }

template <typename T>
const void* kernel_for(int64_t B) {
  if constexpr (has_mma<T>()) {
    if (B > kMmaMinBatch) return reinterpret_cast<const void*>(persistent_forward_mma_kernel<T>);
  }
  return reinterpret_cast<const void*>(persistent_forward_kernel<T>);
}

template <typename T>
size_t kernel_smem(int64_t B, int64_t H, int units) {
  if constexpr (has_mma<T>()) {
    if (B > kMmaMinBatch) return mma_smem_bytes<T>(B, H, units);
  }
  return smem_bytes<T>(B, H, units);
}

// What a device offers cooperative kernels: SMs, opt-in shared memory a block, cooperative launch.
struct Limits {
  int sms = 0, optin = 0, coop = 0;
};
inline Limits limits(int device) {
  Limits d;
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&d.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&d.coop, cudaDevAttrCooperativeLaunch, device));
  return d;
}

// The geometry of `kernel` with `units` of H a block and `smem` bytes of shared memory if every
// one of its blocks can be resident at once (what a grid barrier needs), else an empty one.
inline Geometry resident(const void* kernel, const Limits& d, int64_t H, int units, size_t smem,
                         int parts = 1) {
  if (smem > static_cast<size_t>(d.optin)) return Geometry{0, 0, 0};
  // The attribute is the kernel's, not the shape's: set to the device's limit, so that a plan
  // made later for a smaller shape does not lower it under an earlier plan's need.
  FL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d.optin));
  int per_sm = 0;
  FL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kPThreads, smem));
  const int blocks = static_cast<int>((H + units - 1) / units) * parts;
  return per_sm * d.sms >= blocks ? Geometry{units, blocks, smem, kernel} : Geometry{0, 0, 0};
}

std::mutex plan_mutex;
// (device, T's kernel for B, B, H) -> the geometry and the kernel chosen (float32's register
// kernel or T's; each instantiation's shared-memory attribute is set in resident())
std::map<std::tuple<int, const void*, int64_t, int64_t>, Geometry> plans;

template <typename T>
bool plan(int64_t B, int64_t H, Geometry* out) {
  int device = 0;
  FL_CUDA_CHECK(cudaGetDevice(&device));
  const void* kernel = kernel_for<T>(B);
  const auto key = std::make_tuple(device, kernel, B, H);
  std::lock_guard<std::mutex> lock(plan_mutex);
  auto it = plans.find(key);
  if (it == plans.end()) {
    Geometry g{0, 0, 0};
    const Limits d = limits(device);
    if (d.coop && B > 0 && H > 0 && H <= (int64_t{1} << 20) && B <= 4096) {
      if constexpr (std::is_same_v<T, float>) {
        int U = reg_units(H, d.sms), parts = 1;
        if (U > 0 && B >= kRegSplitBatch && reg_kc_ok(2 * U, H)) U *= 2, parts = 2;
        if (U > 0) {
          g = resident(reg_kernel_for(U, H), d, H, U, reg_smem_bytes(B, H, U, parts), parts);
        }
      }
      if (g.blocks == 0) {
        const int units = static_cast<int>((H + d.sms - 1) / d.sms);
        g = resident(kernel, d, H, units, kernel_smem<T>(B, H, units));
      }
    }
    it = plans.emplace(key, g).first;
  }
  *out = it->second;
  return out->blocks > 0;
}

// ---------------------------------------------------------------------------------------------
// The persistent backward: the recurrence of lstm_backward as one cooperative kernel, for what the
// persistent forward serves. Each block owns U hidden units (U a power of two) and keeps their
// columns of w_hh [4H, U] in shared memory for the whole sequence, with their cell gradient.
// Per step, from last to first: dh_t[b, j] = dgates_(t+1)[b, :] . w_hh[:, j] for its units j (the
// gates' gradients of every unit, written by every block at the step before, read through L2),
// then the cell's backward as cell_backward computes it (dy + dh, the reserve, dc carried in
// float), its units' gate gradients into dgates, and the grid synchronises. dgates [N, 4H] is
// the exchange buffer and the result the weight and input gradients' GEMMs read afterwards.

// Batches it serves: every block reads the whole dgates_(t+1) [B, 4H] each step through L2, 4x
// the forward's exchange; at batch 64 (hidden 512, an H100) that made a step 58 us against the
// step-wise backward's 11, and lstm_persistent's backward is lstm_backward's above this.
constexpr int kBackMaxBatch = 16;
// A thread per (row, unit) of the block: batch rows times units a block (up to 16) within a block.
static_assert(kBackMaxBatch * 16 <= kPThreads, "a (row, unit) item a thread");

template <int U>
__host__ __device__ constexpr int back_rows() { return 32 / U; }  // batch rows a product group

__host__ __device__ inline int back_groups(int B, int U) { return (B + 32 / U - 1) / (32 / U); }

template <typename T, int U>
size_t back_smem_bytes(int64_t B, int64_t H) {
  // w_s [4H, U] T | dh_s [B, U] float | dc_s [B, U] float | red_s [groups, warps, 32] float
  return (static_cast<size_t>(4 * H * U) * sizeof(T) + 15) / 16 * 16 +
         (2 * B * U + static_cast<size_t>(back_groups(static_cast<int>(B), U)) * kWarps * 32) *
             sizeof(float);
}

// dh_s[b, u] = dg[b, :] . w_s[:, u] for every row b < B: a thread per slice of the 4H gate rows,
// batch rows in groups of G = 32 / U (G U = 32 partial sums a lane), summed over the warp by
// scatter_level and over the warps through red_s.
template <typename T, int U>
__device__ void back_products(const T* dg, const T* w_s, float* red_s, float* dh_s, int B, int H4) {
  constexpr int G = back_rows<U>();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int groups = back_groups(B, U);
  for (int grp = 0; grp < groups; ++grp) {
    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0.f;
    const int b0 = grp * G;
    // U gate rows a round, their G rows' values loaded before any is used: 32 loads in flight
    // a thread (one at a time left each step bound by L2 latency: 10 us a step at batch 1).
    for (int r0 = tid; r0 < H4; r0 += U * kPThreads) {
      float d[U][G];
#pragma unroll
      for (int c = 0; c < U; ++c) {
        const int r = r0 + c * kPThreads;
#pragma unroll
        for (int i = 0; i < G; ++i)
          d[c][i] = r < H4 && b0 + i < B ? load_cg(dg + static_cast<int64_t>(b0 + i) * H4 + r)
                                          : 0.f;
      }
#pragma unroll
      for (int c = 0; c < U; ++c) {
        const int r = r0 + c * kPThreads;
        if (r < H4) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const float w = to_compute(w_s[r * U + u]);
#pragma unroll
            for (int i = 0; i < G; ++i) acc[i * U + u] += d[c][i] * w;
          }
        }
      }
    }
    scatter_level<32>(acc, lane);
    red_s[(grp * kWarps + warp) * 32 + lane] = acc[0];
  }
  __syncthreads();
  for (int k = tid; k < groups * 32; k += kPThreads) {
    const int grp = k >> 5, l = k & 31, b = grp * G + l / U;
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red_s[(grp * kWarps + w) * 32 + l];
    if (b < B) dh_s[b * U + l % U] = v;
  }
  __syncthreads();
}

template <typename T, int U>
__global__ void __launch_bounds__(kPThreads) persistent_backward_kernel(const BackArgs<T> a) {
  const auto& [steps, B, H, reverse, dy, dh_n, dc_n, w_hh, reserve, dgates, dh0, dc0] = a;
  extern __shared__ __align__(16) unsigned char smem[];
  const int H4 = 4 * H, u0 = static_cast<int>(blockIdx.x) * U, nu = min(U, H - u0);
  T* w_s = reinterpret_cast<T*>(smem);
  float* dh_s = reinterpret_cast<float*>(smem + (static_cast<size_t>(H4) * U * sizeof(T) + 15) / 16 * 16);
  float* dc_s = dh_s + B * U;
  float* red_s = dc_s + B * U;
  cg::grid_group grid = cg::this_grid();
  const int tid = threadIdx.x;
  const T zero = from_compute<T>(0.f);

  for (int k = tid; k < H4 * U; k += kPThreads) {  // w_s[r, u] = w_hh[r, u0 + u], zeros past H
    const int r = k / U, u = k - r * U;
    w_s[k] = u < nu ? w_hh[static_cast<int64_t>(r) * H + u0 + u] : zero;
  }
  for (int k = tid; k < B * U; k += kPThreads) {
    const int b = k / U, u = k - b * U;
    const int64_t at = static_cast<int64_t>(b) * H + u0 + u;
    dh_s[k] = u < nu && dh_n != nullptr ? to_compute(dh_n[at]) : 0.f;
    dc_s[k] = u < nu && dc_n != nullptr ? to_compute(dc_n[at]) : 0.f;
  }
  __syncthreads();

  // The thread's (row, unit) item: b = tid / nu, unit u (tid < B nu).
  const bool mine = tid < B * nu;
  const int b = mine ? tid / nu : 0, u = tid - b * nu, j = u0 + u;
  int64_t t_prev = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t bstep = steps - 1 - i, t = reverse ? steps - 1 - bstep : bstep;
    const int64_t row = t * B + b;
    // This step's dy and reserve of the item, loaded before the products, which they do not
    // depend on.
    float dyv = 0.f, r[5] = {};
    if (mine) {
      dyv = to_compute(dy[row * H + j]);
#pragma unroll
      for (int q = 0; q < 5; ++q) r[q] = reserve[row * 5 * H + q * H + j];
    }
    if (i > 0) back_products<T, U>(dgates + t_prev * B * H4, w_s, red_s, dh_s, B, H4);
    if (mine) {  // cell_backward's arithmetic, in the same order
      const float dht = dyv + dh_s[b * U + u];
      const float ig = r[0], f = r[1], g = r[2], o = r[3], cp = r[4];
      const float tc = tanh(f * cp + ig * g);
      const float dcn = dc_s[b * U + u] + dht * o * (1.f - tc * tc);
      T* d = dgates + row * H4 + j;
      d[0] = from_compute<T>(dcn * g * ig * (1.f - ig));
      d[H] = from_compute<T>(dcn * cp * f * (1.f - f));
      d[2 * H] = from_compute<T>(dcn * ig * (1.f - g * g));
      d[3 * H] = from_compute<T>(dht * tc * o * (1.f - o));
      dc_s[b * U + u] = dcn * f;
    }
    t_prev = t;
    grid.sync();  // every unit's gate gradients written before any block reads them
  }
  back_products<T, U>(dgates + t_prev * B * H4, w_s, red_s, dh_s, B, H4);  // h0's gradient
  if (mine) {
    const int64_t at = static_cast<int64_t>(b) * H + j;
    dh0[at] = from_compute<T>(dh_s[b * U + u]);
    dc0[at] = from_compute<T>(dc_s[b * U + u]);
  }
}

// Units a block for hidden size H: the least power of two up to 16 that spreads H over the SMs.
inline int back_units(int64_t H, int sms) {
  int u = 1;
  while (u < 16 && static_cast<int64_t>(u) * sms < H) u *= 2;
  return u;
}

template <typename T>
const void* back_kernel_for(int U) {
  switch (U) {
    case 1: return reinterpret_cast<const void*>(persistent_backward_kernel<T, 1>);
    case 2: return reinterpret_cast<const void*>(persistent_backward_kernel<T, 2>);
    case 4: return reinterpret_cast<const void*>(persistent_backward_kernel<T, 4>);
    case 8: return reinterpret_cast<const void*>(persistent_backward_kernel<T, 8>);
    default: return reinterpret_cast<const void*>(persistent_backward_kernel<T, 16>);
  }
}

template <typename T>
size_t back_smem(int64_t B, int64_t H, int U) {
  switch (U) {
    case 1: return back_smem_bytes<T, 1>(B, H);
    case 2: return back_smem_bytes<T, 2>(B, H);
    case 4: return back_smem_bytes<T, 4>(B, H);
    case 8: return back_smem_bytes<T, 8>(B, H);
    default: return back_smem_bytes<T, 16>(B, H);
  }
}

// (device, the storage type's kernel for U = 1, B, H)
std::map<std::tuple<int, const void*, int64_t, int64_t>, Geometry> back_plans;

template <typename T>
bool back_plan(int64_t B, int64_t H, Geometry* out) {
  int device = 0;
  FL_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(device, back_kernel_for<T>(1), B, H);
  std::lock_guard<std::mutex> lock(plan_mutex);
  auto it = back_plans.find(key);
  if (it == back_plans.end()) {
    Geometry g{0, 0, 0};
    const Limits d = limits(device);
    const int U = back_units(H, d.sms);
    if (d.coop && B > 0 && B <= kBackMaxBatch && H > 0 && static_cast<int64_t>(U) * d.sms >= H)
      g = resident(back_kernel_for<T>(U), d, H, U, back_smem<T>(B, H, U));
    it = back_plans.emplace(key, g).first;
  }
  *out = it->second;
  return out->blocks > 0;
}


// ---------------------------------------------------------------------------------------------
// The cluster kernels (persistent_cluster.cuh, persistent_cluster_backward.cuh) where they serve:
// float16 / bfloat16, H 128, 256 or 512, on sm_90 and later where the device can place clusters
// of H / 32 blocks, at batches up to kClMaxBatch rows a cluster on as many clusters as the device
// holds at once. The instantiation a call runs, its launch and its number of clusters, or none.
struct ClusterPlan {
  void (*launch)(const void* args, int clusters, cudaStream_t stream) = nullptr;
  int clusters = 0, n_tiles = 0;
  explicit operator bool() const { return launch != nullptr; }
};

// Rows a cluster the plan aims at: a block receives its cluster's whole h_{t-1} each step, so the
// step shortens with the rows a cluster, while clusters beyond what the device holds at once
// would wait for others to end.
constexpr int kClTargetRows = 4;

// The launch of a cluster kernel at H: `clusters` clusters of H / 32 blocks with `smem` bytes of
// shared memory each (what the occupancy query and the launch both take; not copyable, as cfg
// points at attr).
struct ClusterConfig {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t cfg{};
  ClusterConfig(int H, int clusters, int smem, cudaStream_t stream) {
    cfg.gridDim = dim3(H / kClUnits * clusters);
    cfg.blockDim = dim3(kClThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = H / kClUnits;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  ClusterConfig(const ClusterConfig&) = delete;
  ClusterConfig& operator=(const ClusterConfig&) = delete;
};

// The forward's and the backward's instantiations at (T, H, NT): kernel, arguments, shared memory.
template <typename T, int H, int NT, bool Backward>
struct ClusterKernel {
  using Args = ClusterArgs<T>;
  static constexpr auto kernel = persistent_cluster_kernel<T, H, NT>;
  static constexpr int smem = cl_smem_bytes(H);
};
template <typename T, int H, int NT>
struct ClusterKernel<T, H, NT, true> {
  using Args = BackArgs<T>;
  static constexpr auto kernel = persistent_cluster_backward_kernel<T, H, NT>;
  static constexpr int smem = clb_smem_bytes(H);
};

template <typename K, int H>
void launch_cluster(const void* args, int clusters, cudaStream_t stream) {
  const ClusterConfig c(H, clusters, K::smem, stream);
  FL_CUDA_CHECK(cudaLaunchKernelEx(&c.cfg, K::kernel, *static_cast<const typename K::Args*>(args)));
}

// How many clusters of the instantiation the current device holds at once, 0 where it places
// none or this build holds no code for sm_90 or later (an arch list without it compiles an empty
// body, which PTX of an older architecture would give an sm_90 device). An error of the queries
// (a cluster size the device refuses) counts as "does not fit", not as the call's error. Asked
// once per device and instantiation (under plan_mutex, as every plan is made); an answer that
// ran out of memory (loading the kernel's module) is not kept: a later batch asks again.
template <typename K, int H>
int cluster_capacity(int device) {
  static std::map<int, int> known;
  const auto it = known.find(device);
  if (it != known.end()) return it->second;
  const void* k = reinterpret_cast<const void*>(K::kernel);
  cudaFuncAttributes fa{};
  cudaError_t e = cudaFuncGetAttributes(&fa, k);
  bool ok = e == cudaSuccess && fa.ptxVersion >= 90;
  if (ok && H / kClUnits > 8) {
    e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    ok = e == cudaSuccess;
  }
  if (ok) {
    e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, K::smem);
    ok = e == cudaSuccess;
  }
  int clusters = 0;
  if (ok) {
    const ClusterConfig c(H, 1, K::smem, nullptr);
    e = cudaOccupancyMaxActiveClusters(&clusters, K::kernel, &c.cfg);
    ok = e == cudaSuccess;
  }
  if (e != cudaSuccess) (void)cudaGetLastError();  // clear this refusal
  if (e == cudaErrorMemoryAllocation) return 0;
  return known[device] = ok ? clusters : 0;
}

// B rows over min(capacity, ceil(B / kClTargetRows)) clusters; one n-tile where that leaves at
// most 8 rows a cluster, two up to 16, none above (the batch does not fit resident clusters).
template <typename T, int H, bool Backward>
ClusterPlan cluster_for_h(int64_t B, int device) {
  using One = ClusterKernel<T, H, 1, Backward>;
  using Two = ClusterKernel<T, H, 2, Backward>;
  const auto ceil_div = [](int64_t n, int64_t d) { return (n - 1) / d + 1; };  // n, d >= 1
  const auto spread = [&](int capacity) {
    return static_cast<int>(std::min<int64_t>(capacity, ceil_div(B, kClTargetRows)));
  };
  ClusterPlan p;
  const int one = spread(cluster_capacity<One, H>(device));
  if (one > 0 && ceil_div(B, one) <= 8) {
    p.launch = launch_cluster<One, H>;
    p.clusters = one;
    p.n_tiles = 1;
    return p;
  }
  const int two = spread(cluster_capacity<Two, H>(device));
  if (two > 0 && ceil_div(B, two) <= kClMaxBatch) {
    p.launch = launch_cluster<Two, H>;
    p.clusters = two;
    p.n_tiles = 2;
  }
  return p;
}

// (device, T's kernel for H 128 and one n-tile of the pass, B, H)
std::map<std::tuple<int, const void*, int64_t, int64_t>, ClusterPlan> cluster_plans;

template <typename T, bool Backward = false>
ClusterPlan cluster_plan(int64_t B, int64_t H) {
  if constexpr (!has_mma<T>()) {
    return ClusterPlan{};
  } else {
    if (B < 1 || (H != 128 && H != 256 && H != 512)) return ClusterPlan{};
    int device = 0;
    FL_CUDA_CHECK(cudaGetDevice(&device));
    const auto key = std::make_tuple(
        device, reinterpret_cast<const void*>(ClusterKernel<T, 128, 1, Backward>::kernel), B, H);
    std::lock_guard<std::mutex> lock(plan_mutex);
    auto it = cluster_plans.find(key);
    if (it == cluster_plans.end()) {
      // An error pending from earlier work is the caller's (its next CUDA call would report
      // it), not a refusal of the queries below, which would otherwise clear it and be kept.
      FL_CUDA_CHECK(cudaPeekAtLastError());
      int major = 0;
      FL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
      ClusterPlan f;
      if (major >= 9) {
        f = H == 128   ? cluster_for_h<T, 128, Backward>(B, device)
            : H == 256 ? cluster_for_h<T, 256, Backward>(B, device)
                       : cluster_for_h<T, 512, Backward>(B, device);
      }
      it = cluster_plans.emplace(key, f).first;
    }
    return it->second;
  }
}
}  // namespace

bool persistent_fits(int64_t B, int64_t H, int t_bytes, bool bf16) {
  Geometry g;
  switch (t_bytes) {
    case 4: return plan<float>(B, H, &g);
    case 2:
      return bf16 ? cluster_plan<__nv_bfloat16>(B, H) || plan<__nv_bfloat16>(B, H, &g)
                  : cluster_plan<__half>(B, H) || plan<__half>(B, H, &g);
    default: return false;
  }
}

const char* persistent_forward_kernel(int64_t B, int64_t H, int t_bytes, bool bf16) {
  if (t_bytes == 2 && (bf16 ? cluster_plan<__nv_bfloat16>(B, H) : cluster_plan<__half>(B, H)))
    return "cluster";
  if (!persistent_fits(B, H, t_bytes, bf16)) return nullptr;
  Geometry g;
  return t_bytes == 4 && plan<float>(B, H, &g) && g.kernel != kernel_for<float>(B)
             ? "grid-registers"
             : "grid";
}

bool persistent_backward_fits(int64_t B, int64_t H, int t_bytes, bool bf16) {
  Geometry g;
  if (!persistent_fits(B, H, t_bytes, bf16)) return false;
  switch (t_bytes) {
    case 4: return back_plan<float>(B, H, &g);
    case 2:
      return bf16 ? cluster_plan<__nv_bfloat16, true>(B, H) || back_plan<__nv_bfloat16>(B, H, &g)
                  : cluster_plan<__half, true>(B, H) || back_plan<__half>(B, H, &g);
    default: return false;
  }
}

ClusterShape persistent_cluster_shape(int64_t B, int64_t H, int t_bytes, bool bf16,
                                      bool backward) {
  if (t_bytes != 2) return ClusterShape{};
  const ClusterPlan p = bf16 ? (backward ? cluster_plan<__nv_bfloat16, true>(B, H)
                                         : cluster_plan<__nv_bfloat16>(B, H))
                             : (backward ? cluster_plan<__half, true>(B, H)
                                         : cluster_plan<__half>(B, H));
  return ClusterShape{p.clusters, p.n_tiles};
}

const char* persistent_backward_kernel(int64_t B, int64_t H, int t_bytes, bool bf16) {
  if (!persistent_backward_fits(B, H, t_bytes, bf16)) return nullptr;
  const bool cluster = t_bytes == 2 && (bf16 ? cluster_plan<__nv_bfloat16, true>(B, H)
                                             : cluster_plan<__half, true>(B, H));
  return cluster ? "cluster" : "grid";
}

// The padded, projection-free input both persistent kernels take (`pass`: "forward" or
// "backward" in the error).
inline void check_steps(const Steps& s, const char* pass) {
  if (s.proj || s.N != s.T * s.B || s.T <= 0 || s.B <= 0)
    throw std::invalid_argument(std::string("fastlayers: the persistent LSTM ") + pass +
                                " takes padded input without a projection, T and B at least 1");
}

template <typename T>
void forward_persistent(const Steps& s, const T* x, const T* h0, const T* c0, const T* w_ih,
                        const T* w_hh, const T* b_ih, const T* b_hh, T* out, T* h_n, T* c_n,
                        void* reserve, T* reserve_h, void* workspace, size_t workspace_size,
                        cudaStream_t stream, cublasHandle_t blas, bool tf32) {
  using G = GemmTypes<T>;
  check_steps(s, "forward");
  Geometry g;
  const ClusterPlan cluster = cluster_plan<T>(s.B, s.H);
  if (!cluster && !plan<T>(s.B, s.H, &g))
    throw std::invalid_argument("fastlayers: the persistent LSTM forward does not fit this "
                                "batch and hidden size on this device");
  if (workspace_size < forward_workspace(s, sizeof(T), sizeof(float)))
    throw std::invalid_argument("fastlayers: LSTM forward workspace too small");
  const int64_t H = s.H;
  Carve ws(workspace);
  float* xp = ws.take<float>(s.N * 4 * H);
  T* hbuf = ws.take<T>(2 * s.B * H);  // within the step-wise forward's state (its g alone is larger)
  if (s.I > 0) {
    const gemm::Pinned pin(blas, stream);
    gemm1(pin, G::store, G::acc, tf32, CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, s.N, s.I, w_ih, s.I, x,
          s.I, xp, 4 * H);
  } else {
    FL_CUDA_CHECK(cudaMemsetAsync(xp, 0, sizeof(float) * s.N * 4 * H, stream));
  }
  if (cluster) {
    const ClusterArgs<T> c{s.T, static_cast<int>(s.B), s.reverse, xp, b_ih, b_hh, w_hh, h0, c0,
                           out, h_n, c_n, static_cast<float*>(reserve), reserve_h};
    cluster.launch(&c, cluster.clusters, stream);
    return;
  }
  Args<T> a{s.T, static_cast<int>(s.B), static_cast<int>(H), g.units, s.reverse, xp, b_ih, b_hh,
            w_hh, h0, c0, hbuf, out, h_n, c_n, static_cast<float*>(reserve), reserve_h};
  void* args[] = {&a};
  FL_CUDA_CHECK(cudaLaunchCooperativeKernel(g.kernel, dim3(g.blocks), dim3(kPThreads), args,
                                            g.smem, stream));
}

template <typename T>
void backward_persistent(const Steps& s, const T* dy, const T* dh_n, const T* dc_n, const T* x,
                         const T* w_ih, const T* w_hh, const void* reserve, const T* reserve_h,
                         T* dx, T* dh0, T* dc0, bool weights, T* dw_ih, T* dw_hh, T* db,
                         void* workspace, size_t workspace_size, cudaStream_t stream,
                         cublasHandle_t blas, bool tf32) {
  check_steps(s, "backward");
  Geometry g;
  const ClusterPlan cluster = cluster_plan<T, true>(s.B, s.H);
  if (!cluster && !back_plan<T>(s.B, s.H, &g))
    throw std::invalid_argument("fastlayers: the persistent LSTM backward does not fit this "
                                "batch and hidden size on this device");
  if (workspace_size < backward_workspace(s, sizeof(T), sizeof(float)))
    throw std::invalid_argument("fastlayers: LSTM backward workspace too small");
  const int64_t H = s.H;
  Carve ws(workspace);  // backward()'s carving: dgates, ones (its state unused here)
  T* dgates = ws.take<T>(s.N * 4 * H);
  T* ones = ws.take<T>(s.N);
  BackArgs<T> a{s.T, static_cast<int>(s.B), static_cast<int>(H), s.reverse, dy, dh_n, dc_n,
                w_hh, static_cast<const float*>(reserve), dgates, dh0, dc0};
  if (cluster) {
    cluster.launch(&a, cluster.clusters, stream);
  } else {
    void* args[] = {&a};
    FL_CUDA_CHECK(cudaLaunchCooperativeKernel(back_kernel_for<T>(g.units), dim3(g.blocks),
                                              dim3(kPThreads), args, g.smem, stream));
  }
  const gemm::Pinned pin(blas, stream);
  backward_gemms<T>(s, pin, dgates, ones, nullptr, x, w_ih, reserve_h, dx, weights, dw_ih,
                    dw_hh, db, nullptr, stream, tf32);
}

#define FL_LSTM_PERSISTENT(T)                                                                  \
  template void forward_persistent<T>(const Steps&, const T*, const T*, const T*, const T*,    \
                                      const T*, const T*, const T*, T*, T*, T*, void*, T*,     \
                                      void*, size_t, cudaStream_t, cublasHandle_t, bool); \
  template void backward_persistent<T>(const Steps&, const T*, const T*, const T*, const T*,   \
                                       const T*, const T*, const void*, const T*, T*, T*, T*,  \
                                       bool, T*, T*, T*, void*, size_t, cudaStream_t,          \
                                       cublasHandle_t, bool);
FL_LSTM_PERSISTENT(float)
FL_LSTM_PERSISTENT(__half)
FL_LSTM_PERSISTENT(__nv_bfloat16)

}  // namespace lstm
}  // namespace fastlayers
