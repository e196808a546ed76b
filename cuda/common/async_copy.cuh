// Asynchronous copies into shared memory and the mbarriers they complete (sm_80 / sm_90 PTX),
// for the hand-written kernels: cp.async of 4 bytes (with zero fill or without) and 16 bytes, and
// their groups; mbarriers of one block (shared::cta) and the bulk copies (plain and of a tensor map's
// box) that complete one by their bytes.
#pragma once

#include <cstdint>

namespace fastlayers {

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Thread 0 of the block initialises `n` mbarriers from shared address `bar` (8 bytes each, one
// arrival a phase) and fences the inits for the async proxy and the cluster; a barrier (the
// block's, or the cluster's where other blocks use them) must follow before any use.
__device__ __forceinline__ void mbar_init_all(uint32_t bar, int n) {
  if (threadIdx.x == 0) {
    for (int k = 0; k < n; ++k) mbar_init(bar + 8 * k, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
}
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// The box at coordinates (x, y, z, w) of a 4-D tensor map (TMA; a __grid_constant__ parameter),
// elements outside the tensor as zeros, completing mbarrier `bar` by its bytes; `dst` 128-byte
// aligned.
__device__ __forceinline__ void tensor_copy_4d(uint32_t dst, const void* tensor_map, int x, int y,
                                               int z, int w, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(x), "r"(y), "r"(z), "r"(w),
        "r"(bar)
      : "memory");
}

// 4 bytes from gmem ...
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
// ... of which only the first `bytes` (0 or 4) come from gmem and the rest are zeros.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(bytes));
}
// 16 bytes (both addresses 16-byte aligned) from gmem, through L2 only (cg).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem)
               : "memory");
}
// The groups: commit this thread's copies issued since the last commit; wait until at most N
// groups are pending (a memory clobber: no shared-memory read moves above the wait).
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace fastlayers
