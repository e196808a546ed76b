// The op surface of fastlayers: every public schema, in one place. Kernels are registered beside
// their implementations (CPU, CUDA, autocast: csrc/<feature>/); fake kernels and autograd beside
// the typed wrappers in python/fastlayers/. The Python module _C (build facts, test hooks):
// csrc/module.cpp.
#include <torch/library.h>

TORCH_LIBRARY(fastlayers, m) {
  // FFT convolution, stride 1, dilation 1, groups 1, zero padding (ph, pw); `basis` is the
  // Fourier basis size (nh, nw), at least the padded input. Cross-correlation as in nn.Conv2d.
  // `backend`: the transforms, "cufft" (any basis) or "fbfft" (power-of-two sides 2..128; not
  // float64 on CUDA); on CPU both run the same ATen pipeline.
  // `tile` (th, tw): [0, 0] untiled, else overlap-save tiles of that size over the pass's large
  // result (y for fft_conv2d and fft_conv2d_weight_grad, grad_input for fft_conv2d_input_grad);
  // the basis then needs only tile + kernel - 1 per side (csrc/fft_conv/fft_conv.h).
  // input [S, C, H, W], weight [K, C, kh, kw], bias [K]  ->  [S, K, H+2ph-kh+1, W+2pw-kw+1]
  m.def("fft_conv2d(Tensor input, Tensor weight, Tensor? bias, SymInt[2] padding, "
        "SymInt[2] basis, bool tf32=False, str backend=\"cufft\", "
        "SymInt[2] tile=[0, 0]) -> Tensor");
  // grad_output [S, K, oh, ow], weight [K, C, kh, kw]  ->  grad_input [S, C, oh+kh-1-2ph, ...]
  m.def("fft_conv2d_input_grad(Tensor grad_output, Tensor weight, SymInt[2] padding, "
        "SymInt[2] basis, bool tf32=False, str backend=\"cufft\", "
        "SymInt[2] tile=[0, 0]) -> Tensor");
  // grad_output [S, K, oh, ow], input [S, C, H, W]  ->  grad_weight [K, C, H+2ph-oh+1, ...]
  m.def("fft_conv2d_weight_grad(Tensor grad_output, Tensor input, SymInt[2] padding, "
        "SymInt[2] basis, bool tf32=False, str backend=\"cufft\", "
        "SymInt[2] tile=[0, 0]) -> Tensor");

  // Winograd convolution, 3x3 filters, stride 1, dilation 1, groups 1, zero padding (ph, pw);
  // cross-correlation as in nn.Conv2d, shapes as the FFT ops'. `tile`: the output tiles m of
  // F(m x m, 3x3) for the forward and the input gradient (2, 4 or 6), the grad_output tiles r of
  // F(3x3, r x r) for the weight gradient (2 or 4); alpha = tile + 2 points per side. The
  // transformed operands are stored in the input dtype, products accumulate in float32 (float64
  // for float64); `tf32` lets float32 products use TF32 (cuda/winograd/layout.h).
  // input [S, C, H, W], weight [K, C, 3, 3], bias [K]  ->  [S, K, H+2ph-2, W+2pw-2]
  m.def("winograd_conv2d(Tensor input, Tensor weight, Tensor? bias, SymInt[2] padding, "
        "int tile=2, bool tf32=False) -> Tensor");
  // grad_output [S, K, oh, ow], weight [K, C, 3, 3]  ->  grad_input [S, C, oh+2-2ph, ow+2-2pw]
  m.def("winograd_conv2d_input_grad(Tensor grad_output, Tensor weight, SymInt[2] padding, "
        "int tile=2, bool tf32=False) -> Tensor");
  // grad_output [S, K, oh, ow], input [S, C, H, W]  ->  grad_weight [K, C, 3, 3]
  m.def("winograd_conv2d_weight_grad(Tensor grad_output, Tensor input, SymInt[2] padding, "
        "int tile=2, bool tf32=False) -> Tensor");

  // fbfft: small power-of-two real FFTs with implicit padding, windows, clipping and layouts
  // (semantics in csrc/fbfft/fbfft.h). Unnormalised forward; the inverse scales by 1/n when
  // `normalized`. CPU kernels (any float dtype) and CUDA kernels (float32 arithmetic).
  // input [..., w] real -> [..., n/2+1] complex; reads input[..., i + offset], zeros outside
  m.def("fbfft_rfft(Tensor input, SymInt n, int offset=0) -> Tensor");
  // input [..., n/2+1] complex -> [..., out_size] real: inverse[..., i + offset], zeros outside
  m.def("fbfft_irfft(Tensor input, SymInt n, SymInt out_size, int offset=0, "
        "bool normalized=True) -> Tensor");
  // input [..., h, w] real -> [..., nh, nw/2+1] complex, or [..., nw/2+1, nh] when transposed
  m.def("fbfft_rfft2(Tensor input, SymInt[2] size, int[2] offset=[0, 0], "
        "bool transposed=False) -> Tensor");
  // input [..., nh, nw/2+1] (or transposed) complex -> [..., out_h, out_w] real
  m.def("fbfft_irfft2(Tensor input, SymInt[2] size, SymInt[2] out_size, int[2] offset=[0, 0], "
        "bool transposed=False, bool normalized=True) -> Tensor");
}
