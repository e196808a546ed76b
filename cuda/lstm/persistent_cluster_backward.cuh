// The persistent backward on thread-block clusters (sm_90): for float16 / bfloat16 layers of
// H = 128, 256 or 512, the recurrence of persistent.cu's backward kernel on H / 32 blocks of one
// cluster, as persistent_cluster.cuh runs the forward's (and, as there, larger batches on several
// clusters, each on its own rows, ClRows).
//
// Block r owns hidden units 32 r .. 32 r + 31 and their 128 gate rows ("local rows" k: gate k / 32
// of unit 32 r + k % 32). Per step, from last to first, the gradient of h_t is
//   dh[b, j] = sum over all 4H gate rows of dgates_(t+1)[b, row] w_hh[row, j],
// and each block holds the part of that sum over its own 128 rows: the products of its w_hh rows
// (in registers for the whole sequence, as mma.sync A fragments of A[j][k] = w_hh[row k, j]; warp
// w takes the m = max(1, H / 256) m-tiles of 16 units of j from m w on, all of one block's units;
// at H 128 warps 8-15 take none) with its
// own gate gradients of the step before (in its shared memory). Each partial [32 units, nb] goes
// to the block that owns the units, by st.async into its shared memory, completing its mbarrier;
// the owner sums the H / 32 partials (fixed order: by source block). So a step moves nb H floats
// into each block's shared memory (the forward's exchange moves nb H halves) and needs no grid
// barrier, no round trip through L2 and no fence. Per step i (from 0):
//   1. wait for the receive buffer i % 2 (every block's partial for this block's units); thread 0
//      arms the other buffer's next phase (nb H floats expected);
//   2. warp b runs the cell's backward of batch row b for the block's 32 units as cell_backward
//      does (dy and the reserve loaded a step ahead; dc stays in a register), writes the unit's
//      four gate gradients to dgates (what the weight and input gradients' GEMMs read) and into
//      the block's gate gradients of buffer i % 2; the block synchronises;
//   3. each warp multiplies and sends its m-tiles' partials into receive buffer (i + 1) % 2 of
//      their owners.
// After the last step one more receive gives h0's gradient. A block writes another's receive
// buffer (i + 1) % 2 at step i only after its wait of step i saw that block's partial of step
// i - 1, which that block sent after its step i - 1 read the buffer (its cell runs before the
// block synchronises and multiplies); its own gate gradients are two buffers for the same reason
// within the block (a warp may still multiply step i's while another runs step i + 1's cell).
#pragma once

#include <cstdint>

#include "persistent_cluster.cuh"

namespace fastlayers {
namespace lstm {

template <typename T>
struct BackArgs {
  int64_t steps;
  int B, H;
  bool reverse;
  const T *dy, *dh_n, *dc_n, *w_hh;  // dy [T B, H]; dh_n, dc_n [B, H] or null (zeros)
  const float* reserve;              // [T B, 5H]
  T* dgates;                         // [T B, 4H]
  T *dh0, *dc0;                      // [B, H]
};

constexpr int kClGateStride = 4 * kClUnits + 8;  // a row of a block's gate gradients: 16 bytes pad

// The shared memory of H: the receive buffers [2, H / 32 sources, 16 rows, 32 units] float | the
// block's gate gradients [2, 16 rows, kClGateStride] T | an mbarrier a receive buffer.
__host__ __device__ constexpr int clb_recv_floats(int H) {
  return (H / kClUnits) * kClMaxBatch * kClUnits;  // one buffer
}
__host__ __device__ constexpr int clb_smem_bytes(int H) {
  return 2 * clb_recv_floats(H) * 4 + 2 * kClMaxBatch * kClGateStride * 2 + 2 * 8;
}

// NT: n-tiles of 8 batch rows (a cluster's rows up to 8 NT).
template <typename T, int H, int NT>
__global__ void __launch_bounds__(kClThreads, 1)
    persistent_cluster_backward_kernel(const BackArgs<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int CS = H / kClUnits;                          // blocks of the cluster
  constexpr int MT = H / 16;                                // m-tiles of the products
  constexpr int MPW = MT >= kClWarps ? MT / kClWarps : 1;   // a warp's m-tiles
  constexpr int RECV = clb_recv_floats(H);
  constexpr int GS = kClGateStride;
  static_assert(H % 128 == 0 && CS <= 16 && (NT == 1 || NT == 2), "instantiated geometries");
  extern __shared__ __align__(16) unsigned char smem[];
  float* recv = reinterpret_cast<float*>(smem);
  T* gate_s = reinterpret_cast<T*>(recv + 2 * RECV);
  const unsigned mbar =
      static_cast<unsigned>(__cvta_generic_to_shared(gate_s + 2 * kClMaxBatch * GS));

  const unsigned rank = cl_rank();
  const int B = a.B, u0 = static_cast<int>(rank) * kClUnits;
  const ClRows rows(B);  // the cluster's batch rows: b0 + (0 .. nb - 1)
  const int nb = rows.nb;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const bool multiplies = warp * MPW < MT;  // at H 128 half the warps have no m-tile

  // The warp's A fragments: m-tile mt = MPW warp + m holds units j = 16 mt + (g, g + 8);
  // A[j][k] = w_hh[(k / 32) H + u0 + k % 32, j] over the block's 128 local rows k.
  uint32_t af[MPW][8][4];
  if (multiplies) {
    const auto w = [&](int j, int k) {
      return a.w_hh[(static_cast<int64_t>(k >> 5) * H + u0 + (k & 31)) * H + j];
    };
#pragma unroll
    for (int m = 0; m < MPW; ++m) {
      const int j = 16 * (MPW * warp + m) + g;
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const int k = 16 * kk + 2 * tq;
        af[m][kk][0] = cl_pack(w(j, k), w(j, k + 1));
        af[m][kk][1] = cl_pack(w(j + 8, k), w(j + 8, k + 1));
        af[m][kk][2] = cl_pack(w(j, k + 8), w(j, k + 9));
        af[m][kk][3] = cl_pack(w(j + 8, k + 8), w(j + 8, k + 9));
      }
    }
  }
  // The gate gradients' rows past nb stay zero (the padded n-tiles' operand).
  const T zero = from_compute<T>(0.f);
  for (int k = tid; k < 2 * kClMaxBatch * GS; k += kClThreads) gate_s[k] = zero;
  // The cell's thread: the cluster's batch row b = warp (row bg of the batch), unit j = u0 + lane.
  const int b = warp, j = u0 + lane, bg = rows.b0 + b;
  const bool active = b < nb;
  float dc = 0.f, dh_last = 0.f;
  if (active) {
    const int64_t at = static_cast<int64_t>(bg) * H + j;
    if (a.dc_n != nullptr) dc = to_compute(a.dc_n[at]);
    if (a.dh_n != nullptr) dh_last = to_compute(a.dh_n[at]);
  }
  mbar_init_all(mbar, 2);  // a cl_sync follows before any block writes into them
  // Every block has started (zeroed its gate gradients, initialised its barriers) before any
  // writes into it.
  cl_sync();

  const auto wait = [&](int64_t i) {  // receive buffer i % 2, its ((i - 1) / 2)-th phase
    cl_wait(mbar + 8 * static_cast<int>(i & 1), static_cast<unsigned>(((i - 1) >> 1) & 1));
  };
  const auto received = [&](int64_t i) {  // this thread's dh: the partials in source order
    const float* p = recv + (i & 1) * RECV + b * kClUnits + lane;
    float s = 0.f;
#pragma unroll
    for (int src = 0; src < CS; ++src) s += p[src * kClMaxBatch * kClUnits];
    return s;
  };
  // Step i's dy and reserve, loaded a step ahead.
  float dyv = 0.f, r[5] = {0.f, 0.f, 0.f, 0.f, 0.f};
  const auto row_of = [&](int64_t i) {
    const int64_t bstep = a.steps - 1 - i, t = a.reverse ? a.steps - 1 - bstep : bstep;
    return t * B + bg;
  };
  const auto load = [&](int64_t i) {
    const int64_t row = row_of(i);
    dyv = to_compute(a.dy[row * H + j]);
#pragma unroll
    for (int q = 0; q < 5; ++q) r[q] = a.reserve[row * 5 * H + q * H + j];
  };
  if (active) load(0);

  for (int64_t i = 0; i < a.steps; ++i) {
    const int cur = static_cast<int>(i & 1);
    if (i > 0) wait(i);
    if (tid == 0)  // the next receive's phase: nb H floats from the cluster
      mbar_expect_tx(mbar + 8 * (cur ^ 1), nb * H * 4);  // st.async completes it
    T* gb = gate_s + cur * kClMaxBatch * GS;
    if (active) {  // 2. cell_backward's arithmetic, in the same order
      const float dht = dyv + (i > 0 ? received(i) : dh_last);
      const float ig = r[0], f = r[1], gg = r[2], o = r[3], cp = r[4];
      const float tc = tanhf(f * cp + ig * gg);
      const float dcn = dc + dht * o * (1.f - tc * tc);
      const T d[4] = {from_compute<T>(dcn * gg * ig * (1.f - ig)),
                      from_compute<T>(dcn * cp * f * (1.f - f)),
                      from_compute<T>(dcn * ig * (1.f - gg * gg)),
                      from_compute<T>(dht * tc * o * (1.f - o))};
      T* dst = a.dgates + row_of(i) * 4 * H + j;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        dst[q * H] = d[q];
        gb[b * GS + q * kClUnits + lane] = d[q];
      }
      dc = dcn * f;
      if (i + 1 < a.steps) load(i + 1);
    }
    __syncthreads();
    // 3. The warp's partials over the block's 128 rows, sent to the units' owners.
    if (multiplies) {
      float acc[MPW][NT][4];
#pragma unroll
      for (int m = 0; m < MPW; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
      const T* hb = gb + g * GS + 2 * tq;
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          uint32_t bf[2];
          load_b(bf, hb + n * 8 * GS + 16 * kk);
#pragma unroll
          for (int m = 0; m < MPW; ++m) mma16816(acc[m][n], af[m][kk], bf, T{});
        }
      }
      // d: (unit j0 = 16 mt + g (+8 for 2, 3), batch 8 n + 2 tq (+1 for 1, 3)) -> the owner
      // j0 / 32's receive buffer, source rank, at (batch, j0 % 32)
      const int nxt = cur ^ 1;
      const float* base = recv + nxt * RECV + static_cast<int>(rank) * kClMaxBatch * kClUnits;
#pragma unroll
      for (int m = 0; m < MPW; ++m) {
        const int j0 = 16 * (MPW * warp + m) + g;
        const unsigned owner = static_cast<unsigned>(j0 >> 5), bar = cl_map(mbar + 8 * nxt, owner);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int bb = 8 * n + 2 * tq + (e & 1), unit = (j0 & 31) + (e >> 1) * 8;
            const unsigned local =
                static_cast<unsigned>(__cvta_generic_to_shared(base + bb * kClUnits + unit));
            if (bb < nb) cl_send(cl_map(local, owner), acc[m][n][e], bar);
          }
        }
      }
    }
  }
  // h0's gradient: the last step's partials.
  wait(a.steps);
  if (active) {
    const int64_t at = static_cast<int64_t>(bg) * H + j;
    a.dh0[at] = from_compute<T>(received(a.steps));
    a.dc0[at] = from_compute<T>(dc);
  }
  // A block's last sends may be in flight when it is done: no block exits before all are.
  cl_sync();
#else
  __trap();  // never chosen without sm_90 code (cluster_capacity checks the build)
#endif
}

}  // namespace lstm
}  // namespace fastlayers
