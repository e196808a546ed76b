// A loop of small launches repeated call after call with the same geometry (the LSTM's step
// loop: a GEMM and a point-wise kernel per step; a Winograd pipeline's pass: transforms and
// cuBLAS GEMMs, keyed by its addresses too) replayed as one CUDA graph. Enqueuing such a loop
// costs 5-13 us of host time a launch, more than the launch's device time at small sizes; a graph
// launch costs one.
//
// The recording may bake in only what stays fixed for its key: shapes, the weights' addresses
// (part of the key) and `state`, device memory the cache owns for the graph's life. Whatever
// changes from call to call (inputs, outputs) the recorded kernels read through `state`, which
// the caller fills on the stream before `launch`. GEMMs in the loop run on the cache's own cuBLAS
// handle with a workspace of the caller's size per stream, in both modes below, so a loop gives
// the same bits however it runs.
//
// Graphs are per (device, stream, key), at most kCapacity of them (least recently used dropped).
// A key's first call runs the loop directly on the caller's stream (launch by launch, with
// `fallback_state`, memory of the caller's); its second records the graph: a key that never
// comes back (packed batches of ever new lengths) costs no recording, and a key whose graph was
// dropped kMaxEvictions times after fewer than kPaidLaunches launches runs directly while
// remembered (recent_keys.h: Admission). When the caller's stream is itself being captured (a
// user's CUDA graph), nothing is cached either: the loop is recorded straight into the caller's
// capture with `fallback_state` (the capture's pool keeps it).
//
// A loop may put work that overlaps it (the LSTM's input GEMM, in chunks the steps wait for) on
// an auxiliary branch: in a recorded graph, a second stream of lower priority than the loop's
// (the loop's launches take the SMs first when both wait); in the direct modes, the loop's own
// stream, so the same work runs in order. Its GEMMs run on a handle of their own, whose choices
// are made for a quarter of the SMs in both modes (the same bits either way).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "recent_keys.h"

namespace fastlayers {
namespace step_graph {

// Where a loop is enqueued: `stream` with GEMMs on `blas` (bound to it), and the auxiliary
// branch `aux` with GEMMs on `aux_blas` (stream and blas themselves for a loop prepared without
// one; the branch's handle on stream in the direct modes).
struct Streams {
  cudaStream_t stream;
  cublasHandle_t blas;
  cudaStream_t aux;
  cublasHandle_t aux_blas;
  cudaEvent_t event;  // for the ordering below (unused when aux is stream)
  // Work enqueued on aux from now on runs after what is enqueued on stream so far.
  void aux_after_main() const;
  // Work enqueued on stream from now on runs after what is enqueued on aux so far (a loop that
  // used aux ends with this, so the branch joins it).
  void main_after_aux() const;
};

// Enqueues the loop on `s`, reading `state`.
using Record = std::function<void(const Streams& s, void* state)>;

constexpr size_t kCapacity = 256;

struct Entry;

class Run {
 public:
  // The loop's fixed memory: fill it on the launch stream before launch().
  void* state() const { return state_; }
  // Enqueues the loop on `stream` (the stream given to prepare()).
  void launch(cudaStream_t stream) const;

 private:
  friend Run prepare(const std::string&, cudaStream_t, size_t, void*, size_t, Record, bool, bool);
  std::shared_ptr<Entry> entry_;  // null: run the recording directly
  void* state_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool aux_ = false;
  Record record_;
};

// The loop for `key` on `stream` and the current device, recorded into a new graph on first use;
// `state_bytes` of fixed memory; `workspace_bytes` of cuBLAS workspace for the loop's GEMMs (and
// as much again for the auxiliary branch's, which only a loop prepared with `aux` gets).
// `node_priorities`: the recorded nodes keep the priorities of the streams they were recorded on
// (the loop's the greatest); false: the graph runs at the priority of the stream launched into.
Run prepare(const std::string& key, cudaStream_t stream, size_t state_bytes,
            void* fallback_state, size_t workspace_bytes, Record record, bool aux = false,
            bool node_priorities = true);

// Graphs held now (all devices), for tests.
size_t cached();

// Launches of cached graphs so far (all devices; a recording's first launch included), and
// recordings so far, for tests.
size_t replays();
size_t recordings();

}  // namespace step_graph
}  // namespace fastlayers
