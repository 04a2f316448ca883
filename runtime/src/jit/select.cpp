// JIT-build selection: the winner lookup order and obtaining a cubin (cache or NVRTC).
#include <atomic>
#include <optional>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/internal/file_lock.h"
#include "sage/internal/jit_select.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"

namespace sage::rt::jit {
namespace {
std::atomic<std::uint64_t> g_compiles{0};
}  // namespace

std::uint64_t compile_count() { return g_compiles.load(); }
void reset_compile_count() { g_compiles = 0; }

std::optional<KernelConfig> recorded_config(tuner::WinnerLookup& lookup, const std::string& db,
                                            const std::string& variant) {
  for (tuner::Store* st : {lookup.user(), lookup.system()}) {
    if (!st || st->path() != db) continue;
    try {
      for (const tuner::VariantRecord& r : st->variants(variant))
        if (auto cfg = tuner::stored_kernel_config(r)) return cfg;
    } catch (const Error&) {
    }
  }
  return std::nullopt;
}

Choice choose(tuner::WinnerLookup& lookup, const tuner::WinnerKey& key, const std::string& arch, bool explain,
              bool rows16, int pairs, int sms) {
  Choice c;
  const int bh = pairs > 0 ? pairs : key.problem.bh_bucket;
  // Rows off the 32-byte sectors: the tuner times its buckets at the kernel's own head dim, so a
  // winner speaks for aligned rows only. Where defaults.yaml has an entry of its own for such
  // calls in this bucket (measured on them), that entry serves them ahead of any winner.
  const bool dense = !key.problem.paged && !key.problem.varlen && !key.problem.window;
  if (rows16 && dense) {
    const tuner::ProblemKey& p = key.problem;
    if (std::optional<std::string> own =
            tuner::rows16_default(arch, p.head_dim, p.policy, p.seq_kv_bucket, p.causal ? 1 : 0, p.seq_q_bucket, bh, sms)) {
      c.source = Source::default_variant;
      c.variant = *own;
      c.miss = "rows 16 but not 32 bytes long a multiple of: configs/defaults.yaml's rows16 entry for this bucket "
               "serves them ahead of a winner tuned on aligned rows";
      return c;
    }
  }
  // A call whose own batch x query heads has a default of its own (one that differs from the
  // default at its bucket's boundary, where a winner was timed): that default first.
  if (pairs > 0) {
    const tuner::ProblemKey& p = key.problem;
    if (std::optional<std::string> own = tuner::key_pairs_default(arch, p, rows16, pairs, sms)) {
      c.source = Source::default_variant;
      c.variant = *own;
      const int measured = tuner::measured_sms(arch), as = tuner::pairs_at_measured_sms(arch, pairs, sms);
      c.miss = cat(pairs, " (sequence, query head) pairs",
                   as != pairs ? cat(" on ", sms, " SMs (as ", as, " on ", measured, ")") : std::string(),
                   ": configs/defaults.yaml's entry for that count serves them ahead of a winner timed at the "
                   "bucket's ", p.bh_bucket);
      return c;
    }
  }
  tuner::LookupResult r = lookup.find(key, explain);
  std::string not_served;
  if (r.status != tuner::LookupResult::Status::miss && !dense) {
    // A paged, variable-length or window bucket's winner must serve such calls (the tuner
    // measures only those; a database edited or merged by hand may say otherwise).
    // The launcher config the tuner recorded with the variant, else the search space's.
    std::optional<KernelConfig> cfg = recorded_config(lookup, r.db, r.winner->variant);
    if (!cfg) cfg = tuner::variant_config(arch, r.winner->variant);
    if (cfg && !tuner::serves(*cfg, key.problem))
      not_served = cat("the winner ", r.winner->variant, " in ", r.db, " ", tuner::not_served_why(*cfg, key.problem),
                       ": serving the default instead");
  }
  if (r.status != tuner::LookupResult::Status::miss && not_served.empty()) {
    // WinnerLookup::find already prefers the user DB's winner over the system DB's.
    c.variant = r.winner->variant;
    c.db = r.db;
    c.kernel_hash = r.winner->kernel_hash;
    const tuner::Store* user = lookup.user();
    c.source = user && user->path() == r.db ? Source::user_db : Source::system_db;
    if (r.status == tuner::LookupResult::Status::found) c.cubin = std::move(r.kernel->cubin);
    else c.rebuild = r.message;
    return c;
  }
  c.source = Source::default_variant;
  c.miss = !not_served.empty() ? not_served : explain ? tuner::describe_miss(r) : r.message;
  try {
    c.variant = tuner::key_default(arch, key.problem, bh, sms, rows16);
  } catch (const Error& e) {
    if (e.code() != Errc::not_found) throw;
    const tuner::ProblemKey& p = key.problem;
    if (p.paged)
      throw Error(Errc::unsupported, cat("paged KV caches at head dim ", p.head_dim, " have no kernel on ", arch, " (",
                                         key.device.name, ")"));
    if (p.varlen)
      throw Error(Errc::unsupported, cat(p.window ? "variable-length batches with a sliding window" : "variable-length batches",
                                         " at head dim ", p.head_dim, " have no kernel on ", arch, " (", key.device.name,
                                         "): head dims 64 and 128 run everywhere, 256 on sm_90a",
                                         p.window ? " (a dense call's window at 256 runs everywhere)" : ""));
    if (p.window)
      throw Error(Errc::unsupported, cat("sliding windows at head dim ", p.head_dim, " have no kernel on ", arch, " (",
                                         key.device.name, ")"));
    throw Error(Errc::unsupported, cat("no tuned winner for ", p.str(), " on ", key.device.name,
                                       " and no default variant: ", e.message()));
  }
  return c;
}

Obtained obtain(const gen::Variant& v, const ObtainOptions& o) {
  tuner::CompileOptions co;
  co.arch = o.arch;
  co.cache_dir = o.cache_dir.empty() ? tuner::default_cache_dir() : o.cache_dir;
  const tuner::VariantBuilder builder(co);
  const std::string source = builder.render(v);
  Obtained out;
  if (o.jit_disabled) {
    if (auto r = tuner::load_cached(v.name, source, co)) {
      out.cubin = std::move(r->cubin);
      out.from = "cubin cache";
      out.hash = r->key;
      return out;
    }
    throw Error(Errc::jit_disabled,
                cat("SAGE_DISABLE_JIT=1 and variant ", v.name, " (serving ", o.what,
                    ") is compiled neither in a tune database nor in the cubin cache ", co.cache_dir,
                    ". Compile it ahead of time with: sage-tune compile --arch ", o.arch, " --filter '^", v.name,
                    "$' (with the same SAGE_CACHE_DIR), or tune the bucket with: sage-tune tune"));
  }
  // One process compiles, the others wait on the lock and then find the entry in the cache:
  // tuner::compile() looks in the cache first, which is the re-check after acquiring.
  const std::string key = tuner::content_hash(source, co);
  std::optional<FileLock> lock;
  try {
    lock.emplace(co.cache_dir + "/locks/" + key + ".lock");
  } catch (const Error& e) {
    out.note = cat("compiled without the cross-process lock (", e.what(), ")");
  }
  tuner::CompileResult r;
  try {
    r = tuner::compile(v.name, source, co);
  } catch (const Error& e) {
    if (e.code() != Errc::io_error) throw;
    // A cache folder we cannot write (read-only home): compile without it rather than fail.
    out.note = cat("cubin cache not usable, compiled without it (", e.what(), ")");
    co.use_cache = false;
    r = tuner::compile(v.name, source, co);
  }
  if (!r.ok)
    throw Error(Errc::compile_failed,
                cat("variant ", v.name, " failed to compile for ", o.arch, ":\n", join(tuner::error_lines(r.log), "\n")),
                v.name);
  if (!r.cache_hit) g_compiles.fetch_add(1);
  out.cubin = std::move(r.cubin);
  out.from = r.cache_hit ? "cubin cache" : "JIT compile";
  out.hash = r.key;
  out.compiled = !r.cache_hit;
  out.compile_ms = r.cache_hit ? 0 : r.compile_ms;
  return out;
}

}  // namespace sage::rt::jit
