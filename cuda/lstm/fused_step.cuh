// One forward step of a float16 / bfloat16 layer without a projection in one kernel: the gate
// products h_{t-1} w_hh^T on tensor cores and the cell on them, where the step-wise loop runs a
// cuBLAS GEMM and cell_forward (two launches, and the products' round trip through memory).
//
// A block owns kFsUnits hidden units (their four gates: 4 kFsUnits rows of w_hh) for NB batch
// rows; its kFsWarps warps split H (the product's depth) into equal slices, so each warp loads
// only its slice of the gate rows and of h_{t-1} (cp.async into shared memory, rows padded to an
// odd count of 16-byte chunks so ldmatrix reads them without bank conflicts) and multiplies it
// alone (mma.sync m16n8k16, float32 accumulation, as the GEMM's); the slices' products meet in
// shared memory, summed in warp order, and a thread per (row, unit) runs the cell as
// cell_forward does. H = 128 KS is a template argument, so every loop is unrolled.
//
// The step is launched as a programmatic dependent of the step before (sequence.cuh), and loads
// before griddepcontrol.wait only what is final by the time the step before started: w_hh's
// rows, the biases, the call's pointers, and the step's input products xp, which the loop's
// in-line chunk GEMMs write: a step that starts a chunk is launched plainly, after its GEMM, and
// a dependent step starts only after the step before it did. h_{t-1} and c load after the wait,
// so the loads overlap the previous step's tail. Blocks read h_{t-1} while others write h_t, so h alternates between two
// buffers (hp read, hn written).
#pragma once

#include <cstdint>

#include "../common/async_copy.cuh"
#include "../common/mma.cuh"
#include "cell.cuh"

namespace fastlayers {
namespace lstm {

constexpr int kFsUnits = 8, kFsGateRows = 4 * kFsUnits, kFsWarps = 8,
              kFsThreads = 32 * kFsWarps;

// The layout of a block of NB batch rows at H = 128 KS.
template <int NB, int KS>
struct FsGeometry {
  static constexpr int H = 128 * KS;
  static constexpr int KW = 8 * KS / kFsWarps;   // k-steps of 16 a warp
  static constexpr int NC = 2 * KW;              // 16-byte chunks of a warp's row slice
  static constexpr int LD = (NC | 1) * 8;        // a slice row's stride in values (odd chunks)
  static constexpr int ROWS = kFsGateRows + NB;  // a warp's rows: gate rows, then batch rows
  static constexpr int NBP = NB + 4;             // the products' row stride (floats)
  static constexpr int XP = 40;                  // a batch row of the xp tile (floats, 4 x 8 + pad)
  static constexpr int LOAD = kFsWarps * ROWS * LD * 2;
  static constexpr int PART = kFsWarps * kFsGateRows * NBP * 4;
  static constexpr int MAIN = LOAD > PART ? LOAD : PART;
  static constexpr int SMEM = MAIN + NB * XP * 4 + NB * kFsUnits * 4 + NB * kFsUnits * 2;
  static_assert(NB % 16 == 0 && NB * kFsUnits <= kFsThreads, "a (row, unit) pair a thread");
  static_assert(SMEM <= 227 * 1024, "shared memory of a block");
};

// One step over the n active rows at row offset o of B: h_{t-1} from hp [B, H], h_t of rows < n
// to hn (rows n.. B keep theirs: copied), c [B, H] updated in place; the step's out, reserve and
// reserve_h rows through `rows` (no projection: R = H). w_hh [4H, H], 16-byte aligned.
// Grid (H / kFsUnits, ceil(B / NB)), kFsThreads threads, FsGeometry::SMEM bytes.
template <typename T, int NB, int KS>
__global__ void __launch_bounds__(kFsThreads)
    fused_forward_step(int n, int B, int64_t o, const ForwardRows<T>* __restrict__ rows,
                       const T* __restrict__ w_hh, const T* __restrict__ hp, T* __restrict__ hn,
                       float* __restrict__ c) {
  using G = FsGeometry<NB, KS>;
  constexpr int H = G::H;
  extern __shared__ __align__(16) unsigned char fs_smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int j0 = blockIdx.x * kFsUnits, b0 = blockIdx.y * NB;
  // The next step may start launching: it waits for this one before reading what it writes.
#if __CUDA_ARCH__ >= 900  // programmatic launch is sm_90's; FusedStep serves sm_90 and later
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  T* ws = reinterpret_cast<T*>(fs_smem) + warp * G::ROWS * G::LD;  // this warp's slice rows
  T* hs = ws + kFsGateRows * G::LD;
  float* xs = reinterpret_cast<float*>(fs_smem + G::MAIN);  // [NB][XP]: i, f, g, o x units
  float* cs = xs + NB * G::XP;                              // [NB][kFsUnits] c_{t-1}
  T* hk = reinterpret_cast<T*>(cs + NB * kFsUnits);        // [NB][kFsUnits] h_{t-1}
  const int col0 = 16 * G::KW * warp;
  // w_hh's gate rows of this warp's slice: gate row r is gate r / 8 of unit j0 + r % 8.
#pragma unroll
  for (int it = 0; it < (kFsGateRows * G::NC + 31) / 32; ++it) {
    const int idx = lane + 32 * it;
    if (idx < kFsGateRows * G::NC) {
      const int r = idx / G::NC, ch = idx % G::NC;
      cp_async16(ws + r * G::LD + 8 * ch,
                 w_hh + ((r / kFsUnits) * H + j0 + r % kFsUnits) * H + col0 + 8 * ch);
    }
  }
  const ForwardRows<T> p = *rows;
  const int last = max(n - 1, 0), active = min(NB, n - b0);  // active <= 0: rows past n
  // The step's input products of the block's (row, gate, unit): 16 bytes a copy.
  if (tid < active * 8) {
    const int i = tid / 8, q = (tid / 2) % 4, half = tid % 2;
    cp_async16(xs + i * G::XP + q * kFsUnits + 4 * half,
               p.xp + (o + b0 + i) * 4 * H + q * H + j0 + 4 * half);
  }
  const int u = tid % kFsUnits, i = tid / kFsUnits, b = b0 + i, j = j0 + u;
  const bool cell = tid < NB * kFsUnits && b < B;
  float bias[4] = {0.f, 0.f, 0.f, 0.f};
  if (cell && b < n) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (p.b_ih != nullptr) bias[q] += to_compute(p.b_ih[q * H + j]);
      if (p.b_hh != nullptr) bias[q] += to_compute(p.b_hh[q * H + j]);
    }
  }
  cp_async_commit();

  // What the step before wrote: h_{t-1} and c.
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
#pragma unroll
  for (int it = 0; it < (NB * G::NC + 31) / 32; ++it) {
    const int idx = lane + 32 * it;
    if (idx < NB * G::NC) {
      const int r = idx / G::NC, ch = idx % G::NC;  // rows past n read row n - 1 (dropped)
      cp_async16(hs + r * G::LD + 8 * ch, hp + min(b0 + r, last) * H + col0 + 8 * ch);
    }
  }
  if (tid < active * 2) cp_async16(cs + tid * 4, c + (b0 + tid / 2) * H + j0 + 4 * (tid % 2));
  // h_{t-1} of the block's units, every row to B: the reserve's, and what rows past n keep.
  if (tid < min(NB, B - b0)) cp_async16(hk + tid * kFsUnits, hp + (b0 + tid) * H + j0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();

  // The slice's products: gate rows 0-15 (i, f) and 16-31 (g, o) by NB batch rows.
  float acc[2][NB / 8][4] = {};
#pragma unroll
  for (int ks = 0; ks < G::KW; ++ks) {
    const int kk = 16 * ks;
    uint32_t a[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
      ldmatrix_x4(a[mt], ws + (16 * mt + (lane & 15)) * G::LD + kk + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < NB / 16; ++np) {
      uint32_t bb[4];
      ldmatrix_x4(bb, hs + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * G::LD + kk +
                          ((lane >> 3) & 1) * 8);
      const uint32_t b_lo[2] = {bb[0], bb[1]}, b_hi[2] = {bb[2], bb[3]};
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        mma16816(acc[mt][2 * np], a[mt], b_lo, T{});
        mma16816(acc[mt][2 * np + 1], a[mt], b_hi, T{});
      }
    }
  }
  __syncthreads();  // every slice read (the products take its place), every copy landed
  float* part = reinterpret_cast<float*>(fs_smem);
  {
    const int g = lane >> 2, t = lane & 3;
    float* pw = part + warp * kFsGateRows * G::NBP;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NB / 8; ++nt) {
        const int m = 16 * mt + g, col = 8 * nt + 2 * t;
        pw[m * G::NBP + col] = acc[mt][nt][0];
        pw[m * G::NBP + col + 1] = acc[mt][nt][1];
        pw[(m + 8) * G::NBP + col] = acc[mt][nt][2];
        pw[(m + 8) * G::NBP + col + 1] = acc[mt][nt][3];
      }
  }
  __syncthreads();
  if (!cell) return;
  const T h_prev = hk[i * kFsUnits + u];
  if (b >= n) {
    hn[b * H + j] = h_prev;
    return;
  }
  float v[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float s = xs[i * G::XP + q * kFsUnits + u];
#pragma unroll
    for (int w = 0; w < kFsWarps; ++w) s += part[(w * kFsGateRows + q * kFsUnits + u) * G::NBP + i];
    v[q] = s + bias[q];
  }
  const int64_t row = o + b;
  p.reserve_h[row * H + j] = h_prev;
  float cn, ht;
  cell_update(v, cs[i * kFsUnits + u], p.reserve + row * 5 * H + j, int64_t{H}, cn, ht);
  c[b * H + j] = cn;
  const T hv = from_compute<T>(ht);
  hn[b * H + j] = hv;
  p.out[row * H + j] = hv;
}

}  // namespace lstm
}  // namespace fastlayers
