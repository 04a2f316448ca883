#include "sage/tuner/tune.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "sage/common/cuda_driver.h"
#include "sage/common/embedded.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/accuracy.h"
#include "sage/tuner/gate.h"
#include "sage/tuner/timing.h"
#include "sage/tuner/variants.h"

namespace sage::tuner {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

bool param_matches(const tmpl::Value& have, const std::string& w) {
  if (have.type() == tmpl::Value::Type::boolean) return (w == "true") == have.as_bool() && (w == "true" || w == "false");
  return have.str() == w;
}

}  // namespace

std::string variant_record_json(const gen::Variant& v) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [k, val] : v.params) {
    switch (val.type()) {
      case tmpl::Value::Type::boolean: params[k] = val.as_bool(); break;
      case tmpl::Value::Type::integer: params[k] = val.as_int(); break;
      default: params[k] = val.str();
    }
  }
  return nlohmann::json{{"pipeline", v.pipeline}, {"arch", v.arch}, {"params", params},
                        {"kernel_config", kernel_config(v).str()}}
      .dump();
}

std::optional<KernelConfig> stored_kernel_config(const VariantRecord& r) {
  try {
    const nlohmann::json j = nlohmann::json::parse(r.params_json);
    if (!j.is_object() || !j.contains("kernel_config")) return std::nullopt;
    return KernelConfig::parse(j["kernel_config"].get<std::string>());
  } catch (const std::exception&) {
    return std::nullopt;  // an older or hand-edited record: the caller falls back to the search space
  }
}

std::string default_variant(const std::string& arch, int head_dim, const std::string& policy, int seq_kv,
                            int causal, int seq_q, bool rows16, int bh, int sms, bool varlen, bool window, bool paged,
                            bool kv8) {
  return default_match(arch, head_dim, policy, seq_kv, causal, seq_q, rows16, bh, sms, varlen, window, paged, kv8)
      .variant;
}

namespace {
// configs/defaults.yaml, parsed once: it is embedded, so it cannot change while the process runs
// (parsing it took about 9 ms on a 2-core machine, up to three times at the runtime's first call of a bucket).
// yaml-cpp's nodes are not safe to read from several threads at once, so every read of the tree
// holds defaults_mutex(), and reads go through const nodes, whose lookups never add a key.
std::mutex& defaults_mutex() {
  static std::mutex m;
  return m;
}
const YAML::Node& defaults_root() {  // with defaults_mutex() held
  static const YAML::Node root = [] {
    const EmbeddedFile* f = embedded_configs::find("defaults.yaml");
    if (!f) throw Error(Errc::internal, "configs/defaults.yaml is not embedded in this build");
    try {
      return YAML::Load(std::string(f->view()));
    } catch (const YAML::ParserException& e) {
      throw Error(Errc::parse_error, e.msg, cat("configs/defaults.yaml:", e.mark.line + 1));
    }
  }();
  return root;
}
int measured_sms_of(const YAML::Node& root, const std::string& arch) {
  const YAML::Node all = root["measured_sms"];
  if (!all || !all.IsMap()) return 0;
  const YAML::Node m = all[arch];
  return m ? m.as<int>() : 0;
}

// A YAML scalar as an int, else -1 (the entry does not name it).
int named_int(const YAML::Node& n) { return n ? n.as<int>() : -1; }
int named_bool(const YAML::Node& n) { return n ? int(n.as<bool>()) : -1; }

// An architecture's entries (its continuation's after them), read from the tree once.
std::vector<DefaultEntry> read_entries(const YAML::Node& root, const std::string& arch) {
  const YAML::Node list = root["defaults"][arch];
  if (!list || !list.IsSequence()) throw Error(Errc::not_found, "configs/defaults.yaml has no defaults for " + arch);
  // An arch's list may end in `- continue: <arch>`: that arch's entries follow (Blackwell's lists
  // continue with sm_89's). The entries are walked in order, the continuation's after the list's.
  std::vector<DefaultEntry> out;
  std::set<std::string> seen{arch};
  std::string at = arch;
  while (!at.empty()) {
    // A fresh node each turn: assigning to a YAML::Node writes into the node it refers to.
    const YAML::Node l = root["defaults"][at];
    const std::string in = at;
    at.clear();
    int i = 0;
    for (const YAML::Node& entry : l) {
      if (const YAML::Node c = entry["continue"]) {
        at = c.as<std::string>();
        if (!seen.insert(at).second)
          throw Error(Errc::parse_error, cat("configs/defaults.yaml: the ", arch, " list continues in a loop at ", at));
        if (!root["defaults"][at] || !root["defaults"][at].IsSequence())
          throw Error(Errc::not_found, cat("configs/defaults.yaml: the ", arch, " list continues with ", at,
                                           ", which has no defaults"));
        break;
      }
      DefaultEntry e;
      e.rule.head_dim = entry["head_dim"].as<int>();
      e.rule.paged = named_bool(entry["paged"]) == 1;
      e.rule.window = named_bool(entry["window"]) == 1;
      e.rule.varlen = named_bool(entry["varlen"]) == 1;
      e.rule.dense = e.rule.window && named_bool(entry["varlen"]) == 0;
      if (named_bool(entry["varlen"]) == 0 && (!e.rule.window || e.rule.paged))
        throw Error(Errc::parse_error, cat("configs/defaults.yaml: ", arch, " entry ", i,
                                           ": varlen: false is for window: true entries (windows of dense calls only)"));
      e.rule.kv8 = named_bool(entry["kv8"]) == 1;
      if (e.rule.kv8 && !e.rule.paged)
        throw Error(Errc::parse_error, cat("configs/defaults.yaml: ", arch, " entry ", i, ": kv8 (FP8 pages) needs paged: true"));
      e.rule.max_seq_kv = named_int(entry["max_seq_kv"]);
      e.rule.max_seq_q = named_int(entry["max_seq_q"]);
      e.rule.min_seq_q = named_int(entry["min_seq_q"]);
      e.rule.max_bh = named_int(entry["max_bh"]);
      e.rule.causal = named_bool(entry["causal"]);
      e.rule.rows16 = named_bool(entry["rows16"]);
      if (const YAML::Node pols = entry["policies"])
        for (const YAML::Node& x : pols) e.policies += (e.policies.empty() ? "" : ",") + x.as<std::string>();
      for (const auto& kv : entry["params"]) e.params.emplace_back(kv.first.as<std::string>(), kv.second.as<std::string>());
      e.list = in;
      e.index = i++;
      e.line = entry.Mark().is_null() ? 0 : entry.Mark().line + 1;
      for (const auto& kv : entry) {
        const std::string k = kv.first.as<std::string>();
        if (k == "params") continue;
        std::string val;
        if (kv.second.IsSequence()) {
          for (const YAML::Node& x : kv.second) val += (val.empty() ? "" : ",") + x.as<std::string>();
        } else {
          val = kv.second.as<std::string>();
        }
        e.conditions += cat(e.conditions.empty() ? "" : ", ", k, " ", val);
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

struct ArchDefaults {
  std::vector<DefaultEntry> entries;
  int measured_sms = 0;
};

// Each architecture's entries, parsed once (the file is embedded: it cannot change while the
// process runs). Never destroyed: the entries' rules view their own strings.
const ArchDefaults& arch_defaults(const std::string& arch) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<ArchDefaults>>* parsed = new std::map<std::string, std::unique_ptr<ArchDefaults>>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = parsed->find(arch);
  if (it != parsed->end()) return *it->second;
  auto d = std::make_unique<ArchDefaults>();
  {
    std::lock_guard<std::mutex> yaml_lock(defaults_mutex());
    d->entries = read_entries(defaults_root(), arch);
    d->measured_sms = measured_sms_of(defaults_root(), arch);
  }
  for (DefaultEntry& e : d->entries) e.rule.policies = e.policies;  // in place now: the views stay valid
  return *parsed->emplace(arch, std::move(d)).first->second;
}

// The variants of an architecture's search space (parsing it and enumerating cost ~12 ms: once).
const std::vector<gen::Variant>& arch_variants(const std::string& arch) {
  static std::mutex mu;
  static std::map<std::string, gen::Enumeration>* enumerations = new std::map<std::string, gen::Enumeration>;
  std::lock_guard<std::mutex> lock(mu);
  auto cached = enumerations->find(arch);
  if (cached == enumerations->end()) {
    static const gen::SearchSpace space = gen::SearchSpace::builtin();
    gen::EnumerateOptions eo;
    eo.archs = {arch};
    cached = enumerations->emplace(arch, space.enumerate(eo)).first;
  }
  return cached->second.variants;  // map nodes never move
}
}  // namespace

int measured_sms(const std::string& arch) {
  try {
    return arch_defaults(arch).measured_sms;
  } catch (const Error& e) {
    if (e.code() != Errc::not_found) throw;
    std::lock_guard<std::mutex> lock(defaults_mutex());
    return measured_sms_of(defaults_root(), arch);
  }
}

int pairs_at_measured_sms(const std::string& arch, int pairs, int sms) {
  return default_pairs(pairs, measured_sms(arch), sms);
}

const std::vector<DefaultEntry>& default_entries(const std::string& arch) { return arch_defaults(arch).entries; }

std::optional<std::string> entry_variant(const std::string& arch, const DefaultEntry& e) {
  std::string pipeline;
  for (const auto& [k, v] : e.params)
    if (k == "pipeline") pipeline = v;
  for (const gen::Variant& v : arch_variants(arch)) {
    if (v.pipeline != pipeline) continue;
    auto hd = v.params.find("head_dim");
    if (hd == v.params.end() || hd->second.as_int() != e.rule.head_dim) continue;
    bool all = true;
    for (const auto& [k, want] : e.params) {
      if (k == "pipeline") continue;
      auto it = v.params.find(k);
      if (it == v.params.end() || !param_matches(it->second, want)) {
        all = false;
        break;
      }
    }
    if (all) return v.name;
  }
  return std::nullopt;
}

DefaultMatch default_match(const std::string& arch, int head_dim, const std::string& policy, int seq_kv, int causal,
                           int seq_q, bool rows16, int bh, int sms, bool varlen, bool window, bool paged, bool kv8) {
  const ArchDefaults& d = arch_defaults(arch);  // Error(not_found) where the file has no list for arch
  DefaultCall call;
  call.head_dim = head_dim;
  call.policy = policy;
  call.seq_kv = seq_kv;
  call.causal = causal;
  call.seq_q = seq_q;
  call.rows16 = rows16;
  call.bh = default_pairs(bh, d.measured_sms, sms);
  call.varlen = varlen;
  call.window = window;
  call.paged = paged;
  call.kv8 = paged && kv8;
  for (const DefaultEntry& e : d.entries) {
    if (!default_rule_matches(e.rule, call)) continue;
    std::optional<std::string> v = entry_variant(arch, e);
    if (!v)
      throw Error(Errc::not_found, cat("configs/defaults.yaml: the ", arch, " default for head_dim ", head_dim,
                                       " is not a variant of the search space (or was pruned)"));
    DefaultMatch m;
    m.variant = *v;
    m.bh = call.bh;
    m.list = e.list;
    m.index = e.index;
    m.line = e.line;
    m.conditions = e.conditions;
    return m;
  }
  throw Error(Errc::not_found, cat("configs/defaults.yaml has no ", arch, " default for head_dim ", head_dim,
                                   " and policy ", policy,
                                   paged              ? " for paged KV caches"
                                   : window && varlen ? " for variable-length batches with a sliding window"
                                   : window           ? " for sliding windows"
                                   : varlen           ? " for variable-length batches"
                                                      : ""));
}

namespace {
// `own` where it differs from `base` (two default_variant lookups); nullopt where they agree or
// there is no default.
std::optional<std::string> default_if_it_differs(const std::function<std::string()>& own,
                                                 const std::function<std::string()>& base) {
  try {
    std::string v = own();
    if (v != base()) return v;
  } catch (const Error& e) {
    if (e.code() != Errc::not_found) throw;
  }
  return std::nullopt;
}
}  // namespace

std::optional<std::string> rows16_default(const std::string& arch, int head_dim, const std::string& policy, int seq_kv,
                                          int causal, int seq_q, int bh, int sms) {
  return default_if_it_differs(
      [&] { return default_variant(arch, head_dim, policy, seq_kv, causal, seq_q, true, bh, sms); },
      [&] { return default_variant(arch, head_dim, policy, seq_kv, causal, seq_q, false, bh, sms); });
}

std::optional<std::string> pairs_default(const std::string& arch, int head_dim, const std::string& policy, int seq_kv,
                                         int causal, int seq_q, bool rows16, int pairs, int bh_bucket, int sms, bool paged,
                                         bool kv8) {
  if (pairs <= 0 || pairs == bh_bucket) return std::nullopt;
  return default_if_it_differs(
      [&] { return default_variant(arch, head_dim, policy, seq_kv, causal, seq_q, rows16, pairs, sms, false, false, paged, kv8); },
      [&] {
        return default_variant(arch, head_dim, policy, seq_kv, causal, seq_q, rows16, bh_bucket, sms, false, false, paged, kv8);
      });
}

bool serves(const KernelConfig& c, const ProblemKey& k) { return not_served_why(c, k).empty(); }

std::string not_served_why(const KernelConfig& c, const ProblemKey& k) {
  if (k.kv8 && !has_paged_fp8_entry(c)) return "reads no FP8 pages";
  if (k.paged && !has_paged_entry(c)) return "reads no paged KV cache";
  if (k.varlen && !has_varlen_entry(c)) return "takes no variable-length batch";
  if (k.window && !has_window_entry(c)) return "takes no sliding window";
  return {};
}

std::optional<std::string> key_pairs_default(const std::string& arch, const ProblemKey& k, bool rows16, int pairs,
                                             int sms) {
  if (pairs <= 0 || pairs == k.bh_bucket) return std::nullopt;
  return default_if_it_differs([&] { return key_default(arch, k, pairs, sms, rows16); },
                               [&] { return key_default(arch, k, k.bh_bucket, sms, rows16); });
}

std::optional<KernelConfig> variant_config(const std::string& arch, const std::string& name) {
  for (const gen::Variant& v : arch_variants(arch))
    if (v.name == name) return kernel_config(v);
  return std::nullopt;
}

std::string key_default(const std::string& arch, const ProblemKey& k, int bh, int sms, bool rows16) {
  const bool dense = !k.paged && !k.varlen && !k.window;
  // A window's call: its `window` entries, then the varlen ones, read as a non-causal call of its
  // window's keys (each query tile sees about that many).
  return default_variant(arch, k.head_dim, k.policy, k.seq_kv_bucket, k.causal && !k.window ? 1 : 0, k.seq_q_bucket,
                         rows16 && dense, bh > 0 ? bh : k.bh_bucket, sms, k.varlen && !k.paged, k.window, k.paged,
                         k.kv8);
}

namespace {
// The problem set of a run (--problems or the built-in one), its policies and shard checked.
ProblemsConfig run_config(const TuneOptions& opts) {
  ProblemsConfig cfg = opts.problems_file.empty() ? ProblemsConfig::builtin() : ProblemsConfig::from_file(opts.problems_file);
  for (const auto& p : opts.policies) cfg.policy(p);  // validates the names
  if (opts.shard_count < 1 || opts.shard_index < 0 || opts.shard_index >= opts.shard_count)
    throw Error(Errc::invalid_argument, cat("bad shard ", opts.shard_index, "/", opts.shard_count));
  return cfg;
}

// This shard's problems: i, i + n, ... of the set.
std::vector<ProblemKey> shard_of(const ProblemsConfig& cfg, const TuneOptions& opts) {
  std::vector<ProblemKey> shapes;
  for (std::size_t i = 0; i < cfg.problems.size(); ++i)
    if (int(i) % opts.shard_count == opts.shard_index) shapes.push_back(cfg.problems[i]);
  return shapes;
}

// A bucket's candidates among `vs`: its head dim's variants that serve it (a paged bucket's: the
// readers of such pages), the default (`dflt`) first: it is the speed-up baseline and an early
// bar for abandoning.
std::vector<const gen::Variant*> candidates_of(const std::vector<gen::Variant>& vs, const ProblemKey& k,
                                               const std::string& dflt) {
  std::vector<const gen::Variant*> cands;
  for (const gen::Variant& v : vs)
    if (v.get_int("head_dim") == k.head_dim && serves(kernel_config(v), k)) cands.push_back(&v);
  std::stable_partition(cands.begin(), cands.end(), [&](const gen::Variant* v) { return v->name == dflt; });
  return cands;
}

// What calls a bucket holds, in words.
std::string calls_of(const ProblemKey& k) {
  if (k.kv8) return "FP8 pages of a paged KV cache";
  if (k.paged) return "paged KV caches";
  if (k.varlen && k.window) return "variable-length batches with a sliding window";
  if (k.varlen) return "variable-length batches";
  if (k.window) return "sliding windows";
  return "attention";
}

// The variants a run compiles for `arch`: both pipelines', through --filter.
gen::Enumeration run_variants(const TuneOptions& opts, const std::string& arch) {
  gen::EnumerateOptions eo;
  eo.archs = {arch};
  eo.pipelines = {"mma", "wgmma"};
  eo.filter = opts.filter;
  return gen::SearchSpace::builtin().enumerate(eo);
}
}  // namespace

std::string unservable_why(const std::string& arch, const ProblemKey& k) {
  for (const gen::Variant& v : arch_variants(arch))
    if (v.pipeline != "reference" && v.params.count("head_dim") && v.get_int("head_dim") == k.head_dim &&
        serves(kernel_config(v), k))
      return {};
  return cat("no ", arch, " variant takes ", calls_of(k), " at head dim ", k.head_dim);
}

TunePlan plan_tune(const TuneOptions& opts, const std::string& arch, int sms) {
  const ProblemsConfig cfg = run_config(opts);
  TunePlan plan;
  plan.arch = arch;
  const gen::Enumeration en = run_variants(opts, arch);
  plan.variants = int(en.variants.size());
  for (const ProblemKey& shape : shard_of(cfg, opts)) {
    TunePlanEntry e;
    e.key = shape;
    e.key.policy = opts.policies.front();
    try {
      e.default_variant = key_default(arch, e.key, 0, sms);
    } catch (const Error& err) {
      if (err.code() != Errc::not_found) throw;
      e.note = err.message();
    }
    for (const gen::Variant* v : candidates_of(en.variants, e.key, e.default_variant)) e.candidates.push_back(v->name);
    if (!e.default_variant.empty() && (e.candidates.empty() || e.candidates.front() != e.default_variant))
      e.note = "the default is not among the candidates (--filter, or pruned): no speed-up column";
    if (const std::string why = unservable_why(arch, e.key); !why.empty()) e.note = why + ": tune skips it";
    plan.measurements += e.candidates.size();
    plan.problems.push_back(std::move(e));
  }
  return plan;
}

TuneReport tune(const TuneOptions& opts, const std::function<void(const TuneProgress&)>& on_progress) {
  const double t0 = now_s();
  TuneReport rep;
  const ProblemsConfig cfg = run_config(opts);
  if (opts.devices.empty()) throw Error(Errc::invalid_argument, "no device to tune on");
  std::string why;
  if (!cu::have_device(&why)) throw Error(Errc::no_device, "tune needs a GPU: " + why);
  int ndev = 0;
  SAGE_CU(cuDeviceGetCount(&ndev));
  for (int d : opts.devices)
    if (d < 0 || d >= ndev) throw Error(Errc::invalid_argument, cat("device ", d, " does not exist (", ndev, " visible)"));

  rep.db_path = opts.db_path.empty() ? default_user_db_path() : opts.db_path;
  Store store(rep.db_path);
  const std::string gen_hash = generator_hash();
  const std::string nvrtc = nvrtc_version();

  // Devices and their architectures.
  std::map<std::string, std::vector<gen::Variant>> variants_by_arch;
  std::map<std::string, std::map<std::string, CompileResult>> compiled_by_arch;
  std::vector<std::string> dev_arch;
  for (int d : opts.devices) {
    DeviceFingerprint fp = fingerprint_device(d);
    rep.devices.push_back(fp);
    store.record_device(fp);
    dev_arch.push_back(arch_for_cc(fp.cc));
  }
  // ---- compile every variant of every architecture involved (parallel, cached) ------------
  const double tc = now_s();
  for (const std::string& arch : dev_arch) {
    if (variants_by_arch.count(arch)) continue;
    gen::Enumeration en = run_variants(opts, arch);
    std::vector<gen::Variant>& vs = variants_by_arch[arch];
    vs = en.variants;
    CompileOptions co;
    co.arch = arch;
    co.cache_dir = opts.cache_dir;
    VariantBuilder builder(co);
    std::vector<CompileResult> res = builder.compile_all(vs, opts.compile_jobs, [&](const Progress& p) {
      if (on_progress) on_progress({"compile", p.done, p.total, p.last});
    });
    for (std::size_t i = 0; i < vs.size(); ++i) {
      const gen::Variant& v = vs[i];
      CompileResult& r = res[i];
      ++rep.variants;
      VariantRecord vr;
      vr.name = v.name;
      vr.params_hash = v.params_hash;
      vr.generator_hash = gen_hash;
      vr.params_json = variant_record_json(v);
      store.record_variant(vr);
      if (!r.ok) {
        ++rep.compile_failed;
        rep.warnings.push_back(v.name + ": compile failed: " + join(error_lines(r.log, 3), " | "));
      } else {
        ++rep.compiled;
        if (r.cache_hit) ++rep.cache_hits;
        if (r.spills()) ++rep.spilled;
        store.record_kernel(make_kernel_record(r, v.name, arch, nvrtc, gen_hash));
      }
      compiled_by_arch[arch][v.name] = std::move(r);
    }
  }
  rep.compile_s = now_s() - tc;

  // ---- the work list: problem shapes (policies share gate and timing) ----------------------
  const std::vector<ProblemKey> shapes = shard_of(cfg, opts);
  std::size_t total_items = 0;
  for (const ProblemKey& k : shapes)
    for (const gen::Variant& v : variants_by_arch[dev_arch[0]])
      if (v.get_int("head_dim") == k.head_dim && serves(kernel_config(v), k)) ++total_items;
  std::atomic<std::size_t> done_items{0};
  std::mutex mu;  // guards rep and progress reporting
  std::atomic<bool> out_of_budget{false};
  std::atomic<double> gate_s{0}, timing_s{0};
  auto add = [](std::atomic<double>& a, double x) {
    double v = a.load();
    while (!a.compare_exchange_weak(v, v + x)) {
    }
  };

  auto worker = [&](std::size_t widx) {
    const int dev = opts.devices[widx];
    use_device(dev);
    const DeviceFingerprint& fp = rep.devices[widx];
    const std::string& arch = dev_arch[widx];
    std::shared_ptr<Module> refmod = reference_module(arch);
    CUstream stream;
    SAGE_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    Timer timer(stream);
    std::map<std::string, GateMetrics> gate_cache;  // variant + gate shape
    for (std::size_t si = widx; si < shapes.size(); si += opts.devices.size()) {
      const ProblemKey& shape_key = shapes[si];
      // A bucket no kernel of this architecture serves (head dim 256's varlen and window calls
      // off sm_90a): skipped, no failure.
      if (const std::string why = unservable_why(arch, shape_key); !why.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        for (const std::string& pol : opts.policies) {
          ProblemResult pr;
          pr.key = shape_key;
          pr.key.policy = pol;
          pr.device = dev;
          pr.skipped = why;
          rep.results.push_back(pr);
        }
        continue;
      }
      const AttnProblem problem = cfg.representative(shape_key);
      const AttnProblem gshape = gate_shape(cfg, shape_key);
      std::string dflt;
      try {
        ProblemKey k = shape_key;
        k.policy = opts.policies.front();
        dflt = key_default(arch, k, 0, fp.sm_count);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        rep.warnings.push_back(e.what());
      }
      const std::vector<const gen::Variant*> cands = candidates_of(variants_by_arch[arch], shape_key, dflt);
      const SeqLens gate_lens = gate_sequences(cfg, shape_key);

      const TimingInputs inputs(problem, *refmod, cfg.timing.input_sets, 1000, stream, cfg.sequences(shape_key));
      double best_ms = 0;
      std::map<std::string, double> median_us;  // per variant, for the default's speed-up
      int passed_any = 0, timed = 0, resumed = 0;
      for (const gen::Variant* v : cands) {
        if (opts.budget_s > 0 && now_s() - t0 > opts.budget_s) {
          out_of_budget = true;
          break;
        }
        std::vector<ProblemKey> keys;
        for (const std::string& pol : opts.policies) {
          ProblemKey k = shape_key;
          k.policy = pol;
          keys.push_back(k);
        }
        // --resume: a variant measured for every policy of this bucket by this generator and
        // NVRTC on this device is not measured again.
        if (opts.resume) {
          bool all = true;
          for (const ProblemKey& k : keys) {
            MeasurementFilter f;
            f.variant = v->name;
            f.problem = k;
            f.device_key = fp.key();
            f.generator_hash = gen_hash;
            f.nvrtc_version = nvrtc;
            std::vector<Measurement> ms = store.measurements(f);
            if (ms.empty()) {
              all = false;
              break;
            }
            if (ms.back().median_us) median_us[v->name] = *ms.back().median_us;
          }
          if (all) {
            ++resumed;
            ++done_items;
            continue;
          }
        }
        const CompileResult& cr = compiled_by_arch[arch][v->name];
        Measurement base;
        base.device = fp;
        base.variant = v->name;
        base.kernel_hash = cr.ok ? cr.key : "";
        base.generator_hash = gen_hash;
        base.nvrtc_version = nvrtc;
        auto record_all = [&](MeasurementStatus st, const std::string& detail) {
          for (const ProblemKey& k : keys) {
            Measurement m = base;
            m.problem = k;
            m.status = st;
            m.detail = detail;
            store.record_measurement(m);
          }
        };
        if (!cr.ok) {
          record_all(MeasurementStatus::failed, "compile failed: " + join(error_lines(cr.log, 2), " | "));
          ++done_items;
          continue;
        }
        if (cr.spills()) {
          record_all(MeasurementStatus::unsupported, "pruned: " + cr.spill_summary());
          ++done_items;
          continue;
        }
        std::shared_ptr<AttnKernel> kern;
        try {
          kern = load_attention(*v, cr);
        } catch (const Error& e) {
          record_all(MeasurementStatus::failed, e.what());
          ++done_items;
          continue;
        }
        // Gate (policy-independent metrics, cached per gate shape).
        const double tg = now_s();
        const std::string gkey = v->name + "|" + gshape.str();
        auto git = gate_cache.find(gkey);
        if (git == gate_cache.end())
          git = gate_cache.emplace(gkey, run_gate(*kern, refmod, gshape, stream, std::nullopt, gate_lens)).first;
        const GateMetrics& gm = git->second;
        add(gate_s, now_s() - tg);
        std::vector<MeasurementStatus> st(keys.size());
        std::vector<std::string> why(keys.size());
        bool any = false;
        for (std::size_t i = 0; i < keys.size(); ++i) {
          st[i] = judge(gm, cfg.policy(keys[i].policy), kern->config(), &why[i]);
          any |= st[i] == MeasurementStatus::passed;
        }
        TimingResult tr;
        if (any) {
          ++passed_any;
          const double tt = now_s();
          DeviceBuffer ws(kern->workspace_size(problem));
          TimingOptions to;
          to.warmup = cfg.timing.warmup;
          to.min_samples = cfg.timing.min_samples;
          to.max_samples = cfg.timing.max_samples;
          to.max_seconds = cfg.timing.max_seconds;
          to.abandon_above_ms = best_ms > 0 ? best_ms * (1 + cfg.timing.abandon_margin) : 0;
          try {
            tr = timer.time([&](int i) { kern->run(problem, inputs.args(std::size_t(i)), ws.get(), stream); }, to);
            ++timed;
            if (!tr.abandoned && (best_ms == 0 || tr.median_ms < best_ms)) best_ms = tr.median_ms;
            median_us[v->name] = tr.median_ms * 1e3;
          } catch (const Error& e) {
            for (std::size_t i = 0; i < keys.size(); ++i)
              if (st[i] == MeasurementStatus::passed) {
                st[i] = MeasurementStatus::failed;
                why[i] = e.what();
              }
          }
          add(timing_s, now_s() - tt);
        }
        for (std::size_t i = 0; i < keys.size(); ++i) {
          Measurement m = base;
          m.problem = keys[i];
          m.status = st[i];
          m.detail = why[i];
          if (tr.abandoned && st[i] == MeasurementStatus::passed)
            m.detail = cat("timing stopped early: over ", cfg.timing.abandon_margin * 100, "% slower than the best");
          if (gm.ran) {
            m.gaussian = to_accuracy(gm.gaussian);
            m.outlier = to_accuracy(gm.outliers);
            m.seed = std::int64_t(gm.seed_gaussian & 0x7fffffffffffffffull);
            m.seed_outlier = std::int64_t(gm.seed_outliers & 0x7fffffffffffffffull);
          }
          if (tr.samples > 0 && st[i] == MeasurementStatus::passed) {
            m.median_us = tr.median_ms * 1e3;
            m.p10_us = tr.p10_ms * 1e3;
            m.p90_us = tr.p90_ms * 1e3;
            m.samples = tr.samples;
            m.tops = inputs.flops() / (tr.median_ms * 1e-3) / 1e12;
          }
          store.record_measurement(m);
        }
        const std::size_t d = ++done_items;
        if (on_progress) {
          std::lock_guard<std::mutex> lock(mu);
          on_progress({"tune", d, total_items, shape_key.str() + " " + v->name});
        }
      }
      // Winners, one per policy.
      for (const std::string& pol : opts.policies) {
        ProblemKey k = shape_key;
        k.policy = pol;
        ProblemResult pr;
        pr.key = k;
        pr.device = dev;
        pr.candidates = int(cands.size());
        pr.passed = passed_any;
        pr.timed = timed;
        pr.resumed = resumed;
        try {
          pr.default_variant = key_default(arch, k, 0, fp.sm_count);
        } catch (const Error&) {
        }
        std::optional<Winner> w = store.decide_winner(WinnerKey{fp, k, gen_hash, nvrtc});
        if (w) {
          pr.winner = w->variant;
          pr.median_us = w->median_us;
          pr.tops = w->tops.value_or(0);
          pr.spread = w->noise;
          pr.runner_up = w->runner_up;
          pr.margin = w->margin.value_or(0);
          pr.tie = w->tie;
          MeasurementFilter f;
          f.problem = k;
          f.device_key = fp.key();
          f.generator_hash = gen_hash;
          f.nvrtc_version = nvrtc;
          f.status = MeasurementStatus::passed;
          for (const Measurement& m : store.measurements(f)) {
            if (m.variant == pr.winner) {
              pr.gaussian = m.gaussian.value_or(Accuracy{});
              pr.outliers = m.outlier.value_or(Accuracy{});
            }
            if (m.variant == pr.default_variant && m.median_us) pr.default_us = *m.median_us;
          }
          if (pr.default_us > 0) pr.speedup = pr.default_us / pr.median_us;
        }
        std::lock_guard<std::mutex> lock(mu);
        rep.results.push_back(pr);
      }
    }
    cu::api().cuStreamDestroy(stream);
  };

  std::vector<std::thread> threads;
  std::vector<std::string> errors(opts.devices.size());
  for (std::size_t w = 0; w < opts.devices.size(); ++w)
    threads.emplace_back([&, w] {
      try {
        worker(w);
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (std::size_t w = 0; w < errors.size(); ++w)
    if (!errors[w].empty()) throw Error(Errc::cuda_error, cat("device ", opts.devices[w], ": ", errors[w]));
  std::sort(rep.results.begin(), rep.results.end(),
            [](const ProblemResult& a, const ProblemResult& b) { return a.key.str() < b.key.str(); });
  rep.gate_s = gate_s;
  rep.timing_s = timing_s;
  rep.budget_exhausted = out_of_budget;
  rep.total_s = now_s() - t0;
  return rep;
}

}  // namespace sage::tuner
