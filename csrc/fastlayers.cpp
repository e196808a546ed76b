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
  // for float64); `tf32` lets float32 products use TF32 (cuda/winograd/layout.h). `fused` (forward
  // and input gradient, tile 2, on CUDA: float16 and bfloat16, or float32 with data widths that
  // are multiples of 4, its products TF32 with `tf32`, else float32): the fused kernel,
  // transforms and products in one kernel with no transformed buffers in global memory
  // (cuda/winograd/fused.cuh).
  // input [S, C, H, W], weight [K, C, 3, 3], bias [K]  ->  [S, K, H+2ph-2, W+2pw-2].
  // `transformed_weight` [alpha^2, K, C] (winograd_filter_transform of `weight` at `tile`, not
  // differentiable; not with `fused`): the filters already transformed, which the op then reads
  // instead of transforming `weight` (the gradients remain `weight`'s).
  m.def("winograd_conv2d(Tensor input, Tensor weight, Tensor? bias, SymInt[2] padding, "
        "int tile=2, bool tf32=False, bool fused=False, Tensor? transformed_weight=None) "
        "-> Tensor");
  // weight [K, C, 3, 3]  ->  U [alpha^2, K, C] = G w G^T of F(tile x tile, 3x3), in weight's
  // dtype: the forward's transformed filters, as the non-fused pipeline stores them
  m.def("winograd_filter_transform(Tensor weight, int tile=2) -> Tensor");
  // grad_output [S, K, oh, ow], weight [K, C, 3, 3]  ->  grad_input [S, C, oh+2-2ph, ow+2-2pw]
  m.def("winograd_conv2d_input_grad(Tensor grad_output, Tensor weight, SymInt[2] padding, "
        "int tile=2, bool tf32=False, bool fused=False) -> Tensor");
  // grad_output [S, K, oh, ow], input [S, C, H, W]  ->  grad_weight [K, C, 3, 3]. `fused`
  // (tile 2, on CUDA: float16, bfloat16 or float32, its products TF32 with `tf32`, else float32):
  // the fused weight gradient, both transforms, the products and the sums over runs of tiles in
  // one kernel, the runs' sum and A^T . A in a second (cuda/winograd/fused_wgrad.cuh).
  m.def("winograd_conv2d_weight_grad(Tensor grad_output, Tensor input, SymInt[2] padding, "
        "int tile=2, bool tf32=False, bool fused=False) -> Tensor");

  // LSTM, one layer over a sequence, PyTorch's gates (i, f, g, o) and weights:
  //   gates = x_t w_ih^T + b_ih + h_{t-1} w_hh^T + b_hh;  c_t = f c_{t-1} + i g;
  //   h_t = o tanh(c_t), times w_hr^T when a projection is given.
  // input [T, B, I] (batch_sizes None) or packed [N, I] with batch_sizes [T] (int64 on the CPU,
  // non-increasing, summing to N, rows of a step sorted by length as PackedSequence keeps them:
  // at step t rows 0..batch_sizes[t]-1 are active, the others keep their state).
  // h0 [B, R], c0 [B, H], w_ih [4H, I], w_hh [4H, R], b_ih, b_hh [4H], w_hr [R, H]; R = H without
  // a projection. `reverse`: each sequence from its last step to its first (the backward
  // direction of a bidirectional layer). Cell state and accumulation in float32 (float64 for
  // float64); `tf32` lets float32 GEMMs use TF32.
  // -> output [T, B, R] (or [N, R]), h_n [B, R], c_n [B, H], and what lstm_backward reads:
  //    reserve [N, 5H] (float32; float64 for float64: i, f, g, o, c_{t-1}) and
  //    reserve_h [N, R (+ H with a projection)] (input dtype: h_{t-1}, and o tanh(c_t)).
  m.def("lstm(Tensor input, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, Tensor? b_ih, "
        "Tensor? b_hh, Tensor? w_hr, Tensor? batch_sizes, bool reverse=False, bool tf32=False) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  // lstm as one cooperative kernel for the whole recurrence on CUDA (w_hh's rows and the cell
  // state held on chip across steps; one grid barrier per step): float32, float16 or bfloat16,
  // padded input without a projection, batch and hidden size within the device's shared memory
  // (_C.lstm_persistent_fits). The same results and reserve as lstm; its backward is
  // lstm_backward_persistent where that fits (batches up to 16, or float16 and bfloat16 on
  // clusters), else lstm_backward. On the CPU it runs lstm's kernel.
  m.def("lstm_persistent(Tensor input, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, "
        "Tensor? b_ih, Tensor? b_hh, Tensor? w_hr, Tensor? batch_sizes, bool reverse=False, "
        "bool tf32=False) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  // The gradients of lstm from its outputs' (grad_h_n, grad_c_n: None for zero) and what it
  // saved -> grad_input, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b (of b_ih and of b_hh
  // alike), grad_w_hr ([0] without a projection); grad_input and the weight gradients are
  // computed only where `need_input` / `need_weights` (else empty tensors).
  m.def("lstm_backward(Tensor grad_output, Tensor? grad_h_n, Tensor? grad_c_n, Tensor input, "
        "Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, Tensor? w_hr, Tensor? batch_sizes, "
        "Tensor reserve, Tensor reserve_h, bool reverse=False, bool tf32=False, "
        "bool need_input=True, bool need_weights=True) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // lstm_backward for lstm_persistent's results, its recurrence as one cooperative kernel on CUDA
  // (w_hh's columns and the cell gradient held on chip across steps; one grid barrier per step)
  // under lstm_persistent's conditions and batches up to 16 (float16 and bfloat16 on clusters:
  // where they fit, by lstm_persistent's rule); on the CPU lstm_backward's kernel.
  m.def("lstm_backward_persistent(Tensor grad_output, Tensor? grad_h_n, Tensor? grad_c_n, "
        "Tensor input, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, Tensor? w_hr, "
        "Tensor? batch_sizes, Tensor reserve, Tensor reserve_h, bool reverse=False, "
        "bool tf32=False, bool need_input=True, bool need_weights=True) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // A unidirectional stack of lstm layers over padded input without a projection, layer l's input
  // layer l-1's output, in one call (on CUDA one wavefront: every layer's step t - l at once,
  // see cuda/lstm/lstm.h; on the CPU lstm's kernel layer by layer). input [T, B, I]; h0, c0
  // [L, B, H]; `weights`: per layer w_ih [4H, I (first layer) or H], w_hh [4H, H], and with
  // `has_biases` b_ih, b_hh [4H] (nn.LSTM's flat weights); 1 <= L <= 8 on CUDA.
  // -> output [T, B, H], h_n, c_n [L, B, H], and what each layer's lstm_backward reads: inner
  //    [L-1, T, B, H] (the other layers' outputs, the next layers' inputs), reserve [L, T B, 5H]
  //    and reserve_h [L, T B, H] (each layer's lstm reserve).
  m.def("lstm_stack(Tensor input, Tensor h0, Tensor c0, Tensor[] weights, bool has_biases, "
        "bool tf32=False) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // One step of lstm for a loop of one's own: input [B, I], hx [B, R], cx [B, H] -> (h [B, R],
  // c [B, H]); lstm with T = 1 (so its autograd).
  m.def("lstm_cell(Tensor input, Tensor hx, Tensor cx, Tensor w_ih, Tensor w_hh, Tensor? b_ih, "
        "Tensor? b_hh, Tensor? w_hr=None, bool tf32=False) -> (Tensor, Tensor)");

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
