// What the Python module (csrc/module.cpp) reads of the Winograd convolution, declared without
// ATen headers; defined in winograd_common.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastlayers {
namespace winograd_host {

// Workspace bytes of one pass (0 forward, 1 input grad, 2 weight grad) on CUDA: the buffers of one
// chunk of samples under the ops' bound, transformed operands at `store_bytes` per value and
// products at `acc_bytes`.
size_t python_workspace_bytes(int pass, int64_t S, int64_t C, int64_t K, int64_t H, int64_t W,
                              int64_t ph, int64_t pw, int64_t tile, int store_bytes,
                              int acc_bytes);

// Workspace bytes of the fused kernel (forward: 0, input gradient: 1) on CUDA.
size_t python_fused_workspace_bytes(int pass, int64_t C, int64_t K, int store_bytes);

// Workspace bytes of the fused weight gradient on CUDA (its partial sums, any dtype).
size_t python_fused_weight_grad_workspace_bytes(int64_t S, int64_t C, int64_t K, int64_t H,
                                                int64_t W, int64_t ph, int64_t pw);

}  // namespace winograd_host
}  // namespace fastlayers
