// NVRTC compile of one source, with the embedded headers and the cubin cache.
#include "sage/tuner/compiler.h"

#include <nvrtc.h>

#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <regex>
#include <set>

#include "cubin_cache.h"
#include "sage/common/archs.h"
#include "sage/common/embedded.h"
#include "sage/common/error.h"
#include "sage/common/sha256.h"
#include "sage/common/strings.h"

namespace sage::tuner {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The embedded .cuh/.h files as NVRTC headers. Built once; the pointers refer to the
// embedded bundle (static storage, NUL-terminated).
struct Headers {
  std::vector<std::string> names;
  std::vector<const char*> name_ptrs;
  std::vector<const char*> contents;
};
const Headers& headers() {
  static const Headers h = [] {
    Headers out;
    std::size_t n = 0;
    const EmbeddedFile* files = embedded_templates::files(&n);
    for (std::size_t i = 0; i < n; ++i) {
      std::string_view name = files[i].name;
      if (!name.ends_with(".cuh") && !name.ends_with(".h")) continue;
      // templates/include/sage/x.cuh is included as "sage/x.cuh".
      if (name.starts_with("include/")) name.remove_prefix(8);
      out.names.emplace_back(name);
      out.contents.push_back(files[i].data);
    }
    for (const auto& s : out.names) out.name_ptrs.push_back(s.c_str());
    return out;
  }();
  return h;
}

// Serializes work on one cache entry within this process: write_file_atomic's temp file is
// named after the process, so two threads storing one key would write the same temp file.
// The second thread waits and then finds the entry the first one stored.
class KeyLocks {
 public:
  void lock(const std::string& key) {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return !busy_.count(key); });
    busy_.insert(key);
  }
  void unlock(const std::string& key) {
    {
      std::lock_guard<std::mutex> l(m_);
      busy_.erase(key);
    }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::set<std::string> busy_;
};
KeyLocks& key_locks() {
  static KeyLocks k;
  return k;
}
struct KeyGuard {
  std::string key;
  explicit KeyGuard(std::string k) : key(std::move(k)) { key_locks().lock(key); }
  ~KeyGuard() { key_locks().unlock(key); }
  KeyGuard(const KeyGuard&) = delete;
  KeyGuard& operator=(const KeyGuard&) = delete;
};

struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

std::string program_log(nvrtcProgram p) {
  std::size_t n = 0;
  if (nvrtcGetProgramLogSize(p, &n) != NVRTC_SUCCESS || n <= 1) return {};
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  // ptxas' remark and its errors come as strings joined by a NUL: keep them as lines.
  for (char& c : log)
    if (c == '\0') c = '\n';
  return log + "\n";
}

// Runs NVRTC; fills ok, log, cubin, ptx, kernels, build_ms of r.
void run_nvrtc(const std::string& source, const std::vector<std::string>& options, bool keep_ptx,
               CompileResult& r) {
  auto t0 = std::chrono::steady_clock::now();
  const Headers& h = headers();
  const std::string program_name = (r.name.empty() ? std::string("kernel") : r.name) + ".cu";
  Program prog;
  nvrtcResult rc = nvrtcCreateProgram(&prog.p, source.c_str(), program_name.c_str(),
                                      int(h.names.size()), h.contents.data(), h.name_ptrs.data());
  auto fail = [&](const char* call, nvrtcResult e) {
    r.ok = false;
    r.log += cat("nvrtc: error: ", call, " failed: ", nvrtcGetErrorString(e), "\n");
    r.build_ms = ms_since(t0);
  };
  if (rc != NVRTC_SUCCESS) return fail("nvrtcCreateProgram", rc);
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  rc = nvrtcCompileProgram(prog.p, int(argv.size()), argv.data());
  r.log = program_log(prog.p);
  // NVRTC_ERROR_COMPILATION already explains itself in the log; other codes (an invalid
  // option, out of memory) may not.
  if (rc != NVRTC_SUCCESS && rc != NVRTC_ERROR_COMPILATION) return fail("nvrtcCompileProgram", rc);
  if (rc != NVRTC_SUCCESS) {
    r.ok = false;
    r.build_ms = ms_since(t0);
    return;
  }
  std::size_t size = 0;
  if ((rc = nvrtcGetCUBINSize(prog.p, &size)) != NVRTC_SUCCESS) return fail("nvrtcGetCUBINSize", rc);
  r.cubin.assign(size, '\0');
  if ((rc = nvrtcGetCUBIN(prog.p, r.cubin.data())) != NVRTC_SUCCESS) return fail("nvrtcGetCUBIN", rc);
  if (keep_ptx) {
    if ((rc = nvrtcGetPTXSize(prog.p, &size)) != NVRTC_SUCCESS) return fail("nvrtcGetPTXSize", rc);
    r.ptx.assign(size, '\0');
    if ((rc = nvrtcGetPTX(prog.p, r.ptx.data())) != NVRTC_SUCCESS) return fail("nvrtcGetPTX", rc);
    while (!r.ptx.empty() && r.ptx.back() == '\0') r.ptx.pop_back();
  }
  r.ok = !r.cubin.empty();
  if (!r.ok) r.log += "nvrtc: error: NVRTC produced no cubin\n";
  r.kernels = parse_ptxas_report(r.log);
  r.build_ms = ms_since(t0);
}

std::string hash_of(const std::string& source, const std::vector<std::string>& options,
                    const std::string& arch) {
  Sha256 h;
  h.field("sage-cubin-v1").field(source);
  h.field(std::to_string(options.size()));
  for (const auto& o : options) h.field(o);
  h.field(nvrtc_build()).field(arch).field(embedded_templates::bundle_hash());
  return h.hex();
}

}  // namespace

const std::vector<std::string>& supported_archs() { return target_archs(); }

bool is_supported_arch(const std::string& arch) { return is_target_arch(arch); }

std::string default_cache_dir() {
  std::string root = env("SAGE_CACHE_DIR");
  return (root.empty() ? cache_dir() : root) + "/cubins";
}

bool CompileResult::spills() const {
  for (const auto& k : kernels)
    if (k.spills()) return true;
  return false;
}

std::string CompileResult::spill_summary() const {
  std::string out;
  for (const auto& k : kernels) {
    if (!k.spills()) continue;
    out += cat(out.empty() ? "spills " : ", ", k.spill_stores, " B stores / ", k.spill_loads,
               " B loads in ", k.kernel);
  }
  return out;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return cat(major, ".", minor);
}

std::string nvrtc_build() {
  // The PTX header names the exact build:
  //   // Compiler Build ID: CL-36424714
  //   // Cuda compilation tools, release 13.0, V13.0.88
  static const std::string build = [] {
    Program prog;
    if (nvrtcCreateProgram(&prog.p, "", "version.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
      return nvrtc_version();
    const char* opt = "-arch=compute_80";
    if (nvrtcCompileProgram(prog.p, 1, &opt) != NVRTC_SUCCESS) return nvrtc_version();
    std::size_t n = 0;
    if (nvrtcGetPTXSize(prog.p, &n) != NVRTC_SUCCESS) return nvrtc_version();
    std::string ptx(n, '\0');
    if (nvrtcGetPTX(prog.p, ptx.data()) != NVRTC_SUCCESS) return nvrtc_version();
    std::smatch release, id;
    static const std::regex release_re(R"(, V(\d+\.\d+\.\d+))");
    static const std::regex id_re(R"(Build ID: (\S+))");
    if (!std::regex_search(ptx, release, release_re)) return nvrtc_version();
    std::string out = release[1].str();
    if (std::regex_search(ptx, id, id_re)) out += " " + id[1].str();
    return out;
  }();
  return build;
}

std::vector<std::string> nvrtc_options(const CompileOptions& opts) {
  if (!is_supported_arch(opts.arch))
    throw Error(Errc::invalid_argument,
                cat("unsupported architecture '", opts.arch, "' (expected one of ",
                    join(supported_archs(), ", "), ")"),
                "compile options");
  // The kernels include no standard headers (NVRTC does not ship them reliably), so no
  // include paths are needed: the embedded headers are the whole include set.
  std::vector<std::string> o{"-arch=" + opts.arch, "-std=c++17", "--ptxas-options=-v",
                             "--fmad=true", "-DNDEBUG"};
  if (opts.lineinfo) o.push_back("-lineinfo");
  o.insert(o.end(), opts.extra.begin(), opts.extra.end());
  return o;
}

std::string content_hash(const std::string& source, const CompileOptions& opts) {
  return hash_of(source, nvrtc_options(opts), opts.arch);
}

namespace {
// A cache hit's build products into `r`.
void take_cache_entry(detail::CacheEntry&& e, CompileResult& r) {
  r.ok = true;
  r.cache_hit = true;
  r.log = std::move(e.log);
  r.cubin = std::move(e.cubin);
  r.ptx = std::move(e.ptx);
  r.kernels = std::move(e.kernels);
  r.build_ms = e.build_ms;
}
}  // namespace

std::optional<CompileResult> load_cached(const std::string& name, const std::string& source,
                                         const CompileOptions& opts) {
  if (!opts.use_cache) return std::nullopt;
  auto t0 = std::chrono::steady_clock::now();
  CompileResult r;
  r.name = name;
  r.arch = opts.arch;
  r.key = hash_of(source, nvrtc_options(opts), opts.arch);
  detail::CubinCache cache(opts.cache_dir.empty() ? default_cache_dir() : opts.cache_dir);
  KeyGuard guard(cache.dir() + "/" + r.key);
  auto e = cache.load(r.key, opts.keep_ptx, nullptr);
  if (!e) return std::nullopt;
  take_cache_entry(std::move(*e), r);
  r.compile_ms = ms_since(t0);
  return r;
}

static bool cache_keeps_ptx() {
  const char* v = std::getenv("SAGE_CACHE_PTX");
  return v && *v && std::string(v) != "0";
}

CompileResult compile(const std::string& name, const std::string& source, const CompileOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  CompileResult r;
  r.name = name;
  r.arch = opts.arch;
  const std::vector<std::string> options = nvrtc_options(opts);
  r.key = hash_of(source, options, opts.arch);
  if (!opts.use_cache) {
    run_nvrtc(source, options, opts.keep_ptx, r);
    r.compile_ms = ms_since(t0);
    return r;
  }

  detail::CubinCache cache(opts.cache_dir.empty() ? default_cache_dir() : opts.cache_dir);
  KeyGuard guard(cache.dir() + "/" + r.key);
  std::string note;
  if (auto e = cache.load(r.key, opts.keep_ptx, &note)) {
    take_cache_entry(std::move(*e), r);
    r.compile_ms = ms_since(t0);
    return r;
  }
  // SAGE_CACHE_PTX=1: the entry keeps the PTX too (NVRTC made it anyway), so that a later request
  // for it (CompileOptions::keep_ptx) is a hit; the PTX tests share such a cache with the CLI's.
  run_nvrtc(source, options, opts.keep_ptx || cache_keeps_ptx(), r);
  // Failed compiles are not stored: the fix is usually in a template or header, which
  // changes the key anyway, but a transient failure (out of memory) must not stick either.
  if (r.ok) {
    detail::CacheEntry e;
    e.key = r.key;
    e.name = r.name;
    e.arch = r.arch;
    e.options = options;
    e.nvrtc_version = nvrtc_version();
    e.nvrtc_build = nvrtc_build();
    e.log = r.log;
    e.kernels = r.kernels;
    e.build_ms = r.build_ms;
    e.cubin = r.cubin;
    e.ptx = r.ptx;
    cache.store(e);
  }
  if (!note.empty()) {  // after the store: the note is about this request, not the entry
    r.cache_note = note + ": recompiled";
    r.log = "sage-tune: " + r.cache_note + "\n" + r.log;
  }
  r.compile_ms = ms_since(t0);
  return r;
}

}  // namespace sage::tuner
