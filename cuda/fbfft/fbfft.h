// fbfft: batched real 2-D (and, with nh = 1, 1-D) FFTs of small power-of-two sizes, one image per
// thread block in shared memory, reading and writing through windows (implicit zero padding,
// tiling offsets, clipping) and optionally writing the spectrum with its two innermost
// dimensions transposed. Semantics: csrc/fbfft/fbfft.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fastlayers {
namespace fbfft {

// in  [batch, h, w] (T: float, __half or __nv_bfloat16), window at (oy, ox) of size nh x nw
// out [batch, nh, nw/2+1] complex, or [batch, nw/2+1, nh] when transposed. Unnormalised.
// nh, nw: powers of two, nh >= 1, nw >= 2, nh * nw <= 16384.
template <typename T>
void rfft2(const T* in, float2* out, int64_t batch, int h, int w, int nh, int nw, int oy, int ox,
           bool transposed, cudaStream_t stream);

// in  [batch, nh, nw/2+1] complex (or [batch, nw/2+1, nh] when transposed)
// out [batch, out_h, out_w] real: the inverse at (i + oy, j + ox) times `scale`, 0 outside it.
// The imaginary parts of the DC and Nyquist bins of the halved dimension are ignored.
void irfft2(const float2* in, float* out, int64_t batch, int nh, int nw, int out_h, int out_w,
            int oy, int ox, bool transposed, float scale, cudaStream_t stream);

}  // namespace fbfft
}  // namespace fastlayers
