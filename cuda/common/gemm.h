// Batched GEMMs on cuBLAS, for every algorithm that needs them: the FFT convolution's complex
// per-frequency products, and real products in float32, float64, float16 and bfloat16 (Winograd,
// the LSTM). Column-major as cuBLAS sees it: C_i = alpha op_a(A_i) op_b(B_i) + beta C_i for each
// batch index i, op(A) m x k, op(B) k x n, C m x n.
//
// The handle is usually lent by the framework (PyTorch's current one): its math and pointer modes
// are pinned for the call (default math, host scalars, so the framework's own TF32 setting for
// matmul cannot leak in) and restored after; its stream is set only when it differs, because
// cublasSetStream also resets the handle's workspace to cuBLAS's own pool, which the lender had
// replaced.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fastlayers {
namespace gemm {

// Element type of A, B and C, and the arithmetic: float32 accumulation for F32, F16, BF16 and C32
// (TF32 tensor ops for F32 and C32 where `tf32` allows), float64 for F64 and C64.
enum class Type : int { F32, F64, F16, BF16, C32, C64 };

// One GEMM's shape and operand layout (leading dimensions in elements).
struct Dims {
  cublasOperation_t op_a, op_b;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
};

// The scalars, real (complex types take them as alpha + 0i, beta + 0i).
struct Scale {
  double alpha = 1, beta = 0;
};

// A_i = A + i * stride_a (elements), likewise B and C; i < batch.
void strided_batched(cublasHandle_t blas, cudaStream_t stream, Type type, bool tf32,
                     const Dims& d, const void* A, int64_t stride_a, const void* B,
                     int64_t stride_b, void* C, int64_t stride_c, int64_t batch,
                     Scale scale = {});

// The same with C of another type than A and B: F16 or BF16 operands into an F32 result (float32
// accumulation, stored unrounded); `c_type` == `type` is the call above.
void strided_batched(cublasHandle_t blas, cudaStream_t stream, Type type, Type c_type, bool tf32,
                     const Dims& d, const void* A, int64_t stride_a, const void* B,
                     int64_t stride_b, void* C, int64_t stride_c, int64_t batch,
                     Scale scale = {});

// The handle pinned once for a run of GEMMs (an LSTM's step loop): the calls above pin and
// restore the handle's modes around every GEMM, a few cuBLAS calls of host time each; these do it
// once, in the constructor and the destructor.
class Pinned {
 public:
  Pinned(cublasHandle_t blas, cudaStream_t stream);
  ~Pinned();
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  // As the free function of the same name, on the pinned handle.
  void strided_batched(Type type, Type c_type, bool tf32, const Dims& d, const void* A,
                       int64_t stride_a, const void* B, int64_t stride_b, void* C,
                       int64_t stride_c, int64_t batch, Scale scale = {}) const;
  // As pointer_batched, with C of `c_type` (as strided_batched's).
  void pointer_batched(Type type, Type c_type, bool tf32, const Dims& d, const void* const* A,
                       const void* const* B, void* const* C, int64_t batch,
                       Scale scale = {}) const;

 private:
  cublasHandle_t blas_;
  cublasMath_t old_math_;
  cublasPointerMode_t old_ptr_;
};

// A_i = A[i], B_i = B[i], C_i = C[i]: arrays of `batch` pointers in device memory.
void pointer_batched(cublasHandle_t blas, cudaStream_t stream, Type type, bool tf32,
                     const Dims& d, const void* const* A, const void* const* B, void* const* C,
                     int64_t batch, Scale scale = {});

}  // namespace gemm
}  // namespace fastlayers
