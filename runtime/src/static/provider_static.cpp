// The provider of static builds (SAGE_WITH_NVRTC=OFF): the kernels exported into the build
// by `sage-tune export`, matched by exact bucket and by the device's cubin architecture.
// No NVRTC, no database, no YAML: bucket boundaries come from the exported table.
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

std::string build_summary() {
  const StaticTable& t = static_table();
  if (t.kernel_count == 0)
    return "this static build has no exported kernels (it was built without -DSAGE_TUNED_KERNELS=DIR from sage-tune export)";
  std::vector<std::string> keys;
  for (const Parsed& p : entries()) {
    std::string k = p.kernel->bucket;
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  std::string list;
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i) list += (i ? ", " : "") + keys[i];
  if (keys.size() > 8) list += cat(", ... (", keys.size() - 8, " more)");
  return cat("this static build holds ", t.kernel_count, " kernels for ", keys.size(), " buckets, exported from ",
             t.source_db, ": ", list);
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

// The table holds tuned winners, which are looked up without rows16 (a JIT build's defaults
// are what it changes): such a call takes its bucket's winner.
static BucketKey table_key(BucketKey key) {
  key.rows16 = false;
  return key;
}

void precheck(const BucketKey& call_key) {
  if (call_key.varlen)
    throw Error(Errc::not_in_build, "variable-length batches (sage_attention_varlen) need a JIT build: an exported "
                                    "static build holds tuned winners of dense buckets only");
  if (call_key.window)
    throw Error(Errc::not_in_build, "sliding windows (desc->window) need a JIT build: an exported static build holds "
                                    "tuned winners of dense buckets without a window");
  if (call_key.paged)
    throw Error(Errc::not_in_build, "paged KV caches (sage_attention_paged) need a JIT build: an exported static build "
                                    "holds tuned winners of dense buckets only");
  const BucketKey key = table_key(call_key);
  for (const Parsed& p : entries())
    if (p.key == key) return;
  throw Error(Errc::not_in_build, cat("problem bucket ", key.str(), " is not in this build; ", build_summary(),
                                      ". Tune it (sage-tune tune) and export again, or use a JIT build"));
}

Resolved resolve(const BucketKey& call_key, const AttnProblem&, const Device& dev) {
  const BucketKey key = table_key(call_key);
  const std::string arch = arch_for_cc(dev.cc);
  if (arch.empty())
    throw Error(Errc::unsupported, cat(dev.name, " (compute capability ", dev.cc / 10, ".", dev.cc % 10,
                                       ") is not a target of sage-tune (", target_archs_text(), ")"));
  const Parsed* best = nullptr;
  std::vector<std::string> archs;
  for (const Parsed& p : entries()) {
    if (!(p.key == key)) continue;
    archs.push_back(cat(p.kernel->arch, " (", p.kernel->device, ")"));
    if (arch != p.kernel->arch) continue;
    // Several GPUs of one architecture may have their own winners: the one tuned on this
    // very GPU model first, else the first exported.
    if (!best || (dev.name == p.kernel->device && best->kernel->device != dev.name)) best = &p;
  }
  if (!best)
    throw Error(Errc::not_in_build,
                cat("problem bucket ", key.str(), " is in this build only for ", join(archs, ", "), "; this device, ",
                    dev.name, " (compute capability ", dev.cc / 10, ".", dev.cc % 10, "), needs ", arch));
  const StaticKernel& k = *best->kernel;
  Resolved r;
  Selection& s = r.selection;
  s.bucket = key.str();
  s.device = dev.name;
  s.arch = arch;
  s.source = Source::static_table;
  s.db = static_table().source_db;
  s.variant = k.variant;
  s.config = KernelConfig::parse(k.config);
  s.kernel_from = "static table";
  s.kernel_hash = k.cubin_sha256;
  if (dev.name != k.device) s.notes.push_back(cat("tuned on ", k.device, ", served on ", dev.name, " (same architecture)"));
  r.cubin = reinterpret_cast<const char*>(k.cubin);
  r.cubin_size = k.cubin_size;
  return r;
}

std::uint64_t compile_count() { return 0; }
void reset() {}
const char* kind() { return "static"; }

}  // namespace sage::rt::provider
