// The fused Winograd kernel: F(2x2, 3x3) forward or input gradient in float16 / bfloat16, or in
// float32 with TF32 or split TF32 products. The data transform, the alpha^2 products (on tensor
// cores: mma.sync m16n8k16, or m16n8k8 for TF32; float32 without TF32 as split TF32, kSplit;
// float32 accumulation) and the inverse transform run in one kernel; the transformed tiles live in
// shared memory and the products in registers, so no V or M buffer goes through global memory (the
// non-fused pipeline writes and reads both, 4x the input and 8x the result in bytes for F(2x2,
// 3x3), which bounds it below cuDNN's implicit GEMM on tensor cores). The filter transform stays
// its own kernel (U in the workspace, laid out as the kernel's shared memory takes it).
//
// An item is BM result channels x a rectangle of TR x TC tiles of one sample, for all alpha^2
// points, reduced over the reduction channels in chunks of 32 bytes a row (16 channels; 8 in
// float32: the bytes and layouts of U and V are the same, PatchF32, read by ldmatrix). The
// accumulators of an item fill a block's registers, so one block runs an SM; the grid is one block
// an SM and each block takes its items as one stream of chunks, whose copies are issued kAhead
// chunks ahead: U's chunk by one bulk copy on an mbarrier, and the chunk's input patch (the
// rectangle's windows, overlapping, read once: 2 TR + 2 rows of at least 2 TC + 2 values a channel,
// zeros outside the image) by one TMA copy on the same mbarrier where the data allow, else by
// cp.async. While the warps multiply chunk k, they transform (B^T d B) chunk k + 1 from the patch,
// in 16 bits also on tensor cores: a window's 16 values times a constant 16 x 16 matrix
// (Transform); in float32 by adds; one barrier a chunk. A warp multiplies one row of 4 points for
// 32 result channels x all the item's tiles; at the item's end the rows' reductions meet in shared
// memory for A^T M A (finish, below). Items of the same tiles and other result channels are
// neighbours in the stream order, so the patch is read from memory once and from L2 by the others.
// The shared-memory layouts, and the filter transform that writes U in its layout, are in
// fused_layout.cuh.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "../common/async_copy.cuh"
#include "../common/check.h"
#include "../common/fast_div.h"
#include "../common/launch.cuh"
#include "../common/mma.cuh"
#include "../common/storage.h"
#include "../common/tensor_map.h"
#include "fused_layout.cuh"
#include "transforms.cuh"
#include "winograd.h"

namespace fastlayers {
namespace winograd {
namespace fused {

// sum_k c(k) x(k) over the k < N whose constant c(k) is not zero, started from the first such
// term: a sum started from 0 keeps an add the compiler may not drop (0 + x is not x for x = -0).
// Where every c(k) is 0 or +-1, as in F(2x2, 3x3)'s A^T (the inverse transform's sums), each
// step is one exact negation or rounded add, so the values are those of two_sided's sums from 0
// (transforms.cuh) but for the sign of an exact zero (-0 + -0 here, +0 there).
template <int N, typename Coef, typename Val>
__device__ __forceinline__ float sum_nonzero(Coef c, Val x) {
  float acc = 0.f;
  bool first = true;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (c(k) != 0.0) {
      const float term = static_cast<float>(c(k)) * x(k);
      acc = first ? term : acc + term;
      first = false;
    }
  }
  return acc;
}

// x, kept in a register up to its uses: the compiler cannot see through the empty asm, so it
// cannot recompute x at each use instead, as it does for a lane's constant addresses in the chunk
// loop even with registers to spare.
template <typename V>
__device__ __forceinline__ V kept(V x) {
  if constexpr (std::is_pointer<V>::value) {
    asm volatile("" : "+l"(x));
  } else {
    asm volatile("" : "+r"(x));
  }
  return x;
}

template <typename T>
struct Args {
  const T* data;  // the data operand [n, R, ih, iw] (src)
  const T* U;     // transformed filters: a block a (channel block, chunk) (filter_transform_padded)
  const T* bias;  // [Mo] or null
  T* out;         // [n, Mo, oh, ow] (dst)
  FusedDims f;
  TileSource src;
  TileTarget dst;
  FastDiv blocks_m;        // result-channel blocks (Mo_pad / kBM)
  FastDiv blocks_x, blocks_y;  // tile rectangles a sample: columns, rows
  int items;               // (result-channel block, rectangle) pairs
  // not kTma: the patch by 4-byte cp.async (iw even, data 4-byte aligned, a chunk's word offsets
  // within int: copy_reach), else value by value
  bool async_patch;
  bool pair_store;         // a tile row's two results by one store: ow even, out aligned to two,
                           // no col_shift
  // 1: tile column tx covers result columns 2 tx - 1 and 2 tx (run_fused's shift), else 2 tx, +1
  int col_shift;
};

// One work item: result channels m0.. of the rectangle of tiles (ty0.., tx0..) of sample s.
// Items are numbered result-channel blocks fastest, then rectangles by column, row, sample, so
// the items that run at once share their patches in L2.
struct Item {
  int m0, s, ty0, tx0;
};

// n-tile j's B fragment (two registers) from the two ldmatrix_x4 reads of a point's 32 tiles:
// f[h] holds n-tiles 2 h and 2 h + 1.
__device__ __forceinline__ void n_tile(const uint32_t (&f)[2][4], int j, uint32_t (&out)[2]) {
  out[0] = f[j >> 1][2 * (j & 1)];
  out[1] = f[j >> 1][2 * (j & 1) + 1];
}

template <typename T>
__device__ __forceinline__ Item item_of(const Args<T>& g, int it) {
  const uint32_t u = static_cast<uint32_t>(it), q1 = g.blocks_m.div(u), q2 = g.blocks_x.div(q1),
                 q3 = g.blocks_y.div(q2);
  Item r;
  r.m0 = static_cast<int>(u - q1 * g.blocks_m.d) * kBM;
  r.tx0 = static_cast<int>(q1 - q2 * g.blocks_x.d) * kTC;
  r.ty0 = static_cast<int>(q2 - q3 * g.blocks_y.d) * kTR;
  r.s = static_cast<int>(q3);
  return r;
}

template <typename T>
struct Pack;  // two float values rounded into one 32-bit word (the first in the low half)
template <>
struct Pack<__half> {
  static __device__ __forceinline__ uint32_t two(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
template <>
struct Pack<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t two(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
// Two results side by side by one store (q aligned to two values).
template <typename T>
__device__ __forceinline__ void store_pair(T* q, float a, float b) {
  *reinterpret_cast<uint32_t*>(q) = Pack<T>::two(a, b);
}
template <>
__device__ __forceinline__ void store_pair<float>(float* q, float a, float b) {
  *reinterpret_cast<float2*>(q) = make_float2(a, b);
}

// Every entry of B^T and A^T is 0 or +-1: bt_bits encodes B^T so, and sum_nonzero's sums of
// A^T are then two_sided's.
template <typename Mat>
constexpr bool unit_transforms() {
  for (int i = 0; i < Mat::kAlpha; ++i)
    for (int k = 0; k < Mat::kAlpha; ++k) {
      const double bt = Mat::BT(i, k), at = i < Mat::kM ? Mat::AT(i, k) : 0.0;
      if ((bt != 0.0 && bt != 1.0 && bt != -1.0) || (at != 0.0 && at != 1.0 && at != -1.0))
        return false;
    }
  return true;
}

// Bit 4 i + j: BT(i, j) is not zero (neg false) or is negative (neg true).
template <typename Mat>
__host__ __device__ constexpr uint32_t bt_bits(bool neg) {
  uint32_t bits = 0;
  for (int i = 0; i < Mat::kAlpha; ++i)
    for (int j = 0; j < Mat::kAlpha; ++j)
      if (neg ? Mat::BT(i, j) < 0.0 : Mat::BT(i, j) != 0.0) bits |= 1u << (4 * i + j);
  return bits;
}

// kXoff: the windows' column offset in a patch, the same for every rectangle (its first
// column, 2 tx0 - ox, has the parity of ox; the patch starts at an even column at or before).
// kTma: the patch's layout and copies (Patch). T = float: the patch by TMA (PatchF32; kXoff the
// parity of ox), the products TF32 on tensor cores, or split TF32 (kSplit: U and V hold whole
// float32 values). U and V are addressed in 16-bit units (S) either way.
template <typename T, typename Mat, int kXoff, bool kTma, bool kSplit = false>
__global__ void __launch_bounds__(kThreads)
    kernel(Args<T> g, const __grid_constant__ CUtensorMap patch_map) {
  constexpr bool kF32 = std::is_same<T, float>::value;
  static_assert(!kF32 || kTma, "float32's patch comes by TMA alone");
  static_assert(!kSplit || kF32, "split TF32 products are float32's");
  using P = std::conditional_t<kF32, PatchF32, Patch<kTma>>;
  using S = std::conditional_t<kF32, uint16_t, T>;  // a 16-bit unit of U and V
  constexpr int kCh = kChunkOf<T>;  // reduction channels a chunk
  constexpr int kAhead = P::kAhead, kUStages = P::kUStages, kPatchStages = P::kStages;
  constexpr int kPatchStage = P::kStage;
  constexpr int A = Mat::kAlpha, A2 = A * A;
  static_assert(A == 4, "F(2x2, 3x3): 4x4 windows, 2x2 tiles at stride 2");
  constexpr int kUStage = A2 * kBM * 16, kVStage = A2 * kBP * 16 + kVSkew;
  static_assert(vpoint<kTma>(A2 - 1) + kBP * 16 <= kVStage && kVStage % 8 == 0,
                "a V stage holds its points' rows; 16-byte rows");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  S* Us = reinterpret_cast<S*>(smem_raw);
  S* Vs = Us + kUStages * kUStage;
  uint32_t* Ps = reinterpret_cast<uint32_t*>(Vs + kVStages * kVStage);
  static_assert(!kTma || (kUStages * kUStage + kVStages * kVStage) * sizeof(S) % 128 == 0,
                "the patch stages 128-byte aligned: TMA destinations");
  const uint32_t bars = smem_addr(Ps + kPatchStages * kPatchStage);  // 8 bytes a U stage

  const TileSource& src = g.src;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t plane_size = src.ih * src.iw;

  // Copies. U: thread 0 copies each chunk's contiguous block (filter_transform_padded's
  // layout) by one bulk copy, completing the stage's mbarrier. Patch, kTma: thread 0 copies the
  // chunk's box (patch_map: the data as [samples][channels][ih][iw]) by TMA on the same
  // mbarrier. async_patch: the stage's kCopyWords words by 4-byte cp.async, word k by thread
  // k % kThreads (slot k / kThreads), so that a warp's lanes copy consecutive words: a row's 40
  // bytes of the data and consecutive banks (a patch row a thread would reach 32 rows and 16
  // banks an instruction). Either way the values in the image come from the data, zeros
  // elsewhere.
  static_assert(kUStage == A2 * kBM * 16, "U's chunk blocks are the stages' image");
  constexpr int kCopyWords = kBK * kPatchRows * kPatchWords;
  constexpr int kCopySlots = (kCopyWords + kThreads - 1) / kThreads;
  static_assert(kTma || (P::word(1, 0, 0) == kPatchRows * kPatchWords && P::kRow == kPatchWords),
                "rows and channels dense: word (c, row, w) of a stage is its k");
  static_assert(kBK <= 16 && kCopySlots <= 8, "a slot's channel in 4 bits of cp_chan");
  constexpr uint32_t kUBytes = kUStage * sizeof(S);
  constexpr uint32_t kBoxBytes = kTmaBox * kTmaRows * kCh * sizeof(T);
  static_assert(!kTma || kBoxBytes == kPatchStage * 4, "the box fills a patch stage");
  // The channel (in the chunk) of this thread's word in each slot, 4 bits a slot.
  uint32_t cp_chan = 0;
#pragma unroll
  for (int j = 0; j < kCopySlots; ++j)
    cp_chan |= static_cast<uint32_t>((tid + j * kThreads) / (kPatchRows * kPatchWords) & 15)
               << (4 * j);
  // The copy cursor's item: its U blocks; its patch's first row and column (kTma: the multiple
  // of 8 at or before the windows' first; else the even column at or before); not kTma, its
  // sample, each slot's word as an offset from the chunk's first channel plane (rel; the host
  // keeps them within int: run_fused) and bit j: slot j's word in the image (its row and
  // column; the channel is checked a chunk at a time).
  struct CopyItem {
    const S* u;
    const T* sample;
    int64_t py, px;
    int32_t rel[kCopySlots];
    uint32_t in_image;
    int s;
  };
  auto copy_item = [&](const Item& it) {
    CopyItem ci;
    ci.u = reinterpret_cast<const S*>(g.U) + (it.m0 / kBM) * (g.f.R_pad / kCh) * kUStage;
    ci.py = 2 * int64_t{it.ty0} - src.oy;
    ci.px = 2 * int64_t{it.tx0} - src.ox - (kF32 ? 0 : kXoff);
    if constexpr (kTma) ci.px &= kF32 ? ~int64_t{3} : ~int64_t{7};
    ci.s = it.s;
    ci.in_image = 0;
    if constexpr (kTma) return ci;
    ci.sample = g.data + it.s * src.ch * plane_size;
#pragma unroll
    for (int j = 0; j < kCopySlots; ++j) {
      const int k = tid + j * kThreads, c = k / (kPatchRows * kPatchWords);
      const int rw = k - c * (kPatchRows * kPatchWords), row = rw / kPatchWords;
      const int64_t y = ci.py + row, x = ci.px + 2 * (rw - row * kPatchWords);
      ci.rel[j] = static_cast<int32_t>(c * plane_size + y * src.iw + x);
      // a word wholly in or out: px and iw even
      if (k < kCopyWords && y >= 0 && y < src.ih && x >= 0 && x < src.iw) ci.in_image |= 1u << j;
    }
    return ci;
  };
  auto copy_chunk = [&](int ust, int pst, const CopyItem& ci, int64_t c0) {
    if (tid == 0) {
      // Generic accesses to the stages (the patch's reads; U's as the exchange E, written and
      // read), which the block's barrier ordered before this, go before the async writes.
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      mbar_expect_tx(bars + 8 * ust, kUBytes + (kTma ? kBoxBytes : 0));
      bulk_copy(smem_addr(Us + ust * kUStage), ci.u + (c0 / kCh) * kUStage, kUBytes,
                bars + 8 * ust);
      if constexpr (kTma)
        tensor_copy_4d(smem_addr(Ps + pst * kPatchStage), &patch_map, static_cast<int>(ci.px),
                       static_cast<int>(ci.py), static_cast<int>(c0), ci.s, bars + 8 * ust);
    }
    if constexpr (kTma) return;  // thread 0's tensor copy above
    if (g.async_patch) {
      // A word outside reads nothing (source size 0) from its address, which may lie outside
      // the data.
      const T* const plane0 = ci.sample + c0 * plane_size;
      uint32_t* const pd = Ps + pst * kPatchStage + tid;
#pragma unroll
      for (int j = 0; j < kCopySlots; ++j) {
        if (j + 1 < kCopySlots || tid + j * kThreads < kCopyWords) {
          const bool in =
              ((ci.in_image >> j) & 1u) != 0 && c0 + ((cp_chan >> (4 * j)) & 15u) < g.f.R;
          cp_async4(pd + j * kThreads, plane0 + ci.rel[j], in ? 4 : 0);
        }
      }
    } else {  // odd widths: value by value through registers
      T* pt = reinterpret_cast<T*>(Ps + pst * kPatchStage);
      constexpr int n = kBK * kPatchRows * 2 * kPatchWords;
      static_assert(P::word(8, 0, 0) % 2 == 0, "a channel's values start at 2 P::word");
      const T zero = from_compute<T>(0.f);
      for (int i = tid; i < n; i += kThreads) {
        const int c = i / (kPatchRows * 2 * kPatchWords);
        const int rem = i - c * (kPatchRows * 2 * kPatchWords);
        const int row = rem / (2 * kPatchWords), v = rem - row * (2 * kPatchWords);
        const int64_t ch = c0 + c, y = ci.py + row, x = ci.px + v;
        const bool in = ch < g.f.R && y >= 0 && y < src.ih && x >= 0 && x < src.iw;
        pt[2 * P::word(c, row, 0) + v] =
            in ? ci.sample[ch * plane_size + y * src.iw + x] : zero;
      }
    }
  };

  // The transform's share (Transform): warp w, the tiles of row w / 2 of the rectangle in
  // columns Transform::col(w, pair, j), pair and j = 0, 1, all 16 channels, as four groups
  // (channels 8 i.., tile pair) of two mma: V = W Bc, A = W the group's 16 windows (row g:
  // channel 8 i + 2 q of tile j, row g + 8: channel 8 i + 2 q + 1, for q = g % 4, j = g / 4),
  // columns k their 16 values; B = Bc, k x 8 points (the mma h: points 8 h..), Bc(k, p) =
  // BT(p / 4, r) BT(p % 4, c) for window value (r, c) = (k / 4, col(k % 4)). Lane (g, t) reads
  // window rows t / 2 (a[0], a[1]) and 2 + t / 2 (a[2], a[3]): word t % 2 where the windows
  // start even (col(m) = m); else columns 1, 2 (t even: a word) or 0, 3 (t odd: the high half of
  // word 0 and the low half of word 2), so col = 1, 2, 0, 3. D's rows g and g + 8 are channels
  // 2q and 2q + 1 of one tile: each 32-bit store to V is a channel pair at a point. The sums
  // (at most 4 nonzero terms, each a value or its negation) are rounded once to T; the tensor
  // cores' float32 sums are exact but where the terms' magnitudes lie far apart, so a value may
  // differ from two_sided's in its last place. Bc's zeros multiply too: a NaN or inf in a window
  // makes all 16 of its points NaN, so the whole output tiles that read it (docs/tuner.md).
  constexpr bool kOdd = kXoff != 0;
  auto transform = [&] {
    if constexpr (kF32) {
      // float32: lane (j, c) of warp w transforms the window of the tile in row w / 2, column
      // 4 (w % 2) + j of the rectangle, channel c (j = lane / 4 % 4, c = 2 (lane % 4) + lane / 16),
      // in float32 adds: B^T d B by sum_nonzero (the non-fused float32 pipeline's sums), each
      // point rounded to TF32 (kept whole for split TF32) and stored as one 32-bit word, so
      // that a warp's store of a point fills 4 whole V rows (tiles) x 8 channels, 128 contiguous
      // bytes. A window row is read as two 64-bit pairs (woff odd: a word, a pair, a word); the
      // 16 lanes of a half-warp read 4 channels of one parity, whose rows' swizzles (3 c + row
      // modulo 8, PatchF32) are 4 distinct values of one parity, so their 16-byte chunks differ
      // and a 64-bit read takes the least, 2 wavefronts. An odd woff's single words are all of
      // one parity, so 32 of them reach at most 16 banks: 2 wavefronts, the least for them too.
      const int j = (lane >> 2) & 3, c = 2 * (lane & 3) + (lane >> 4);
      const int tcol = 4 * (warp & 1) + j;
      const int woff = static_cast<int>(-src.ox & 3);  // the windows' first column in a box row
      constexpr int kReads = kOdd ? 3 : 2;
      // Byte offsets from Ps, through the swizzle, of row r's reads: good for every stage
      // (PatchF32: whole swizzle periods).
      uint32_t off[4][kReads];
      const uint32_t ps = smem_addr(Ps);
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int k = 0; k < kReads; ++k) {
          const int col = 2 * tcol + woff + (kOdd ? (k == 0 ? 0 : 2 * k - 1) : 2 * k);
          const uint32_t at =
              ps + 4u * static_cast<uint32_t>(P::word(c, 2 * (warp >> 1) + r, col));
          off[r][k] = kept((at ^ (((at >> 7) & 7u) << 4)) - ps);
        }
      S* const dst = Vs + swz(kTC * (warp >> 1) + tcol, 2 * c);
      return [=](int pst, int vst) {
        const unsigned char* const pb =
            reinterpret_cast<const unsigned char*>(Ps + pst * kPatchStage);
        float d[A][A];
#pragma unroll
        for (int r = 0; r < A; ++r) {
          if constexpr (kOdd) {
            const float2 mid = *reinterpret_cast<const float2*>(pb + off[r][1]);
            d[r][0] = *reinterpret_cast<const float*>(pb + off[r][0]);
            d[r][1] = mid.x;
            d[r][2] = mid.y;
            d[r][3] = *reinterpret_cast<const float*>(pb + off[r][kReads - 1]);
          } else {
            const float2 lo = *reinterpret_cast<const float2*>(pb + off[r][0]);
            const float2 hi = *reinterpret_cast<const float2*>(pb + off[r][1]);
            d[r][0] = lo.x;
            d[r][1] = lo.y;
            d[r][2] = hi.x;
            d[r][3] = hi.y;
          }
        }
        float t[A][A];  // B^T d
#pragma unroll
        for (int i = 0; i < A; ++i)
#pragma unroll
          for (int x = 0; x < A; ++x)
            t[i][x] = sum_nonzero<A>([&](int k) { return Mat::BT(i, k); },
                                     [&](int k) { return d[k][x]; });
        S* const v = dst + vst * kVStage;
#pragma unroll
        for (int i = 0; i < A; ++i)
#pragma unroll
          for (int x = 0; x < A; ++x) {
            const float p = sum_nonzero<A>([&](int k) { return Mat::BT(x, k); },
                                           [&](int k) { return t[i][k]; });
            *reinterpret_cast<uint32_t*>(v + vpoint<kTma>(A * i + x)) =
                kSplit ? __float_as_uint(p) : to_tf32(p);
          }
      };
    } else {
      using TX = Transform<kTma>;
      static_assert(TX::ok(), "Transform's offsets are the layouts'");
      static_assert(TX::swizzled_reads_apart(0) && TX::swizzled_reads_apart(1), "banks (TMA)");
      static_assert(TX::swizzled_reads_apart(2) && TX::swizzled_reads_apart(3), "banks (TMA)");
      const int xg = lane >> 2, xt = lane & 3, xq = xg & 3, xj = xg >> 2, xs = xt & 1;
      const int x_tile = kTC * (warp >> 1) + TX::col(warp, 0, xj);
      const uint32_t* const t_src = Ps +
                                    P::word(2 * xq, 2 * (warp >> 1) + (xt >> 1), x_tile % kTC) +
                                    (kOdd ? (xs ? 0 : 1) : xs);  // TX::first_word, as written there
      const int t_ydelta = kOdd && xs ? 2 : 0;       // words from a lane's first read to its second
      const uint32_t t_sel = xs ? 0x5432u : 0x3210u;  // the two values' halves (odd starts)
      T* const t_dst[2] = {Vs + vpoint<kTma>(2 * xt) + swz(x_tile, 2 * xq),
                           Vs + vpoint<kTma>(2 * xt) + swz(x_tile, 8 + 2 * xq)};
      uint32_t t_bc[2][2];  // Bc's fragments: [h][k 2t.. or 2t + 8..], point 8 h + g
      {
        auto bt = [](int i, int j) {  // BT(i, j) for runtime i, j (every entry 0 or +-1)
          constexpr uint32_t nz = bt_bits<Mat>(false), neg = bt_bits<Mat>(true);
          const int bit = 4 * i + j;
          return (nz >> bit) & 1u ? ((neg >> bit) & 1u ? -1.f : 1.f) : 0.f;
        };
        auto bc = [&](int k, int p) {
          const int m = k & 3, c = kOdd ? (m == 2 ? 0 : m == 3 ? 3 : m + 1) : m;
          return bt(p >> 2, k >> 2) * bt(p & 3, c);
        };
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            t_bc[h][r] =
                Pack<T>::two(bc(2 * xt + 8 * r, 8 * h + xg), bc(2 * xt + 8 * r + 1, 8 * h + xg));
      }
      static_assert(kTC % 8 == 0, "2 tx0 a multiple of 16");
      // kTma: the windows' first word in a patch row, which starts at the multiple of 8 at or
      // before the even column the 4-byte copies would start at, 2 tx0 - ox - kXoff: the same
      // for every item, 2 tx0 being a multiple of 16.
      const int woff = kTma ? static_cast<int>(((-src.ox - kXoff) & 7) >> 1) : 0;
      // All four groups' reads, then their products and stores: independent chains for the
      // latencies to overlap.
      // kTma: each read's word through the 64-byte swizzle, once here: byte offsets from Ps of
      // [pair][r][the odd start's second read], good for every stage and i (Patch: whole periods).
      uint32_t t_off[2][4][kOdd ? 2 : 1] = {};
      if constexpr (kTma) {
        const uint32_t ps = smem_addr(Ps);
#pragma unroll
        for (int pair = 0; pair < 2; ++pair)
#pragma unroll
          for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int k = 0; k < (kOdd ? 2 : 1); ++k) {
              const uint32_t at =
                  ps + 4u * static_cast<uint32_t>((t_src - Ps) + woff + k * t_ydelta +
                                                  TX::rel(0, pair, r & 1, r >> 1));
              // (swizzled_reads_apart's function)
              t_off[pair][r][k] = kept(TX::swizzled(at) - ps);
            }
      }
      return [=](int pst, int vst) {
        const uint32_t* const w0 = t_src + pst * kPatchStage + woff;  // not kTma
        const unsigned char* const pb =
            reinterpret_cast<const unsigned char*>(Ps + pst * kPatchStage);
        uint32_t a[2][2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int pair = 0; pair < 2; ++pair)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              if constexpr (kTma) {
                auto word = [&](int k) {
                  return *reinterpret_cast<const uint32_t*>(pb + t_off[pair][r][k] +
                                                            i * (8 * P::kChannel * 4));
                };
                // (kOdd ? 1 : 0: word(1) is out of t_off's range where not kOdd)
                a[i][pair][r] = kOdd ? __byte_perm(word(0), word(kOdd ? 1 : 0), t_sel) : word(0);
              } else {
                const uint32_t* w = w0 + TX::rel(i, pair, r & 1, r >> 1);
                a[i][pair][r] = kOdd ? __byte_perm(w[0], w[t_ydelta], t_sel) : w[0];
              }
            }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int pair = 0; pair < 2; ++pair)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              float d[4] = {0.f, 0.f, 0.f, 0.f};
              mma16816(d, a[i][pair], t_bc[h], T{});
#pragma unroll
              for (int e = 0; e < 2; ++e)
                *reinterpret_cast<uint32_t*>(t_dst[i] + vst * kVStage + TX::vrel(i, pair, h, e)) =
                    Pack<T>::two(d[e], d[2 + e]);
            }
      };
    }
  }();

  // The products' share: warp w multiplies the points of row pa = w / 2 (xi = 4 pa + b) for
  // result channels 32 mh.. (mh = w % 2, two m-tiles of 16) x all 32 tiles (four n-tiles of 8):
  // 32 x 32 a point: a chunk's fragments are half the bytes of 16 x 16 tiles at all 16 points.
  const int pa = warp >> 1, mh = warp & 1;
  const S* const a_src =
      kept(Us + swz(mh * 32 + (lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8) +
           pa * A * kBM * 16);
  const S* const b_src =
      kept(Vs + swz((lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8) + vpoint<kTma>(A * pa));
  static_assert(swz(16, 0) == 16 * 16 && swz(16, 8) == 16 * 16 + 8, "16 rows on: +256 values");
  float acc[A][2][4][4];  // [point b][m-tile][n-tile][accumulator]
#pragma unroll
  for (int b = 0; b < A; ++b)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[b][i][j][r] = 0.f;

  // An item's results. Accumulator r of m-tile i, n-tile j holds channel 32 mh + 16 i + g
  // (+8 for r >= 2) and tile 8 j + 2 t (+1 for odd r) at points (pa, b). Each warp reduces its
  // row of points, Z[pa][jj] = sum_b M[pa][b] A[b][jj], and the Z of all rows meet in shared
  // memory E (the U stage the last chunk used, free until the next barrier at the loop's top,
  // after which thread 0 orders these accesses before the bulk copy that refills it):
  // in phase p the m-tile i = p of every warp, [pa][jj][32 channels][32 tiles], a channel's row
  // rotated by rot(c) so a warp's stores fall in distinct banks. Then thread (tile = lane,
  // channels warp + 8 k) applies Y = A^T Z, adds the bias, clips and stores its 2x2 tiles (a
  // row's two values by one store, 32-bit or 64-bit, where the result's width is even and the
  // tiles are not shifted; a shifted tile's row starts at an odd column).
  constexpr int m = Mat::kM;
  static_assert(m == 2 && A * m * 32 * 32 * sizeof(float) <= kUStage * sizeof(S),
                "an exchange phase fits a U stage");
  const TileTarget& dst = g.dst;
  const int gr = lane >> 2, tq = lane & 3;
  auto rot = [](int c, int t) { return (t + 8 * (c & 7) + ((c >> 2) & 1)) & 31; };
  auto finish = [&](const Item& it, float* E) {
    // This thread's tile (lane t) and where it lands; the bias of its 8 result channels, loaded
    // before any store (a load after the stores of the previous channel would wait for them:
    // the compiler cannot tell the bias from the result).
    const int t = lane;
    const int64_t ty = it.ty0 + t / kTC, tx = it.tx0 + t % kTC, y0 = ty * m,
                  x0 = tx * m - g.col_shift;
    const bool tile_in = ty < dst.th && tx < dst.tw, row1 = y0 + 1 < dst.oh, col0 = x0 >= 0,
               col1 = x0 + 1 < dst.ow;
    float bias[2][4];
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int c = warp + 8 * k;
        const int64_t o = it.m0 + (c >> 4) * 32 + p * 16 + (c & 15);
        bias[p][k] = g.bias != nullptr && o < g.f.Mo ? to_compute(g.bias[o]) : 0.f;
      }
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      __syncthreads();  // the warps' products (p = 0) or phase 0's reads (p = 1) are done
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int c = mh * 16 + gr + (r >= 2 ? 8 : 0), t = 8 * j + 2 * tq + (r & 1);
#pragma unroll
          for (int jj = 0; jj < m; ++jj) {
            E[((pa * m + jj) * 32 + c) * 32 + rot(c, t)] =
                sum_nonzero<A>([&](int b) { return Mat::AT(jj, b); },
                                 [&](int b) { return acc[b][p][j][r]; });
          }
#pragma unroll
          for (int b = 0; b < A; ++b) acc[b][p][j][r] = 0.f;
        }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int c = warp + 8 * k;
        const int64_t o = it.m0 + (c >> 4) * 32 + p * 16 + (c & 15);
        if (o >= g.f.Mo || !tile_in) continue;
        float z[A][m];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
          for (int jj = 0; jj < m; ++jj) z[a][jj] = E[((a * m + jj) * 32 + c) * 32 + rot(c, t)];
        float v[m][m];
#pragma unroll
        for (int i = 0; i < m; ++i)
#pragma unroll
          for (int jj = 0; jj < m; ++jj) {
            v[i][jj] = bias[p][k];
#pragma unroll
            for (int a = 0; a < A; ++a)
              if (Mat::AT(i, a) != 0.0) v[i][jj] += static_cast<float>(Mat::AT(i, a)) * z[a][jj];
          }
        // (q may sit one value before the output's first: a shifted first tile starts at column
        // -1, which col0 leaves unstored; offsets in place of q cost the finish instructions)
        T* q = g.out + ((it.s * dst.ch + o) * dst.oh + y0) * dst.ow + x0;
#pragma unroll
        for (int i = 0; i < m; ++i, q += dst.ow) {
          if (i > 0 && !row1) break;
          if (g.pair_store && col1) {
            store_pair(q, v[i][0], v[i][1]);
          } else {
            if (col0) q[0] = from_compute<T>(v[i][0]);
            if (col1) q[1] = from_compute<T>(v[i][1]);
          }
        }
      }
    }
  };

  // The block takes items blockIdx.x, + gridDim.x, ... as one stream of chunks q = 0 .. Q - 1
  // (item q / chunks, reduction chunk q % chunks). Chunk q's copies are issued at iteration
  // q - kAhead (the first kAhead before the loop); at iteration q the warps multiply chunk q
  // and transform chunk q + 1, whose copies they waited for (cp.async at the top; kTma, the
  // patch and U by their stage's mbarrier before chunk q's products). The top's barrier also ends
  // iteration q - 1's reads of the buffers iteration q refills (U stage (q + kAhead) % kUStages,
  // patch stage q % kPatchStages, V stage (q + 1) % 2). A finished item's results go out from
  // registers while the copies of the next items' chunks are in flight.
  const int chunks = static_cast<int>(g.f.R_pad / kCh);
  const int my_items = g.items > static_cast<int>(blockIdx.x)
                           ? (g.items - 1 - static_cast<int>(blockIdx.x)) / gridDim.x + 1
                           : 0;
  const int64_t Q = int64_t{my_items} * chunks;
  // The copy cursor: chunks copied, the next one's item, reduction chunk and stages.
  int64_t lq = 0;
  int l_item = blockIdx.x, l_c = 0, l_ust = 0, l_pst = 0;
  CopyItem l_ci = copy_item(item_of(g, l_item));
  auto copy_next = [&]() {
    if (lq < Q) {
      copy_chunk(l_ust, l_pst, l_ci, int64_t{l_c} * kCh);
      ++lq;
      l_ust = l_ust + 1 == kUStages ? 0 : l_ust + 1;
      l_pst = l_pst + 1 == kPatchStages ? 0 : l_pst + 1;
      if (++l_c == chunks) {
        l_c = 0;
        l_item += gridDim.x;
        if (lq < Q) l_ci = copy_item(item_of(g, l_item));
      }
    }
    cp_async_commit();
  };
  mbar_init_all(bars, kUStages);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kAhead; ++i) copy_next();
  cp_async_wait<kAhead - 1>();
  __syncthreads();
  int c = 0, item = blockIdx.x, ust = 0, tpst = 1 % kPatchStages, vst = 0;
  uint32_t u_parity = 0;  // of stage ust's mbarrier phase for chunk q
  Item it = item_of(g, item);
  if (Q > 0) {
    if constexpr (kTma) mbar_wait(bars, 0);  // chunk 0's patch (and U)
    transform(0, 0);
  }
  for (int64_t q = 0; q < Q; ++q) {
    cp_async_wait<kAhead - 2>();
    __syncthreads();
    copy_next();
    const bool more = q + 1 < Q;
    const int nust = ust + 1 == kUStages ? 0 : ust + 1;
    const uint32_t nparity = ust + 1 == kUStages ? u_parity ^ 1u : u_parity;
    if constexpr (kTma) {
      // Chunk q's U came with its patch, waited for before its transform; chunk q + 1's now, so
      // that chunk q's products and chunk q + 1's transform are one stretch of code, whose
      // latencies the scheduler interleaves.
      if (more) mbar_wait(bars + 8 * nust, nparity);
    } else {
      mbar_wait(bars + 8 * ust, u_parity);
    }
    const S* us = a_src + ust * kUStage;
    const S* vs = b_src + vst * kVStage;
#pragma unroll
    for (int b = 0; b < A; ++b) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) ldmatrix_x4(af[i], us + b * kBM * 16 + i * 256);
#pragma unroll
      for (int h = 0; h < 2; ++h) ldmatrix_x4(bf[h], vs + vpoint<kTma>(b) + h * 256);
      if constexpr (kSplit) {
        // whole float32 values, each split as read into TF32 hi + lo (split_tf32), multiplied by
        // mma1688_tf32_split without lo lo: three mma, not four, a product within 2^-21 of
        // itself rather than 2^-22. The forward's and input gradient's error tests hold so (the
        // weight gradient's do not); docs/winograd.md gives the errors and times.
        uint32_t bl[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int r = 0; r < 4; ++r) split_tf32(__uint_as_float(bf[h][r]), bf[h][r], bl[h][r]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          uint32_t al[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) split_tf32(__uint_as_float(af[i][r]), af[i][r], al[r]);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            uint32_t bj[2], bjl[2];
            n_tile(bf, j, bj);
            n_tile(bl, j, bjl);
            mma1688_tf32_split<false>(acc[b][i][j], af[i], al, bj, bjl);
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            uint32_t bj[2];
            n_tile(bf, j, bj);
            if constexpr (kF32)
              mma1688_tf32(acc[b][i][j], af[i], bj);
            else
              mma16816(acc[b][i][j], af[i], bj, T{});
          }
      }
    }
    // Chunk q + 1's transform, into the V stage the products do not read. After the last chunk
    // it transforms chunk q's patch again (a stage that holds data) into a stage nobody reads:
    // no branch between the products and the transform.
    transform(more ? tpst : (tpst == 0 ? kPatchStages - 1 : tpst - 1), vst ^ 1);
    if (++c == chunks) {
      finish(it, reinterpret_cast<float*>(Us + ust * kUStage));
      c = 0;
      item += gridDim.x;
      if (more) it = item_of(g, item);
    }
    ust = nust;
    u_parity = nparity;
    vst ^= 1;
    tpst = tpst + 1 == kPatchStages ? 0 : tpst + 1;
  }
}

}  // namespace fused

template <typename T>
void run_fused(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out,
               void* workspace, size_t workspace_size, bool tf32, cudaStream_t stream) {
  using Mat = Matrices<2, 3>;
  constexpr int A2 = Mat::kAlpha * Mat::kAlpha;
  static_assert(fused::unit_transforms<Mat>(), "B^T and A^T of 0 and +-1 (bt_bits, sum_nonzero)");
  if (pass == Pass::WeightGrad || !fused_ok(pass, s.tile))
    throw std::invalid_argument("fastlayers: the fused Winograd kernel takes F(2x2,3x3) for the "
                                "forward and the input gradient");
  if (workspace_size < fused_workspace_bytes(pass, s, sizeof(T)))
    throw std::invalid_argument("fastlayers: fused Winograd workspace too small");
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)  // U's blocks go by bulk copies
    throw std::invalid_argument("fastlayers: fused Winograd workspace not 16-byte aligned");
  constexpr bool kF32 = std::is_same<T, float>::value;
  const FusedDims f = fused_dims(pass, s, sizeof(T));
  // float32: TF32 products where allowed, else split TF32 (the filters then kept whole)
  const bool split = kF32 && !tf32;
  // Where the windows start at odd columns (ox odd), the tiles start one column left of the
  // result's first, so that the windows start at even ones: the 16-bit and TF32 transforms read
  // an even start's window rows in fewer instructions (no joined halves, no single words). Taken
  // where it adds no column of rectangles (the result's width not a multiple of kTC tiles, m kTC
  // columns) and not for split TF32, whose odd starts cost nothing measurable.
  Tiling t = tiling(pass, s);
  const bool col_shift = (t.ox & 1) != 0 && !split && t.res_w % (t.m * fused::kTC) != 0;
  if (col_shift) {
    t.ox += 1;
    t.tw = ceil_div(t.res_w + 1, t.m);
  }
  T* U = static_cast<T*>(workspace);
  auto filters = fused::filter_transform_padded<T, Mat>;
  if constexpr (kF32)
    if (split) filters = fused::filter_transform_padded<T, Mat, false>;
  filters<<<blocks_for(f.Mo_pad * f.R_pad), kThreads, 0, stream>>>(b, U, f, s.C,
                                                                    pass == Pass::InputGrad);
  FL_LAUNCH_CHECK();

  fused::Args<T> g{};
  g.data = a;
  g.U = U;
  g.bias = pass == Pass::Forward ? bias : nullptr;
  g.out = out;
  g.f = f;
  g.src = TileSource{s.S, t.data_ch, t.data_h, t.data_w, t.th, t.tw, t.step, t.oy, t.ox};
  g.dst = TileTarget{s.S, t.res_ch, t.res_h, t.res_w, t.th, t.tw};
  const int64_t items = s.S * ceil_div(t.th, fused::kTR) * ceil_div(t.tw, fused::kTC) *
                        (f.Mo_pad / fused::kBM);
  if (items == 0) return;  // an empty result
  if (items > int64_t{0x7fffffff})
    throw std::invalid_argument("fastlayers: too many tiles for the fused Winograd kernel");
  g.blocks_m = FastDiv(static_cast<uint32_t>(f.Mo_pad / fused::kBM));
  g.blocks_x = FastDiv(static_cast<uint32_t>(ceil_div(t.tw, fused::kTC)));
  g.blocks_y = FastDiv(static_cast<uint32_t>(ceil_div(t.th, fused::kTR)));
  g.items = static_cast<int>(items);
  // (the kernel's patch words as int offsets from a chunk's first plane: 16 planes, and the
  // rows and columns a patch reaches, within |oy| + 2 th + 16 and |ox| + 2 tw + 40 of the
  // image's first: rectangles of 4 x 8 tiles, patches of 10 rows x 20 values)
  const int64_t copy_reach = 16 * t.data_h * t.data_w +
                             (std::abs(t.oy) + 2 * t.th + 16) * t.data_w + std::abs(t.ox) +
                             2 * t.tw + 40;
  g.async_patch = t.data_w % 2 == 0 && reinterpret_cast<uintptr_t>(a) % 4 == 0 &&
                  copy_reach <= int64_t{std::numeric_limits<int32_t>::max()};
  g.col_shift = col_shift ? 1 : 0;
  // (a shifted tile's two columns start at an odd one: no pair stores)
  g.pair_store = !col_shift && t.res_w % 2 == 0 &&
                 reinterpret_cast<uintptr_t>(out) % (2 * sizeof(T)) == 0;
  // The patch by TMA where the data's strides are multiples of 16 bytes and its start 16-byte
  // aligned (the tensor map's terms), else by cp.async: the same values either way. float32
  // takes TMA alone (the callers check its terms: winograd_host::check, run_cuda).
  CUtensorMap patch_map{};
  // (The kernel's box coordinates are int: dimensions within int's range.)
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  bool tma = t.data_w % (16 / sizeof(T)) == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
             t.data_w <= kIntMax && t.data_h <= kIntMax && t.data_ch <= kIntMax && s.S <= kIntMax;
  if (kF32 && !tma)
    throw std::invalid_argument("fastlayers: the fused Winograd kernel takes float32 data whose "
                                "width is a multiple of 4, 16-byte aligned");
  if (tma) {
    tma = encode_nchw_map(&patch_map,
                          kF32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                          : std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                           : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                          sizeof(T), a, s.S, t.data_ch, t.data_h, t.data_w, fused::kTmaBox,
                          fused::kTmaRows, static_cast<uint32_t>(fused::kChunkOf<T>),
                          kF32 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B);
    if (kF32 && !tma)
      throw std::runtime_error("fastlayers: the fused Winograd kernel's tensor map was refused");
  }
  using PatchTma = std::conditional_t<kF32, fused::PatchF32, fused::Patch<true>>;
  constexpr size_t smem_tma = fused::smem_bytes<A2, PatchTma>();
  constexpr size_t smem_words = fused::smem_bytes<A2, fused::Patch<false>>();
  static_assert(smem_tma <= 227 * 1024 && smem_words <= 227 * 1024,
                "an SM's shared memory (sm_90)");
  const size_t smem = tma ? smem_tma : smem_words;
  const int variant = ((t.ox & 1) != 0 ? 1 : 0) + (tma ? 2 : 0) + (split ? 4 : 0);
  decltype(&fused::kernel<T, Mat, 0, true>) k;
  if constexpr (kF32)
    k = variant == 7   ? fused::kernel<T, Mat, 1, true, true>
        : variant == 6 ? fused::kernel<T, Mat, 0, true, true>
        : variant == 3 ? fused::kernel<T, Mat, 1, true>
                       : fused::kernel<T, Mat, 0, true>;
  else
    k = variant == 3   ? fused::kernel<T, Mat, 1, true>
        : variant == 2 ? fused::kernel<T, Mat, 0, true>
        : variant == 1 ? fused::kernel<T, Mat, 1, false>
                       : fused::kernel<T, Mat, 0, false>;
  allow_shared_memory(k, smem);
  // One block an SM (the accumulators take its registers), each a stream of items.
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(items, std::max(sm_count(), 1))));
  k<<<grid, fused::kThreads, smem, stream>>>(g, patch_map);
  FL_LAUNCH_CHECK();
}

}  // namespace winograd
}  // namespace fastlayers
