// The LSTM's sequence drivers (lstm.h): GEMMs on cuBLAS and the point-wise kernels of cell.cuh,
// instantiated per storage type in lstm_*.cu.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../common/check.h"
#include "../common/gemm.h"
#include "../common/launch.cuh"
#include "../common/step_graph.h"
#include "cell.cuh"
#include "fused_step.cuh"
#include "lstm.h"

namespace fastlayers {
namespace lstm {

// Carves a workspace into 256-byte aligned pieces.
class Carve {
 public:
  explicit Carve(void* base) : base_(static_cast<char*>(base)) {}
  template <typename U> U* take(int64_t count) {
    U* p = reinterpret_cast<U*>(base_ + used_);
    used_ += (static_cast<size_t>(count) * sizeof(U) + 255) & ~size_t{255};
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// C [m, n] (column-major, ld ldc) = op_a(A) op_b(B), one GEMM on a pinned handle: operands of
// type `ab`, result of type `c`.
inline void gemm1(const gemm::Pinned& blas, gemm::Type ab, gemm::Type c, bool tf32,
                  cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k,
                  const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc) {
  blas.strided_batched(ab, c, tf32, gemm::Dims{op_a, op_b, m, n, k, lda, ldb, ldc}, A, 0, B, 0,
                       C, 0, 1);
}

// TF32 (`tf32`, fp32 data) goes to the input GEMM and the input gradient, the GEMMs over every
// step whose operands are the layer's input. The GEMMs inside the recurrence (w_hh, w_hr, both
// ways) stay in full fp32: their error compounds over the steps, and cuDNN's RNN keeps them in
// fp32 on small layers. So do the weight gradients: over few rows (T B = 9 at H 512) TF32 there
// read 2.8x cuDNN's error on w_hh's gradient on an H100. Either would be less precise than the
// nn.LSTM being replaced.

// The step loops run as CUDA graphs (step_graph.h): two launches a step cost more host time
// than device time below batch 64 or so. A loop's key is everything its recording bakes in: the
// storage type, the step geometry (packed batch sizes included) and the recurrent weights'
// addresses; the per-call pointers go through the Rows in its state.
template <typename T>
std::string loop_key(const char* tag, const Steps& s, const T* w_hh, const T* w_hr) {
  std::string key(tag);
  const auto put = [&key](const void* p, size_t n) { key.append(static_cast<const char*>(p), n); };
  const int64_t geometry[] = {static_cast<int64_t>(sizeof(T)), GemmTypes<T>::store == gemm::Type::BF16,
                              s.T, s.B, s.H, s.R, s.proj, s.reverse};
  put(geometry, sizeof(geometry));
  put(s.bs, sizeof(int64_t) * static_cast<size_t>(s.T));
  const void* weights[] = {w_hh, w_hr};
  put(weights, sizeof(weights));
  return key;
}

// The input GEMM in chunks of steps on the loop's auxiliary branch (step_graph.h), each chunk's
// steps waiting for its products only: the recurrence leaves most SMs idle (a step's GEMM is
// [B, 4H] wide), where the whole input GEMM ran alone before it. Chunk k covers the steps
// first[k] .. first[k+1]-1 in the order the loop runs them, which are the input rows row0[k] ..
// row0[k] + rows[k] - 1 (contiguous either way). Chunks start at one step, so the loop starts
// early, and double up to about kChunkRows rows. Used when there are two chunks or more and
// every chunk's operand is 16-byte aligned (x, w_ih and xp, and I * sizeof(T) a multiple of 16,
// as tensor-core GEMMs want it); else count = 0 and the GEMM runs whole before the loop.
constexpr int kMaxChunks = kMaxInputChunks;
constexpr int kDhParts = kBackwardDhParts;
constexpr int64_t kChunkRows = 512;

struct InputChunks {
  int count = 0;
  int64_t first[kMaxChunks + 1];
  int64_t row0[kMaxChunks];
  int64_t rows[kMaxChunks];
};

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// x, w_ih, xp: the call's operands, whose addresses the pointer-batched GEMMs cannot check
// (cuBLAS picks their kernels without reading the pointer arrays).
inline InputChunks input_chunks(const Steps& s, size_t t_bytes, const void* x, const void* w_ih,
                                const void* xp) {
  InputChunks in;
  if (s.T < 2 || s.I <= 0 || s.N <= 0 || (s.I * static_cast<int64_t>(t_bytes)) % 16 != 0 ||
      !aligned16(x) || !aligned16(w_ih) || !aligned16(xp))
    return in;
  // Chunk sizes in steps: 1, 2, 4, ... up to `per`, then `per` (each chunk's GEMM runs while the
  // chunk before it recurs, so it may grow as the lead grows); `per` the least of about
  // kChunkRows rows that keeps to kMaxChunks chunks.
  const auto size = [](int64_t k, int64_t per) { return k < 62 ? std::min(per, int64_t{1} << k) : per; };
  const auto chunks_for = [&](int64_t per) {
    int64_t count = 0;
    for (int64_t step = 0; step < s.T; step += size(count++, per)) {}
    return count;
  };
  int64_t per = std::max<int64_t>(1, (kChunkRows * s.T + s.N - 1) / s.N);
  while (chunks_for(per) > kMaxChunks) per *= 2;
  int count = 0;
  for (int64_t step = 0; step < s.T; ++count) {
    const int64_t end = std::min(s.T, step + size(count, per));
    // rows of steps [step, end) in run order: t from lo to hi
    const int64_t lo = s.reverse ? s.T - end : step, hi = s.reverse ? s.T - 1 - step : end - 1;
    in.first[count] = step;
    in.row0[count] = s.off[lo];
    in.rows[count] = s.off[hi] + s.bs[hi] - s.off[lo];
    step = end;
  }
  in.first[count] = s.T;
  in.count = count >= 2 ? count : 0;
  return in;
}

// The chunks' GEMM operands, per call (pointer arrays in the state): a[k] = w_ih, b[k] = x's
// rows of chunk k, c[k] = xp's.
struct ChunkRows {
  int count;
  int64_t row0[kMaxChunks];
};

template <typename T>
__global__ void chunk_operands(const ForwardRows<T>* __restrict__ rows, const ChunkRows chunks,
                               int64_t I, int64_t H, const void** a, const void** b, void** c) {
  const int k = static_cast<int>(threadIdx.x);
  if (k >= chunks.count) return;
  const ForwardRows<T> p = *rows;
  a[k] = p.w_ih;
  b[k] = p.x + chunks.row0[k] * I;
  c[k] = p.xp + chunks.row0[k] * 4 * H;
}

// The forward loop's state (forward_state_bytes): rows, the chunks' pointer arrays a, b, c
// [kMaxChunks], g [B, 4H] A (the recurrent products), c [B, H] A, h [B, R] T, h2 [B, R] T (the
// fused step's other h buffer), htil [B, H] T (projection).
template <typename T>
struct ForwardState {
  ForwardRows<T>* rows;
  const void** a;
  const void** b;
  void** ptr_c;
  compute_t<T>* g;
  compute_t<T>* c;
  T* h;
  T* h2;
  T* htil;
  ForwardState(void* base, const Steps& s) {
    static_assert(sizeof(ForwardRows<T>) <= kRowsBytes, "rows exceed their piece");
    Carve ws(base);
    rows = ws.take<ForwardRows<T>>(1);
    a = ws.take<const void*>(kMaxChunks);
    b = ws.take<const void*>(kMaxChunks);
    ptr_c = ws.take<void*>(kMaxChunks);
    g = ws.take<compute_t<T>>(s.B * 4 * s.H);
    c = ws.take<compute_t<T>>(s.B * s.H);
    h = ws.take<T>(s.B * s.R);
    h2 = ws.take<T>(s.B * s.R);
    htil = s.proj ? ws.take<T>(s.B * s.H) : nullptr;
  }
};

// The forward step as one kernel (fused_step.cuh) where it serves: float16 and bfloat16 without a
// projection on sm_90 and later, H = 128, 256, 512 or 1024, w_hh 16-byte aligned, the kernel's
// shared memory within the device's, and a grid of at most one block
// per SM (NB = 16 batch rows a block, else 32): more blocks than SMs ran slower than the GEMM
// and cell_forward (B 100, H 512: 9.6 against 6.4 us a step on an H100). nb == 0: not served.
template <typename T>
struct FusedStep {
  int nb = 0, ks = 0;

  FusedStep(const Steps& s, const T* w_hh) {
    if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) {
      if (s.proj || s.B <= 0 || !aligned16(w_hh)) return;
      if (s.H != 128 && s.H != 256 && s.H != 512 && s.H != 1024) return;
      int device = 0;
      FL_CUDA_CHECK(cudaGetDevice(&device));
      // The choice of each (device, H, B), made once: the device's attributes and the kernel's
      // shared-memory attribute are not queried or set again on every call.
      static std::mutex mutex;
      static std::map<std::tuple<int, int64_t, int64_t>, std::pair<int, int>> chosen;
      std::lock_guard<std::mutex> lock(mutex);
      const auto key = std::make_tuple(device, s.H, s.B);
      auto it = chosen.find(key);
      if (it == chosen.end()) it = chosen.emplace(key, choose(device, s.H, s.B)).first;
      nb = it->second.first;
      ks = it->second.second;
    }
  }

  // Step over n active rows at offset o: h_{t-1} from hp, h_t to hn. `dependent`: launched as a
  // programmatic dependent of the kernel before it on the stream, which must be the step before
  // (the kernel reads its constant operands before waiting for that one).
  void launch(bool dependent, cudaStream_t stream, int64_t n, int64_t B, int64_t o,
              const ForwardRows<T>* rows, const T* w_hh, const T* hp, T* hn,
              compute_t<T>* c) const {
    if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) {
      if (nb > 0) {
        geometry(nb, ks, [&](auto nb_c, auto ks_c) {
          go<nb_c(), ks_c()>(dependent, stream, n, B, o, rows, w_hh, hp, hn, c);
        });
        return;
      }
    }
    throw std::logic_error("fastlayers: LSTM fused step launched where it does not serve");
  }

 private:
  // (NB, KS) for H and B on `device`, or (0, 0); sets the chosen kernel's shared-memory limit.
  static std::pair<int, int> choose(int device, int64_t H, int64_t B) {
    int sms = 0, major = 0, smem = 0;
    FL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    FL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    FL_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (major < 9) return {0, 0};  // the kernel's programmatic launch is sm_90's
    const int ks = static_cast<int>(H / 128);
    for (int rows : {16, 32}) {
      if ((H / kFsUnits) * ((B + rows - 1) / rows) > sms) continue;
      int bytes = 0;
      geometry(rows, ks, [&](auto nb_c, auto ks_c) { bytes = FsGeometry<nb_c(), ks_c()>::SMEM; });
      if (bytes > smem) continue;
      // the kernel's shared memory beyond the default 48 KB
      geometry(rows, ks, [&](auto nb_c, auto ks_c) {
        FL_CUDA_CHECK(cudaFuncSetAttribute(fused_forward_step<T, nb_c(), ks_c()>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           FsGeometry<nb_c(), ks_c()>::SMEM));
      });
      return {rows, ks};
    }
    return {0, 0};
  }

  // f(NB, KS) with the geometry as std::integral_constant arguments: the one table of the
  // instantiated geometries (NB 16 or 32, KS 1, 2, 4 or 8).
  template <typename F>
  static void geometry(int rows, int ks, F&& f) {
    using std::integral_constant;
    const auto with_ks = [&](auto nb_c) {
      switch (ks) {
        case 1: return f(nb_c, integral_constant<int, 1>{});
        case 2: return f(nb_c, integral_constant<int, 2>{});
        case 4: return f(nb_c, integral_constant<int, 4>{});
        case 8: return f(nb_c, integral_constant<int, 8>{});
        default: throw std::logic_error("fastlayers: LSTM fused step geometry");
      }
    };
    if (rows == 16) return with_ks(integral_constant<int, 16>{});
    if (rows == 32) return with_ks(integral_constant<int, 32>{});
    throw std::logic_error("fastlayers: LSTM fused step geometry");
  }

  template <int NB, int KS>
  static void go(bool dependent, cudaStream_t stream, int64_t n, int64_t B, int64_t o,
                 const ForwardRows<T>* rows, const T* w_hh, const T* hp, T* hn, float* c) {
    using G = FsGeometry<NB, KS>;
    const auto kernel = fused_forward_step<T, NB, KS>;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(G::H / kFsUnits),
                       static_cast<unsigned>((B + NB - 1) / NB));
    cfg.blockDim = dim3(kFsThreads);
    cfg.dynamicSmemBytes = G::SMEM;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = dependent ? 1 : 0;
    FL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<int>(n), static_cast<int>(B), o,
                                     rows, w_hh, hp, hn, c));
  }
};

// The forward's recurrence over a state (recorded once per key): per step g = h w_hh^T, then the
// cell; with a projection, h = htil w_hr^T and the step's output rows. With input chunks, chunk
// k's GEMM runs on the auxiliary branch and its first step waits for it. Where `fused` serves,
// each step is its one kernel instead, h alternating between h (read at even steps) and h2; the
// chunks' GEMMs run in line before their first step, and a step other than the first and a
// chunk's first is a programmatic dependent of the step before.
template <typename T>
void forward_steps(const Steps& s, const InputChunks& in, bool tf32, const T* w_hh,
                   const T* w_hr, const FusedStep<T>& fused, void* state,
                   const step_graph::Streams& ss) {
  using G = GemmTypes<T>;
  const int64_t H = s.H, R = s.R, rh_cols = R + (s.proj ? H : 0);
  const ForwardState<T> st(state, s);
  const gemm::Pinned pin(ss.blas, ss.stream);
  // The fused steps take the chunks' GEMMs in line, on the loop's stream and handle: on the
  // branch the GEMMs' blocks held SMs the step's grid waits for (512/64/100 fp16 forward, H100:
  // 0.60 ms there, 0.55 in line), and whole before the loop the GEMM's products left L2 before
  // their steps came (256/32/1000 fp16: 2.9 ms whole, 2.4 in chunks).
  const bool inline_chunks = fused.nb > 0;
  const cudaStream_t chunk_stream = inline_chunks ? ss.stream : ss.aux;
  const gemm::Pinned aux_pin(inline_chunks ? ss.blas : ss.aux_blas, chunk_stream);
  if (in.count > 0) {
    ChunkRows chunks{in.count, {}};
    std::copy(in.row0, in.row0 + in.count, chunks.row0);
    if (!inline_chunks) ss.aux_after_main();
    chunk_operands<T><<<1, kMaxChunks, 0, chunk_stream>>>(st.rows, chunks, s.I, H, st.a, st.b,
                                                          st.ptr_c);
    FL_LAUNCH_CHECK();
  }
  int chunk = 0;
  for (int64_t step = 0; step < s.T; ++step) {
    bool waited = step == 0;
    if (chunk < in.count && step == in.first[chunk]) {  // xp's rows of the chunk's steps
      waited = true;
      if (in.rows[chunk] > 0)
        aux_pin.pointer_batched(
            G::store, G::acc, tf32,
            gemm::Dims{CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, in.rows[chunk], s.I, s.I, s.I, 4 * H},
            st.a + chunk, st.b + chunk, st.ptr_c + chunk, 1);
      if (!inline_chunks) ss.main_after_aux();
      ++chunk;
    }
    const int64_t t = s.reverse ? s.T - 1 - step : step, n = s.bs[t], o = s.off[t];
    if (fused.nb > 0) {
      const bool odd = step % 2 != 0;
      fused.launch(!waited, ss.stream, n, s.B, o, st.rows, w_hh, odd ? st.h2 : st.h,
                   odd ? st.h : st.h2, st.c);
      continue;
    }
    if (R > 0)  // g [n, 4H] = h [n, R] w_hh^T
      gemm1(pin, G::store, G::acc, false, CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, n, R, w_hh, R, st.h, R,
            st.g, 4 * H);
    cell_forward<T><<<blocks_for(n * H), kThreads, 0, ss.stream>>>(
        n, H, R, rh_cols, o, st.rows, R > 0 ? st.g : nullptr, st.c, st.h, st.htil);
    FL_LAUNCH_CHECK();
    if (s.proj) {  // h [n, R] = htil [n, H] w_hr^T, then the step's output rows
      gemm1(pin, G::store, G::store, false, CUBLAS_OP_T, CUBLAS_OP_N, R, n, H, w_hr, H, st.htil,
            H, st.h, R);
      store_out<T><<<blocks_for(n * R), kThreads, 0, ss.stream>>>(n * R, o, R, st.rows, st.h);
      FL_LAUNCH_CHECK();
    }
  }
}

// Forward workspace: xp [N, 4H] A, then a forward state (used when the caller's stream is being
// captured; otherwise the loop's graph owns one).
template <typename T>
void forward(const Steps& s, const T* x, const T* h0, const T* c0, const T* w_ih,
                  const T* w_hh, const T* b_ih, const T* b_hh, const T* w_hr, T* out, T* h_n,
                  T* c_n, void* reserve_v, T* reserve_h, void* workspace, size_t workspace_size,
                  cudaStream_t stream, cublasHandle_t blas, size_t blas_workspace, bool tf32) {
  using A = compute_t<T>;
  using G = GemmTypes<T>;
  if (workspace_size < forward_workspace(s, sizeof(T), sizeof(A)))
    throw std::invalid_argument("fastlayers: LSTM forward workspace too small");
  const int64_t H = s.H, R = s.R;
  Carve ws(workspace);
  A* xp = ws.take<A>(s.N * 4 * H);
  const size_t state_bytes = forward_state_bytes(s, sizeof(T), sizeof(A));
  void* fallback = ws.take<char>(static_cast<int64_t>(state_bytes));

  // The input GEMM of every step, xp [N, 4H] = x [N, I] w_ih^T: here whole, or in the loop in
  // chunks.
  const InputChunks in = s.B > 0 ? input_chunks(s, sizeof(T), x, w_ih, xp) : InputChunks{};
  if (s.N > 0 && in.count == 0) {
    if (s.I > 0) {
      const gemm::Pinned pin(blas, stream);
      gemm1(pin, G::store, G::acc, tf32, CUBLAS_OP_T, CUBLAS_OP_N, 4 * H, s.N, s.I, w_ih,
            s.I, x, s.I, xp, 4 * H);
    } else {
      FL_CUDA_CHECK(cudaMemsetAsync(xp, 0, sizeof(A) * s.N * 4 * H, stream));
    }
  }
  if (s.B == 0) return;
  const bool loop = s.T > 0;
  const FusedStep<T> fused(s, w_hh);
  step_graph::Run run;
  if (loop) {
    std::string key = loop_key("lstm-forward", s, w_hh, w_hr);
    const int64_t chunked[] = {in.count, in.count > 0 ? s.I : 0, in.count > 0 && tf32};
    key.append(reinterpret_cast<const char*>(chunked), sizeof(chunked));
    run = step_graph::prepare(key, stream, state_bytes, fallback, blas_workspace,
                              [&](const step_graph::Streams& ss, void* state) {
                                forward_steps<T>(s, in, tf32, w_hh, w_hr, fused, state, ss);
                              },
                              in.count > 0 && fused.nb == 0);
  }
  const ForwardState<T> st(loop ? run.state() : fallback, s);
  const ForwardRows<T> rows{x, w_ih, xp, b_ih, b_hh, out, static_cast<A*>(reserve_v), reserve_h};
  loop_edge<<<blocks_for(s.B * (R + H)), kThreads, 0, stream>>>(rows, st.rows, s.B * R, h0, st.h,
                                                                s.B * H, c0, st.c);
  FL_LAUNCH_CHECK();
  if (loop) run.launch(stream);
  const T* h_last = fused.nb > 0 && s.T % 2 != 0 ? st.h2 : st.h;  // the fused steps alternate
  loop_edge<<<blocks_for(s.B * (R + H)), kThreads, 0, stream>>>(
      rows, static_cast<ForwardRows<T>*>(nullptr), s.B * R, h_last, h_n, s.B * H, st.c, c_n);
  FL_LAUNCH_CHECK();
}

// The backward after its recurrence, from the gates' gradients dgates [N, 4H] of every row: the
// input gradient (if dx) and, with `weights`, each weight gradient as one GEMM over every row
// (ones [N]: scratch for the bias gradient; dhn [N, R]: the gradient on h_t with a projection).
template <typename T>
void backward_gemms(const Steps& s, const gemm::Pinned& pin, const T* dgates, T* ones,
                    const T* dhn, const T* x, const T* w_ih, const T* reserve_h, T* dx,
                    bool weights, T* dw_ih, T* dw_hh, T* db, T* dw_hr, cudaStream_t stream,
                    bool tf32) {
  using G = GemmTypes<T>;
  const int64_t H = s.H, R = s.R, rh_cols = R + (s.proj ? H : 0);
  const bool rows = s.N > 0;
  if (dx != nullptr && s.I > 0) {  // dx [N, I] = dgates [N, 4H] w_ih
    if (rows)
      gemm1(pin, G::store, G::store, tf32, CUBLAS_OP_N, CUBLAS_OP_N, s.I, s.N, 4 * H,
            w_ih, s.I, dgates, 4 * H, dx, s.I);
  }
  if (!weights) return;
  if (!rows) {  // no step ran: the weight gradients are zero
    FL_CUDA_CHECK(cudaMemsetAsync(dw_ih, 0, sizeof(T) * 4 * H * s.I, stream));
    FL_CUDA_CHECK(cudaMemsetAsync(dw_hh, 0, sizeof(T) * 4 * H * R, stream));
    FL_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(T) * 4 * H, stream));
    if (s.proj) FL_CUDA_CHECK(cudaMemsetAsync(dw_hr, 0, sizeof(T) * R * H, stream));
    return;
  }
  // dw_ih [4H, I] = dgates^T x;  dw_hh [4H, R] = dgates^T h_{t-1};  db [4H] = dgates^T 1 (fp32:
  // see above)
  if (s.I > 0)
    gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_T, s.I, 4 * H, s.N, x,
          s.I, dgates, 4 * H, dw_ih, s.I);
  if (R > 0)
    gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_T, R, 4 * H, s.N,
          reserve_h, rh_cols, dgates, 4 * H, dw_hh, R);
  fill_ones<T><<<blocks_for(s.N), kThreads, 0, stream>>>(s.N, ones);
  FL_LAUNCH_CHECK();
  gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_N, 4 * H, 1, s.N, dgates,
        4 * H, ones, s.N, db, 4 * H);
  if (s.proj)  // dw_hr [R, H] = dhn^T (o tanh(c))
    gemm1(pin, G::store, G::store, false, CUBLAS_OP_N, CUBLAS_OP_T, H, R, s.N,
          reserve_h + R, rh_cols, dhn, R, dw_hr, H);
}

// The backward loop's state (backward_state_bytes): rows, gd [B, 4H] T (the step's gate
// gradients, the recurrent GEMM's operand), dh [kDhParts, B, R] A (the recurrent GEMM's pieces),
// dc [B, H] A; with a projection gdh [B, R] T and dhtil [B, H] A.
template <typename T>
struct BackwardState {
  BackwardRows<T>* rows;
  T* gd;
  compute_t<T>* dh;
  compute_t<T>* dc;
  T* gdh;
  compute_t<T>* dhtil;
  BackwardState(void* base, const Steps& s) {
    static_assert(sizeof(BackwardRows<T>) <= kRowsBytes, "rows exceed their piece");
    Carve ws(base);
    rows = ws.take<BackwardRows<T>>(1);
    gd = ws.take<T>(s.B * 4 * s.H);
    dh = ws.take<compute_t<T>>(kDhParts * s.B * s.R);
    dc = ws.take<compute_t<T>>(s.B * s.H);
    gdh = s.proj ? ws.take<T>(s.B * s.R) : nullptr;
    dhtil = s.proj ? ws.take<compute_t<T>>(s.B * s.H) : nullptr;
  }
};

// The backward's recurrence over a state, from the last step to the first: with a projection
// dhn = dy + dh and dhtil = dhn w_hr; the cell's gradients; dh = gd w_hh. In float16 and
// bfloat16 without a projection that GEMM runs as kDhParts GEMMs, one a gate (depth H each, into
// dh's pieces, which the next step's cell sums): whole, its depth of 4H ran on few blocks (fp16
// 64/512: 4.9 us a step on an H100, split 3.0; 1024: 6.8 and 3.9). Float32 stays whole: split,
// its forward+backward ran 5% slower at 512/64/100 and 1024/64/100.
template <typename T>
void backward_steps(const Steps& s, const T* w_hh, const T* w_hr, void* state,
                    cudaStream_t stream, cublasHandle_t blas) {
  using G = GemmTypes<T>;
  const int64_t H = s.H, R = s.R;
  const BackwardState<T> st(state, s);
  const gemm::Pinned pin(blas, stream);
  const int parts = s.proj || sizeof(T) > 2 ? 1 : kDhParts;
  int64_t n_prev = 0, n_max = 0;  // rows the last GEMM wrote; that any GEMM wrote
  for (int64_t step = s.T - 1; step >= 0; --step) {
    const int64_t t = s.reverse ? s.T - 1 - step : step, n = s.bs[t], o = s.off[t];
    if (s.proj) {
      add_rows<T><<<blocks_for(n * R), kThreads, 0, stream>>>(n * R, o, R, st.rows, st.dh,
                                                             st.gdh);
      FL_LAUNCH_CHECK();
      gemm1(pin, G::store, G::acc, false, CUBLAS_OP_N, CUBLAS_OP_N, H, n, R, w_hr, H, st.gdh, R,
            st.dhtil, H);
    }
    cell_backward<T><<<blocks_for(n * H), kThreads, 0, stream>>>(
        n, H, o, st.rows, st.dh, st.dhtil, st.dc, st.gd, parts, n_prev, s.B * R);
    FL_LAUNCH_CHECK();
    if (R > 0 && parts == 1) {  // dh [n, R] = gd [n, 4H] w_hh
      gemm1(pin, G::store, G::acc, false, CUBLAS_OP_N, CUBLAS_OP_N, R, n, 4 * H, w_hh, R, st.gd,
            4 * H, st.dh, R);
    } else if (R > 0) {  // piece q = gd [n, gate q] w_hh [gate q rows]
      pin.strided_batched(G::store, G::acc, false,
                          gemm::Dims{CUBLAS_OP_N, CUBLAS_OP_N, R, n, H, R, 4 * H, R}, w_hh,
                          H * R, st.gd, H, st.dh, s.B * R, parts);
    }
    n_prev = R > 0 ? n : 0;
    n_max = std::max(n_max, n_prev);
  }
  // dh0: each row's pieces from the last GEMM that wrote it (the reverse direction's batch
  // shrinks step by step, so rows past the last step's kept earlier ones)
  if (parts > 1 && n_max > 0) {
    fold_parts<<<blocks_for(n_max * R), kThreads, 0, stream>>>(n_max * R, st.dh, parts,
                                                               s.B * R);
    FL_LAUNCH_CHECK();
  }
}

// Backward workspace: dgates [N, 4H] T, ones [N] T, with a projection dhn [N, R] T (the gradient
// on h_t of every row, for w_hr's gradient); then a backward state (as forward's).
template <typename T>
void backward(const Steps& s, const T* dy, const T* dh_n, const T* dc_n, const T* x,
                   const T* w_ih, const T* w_hh, const T* w_hr, const void* reserve_v,
                   const T* reserve_h, T* dx, T* dh0, T* dc0, bool weights, T* dw_ih, T* dw_hh,
                   T* db, T* dw_hr, void* workspace, size_t workspace_size, cudaStream_t stream,
                   cublasHandle_t blas, size_t blas_workspace, bool tf32) {
  using A = compute_t<T>;
  if (workspace_size < backward_workspace(s, sizeof(T), sizeof(A)))
    throw std::invalid_argument("fastlayers: LSTM backward workspace too small");
  const int64_t H = s.H, R = s.R;
  Carve ws(workspace);
  T* dgates = ws.take<T>(s.N * 4 * H);
  T* ones = ws.take<T>(s.N);
  T* dhn = s.proj ? ws.take<T>(s.N * R) : nullptr;
  const size_t state_bytes = backward_state_bytes(s, sizeof(T), sizeof(A));
  void* fallback = ws.take<char>(static_cast<int64_t>(state_bytes));

  if (s.B > 0) {
    const bool loop = s.T > 0;
    step_graph::Run run;
    if (loop)
      run = step_graph::prepare(
          loop_key("lstm-backward", s, w_hh, w_hr), stream, state_bytes, fallback,
          blas_workspace, [&](const step_graph::Streams& ss, void* state) {
            backward_steps<T>(s, w_hh, w_hr, state, ss.stream, ss.blas);
          });
    const BackwardState<T> st(loop ? run.state() : fallback, s);
    const BackwardRows<T> rows{dy, static_cast<const A*>(reserve_v), dgates, dhn};
    loop_edge<<<blocks_for(s.B * (R + H)), kThreads, 0, stream>>>(rows, st.rows, s.B * R, dh_n,
                                                                  st.dh, s.B * H, dc_n, st.dc);
    FL_LAUNCH_CHECK();
    if (loop) run.launch(stream);
    loop_edge<<<blocks_for(s.B * (R + H)), kThreads, 0, stream>>>(
        rows, static_cast<BackwardRows<T>*>(nullptr), s.B * R, st.dh, dh0, s.B * H, st.dc, dc0);
    FL_LAUNCH_CHECK();
  }
  const gemm::Pinned pin(blas, stream);
  backward_gemms(s, pin, dgates, ones, dhn, x, w_ih, reserve_h, dx, weights, dw_ih, dw_hh, db,
                 dw_hr, stream, tf32);
}

// Explicit instantiations of forward and backward for storage type T (lstm_*.cu).
#define FL_LSTM_INSTANTIATE(T)                                                                   \
  template void forward<T>(const Steps&, const T*, const T*, const T*, const T*, const T*,       \
                           const T*, const T*, const T*, T*, T*, T*, void*, T*, void*, size_t,   \
                           cudaStream_t, cublasHandle_t, size_t, bool);                          \
  template void backward<T>(const Steps&, const T*, const T*, const T*, const T*, const T*,      \
                            const T*, const T*, const void*, const T*, T*, T*, T*, bool, T*, T*, \
                            T*, T*, void*, size_t, cudaStream_t, cublasHandle_t, size_t, bool);

}  // namespace lstm
}  // namespace fastlayers
