// The NVRTC compile service: rendered CUDA source -> cubin for one architecture, with the
// embedded device headers, the compile log, the ptxas resource report per kernel, and an
// on-disk cubin cache keyed by a content hash.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sage::tuner {

// Resources of one kernel, parsed from ptxas' verbose report.
struct KernelResources {
  std::string kernel;       // entry name as ptxas prints it
  int registers = 0;
  int spill_stores = 0;     // bytes
  int spill_loads = 0;      // bytes
  int stack_frame = 0;      // bytes
  int smem_static = 0;      // bytes
  int cmem0 = 0;            // bytes of constant bank 0 (parameters), when reported
  int barriers = 0;
};
// Parses ptxas -v output (as found in an NVRTC log); kernels in the order reported.
std::vector<KernelResources> parse_ptxas_report(const std::string& log);

struct CompileOptions {
  std::string arch = "sm_90a";         // sm_80 | sm_86 | sm_89 | sm_90a
  std::vector<std::string> extra;      // extra NVRTC options
  bool use_cache = true;
  std::string cache_dir;               // empty: <cache_dir()>/cubins
  bool keep_ptx = false;               // also return the PTX (for inspection)
};

struct CompileResult {
  std::string name;                    // variant (or display) name
  std::string key;                     // content hash: cache key
  bool ok = false;
  bool cache_hit = false;
  std::string log;                     // NVRTC log (warnings, errors, ptxas report)
  std::string cubin;                   // bytes
  std::string ptx;                     // when keep_ptx
  std::vector<KernelResources> kernels;
  double compile_ms = 0;               // wall time of this request (cache hits are fast)
  bool spills() const;                 // any kernel with spill stores or loads
};

// NVRTC's version as "13.0".
std::string nvrtc_version();
// The options actually passed to NVRTC for `opts` (architecture, standard, include set).
std::vector<std::string> nvrtc_options(const CompileOptions& opts);
// sha256 over source, options, NVRTC version, architecture and the embedded headers bundle.
std::string content_hash(const std::string& source, const CompileOptions& opts);

// Compiles one source; never throws for a compile error (ok = false, log says why).
// Throws Error(io_error) only for an unusable cache directory.
CompileResult compile(const std::string& name, const std::string& source, const CompileOptions& opts);

struct CompileJob {
  std::string name;
  std::string source;
};
struct Progress {
  std::size_t done = 0, total = 0, failed = 0, cache_hits = 0;
  std::string last;  // name of the job just finished
};
// Compiles every job on `jobs` threads (0: hardware concurrency). Results keep job order.
// `on_progress` is called (serialized) after each job.
std::vector<CompileResult> compile_all(const std::vector<CompileJob>& jobs, const CompileOptions& opts,
                                       unsigned jobs_threads = 0,
                                       const std::function<void(const Progress&)>& on_progress = {});

}  // namespace sage::tuner
