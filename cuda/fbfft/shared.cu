// The shared-memory kernels (fbfft.h): every size the other families do not serve, one image
// per block, radix-2 passes in shared memory. Not templated: kernels and launchers compile here.
#include <algorithm>

#include "common.cuh"
#include "launch.h"

namespace fastlayers {
namespace fbfft {
namespace detail {

namespace {

// Shared-memory kernels (every size): one image per block, radix-2 passes in shared memory.

__device__ __forceinline__ int bitrev(int v, int bits) {
  return bits == 0 ? 0 : static_cast<int>(__brev(static_cast<unsigned>(v)) >> (32 - bits));
}


// In-place radix-2 decimation-in-time passes over `count` independent lines of length 2^bits,
// stored in shared memory with element stride `es` and line stride `ls`; input bit-reversed,
// output in natural order. sign = -1 forward, +1 inverse.
__device__ void fft_lines(float2* buf, int count, int bits, int es, int ls, float sign) {
  const int half_n = (1 << bits) >> 1;
  for (int s = 1; s <= bits; ++s) {
    const int half = 1 << (s - 1);
    for (int t = threadIdx.x; t < count * half_n; t += blockDim.x) {
      const int line = t / half_n, k = t - line * half_n;
      const int pos = k & (half - 1);
      const int i0 = ((k >> (s - 1)) << s) + pos, i1 = i0 + half;
      float sn, cs;
      sincospif(sign * static_cast<float>(pos) / static_cast<float>(half), &sn, &cs);
      float2* p0 = buf + line * ls + i0 * es;
      float2* p1 = buf + line * ls + i1 * es;
      const float2 a = *p0, b = cmul(*p1, make_float2(cs, sn));
      *p0 = make_float2(a.x + b.x, a.y + b.y);
      *p1 = make_float2(a.x - b.x, a.y - b.y);
    }
    __syncthreads();
  }
}

// Bit-reverses the row index of columns [0, cols) of an nh x nw buffer, in place.
__device__ void bitrev_rows(float2* buf, int nh, int hb, int nw, int cols) {
  for (int t = threadIdx.x; t < nh * cols; t += blockDim.x) {
    const int i = t / cols, k = t - i * cols, r = bitrev(i, hb);
    if (i < r) {
      const float2 v = buf[i * nw + k];
      buf[i * nw + k] = buf[r * nw + k];
      buf[r * nw + k] = v;
    }
  }
  __syncthreads();
}

__global__ void rfft2_shared(const void* __restrict__ in, Real type, float2* __restrict__ out,
                             Strides os, int64_t batch, int h, int w, int nh, int nw, int hb,
                             int wb, int oy, int ox) {
  extern __shared__ float4 smem_raw[];
  float2* buf = reinterpret_cast<float2*>(smem_raw);  // [nh][nw]
  const int bins = nw / 2 + 1;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const int64_t base = b * static_cast<int64_t>(h) * w;
    // Window, zero-filled, into rows with bit-reversed column order.
    for (int t = threadIdx.x; t < nh * nw; t += blockDim.x) {
      const int i = t >> wb, j = t & (nw - 1);
      const int si = i + oy, sj = j + ox;
      const float v = (si >= 0 && si < h && sj >= 0 && sj < w)
                          ? load_real(in, base + static_cast<int64_t>(si) * w + sj, type) : 0.f;
      buf[i * nw + bitrev(j, wb)] = make_float2(v, 0.f);
    }
    __syncthreads();
    fft_lines(buf, nh, wb, 1, nw, -1.f);      // rows
    bitrev_rows(buf, nh, hb, nw, bins);
    fft_lines(buf, bins, hb, nw, 1, -1.f);    // columns 0..nw/2
    float2* dst = out + b * os.image;
    for (int t = threadIdx.x; t < nh * bins; t += blockDim.x) {
      const int i = t / bins, k = t - i * bins;
      dst[i * os.row + k * os.bin] = buf[i * nw + k];
    }
    __syncthreads();
  }
}

__global__ void irfft2_shared(const float2* __restrict__ in, Strides is, void* __restrict__ out,
                              Real type, int64_t batch, int nh, int nw, int hb, int wb, int out_h,
                              int out_w, int oy, int ox, float scale, const void* __restrict__ bias,
                              int64_t channels) {
  extern __shared__ float4 smem_raw[];
  float2* buf = reinterpret_cast<float2*>(smem_raw);  // [nh][nw]
  const int bins = nw / 2 + 1;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float2* src = in + b * is.image;
    // Half spectrum into columns 0..nw/2, rows bit-reversed for the column inverses.
    for (int t = threadIdx.x; t < nh * bins; t += blockDim.x) {
      const int i = t / bins, k = t - i * bins;
      buf[bitrev(i, hb) * nw + k] = src[i * is.row + k * is.bin];
    }
    __syncthreads();
    fft_lines(buf, bins, hb, nw, 1, 1.f);     // columns 0..nw/2, natural row order after
    // Each row's spectrum, its edge bins taken real, extended by Hermitian symmetry.
    for (int t = threadIdx.x; t < nh; t += blockDim.x) {
      buf[t * nw].y = 0.f;
      buf[t * nw + nw / 2].y = 0.f;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < nh * (nw - bins); t += blockDim.x) {
      const int i = t / (nw - bins), k = bins + (t - i * (nw - bins));
      const float2 v = buf[i * nw + (nw - k)];
      buf[i * nw + k] = make_float2(v.x, -v.y);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < nh * nw; t += blockDim.x) {
      const int i = t >> wb, j = t & (nw - 1), r = bitrev(j, wb);
      if (j < r) {
        const float2 v = buf[i * nw + j];
        buf[i * nw + j] = buf[i * nw + r];
        buf[i * nw + r] = v;
      }
    }
    __syncthreads();
    fft_lines(buf, nh, wb, 1, nw, 1.f);       // rows; the real part is the result
    const float add = bias != nullptr ? load_real(bias, b % channels, type) : 0.f;
    const int64_t plane = static_cast<int64_t>(out_h) * out_w;
    for (int t = threadIdx.x; t < out_h * out_w; t += blockDim.x) {
      const int i = t / out_w, j = t - i * out_w;
      const int si = i + oy, sj = j + ox;
      const bool in_basis = si >= 0 && si < nh && sj >= 0 && sj < nw;
      const float v = in_basis ? buf[si * nw + sj].x * scale : 0.f;
      store_real(out, b * plane + t, v + add, type);
    }
    __syncthreads();
  }
}

int log2i(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

}  // namespace

void rfft2_shared_run(const ForwardArgs& a) {
  const size_t smem = sizeof(float2) * static_cast<size_t>(a.nh) * a.nw;
  allow_shared_memory(rfft2_shared, smem);
  const int threads = std::min(256, std::max(32, a.nh * a.nw / 2));
  rfft2_shared<<<static_cast<unsigned>(std::min<int64_t>(a.batch, 1 << 20)), threads, smem,
                 a.stream>>>(a.in, a.type, a.out, a.os, a.batch, a.h, a.w, a.nh, a.nw,
                             log2i(a.nh), log2i(a.nw), a.oy, a.ox);
  FL_LAUNCH_CHECK();
}

void irfft2_shared_run(const InverseArgs& a) {
  const size_t smem = sizeof(float2) * static_cast<size_t>(a.nh) * a.nw;
  allow_shared_memory(irfft2_shared, smem);
  const int threads = std::min(256, std::max(32, a.nh * a.nw / 2));
  irfft2_shared<<<static_cast<unsigned>(std::min<int64_t>(a.batch, 1 << 20)), threads, smem,
                  a.stream>>>(a.in, a.is, a.out, a.type, a.batch, a.nh, a.nw, log2i(a.nh),
                              log2i(a.nw), a.out_h, a.out_w, a.oy, a.ox, a.scale, a.bias,
                              a.channels);
  FL_LAUNCH_CHECK();
}

}  // namespace detail
}  // namespace fbfft
}  // namespace fastlayers
