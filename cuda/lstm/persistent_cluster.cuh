// The persistent forward on thread-block clusters (sm_90): for float16 / bfloat16 layers of
// H = 128, 256 or 512, the recurrence of persistent.cu's grid kernels on H / 32 blocks of one
// cluster, which send h_t into each other's shared memory instead of writing it to global
// memory, reading it back through L2 and synchronising the whole grid (what bounds the grid
// kernels' step at small batches). Larger batches run on several clusters, each on its own rows
// (ClRows) and independent of the others, up to 16 rows a cluster: a block receives its
// cluster's whole h_{t-1} each step, so fewer rows a cluster shorten the step.
//
// Block r of the cluster owns hidden units 32 r .. 32 r + 31: their four gates' 128 rows of
// w_hh, held in registers for the whole sequence as mma.sync A fragments (16 warps: warp w takes
// gate rows 16 (w % 8) .. of half w / 8 of H, so a thread holds H / 8 values). Every block keeps
// the cluster's whole h_{t-1} [nb, H] in shared memory, in two buffers (step s reads buffer
// s % 2), each with an mbarrier. Per step s:
//   1. wait for the buffer's phase (every block's pieces of h_{s-1} landed); thread 0 arms the
//      other buffer's next phase (nb H values expected);
//   2. each warp multiplies its rows by h_{s-1} (m16n8k16, float32 accumulation; the batch is
//      the n dimension, padded to 8 or 16 with zero rows) and stores its partial products
//      (two buffers by step parity), then the block synchronises;
//   3. warp b runs the cell of batch row b for the block's 32 units as cell_forward does (the
//      input products xp and the biases added in the same order; c stays in a register);
//   4. warp b sends its 32 new values of h_s (four 16-byte pieces) into row b of the other
//      buffer of every block by st.async, each completing the receiver's mbarrier by its bytes;
//      then it writes out, the reserve and reserve_h, and loads the next step's input products.
// No fence or cluster barrier runs in the loop. A block overwrites another's buffer (s + 1) % 2
// at step s only after its wait of step s saw that block's piece of h_{s-1}, which the block
// sent (st.async's complete-tx releases at cluster scope) after its step s - 1 read that buffer;
// so no write meets a read, and no phase's bytes arrive before the phase before it completed.
#pragma once

#include <cstdint>

#include "../common/async_copy.cuh"
#include "../common/mma.cuh"
#include "cell.cuh"

namespace fastlayers {
namespace lstm {

constexpr int kClUnits = 32;                // hidden units a block: 128 gate rows, 8 m-tiles
constexpr int kClWarps = 16;                // 8 m-tiles x 2 halves of H; the cell a warp a row
constexpr int kClThreads = 32 * kClWarps;
constexpr int kClMaxBatch = kClWarps;       // a cluster's batch rows: a warp each in the cell
constexpr int kClPartStride = 4 * kClUnits + 4;  // a batch row of partial products (floats)

// The shared memory of H: h [2, 16, H + 8] T (rows padded by 16 bytes: the B fragments of a warp
// fall in distinct banks) | partial products [2 steps, 2 halves, 16 rows, kClPartStride] float |
// the block's new h rows [16, 32] T | an mbarrier a buffer of h.
__host__ __device__ constexpr int cl_stride(int H) { return H + 8; }
__host__ __device__ constexpr int cl_part_floats() { return 2 * kClMaxBatch * kClPartStride; }
__host__ __device__ constexpr int cl_smem_bytes(int H) {
  return 2 * kClMaxBatch * cl_stride(H) * 2 + 2 * cl_part_floats() * 4 +
         kClMaxBatch * kClUnits * 2 + 2 * 8;
}

template <typename T>
struct ClusterArgs {
  int64_t steps;
  int B;
  bool reverse;
  const float* xp;  // [T B, 4H] the input GEMM's products
  const T *b_ih, *b_hh, *w_hh, *h0, *c0;
  T *out, *h_n, *c_n;
  float* reserve;   // [T B, 5H]
  T* reserve_h;     // [T B, H]
};

template <typename T>
__device__ __forceinline__ uint32_t cl_pack(T lo, T hi) {  // two values, the first low
  return static_cast<uint32_t>(*reinterpret_cast<const unsigned short*>(&lo)) |
         (static_cast<uint32_t>(*reinterpret_cast<const unsigned short*>(&hi)) << 16);
}
template <typename T>
__device__ __forceinline__ uint32_t cl_pair(const T* p) {  // two adjacent values
  return cl_pack(p[0], p[1]);
}

// The cluster primitives both kernels (forward here, backward in
// persistent_cluster_backward.cuh) build their exchange from; sm_90 PTX.
__device__ __forceinline__ unsigned cl_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// The batch rows of this block's cluster: the batch's rows are independent sequences, so a grid
// of G clusters splits them evenly, cluster c taking rows c B / G .. (c + 1) B / G - 1 (G <= B,
// so every cluster has at least one; the plan keeps nb within kClMaxBatch and the n-tiles).
struct ClRows {
  int b0, nb;
  __device__ __forceinline__ explicit ClRows(int B) {
    unsigned c, n;
    asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(c));
    asm("mov.u32 %0, %%nclusterid.x;\n" : "=r"(n));
    b0 = static_cast<int>(c * static_cast<unsigned>(B) / n);
    nb = static_cast<int>((c + 1) * static_cast<unsigned>(B) / n) - b0;
  }
};
// Every thread of every block of the cluster, release then acquire.
__device__ __forceinline__ void cl_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Waits (acquire at cluster scope) for the phase of parity `parity` of the mbarrier at `bar`.
__device__ __forceinline__ void cl_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\ncl_wait:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra cl_wait;\n}\n" ::"r"(bar), "r"(parity)
      : "memory");
}
// The address in block `rank`'s shared memory of this block's shared address `local`.
__device__ __forceinline__ unsigned cl_map(unsigned local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
// st.async of 16 / 4 bytes to a mapped address, completing the mapped mbarrier `bar` by them.
__device__ __forceinline__ void cl_send(unsigned remote, const uint4& v, unsigned bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(remote),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void cl_send(unsigned remote, float v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::
                   "r"(remote),
               "r"(__float_as_uint(v)), "r"(bar)
               : "memory");
}

// NT: n-tiles of 8 batch rows (a cluster's rows up to 8 NT).
template <typename T, int H, int NT>
__global__ void __launch_bounds__(kClThreads, 1) persistent_cluster_kernel(const ClusterArgs<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int CS = H / kClUnits;  // blocks of the cluster
  constexpr int KH = H / 32;        // k-tiles of 16 a warp (half of H)
  constexpr int S = cl_stride(H);
  static_assert(H % 128 == 0 && CS <= 16 && (NT == 1 || NT == 2), "instantiated geometries");
  extern __shared__ __align__(16) unsigned char smem[];
  T* h_s = reinterpret_cast<T*>(smem);
  float* parts = reinterpret_cast<float*>(smem + 2 * kClMaxBatch * S * 2);
  T* hl = reinterpret_cast<T*>(parts + 2 * cl_part_floats());
  const unsigned mbar = static_cast<unsigned>(__cvta_generic_to_shared(hl + kClMaxBatch * kClUnits));

  const unsigned rank = cl_rank();
  const int B = a.B, u0 = static_cast<int>(rank) * kClUnits;
  const ClRows rows(B);  // the cluster's batch rows: b0 + (0 .. nb - 1)
  const int nb = rows.nb;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const int mt = warp & 7, kh = warp >> 3;

  // The warp's A fragments: local gate rows 16 mt + (g, g + 8) are gate mt / 2 of units
  // u0 + 16 (mt % 2) + (g, g + 8); columns of half kh.
  uint32_t wf[KH][4];
  {
    const T* w0 = a.w_hh + (static_cast<int64_t>(mt >> 1) * H + u0 + (mt & 1) * 16 + g) * H +
                  kh * (H / 2) + 2 * tq;
    const T* w8 = w0 + 8 * static_cast<int64_t>(H);
#pragma unroll
    for (int kk = 0; kk < KH; ++kk) {
      wf[kk][0] = cl_pair(w0 + 16 * kk);
      wf[kk][1] = cl_pair(w8 + 16 * kk);
      wf[kk][2] = cl_pair(w0 + 16 * kk + 8);
      wf[kk][3] = cl_pair(w8 + 16 * kk + 8);
    }
  }
  // h_{-1} = h0 into buffer 0 (rows past nb zero in both buffers: the padded n-tiles' operand).
  const T zero = from_compute<T>(0.f);
  for (int k = tid; k < 2 * kClMaxBatch * S; k += kClThreads) {
    const int b = (k / S) % kClMaxBatch, j = k % S;
    h_s[k] = k < kClMaxBatch * S && b < nb && j < H
                 ? a.h0[static_cast<int64_t>(rows.b0 + b) * H + j]
                 : zero;
  }
  // The cell's thread: the cluster's batch row b = warp (row bg of the batch), unit u0 + lane.
  const int b = warp, j = u0 + lane, bg = rows.b0 + b;
  const bool active = b < nb;
  float c = 0.f, bi[4] = {0.f, 0.f, 0.f, 0.f}, bh[4] = {0.f, 0.f, 0.f, 0.f};
  if (active) {
    c = to_compute(a.c0[static_cast<int64_t>(bg) * H + j]);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (a.b_ih != nullptr) bi[q] = to_compute(a.b_ih[q * H + j]);
      if (a.b_hh != nullptr) bh[q] = to_compute(a.b_hh[q * H + j]);
    }
  }
  mbar_init_all(mbar, 2);  // a cl_sync follows before any block writes into them
  // Every block of the cluster has started (zeroed its buffers, initialised its barriers) before
  // any writes into it.
  cl_sync();

  // Step s's input products, loaded a step ahead (in the barrier's wait of the step before).
  auto load_xp = [&](int64_t s, float (&xv)[4]) {
    const int64_t t = a.reverse ? a.steps - 1 - s : s;
#pragma unroll
    for (int q = 0; q < 4; ++q) xv[q] = a.xp[(t * B + bg) * 4 * H + q * H + j];
  };
  float xv[4] = {0.f, 0.f, 0.f, 0.f};
  if (active) load_xp(0, xv);

  for (int64_t step = 0; step < a.steps; ++step) {
    const int64_t t = a.reverse ? a.steps - 1 - step : step;
    const int cur = static_cast<int>(step & 1);
    const int64_t row = t * B + bg;
    float* part = parts + cur * cl_part_floats();
    if (step > 0) {  // h_{t-1}: every block's pieces in buffer cur (its ((step - 1) / 2)-th phase)
      cl_wait(mbar + 8 * cur, static_cast<unsigned>(((step - 1) >> 1) & 1));
    }
    if (tid == 0 && step + 1 < a.steps)  // the next buffer's phase: nb H values from the cluster
      mbar_expect_tx(mbar + 8 * (cur ^ 1), nb * H * 2);  // st.async completes it
    // 2. Partial products of gate rows 16 mt.. over half kh of H, two accumulators an n-tile.
    const T* hb = h_s + cur * kClMaxBatch * S + g * S + kh * (H / 2) + 2 * tq;
    float acc[NT][2][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[n][e][i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KH; ++kk) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        uint32_t bf[2];
        load_b(bf, hb + n * 8 * S + 16 * kk);
        mma16816(acc[n][kk & 1], wf[kk], bf, T{});
      }
    }
    // d: (gate row g (+8), batch 2 tq (+1)) -> part[kh][batch][gate row]
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      float* p = part + (kh * kClMaxBatch + n * 8 + 2 * tq) * kClPartStride + mt * 16 + g;
      p[0] = acc[n][0][0] + acc[n][1][0];
      p[kClPartStride] = acc[n][0][1] + acc[n][1][1];
      p[8] = acc[n][0][2] + acc[n][1][2];
      p[kClPartStride + 8] = acc[n][0][3] + acc[n][1][3];
    }
    __syncthreads();
    // 3. The cell of (b, j), as cell_forward: pre-activations, gates, c_t, h_t; h_{t-1} for
    // reserve_h read before this thread's sends (after them, other blocks may overwrite it).
    float gate[4], cp = c, ht = 0.f;
    T hprev = zero, hv = zero;
    if (active) {
      const float* p0 = part + b * kClPartStride + lane;
      const float* p1 = p0 + kClMaxBatch * kClPartStride;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float x = xv[q] + (p0[q * kClUnits] + p1[q * kClUnits]);
        if (a.b_ih != nullptr) x += bi[q];
        if (a.b_hh != nullptr) x += bh[q];
        gate[q] = x;
      }
      gate[0] = sigmoid(gate[0]);
      gate[1] = sigmoid(gate[1]);
      gate[2] = tanhf(gate[2]);
      gate[3] = sigmoid(gate[3]);
      c = gate[1] * cp + gate[0] * gate[2];
      ht = gate[3] * tanhf(c);
      hprev = h_s[cur * kClMaxBatch * S + b * S + j];
      hv = from_compute<T>(ht);
      hl[b * kClUnits + lane] = hv;
    }
    __syncwarp();
    // 4. Row b's 32 values (four 16-byte pieces) into every block's next buffer.
    if (active && step + 1 < a.steps) {
      const int piece = lane & 3;
      const uint4 v = *reinterpret_cast<const uint4*>(hl + b * kClUnits + 8 * piece);
      T* dst = h_s + (cur ^ 1) * kClMaxBatch * S + b * S + u0 + 8 * piece;
      const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(dst));
      const unsigned bar = mbar + 8 * (cur ^ 1);
#pragma unroll
      for (int d = lane >> 2; d < CS; d += 8) cl_send(cl_map(local, d), v, cl_map(bar, d));
    }
    if (active) {
      float* r = a.reserve + row * 5 * H + j;
      r[0] = gate[0];
      r[H] = gate[1];
      r[2 * H] = gate[2];
      r[3 * H] = gate[3];
      r[4 * H] = cp;
      a.reserve_h[row * H + j] = hprev;
      a.out[row * H + j] = hv;
      if (step + 1 < a.steps) {
        load_xp(step + 1, xv);
      } else {
        a.h_n[static_cast<int64_t>(bg) * H + j] = hv;
        a.c_n[static_cast<int64_t>(bg) * H + j] = from_compute<T>(c);
      }
    }
  }
  // A block's last sends may be in flight when its loop ends: no block exits before all have
  // ended theirs.
  cl_sync();
#else
  __trap();  // never chosen without sm_90 code (cluster_capacity checks the build)
#endif
}

}  // namespace lstm
}  // namespace fastlayers
