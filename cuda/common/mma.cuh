// Tensor-core products of the hand-written kernels: PTX mma.sync m16n8k16 with float32
// accumulation, for float16 and bfloat16 operands, and m16n8k8 for TF32 (sm_80 and later).
//   a: A 16x16, row-major fragment (4 registers of 2 values); b: B 16x8, column-major (2);
//   d: D 16x8 float (4), accumulated in place. Thread (g = lane / 4, t = lane % 4) holds
//   a (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); b (k 2t.., n g), (k 2t+8.., n g);
//   d (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fastlayers {

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2], __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2], __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// TF32: D += A B, A 16x8 and B 8x8 of float32 bit patterns whose low 13 bits the tensor cores
// ignore (round them first: to_tf32). The fragments are m16n8k16's with one 32-bit value where
// that has a pair: thread (g, t) holds a (g, t), (g+8, t), (g, t+4), (g+8, t+4); b (k t, n g),
// (k t+4, n g); d as above. So ldmatrix's 8x8 matrices of 16-bit values, read as 8x4 of 32-bit
// ones, load them at the addresses of the 16-bit fragments.
__device__ __forceinline__ void mma1688_tf32(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// float32 -> TF32 (10 mantissa bits), rounded to nearest with ties to even, as a float32 bit
// pattern: one instruction on sm_90 (cvt.rna, ties away from zero, takes three).
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// A float32 value as two TF32 operands, hi + lo: hi rounded to TF32 (11 significant bits), lo the
// rest, exact in float32 with at most 12 significant bits, left whole (one instruction less than
// rounding it). The tensor cores read a .tf32 operand's 11 leading bits and drop the low 13 of the
// register (measured behaviour, which CUTLASS's round_half_ulp_truncate conversion also relies on;
// PTX does not state it), so lo enters truncated: hi + lo is off v by at most 2^-23 |v|, as with lo
// rounded to TF32 (the two differ only in sign, at ties), and a reading that kept more of lo would
// only be closer. That holds for |v| from 2^-114 (about 4.8e-35); below, lo is subnormal in TF32
// and truncated there, off by up to 2^-136. From about 3.4028e38 (and for inf) hi is inf and lo
// not finite.
__device__ __forceinline__ void split_tf32(float v, uint32_t& hi, uint32_t& lo) {
  hi = to_tf32(v);
  lo = __float_as_uint(v - __uint_as_float(hi));
}

// acc += A B for float32 operands split into TF32 hi + lo (split_tf32): lo lo (if kLoLo) + lo hi
// + hi lo + hi hi, mma from zero, the small terms first, then added to acc by FADD. With all four
// a product is within 2^-22 of itself. lo is at most 2^-11 of its value, so lo lo is up to 2^-22
// of the product: without it the bound doubles, to 2^-21, for a quarter fewer mma (the forward
// and input gradient drop it; the weight gradient's tests fail without it). The sums over many
// k-steps round to nearest as FFMA's would (the tensor cores' own accumulation truncates, a bias
// that grows over long sums: docs/winograd.md).
template <bool kLoLo = true>
__device__ __forceinline__ void mma1688_tf32_split(float (&acc)[4], const uint32_t (&a)[4],
                                                   const uint32_t (&al)[4], const uint32_t (&b)[2],
                                                   const uint32_t (&bl)[2]) {
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (kLoLo) mma1688_tf32(d, al, bl);
  mma1688_tf32(d, al, b);
  mma1688_tf32(d, a, bl);
  mma1688_tf32(d, a, b);
#pragma unroll
  for (int r = 0; r < 4; ++r) acc[r] += d[r];
}

// The A fragment of rows r0.., columns k0.. of a row-major operand in shared memory with row
// stride `ld` (values), and the B fragment of a column-major one stored as rows of n (B^T
// row-major, stride `ld`); `p` points at (r0 + g, k0 + 2t).
template <typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* p, int ld) {
  a[0] = *reinterpret_cast<const uint32_t*>(p);
  a[1] = *reinterpret_cast<const uint32_t*>(p + 8 * ld);
  a[2] = *reinterpret_cast<const uint32_t*>(p + 8);
  a[3] = *reinterpret_cast<const uint32_t*>(p + 8 * ld + 8);
}
template <typename T>
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const T* p) {
  b[0] = *reinterpret_cast<const uint32_t*>(p);
  b[1] = *reinterpret_cast<const uint32_t*>(p + 8);
}

// Four 8x8 matrices of 16-bit values from shared memory (ldmatrix .x4): lanes 8 i .. 8 i + 7
// give the 16-byte rows of matrix i; register i of thread (g, t) holds row g, values 2t, 2t+1
// of matrix i (an A fragment's order where the matrices are rows 0-7 / 8-15 x columns 0-7 /
// 8-15, column halves outer).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

}  // namespace fastlayers
