// fbfft's entry points (fbfft.h): the size checks and the choice of kernel family; the families'
// launchers are compiled apart (launch.h).
#include "fbfft.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "launch.h"

namespace fastlayers {
namespace fbfft {
namespace {

using namespace detail;

// The family that serves a size, in the order tried; sizes no entry takes go to the
// shared-memory kernels.
struct Family {
  int nh, nw;
  int64_t min_batch;  // the entry serves batches from this size
  void (*forward)(const ForwardArgs&);
  void (*inverse)(const InverseArgs&);
  // both operands of rfft2_two in one launch, where the family can (else nullptr)
  bool (*forward_two)(const ForwardArgs&, const ForwardArgs&) = nullptr;
};

// 1-D sizes 8..64 go back to the register kernels (a line pair per thread) from this many lines:
// with enough lines to fill the GPU many times over they stream faster than the lane kernels
// (docs/fbfft.md).
constexpr int64_t kRegisters1dMinBatch = int64_t{1} << 20;

constexpr Family kFamilies[] = {
    // 2-D lane kernels
    {128, 128, 0, &rfft2_lanes_run<128>, &irfft2_lanes_run<128>},
    // register kernels
    {1, 2, 0, &rfft2_registers_run<1, 2>, &irfft2_registers_run<1, 2>},
    {1, 4, 0, &rfft2_registers_run<1, 4>, &irfft2_registers_run<1, 4>},
    {2, 2, 0, &rfft2_registers_run<2, 2>, &irfft2_registers_run<2, 2>,
     &rfft2_registers_run_two<2, 2>},
    {4, 4, 0, &rfft2_registers_run<4, 4>, &irfft2_registers_run<4, 4>,
     &rfft2_registers_run_two<4, 4>},
    {8, 8, 0, &rfft2_registers_run<8, 8>, &irfft2_registers_run<8, 8>,
     &rfft2_registers_run_two<8, 8>},
    {16, 16, 0, &rfft2_registers_run<16, 16>, &irfft2_registers_run<16, 16>,
     &rfft2_registers_run_two<16, 16>},
    {32, 32, 0, &rfft2_registers_run<32, 32>, &irfft2_registers_run<32, 32>,
     &rfft2_registers_run_two<32, 32>},
    {64, 64, 0, &rfft2_registers_run<64, 64>, &irfft2_registers_run<64, 64>,
     &rfft2_registers_run_two<64, 64>},
    {1, 8, kRegisters1dMinBatch, &rfft2_registers_run<1, 8>, &irfft2_registers_run<1, 8>},
    {1, 16, kRegisters1dMinBatch, &rfft2_registers_run<1, 16>, &irfft2_registers_run<1, 16>},
    {1, 32, kRegisters1dMinBatch, &rfft2_registers_run<1, 32>, &irfft2_registers_run<1, 32>},
    {1, 64, kRegisters1dMinBatch, &rfft2_registers_run<1, 64>, &irfft2_registers_run<1, 64>},
    // 1-D lane kernels
    {1, 8, 0, &rfft_lanes_run<8>, &irfft_lanes_run<8>},
    {1, 16, 0, &rfft_lanes_run<16>, &irfft_lanes_run<16>},
    {1, 32, 0, &rfft_lanes_run<32>, &irfft_lanes_run<32>},
    {1, 64, 0, &rfft_lanes_run<64>, &irfft_lanes_run<64>},
    {1, 128, 0, &rfft_lanes_run<128>, &irfft_lanes_run<128>},
    {1, 256, 0, &rfft_lanes_run<256>, &irfft_lanes_run<256>},
};

const Family* family_for(int nh, int nw, int64_t batch) {
  for (const Family& f : kFamilies)
    if (f.nh == nh && f.nw == nw && batch >= f.min_batch) return &f;
  return nullptr;
}

void check_sizes(int nh, int nw) {
  if (nh < 1 || nw < 2 || (nh & (nh - 1)) || (nw & (nw - 1)) || int64_t{nh} * nw > kMaxPoints)
    throw std::runtime_error("fastlayers: fbfft sizes must be powers of two with nh * nw <= " +
                             std::to_string(kMaxPoints));
}

// One forward transform of checked sizes, on its family's kernel.
void forward_one(const ForwardArgs& a) {
  if (a.batch == 0) return;
  if (const Family* f = family_for(a.nh, a.nw, a.batch)) return f->forward(a);
  rfft2_shared_run(a);
}

}  // namespace

void rfft2(const void* in, Real type, float2* out, Strides os, int64_t batch, int h, int w, int nh,
           int nw, int oy, int ox, cudaStream_t stream, const Options& options) {
  check_sizes(nh, nw);
  forward_one({in, type, out, os, batch, h, w, nh, nw, oy, ox, stream, options.direct_io});
}

void rfft2_two(const Rfft2Operand& first, const Rfft2Operand& second, Real type, int nh, int nw,
               cudaStream_t stream, const Options& options) {
  check_sizes(nh, nw);
  const auto args = [&](const Rfft2Operand& o) {
    return ForwardArgs{o.in, type, o.out, o.out_strides, o.batch, o.h, o.w, nh, nw, o.oy, o.ox,
                       stream, options.direct_io};
  };
  const ForwardArgs a = args(first), b = args(second);
  if (a.batch > 0 && b.batch > 0) {
    const Family* f = family_for(nh, nw, a.batch);
    if (f != nullptr && f == family_for(nh, nw, b.batch) && f->forward_two != nullptr &&
        f->forward_two(a, b))
      return;
  }
  forward_one(a);
  forward_one(b);
}

void irfft2(const float2* in, Strides is, void* out, Real type, int64_t batch, int nh, int nw,
            int out_h, int out_w, int oy, int ox, float scale, const void* bias, int64_t channels,
            cudaStream_t stream, bool implied_conjugates, const Options& options) {
  check_sizes(nh, nw);
  if (implied_conjugates &&
      !(nh == nw && nh >= 4 && nh <= 32 && is.image == 1 && is.row == (nw / 2 + 1) * is.bin))
    throw std::runtime_error("fastlayers: fbfft irfft2 with implied conjugates needs a square "
                             "basis from 4 to 32 and a frequency-major spectrum");
  if (batch == 0 || out_h * out_w == 0) return;
  if (bias != nullptr && channels < 1)
    throw std::runtime_error("fastlayers: fbfft bias needs channels >= 1");
  const InverseArgs a{in,    is,    out,  type,     batch,   nh,
                      nw,    out_h, out_w, oy,      ox,      scale,
                      bias,  channels, implied_conjugates, stream, options.direct_io};
  if (const Family* f = family_for(nh, nw, batch)) return f->inverse(a);
  irfft2_shared_run(a);
}

}  // namespace fbfft
}  // namespace fastlayers
