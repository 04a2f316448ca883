// The provider of static builds (SAGE_WITH_NVRTC=OFF): the kernels exported into the build by
// `sage-tune export`. A dense call, or a paged one without a window or variable-length queries,
// takes the winner of its exact bucket for the device's cubin architecture; every other call (no
// winner, variable-length batches, sliding windows) takes the exported defaults of configs/defaults.yaml, matched as a JIT build matches
// them (sage/common/default_rules.h), in the same order as jit::choose. No NVRTC, no database,
// no YAML: bucket boundaries come from the exported table.
#include <algorithm>
#include <vector>

#include "../provider.h"
#include "sage/common/archs.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/internal/static_table.h"

namespace sage::rt::provider {
namespace {

struct Parsed {
  BucketKey key;
  const StaticKernel* kernel;
};

// The table's entries with parsed keys (once per process). A malformed entry is a bug of
// the exporter: Error(internal) naming it.
const std::vector<Parsed>& entries() {
  static const std::vector<Parsed> e = [] {
    const StaticTable& t = static_table();
    std::vector<Parsed> out;
    for (int i = 0; i < t.kernel_count; ++i) {
      try {
        out.push_back({BucketKey::parse(t.kernels[i].bucket), &t.kernels[i]});
      } catch (const Error& err) {
        throw Error(Errc::internal, cat("exported kernel table entry ", i, " (", t.kernels[i].variant, "): ", err.message()));
      }
    }
    return out;
  }();
  return e;
}

// "sm_90a head dims 64, 128; sm_80 head dims 128": the defaults this build holds.
std::string defaults_summary() {
  const StaticTable& t = static_table();
  std::vector<std::string> archs;
  std::vector<std::vector<int>> dims;
  for (int i = 0; i < t.default_count; ++i) {
    const StaticDefault& d = t.defaults[i];
    auto a = std::find(archs.begin(), archs.end(), d.arch);
    if (a == archs.end()) {
      archs.push_back(d.arch);
      dims.emplace_back();
      a = archs.end() - 1;
    }
    std::vector<int>& ds = dims[std::size_t(a - archs.begin())];
    if (std::find(ds.begin(), ds.end(), d.rule.head_dim) == ds.end()) ds.push_back(d.rule.head_dim);
  }
  std::string s;
  for (std::size_t i = 0; i < archs.size(); ++i) {
    std::sort(dims[i].begin(), dims[i].end());
    std::string list;
    for (int d : dims[i]) list += (list.empty() ? "" : ", ") + std::to_string(d);
    s += cat(i ? "; " : "", archs[i], " head dims ", list);
  }
  return s;
}

std::string build_summary() {
  const StaticTable& t = static_table();
  if (t.kernel_count == 0 && t.default_count == 0)
    return "this static build has no exported kernels (it was built without -DSAGE_TUNED_KERNELS=DIR from sage-tune export)";
  std::vector<std::string> keys;
  for (const Parsed& p : entries()) {
    std::string k = p.kernel->bucket;
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  std::string list;
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i) list += (i ? ", " : "") + keys[i];
  if (keys.size() > 8) list += cat(", ... (", keys.size() - 8, " more)");
  std::string s = t.kernel_count == 0 ? std::string("this static build holds no tuned winners")
                                      : cat("this static build holds ", t.kernel_count, " kernels for ", keys.size(),
                                            " buckets, exported from ", t.source_db, ": ", list);
  return s + (t.default_count == 0 ? std::string(", and no defaults (exported with --no-defaults)")
                                   : cat(", and the defaults for ", defaults_summary()));
}

bool has_defaults(const std::string& arch, int head_dim) {
  const StaticTable& t = static_table();
  for (int i = 0; i < t.default_count; ++i)
    if (t.defaults[i].rule.head_dim == head_dim && (arch.empty() || arch == t.defaults[i].arch)) return true;
  return false;
}

int measured_sms(const std::string& arch) {
  const StaticTable& t = static_table();
  for (int i = 0; i < t.measured_sms_count; ++i)
    if (arch == t.measured_sms[i].arch) return t.measured_sms[i].sms;
  return 0;
}

// The first of arch's exported entries that matches (tuner::default_match), else null.
const StaticDefault* find_default(const std::string& arch, DefaultCall c, int sms) {
  const StaticTable& t = static_table();
  c.bh = default_pairs(c.bh, measured_sms(arch), sms);
  for (int i = 0; i < t.default_count; ++i)
    if (arch == t.defaults[i].arch && default_rule_matches(t.defaults[i].rule, c)) return &t.defaults[i];
  return nullptr;
}

// The selection of a kernel of the table (a winner's or a default's).
Resolved served(const BucketKey& key, const Device& dev, const std::string& arch, Source source, const StaticCubin& k) {
  Resolved r;
  Selection& s = r.selection;
  s.bucket = key.str();
  s.device = dev.name;
  s.arch = arch;
  s.source = source;
  s.db = static_table().source_db;
  s.variant = k.variant;
  s.config = KernelConfig::parse(k.config);
  s.kernel_from = "static table";
  s.kernel_hash = k.cubin_sha256;
  r.cubin = reinterpret_cast<const char*>(k.cubin);
  r.cubin_size = k.cubin_size;
  return r;
}

// The table holds tuned winners, which are looked up without rows16 (the defaults are what it
// changes: their rows16 entries serve such calls ahead of a winner, as in a JIT build).
BucketKey table_key(BucketKey key) {
  key.rows16 = false;
  return key;
}

}  // namespace

const Buckets& buckets() {
  static const Buckets b = [] {
    const StaticTable& t = static_table();
    Buckets out;
    out.seq.assign(t.seq_buckets, t.seq_buckets + t.seq_bucket_count);
    out.bh.assign(t.bh_buckets, t.bh_buckets + t.bh_bucket_count);
    return out;
  }();
  return b;
}

void precheck(const BucketKey& call_key) {
  // The defaults of the call's head dim (for some architecture) may serve it: resolve() decides.
  if (has_defaults("", call_key.head_dim)) return;
  const char* what = call_key.varlen ? "variable-length batches (sage_attention_varlen)"
                     : call_key.window ? "sliding windows (desc->window)"
                     : call_key.paged  ? "paged KV caches (sage_attention_paged)"
                                       : nullptr;
  if (what)
    throw Error(Errc::not_in_build, cat(what, " at head dim ", call_key.head_dim, " run on the defaults, which ",
                                        build_summary(), " does not hold for that head dim. Export them (sage-tune "
                                        "export without --no-defaults, with --head-dim ", call_key.head_dim,
                                        " if you name head dims), or use a JIT build"));
  const BucketKey key = table_key(call_key);
  for (const Parsed& p : entries())
    if (p.key == key) return;
  throw Error(Errc::not_in_build,
              cat("problem bucket ", key.str(), " is not in this build; ", build_summary(), ". ",
                  static_table().default_count > 0
                      ? cat("Export the defaults of head dim ", key.head_dim, " too (sage-tune export --head-dim ",
                            key.head_dim, ", or without --head-dim), tune the bucket and export again, or use a JIT build")
                      : std::string("Tune it (sage-tune tune) and export again, export the defaults (without "
                                    "--no-defaults), or use a JIT build")));
}

Resolved resolve(const BucketKey& call_key, const AttnProblem& p, const Device& dev) {
  const BucketKey key = table_key(call_key);
  const std::string arch = arch_for_cc(dev.cc);
  if (arch.empty())
    throw Error(Errc::unsupported, cat(dev.name, " (compute capability ", dev.cc / 10, ".", dev.cc % 10,
                                       ") is not a target of sage-tune (", target_archs_text(), ")"));
  const int sms = p.sms > 0 && dev.sms > 0 ? std::min(p.sms, dev.sms) : dev.sms;
  const int pairs = p.batch * p.heads_q;
  // The calls a winner can serve (a JIT build's as well): dense ones, variable-length batches and
  // sliding windows, and paged ones without a window or variable-length queries (the tuner's
  // buckets).
  const bool tunable = !(key.paged && (key.varlen || key.window));
  const std::string policy = to_string(key.policy);

  // The defaults, as the JIT provider asks them (provider_jit.cpp, jit::choose).
  DefaultCall call;
  call.head_dim = key.head_dim;
  call.policy = policy;
  call.seq_kv = key.seq_kv;
  call.seq_q = key.seq_q;
  call.causal = key.causal ? 1 : 0;
  call.bh = pairs > 0 ? pairs : key.bh;
  if (key.paged) {
    call.paged = true;
    call.window = key.window;
    call.kv8 = key.kv8;  // FP8 pages: the paged entries, and those that name kv8
  } else if (key.varlen || key.window) {
    // A window's call: its entries, then the varlen ones, read as non-causal sequences of its
    // window's keys (BucketKey::window).
    call.varlen = key.varlen;
    call.window = key.window;
    call.causal = key.causal && !key.window ? 1 : 0;
  } else {
    call.rows16 = call_key.rows16;
  }
  const StaticDefault* dflt = find_default(arch, call, sms);
  std::string miss;
  if (tunable) {
    // A default of its own for rows of 16 bytes but not 32, or for the call's batch x query
    // heads, serves it ahead of a winner (which was timed on aligned rows, at the bucket's bh).
    auto differs = [&](DefaultCall base) {
      const StaticDefault* b = find_default(arch, base, sms);
      return dflt && b && std::string(dflt->kernel->variant) != b->kernel->variant;
    };
    DefaultCall aligned = call;
    aligned.rows16 = false;
    DefaultCall at_bucket = call;
    at_bucket.bh = key.bh;
    if (call.rows16 && differs(aligned)) {
      miss = "rows 16 but not 32 bytes long a multiple of: configs/defaults.yaml's rows16 entry for this bucket "
             "serves them ahead of a winner tuned on aligned rows";
    } else if (pairs > 0 && pairs != key.bh && differs(at_bucket)) {
      miss = cat(pairs, " (sequence, query head) pairs: configs/defaults.yaml's entry for that count serves them "
                        "ahead of a winner timed at the bucket's ", key.bh);
    } else {
      const Parsed* best = nullptr;
      std::vector<std::string> archs;
      for (const Parsed& e : entries()) {
        if (!(e.key == key)) continue;
        archs.push_back(cat(e.kernel->arch, " (", e.kernel->device, ")"));
        if (arch != e.kernel->arch) continue;
        // Several GPUs of one architecture may have their own winners: the one tuned on this
        // very GPU model first, else the first exported.
        if (!best || (dev.name == e.kernel->device && best->kernel->device != dev.name)) best = &e;
      }
      if (best) {
        const StaticKernel& k = *best->kernel;
        Resolved r = served(key, dev, arch, Source::static_table, {k.variant, k.config, k.cubin, k.cubin_size, k.cubin_sha256});
        if (dev.name != k.device)
          r.selection.notes.push_back(cat("tuned on ", k.device, ", served on ", dev.name, " (same architecture)"));
        return r;
      }
      if (!has_defaults(arch, key.head_dim)) {
        if (!archs.empty())
          throw Error(Errc::not_in_build,
                      cat("problem bucket ", key.str(), " is in this build only for ", join(archs, ", "), "; this device, ",
                          dev.name, " (compute capability ", dev.cc / 10, ".", dev.cc % 10, "), needs ", arch));
      }
      miss = "no exported winner for this bucket";
    }
  }
  if (!dflt) {
    if (!has_defaults(arch, key.head_dim))
      throw Error(Errc::not_in_build, cat("problem bucket ", key.str(), " on ", dev.name, " (", arch, ") is not in this build: ",
                                          build_summary(), ". Export ", arch, "'s defaults for head dim ", key.head_dim,
                                          " (sage-tune export --arch ", arch, "), or use a JIT build"));
    throw Error(Errc::unsupported,
                cat(key.paged ? "paged KV caches" : key.varlen ? "variable-length batches" : key.window ? "sliding windows"
                                                                                                     : "problem bucket " + key.str(),
                    " at head dim ", key.head_dim, " have no kernel on ", arch, " (", dev.name,
                    "): configs/defaults.yaml has no entry for the call under policy ", policy));
  }
  Resolved r = served(key, dev, arch, Source::default_variant, *dflt->kernel);
  r.selection.miss = miss;
  r.selection.notes.push_back(cat("configs/defaults.yaml line ", dflt->line, " (", dflt->conditions, "), exported"));
  return r;
}

std::uint64_t compile_count() { return 0; }
void reset() {}
const char* kind() { return "static"; }

}  // namespace sage::rt::provider
