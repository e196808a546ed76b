// The fused Winograd kernel's shared-memory layouts (fused.cuh): an item's shape and chunk, the
// input patch (Patch, PatchF32), U's blocks as the filter transform writes them and the kernel's
// bulk copies take them (swz, filter_transform_padded), V's points (vpoint), a block's shared
// memory (smem_bytes), and where the data transform's lanes read and write (Transform), with the
// compile-time checks that their accesses fall in distinct banks. What changes one of them changes
// the kernel's addressing with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/mma.cuh"
#include "../common/storage.h"
#include "layout.h"
#include "transforms.cuh"

namespace fastlayers {
namespace winograd {
namespace fused {

constexpr int kThreads = 256;  // 8 warps
constexpr int kBM = static_cast<int>(kFusedBlockChannels);  // result channels an item
constexpr int kTR = 4, kTC = 8;  // an item's tiles: kTR rows x kTC columns of one sample
constexpr int kBP = kTR * kTC;   // 32 tiles
constexpr int kBK = static_cast<int>(kFusedChunk);  // reduction channels per chunk: one mma k-step
static_assert(kBK == 16 && kBP == 32 && kBM == 64, "the warp layout below");
constexpr int kVStages = 2;
// Reduction channels a chunk (fused_chunk; float32 values go to the tensor cores as TF32, or
// whole, split into TF32 hi + lo as they are read).
template <typename T>
constexpr int kChunkOf = static_cast<int>(fused_chunk(static_cast<int>(sizeof(T))));
static_assert(kChunkOf<__half> == kBK, "a chunk of 16-bit values is one m16n8k16 k-step");
// A chunk's input patch: 2 kTR + 2 rows of the windows' 2 kTC + 2 columns a channel, in rows of
// 32-bit words, kBK channels, in one of two layouts (Patch<kTma>):
// - kTma (the width a multiple of 8, the data 16-byte aligned: a tensor map's strides): one TMA
//   copy of a box of kTmaBox values x kTmaRows rows x kBK channels of one sample, from the
//   multiple of 8 at or before the windows' first column (a box must start 16-byte aligned); the
//   windows start `woff` words into a row (0..3, the same for every item of a launch, tx0 being
//   a multiple of 8), plus kXoff values; the tensor map gives zeros outside the image and past
//   the last channel. A row takes 16 words (64 bytes), a channel 176: the box is one row taller
//   than the windows need (kTmaRows), and lands dense with the 64-byte swizzle (the 16-byte
//   chunk j of a row at j ^ bits 7-8 of its shared address: Transform's reads undo it).
// - otherwise a row starts at the even column at or before the windows' first (kPatchWords
//   words by 4-byte copies, or value by value for odd widths); a channel takes 100 words.
// A 32-bit read of the transform (Transform): its lanes read words {0, 1, kRow, kRow + 1} (odd
// starts: also {1, 2, kRow + 1, kRow + 2}) of 8 windows: otherwise, the first words are the 8
// multiples of 4 modulo 32 (channels 2q at 8 q x 2 tiles 4 words apart), so every read falls in 32
// distinct banks; kTma, channels 2q at 352 q words, whose swizzles differ (352 q / 32 modulo 4 = 0,
// 3, 2, 1, plus the same phase for all from where Ps lies), so 32 distinct banks as well (a dense
// 10-row box: 4 lanes a bank unswizzled, 2 swizzled). The copies run kAhead chunks ahead of the
// products: U's chunks take kAhead + 1 stages (the one multiplied and those in flight), the patches
// kAhead (the one transformed and those in flight); kTma's 11 KB patch stages leave room for 3
// ahead.
constexpr int kPatchRows = 2 * kTR + 2, kPatchWords = kTC + 2;
constexpr int kTmaBox = 32;  // values: the windows' 2 kTC + 2 columns from up to 7 in
constexpr int kTmaRows = kPatchRows + 1;  // a channel's rows in the box (see above)
template <bool kTma>
struct Patch {
  static constexpr int kAhead = kTma ? 3 : 4, kUStages = kAhead + 1, kStages = kAhead;
  static constexpr int kRow = kTma ? kTmaBox / 2 : kPatchWords;
  static constexpr int kChannel = kTma ? kTmaRows * kRow : 100;
  static __host__ __device__ constexpr int word(int c, int row, int w) {
    return c * kChannel + row * kRow + w;
  }
  static constexpr int kStage = word(kBK, 0, 0);  // words
  static_assert(kPatchRows * kRow <= kChannel, "a channel's rows");
  // kTma: a stage and 8 channels span whole 512-byte swizzle periods, so one lane's swizzled
  // offsets serve every stage and both halves of a chunk's channels.
  static_assert(kTma ? kRow == 16 && kChannel == 176 && kStage * 4 % 512 == 0 &&
                           8 * kChannel * 4 % 512 == 0
                     : kRow == 10 && kChannel % 32 == 4,
                "patch banks (and the TMA box's swizzle periods)");
  static_assert(kTma ? 2 * kRow >= 7 + 2 * kTC + 2 && kTmaBox * 2 % 16 == 0 : kRow == kPatchWords,
                "a row holds the windows");
};
static_assert(2 * kPatchWords >= 2 * kTC + 3, "a patch row holds an odd start's windows");
static_assert(kPatchWords < 32, "a bit a patch word");
// float32 (TF32 or split TF32 products): the patch by TMA alone (the width a multiple of 4, the
// data 16-byte aligned), a box of kTmaBox values x kTmaRows rows x 8 channels from the multiple of
// 4 at or before the windows' first column, so the windows start woff = -ox mod 4 values into a row
// (the same for every item). A row takes 32 words (128 bytes), a channel kTmaRows rows, under the
// 128-byte swizzle (the 16-byte chunk j of a row at j ^ bits 7-9 of its shared address): a
// channel's rows start 3 c + row rows modulo 8 into the swizzle's period, and the transform's reads
// pick channels so that this keeps them apart (the kernel, kF32). A stage is the 16-bit layout's
// bytes (11 swizzle periods), so the shared memory and the copies' sizes are its.
struct PatchF32 {
  static constexpr int kAhead = 3, kUStages = kAhead + 1, kStages = kAhead;
  static constexpr int kRow = kTmaBox, kChannel = kTmaRows * kRow;
  static __host__ __device__ constexpr int word(int c, int row, int w) {
    return c * kChannel + row * kRow + w;
  }
  static constexpr int kStage = kChunkOf<float> * kChannel;  // words
  static_assert(kStage == Patch<true>::kStage && kStage * 4 % 1024 == 0,
                "the 16-bit TMA layout's bytes; whole swizzle periods a stage");
  static_assert(3 + 2 * kTC + 2 <= kRow, "a row holds the windows from up to 3 values in");
};

// Offset of value (row, k) in shared rows of 16 values (32 bytes, no padding): the two 16-byte
// halves of a row swap places in rows 4..7 of every 8, so the eight 16-byte rows an ldmatrix
// reads fall in 32 distinct banks (the transform's stores: vpoint).
__host__ __device__ constexpr int swz(int row, int k) {
  return row * 16 + ((((k >> 3) ^ (row >> 2)) & 1) << 3) + (k & 7);
}

// U = (G g G^T) of filter g: w[o, r] (forward) or w[r, o] turned 180 degrees (input gradient);
// zero in the padding. One thread per padded (o, r), r fastest. U is laid out as the kernel's
// shared memory takes it, one contiguous block of A2 * kBM rows of 32 bytes per (result-channel
// block, reduction chunk of kCh): [Mo_pad / kBM][R_pad / kCh][xi][kBM rows, swizzled by swz in
// 16-bit units: value k of a float32 row is units 2 k, 2 k + 1]; float32 values rounded to TF32
// where the products take them so (kTf32), else kept whole (split TF32 products).
template <typename T, typename Mat, bool kTf32 = true>
__global__ void filter_transform_padded(const T* __restrict__ w, T* __restrict__ U, FusedDims f,
                                        int64_t C, bool input_grad) {
  using F = compute_t<T>;
  constexpr int A = Mat::kAlpha, R = Mat::kR, kCh = kChunkOf<T>, kUnits = 16 / kCh;
  const int64_t n = f.Mo_pad * f.R_pad, chunks = f.R_pad / kCh;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = i / f.R_pad, r = i - o * f.R_pad;
    F out[A][A];
    if (o < f.Mo && r < f.R) {
      // forward: w[k = o, c = r]; input gradient: w[k = r, c = o], turned
      transform_filter<Mat>(w + (input_grad ? r * C + o : o * C + r) * R * R, input_grad, out);
    } else {
#pragma unroll
      for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < A; ++b) out[a][b] = F(0);
    }
    uint16_t* u = reinterpret_cast<uint16_t*>(U) +
                  ((o / kBM) * chunks + r / kCh) * (A * A * kBM * 16) +
                  swz(static_cast<int>(o % kBM), static_cast<int>(r % kCh) * kUnits);
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
      for (int b = 0; b < A; ++b) {
        T* v = reinterpret_cast<T*>(u + (a * A + b) * kBM * 16);
        if constexpr (std::is_same<T, float>::value)
          *v = kTf32 ? __uint_as_float(to_tf32(out[a][b])) : out[a][b];
        else
          *v = from_compute<T>(out[a][b]);
      }
  }
}

// The transformed tiles' point p starts vpoint(p) values into a V stage: kBP rows of 16 values
// a point, plus 4 or 8 words (kTma or not) times (p / 2) % 4 + 4 (p / 8), so that a 32-bit
// store of the transform (points 8 h + 2t + e, t = 0..3, of 8 channel pairs x tiles) falls in
// 32 distinct banks.
template <bool kTma>
__host__ __device__ constexpr int vpoint(int p) {
  return p * kBP * 16 + (kTma ? 8 : 16) * (((p >> 1) & 3) + 4 * (p >> 3));
}
// Values past the 16 points' rows (vpoint(15) - 15 kBP 16 at most), rounded up so that a V stage
// is a multiple of 128 bytes (the patches after V: TMA destinations).
constexpr int kVSkew = 128;

// Shared memory of a block: U's chunks [kUStages][A2][kBM][16 units of 16 bits], the transformed
// tiles [kVStages][A2 points at vpoint][kBP][16 units] (both rows swizzled by swz), the input
// patches [kStages] of kStage words (P: Patch<kTma> or PatchF32) and an mbarrier per U stage.
template <int A2, typename P>
constexpr size_t smem_bytes() {
  return size_t{2} * (A2 * 16 * (P::kUStages * kBM + kVStages * kBP) + kVStages * kVSkew) +
         size_t{4} * P::kStages * P::kStage + size_t{8} * P::kUStages;
}

// Where the transform's lanes read and write (the kernel's transform share): the rectangle
// column of warp w's tile j of tile pair `pair` (kTma: 2 apart, pairs 4 apart; else 4 apart,
// pairs 1 apart: the banks of Patch); rel: words from a lane's first read (channel 2q, window
// row t / 2, pair 0) to channel 8 i + 2 q + par, window row 2 hi + t / 2, pair `pair`; vrel:
// values from a lane's first V store (point 2t, channels 8 i + 2q.., pair 0) to point
// 8 h + 2 t + e of pair `pair`.
template <bool kTma>
struct Transform {
  using P = Patch<kTma>;
  static __host__ __device__ constexpr int col(int w, int pair, int j) {
    return kTma ? (w & 1) + 4 * pair + 2 * j : 2 * (w & 1) + pair + 4 * j;
  }
  static __host__ __device__ constexpr int rel(int i, int pair, int par, int hi) {
    return (8 * i + par) * P::kChannel + 2 * hi * P::kRow +
           (col(0, pair, 0) - col(0, 0, 0));
  }
  static __host__ __device__ constexpr int vrel(int i, int pair, int h, int e) {
    return vpoint<kTma>(8 * h + e) +
           (kTma ? 64 * pair + 8 * (((i ^ pair) & 1) - (i & 1)) : 16 * pair);
  }
  // Words from the patch stage's start to the first read of lane `lane` of warp w (odd: the
  // windows start at an odd column; the TMA layout's woff not included): the kernel's t_src.
  static __host__ __device__ constexpr int first_word(int w, int lane, bool odd) {
    const int xt = lane & 3, xq = (lane >> 2) & 3, xj = lane >> 4, xs = xt & 1;
    return P::word(2 * xq, 2 * (w >> 1) + (xt >> 1), col(w, 0, xj)) + (odd ? (xs ? 0 : 1) : xs);
  }
  // kTma: the kernel's reads through TMA's 64-byte swizzle (the 16-byte chunk j of a 64-byte row
  // at j ^ bits 7-8 of its shared address) with the patch region at 128-byte phase `phase` of
  // the swizzle's 512-byte period: for each woff and parity, the 32 lanes of every read (pair,
  // r and the odd start's second; i and the stages move them by whole periods, Patch) read at
  // most one word a bank.
  static __host__ __device__ constexpr uint32_t swizzled(uint32_t at) {
    return at ^ (((at >> 7) & 3u) << 4);
  }
  static __host__ __device__ constexpr bool swizzled_reads_apart(int phase) {
    if constexpr (kTma) {
      for (int odd = 0; odd < 2; ++odd)
        for (int woff = 0; woff < 4; ++woff)
          for (int w = 0; w < 8; ++w)
            for (int pair = 0; pair < 2; ++pair)
              for (int r = 0; r < 4; ++r)
                for (int k = 0; k < 1 + odd; ++k) {
                  uint32_t in_bank[32] = {};
                  bool used[32] = {};
                  for (int lane = 0; lane < 32; ++lane) {
                    const int y = odd && (lane & 1) ? 2 : 0;
                    const int at = first_word(w, lane, odd) + woff + k * y +
                                   rel(0, pair, r & 1, r >> 1);
                    const uint32_t word =
                        swizzled(128u * phase + 4u * static_cast<uint32_t>(at)) >> 2;
                    const uint32_t bank = word & 31u;
                    if (used[bank] && in_bank[bank] != word) return false;
                    used[bank] = true;
                    in_bank[bank] = word;
                  }
                }
    }
    return true;
  }
  // rel and vrel against the layouts for every lane, warp and group; the products' points
  static __host__ __device__ constexpr bool ok() {
    for (int w = 0; w < 8; ++w)
      for (int j = 0; j < 2; ++j)
        for (int q = 0; q < 4; ++q)
          for (int t = 0; t < 4; ++t)
            for (int i = 0; i < 2; ++i)
              for (int pair = 0; pair < 2; ++pair) {
                const int row = 2 * (w >> 1) + (t >> 1), c0 = col(w, 0, j), c = col(w, pair, j);
                const int tile0 = kTC * (w >> 1) + c0, tile = kTC * (w >> 1) + c;
                for (int par = 0; par < 2; ++par)
                  for (int hi = 0; hi < 2; ++hi)
                    if (P::word(8 * i + 2 * q + par, row + 2 * hi, c) - P::word(2 * q, row, c0) !=
                        rel(i, pair, par, hi))
                      return false;
                for (int h = 0; h < 2; ++h)
                  for (int e = 0; e < 2; ++e)
                    if (vpoint<kTma>(8 * h + 2 * t + e) + swz(tile, 8 * i + 2 * q) -
                            (vpoint<kTma>(2 * t) + swz(tile0, 8 * i + 2 * q)) !=
                        vrel(i, pair, h, e))
                      return false;
              }
    for (int pa = 0; pa < 4; ++pa)
      for (int b = 0; b < 4; ++b)
        if (vpoint<kTma>(4 * pa + b) != vpoint<kTma>(4 * pa) + vpoint<kTma>(b)) return false;
    for (int p = 0; p + 1 < 16; ++p)  // the points' rows do not overlap
      if (vpoint<kTma>(p + 1) < vpoint<kTma>(p) + kBP * 16) return false;
    return true;
  }
};

}  // namespace fused
}  // namespace winograd
}  // namespace fastlayers
