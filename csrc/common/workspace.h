// A CUDA workspace straight from PyTorch's caching allocator, without a tensor around it:
// at::empty's dispatch and tensor construction cost microseconds on every call of an op whose
// host time a training step pays. The block belongs to the current device and stream, as
// at::empty's would, and returns to the allocator when the DataPtr goes out of scope (after the
// op's launches are enqueued: the allocator reuses it in stream order). Unlike at::empty, it is
// never filled under torch.use_deterministic_algorithms' fill_uninitialized_memory: the pipelines
// write every workspace value they read (compute-sanitizer initcheck, scripts/gpu-check).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstddef>

namespace fastlayers {

inline c10::DataPtr cuda_workspace(size_t bytes) {
  return c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
}

}  // namespace fastlayers
