// Error checks for the framework-free device layer. Failures throw std::runtime_error with the
// call site; the host layer turns them into Python RuntimeErrors.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cufft.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace fastlayers {

[[noreturn]] inline void fail(const char* what, long code, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << "fastlayers: " << what << " error " << code << " in `" << expr << "` at " << file << ":" << line;
  throw std::runtime_error(os.str());
}

}  // namespace fastlayers

#define FL_CUDA_CHECK(expr)                                                                       \
  do {                                                                                            \
    cudaError_t fl_err_ = (expr);                                                                 \
    if (fl_err_ != cudaSuccess) {                                                                 \
      (void)cudaGetLastError(); /* a non-sticky error is reported here, not by the next call */   \
      std::string fl_msg_ = std::string("CUDA (") + cudaGetErrorString(fl_err_) + ")";             \
      ::fastlayers::fail(fl_msg_.c_str(), static_cast<long>(fl_err_), #expr, __FILE__, __LINE__);   \
    }                                                                                             \
  } while (0)

#define FL_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                            \
    cublasStatus_t fl_st_ = (expr);                                                               \
    if (fl_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::fastlayers::fail("cuBLAS", static_cast<long>(fl_st_), #expr, __FILE__, __LINE__);         \
  } while (0)

#define FL_CUFFT_CHECK(expr)                                                                      \
  do {                                                                                            \
    cufftResult fl_st_ = (expr);                                                                  \
    if (fl_st_ != CUFFT_SUCCESS)                                                                  \
      ::fastlayers::fail("cuFFT", static_cast<long>(fl_st_), #expr, __FILE__, __LINE__);          \
  } while (0)

// After every kernel launch.
#define FL_LAUNCH_CHECK() FL_CUDA_CHECK(cudaGetLastError())
