#include "sage/tuner/problems.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "sage/common/archs.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/embedded.h"
#include "sage/common/error.h"
#include "sage/common/paged.h"
#include "sage/common/strings.h"

namespace sage::tuner {
namespace {

// Parsing context: every error names file:line:col and the dotted key.
struct Ctx {
  std::string file;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& what) const {
    const YAML::Mark m = n.Mark();
    std::string where = m.is_null() ? file : cat(file, ":", m.line + 1, ":", m.column + 1);
    throw Error(Errc::parse_error, cat("key '", key, "': ", what), where);
  }
  void only_keys(const YAML::Node& n, const std::string& key, std::set<std::string> allowed) const {
    if (!n.IsMap()) fail(n, key, "expected a map");
    for (const auto& kv : n) {
      const std::string k = kv.first.as<std::string>();
      if (!allowed.count(k)) fail(kv.first, key.empty() ? k : key + "." + k, "unknown key");
    }
  }
  YAML::Node need(const YAML::Node& n, const std::string& key, const char* name) const {
    YAML::Node c = n[name];
    if (!c) fail(n, key.empty() ? name : key + "." + name, "missing");
    return c;
  }
  template <class T>
  T as(const YAML::Node& n, const std::string& key, const char* type) const {
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, key, cat("expected ", type));
    }
  }
  int pos_int(const YAML::Node& n, const std::string& key) const {
    int v = as<int>(n, key, "an integer");
    if (v < 1) fail(n, key, cat("must be >= 1, got ", v));
    return v;
  }
  double num(const YAML::Node& n, const std::string& key) const { return as<double>(n, key, "a number"); }
  std::vector<int> int_list(const YAML::Node& n, const std::string& key) const {
    if (!n.IsSequence() || n.size() == 0) fail(n, key, "expected a non-empty list of integers");
    std::vector<int> out;
    for (std::size_t i = 0; i < n.size(); ++i) out.push_back(pos_int(n[i], cat(key, "[", i, "]")));
    return out;
  }
  template <class F>
  void each(const YAML::Node& n, const std::string& key, F f) const {
    if (!n.IsSequence() || n.size() == 0) fail(n, key, "expected a non-empty list");
    for (std::size_t i = 0; i < n.size(); ++i) f(n[i], cat(key, "[", i, "]"));
  }
};

Thresholds parse_thresholds(const Ctx& c, const YAML::Node& n, const std::string& key) {
  c.only_keys(n, key, {"cos_min", "rel_l1_max"});
  Thresholds t;
  t.cos_min = c.num(c.need(n, key, "cos_min"), key + ".cos_min");
  t.rel_l1_max = c.num(c.need(n, key, "rel_l1_max"), key + ".rel_l1_max");
  if (t.cos_min <= 0 || t.cos_min > 1) c.fail(n["cos_min"], key + ".cos_min", "must be in (0, 1]");
  if (t.rel_l1_max <= 0) c.fail(n["rel_l1_max"], key + ".rel_l1_max", "must be > 0");
  return t;
}

}  // namespace

bool Policy::admits_pv(const std::string& v) const { return std::find(pv.begin(), pv.end(), v) != pv.end(); }

ProblemsConfig ProblemsConfig::from_file(const std::string& path) { return from_string(read_file(path), path); }

ProblemsConfig ProblemsConfig::builtin() {
  const EmbeddedFile* f = embedded_configs::find("problems.yaml");
  if (!f) throw Error(Errc::internal, "configs/problems.yaml is not embedded in this build");
  return from_string(std::string(f->view()), "configs/problems.yaml");
}

ProblemsConfig ProblemsConfig::from_string(const std::string& yaml, const std::string& file) {
  Ctx c{file};
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    throw Error(Errc::parse_error, e.msg, cat(file, ":", e.mark.line + 1, ":", e.mark.column + 1));
  }
  c.only_keys(root, "", {"version", "buckets", "policies", "accuracy_check", "timing", "paged", "varlen", "problems"});
  const int version = c.as<int>(c.need(root, "", "version"), "version", "an integer");
  if (version != 1) c.fail(root["version"], "version", cat("unsupported version ", version, " (this build reads 1)"));
  ProblemsConfig cfg;

  YAML::Node b = c.need(root, "", "buckets");
  c.only_keys(b, "buckets", {"seq", "bh"});
  cfg.seq_buckets = c.int_list(c.need(b, "buckets", "seq"), "buckets.seq");
  cfg.bh_buckets = c.int_list(c.need(b, "buckets", "bh"), "buckets.bh");
  for (auto* v : {&cfg.seq_buckets, &cfg.bh_buckets})
    if (!std::is_sorted(v->begin(), v->end()) || std::adjacent_find(v->begin(), v->end()) != v->end())
      c.fail(b, "buckets", "bucket boundaries must be strictly increasing");

  YAML::Node pol = c.need(root, "", "policies");
  if (!pol.IsMap() || pol.size() == 0) c.fail(pol, "policies", "expected a non-empty map");
  for (const auto& kv : pol) {
    const std::string name = kv.first.as<std::string>();
    const std::string key = "policies." + name;
    if (name != "accurate" && name != "balanced" && name != "fast")
      c.fail(kv.first, key, "unknown policy (allowed: accurate, balanced, fast)");
    c.only_keys(kv.second, key, {"pv", "gaussian", "outliers"});
    Policy p;
    p.name = name;
    c.each(c.need(kv.second, key, "pv"), key + ".pv", [&](const YAML::Node& n, const std::string& k) {
      std::string v = c.as<std::string>(n, k, "a string");
      if (v != "native" && v != "fp16" && v != "fp16acc" && v != "fp8" && v != "int8")
        c.fail(n, k, "unknown pv '" + v + "' (allowed: native, fp16, fp16acc, fp8, int8)");
      p.pv.push_back(v);
    });
    p.gaussian = parse_thresholds(c, c.need(kv.second, key, "gaussian"), key + ".gaussian");
    p.outliers = parse_thresholds(c, c.need(kv.second, key, "outliers"), key + ".outliers");
    cfg.policies[name] = p;
  }
  if (!cfg.policies.count("balanced")) c.fail(pol, "policies", "the default policy 'balanced' must be defined");

  if (YAML::Node g = root["accuracy_check"]) {
    c.only_keys(g, "accuracy_check", {"batch", "heads_q", "heads_kv", "max_seq", "seeds"});
    if (g["batch"]) cfg.gate.batch = c.pos_int(g["batch"], "accuracy_check.batch");
    if (g["heads_q"]) cfg.gate.heads_q = c.pos_int(g["heads_q"], "accuracy_check.heads_q");
    if (g["heads_kv"]) cfg.gate.heads_kv = c.pos_int(g["heads_kv"], "accuracy_check.heads_kv");
    if (g["max_seq"]) cfg.gate.max_seq = c.pos_int(g["max_seq"], "accuracy_check.max_seq");
    if (g["seeds"]) cfg.gate.seeds = c.pos_int(g["seeds"], "accuracy_check.seeds");
    if (cfg.gate.heads_q % cfg.gate.heads_kv) c.fail(g, "accuracy_check", "heads_q must be a multiple of heads_kv");
  }
  if (YAML::Node t = root["timing"]) {
    c.only_keys(t, "timing", {"warmup", "min_samples", "max_samples", "max_seconds", "abandon_margin", "input_sets"});
    if (t["warmup"]) cfg.timing.warmup = c.as<int>(t["warmup"], "timing.warmup", "an integer");
    if (t["min_samples"]) cfg.timing.min_samples = c.pos_int(t["min_samples"], "timing.min_samples");
    if (t["max_samples"]) cfg.timing.max_samples = c.pos_int(t["max_samples"], "timing.max_samples");
    if (t["max_seconds"]) cfg.timing.max_seconds = c.num(t["max_seconds"], "timing.max_seconds");
    if (t["abandon_margin"]) cfg.timing.abandon_margin = c.num(t["abandon_margin"], "timing.abandon_margin");
    if (t["input_sets"]) cfg.timing.input_sets = c.pos_int(t["input_sets"], "timing.input_sets");
    if (cfg.timing.max_samples < cfg.timing.min_samples)
      c.fail(t, "timing", "max_samples must be >= min_samples");
  }
  if (YAML::Node pg = root["paged"]) {
    c.only_keys(pg, "paged", {"page_size", "heads_kv"});
    if (pg["page_size"]) {
      cfg.paged.page_size = c.pos_int(pg["page_size"], "paged.page_size");
      if (cfg.paged.page_size & (cfg.paged.page_size - 1))
        c.fail(pg["page_size"], "paged.page_size", cat("must be a power of two, got ", cfg.paged.page_size));
    }
    if (pg["heads_kv"]) {
      cfg.paged.heads_kv = c.pos_int(pg["heads_kv"], "paged.heads_kv");
      if (32 % cfg.paged.heads_kv)
        c.fail(pg["heads_kv"], "paged.heads_kv", cat("must divide the 32 query heads, got ", cfg.paged.heads_kv));
    }
  }
  if (YAML::Node vl = root["varlen"]) {
    c.only_keys(vl, "varlen", {"lengths", "heads_kv"});
    if (vl["lengths"]) {
      const YAML::Node& ls = vl["lengths"];
      cfg.varlen.lengths.clear();
      c.each(ls, "varlen.lengths", [&](const YAML::Node& x, const std::string& k) {
        const double f = c.num(x, k);
        if (!(f > 0 && f <= 1)) c.fail(x, k, cat("a fraction of the longest sequence, in (0, 1], got ", f));
        cfg.varlen.lengths.push_back(f);
      });
      if (*std::max_element(cfg.varlen.lengths.begin(), cfg.varlen.lengths.end()) != 1.0)
        c.fail(ls, "varlen.lengths", "one sequence must be the bucket's longest (a fraction of 1)");
    }
    if (vl["heads_kv"]) {
      cfg.varlen.heads_kv = c.pos_int(vl["heads_kv"], "varlen.heads_kv");
      if (32 % cfg.varlen.heads_kv)
        c.fail(vl["heads_kv"], "varlen.heads_kv", cat("must divide the 32 query heads, got ", cfg.varlen.heads_kv));
    }
  }
  c.each(c.need(root, "", "problems"), "problems", [&](const YAML::Node& n, const std::string& key) {
    c.only_keys(n, key, {"head_dim", "causal", "dtype", "layout", "seq", "seq_q", "bh", "paged", "kv8", "varlen", "window"});
    // paged (optional, a boolean): buckets of paged KV caches (sage_attention_paged without a
    // window); kv8 (optional, a list of booleans, paged only): over FP16/BF16 pages, FP8 ones, or both.
    const bool paged = n["paged"] ? c.as<bool>(n["paged"], key + ".paged", "a boolean") : false;
    std::vector<bool> kv8s{false};
    if (n["kv8"]) {
      if (!paged) c.fail(n["kv8"], key + ".kv8", "kv8 (FP8 pages) needs paged: true");
      kv8s.clear();
      c.each(n["kv8"], key + ".kv8",
             [&](const YAML::Node& x, const std::string& k) { kv8s.push_back(c.as<bool>(x, k, "a boolean")); });
    }
    // varlen (optional, a boolean): buckets of variable-length batches (sage_attention_varlen;
    // layout NHD); window (optional, a boolean): of sliding windows (causal), seq the windows.
    const bool varlen = n["varlen"] ? c.as<bool>(n["varlen"], key + ".varlen", "a boolean") : false;
    const bool window = n["window"] ? c.as<bool>(n["window"], key + ".window", "a boolean") : false;
    if (paged && (varlen || window))
      c.fail(n[varlen ? "varlen" : "window"], key + (varlen ? ".varlen" : ".window"),
             "paged calls with variable-length queries or a sliding window are not tuned (they take the defaults)");
    std::vector<int> hd = c.int_list(c.need(n, key, "head_dim"), key + ".head_dim");
    for (std::size_t i = 0; i < hd.size(); ++i)
      if (hd[i] != 64 && hd[i] != 128 && hd[i] != 256)
        c.fail(n["head_dim"][i], cat(key, ".head_dim[", i, "]"), "head_dim must be 64, 128 or 256 (the kernels' head dims)");
    std::vector<bool> causal;
    c.each(c.need(n, key, "causal"), key + ".causal",
           [&](const YAML::Node& x, const std::string& k) { causal.push_back(c.as<bool>(x, k, "a boolean")); });
    std::vector<std::string> dtypes, layouts;
    c.each(c.need(n, key, "dtype"), key + ".dtype", [&](const YAML::Node& x, const std::string& k) {
      std::string v = c.as<std::string>(x, k, "a string");
      if (v != "fp16" && v != "bf16") c.fail(x, k, "unknown dtype '" + v + "' (allowed: fp16, bf16)");
      dtypes.push_back(v);
    });
    c.each(c.need(n, key, "layout"), key + ".layout", [&](const YAML::Node& x, const std::string& k) {
      std::string v = c.as<std::string>(x, k, "a string");
      if (v != "HND" && v != "NHD") c.fail(x, k, "unknown layout '" + v + "' (allowed: HND, NHD)");
      layouts.push_back(v);
    });
    if (window)
      for (std::size_t i = 0; i < causal.size(); ++i)
        if (!causal[i]) c.fail(n["causal"][i], cat(key, ".causal[", i, "]"), "a sliding window is causal");
    if (varlen)
      for (std::size_t i = 0; i < layouts.size(); ++i)
        if (layouts[i] != "NHD")
          c.fail(n["layout"][i], cat(key, ".layout[", i, "]"),
                 "a variable-length batch is packed [total, heads, head_dim]: layout NHD");
    std::vector<int> seqs = c.int_list(c.need(n, key, "seq"), key + ".seq");
    std::vector<int> bhs = c.int_list(c.need(n, key, "bh"), key + ".bh");
    for (std::size_t i = 0; i < seqs.size(); ++i)
      if (cfg.seq_bucket(seqs[i]) != seqs[i]) c.fail(n["seq"][i], cat(key, ".seq[", i, "]"), cat(seqs[i], " is not a bucket boundary of buckets.seq"));
    for (std::size_t i = 0; i < bhs.size(); ++i)
      if (cfg.bh_bucket(bhs[i]) != bhs[i]) c.fail(n["bh"][i], cat(key, ".bh[", i, "]"), cat(bhs[i], " is not a bucket boundary of buckets.bh"));
    // seq_q (optional): the query buckets, each with every seq as the key bucket (decoding:
    // seq_q [1]); without it seq_q = seq_kv = seq.
    std::vector<int> seq_qs;
    if (n["seq_q"]) {
      seq_qs = c.int_list(n["seq_q"], key + ".seq_q");
      for (std::size_t i = 0; i < seq_qs.size(); ++i) {
        const int q = seq_qs[i];
        // A paged bucket's queries: a power of two up to 128, a seq boundary beyond.
        if (paged ? paged_seq_q_bucket(q, cfg.seq_bucket(q)) != q : cfg.seq_bucket(q) != q)
          c.fail(n["seq_q"][i], cat(key, ".seq_q[", i, "]"),
                 paged ? cat(q, " is no paged query bucket (a power of two up to 128, else a boundary of buckets.seq)")
                       : cat(q, " is not a bucket boundary of buckets.seq"));
        // One query's window call runs as a dense call of its window's keys (trim_window).
        if (window && !varlen && q == 1)
          c.fail(n["seq_q"][i], cat(key, ".seq_q[", i, "]"),
                 "a sliding window of one query runs as a dense call of the window's keys: no window bucket");
      }
    }
    for (int d : hd)
      for (bool cz : causal)
        for (auto& dt : dtypes)
          for (auto& ly : layouts)
            for (int s : seqs)
              for (int sq : seq_qs.empty() ? std::vector<int>{s} : seq_qs)
                for (int bh : bhs)
                  for (bool kv8 : kv8s) {
                  ProblemKey k;
                  k.paged = paged;
                  k.kv8 = kv8;
                  k.varlen = varlen;
                  k.window = window;
                  k.head_dim = d;
                  k.causal = cz;
                  k.dtype = dt;
                  k.layout = ly;
                  k.seq_q_bucket = sq;
                  k.seq_kv_bucket = s;
                  k.bh_bucket = bh;
                  k.policy = "balanced";
                  if (cz && sq > s && !window)
                    c.fail(n["seq_q"], key + ".seq_q",
                           cat("a causal problem needs seq_q <= seq (bottom-right aligned mask), got ", sq, " > ", s));
                  if (std::find(cfg.problems.begin(), cfg.problems.end(), k) == cfg.problems.end()) cfg.problems.push_back(k);
                  }
  });
  return cfg;
}

const Policy& ProblemsConfig::policy(const std::string& name) const {
  auto it = policies.find(name);
  if (it == policies.end()) {
    std::vector<std::string> names;
    for (auto& [n, p] : policies) names.push_back(n);
    throw Error(Errc::invalid_argument, "unknown policy '" + name + "' (defined: " + join(names, ", ") + ")");
  }
  return it->second;
}

static int bucket(const std::vector<int>& b, int v) {
  for (int x : b)
    if (v <= x) return x;
  return b.back();
}
int ProblemsConfig::seq_bucket(int seq) const { return bucket(seq_buckets, seq); }
int ProblemsConfig::bh_bucket(int bh) const { return bucket(bh_buckets, bh); }

ProblemKey ProblemsConfig::key_of(const AttnProblem& p, const std::string& pol) const {
  ProblemKey k;
  k.head_dim = p.head_dim;
  k.causal = p.causal;
  k.dtype = to_string(p.dtype);
  k.layout = to_string(p.layout);
  k.seq_q_bucket = seq_bucket(p.seq_q);
  k.seq_kv_bucket = seq_bucket(p.seq_kv);
  k.bh_bucket = bh_bucket(p.batch * p.heads_q);
  k.policy = pol;
  if (p.paged) {
    if (p.window == 0 && !p.varlen) {
      k.paged = true;
      k.kv8 = p.kv_fp8;
      k.seq_q_bucket = paged_seq_q_bucket(p.seq_q, k.seq_q_bucket);
    }
    return k;
  }
  AttnProblem t = p;
  if (!t.varlen) t.trim_window();  // the runtime's keys are of the trimmed call
  k.varlen = t.varlen;
  if (t.window > 0) {
    k.window = true;
    k.seq_kv_bucket = seq_bucket(std::min(t.seq_kv, t.window));
  }
  return k;
}

AttnProblem with_sequences(AttnProblem p, const SeqLens& lens) {
  if (lens.q.empty() || lens.q.size() != lens.kv.size())
    throw Error(Errc::invalid_argument, "a variable-length batch needs as many key lengths as query lengths, at least one");
  p.varlen = true;
  p.layout = Layout::NHD;
  p.batch = int(lens.q.size());
  p.seq_q = std::max(1, *std::max_element(lens.q.begin(), lens.q.end()));
  p.seq_kv = std::max(1, *std::max_element(lens.kv.begin(), lens.kv.end()));
  std::int64_t tq = 0, tkv = 0;
  for (std::size_t i = 0; i < lens.q.size(); ++i) {
    tq += lens.q[i];
    tkv += lens.kv[i];
  }
  if (tq > 0x7fffffff || tkv > 0x7fffffff) throw Error(Errc::invalid_argument, "a variable-length batch of more than 2^31 rows");
  p.total_q = int(tq);
  p.total_kv = int(tkv);
  return p;
}

SeqLens fraction_sequences(const std::vector<double>& fractions, int n, int q, int kv, int window) {
  SeqLens s;
  for (int i = 0; i < n; ++i) {
    const double f = fractions[std::size_t(i) % fractions.size()];
    const int qi = std::max(1, int(std::lround(f * q)));
    s.q.push_back(qi);
    s.kv.push_back(window > 0 ? qi + window - 1 : std::max(1, int(std::lround(f * kv))));
  }
  return s;
}

SeqLens ProblemsConfig::sequences(const ProblemKey& k) const {
  if (!k.varlen) return {};
  const int heads_q = k.bh_bucket >= 32 ? 32 : k.bh_bucket;
  const int n = std::max(1, k.bh_bucket / heads_q);
  return fraction_sequences(varlen.lengths, n, k.seq_q_bucket, k.seq_kv_bucket, k.window ? k.seq_kv_bucket : 0);
}

AttnProblem ProblemsConfig::representative(const ProblemKey& k) const {
  AttnProblem p;
  p.heads_q = k.bh_bucket >= 32 ? 32 : k.bh_bucket;
  p.heads_kv = p.heads_q;
  p.batch = std::max(1, k.bh_bucket / p.heads_q);
  p.seq_q = k.seq_q_bucket;
  p.seq_kv = k.seq_kv_bucket;
  p.head_dim = k.head_dim;
  p.causal = k.causal;
  p.dtype = parse_dtype(k.dtype);
  p.layout = parse_layout(k.layout);
  if (k.paged) {
    p.paged = true;
    p.kv_fp8 = k.kv8;
    p.page_size = paged.page_size;
    p.heads_kv = p.heads_q >= 32 ? paged.heads_kv : std::max(1, p.heads_q / 4);
    if (p.heads_q % p.heads_kv) p.heads_kv = 1;
  }
  if (k.window) {
    p.window = k.seq_kv_bucket;
    p.seq_kv = p.seq_q + p.window - 1;
  }
  if (k.varlen) {
    p.heads_kv = p.heads_q >= 32 ? varlen.heads_kv : std::max(1, p.heads_q / 4);
    if (p.heads_q % p.heads_kv) p.heads_kv = 1;
    p = with_sequences(p, sequences(k));
  }
  return p;
}

DeviceFingerprint fingerprint_device(int device) {
  const cu::Api& a = cu::api();
  CUdevice d;
  SAGE_CU(cuDeviceGet(&d, device));
  DeviceFingerprint f;
  char name[256] = {0};
  SAGE_CU(cuDeviceGetName(name, sizeof name, d));
  f.name = name;
  int major = 0, minor = 0;
  SAGE_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
  SAGE_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
  f.cc = major * 10 + minor;
  SAGE_CU(cuDeviceGetAttribute(&f.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
  std::size_t mem = 0;
  SAGE_CU(cuDeviceTotalMem(&mem, d));
  f.memory_bytes = std::int64_t(mem);
  SAGE_CU(cuDriverGetVersion(&f.driver_version));
  (void)a;
  return f;
}

std::string arch_for_cc(int cc) {
  if (std::string arch = target_arch_for_cc(cc); !arch.empty()) return arch;
  if (cc < 80)
    throw Error(Errc::unsupported, cat("compute capability ", cc / 10, ".", cc % 10, " is below sm_80 (Ampere)"));
  // A cubin runs only on its own major architecture: other GPUs need targets of their own.
  throw Error(Errc::unsupported, cat("compute capability ", cc / 10, ".", cc % 10,
                                     " is not a target of this build (", target_archs_text(), ")"));
}

}  // namespace sage::tuner
