// The non-fused Winograd pipeline of each pass (winograd.h): transforms, alpha^2 batched GEMMs,
// inverse transform, over chunks of samples. Instantiated per storage type in winograd_*.cu.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../common/check.h"
#include "../common/gemm.h"
#include "../common/launch.cuh"
#include "../common/step_graph.h"
#include "transforms.cuh"
#include "winograd.h"

namespace fastlayers {
namespace winograd {

// Two transform jobs in one launch (run_two_jobs).
template <typename A, typename B>
void launch_two(const A& first, const B& second, cudaStream_t stream) {
  const unsigned fb = blocks_for(first.threads()), sb = blocks_for(second.threads());
  run_two_jobs<<<fb + sb, kThreads, 0, stream>>>(first, fb, second);
  FL_LAUNCH_CHECK();
}

// One pass with F(Mat::kM, Mat::kR). `given_u`: the forward's filters already transformed
// ([alpha^2, K, C]), or null.
template <typename T, typename Mat>
void run_variant(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out,
                 char* ws, const Buffers& buf, int64_t chunk, cudaStream_t stream,
                 cublasHandle_t blas, bool tf32, const T* given_u) {
  using F = compute_t<T>;
  using G = GemmTypes<T>;
  const Tiling t = tiling(pass, s);
  const int64_t a2 = t.alpha * t.alpha;
  // Given filters have no room in the workspace (buffers()): U must then go unused.
  T* U = given_u != nullptr ? nullptr : reinterpret_cast<T*>(ws + buf.u);
  T* V = reinterpret_cast<T*>(ws + buf.v);
  F* M = reinterpret_cast<F*>(ws + buf.m);
  const T* filter_u = given_u != nullptr ? given_u : U;  // what the products read

  // The input gradient's turned filters are stored [alpha^2, C, K] where its products run on
  // TF32, so that they read U^T untransposed: cuBLAS's TF32 GEMMs take up to twice the time with
  // it transposed (VGG's layers from conv3_1 on). That transform takes longer than the one in w's
  // order, which can cost more than it saves where the GEMMs are small (batch 1-2). Otherwise
  // (float32 without TF32, float64, fp16, bf16) the filters stay in w's order and are read
  // transposed: there the untransposed read gained nothing.
  constexpr bool kFloat = std::is_same<T, float>::value;
  const bool by_c = kFloat && pass == Pass::InputGrad && tf32;
  // The filters' transform (forward, input gradient) rides in the first chunk's data-transform
  // launch, unless they come transformed.
  const auto with_filters = [&](const auto& tiles) {
    if constexpr (kFloat) {  // TurnedFilterJob is instantiated for float only
      if (by_c) {
        launch_two(TurnedFilterJob<T, Mat>{b, U, s.K, s.C}, tiles, stream);
        return;
      }
    }
    launch_two(FilterJob<T, Mat>{b, U, s.K, s.C, pass == Pass::InputGrad}, tiles, stream);
  };

  for (int64_t s0 = 0; s0 < s.S; s0 += chunk) {
    const int64_t n = std::min(chunk, s.S - s0);
    const int64_t P = n * t.tiles();
    // The data operand: x (Forward, WeightGrad) or grad_y (InputGrad).
    const T* data = pass == Pass::WeightGrad ? b : a;
    const TileSource src{n, t.data_ch, t.data_h, t.data_w, t.th, t.tw, t.step, t.oy, t.ox};
    const TileJob<T, UseBT<Mat>> tiles{data + s0 * t.data_ch * t.data_h * t.data_w, V, src};
    if (pass == Pass::WeightGrad) {
      // grad_y tiles r x r at stride r (no offset: grad_y is the result's own grid), with G, in
      // the same launch.
      const TileSource gsrc{n, s.K, s.oh(), s.ow(), t.th, t.tw, t.step, 0, 0};
      const TileJob<T, UseG<Mat>> gtiles{a + s0 * s.K * s.oh() * s.ow(), U, gsrc};
      launch_two(gtiles, tiles, stream);
    } else if (s0 == 0 && given_u == nullptr) {
      with_filters(tiles);
    } else {
      run_job<<<blocks_for(tiles.threads()), kThreads, 0, stream>>>(tiles);
      FL_LAUNCH_CHECK();
    }
    switch (pass) {
      case Pass::Forward: {  // M [K, P] = U [K, C] V [C, P]
        const gemm::Dims d{CUBLAS_OP_N, CUBLAS_OP_N, P, s.K, s.C, P, s.C, P};
        gemm::strided_batched(blas, stream, G::store, G::acc, tf32, d, V, s.C * P, filter_u,
                              s.K * s.C, M, s.K * P, a2);
        break;
      }
      case Pass::InputGrad: {  // M [C, P] = U^T [C, K] V [K, P]; U stored [K, C] or (by_c) [C, K]
        const gemm::Dims d = by_c ? gemm::Dims{CUBLAS_OP_N, CUBLAS_OP_N, P, s.C, s.K, P, s.K, P}
                                  : gemm::Dims{CUBLAS_OP_N, CUBLAS_OP_T, P, s.C, s.K, P, s.C, P};
        gemm::strided_batched(blas, stream, G::store, G::acc, tf32, d, V, s.K * P, U, s.K * s.C,
                              M, s.C * P, a2);
        break;
      }
      case Pass::WeightGrad: {  // M [C, K] += X [C, P] Gy^T [P, K]
        const gemm::Dims d{CUBLAS_OP_T, CUBLAS_OP_N, s.K, s.C, P, P, P, s.K};
        gemm::Scale scale;
        scale.beta = s0 > 0 ? 1.0 : 0.0;
        gemm::strided_batched(blas, stream, G::store, G::acc, tf32, d, U, s.K * P, V, s.C * P, M,
                              s.C * s.K, a2, scale);
        break;
      }
    }
    if (pass != Pass::WeightGrad) {
      const TileTarget dst{n, t.res_ch, t.res_h, t.res_w, t.th, t.tw};
      T* out_chunk = out + s0 * t.res_ch * t.res_h * t.res_w;
      output_transform<T, Mat><<<blocks_for(t.res_ch * P), kThreads, 0, stream>>>(
          M, pass == Pass::Forward ? bias : nullptr, out_chunk, dst);
      FL_LAUNCH_CHECK();
    }
  }
  if (pass == Pass::WeightGrad) {
    // M [C, K] as C "channels" of K one-tile "samples": grad_w [K, C, 3, 3].
    const TileTarget dst{s.K, s.C, kKernel, kKernel, 1, 1};
    output_transform<T, Mat><<<blocks_for(s.C * s.K), kThreads, 0, stream>>>(M, nullptr, out,
                                                                            dst);
    FL_LAUNCH_CHECK();
  }
}

template <typename T>
void run(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out, void* workspace,
         size_t workspace_size, int64_t chunk, cudaStream_t stream, cublasHandle_t blas,
         bool tf32, const T* transformed) {
  if (!tile_ok(pass, s.tile))
    throw std::invalid_argument("fastlayers: Winograd tile " + std::to_string(s.tile) +
                                " is not supported for this pass");
  if (chunk < 1 || chunk > s.S) throw std::invalid_argument("fastlayers: Winograd chunk out of range");
  if (transformed != nullptr && pass != Pass::Forward)
    throw std::invalid_argument("fastlayers: transformed Winograd filters serve the forward");
  const Buffers buf =
      buffers(pass, s, chunk, sizeof(T), sizeof(compute_t<T>), transformed != nullptr);
  if (workspace_size < buf.total) throw std::invalid_argument("fastlayers: Winograd workspace too small");
  char* ws = static_cast<char*>(workspace);
  if (pass == Pass::WeightGrad) {
    if (s.tile == 2)
      run_variant<T, Matrices<3, 2>>(pass, s, a, b, bias, out, ws, buf, chunk, stream, blas, tf32,
                                     nullptr);
    else
      run_variant<T, Matrices<3, 4>>(pass, s, a, b, bias, out, ws, buf, chunk, stream, blas, tf32,
                                     nullptr);
    return;
  }
  switch (s.tile) {
    case 2:
      run_variant<T, Matrices<2, 3>>(pass, s, a, b, bias, out, ws, buf, chunk, stream, blas, tf32,
                                     transformed);
      break;
    case 4:
      run_variant<T, Matrices<4, 3>>(pass, s, a, b, bias, out, ws, buf, chunk, stream, blas, tf32,
                                     transformed);
      break;
    default:
      run_variant<T, Matrices<6, 3>>(pass, s, a, b, bias, out, ws, buf, chunk, stream, blas, tf32,
                                     transformed);
      break;
  }
}

template <typename T>
void run_replayed(Pass pass, const Shape& s, const T* a, const T* b, const T* bias, T* out,
                  void* workspace, size_t workspace_size, int64_t chunk, cudaStream_t stream,
                  size_t blas_workspace, bool tf32, const T* transformed) {
  // Every address the recording bakes is in the key, as are the sizes, types and switches.
  const int64_t fields[] = {static_cast<int64_t>(pass), s.S, s.C, s.K, s.H, s.W, s.ph, s.pw,
                            s.tile, chunk, tf32 ? 1 : 0, static_cast<int64_t>(workspace_size),
                            static_cast<int64_t>(GemmTypes<T>::store)};
  const void* const addresses[] = {a, b, bias, out, workspace, transformed};
  std::string key("winograd/");
  key.append(reinterpret_cast<const char*>(fields), sizeof(fields));
  key.append(reinterpret_cast<const char*>(addresses), sizeof(addresses));
  const step_graph::Run replay = step_graph::prepare(
      key, stream, 0, nullptr, blas_workspace,
      [&](const step_graph::Streams& ss, void*) {
        run<T>(pass, s, a, b, bias, out, workspace, workspace_size, chunk, ss.stream, ss.blas,
               tf32, transformed);
      },
      /*aux=*/false, /*node_priorities=*/false);
  replay.launch(stream);
}

template <typename T>
void transform_filters(const T* w, T* U, int64_t K, int64_t C, int64_t tile, cudaStream_t stream) {
  const auto launch = [&](auto job) {
    run_job<<<blocks_for(job.threads()), kThreads, 0, stream>>>(job);
    FL_LAUNCH_CHECK();
  };
  switch (tile) {
    case 2: launch(FilterJob<T, Matrices<2, 3>>{w, U, K, C, false}); break;
    case 4: launch(FilterJob<T, Matrices<4, 3>>{w, U, K, C, false}); break;
    case 6: launch(FilterJob<T, Matrices<6, 3>>{w, U, K, C, false}); break;
    default:
      throw std::invalid_argument("fastlayers: Winograd tile " + std::to_string(tile) +
                                  " is not a forward tile");
  }
}

}  // namespace winograd
}  // namespace fastlayers
