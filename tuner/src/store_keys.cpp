// Keys of the tune store (device fingerprint, problem bucket, winner key), their canonical
// strings, parsing and field-by-field comparison; default database paths.
#include <algorithm>
#include <charconv>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "sage/common/strings.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/store.h"

#ifndef SAGE_SYSTEM_DB_PATH
#define SAGE_SYSTEM_DB_PATH "/usr/local/share/sage-tune/system.db"
#endif
#ifndef SAGE_TUNE_VERSION
#define SAGE_TUNE_VERSION "0.0.0"
#endif

namespace sage::tuner {

namespace {

template <class Int>
Int parse_int(std::string_view s, std::string_view field, std::string_view key, std::string_view what) {
  Int v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    throw Error(Errc::invalid_argument,
                cat(what, " '", key, "': field ", field, " needs an integer, got '", s, "'"));
  return v;
}

// Strips `prefix` from `s` or throws naming the field.
std::string_view expect_prefix(std::string_view s, std::string_view prefix, std::string_view field,
                               std::string_view key, std::string_view what) {
  if (!starts_with(s, prefix))
    throw Error(Errc::invalid_argument,
                cat(what, " '", key, "': field ", field, " must start with '", prefix, "', got '", s, "'"));
  return s.substr(prefix.size());
}

bool one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  return std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return v == a; });
}

}  // namespace

// ---- DeviceFingerprint ----------------------------------------------------------------------

std::string DeviceFingerprint::key() const {
  return cat(name, "|cc", cc, "|sm", sm_count, "|mem", memory_bytes, "|drv", driver_version);
}

void DeviceFingerprint::validate() const {
  if (name.empty()) throw Error(Errc::invalid_argument, "device fingerprint: empty name");
  if (name.find('|') != std::string::npos)
    throw Error(Errc::invalid_argument, "device fingerprint: name '" + name + "' contains '|'");
  if (cc <= 0 || sm_count <= 0 || memory_bytes <= 0 || driver_version <= 0)
    throw Error(Errc::invalid_argument,
                "device fingerprint '" + key() + "': cc, sm_count, memory_bytes and driver_version must be > 0");
}

DeviceFingerprint DeviceFingerprint::parse(std::string_view key) {
  const char* what = "device key";
  auto parts = split(key, '|');
  if (parts.size() != 5)
    throw Error(Errc::invalid_argument,
                cat(what, " '", key, "': expected NAME|ccN|smN|memN|drvN (5 fields), got ", parts.size()));
  DeviceFingerprint d;
  d.name = parts[0];
  d.cc = parse_int<int>(expect_prefix(parts[1], "cc", "cc", key, what), "cc", key, what);
  d.sm_count = parse_int<int>(expect_prefix(parts[2], "sm", "sm_count", key, what), "sm_count", key, what);
  d.memory_bytes =
      parse_int<std::int64_t>(expect_prefix(parts[3], "mem", "memory_bytes", key, what), "memory_bytes", key, what);
  d.driver_version =
      parse_int<int>(expect_prefix(parts[4], "drv", "driver_version", key, what), "driver_version", key, what);
  d.validate();
  return d;
}

// ---- ProblemKey -------------------------------------------------------------------------------

std::string ProblemKey::str() const {
  return cat("d", head_dim, "_", causal ? "causal" : "noncausal", "_", dtype, "_", layout, "_q", seq_q_bucket,
             "_kv", seq_kv_bucket, "_bh", bh_bucket, "_", policy, varlen ? "_varlen" : "", window ? "_window" : "",
             kv8 ? "_kv8" : "", paged ? "_paged" : "");
}

void ProblemKey::validate() const {
  auto bad = [&](const std::string& why) {
    throw Error(Errc::invalid_argument, "problem key '" + str() + "': " + why);
  };
  if (head_dim <= 0) bad("head_dim must be > 0");
  if (!one_of(dtype, {"fp16", "bf16"})) bad("dtype must be fp16 or bf16, got '" + dtype + "'");
  if (!one_of(layout, {"HND", "NHD"})) bad("layout must be HND or NHD, got '" + layout + "'");
  if (seq_q_bucket <= 0 || seq_kv_bucket <= 0 || bh_bucket <= 0) bad("buckets must be > 0");
  if (!one_of(policy, {"accurate", "balanced", "fast"}))
    bad("policy must be accurate, balanced or fast, got '" + policy + "'");
  if (kv8 && !paged) bad("kv8 (FP8 pages) is a paged bucket's");
  if (paged && seq_q_bucket <= 128 && (seq_q_bucket & (seq_q_bucket - 1)) != 0)
    bad("a paged bucket of up to 128 queries is a power of two");
  if (window && !causal) bad("a sliding window's bucket is causal");
  if (paged && (varlen || window))
    bad("paged buckets with variable-length queries or a sliding window are not tuned (they take the defaults)");
  if (varlen && layout != "NHD") bad("a variable-length batch is packed [total, heads, head_dim]: layout NHD");
}

ProblemKey ProblemKey::parse(std::string_view s) {
  const char* what = "problem key";
  auto parts = split(s, '_');
  ProblemKey k;
  // Optional suffixes, in this order: varlen, window, kv8 (FP8 pages), paged.
  auto pop = [&](const char* suffix, bool& flag) {
    if (parts.size() > 8 && parts.back() == suffix) {
      flag = true;
      parts.pop_back();
    }
  };
  pop("paged", k.paged);
  pop("kv8", k.kv8);
  pop("window", k.window);
  pop("varlen", k.varlen);
  if (parts.size() != 8)
    throw Error(Errc::invalid_argument,
                cat(what, " '", s, "': expected dD_causal|noncausal_DTYPE_LAYOUT_qN_kvN_bhN_POLICY (8 fields), then "
                    "optionally varlen, window, kv8 and paged; got ", parts.size(), " fields"));
  k.head_dim = parse_int<int>(expect_prefix(parts[0], "d", "head_dim", s, what), "head_dim", s, what);
  if (parts[1] == "causal") k.causal = true;
  else if (parts[1] == "noncausal") k.causal = false;
  else
    throw Error(Errc::invalid_argument,
                cat(what, " '", s, "': field causal must be 'causal' or 'noncausal', got '", parts[1], "'"));
  k.dtype = parts[2];
  k.layout = parts[3];
  k.seq_q_bucket = parse_int<int>(expect_prefix(parts[4], "q", "seq_q_bucket", s, what), "seq_q_bucket", s, what);
  k.seq_kv_bucket =
      parse_int<int>(expect_prefix(parts[5], "kv", "seq_kv_bucket", s, what), "seq_kv_bucket", s, what);
  k.bh_bucket = parse_int<int>(expect_prefix(parts[6], "bh", "bh_bucket", s, what), "bh_bucket", s, what);
  k.policy = parts[7];
  k.validate();
  return k;
}

// ---- WinnerKey ----------------------------------------------------------------------------------

std::vector<FieldDiff> diff_keys(const WinnerKey& a, const WinnerKey& b) {
  std::vector<FieldDiff> d;
  auto cmp = [&](const char* field, const auto& x, const auto& y) {
    if (!(x == y)) d.push_back({field, cat(x), cat(y)});
  };
  cmp("device.name", a.device.name, b.device.name);
  cmp("device.cc", a.device.cc, b.device.cc);
  cmp("device.sm_count", a.device.sm_count, b.device.sm_count);
  cmp("device.memory_bytes", a.device.memory_bytes, b.device.memory_bytes);
  cmp("device.driver_version", a.device.driver_version, b.device.driver_version);
  cmp("nvrtc_version", a.nvrtc_version, b.nvrtc_version);
  cmp("generator_hash", a.generator_hash, b.generator_hash);
  cmp("problem.head_dim", a.problem.head_dim, b.problem.head_dim);
  cmp("problem.causal", a.problem.causal ? "causal" : "noncausal", b.problem.causal ? "causal" : "noncausal");
  cmp("problem.dtype", a.problem.dtype, b.problem.dtype);
  cmp("problem.layout", a.problem.layout, b.problem.layout);
  cmp("problem.seq_q_bucket", a.problem.seq_q_bucket, b.problem.seq_q_bucket);
  cmp("problem.seq_kv_bucket", a.problem.seq_kv_bucket, b.problem.seq_kv_bucket);
  cmp("problem.bh_bucket", a.problem.bh_bucket, b.problem.bh_bucket);
  cmp("problem.policy", a.problem.policy, b.problem.policy);
  cmp("problem.paged", std::string(a.problem.paged ? "paged" : "dense"), std::string(b.problem.paged ? "paged" : "dense"));
  cmp("problem.kv8", std::string(a.problem.kv8 ? "FP8 pages" : "16-bit"), std::string(b.problem.kv8 ? "FP8 pages" : "16-bit"));
  cmp("problem.varlen", std::string(a.problem.varlen ? "varlen" : "fixed"), std::string(b.problem.varlen ? "varlen" : "fixed"));
  cmp("problem.window", std::string(a.problem.window ? "window" : "none"), std::string(b.problem.window ? "window" : "none"));
  return d;
}

// ---- statuses -------------------------------------------------------------------------------------

const char* to_string(MeasurementStatus s) {
  switch (s) {
    case MeasurementStatus::passed: return "passed";
    case MeasurementStatus::incorrect: return "incorrect";
    case MeasurementStatus::failed: return "failed";
    case MeasurementStatus::unsupported: return "unsupported";
  }
  return "failed";
}

MeasurementStatus parse_measurement_status(std::string_view s) {
  if (s == "passed") return MeasurementStatus::passed;
  if (s == "incorrect") return MeasurementStatus::incorrect;
  if (s == "failed") return MeasurementStatus::failed;
  if (s == "unsupported") return MeasurementStatus::unsupported;
  throw Error(Errc::invalid_argument,
              cat("measurement status '", s, "': expected passed, incorrect, failed or unsupported"));
}

const char* to_string(StoreHealth::State s) {
  switch (s) {
    case StoreHealth::State::ok: return "ok";
    case StoreHealth::State::missing: return "missing";
    case StoreHealth::State::corrupt: return "corrupt";
    case StoreHealth::State::too_new: return "too_new";
    case StoreHealth::State::foreign: return "foreign";
    case StoreHealth::State::unreadable: return "unreadable";
  }
  return "unreadable";
}

const char* to_string(LookupResult::Status s) {
  switch (s) {
    case LookupResult::Status::found: return "found";
    case LookupResult::Status::miss: return "miss";
    case LookupResult::Status::needs_rebuild: return "needs_rebuild";
  }
  return "miss";
}

// ---- paths and versions ----------------------------------------------------------------------------

std::string default_user_db_path() {
  std::string p = env("SAGE_DB");
  if (!p.empty()) return p;
  return (std::filesystem::path(cache_dir()) / "tune.db").string();
}

std::string default_system_db_path() {
  std::string p = env("SAGE_SYSTEM_DB");
  if (!p.empty()) return p;
  return SAGE_SYSTEM_DB_PATH;
}

std::string store_tool_version() { return std::string("sage-tune ") + SAGE_TUNE_VERSION; }

// ---- kernels from the compiler -------------------------------------------------------------------

KernelRecord make_kernel_record(const CompileResult& r, const std::string& variant, const std::string& arch,
                                const std::string& nvrtc_version, const std::string& generator_hash) {
  if (!r.ok) throw Error(Errc::invalid_argument, "kernel '" + r.name + "' did not compile: nothing to store");
  KernelRecord k;
  k.hash = r.key;
  k.variant = variant;
  k.arch = arch;
  k.nvrtc_version = nvrtc_version;
  k.generator_hash = generator_hash;
  k.cubin = r.cubin;
  k.stats.compile_ms = r.compile_ms;
  nlohmann::json report = nlohmann::json::array();
  for (const KernelResources& kr : r.kernels) {
    k.stats.registers = std::max(k.stats.registers, kr.registers);
    k.stats.spill_stores += kr.spill_stores;
    k.stats.spill_loads += kr.spill_loads;
    k.stats.smem_bytes = std::max(k.stats.smem_bytes, kr.smem_static);
    report.push_back({{"kernel", kr.kernel},
                      {"registers", kr.registers},
                      {"spill_stores", kr.spill_stores},
                      {"spill_loads", kr.spill_loads},
                      {"stack_frame", kr.stack_frame},
                      {"smem_static", kr.smem_static},
                      {"cmem0", kr.cmem0},
                      {"barriers", kr.barriers}});
  }
  k.stats.report_json = report.dump();
  return k;
}

}  // namespace sage::tuner
