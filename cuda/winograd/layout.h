// Geometry and workspace of a Winograd convolution pass: plain arithmetic, no CUDA, so the host
// side of either build can size a pass and the CPU kernels tile exactly as the CUDA ones.
//
// Every pass is a sum over tiles of one 2-D Winograd algorithm F(m x m, r x r), alpha = m + r - 1:
//   Forward     F(tile, 3): input tiles alpha x alpha at stride m (B^T), filters (G), y tiles m x m
//               (A^T) over the output; M[xi] [K, P] = U[xi] [K, C] V[xi] [C, P].
//   InputGrad   F(tile, 3) on grad_output with the filters turned 180 degrees and K, C swapped,
//               padding 2 - p (negative: the windows start inside grad_output); tiles of grad_input.
//               M[xi] [C, P] = U[xi]^T [C, K] V[xi] [K, P].
//   WeightGrad  F(3, tile): grad_output tiles tile x tile at stride `tile` are the filters (G),
//               input tiles alpha x alpha at the same stride the data (B^T); the 3 x 3 result is
//               summed over every tile of every sample: M[xi] [C, K] = X[xi] [C, P] Gy[xi]^T [P, K].
// xi runs over the alpha^2 points of the transformed tile, P over (sample, tile row, tile column).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../common/conv_pass.h"

namespace fastlayers {
namespace winograd {

// The kernel side the ops take (3 x 3 filters), and the tiles each pass offers.
constexpr int64_t kKernel = 3;
// Forward and input gradient: output tiles m of F(m, 3).
constexpr bool forward_tile_ok(int64_t m) { return m == 2 || m == 4 || m == 6; }
// Weight gradient: grad_output tiles r of F(3, r).
constexpr bool weight_tile_ok(int64_t r) { return r == 2 || r == 4; }
inline bool tile_ok(Pass pass, int64_t tile) {
  return pass == Pass::WeightGrad ? weight_tile_ok(tile) : forward_tile_ok(tile);
}

// The fused kernels (float16, bfloat16, float32): F(2x2, 3x3) for the forward and the input
// gradient (fused.cuh), F(3x3, 2x2) for the weight gradient (fused_wgrad.cuh); tile 2 either way.
constexpr int64_t kFusedTile = 2;
inline bool fused_ok(Pass, int64_t tile) { return tile == kFusedTile; }

struct Shape {
  int64_t S, C, K;  // batch, input channels, output channels
  int64_t H, W;     // input image
  int64_t ph, pw;   // zero padding
  int64_t tile;     // m of F(m, 3) (Forward, InputGrad); r of F(3, r) (WeightGrad)
  int64_t oh() const { return H + 2 * ph - kKernel + 1; }
  int64_t ow() const { return W + 2 * pw - kKernel + 1; }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How one pass tiles its problem.
struct Tiling {
  int64_t m, r, alpha;  // F(m x m, r x r)
  int64_t step;         // tile stride on the operands and the result
  int64_t th, tw;       // tiles per sample
  // The data operand (B^T): [S, data_ch, data_h, data_w]; tile (ty, tx) reads the alpha x alpha
  // window at (ty * step - oy, tx * step - ox), zeros outside.
  int64_t data_ch, data_h, data_w, oy, ox;
  // The result rows and columns the tiles cover: [.., res_h, res_w], m x m per tile (Forward,
  // InputGrad); WeightGrad: 3 x 3.
  int64_t res_ch, res_h, res_w;
  int64_t tiles() const { return th * tw; }
};

inline Tiling tiling(Pass pass, const Shape& s) {
  Tiling t{};
  switch (pass) {
    case Pass::Forward:
      t.m = s.tile; t.r = kKernel; t.step = t.m;
      t.th = ceil_div(s.oh(), t.m); t.tw = ceil_div(s.ow(), t.m);
      t.data_ch = s.C; t.data_h = s.H; t.data_w = s.W; t.oy = s.ph; t.ox = s.pw;
      t.res_ch = s.K; t.res_h = s.oh(); t.res_w = s.ow();
      break;
    case Pass::InputGrad:
      t.m = s.tile; t.r = kKernel; t.step = t.m;
      t.th = ceil_div(s.H, t.m); t.tw = ceil_div(s.W, t.m);
      t.data_ch = s.K; t.data_h = s.oh(); t.data_w = s.ow();
      t.oy = kKernel - 1 - s.ph; t.ox = kKernel - 1 - s.pw;
      t.res_ch = s.C; t.res_h = s.H; t.res_w = s.W;
      break;
    case Pass::WeightGrad:
      t.m = kKernel; t.r = s.tile; t.step = t.r;
      t.th = ceil_div(s.oh(), t.r); t.tw = ceil_div(s.ow(), t.r);
      t.data_ch = s.C; t.data_h = s.H; t.data_w = s.W; t.oy = s.ph; t.ox = s.pw;
      t.res_ch = s.C; t.res_h = kKernel; t.res_w = kKernel;
      break;
  }
  t.alpha = t.m + t.r - 1;
  return t;
}

// Workspace of one chunk of `samples` samples, in bytes, for transformed operands stored in
// `store_bytes` per value and products accumulated in `acc_bytes`:
//   Forward, InputGrad: U [a2, K, C] (InputGrad on TF32: [a2, C, K]), V [a2, data_ch, P],
//                       M [a2, res_ch, P] (accumulation type).
//   WeightGrad:         Gy [a2, K, P], X [a2, C, P], M [a2, C, K] (accumulation type, summed over
//                       the chunks).
// Each buffer starts on a 256-byte boundary. A forward given its filters transformed ahead
// (`filters_given`) reads them where they are: U takes no workspace.
struct Buffers {
  size_t u, v, m, total;  // offsets of U (Gy), V (X), M; total bytes
};

inline size_t align256(size_t n) { return (n + 255) & ~size_t{255}; }

inline Buffers buffers(Pass pass, const Shape& s, int64_t samples, int store_bytes,
                       int acc_bytes, bool filters_given = false) {
  const Tiling t = tiling(pass, s);
  const size_t a2 = static_cast<size_t>(t.alpha * t.alpha);
  const size_t P = static_cast<size_t>(samples * t.tiles());
  size_t u, v, m;
  if (pass == Pass::WeightGrad) {
    u = a2 * s.K * P * store_bytes;
    v = a2 * s.C * P * store_bytes;
    m = a2 * s.C * s.K * acc_bytes;
  } else {
    u = pass == Pass::Forward && filters_given ? 0 : a2 * s.K * s.C * store_bytes;
    v = a2 * t.data_ch * P * store_bytes;
    m = a2 * t.res_ch * P * acc_bytes;
  }
  Buffers b{};
  b.u = 0;
  b.v = align256(u);
  b.m = b.v + align256(v);
  b.total = b.m + align256(m);
  return b;
}

// The fused kernel's items (fused.cuh): result channels an item, and reduction channels a chunk
// of 32 bytes of values (fused_chunk): 16 in float16 and bfloat16 (kFusedChunk), 8 in float32.
constexpr int64_t kFusedBlockChannels = 64;
constexpr int64_t fused_chunk(int store_bytes) { return 32 / store_bytes; }  // store_bytes 2 or 4
constexpr int64_t kFusedChunk = fused_chunk(2);

// Its padded sizes: result channels Mo rounded up to whole blocks, reduction channels R to whole
// chunks. U holds alpha^2 x Mo_pad x R_pad values, a block per (channel block, chunk) in the
// order the kernel's shared memory takes them (fused_layout.cuh, filter_transform_padded).
struct FusedDims {
  int64_t Mo, R, Mo_pad, R_pad;
};
inline FusedDims fused_dims(Pass pass, const Shape& s, int store_bytes) {
  const int64_t Mo = pass == Pass::Forward ? s.K : s.C, R = pass == Pass::Forward ? s.C : s.K;
  const int64_t chunk = fused_chunk(store_bytes);
  return {Mo, R, ceil_div(Mo, kFusedBlockChannels) * kFusedBlockChannels,
          ceil_div(R, chunk) * chunk};
}

// The fused weight gradient (fused_wgrad.cuh): blocks of kWgradBlock output x kWgradBlock input
// channels, each summing a run of chunks of kWgradChunk tiles. A chunk is a rectangle of one
// sample's tiles, `rows` tile rows (1 or 4) x kWgradChunk / rows tile columns: one tile row where
// both operands' rows are multiples of 4 values (float32 then copies a chunk by TMA; with
// ow = W + 2 pw - 2 that takes an odd pw), else whichever leaves fewer empty places past
// the tile grid's edges (1 on a tie); chunks go sample, rectangle row, rectangle column in order.
// The chunks are split into `splits` runs of as near equal length as the division allows, so that
// about kWgradTarget blocks run (four waves of one block an SM on 132 SMs), each run at least
// kWgradMinChunks chunks (one run where there are fewer): a function of the shape alone, so the
// sum's order is too. The workspace: the runs' partial sums, [splits, 16, Kp, Cp] float.
constexpr int64_t kWgradBlock = 32, kWgradChunk = 16, kWgradTarget = 528, kWgradMinChunks = 4;
struct WgradDims {
  int64_t Kp, Cp;       // K, C rounded up to whole blocks
  int64_t rows;         // tile rows a chunk (1 or 4)
  int64_t gh, gw;       // chunks a sample, down and across
  int64_t chunks;       // S gh gw
  int64_t splits;       // runs
  size_t bytes() const {  // the workspace
    return static_cast<size_t>(splits * 16 * Kp * Cp) * sizeof(float);
  }
};
inline WgradDims wgrad_dims(const Shape& s) {
  WgradDims d{};
  d.Kp = ceil_div(s.K, kWgradBlock) * kWgradBlock;
  d.Cp = ceil_div(s.C, kWgradBlock) * kWgradBlock;
  const Tiling t = tiling(Pass::WeightGrad, s);
  const bool aligned = s.W % 4 == 0 && s.ow() % 4 == 0;
  int64_t best = -1;
  for (int64_t rows = 1; rows <= (aligned ? 1 : 4); rows *= 4) {
    const int64_t gh = ceil_div(t.th, rows), gw = ceil_div(t.tw, kWgradChunk / rows);
    if (best < 0 || gh * gw < best) {
      best = gh * gw;
      d.rows = rows;
      d.gh = gh;
      d.gw = gw;
    }
  }
  d.chunks = s.S * d.gh * d.gw;
  const int64_t blocks = (d.Kp / kWgradBlock) * (d.Cp / kWgradBlock);
  d.splits = std::max<int64_t>(
      1, std::min(kWgradTarget / std::max<int64_t>(blocks, 1), d.chunks / kWgradMinChunks));
  return d;
}
inline size_t fused_wgrad_workspace_bytes(const Shape& s) { return wgrad_dims(s).bytes(); }

// Workspace of the fused kernels: the forward's and input gradient's transformed filters U, the
// weight gradient's partial sums.
inline size_t fused_workspace_bytes(Pass pass, const Shape& s, int store_bytes) {
  if (pass == Pass::WeightGrad) return fused_wgrad_workspace_bytes(s);
  const size_t alpha = static_cast<size_t>(kFusedTile + kKernel - 1);
  const FusedDims f = fused_dims(pass, s, store_bytes);
  return alpha * alpha * static_cast<size_t>(f.Mo_pad) * static_cast<size_t>(f.R_pad) *
         store_bytes;
}

// Samples per chunk: the most (at least 1, at most S) whose buffers fit `bound` bytes.
inline int64_t chunk_samples(Pass pass, const Shape& s, int store_bytes, int acc_bytes,
                             int64_t bound, bool filters_given = false) {
  if (s.S <= 1) return std::max<int64_t>(s.S, 1);
  const auto total = [&](int64_t n) {
    return buffers(pass, s, n, store_bytes, acc_bytes, filters_given).total;
  };
  if (total(s.S) <= static_cast<size_t>(bound)) return s.S;
  const size_t one = total(1);
  const size_t fixed = total(0);
  if (one >= static_cast<size_t>(bound)) return 1;
  const size_t per = std::max<size_t>(one - fixed, 1);
  return std::max<int64_t>(1, std::min<int64_t>(s.S, (bound - fixed) / per));
}

}  // namespace winograd
}  // namespace fastlayers
