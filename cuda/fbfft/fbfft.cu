#include "fbfft.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "../common/check.h"

namespace fastlayers {
namespace fbfft {
namespace {

__device__ __forceinline__ float load_real(float v) { return v; }
__device__ __forceinline__ float load_real(__half v) { return __half2float(v); }
__device__ __forceinline__ float load_real(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ int bitrev(int v, int bits) {
  return bits == 0 ? 0 : static_cast<int>(__brev(static_cast<unsigned>(v)) >> (32 - bits));
}

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
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

template <typename T>
__global__ void rfft2_kernel(const T* __restrict__ in, float2* __restrict__ out, int64_t batch,
                             int h, int w, int nh, int nw, int hb, int wb, int oy, int ox,
                             bool transposed) {
  extern __shared__ float2 buf[];  // [nh][nw]
  const int bins = nw / 2 + 1;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const T* src = in + b * static_cast<int64_t>(h) * w;
    // Window, zero-filled, into rows with bit-reversed column order.
    for (int t = threadIdx.x; t < nh * nw; t += blockDim.x) {
      const int i = t >> wb, j = t & (nw - 1);
      const int si = i + oy, sj = j + ox;
      const float v = (si >= 0 && si < h && sj >= 0 && sj < w)
                          ? load_real(src[static_cast<int64_t>(si) * w + sj]) : 0.f;
      buf[i * nw + bitrev(j, wb)] = make_float2(v, 0.f);
    }
    __syncthreads();
    fft_lines(buf, nh, wb, 1, nw, -1.f);      // rows
    bitrev_rows(buf, nh, hb, nw, bins);
    fft_lines(buf, bins, hb, nw, 1, -1.f);    // columns 0..nw/2
    float2* dst = out + b * static_cast<int64_t>(nh) * bins;
    for (int t = threadIdx.x; t < nh * bins; t += blockDim.x) {
      if (transposed) {  // dst [bins][nh], consecutive threads along nh
        const int k = t / nh, i = t - k * nh;
        dst[t] = buf[i * nw + k];
      } else {
        const int i = t / bins, k = t - i * bins;
        dst[t] = buf[i * nw + k];
      }
    }
    __syncthreads();
  }
}

__global__ void irfft2_kernel(const float2* __restrict__ in, float* __restrict__ out, int64_t batch,
                              int nh, int nw, int hb, int wb, int out_h, int out_w, int oy, int ox,
                              bool transposed, float scale) {
  extern __shared__ float2 buf[];  // [nh][nw]
  const int bins = nw / 2 + 1;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float2* src = in + b * static_cast<int64_t>(nh) * bins;
    // Half spectrum into columns 0..nw/2, rows bit-reversed for the column inverses.
    for (int t = threadIdx.x; t < nh * bins; t += blockDim.x) {
      int i, k;
      if (transposed) { k = t / nh; i = t - k * nh; } else { i = t / bins; k = t - i * bins; }
      buf[bitrev(i, hb) * nw + k] = src[t];
    }
    __syncthreads();
    fft_lines(buf, bins, hb, nw, 1, 1.f);     // columns 0..nw/2, natural row order after
    // Each row's spectrum is Hermitian now: fill nw/2+1..nw-1, then bit-reverse the row for the
    // row inverses. Work on a row at a time per thread group: complete the row, then permute.
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
    float* dst = out + b * static_cast<int64_t>(out_h) * out_w;
    for (int t = threadIdx.x; t < out_h * out_w; t += blockDim.x) {
      const int i = t / out_w, j = t - i * out_w;
      const int si = i + oy, sj = j + ox;
      dst[t] = (si >= 0 && si < nh && sj >= 0 && sj < nw) ? buf[si * nw + sj].x * scale : 0.f;
    }
    __syncthreads();
  }
}

int log2i(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

void check_sizes(int nh, int nw) {
  if (nh < 1 || nw < 2 || (nh & (nh - 1)) || (nw & (nw - 1)) || nh * nw > 16384)
    throw std::runtime_error("fastlayers: fbfft sizes must be powers of two with nh * nw <= 16384");
}

template <typename Kernel>
void launch_config(Kernel kernel, int nh, int nw, int64_t batch, dim3* grid, dim3* block,
                   size_t* smem) {
  *smem = sizeof(float2) * static_cast<size_t>(nh) * nw;
  if (*smem > 48 * 1024)
    FL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(*smem)));
  const int threads = std::min(256, std::max(32, nh * nw / 2));
  *block = dim3(threads);
  *grid = dim3(static_cast<unsigned>(std::min<int64_t>(batch, 1 << 20)));
}

}  // namespace

template <typename T>
void rfft2(const T* in, float2* out, int64_t batch, int h, int w, int nh, int nw, int oy, int ox,
           bool transposed, cudaStream_t stream) {
  check_sizes(nh, nw);
  if (batch == 0) return;
  dim3 grid, block;
  size_t smem;
  launch_config(rfft2_kernel<T>, nh, nw, batch, &grid, &block, &smem);
  rfft2_kernel<T><<<grid, block, smem, stream>>>(in, out, batch, h, w, nh, nw, log2i(nh),
                                                  log2i(nw), oy, ox, transposed);
  FL_LAUNCH_CHECK();
}

void irfft2(const float2* in, float* out, int64_t batch, int nh, int nw, int out_h, int out_w,
            int oy, int ox, bool transposed, float scale, cudaStream_t stream) {
  check_sizes(nh, nw);
  if (batch == 0 || out_h * out_w == 0) return;
  dim3 grid, block;
  size_t smem;
  launch_config(irfft2_kernel, nh, nw, batch, &grid, &block, &smem);
  irfft2_kernel<<<grid, block, smem, stream>>>(in, out, batch, nh, nw, log2i(nh), log2i(nw), out_h,
                                               out_w, oy, ox, transposed, scale);
  FL_LAUNCH_CHECK();
}

template void rfft2<float>(const float*, float2*, int64_t, int, int, int, int, int, int, bool,
                           cudaStream_t);
template void rfft2<__half>(const __half*, float2*, int64_t, int, int, int, int, int, int, bool,
                            cudaStream_t);
template void rfft2<__nv_bfloat16>(const __nv_bfloat16*, float2*, int64_t, int, int, int, int, int,
                                   int, bool, cudaStream_t);

}  // namespace fbfft
}  // namespace fastlayers
