#include "gemm.h"

#include <climits>
#include <stdexcept>
#include <string>

#include "check.h"

namespace fastlayers {
namespace gemm {
namespace {

int as_int(int64_t v, const char* what) {
  if (v > INT_MAX)
    throw std::runtime_error(std::string("fastlayers: ") + what + " too large for cuBLAS");
  return static_cast<int>(v);
}

cudaDataType data_type(Type t) {
  switch (t) {
    case Type::F64: return CUDA_R_64F;
    case Type::F16: return CUDA_R_16F;
    case Type::BF16: return CUDA_R_16BF;
    case Type::C32: return CUDA_C_32F;
    case Type::C64: return CUDA_C_64F;
    default: return CUDA_R_32F;
  }
}

cublasComputeType_t compute_type(Type t, bool tf32) {
  switch (t) {
    case Type::F64:
    case Type::C64: return CUBLAS_COMPUTE_64F;
    case Type::F32:
    case Type::C32: return tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    default: return CUBLAS_COMPUTE_32F;  // float16, bfloat16: float32 accumulation
  }
}

// A scalar in the compute type's representation (cuBLAS reads it through a void pointer).
union Scalar {
  float f;
  double d;
  float2 c;
  double2 z;
};

Scalar scalar(Type t, double v) {
  Scalar s{};
  switch (t) {
    case Type::F64: s.d = v; break;
    case Type::C32: s.c = make_float2(static_cast<float>(v), 0.f); break;
    case Type::C64: s.z = make_double2(v, 0.0); break;
    default: s.f = static_cast<float>(v); break;  // float32 compute
  }
  return s;
}

// The GEMM's dimensions as cuBLAS's ints, checked.
struct IntDims {
  int m, n, k, lda, ldb, ldc, batch;
};
IntDims int_dims(const Dims& d, int64_t batch) {
  return {as_int(d.m, "GEMM m"), as_int(d.n, "GEMM n"), as_int(d.k, "GEMM k"),
          as_int(d.lda, "lda"), as_int(d.ldb, "ldb"), as_int(d.ldc, "ldc"),
          as_int(batch, "GEMM batch")};
}

void check_result_type(Type type, Type c_type) {
  const bool half_into_float =
      (type == Type::F16 || type == Type::BF16) && c_type == Type::F32;
  if (c_type != type && !half_into_float)
    throw std::runtime_error("fastlayers: GEMM result type must be the operands' or F32 from "
                             "F16/BF16 operands");
}

// The GEMM of strided_batched on a handle already pinned.
cublasStatus_t strided_call(cublasHandle_t blas, Type type, Type c_type, bool tf32, const Dims& d,
                            const void* A, int64_t stride_a, const void* B, int64_t stride_b,
                            void* C, int64_t stride_c, int64_t batch, Scale scale) {
  check_result_type(type, c_type);
  const IntDims i = int_dims(d, batch);
  const Scalar alpha = scalar(type, scale.alpha), beta = scalar(type, scale.beta);
  return cublasGemmStridedBatchedEx(blas, d.op_a, d.op_b, i.m, i.n, i.k, &alpha, A,
                                    data_type(type), i.lda, stride_a, B, data_type(type), i.ldb,
                                    stride_b, &beta, C, data_type(c_type), i.ldc, stride_c,
                                    i.batch, compute_type(type, tf32), CUBLAS_GEMM_DEFAULT);
}

// The GEMM of pointer_batched on a handle already pinned.
cublasStatus_t pointer_call(cublasHandle_t blas, Type type, Type c_type, bool tf32,
                            const Dims& d, const void* const* A, const void* const* B,
                            void* const* C, int64_t batch, Scale scale) {
  check_result_type(type, c_type);
  const IntDims i = int_dims(d, batch);
  const Scalar alpha = scalar(type, scale.alpha), beta = scalar(type, scale.beta);
  return cublasGemmBatchedEx(blas, d.op_a, d.op_b, i.m, i.n, i.k, &alpha, A, data_type(type),
                             i.lda, B, data_type(type), i.ldb, &beta, C, data_type(c_type),
                             i.ldc, i.batch, compute_type(type, tf32), CUBLAS_GEMM_DEFAULT);
}

}  // namespace

Pinned::Pinned(cublasHandle_t blas, cudaStream_t stream) : blas_(blas) {
  FL_CUBLAS_CHECK(cublasGetMathMode(blas, &old_math_));
  FL_CUBLAS_CHECK(cublasGetPointerMode(blas, &old_ptr_));
  cudaStream_t current = nullptr;
  FL_CUBLAS_CHECK(cublasGetStream(blas, &current));
  if (current != stream) FL_CUBLAS_CHECK(cublasSetStream(blas, stream));
  FL_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
  FL_CUBLAS_CHECK(cublasSetPointerMode(blas, CUBLAS_POINTER_MODE_HOST));
}

Pinned::~Pinned() {
  cublasSetMathMode(blas_, old_math_);
  cublasSetPointerMode(blas_, old_ptr_);
}

void Pinned::strided_batched(Type type, Type c_type, bool tf32, const Dims& d, const void* A,
                             int64_t stride_a, const void* B, int64_t stride_b, void* C,
                             int64_t stride_c, int64_t batch, Scale scale) const {
  FL_CUBLAS_CHECK(strided_call(blas_, type, c_type, tf32, d, A, stride_a, B, stride_b, C,
                               stride_c, batch, scale));
}

void strided_batched(cublasHandle_t blas, cudaStream_t stream, Type type, bool tf32,
                     const Dims& d, const void* A, int64_t stride_a, const void* B,
                     int64_t stride_b, void* C, int64_t stride_c, int64_t batch, Scale scale) {
  Pinned(blas, stream).strided_batched(type, type, tf32, d, A, stride_a, B, stride_b, C,
                                       stride_c, batch, scale);
}

void strided_batched(cublasHandle_t blas, cudaStream_t stream, Type type, Type c_type, bool tf32,
                     const Dims& d, const void* A, int64_t stride_a, const void* B,
                     int64_t stride_b, void* C, int64_t stride_c, int64_t batch, Scale scale) {
  Pinned(blas, stream).strided_batched(type, c_type, tf32, d, A, stride_a, B, stride_b, C,
                                       stride_c, batch, scale);
}

void Pinned::pointer_batched(Type type, Type c_type, bool tf32, const Dims& d,
                             const void* const* A, const void* const* B, void* const* C,
                             int64_t batch, Scale scale) const {
  FL_CUBLAS_CHECK(pointer_call(blas_, type, c_type, tf32, d, A, B, C, batch, scale));
}

void pointer_batched(cublasHandle_t blas, cudaStream_t stream, Type type, bool tf32,
                     const Dims& d, const void* const* A, const void* const* B, void* const* C,
                     int64_t batch, Scale scale) {
  Pinned(blas, stream).pointer_batched(type, type, tf32, d, A, B, C, batch, scale);
}

}  // namespace gemm
}  // namespace fastlayers
