// Which keys the step-graph cache (step_graph.cu) records: bounded sets of keys, plain C++ (no
// CUDA), so that the rules are tested on any machine (fastlayers._C.testing.GraphAdmission).
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

namespace fastlayers {
namespace step_graph {

constexpr size_t kSeen = 1024;   // keys the cache remembers as seen once, and as pushed out
constexpr int kMaxEvictions = 2;  // pushed out that often unpaid, a key is recorded no more
// A graph pushed out after fewer launches than this had not paid for its recording (a capture
// and an instantiation, several direct runs' host time): only such evictions count against a key.
constexpr size_t kPaidLaunches = 16;

// At most `limit` keys with a count each; the one touched least recently is forgotten first.
class RecentKeys {
 public:
  explicit RecentKeys(size_t limit) : limit_(limit) {}

  int count(const std::string& id) const {
    const auto it = index_.find(id);
    return it == index_.end() ? 0 : it->second->second;
  }

  // Count + 1; the most recent key now.
  void bump(const std::string& id) {
    int n = 1;
    const auto it = index_.find(id);
    if (it != index_.end()) {
      n += it->second->second;
      order_.erase(it->second);
      index_.erase(it);
    }
    order_.emplace_front(id, n);
    index_[id] = order_.begin();
    if (order_.size() > limit_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  void forget(const std::string& id) {
    const auto it = index_.find(id);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

 private:
  using Order = std::list<std::pair<std::string, int>>;
  size_t limit_;
  Order order_;
  std::unordered_map<std::string, Order::iterator> index_;
};

// Whether a key missing from the cache is recorded now: on its second call, so a key that never
// comes back costs no recording; and not once its graph has been pushed out of the cache
// `max_evictions` times before it paid for its recording (the cache reports only those). Keys
// that come back in turn, more of them than the cache holds, would otherwise each be recorded
// anew round after round, a capture and an instantiation every time; a graph pushed out after
// long use (another phase of a program took the cache) is recorded again when its key returns.
// Both sets remember `limit` keys: a key barred is recorded again once `limit` later evictions
// pushed it out of memory.
class Admission {
 public:
  Admission(size_t limit, int max_evictions)
      : seen_(limit), evicted_(limit), max_evictions_(max_evictions) {}

  // Called on a miss: true to record now, false to run launch by launch.
  bool record(const std::string& id) {
    if (evicted_.count(id) >= max_evictions_) return false;
    if (seen_.count(id) == 0) {
      seen_.bump(id);
      return false;
    }
    seen_.forget(id);
    return true;
  }

  // `id`'s graph left the cache to make room for another.
  void evicted(const std::string& id) { evicted_.bump(id); }

 private:
  RecentKeys seen_;
  RecentKeys evicted_;
  int max_evictions_;
};

}  // namespace step_graph
}  // namespace fastlayers
