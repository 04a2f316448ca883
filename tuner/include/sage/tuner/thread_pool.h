// Fork-join parallelism for independent jobs (compiles, file writes): a fixed set of
// std::thread workers takes indices from a shared counter, so long and short jobs balance
// themselves without a queue.
#pragma once
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sage::tuner {

// The number of CPUs this process may run on (its affinity mask, which containers and
// `taskset` narrow; std::thread::hardware_concurrency() counts every CPU of the host).
inline unsigned default_jobs() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return unsigned(n);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Runs fn(i) for every i in [0, n) on min(threads, n) threads (threads == 0: default_jobs());
// with one thread, on the caller's thread. Returns when all calls have returned. When a call
// throws, indices not yet started are skipped and the first exception is rethrown.
template <class Fn>
void parallel_for(std::size_t n, unsigned threads, Fn&& fn) {
  if (n == 0) return;
  if (threads == 0) threads = default_jobs();
  std::size_t workers = std::min<std::size_t>(threads, n);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto work = [&] {
    while (!stop.load(std::memory_order_relaxed)) {
      std::size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        stop = true;
      }
    }
  };
  if (workers == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(workers);
    for (std::size_t t = 0; t < workers; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace sage::tuner
