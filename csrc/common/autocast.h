// Autocast for fastlayers ops: under torch.autocast an op runs in the autocast dtype, as the
// PyTorch layer it replaces does (nn.Conv2d for the convolutions). One boxed kernel serves every
// op; each feature registers its own ops with it, beside its other kernels.
#pragma once

#include <c10/core/DeviceType.h>
#include <torch/library.h>

#include <initializer_list>

namespace fastlayers {

// Registers the autocast kernel of `device` (CPU or CUDA) for `ops`, op names of the library `m`
// opened for that device's autocast key (TORCH_LIBRARY_IMPL(fastlayers, AutocastCUDA, m) or
// AutocastCPU). The kernel casts every floating-point tensor argument of the device with
// at::autocast::cached_cast (float64 and other devices' tensors stay as they are) and calls the
// op again below autocast.
void register_autocast(torch::Library& m, c10::DeviceType device,
                       std::initializer_list<const char*> ops);

}  // namespace fastlayers
