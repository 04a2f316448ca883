// A map from keys to immutable values that builds each value once, however many threads ask
// for it at the same moment (single flight), and serves reads without blocking on a build.
// The runtime's in-memory kernel cache. Internal header.
#pragma once
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace sage::rt {

template <class Key, class Value, class Hash = std::hash<Key>>
class SingleFlightCache {
 public:
  // The value stored for `k`, or nullptr. Takes a shared lock for the lookup only and
  // allocates nothing: the call path's fast path. The pointer stays valid until clear().
  const Value* find(const Key& k) const {
    std::shared_lock lock(mu_);
    auto it = ready_.find(k);
    return it == ready_.end() ? nullptr : it->second.get();
  }

  // The value for `k`, built by `build()` (returning a std::shared_ptr<const Value>) when it is
  // not there yet. Concurrent callers for one key wait for the single build in progress; no
  // lock is held while building. When the build throws, every waiting caller receives the
  // exception and nothing is stored, so that a later call tries again. *built (when given)
  // tells whether this call ran the build.
  template <class Build>
  const Value& get(const Key& k, Build&& build, bool* built = nullptr) {
    if (built) *built = false;
    if (const Value* v = find(k)) return *v;
    std::shared_ptr<std::promise<Ptr>> mine;
    std::shared_future<Ptr> waiting;
    {
      std::lock_guard lock(pending_mu_);
      // Re-checked under pending_mu_: a builder stores its value before it leaves pending_,
      // so a value finished since the check above is seen here, and is never built twice.
      if (const Value* v = find(k)) return *v;
      auto it = pending_.find(k);
      if (it != pending_.end()) {
        waiting = it->second;
      } else {
        mine = std::make_shared<std::promise<Ptr>>();
        pending_.emplace(k, mine->get_future().share());
      }
    }
    if (!mine) return *waiting.get();  // rethrows the builder's exception
    Ptr value;
    try {
      value = build();
    } catch (...) {
      finish(k);
      mine->set_exception(std::current_exception());
      throw;
    }
    {
      std::unique_lock lock(mu_);
      ready_[k] = value;
    }
    finish(k);
    mine->set_value(value);
    if (built) *built = true;
    return *value;
  }

  // Drops every value. Must not run while other threads use the cache or hold values from it.
  void clear() {
    std::unique_lock lock(mu_);
    ready_.clear();
  }
  std::size_t size() const {
    std::shared_lock lock(mu_);
    return ready_.size();
  }

 private:
  using Ptr = std::shared_ptr<const Value>;
  void finish(const Key& k) {
    std::lock_guard lock(pending_mu_);
    pending_.erase(k);
  }
  mutable std::shared_mutex mu_;  // guards ready_
  std::unordered_map<Key, Ptr, Hash> ready_;
  std::mutex pending_mu_;         // guards pending_
  std::unordered_map<Key, std::shared_future<Ptr>, Hash> pending_;
};

}  // namespace sage::rt
