// The NVRTC compile service: rendered CUDA source -> cubin for one architecture, with the
// embedded device headers, the compile log, the ptxas resource report per kernel, and an
// on-disk cubin cache keyed by a content hash.
//
// Device headers: every embedded template file ending in .cuh or .h is given to NVRTC as a
// header named by its path under templates/, less a leading "include/": kernel code writes
// `#include "sage/foo.cuh"` for templates/include/sage/foo.cuh. NVRTC resolves in-memory
// headers by exact name only, so headers include each other by that full name too.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sage::tuner {

// Resources of one function, parsed from ptxas' verbose report.
struct KernelResources {
  std::string kernel;       // name as ptxas prints it (mangled unless extern "C")
  bool entry = true;        // false: a non-inlined __device__ function ptxas reports on its own
  int registers = 0;
  int spill_stores = 0;     // bytes
  int spill_loads = 0;      // bytes
  int stack_frame = 0;      // bytes
  int smem_static = 0;      // bytes (dynamic shared memory is not known at compile time)
  int cmem0 = 0;            // bytes of constant bank 0 (parameters), when reported
  int barriers = 0;
  double ptxas_ms = 0;      // ptxas' "Compile time", when reported
  // ptxas remarks that name this function, e.g. "(C7511) Potential Performance Loss:
  // wgmma.mma_async instructions are serialized due to ...", without the "ptxas info :" prefix.
  std::vector<std::string> notes;
  bool spills() const { return spill_stores > 0 || spill_loads > 0; }
  // ptxas serialized this function's wgmma instructions (a large loss on Hopper).
  bool wgmma_serialized() const;
};
// Parses ptxas -v output as found in an NVRTC log (other lines are skipped); functions in the
// order reported. Remarks naming a function are attached to it wherever they appear.
std::vector<KernelResources> parse_ptxas_report(const std::string& log);

// The error lines of an NVRTC log, at most `max`, each as "file:line: error: message":
//   "attn.cu(3): error: identifier "y" is undefined" -> "attn.cu:3: error: identifier ..."
//   "ptxas application ptx input, line 26; error   : Instruction 'wgmma.fence' not supported
//    on .target 'sm_80'" -> "<ptx>:26: error: Instruction 'wgmma.fence' not supported ..."
//   ("<ptx>" is the generated PTX: the kernel source has no such line).
// Other errors ("nvrtc: error: ...", "ptxas fatal : ...", "Command-line error: ...") are
// kept as they are. Warnings are left out.
std::vector<std::string> error_lines(const std::string& log, std::size_t max = 8);

// The architectures the compile service targets.
const std::vector<std::string>& supported_archs();  // sage::target_archs(): sm_80 ... sm_120
bool is_supported_arch(const std::string& arch);

struct CompileOptions {
  std::string arch = "sm_90a";         // one of supported_archs()
  std::vector<std::string> extra;      // extra NVRTC options, after the defaults
  bool lineinfo = true;                // -lineinfo: source lines for profilers (no speed cost)
  bool use_cache = true;               // false: neither read nor write the cache
  std::string cache_dir;               // the cubin cache folder; empty: default_cache_dir()
  bool keep_ptx = false;               // also return the PTX (for inspection); SAGE_CACHE_PTX=1 (cache_keeps_ptx)
                                       // stores it in every new cache entry too
};

// $SAGE_CACHE_DIR/cubins when SAGE_CACHE_DIR is set, else sage::cache_dir() + "/cubins".
std::string default_cache_dir();

struct CompileResult {
  std::string name;                    // variant (or display) name
  std::string arch;
  std::string key;                     // content hash: cache key
  bool ok = false;
  bool cache_hit = false;
  std::string log;                     // NVRTC log (warnings, errors, ptxas report)
  std::string cubin;                   // bytes
  std::string ptx;                     // when keep_ptx
  std::vector<KernelResources> kernels;
  double compile_ms = 0;               // wall time of this request (cache hits are fast)
  double build_ms = 0;                 // wall time of the NVRTC compile that made the cubin
                                       // (from the cache's metadata on a hit)
  // Why a cache entry was not used, when one was there and was bad ("cubin sha256 does not
  // match its metadata: recompiled"); empty otherwise. Also appended to the log.
  std::string cache_note;

  bool spills() const;                 // any function with spill stores or loads
  // "spills 24 B stores / 16 B loads in sage_attn[, ...]"; empty when nothing spills.
  std::string spill_summary() const;
};

// NVRTC's version as "13.0".
std::string nvrtc_version();
// NVRTC's full build as its PTX header states it, e.g. "13.0.88 CL-36424714" (computed once by
// compiling an empty program; nvrtc_version() when that fails). Part of the cache key, so a
// patch update of NVRTC, which may change code generation, does not reuse old cubins.
std::string nvrtc_build();
// The options actually passed to NVRTC for `opts`:
//   -arch=<arch> -std=c++17 --ptxas-options=-v --fmad=true -DNDEBUG [-lineinfo] <extra...>
// Throws Error(invalid_argument) for an architecture not in supported_archs().
std::vector<std::string> nvrtc_options(const CompileOptions& opts);
// sha256 over source, the option list, nvrtc_build(), the architecture and the embedded
// templates bundle hash (the headers are part of what gets compiled).
std::string content_hash(const std::string& source, const CompileOptions& opts);

// Compiles one source (named `name` in NVRTC messages: "<name>.cu(12): error: ...").
// Never throws for a compile error (ok = false, log says why). Throws Error(invalid_argument)
// for an unsupported architecture, Error(io_error) for a cache folder that cannot be written.
// Cache: a hit returns the stored cubin, log and resources; a cached cubin whose sha256 does
// not match its metadata is recompiled (cache_note says so). Failed compiles are not cached,
// so a fixed template recompiles. Thread-safe.
CompileResult compile(const std::string& name, const std::string& source, const CompileOptions& opts);

// The cached result of compile(name, source, opts) when the cubin cache holds an intact entry
// for it, else nullopt; never runs NVRTC (the runtime's SAGE_DISABLE_JIT=1 path). Always
// nullopt with opts.use_cache off.
std::optional<CompileResult> load_cached(const std::string& name, const std::string& source,
                                         const CompileOptions& opts);

struct CompileJob {
  std::string name;
  std::string source;
};
struct Progress {
  std::size_t done = 0, total = 0, failed = 0, cache_hits = 0;
  std::string last;  // name of the job just finished
};
// Compiles every job on `jobs_threads` threads (0: the CPUs this process may run on).
// Results keep job order. `on_progress` is called (serialized) after each job. With the cache
// on, jobs with the same key compile once: the others wait and hit the cache. An exception
// (invalid arch, unusable cache folder) stops the remaining jobs and is rethrown.
std::vector<CompileResult> compile_all(const std::vector<CompileJob>& jobs, const CompileOptions& opts,
                                       unsigned jobs_threads = 0,
                                       const std::function<void(const Progress&)>& on_progress = {});

}  // namespace sage::tuner
