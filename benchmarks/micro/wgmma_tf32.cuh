// wgmma (sm_90a) in TF32 for the product-rate programs (wgmma_rate, wgmma_split): a warpgroup's
// D (64 x 32 float, 16 a thread) = A (64 x 8, 4 registers a thread, as mma.m16n8k8's A fragments
// of the warps' 16 rows each) x B (8 x 32, K-major in shared memory, by descriptor), the group
// fence, commit and wait.
#pragma once

#include <cstdint>

#include "../../cuda/common/mma.cuh"

// B's layout: no swizzle, K-major 8 x 4 core matrices (8 rows of 16 bytes), K-adjacent ones
// kLbo bytes apart and N-adjacent (8-row groups) kSbo.
constexpr uint32_t kLbo = 128, kSbo = 256;
__device__ __forceinline__ uint64_t desc(uint32_t saddr) {
  return uint64_t((saddr >> 4) & 0x3fff) | (uint64_t(kLbo >> 4) << 16) |
         (uint64_t(kSbo >> 4) << 32);
}

// Before a wgmma whose registers other instructions wrote or read.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Until at most N committed groups are pending; only then may their D be read or A rewritten.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// D = A B + (scale_d ? D : 0)
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

// The split of a float32 value into TF32 hi and lo is the kernels' (split_tf32).
using fastlayers::split_tf32;
