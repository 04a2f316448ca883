// compile_all: many sources on a pool of threads. NVRTC is thread-safe for separate
// programs, and a compile is CPU-bound (front end + ptxas), so one job per CPU.
#include <mutex>

#include "sage/tuner/compiler.h"
#include "sage/tuner/thread_pool.h"

namespace sage::tuner {

std::vector<CompileResult> compile_all(const std::vector<CompileJob>& jobs, const CompileOptions& opts,
                                       unsigned jobs_threads,
                                       const std::function<void(const Progress&)>& on_progress) {
  nvrtc_options(opts);  // an invalid architecture fails here, before any thread starts
  std::vector<CompileResult> results(jobs.size());
  Progress progress;
  progress.total = jobs.size();
  std::mutex progress_mutex;
  parallel_for(jobs.size(), jobs_threads, [&](std::size_t i) {
    results[i] = compile(jobs[i].name, jobs[i].source, opts);
    std::lock_guard<std::mutex> lock(progress_mutex);
    ++progress.done;
    if (!results[i].ok) ++progress.failed;
    if (results[i].cache_hit) ++progress.cache_hits;
    progress.last = jobs[i].name;
    if (on_progress) on_progress(progress);
  });
  return results;
}

}  // namespace sage::tuner
