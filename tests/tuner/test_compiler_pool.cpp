// compile_all and parallel_for: order, parallelism, progress, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/thread_pool.h"

namespace sage::tuner {
namespace {

// Each job's kernel name and a constant differ, so every source (and key) is distinct.
std::vector<CompileJob> make_jobs(int n) {
  std::vector<CompileJob> jobs;
  for (int i = 0; i < n; ++i) {
    std::string k = cat("k", i);
    jobs.push_back({cat("job_", i), cat("extern \"C\" __global__ void ", k,
                                        "(float* a) { a[threadIdx.x] = a[threadIdx.x] * ", i,
                                        ".0f + 1.0f; }\n")});
  }
  return jobs;
}

TEST(ParallelFor, EveryIndexOnceAndConcurrently) {
  std::vector<std::atomic<int>> seen(64);
  // Tasks 0 and 1 each wait until both have started: that only ends with two threads.
  std::mutex m;
  std::condition_variable cv;
  int started = 0;
  bool met = true;
  parallel_for(seen.size(), 2, [&](std::size_t i) {
    ++seen[i];
    if (i >= 2) return;
    std::unique_lock<std::mutex> l(m);
    ++started;
    cv.notify_all();
    if (!cv.wait_for(l, std::chrono::seconds(10), [&] { return started >= 2; })) met = false;
  });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  EXPECT_TRUE(met) << "the first two tasks never ran at the same time";
}

TEST(ParallelFor, FirstExceptionIsRethrownAndLaterWorkSkipped) {
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(1000, 1, [&](std::size_t i) {
                 ++ran;
                 if (i == 3) throw std::runtime_error("boom");
               }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 4);  // one thread: indices 0..3, then stop
  parallel_for(0, 4, [&](std::size_t) { FAIL() << "no work expected"; });
}

TEST(ParallelFor, DefaultJobsIsAtLeastOne) { EXPECT_GE(default_jobs(), 1u); }

TEST(CompileAll, KeepsOrderRunsInParallelAndCountsProgress) {
  auto jobs = make_jobs(8);
  CompileOptions o;
  o.arch = "sm_80";
  o.use_cache = false;
  std::vector<Progress> seen;
  std::set<std::thread::id> callers;
  auto t0 = std::chrono::steady_clock::now();
  auto results = compile_all(jobs, o, 4, [&](const Progress& p) {
    seen.push_back(p);  // serialized by compile_all: no lock needed here
    callers.insert(std::this_thread::get_id());
  });
  double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(results.size(), jobs.size());
  double busy_ms = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(results[i].name, jobs[i].name);
    ASSERT_TRUE(results[i].ok) << results[i].log;
    ASSERT_EQ(results[i].kernels.size(), 1u);
    EXPECT_EQ(results[i].kernels[0].kernel, cat("k", i));  // result i is job i's kernel
    busy_ms += results[i].compile_ms;
  }
  // Summed per-job time exceeds the wall time only when jobs overlapped (on any number of
  // cores: time-sliced threads overlap too).
  EXPECT_GT(busy_ms, 1.5 * wall_ms) << "busy " << busy_ms << " ms in " << wall_ms << " ms wall";
  EXPECT_GT(callers.size(), 1u);
  ASSERT_EQ(seen.size(), jobs.size());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].done, i + 1);
    EXPECT_EQ(seen[i].total, jobs.size());
    EXPECT_EQ(seen[i].failed, 0u);
  }
}

TEST(CompileAll, CountsFailuresAndCacheHits) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sage-compile-all-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  auto jobs = make_jobs(3);
  jobs.push_back({"broken", "extern \"C\" __global__ void b() { nope(); }\n"});
  jobs.push_back({"dup_of_0", jobs[0].source});  // same key as job 0
  CompileOptions o;
  o.arch = "sm_89";
  o.cache_dir = tmpl;
  Progress last;
  auto r1 = compile_all(jobs, o, 2, [&](const Progress& p) { last = p; });
  EXPECT_EQ(last.done, 5u);
  EXPECT_EQ(last.failed, 1u);
  EXPECT_EQ(last.cache_hits, 1u);  // the duplicate waited for job 0 and hit
  EXPECT_FALSE(r1[3].ok);
  EXPECT_EQ(r1[4].key, r1[0].key);

  auto r2 = compile_all(jobs, o, 2, [&](const Progress& p) { last = p; });
  EXPECT_EQ(last.cache_hits, 4u);  // everything but the failure
  EXPECT_EQ(last.failed, 1u);
  std::filesystem::remove_all(tmpl);
}

TEST(CompileAll, InvalidArchThrowsBeforeCompiling) {
  CompileOptions o;
  o.arch = "sm_70";
  int calls = 0;
  try {
    compile_all(make_jobs(2), o, 2, [&](const Progress&) { ++calls; });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
  }
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace sage::tuner
