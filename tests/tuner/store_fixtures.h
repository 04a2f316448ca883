// Test data and helpers for the store tests: a temporary directory, sample keys, kernels,
// measurements and winners, and raw SQLite access for tampering with files.
#pragma once
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sage/common/sha256.h"
#include "sage/common/strings.h"
#include "sage/tuner/store.h"

namespace sage::test {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at destruction.
class TempDir {
 public:
  TempDir() {
    std::string base = env("TMPDIR");
    if (base.empty()) base = "/tmp";
    std::string tmpl = base + "/sage-store-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline tuner::DeviceFingerprint h100(int driver = 13000) {
  return {"NVIDIA H100 80GB HBM3", 90, 132, 85029158912LL, driver};
}
inline tuner::DeviceFingerprint a100() { return {"NVIDIA A100-SXM4-80GB", 80, 108, 85899345920LL, 13000}; }

inline tuner::ProblemKey problem(int seq = 4096, bool causal = true, const std::string& policy = "balanced") {
  tuner::ProblemKey p;
  p.head_dim = 128;
  p.causal = causal;
  p.dtype = "fp16";
  p.layout = "HND";
  p.seq_q_bucket = seq;
  p.seq_kv_bucket = seq;
  p.bh_bucket = 128;
  p.policy = policy;
  return p;
}

inline const std::string kGen = "generator-hash-0001";
inline const std::string kNvrtc = "13.0";

inline tuner::WinnerKey winner_key(const tuner::DeviceFingerprint& d = h100(), const tuner::ProblemKey& p = problem()) {
  return {d, p, kGen, kNvrtc};
}

inline std::string variant_name(int i) { return cat("attn_sm90_wgmma_qk-int8-thread_pv-fp8_d128_m128_n", 64 + 16 * i); }

// A kernel whose content hash and bytes are derived from `seed`; `bytes` of cubin.
inline tuner::KernelRecord kernel(int seed, std::size_t bytes = 4096, const std::string& variant = {}) {
  tuner::KernelRecord k;
  k.hash = sha256_hex(cat("kernel-content-", seed));
  k.variant = variant.empty() ? variant_name(seed) : variant;
  k.arch = "sm_90a";
  k.nvrtc_version = kNvrtc;
  k.generator_hash = kGen;
  k.cubin.resize(bytes);
  std::uint32_t x = 2166136261u ^ std::uint32_t(seed);
  for (auto& c : k.cubin) {
    x = x * 16777619u + 12345u;
    c = char(x >> 24);
  }
  k.stats.registers = 168;
  k.stats.spill_stores = 0;
  k.stats.smem_bytes = 98304;
  k.stats.compile_ms = 1234.5;
  return k;
}

inline tuner::Measurement measurement(const tuner::KernelRecord& k, double median_us,
                                      const tuner::DeviceFingerprint& d = h100(),
                                      const tuner::ProblemKey& p = problem()) {
  tuner::Measurement m;
  m.device = d;
  m.problem = p;
  m.variant = k.variant;
  m.kernel_hash = k.hash;
  m.generator_hash = kGen;
  m.nvrtc_version = kNvrtc;
  m.status = tuner::MeasurementStatus::passed;
  m.gaussian = tuner::Accuracy{0.99995, 0.011, 0.0021};
  m.outlier = tuner::Accuracy{0.9991, 0.032, 0.0087};
  m.median_us = median_us;
  m.p10_us = median_us * 0.99;
  m.p90_us = median_us * 1.01;
  m.mad_us = median_us * 0.004;
  m.samples = 50;
  m.tops = 1000.0 * 100.0 / median_us;
  m.seed = 7;
  m.seed_outlier = 8;
  return m;
}

inline tuner::Winner winner(const tuner::KernelRecord& k, double median_us, const tuner::WinnerKey& key = winner_key()) {
  tuner::Winner w;
  w.key = key;
  w.variant = k.variant;
  w.kernel_hash = k.hash;
  w.median_us = median_us;
  w.tops = 1000.0 * 100.0 / median_us;
  w.noise = 0.02;
  return w;
}

// Measurement filters (built field by field: partial aggregate initialization trips
// -Wmissing-field-initializers).
inline tuner::MeasurementFilter of_variant(const std::string& v, std::optional<tuner::ProblemKey> p = {}) {
  tuner::MeasurementFilter f;
  f.variant = v;
  f.problem = std::move(p);
  return f;
}
inline tuner::MeasurementFilter of_problem(const tuner::ProblemKey& p) {
  tuner::MeasurementFilter f;
  f.problem = p;
  return f;
}
inline tuner::MeasurementFilter on_device(const std::string& key) {
  tuner::MeasurementFilter f;
  f.device_key = key;
  return f;
}
inline tuner::MeasurementFilter with_status(tuner::MeasurementStatus s) {
  tuner::MeasurementFilter f;
  f.status = s;
  return f;
}

// Options that keep warnings out of the test log but let the test look at them.
struct WarningSink {
  std::vector<std::string> messages;
  tuner::OpenOptions options() {
    tuner::OpenOptions o;
    o.warn = [this](const std::string& m) { messages.push_back(m); };
    return o;
  }
  bool contains(const std::string& text) const {
    for (const auto& m : messages)
      if (m.find(text) != std::string::npos) return true;
    return false;
  }
};

// Raw SQLite access, bypassing the store, for tampering and for inspecting files.
class RawDb {
 public:
  explicit RawDb(const std::string& path, int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) {
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK)
      throw std::runtime_error("cannot open " + path + ": " + sqlite3_errmsg(db_));
    sqlite3_busy_timeout(db_, 10000);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  sqlite3* get() { return db_; }
  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error("exec failed: " + msg + " in: " + sql.substr(0, 80));
    }
  }
  // First column of the first row as text ("" when no row).
  std::string scalar(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("prepare failed: ") + sqlite3_errmsg(db_));
    std::string out;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
  }
  long long count(const std::string& table) { return std::stoll(scalar("SELECT count(*) FROM " + table)); }

 private:
  sqlite3* db_ = nullptr;
};

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace sage::test
