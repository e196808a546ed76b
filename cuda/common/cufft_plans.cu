#include "cufft_plans.h"

#include <list>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "check.h"

namespace fastlayers {
namespace cufft_plans {
namespace {

struct Key {
  int device;
  Transform t;
  int64_t nh, nw, batch;
  bool operator==(const Key& o) const {
    return std::tie(device, t, nh, nw, batch) == std::tie(o.device, o.t, o.nh, o.nw, o.batch);
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<int64_t>()(k.nh);
    for (int64_t v : {static_cast<int64_t>(k.device), static_cast<int64_t>(k.t), k.nw, k.batch})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

struct Plan {
  cufftHandle handle;
  size_t work;
  void* work_area;       // last work area and stream given to the plan: set again only on change
  cudaStream_t stream;
};

cufftType cufft_type(Transform t) {
  switch (t) {
    case Transform::R2C_F32: return CUFFT_R2C;
    case Transform::C2R_F32: return CUFFT_C2R;
    case Transform::R2C_F64: return CUFFT_D2Z;
    case Transform::C2R_F64: return CUFFT_Z2D;
  }
  return CUFFT_R2C;
}

class Cache {
 public:
  // Must be called with mu_ held.
  Plan& get(const Key& k) {
    auto it = map_.find(k);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
    Plan p{};
    FL_CUFFT_CHECK(cufftCreate(&p.handle));
    try {
      FL_CUFFT_CHECK(cufftSetAutoAllocation(p.handle, 0));
      // nh = 1: a batched 1-D plan (the same transform as a 2-D one with a single row)
      long long n[2] = {k.nh, k.nw};
      const int rank = k.nh == 1 ? 1 : 2;
      FL_CUFFT_CHECK(cufftMakePlanMany64(p.handle, rank, n + (2 - rank), nullptr, 1, 0, nullptr,
                                         1, 0, cufft_type(k.t), k.batch, &p.work));
    } catch (...) {
      cufftDestroy(p.handle);
      throw;
    }
    lru_.push_front(k);
    auto& slot = map_.emplace(k, std::make_pair(p, lru_.begin())).first->second.first;
    evict();  // never evicts the entry just made (it is at the front)
    return slot;
  }
  void evict() {
    while (map_.size() > capacity_ && !lru_.empty()) {
      auto it = map_.find(lru_.back());
      cufftDestroy(it->second.first.handle);
      map_.erase(it);
      lru_.pop_back();
    }
  }
  std::mutex mu_;
  size_t capacity_ = 64;
  std::list<Key> lru_;
  std::unordered_map<Key, std::pair<Plan, std::list<Key>::iterator>, KeyHash> map_;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: plans may outlive static destruction order
  return *c;
}

Key make_key(Transform t, int64_t nh, int64_t nw, int64_t batch) {
  int dev = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  return Key{dev, t, nh, nw, batch};
}

template <typename Exec>
void run(Transform t, int64_t nh, int64_t nw, int64_t batch, void* work, cudaStream_t stream,
         Exec exec) {
  Key k = make_key(t, nh, nw, batch);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu_);
  Plan& p = c.get(k);
  if (p.stream != stream || p.work_area == nullptr) {
    FL_CUFFT_CHECK(cufftSetStream(p.handle, stream));
    p.stream = stream;
  }
  if (p.work_area != work) {
    FL_CUFFT_CHECK(cufftSetWorkArea(p.handle, work));
    p.work_area = work;
  }
  exec(p.handle);
}

}  // namespace

size_t work_bytes(Transform t, int64_t nh, int64_t nw, int64_t batch) {
  Key k = make_key(t, nh, nw, batch);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu_);
  return c.get(k).work;
}

void rfft2(const float* in, float2* out, int64_t nh, int64_t nw, int64_t batch, void* work,
           cudaStream_t stream) {
  run(Transform::R2C_F32, nh, nw, batch, work, stream, [&](cufftHandle h) {
    FL_CUFFT_CHECK(cufftExecR2C(h, const_cast<float*>(in), reinterpret_cast<cufftComplex*>(out)));
  });
}

void rfft2(const double* in, double2* out, int64_t nh, int64_t nw, int64_t batch, void* work,
           cudaStream_t stream) {
  run(Transform::R2C_F64, nh, nw, batch, work, stream, [&](cufftHandle h) {
    FL_CUFFT_CHECK(
        cufftExecD2Z(h, const_cast<double*>(in), reinterpret_cast<cufftDoubleComplex*>(out)));
  });
}

void irfft2(float2* in, float* out, int64_t nh, int64_t nw, int64_t batch, void* work,
            cudaStream_t stream) {
  run(Transform::C2R_F32, nh, nw, batch, work, stream, [&](cufftHandle h) {
    FL_CUFFT_CHECK(cufftExecC2R(h, reinterpret_cast<cufftComplex*>(in), out));
  });
}

void irfft2(double2* in, double* out, int64_t nh, int64_t nw, int64_t batch, void* work,
            cudaStream_t stream) {
  run(Transform::C2R_F64, nh, nw, batch, work, stream, [&](cufftHandle h) {
    FL_CUFFT_CHECK(cufftExecZ2D(h, reinterpret_cast<cufftDoubleComplex*>(in), out));
  });
}

size_t cache_size() {
  std::lock_guard<std::mutex> lock(cache().mu_);
  return cache().map_.size();
}

size_t cache_capacity() {
  std::lock_guard<std::mutex> lock(cache().mu_);
  return cache().capacity_;
}

void set_cache_capacity(size_t capacity) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu_);
  c.capacity_ = capacity < 1 ? 1 : capacity;
  c.evict();
}

void clear_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu_);
  for (auto& kv : c.map_) cufftDestroy(kv.second.first.handle);
  c.map_.clear();
  c.lru_.clear();
}

int library_version() {
  int v = 0;
  FL_CUFFT_CHECK(cufftGetVersion(&v));
  return v;
}

}  // namespace cufft_plans
}  // namespace fastlayers
