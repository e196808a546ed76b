// step_graph.h: the cache of recorded loops.
#include "step_graph.h"

#include <algorithm>
#include <atomic>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "check.h"

namespace fastlayers {
namespace step_graph {

struct Entry {
  int device = 0;
  cudaGraphExec_t exec = nullptr;
  void* state = nullptr;
  std::atomic<size_t> launches{0};  // the recording's own included
  ~Entry() {
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) return;
    cudaSetDevice(device);
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (state != nullptr) cudaFree(state);
    cudaSetDevice(current);
    (void)cudaGetLastError();  // a failure here (process exit) is not the next call's
  }
};

namespace {

// Per device: the loops' cuBLAS handles (main and auxiliary branch), the streams graphs are
// recorded on (the main one of the greatest priority, the auxiliary one of the least), an event
// for forks and joins, and a cuBLAS workspace per stream the loops run on and branch (graphs of
// two streams may run at once; a stream's are ordered).
struct Device {
  cublasHandle_t blas = nullptr;
  cublasHandle_t aux_blas = nullptr;
  cudaStream_t side = nullptr;
  cudaStream_t aux = nullptr;
  cudaEvent_t event = nullptr;
  // (stream, bytes, auxiliary branch) -> workspace; never freed: graphs bake them
  std::map<std::tuple<cudaStream_t, size_t, bool>, void*> workspaces;
};

struct Cache {
  std::mutex mutex;
  std::map<int, Device> devices;
  std::list<std::pair<std::string, std::shared_ptr<Entry>>> lru;  // most recent first
  std::unordered_map<std::string, decltype(lru)::iterator> index;
  Admission admission{kSeen, kMaxEvictions};
};

// Never destroyed: entries outliving the CUDA runtime at exit would free into a dead context.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

Device& device_of(Cache& c, int device) {
  Device& d = c.devices[device];
  if (d.blas == nullptr) {  // built whole before it is kept: a failure leaves no half of it
    Device made;
    int least = 0, greatest = 0;
    FL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    FL_CUBLAS_CHECK(cublasCreate(&made.aux_blas));
    FL_CUDA_CHECK(cudaStreamCreateWithPriority(&made.side, cudaStreamNonBlocking, greatest));
    FL_CUDA_CHECK(cudaStreamCreateWithPriority(&made.aux, cudaStreamNonBlocking, least));
    FL_CUDA_CHECK(cudaEventCreateWithFlags(&made.event, cudaEventDisableTiming));
    // The auxiliary branch's GEMMs are chosen for a quarter of the SMs, so they leave the rest to
    // the loop they overlap: chosen for the whole GPU, their blocks took the SMs the loop's step
    // waited for.
    int sms = 0;
    FL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    FL_CUBLAS_CHECK(cublasSetSmCountTarget(made.aux_blas, std::max(1, sms / 4)));
    FL_CUBLAS_CHECK(cublasCreate(&made.blas));  // last: the mark of a device set up
    d = made;
  }
  return d;
}

// `blas` bound to `stream` with the workspace of (ws_stream, bytes, aux) (cublasSetStream resets
// the workspace, so it is set after).
cublasHandle_t bind(Device& d, cublasHandle_t blas, cudaStream_t stream, cudaStream_t ws_stream,
                    size_t bytes, bool aux) {
  void*& ws = d.workspaces[{ws_stream, bytes, aux}];
  if (ws == nullptr && bytes > 0) {
    // Allowed while this thread captures (a first loop inside a user's graph): relaxed mode.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    FL_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t made = cudaMalloc(&ws, bytes);
    FL_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    FL_CUDA_CHECK(made);
  }
  FL_CUBLAS_CHECK(cublasSetStream(blas, stream));
  FL_CUBLAS_CHECK(cublasSetWorkspace(blas, ws, bytes));
  return blas;
}

std::atomic<size_t> replayed{0};  // replays()
std::atomic<size_t> recorded{0};  // recordings()

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FL_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

void Streams::aux_after_main() const {
  if (aux == stream) return;
  FL_CUDA_CHECK(cudaEventRecord(event, stream));
  FL_CUDA_CHECK(cudaStreamWaitEvent(aux, event, 0));
}

void Streams::main_after_aux() const {
  if (aux == stream) return;
  FL_CUDA_CHECK(cudaEventRecord(event, aux));
  FL_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
}

void Run::launch(cudaStream_t stream) const {
  if (entry_ != nullptr) {
    FL_CUDA_CHECK(cudaGraphLaunch(entry_->exec, stream));
    entry_->launches.fetch_add(1, std::memory_order_relaxed);
    replayed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  int device = 0;
  FL_CUDA_CHECK(cudaGetDevice(&device));
  Device& d = device_of(c, device);
  cublasHandle_t blas = bind(d, d.blas, stream, stream, workspace_bytes_, false);
  cublasHandle_t aux_blas =
      aux_ ? bind(d, d.aux_blas, stream, stream, workspace_bytes_, true) : blas;
  record_(Streams{stream, blas, stream, aux_blas, nullptr}, state_);
}

Run prepare(const std::string& key, cudaStream_t stream, size_t state_bytes,
            void* fallback_state, size_t workspace_bytes, Record record, bool aux,
            bool node_priorities) {
  Run run;
  run.workspace_bytes_ = workspace_bytes;
  run.aux_ = aux;
  run.state_ = fallback_state;  // the direct modes
  run.record_ = record;
  if (capturing(stream)) return run;
  int device = 0;
  FL_CUDA_CHECK(cudaGetDevice(&device));
  std::ostringstream full;
  full << device << '/' << static_cast<const void*>(stream) << '/' << workspace_bytes << '/'
       << state_bytes << '/' << key;
  const std::string id = full.str();
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto hit = c.index.find(id);
  if (hit != c.index.end()) {
    c.lru.splice(c.lru.begin(), c.lru, hit->second);
    run.entry_ = hit->second->second;
    run.state_ = run.entry_->state;
    return run;
  }
  if (!c.admission.record(id)) return run;  // run directly
  Device& d = device_of(c, device);
  auto entry = std::make_shared<Entry>();
  entry->device = device;
  if (state_bytes > 0) FL_CUDA_CHECK(cudaMalloc(&entry->state, state_bytes));
  cublasHandle_t blas = bind(d, d.blas, d.side, stream, workspace_bytes, false);
  cublasHandle_t aux_blas =
      aux ? bind(d, d.aux_blas, d.aux, stream, workspace_bytes, true) : blas;
  FL_CUDA_CHECK(cudaStreamBeginCapture(d.side, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    record(Streams{d.side, blas, aux ? d.aux : d.side, aux_blas, d.event}, entry->state);
  } catch (...) {
    cudaStreamEndCapture(d.side, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  FL_CUDA_CHECK(cudaStreamEndCapture(d.side, &graph));
  // With node_priorities the nodes keep their streams' priorities (the loop's above its
  // auxiliary branch); else they run at the priority of the stream launched into, as the same
  // launches made directly would.
  const cudaError_t made = cudaGraphInstantiate(
      &entry->exec, graph, node_priorities ? cudaGraphInstantiateFlagUseNodePriority : 0);
  cudaGraphDestroy(graph);
  FL_CUDA_CHECK(made);
  recorded.fetch_add(1, std::memory_order_relaxed);
  c.lru.emplace_front(id, entry);
  c.index[id] = c.lru.begin();
  while (c.lru.size() > kCapacity) {
    // A graph that paid for its recording does not count against its key (Admission).
    if (c.lru.back().second->launches.load(std::memory_order_relaxed) < kPaidLaunches)
      c.admission.evicted(c.lru.back().first);
    c.index.erase(c.lru.back().first);
    c.lru.pop_back();
  }
  run.entry_ = std::move(entry);
  run.state_ = run.entry_->state;
  return run;
}

size_t replays() { return replayed.load(std::memory_order_relaxed); }

size_t recordings() { return recorded.load(std::memory_order_relaxed); }

size_t cached() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.lru.size();
}

}  // namespace step_graph
}  // namespace fastlayers
