// CUDA host glue of the LSTM: tensors -> raw pointers, the current stream, PyTorch's cuBLAS
// handle, a workspace from the caching allocator; the step geometry stays on the host.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <string>
#include <type_traits>

#include "../../cuda/lstm/lstm.h"
#include "../common/cuda_types.h"
#include "lstm.h"
#include "module_api.h"

namespace fastlayers {
namespace lstm_host {
namespace {

lstm::Steps steps_of(const Geometry& g, bool reverse) {
  return {g.T, g.B, g.I, g.H, g.R, g.N, g.bs.data(), g.off.data(), g.proj, reverse};
}

Tensor contig(const Tensor& t) { return t.contiguous(); }
std::optional<Tensor> contig(const OptTensor& t) {
  return t.has_value() ? std::optional<Tensor>(t->contiguous()) : std::nullopt;
}

template <typename T, typename S>
const T* cptr(const std::optional<Tensor>& t) {
  return t.has_value() ? reinterpret_cast<const T*>(t->const_data_ptr<S>()) : nullptr;
}
template <typename T, typename S>
const T* cptr(const Tensor& t) {
  return reinterpret_cast<const T*>(t.const_data_ptr<S>());
}
template <typename T, typename S>
T* mptr(Tensor& t) {
  return reinterpret_cast<T*>(t.mutable_data_ptr<S>());
}

Tensor workspace(size_t bytes, const Tensor& like) {
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}

// The persistent kernels' own conditions, after the op's common checks (`backward`: the backward
// kernel's).
void check_persistent(const char* op, const Geometry& g, const Tensor& input, bool backward) {
  const auto dt = input.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16,
              op, ": `input` must be float32, float16 or bfloat16 (got ", dt, ")");
  TORCH_CHECK(!g.packed, op, ": `batch_sizes` must be None (padded input only)");
  TORCH_CHECK(!g.proj, op, ": `w_hr` must be None (no projection)");
  TORCH_CHECK(g.T > 0 && g.B > 0, op, ": `input` needs at least one step and one sequence");
  const int bytes = static_cast<int>(input.element_size());
  TORCH_CHECK(backward ? lstm::persistent_backward_fits(g.B, g.H, bytes, dt == at::kBFloat16)
                       : lstm::persistent_fits(g.B, g.H, bytes, dt == at::kBFloat16), op,
              ": batch ", g.B, " and hidden size ", g.H, " in ", dt,
              " do not fit the persistent kernel on this device (",
              backward ? "batch up to 16, or float16 / bfloat16 at hidden 128, 256 or 512 up to "
                         "16 rows a cluster on the clusters it holds at once, "
                       : "",
              "shared memory, co-resident blocks); fastlayers.lstm.persistent_fits() says where "
              "it does");
}

Outputs run_forward(const char* op, bool persistent, const Tensor& input_in,
                    const Tensor& h0_in, const Tensor& c0_in, const Tensor& w_ih_in,
                    const Tensor& w_hh_in, const OptTensor& b_ih_in, const OptTensor& b_hh_in,
                    const OptTensor& w_hr_in, const OptTensor& batch_sizes, bool reverse,
                    bool tf32) {
  const Geometry g = check(op, input_in, h0_in, c0_in, w_ih_in, w_hh_in, b_ih_in, b_hh_in,
                           w_hr_in, batch_sizes);
  c10::cuda::CUDAGuard guard(input_in.device());
  if (persistent) check_persistent(op, g, input_in, false);
  const auto input = contig(input_in), h0 = contig(h0_in), c0 = contig(c0_in);
  const auto w_ih = contig(w_ih_in), w_hh = contig(w_hh_in);
  const auto b_ih = contig(b_ih_in), b_hh = contig(b_hh_in), w_hr = contig(w_hr_in);
  const auto opts = input.options();
  const auto acc_opts = opts.dtype(acc_type(input.scalar_type()));
  auto out = at::empty(g.packed ? std::vector<int64_t>{g.N, g.R}
                                : std::vector<int64_t>{g.T, g.B, g.R}, opts);
  auto h_n = at::empty({g.B, g.R}, opts), c_n = at::empty({g.B, g.H}, opts);
  auto reserve = at::empty({g.N, g.reserve_cols()}, acc_opts);
  auto reserve_h = at::empty({g.N, g.reserve_h_cols()}, opts);
  const lstm::Steps s = steps_of(g, reverse);
  const int a_bytes = input.scalar_type() == at::kDouble ? 8 : 4;
  const size_t ws_bytes = lstm::forward_workspace(s, static_cast<int>(input.element_size()),
                                                  a_bytes);
  auto ws = workspace(ws_bytes, input);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cublasHandle_t blas = at::cuda::getCurrentCUDABlasHandle();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "lstm_cuda", [&] {
    using T = typename DeviceType<scalar_t>::type;
    if constexpr (!std::is_same_v<T, double>) {
      if (persistent) {
        lstm::forward_persistent<T>(
            s, cptr<T, scalar_t>(input), cptr<T, scalar_t>(h0), cptr<T, scalar_t>(c0),
            cptr<T, scalar_t>(w_ih), cptr<T, scalar_t>(w_hh), cptr<T, scalar_t>(b_ih),
            cptr<T, scalar_t>(b_hh), mptr<T, scalar_t>(out), mptr<T, scalar_t>(h_n),
            mptr<T, scalar_t>(c_n), reserve.mutable_data_ptr(), mptr<T, scalar_t>(reserve_h),
            ws.mutable_data_ptr(), ws_bytes, stream, blas, tf32);
        return;
      }
    }
    lstm::forward<T>(s, cptr<T, scalar_t>(input), cptr<T, scalar_t>(h0), cptr<T, scalar_t>(c0),
                     cptr<T, scalar_t>(w_ih), cptr<T, scalar_t>(w_hh), cptr<T, scalar_t>(b_ih),
                     cptr<T, scalar_t>(b_hh), cptr<T, scalar_t>(w_hr), mptr<T, scalar_t>(out),
                     mptr<T, scalar_t>(h_n), mptr<T, scalar_t>(c_n), reserve.mutable_data_ptr(),
                     mptr<T, scalar_t>(reserve_h), ws.mutable_data_ptr(), ws_bytes, stream, blas,
                     at::cuda::getChosenWorkspaceSize(), tf32);
  });
  return {out, h_n, c_n, reserve, reserve_h};
}

Outputs forward(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                const Tensor& w_hh, const OptTensor& b_ih, const OptTensor& b_hh,
                const OptTensor& w_hr, const OptTensor& batch_sizes, bool reverse, bool tf32) {
  return run_forward("lstm", false, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, batch_sizes,
                     reverse, tf32);
}

Outputs forward_persistent(const Tensor& input, const Tensor& h0, const Tensor& c0,
                           const Tensor& w_ih, const Tensor& w_hh, const OptTensor& b_ih,
                           const OptTensor& b_hh, const OptTensor& w_hr,
                           const OptTensor& batch_sizes, bool reverse, bool tf32) {
  return run_forward("lstm_persistent", true, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr,
                     batch_sizes, reverse, tf32);
}

StackOutputs forward_stack(const Tensor& input_in, const Tensor& h0_in, const Tensor& c0_in,
                           at::TensorList weights, bool has_biases, bool tf32) {
  const char* op = "lstm_stack";
  const StackArgs a = check_stack(op, input_in, h0_in, c0_in, weights, has_biases);
  TORCH_CHECK(a.L <= lstm::kMaxStack, op, ": `weights` holds ", a.L, " layers; the CUDA kernel "
              "takes at most ", lstm::kMaxStack, " (run the layers with lstm one by one)");
  const Geometry& g = a.g;
  c10::cuda::CUDAGuard guard(input_in.device());
  const auto input = contig(input_in), h0 = contig(h0_in), c0 = contig(c0_in);
  std::vector<Tensor> keep;  // the weights made contiguous, alive for the call
  const auto opts = input.options();
  auto out = at::empty({g.T, g.B, g.H}, opts);
  auto h_n = at::empty({a.L, g.B, g.H}, opts), c_n = at::empty({a.L, g.B, g.H}, opts);
  auto inner = at::empty({a.L - 1, g.T, g.B, g.H}, opts);
  auto reserve = at::empty({a.L, g.N, g.reserve_cols()}, opts.dtype(acc_type(input.scalar_type())));
  auto reserve_h = at::empty({a.L, g.N, g.H}, opts);
  const lstm::Steps s = steps_of(g, false);
  const int a_bytes = input.scalar_type() == at::kDouble ? 8 : 4;
  const size_t ws_bytes =
      lstm::stack_workspace(s, static_cast<int>(a.L), static_cast<int>(input.element_size()),
                            a_bytes);
  auto ws = workspace(ws_bytes, input);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cublasHandle_t blas = at::cuda::getCurrentCUDABlasHandle();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "lstm_stack_cuda", [&] {
    using T = typename DeviceType<scalar_t>::type;
    lstm::StackWeights<T> w{};
    for (int64_t l = 0; l < a.L; ++l) {
      keep.push_back(contig(a.w_ih[l]));
      w.w_ih[l] = cptr<T, scalar_t>(keep.back());
      keep.push_back(contig(a.w_hh[l]));
      w.w_hh[l] = cptr<T, scalar_t>(keep.back());
      if (a.b_ih[l].has_value()) {
        keep.push_back(contig(*a.b_ih[l]));
        w.b_ih[l] = cptr<T, scalar_t>(keep.back());
        keep.push_back(contig(*a.b_hh[l]));
        w.b_hh[l] = cptr<T, scalar_t>(keep.back());
      }
    }
    lstm::forward_stack<T>(s, static_cast<int>(a.L), cptr<T, scalar_t>(input),
                           cptr<T, scalar_t>(h0), cptr<T, scalar_t>(c0), w,
                           mptr<T, scalar_t>(out), mptr<T, scalar_t>(h_n),
                           mptr<T, scalar_t>(c_n), mptr<T, scalar_t>(inner),
                           reserve.mutable_data_ptr(), mptr<T, scalar_t>(reserve_h),
                           ws.mutable_data_ptr(), ws_bytes, stream, blas,
                           at::cuda::getChosenWorkspaceSize(), tf32);
  });
  return {out, h_n, c_n, inner, reserve, reserve_h};
}

Grads run_backward(const char* op, bool persistent, const Tensor& grad_output_in,
                   const OptTensor& grad_h_n_in, const OptTensor& grad_c_n_in,
                   const Tensor& input_in, const Tensor& h0, const Tensor& c0,
                   const Tensor& w_ih_in, const Tensor& w_hh_in, const OptTensor& w_hr_in,
                   const OptTensor& batch_sizes, const Tensor& reserve_in,
                   const Tensor& reserve_h_in, bool reverse, bool tf32, bool need_input,
                   bool need_weights) {
  const Geometry g = check(op, input_in, h0, c0, w_ih_in, w_hh_in, std::nullopt,
                           std::nullopt, w_hr_in, batch_sizes);
  check_backward(g, input_in, grad_output_in, grad_h_n_in, grad_c_n_in, reserve_in,
                 reserve_h_in);
  c10::cuda::CUDAGuard guard(input_in.device());
  if (persistent) check_persistent(op, g, input_in, true);
  const auto dy = contig(grad_output_in), input = contig(input_in), w_ih = contig(w_ih_in),
             w_hh = contig(w_hh_in), reserve = contig(reserve_in),
             reserve_h = contig(reserve_h_in);
  const auto dh_n = contig(grad_h_n_in), dc_n = contig(grad_c_n_in), w_hr = contig(w_hr_in);
  const auto opts = input.options();
  // absent results are distinct empty tensors: the schema's outputs do not alias
  const auto none = [&] { return at::empty({0}, opts); };
  auto dx = need_input ? at::empty_like(input) : none();
  auto dh0 = at::empty({g.B, g.R}, opts), dc0 = at::empty({g.B, g.H}, opts);
  auto dw_ih = need_weights ? at::empty({4 * g.H, g.I}, opts) : none();
  auto dw_hh = need_weights ? at::empty({4 * g.H, g.R}, opts) : none();
  auto db = need_weights ? at::empty({4 * g.H}, opts) : none();
  auto dw_hr = need_weights && g.proj ? at::empty({g.R, g.H}, opts) : none();
  const lstm::Steps s = steps_of(g, reverse);
  const int a_bytes = input.scalar_type() == at::kDouble ? 8 : 4;
  const size_t ws_bytes = lstm::backward_workspace(s, static_cast<int>(input.element_size()),
                                                   a_bytes);
  auto ws = workspace(ws_bytes, input);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cublasHandle_t blas = at::cuda::getCurrentCUDABlasHandle();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "lstm_backward_cuda", [&] {
    using T = typename DeviceType<scalar_t>::type;
    if constexpr (!std::is_same_v<T, double>) {
      if (persistent) {
        lstm::backward_persistent<T>(
            s, cptr<T, scalar_t>(dy), cptr<T, scalar_t>(dh_n), cptr<T, scalar_t>(dc_n),
            cptr<T, scalar_t>(input), cptr<T, scalar_t>(w_ih), cptr<T, scalar_t>(w_hh),
            reserve.const_data_ptr(), cptr<T, scalar_t>(reserve_h),
            need_input ? mptr<T, scalar_t>(dx) : nullptr, mptr<T, scalar_t>(dh0),
            mptr<T, scalar_t>(dc0), need_weights,
            need_weights ? mptr<T, scalar_t>(dw_ih) : nullptr,
            need_weights ? mptr<T, scalar_t>(dw_hh) : nullptr,
            need_weights ? mptr<T, scalar_t>(db) : nullptr, ws.mutable_data_ptr(), ws_bytes,
            stream, blas, tf32);
        return;
      }
    }
    lstm::backward<T>(s, cptr<T, scalar_t>(dy), cptr<T, scalar_t>(dh_n), cptr<T, scalar_t>(dc_n),
                      cptr<T, scalar_t>(input), cptr<T, scalar_t>(w_ih), cptr<T, scalar_t>(w_hh),
                      cptr<T, scalar_t>(w_hr), reserve.const_data_ptr(),
                      cptr<T, scalar_t>(reserve_h), need_input ? mptr<T, scalar_t>(dx) : nullptr,
                      mptr<T, scalar_t>(dh0), mptr<T, scalar_t>(dc0), need_weights,
                      need_weights ? mptr<T, scalar_t>(dw_ih) : nullptr,
                      need_weights ? mptr<T, scalar_t>(dw_hh) : nullptr,
                      need_weights ? mptr<T, scalar_t>(db) : nullptr,
                      need_weights && g.proj ? mptr<T, scalar_t>(dw_hr) : nullptr,
                      ws.mutable_data_ptr(), ws_bytes, stream, blas,
                      at::cuda::getChosenWorkspaceSize(), tf32);
  });
  return {dx, dh0, dc0, dw_ih, dw_hh, db, dw_hr};
}

Grads backward(const Tensor& grad_output, const OptTensor& grad_h_n, const OptTensor& grad_c_n,
               const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
               const Tensor& w_hh, const OptTensor& w_hr, const OptTensor& batch_sizes,
               const Tensor& reserve, const Tensor& reserve_h, bool reverse, bool tf32,
               bool need_input, bool need_weights) {
  return run_backward("lstm_backward", false, grad_output, grad_h_n, grad_c_n, input, h0, c0,
                      w_ih, w_hh, w_hr, batch_sizes, reserve, reserve_h, reverse, tf32,
                      need_input, need_weights);
}

Grads backward_persistent(const Tensor& grad_output, const OptTensor& grad_h_n,
                          const OptTensor& grad_c_n, const Tensor& input, const Tensor& h0,
                          const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                          const OptTensor& w_hr, const OptTensor& batch_sizes,
                          const Tensor& reserve, const Tensor& reserve_h, bool reverse, bool tf32,
                          bool need_input, bool need_weights) {
  return run_backward("lstm_backward_persistent", true, grad_output, grad_h_n, grad_c_n, input,
                      h0, c0, w_ih, w_hh, w_hr, batch_sizes, reserve, reserve_h, reverse, tf32,
                      need_input, need_weights);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastlayers, CUDA, m) {
  m.impl("lstm", &forward);
  m.impl("lstm_persistent", &forward_persistent);
  m.impl("lstm_stack", &forward_stack);
  m.impl("lstm_backward", &backward);
  m.impl("lstm_backward_persistent", &backward_persistent);
}

namespace {
// The storage a dtype name of the persistent queries stands for: its bytes (0 for a name they
// do not take) and whether it is bfloat16.
struct Storage {
  int bytes;
  bool bf16;
};
Storage storage_of(const std::string& dtype) {
  const bool bf16 = dtype == "bfloat16";
  return {dtype == "float32" ? 4 : dtype == "float16" || bf16 ? 2 : 0, bf16};
}
}  // namespace

bool persistent_fits(int64_t batch, int64_t hidden, const std::string& dtype, int64_t device,
                     bool backward) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const Storage st = storage_of(dtype);
  if (st.bytes == 0) return false;
  return backward ? lstm::persistent_backward_fits(batch, hidden, st.bytes, st.bf16)
                  : lstm::persistent_fits(batch, hidden, st.bytes, st.bf16);
}

std::string persistent_kernel(int64_t batch, int64_t hidden, const std::string& dtype,
                              int64_t device, bool backward) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const Storage st = storage_of(dtype);
  const char* k = st.bytes == 0 ? nullptr
                  : backward    ? lstm::persistent_backward_kernel(batch, hidden, st.bytes, st.bf16)
                                : lstm::persistent_forward_kernel(batch, hidden, st.bytes, st.bf16);
  return k != nullptr ? k : "";
}

std::tuple<int, int> persistent_clusters(int64_t batch, int64_t hidden, const std::string& dtype,
                                         int64_t device, bool backward) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const Storage st = storage_of(dtype);  // float32 too: the cluster kernels answer none
  const lstm::ClusterShape c =
      lstm::persistent_cluster_shape(batch, hidden, st.bytes, st.bf16, backward);
  return {c.clusters, c.n_tiles};
}

}  // namespace lstm_host
}  // namespace fastlayers
