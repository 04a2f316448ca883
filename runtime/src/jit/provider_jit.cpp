// The provider of JIT builds: bucket boundaries from the built-in configs/problems.yaml, the
// winner from the user or system database, else the architecture's default variant, its
// cubin from the database, else the cubin cache, else NVRTC.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "../log.h"
#include "../provider.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/internal/jit_select.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"

namespace sage::rt::provider {
namespace {

// Process-wide selection state: opened at the first selection, dropped by reset().
struct State {
  std::mutex mu;  // guards the three members below
  std::unique_ptr<tuner::WinnerLookup> lookup;
  std::map<CUdevice, tuner::DeviceFingerprint> fingerprints;
  std::map<std::string, std::shared_ptr<const std::vector<gen::Variant>>> variants;  // per arch
  // Its own mutex: the lookup reports warnings while it is being opened under `mu`.
  std::mutex warn_mu;
  std::vector<std::string> warnings;  // database warnings not yet attached to a selection
};
State& state() {
  static State* s = new State;  // never destroyed, like the kernel cache
  return *s;
}

const gen::SearchSpace& space() {
  static const gen::SearchSpace s = gen::SearchSpace::builtin();
  return s;
}

tuner::WinnerLookup& lookup() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.lookup) {
    tuner::LookupOptions o;
    // The whole-file quick_check reads every cubin: seconds for a large database, against a
    // first-call budget of milliseconds. Damage still surfaces: SQLite reports corrupt pages
    // it reads, and every cubin's checksum is verified when it is read.
    o.quick_check = false;
    o.warn = [](const std::string& m) {
      State& st = state();
      std::lock_guard l(st.warn_mu);
      st.warnings.push_back(m);
    };
    s.lookup = std::make_unique<tuner::WinnerLookup>(std::move(o));
  }
  return *s.lookup;
}

std::vector<std::string> take_warnings() {
  State& s = state();
  std::lock_guard lock(s.warn_mu);
  return std::exchange(s.warnings, {});
}

tuner::DeviceFingerprint fingerprint(const Device& d) {
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    auto it = s.fingerprints.find(d.dev);
    if (it != s.fingerprints.end()) return it->second;
  }
  tuner::DeviceFingerprint fp = tuner::fingerprint_device(int(d.dev));
  std::lock_guard lock(s.mu);
  s.fingerprints[d.dev] = fp;
  return fp;
}

std::shared_ptr<const std::vector<gen::Variant>> variants_for(const std::string& arch) {
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    auto it = s.variants.find(arch);
    if (it != s.variants.end()) return it->second;
  }
  gen::EnumerateOptions eo;
  eo.archs = {arch};
  auto vs = std::make_shared<const std::vector<gen::Variant>>(space().enumerate(eo).variants);
  std::lock_guard lock(s.mu);
  s.variants[arch] = vs;
  return vs;
}

const gen::Variant* find_variant(const std::vector<gen::Variant>& vs, const std::string& name) {
  for (const gen::Variant& v : vs)
    if (v.name == name) return &v;
  return nullptr;
}

tuner::ProblemKey problem_key(const BucketKey& b) {
  tuner::ProblemKey k;
  k.head_dim = b.head_dim;
  k.causal = b.causal;
  k.dtype = to_string(b.dtype);
  k.layout = to_string(b.layout);
  k.seq_q_bucket = b.seq_q;
  k.seq_kv_bucket = b.seq_kv;
  k.bh_bucket = b.bh;
  k.policy = to_string(b.policy);
  k.paged = b.paged;
  k.kv8 = b.kv8;
  k.varlen = b.varlen;
  k.window = b.window;
  return k;
}

// The buckets a tuned winner can serve: dense calls, variable-length batches and sliding windows
// (the tuner's varlen and window buckets), and paged calls without a window or variable-length
// queries (its paged buckets, tuner::ProblemKey::paged). Paged calls with either take
// configs/defaults.yaml's entries.
bool tunable(const BucketKey& k) { return !(k.paged && (k.varlen || k.window)); }

}  // namespace

const Buckets& buckets() {
  static const Buckets b = [] {
    const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
    return Buckets{cfg.seq_buckets, cfg.bh_buckets};
  }();
  return b;
}

void precheck(const BucketKey&) {}  // a JIT build can compile any bucket

// The launcher config the tuner recorded with a stored winner's variant (jit::recorded_config).
std::optional<KernelConfig> stored_config(const std::string& db, const std::string& variant) {
  return jit::recorded_config(lookup(), db, variant);
}

Resolved resolve(const BucketKey& key, const AttnProblem& p, const Device& dev) {
  const tuner::DeviceFingerprint fp = fingerprint(dev);
  const std::string arch = tuner::arch_for_cc(fp.cc);  // Error(unsupported) for other architectures
  // The SMs the call runs on: its green context's partition, else the device's (the defaults'
  // wave edges scale from the SMs they were measured on).
  const int sms = p.sms > 0 ? std::min(p.sms, fp.sm_count) : fp.sm_count;
  // Fast path (the first call with a tuned database): a stored winner with its verified cubin
  // and the launcher config recorded with its variant needs no search space (parsing and
  // enumerating it costs ~12 ms). Head dims were validated against the build already.
  // A variable-length batch takes a winner of its varlen bucket whose kernel takes such batches
  // (else its `varlen` default), a sliding window one of its window bucket (else the window
  // defaults), a paged call without them one of its paged bucket whose kernel reads such pages.
  if (tunable(key)) {
    const tuner::WinnerKey wk{fp, problem_key(key), tuner::generator_hash(), tuner::nvrtc_version()};
    jit::Choice c = jit::choose(lookup(), wk, arch, log_enabled(), key.rows16, p.batch * p.heads_q, sms);
    if (c.cubin && c.source != Source::default_variant) {
      std::optional<KernelConfig> cfg = stored_config(c.db, c.variant);
      if (cfg && tuner::serves(*cfg, wk.problem)) {
        Resolved r;
        Selection& s = r.selection;
        s.notes = take_warnings();
        s.bucket = key.str();
        s.device = fp.key();
        s.arch = arch;
        s.source = c.source;
        s.db = c.db;
        s.variant = c.variant;
        s.config = *cfg;
        s.miss = c.miss;
        r.cubin_storage = std::move(*c.cubin);
        s.kernel_from = "database";
        s.kernel_hash = c.kernel_hash;
        r.cubin = r.cubin_storage.data();
        r.cubin_size = r.cubin_storage.size();
        return r;
      }
    }
  }
  const auto vs = variants_for(arch);
  bool has_dim = false;
  for (const gen::Variant& v : *vs)
    has_dim |= v.pipeline != "reference" && v.params.count("head_dim") && v.get_int("head_dim") == key.head_dim;
  if (!has_dim)
    throw Error(Errc::unsupported, cat("the search space has no attention variant with head_dim ", key.head_dim, " for ",
                                       arch, " (", fp.name, ")"));

  jit::Choice c;
  if (tunable(key)) {
    // (a paged bucket's winner that reads no such pages is not served: jit::choose)
    const tuner::WinnerKey wk{fp, problem_key(key), tuner::generator_hash(), tuner::nvrtc_version()};
    c = jit::choose(lookup(), wk, arch, log_enabled(), key.rows16, p.batch * p.heads_q, sms);
  } else if (key.paged) {
    try {
      // A paged KV cache's call: its `paged` entries (kernels with sage_attn_paged), by its
      // queries and its keys' upper bound (with a window, the keys a query sees); with a window
      // also those that name `window` (kernels with sage_attn_paged_window). FP8 pages match them
      // as FP16 pages do, and those that name `kv8` (each paged default's kernel has
      // sage_attn_paged_fp8, or a kv8 entry before it serves FP8 pages: Defaults.*Fp8*).
      c.variant = tuner::default_variant(arch, key.head_dim, to_string(key.policy), key.seq_kv, key.causal ? 1 : 0,
                                         key.seq_q, false, p.batch * p.heads_q, sms, false, key.window, true, key.kv8);
    } catch (const Error& e) {
      if (e.code() != Errc::not_found) throw;
      throw Error(Errc::unsupported, cat("paged KV caches at head dim ", key.head_dim, " have no kernel on ", arch, " (",
                                         fp.name, ")"));
    }
  }
  Resolved r;
  Selection& s = r.selection;
  s.notes = take_warnings();
  const gen::Variant* v = find_variant(*vs, c.variant);
  if (!v) {
    // The generator hash in the key makes this unlikely (same templates and search space), but
    // a database edited by hand must not take the process down.
    s.notes.push_back(cat("winner ", c.variant, " from ", c.db, " is not a variant of this build's search space for ",
                          arch, ": serving the default instead"));
    c = jit::Choice{};
    c.source = Source::default_variant;
    c.variant = tuner::key_default(arch, problem_key(key), p.batch * p.heads_q, sms, key.rows16);
    v = find_variant(*vs, c.variant);
    if (!v) throw Error(Errc::internal, cat("the default variant ", c.variant, " is not in the search space for ", arch));
  }
  s.bucket = key.str();
  s.device = fp.key();
  s.arch = arch;
  s.source = c.source;
  s.db = c.db;
  s.variant = v->name;
  s.config = tuner::kernel_config(*v);
  s.miss = c.miss;
  if (c.cubin) {
    r.cubin_storage = std::move(*c.cubin);
    s.kernel_from = "database";
    s.kernel_hash = c.kernel_hash;
  } else {
    if (!c.rebuild.empty()) s.notes.push_back(c.rebuild);
    jit::ObtainOptions o;
    o.arch = arch;
    o.jit_disabled = env_flag("SAGE_DISABLE_JIT");
    o.what = cat(key.str(), " on ", fp.name);
    jit::Obtained ob = jit::obtain(*v, o);
    if (!ob.note.empty()) s.notes.push_back(ob.note);
    s.kernel_from = ob.from;
    s.kernel_hash = ob.hash;
    s.compile_ms = ob.compile_ms;
    // A winner whose stored kernel was missing or damaged: put the rebuilt one back in the user
    // DB when it is the same kernel (same content hash), so the next process finds it there.
    tuner::Store* user = lookup().user();
    if (!c.rebuild.empty() && ob.hash == c.kernel_hash && user && !user->read_only()) {
      try {
        user->record_kernel(tuner::make_kernel_record(
            [&] {
              tuner::CompileResult cr;
              cr.name = v->name;
              cr.arch = arch;
              cr.key = ob.hash;
              cr.ok = true;
              cr.cubin = ob.cubin;
              return cr;
            }(),
            v->name, arch, tuner::nvrtc_version(), tuner::generator_hash()));
        s.notes.push_back(cat("stored the rebuilt kernel ", ob.hash.substr(0, 16), " in ", user->path()));
      } catch (const Error& e) {
        s.notes.push_back(cat("could not store the rebuilt kernel in ", user->path(), ": ", e.what()));
      }
    }
    r.cubin_storage = std::move(ob.cubin);
  }
  r.cubin = r.cubin_storage.data();
  r.cubin_size = r.cubin_storage.size();
  return r;
}

std::uint64_t compile_count() { return jit::compile_count(); }

void reset() {
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    s.lookup.reset();
    s.fingerprints.clear();
  }
  std::lock_guard lock(s.warn_mu);
  s.warnings.clear();
  jit::reset_compile_count();
}

const char* kind() { return "JIT"; }

}  // namespace sage::rt::provider
