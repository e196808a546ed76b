// The launchers of fbfft's kernel families, one per size (and direction), and their arguments.
// fbfft.cu chooses the family and calls them; each family header (registers.cuh, lanes_1d.cuh,
// lanes_2d.cuh) defines them and small files under instantiations/ instantiate them, one file per
// size where a size's kernels take long to compile, small sizes grouped (each compile unit costs
// nvcc's fixed passes too), so a kernel edit recompiles only its family and the compiles run in
// parallel. A new size: a row of fbfft.cu's table and a line in an instantiation file.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fbfft.h"

namespace fastlayers {
namespace fbfft {
namespace detail {

// The arguments of one transform as rfft2 / irfft2 take them (fbfft.h), for the launchers of every
// family.
struct ForwardArgs {
  const void* in;
  Real type;
  float2* out;
  Strides os;
  int64_t batch;
  int h, w, nh, nw, oy, ox;
  cudaStream_t stream;
  DirectIo direct_io;
};
struct InverseArgs {
  const float2* in;
  Strides is;
  void* out;
  Real type;
  int64_t batch;
  int nh, nw, out_h, out_w, oy, ox;
  float scale;
  const void* bias;
  int64_t channels;
  bool implied;
  cudaStream_t stream;
  DirectIo direct_io;
};

// Register kernels (registers.cuh): 2-D n x n, n = 2..64, and 1-D (NH = 1) 2..64.
template <int NH, int NW> void rfft2_registers_run(const ForwardArgs& a);
template <int NH, int NW> void irfft2_registers_run(const InverseArgs& a);
// Both transforms (one type and stream) in one launch where one kernel serves both (2-D,
// frequency-major spectra); false, with nothing launched, where not.
template <int NH, int NW> bool rfft2_registers_run_two(const ForwardArgs& a, const ForwardArgs& b);
// 1-D lane kernels (lanes_1d.cuh): n = 8..256.
template <int N> void rfft_lanes_run(const ForwardArgs& a);
template <int N> void irfft_lanes_run(const InverseArgs& a);
// 2-D lane kernels (lanes_2d.cuh): n x n, n = 128.
template <int N> void rfft2_lanes_run(const ForwardArgs& a);
template <int N> void irfft2_lanes_run(const InverseArgs& a);
// Shared-memory kernels (shared.cu): every size.
void rfft2_shared_run(const ForwardArgs& a);
void irfft2_shared_run(const InverseArgs& a);

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
