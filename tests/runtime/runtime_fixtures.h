// Helpers for the runtime tests: temporary folders, scoped environment variables, running
// commands, child processes of the test binary, and tune databases holding real compiled
// kernels (compiled by NVRTC, so no GPU is needed to make them).
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/store.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"

namespace sage::test {

namespace fs = std::filesystem;

// A fresh folder under $TMPDIR (or /tmp), removed with its contents at destruction (kept, and
// named on stderr, when SAGE_TEST_KEEP=1: for looking at what a test built).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag = "rt") {
    std::string base = env("TMPDIR");
    if (base.empty()) base = "/tmp";
    std::string tmpl = base + "/sage-" + tag + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    if (env_flag("SAGE_TEST_KEEP")) {
      std::fprintf(stderr, "kept %s\n", path_.c_str());
      return;
    }
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sets (or unsets, with nullopt) an environment variable for the lifetime of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

struct CommandResult {
  int rc = -1;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line, capturing stdout and stderr into `log` (a file path).
inline CommandResult run_command(const std::string& cmd, const std::string& log) {
  // The newline ends a trailing shell comment in `cmd` before the closing parenthesis.
  const int status = std::system(cat("(", cmd, "\n) >'", log, "' 2>&1").c_str());
  CommandResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::error_code ec;
  if (fs::exists(log, ec)) r.output = read_file(log);
  return r;
}

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

// A value of the build's CMakeCache.txt ("" when absent), e.g. CMAKE_COMMAND, CMAKE_GENERATOR.
inline std::string cmake_cache_value(const std::string& binary_dir, const std::string& name) {
  for (const std::string& line : split(read_file(binary_dir + "/CMakeCache.txt"), '\n')) {
    if (!starts_with(line, name + ":")) continue;
    const auto eq = line.find('=');
    if (eq != std::string::npos) return line.substr(eq + 1);
  }
  return {};
}

// ---- real kernels, compiled without a GPU -------------------------------------------------

// The H100's fingerprint as the tuner records it (tests that need no device use it).
inline tuner::DeviceFingerprint fake_h100() { return {"NVIDIA H100 80GB HBM3", 90, 132, 85029158912LL, 13000}; }

// Attention variants of `arch` with `head_dim` in the built-in search space.
inline std::vector<gen::Variant> attention_variants(const std::string& arch, int head_dim) {
  gen::EnumerateOptions eo;
  eo.archs = {arch};
  eo.pipelines = {"mma"};
  std::vector<gen::Variant> out;
  for (auto& v : gen::SearchSpace::builtin().enumerate(eo).variants)
    if (v.get_int("head_dim") == head_dim) out.push_back(v);
  return out;
}
inline gen::Variant variant_named(const std::string& arch, const std::string& name) {
  gen::EnumerateOptions eo;
  eo.archs = {arch};
  for (auto& v : gen::SearchSpace::builtin().enumerate(eo).variants)
    if (v.name == name) return v;
  throw std::runtime_error("no variant " + name);
}

// Compiles `v` (through the cubin cache in `cache_dir`) into a kernel record.
inline tuner::KernelRecord compiled_kernel(const gen::Variant& v, const std::string& cache_dir) {
  tuner::CompileOptions co;
  co.arch = v.arch;
  co.cache_dir = cache_dir;
  tuner::CompileResult r = tuner::VariantBuilder(co).compile(v);
  if (!r.ok) throw std::runtime_error("compile failed: " + r.log);
  return tuner::make_kernel_record(r, v.name, v.arch, tuner::nvrtc_version(), tuner::generator_hash());
}

// Records `k` and a winner for (device, problem) serving it, keyed like the runtime's lookups.
inline tuner::WinnerKey add_winner(tuner::Store& db, const tuner::DeviceFingerprint& device,
                                   const tuner::ProblemKey& problem, const tuner::KernelRecord& k,
                                   double median_us = 100.0) {
  db.record_kernel(k);
  tuner::Winner w;
  w.key = {device, problem, tuner::generator_hash(), tuner::nvrtc_version()};
  w.variant = k.variant;
  w.kernel_hash = k.hash;
  w.median_us = median_us;
  db.set_winner(w);
  return w.key;
}

inline tuner::ProblemKey bucket(int head_dim, bool causal, int seq, int bh, const std::string& policy = "balanced") {
  tuner::ProblemKey p;
  p.head_dim = head_dim;
  p.causal = causal;
  p.dtype = "fp16";
  p.layout = "HND";
  p.seq_q_bucket = seq;
  p.seq_kv_bucket = seq;
  p.bh_bucket = bh;
  p.policy = policy;
  return p;
}

// A shippable system database (what `sage-tune merge` makes: no WAL left beside it) holding
// what `fill` writes.
template <class Fill>
void make_system_db(const std::string& path, const std::string& scratch, Fill fill) {
  {
    tuner::Store src(scratch);
    fill(src);
  }
  tuner::merge_stores({scratch}, path);
}

// ---- child processes of the test binary -------------------------------------------------

// Starts this test binary again with `env` (NAME=VALUE entries) added to this process's
// environment and returns its pid. The child is a fresh process (exec), so it is safe whatever
// CUDA or NVRTC state the parent has; between fork and exec it only calls execve, because
// another thread of the parent (the CUDA driver's) may hold the allocator's lock at the fork.
inline pid_t spawn_self(const std::vector<std::string>& env) {
  std::vector<std::string> all;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const std::string& x : env) replaced |= entry.substr(0, entry.find('=') + 1) == x.substr(0, x.find('=') + 1);
    if (!replaced) all.push_back(entry);
  }
  all.insert(all.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& e : all) envp.push_back(e.data());
  envp.push_back(nullptr);
  char arg0[] = "child";
  char* argv[] = {arg0, nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execve("/proc/self/exe", argv, envp.data());
    ::_exit(127);
  }
  return pid;
}
inline int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace sage::test
