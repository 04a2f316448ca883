// sage-tune select: which kernel variant serves a call, and why. The call's problem bucket (as
// the runtime keys its cache and the tune databases), then, in the runtime's order
// (runtime/src/jit/select.cpp: choose): a rows16 call's own defaults.yaml entry, this GPU's
// winner in the user DB, then in the system DB, then the architecture's default with the
// configs/defaults.yaml entry that matched. With --arch, or without a GPU, the databases (whose
// winners belong to a device) are not consulted and the default is the answer. --sms reads the
// defaults for another SM count (another GPU of the architecture, a green context's partition).
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sage/common/archs.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/paged.h"
#include "sage/common/strings.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/store.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"

namespace sage::cli {
namespace {

struct SelectArgs {
  int head_dim = 0, seq = 0, seq_kv = 0, batch = 4, heads = 32, heads_kv = 0;
  int sms = 0;  // the SMs the call runs on (0: this GPU's; with --arch, as the defaults were measured)
  std::string causal = "no", layout = "HND", dtype = "fp16", policy = "balanced", arch, db;
  bool json = false;
  bool varlen = false;  // a variable-length batch (-b sequences, -n / --seq-kv the longest)
  int window = 0;       // a causal sliding window (0: none)
  int paged = 0;        // a paged KV cache's page size (0: none)
  bool kv_fp8 = false;  // its pages FP8 (e4m3)
};

// The smallest kernel head dim at or above d (configs/search_space.yaml: 64, 128 and 256 on
// every pipeline; runtime/src/keys.cpp: kernel_head_dim).
int kernel_head_dim(int d) {
  for (int x : {64, 128, 256})
    if (x >= d) return x;
  return 0;
}

int run_select(const SelectArgs& a) {
  AttnProblem p;
  p.batch = a.batch;
  p.heads_q = a.heads;
  p.heads_kv = a.heads_kv > 0 ? a.heads_kv : a.heads;
  p.seq_q = a.seq;
  p.seq_kv = a.seq_kv > 0 ? a.seq_kv : a.seq;
  p.head_dim = a.head_dim;
  if (a.causal != "yes" && a.causal != "no") throw Error(Errc::invalid_argument, "--causal must be yes or no");
  p.causal = a.causal == "yes";
  p.layout = a.varlen ? Layout::NHD : parse_layout(a.layout);
  p.dtype = parse_dtype(a.dtype);
  p.varlen = a.varlen;
  p.window = a.window;
  p.paged = a.paged > 0;
  p.page_size = a.paged;
  p.kv_fp8 = a.kv_fp8;
  if (a.paged < 0) throw Error(Errc::invalid_argument, cat("--paged must be a page size >= 1, got ", a.paged));
  if (a.kv_fp8 && a.paged <= 0) throw Error(Errc::invalid_argument, "--kv-fp8 needs --paged (FP8 pages of a paged cache)");
  p.validate();
  if (p.causal && p.seq_q > p.seq_kv && !a.varlen)
    throw Error(Errc::invalid_argument, cat("causal needs -n <= --seq-kv (bottom-right aligned mask), got ", p.seq_q,
                                            " > ", p.seq_kv));
  // A sliding window: the call as the runtime runs it (the keys no query sees left out, a window
  // of every key none), selected like a variable-length batch at the keys a query sees.
  const int call_kv = p.seq_kv, skipped = p.window_skip();
  p.trim_window();
  const bool window = p.window > 0;
  const bool varlen_defaults = a.varlen || window || p.paged;
  const int kd = kernel_head_dim(p.head_dim);
  if (kd == 0) throw Error(Errc::unsupported, cat("head_dim ", p.head_dim, ": the kernels go up to 256"));
  // Rows 16 but not 32 bytes long a multiple of: defaults.yaml may have entries of their own.
  const bool rows16 = kd > p.head_dim && p.head_dim % 16 == 8;

  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  if (!cfg.policies.count(a.policy))
    throw Error(Errc::invalid_argument, cat("unknown policy '", a.policy, "' (accurate, balanced or fast)"));
  // The bucket of the call as run: at the kernels' head dim (the tuner's and runtime's key).
  AttnProblem kp = p;
  kp.head_dim = kd;
  // (a window's key: the bucket of the keys a query sees, min(seq_kv, window); ProblemsConfig::key_of)
  // (a paged call without window or varlen: its paged bucket; a varlen or window call: its own)
  tuner::ProblemKey key = cfg.key_of(kp, a.policy);
  if (p.paged) key.seq_q_bucket = paged_seq_q_bucket(p.seq_q, cfg.seq_bucket(p.seq_q));  // as the runtime's BucketKey
  // Every call but a paged one with a window or variable-length queries may take a winner.
  const bool tunable = !(p.paged && (a.varlen || window));
  tuner::ProblemKey base = key;
  base.paged = base.kv8 = base.varlen = base.window = false;
  const std::string bucket =
      base.str() + (a.varlen ? "_varlen" : "") + (window ? "_window" : "") + (p.kv_fp8 ? "_kv8" : "") + (p.paged ? "_paged" : "");

  // The architecture: --arch, else this GPU's (whose databases are then consulted).
  std::string arch = a.arch, gpu_why;
  if (!arch.empty() && !is_target_arch(arch))
    throw Error(Errc::invalid_argument, cat("unknown --arch '", arch, "' (", target_archs_text(), ")"));
  std::optional<tuner::DeviceFingerprint> fp;
  if (arch.empty()) {
    if (!cu::have_device(&gpu_why))
      throw Error(Errc::no_device, cat("no GPU here (", gpu_why, "): name the architecture with --arch (",
                                       target_archs_text(), ") to see its default"));
    use_device(0);
    fp = tuner::fingerprint_device(0);
    arch = tuner::arch_for_cc(fp->cc);  // Error(unsupported) where no target runs
  }
  if (a.sms < 0) throw Error(Errc::invalid_argument, cat("--sms must be >= 1, got ", a.sms));
  // The SMs the call runs on, which scale the defaults' max_bh edges (measured_sms).
  const int sms = a.sms > 0 ? a.sms : fp ? fp->sm_count : 0;
  const int measured = tuner::measured_sms(arch);

  std::string variant, source, db, why;
  tuner::DefaultMatch entry;
  // As the runtime: a default's max_bh matches the call's own batch x query heads, and where
  // that default differs from the bucket boundary's it leads a winner timed at the boundary.
  const int pairs = p.batch * p.heads_q;
  const int pairs_as = tuner::pairs_at_measured_sms(arch, pairs, sms);
  const auto own = rows16 && !varlen_defaults ? tuner::rows16_default(arch, kd, a.policy, key.seq_kv_bucket, p.causal ? 1 : 0,
                                                  key.seq_q_bucket, pairs, sms)
                          : std::nullopt;
  const auto own_pairs = own || !tunable ? std::nullopt : tuner::key_pairs_default(arch, key, rows16, pairs, sms);
  // The paged entries, as they serve a paged call without a winner.
  const std::string paged_why =
      p.kv_fp8 ? "FP8 pages: configs/defaults.yaml's paged entries serve it as an FP16 pages' call, and those "
                 "that name kv8, which serve FP8 calls only (their kernels have the FP8 entries)"
      : window ? "a sliding window over a paged KV cache: configs/defaults.yaml's paged entries of mma.sync kernels, "
                 "or those that name paged and window, serve it (their kernels have the window entries)"
               : "a paged KV cache: configs/defaults.yaml's paged entries serve it (their kernels read the block table)";
  // Without a winner: the defaults, of the paged, varlen or window entries where the call is such.
  const std::string default_source = p.paged ? "paged default" : a.varlen ? "varlen default" : window ? "window default" : "";
  const std::string default_why =
      p.paged    ? paged_why + "; "
      : a.varlen ? "a variable-length batch: configs/defaults.yaml's varlen entries serve it without a winner; "
      : window   ? "a sliding window: configs/defaults.yaml's window entries, then its varlen ones, serve it without a "
                   "winner, as non-causal sequences of the keys a query sees (their kernels take windows); "
                 : "";
  if (p.paged && !tunable) {
    source = "paged default";
    why = paged_why + (a.varlen ? "; variable-length queries take them by the longest sequence (tuned winners are "
                                  "of paged buckets without them or a window)"
                                : "; tuned winners are of paged buckets without a window");
  } else if (own) {
    source = "rows16 default";
    why = "rows 16 but not 32 bytes long a multiple of: configs/defaults.yaml's rows16 entry for this bucket serves "
          "them ahead of a winner tuned on aligned rows";
  } else if (own_pairs) {
    source = "pairs default";
    why = cat(pairs, " (sequence, query head) pairs",
              pairs_as != pairs ? cat(" on ", sms, " SMs (as ", pairs_as, " on ", measured, ")") : std::string(),
              ": configs/defaults.yaml's entry for that count serves them ahead of a winner timed at the bucket's ",
              key.bh_bucket);
  } else if (fp) {
    source = default_source;
    tuner::LookupOptions o;
    o.user_db = a.db;
    o.quick_check = false;
    tuner::WinnerLookup lookup(o);
    const tuner::WinnerKey wk{*fp, key, tuner::generator_hash(), tuner::nvrtc_version()};
    const tuner::LookupResult r = lookup.find(wk, true);
    // As the runtime: a paged, varlen or window bucket's winner must serve such calls.
    const std::optional<KernelConfig> wcfg =
        r.status != tuner::LookupResult::Status::miss ? tuner::variant_config(arch, r.winner->variant) : std::nullopt;
    const std::string lacks = wcfg ? tuner::not_served_why(*wcfg, key) : std::string();
    if (r.status != tuner::LookupResult::Status::miss && lacks.empty()) {
      variant = r.winner->variant;
      db = r.db;
      const tuner::Store* user = lookup.user();
      source = user && user->path() == r.db ? "user DB" : "system DB";
      why = cat("the winner tuned for this bucket on this GPU (", db, ")");
    } else if (!lacks.empty()) {
      why = default_why + cat("the winner ", r.winner->variant, " in ", r.db, " ", lacks, ": not served");
    } else {
      why = default_why + "no tuned winner: " + tuner::describe_miss(r);
    }
  } else {
    source = default_source;
    why = default_why + "--arch: the databases' winners belong to a device and were not consulted";
  }
  if (variant.empty()) {
    // (a window: read as non-causal sequences of the keys a query sees, as the runtime does)
    entry = tuner::default_match(arch, kd, a.policy, key.seq_kv_bucket, p.causal && (!window || p.paged) ? 1 : 0,
                                 key.seq_q_bucket,
                                 rows16 && !varlen_defaults, pairs, sms, a.varlen && !p.paged, window, p.paged,
                                 p.kv_fp8);
    variant = entry.variant;
    if (source.empty()) source = "default";
  }

  if (a.json) {
    nlohmann::json j = {{"head_dim", p.head_dim},
                        {"kernel_head_dim", kd},
                        {"rows16", rows16},
                        {"batch", p.batch},
                        {"heads", p.heads_q},
                        {"heads_kv", p.heads_kv},
                        {"seq", p.seq_q},
                        {"seq_kv", p.seq_kv},
                        {"causal", p.causal},
                        {"layout", to_string(p.layout)},
                        {"dtype", a.dtype},
                        {"policy", a.policy},
                        {"bucket", bucket},
                        {"varlen", a.varlen},
                        {"window", p.window},
                        {"page_size", p.page_size},
                        {"keys_left_out", skipped},
                        {"arch", arch},
                        {"device", fp ? fp->name : ""},
                        {"sms", sms},
                        {"measured_sms", measured},
                        {"pairs", pairs},
                        {"pairs_as_measured", pairs_as},
                        {"variant", variant},
                        {"source", source},
                        {"db", db},
                        {"why", why}};
    if (entry.index >= 0)
      j["defaults_entry"] = {
          {"list", entry.list}, {"index", entry.index}, {"line", entry.line}, {"conditions", entry.conditions}};
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::cout << "call:    d=" << p.head_dim;
  if (kd != p.head_dim)
    std::cout << " (on the head dim " << kd << " kernels, "
              << (p.head_dim % 8 == 0 ? "rows read as zero-padded in place" : "through zero-padded copies") << ")";
  std::cout << ", B=" << p.batch << ", Hq=" << p.heads_q << ", Hkv=" << p.heads_kv << ", " << p.seq_q << " queries over "
            << p.seq_kv << " keys, " << (p.causal ? "causal" : "no mask") << ", " << a.dtype << ", " << to_string(p.layout)
            << ", policy " << a.policy << "\n";
  if (a.varlen)
    std::cout << "varlen:  " << p.batch << " sequences packed [total, heads, D], the longest " << p.seq_q
              << " queries over " << p.seq_kv << " keys\n";
  if (a.window > 0)
    std::cout << "window:  " << a.window << " keys a query"
              << (skipped > 0 ? cat(", the first ", skipped, " of ", call_kv, " keys left out (no query sees them)")
                              : std::string())
              << (window ? cat(": each query sees up to ", std::min(p.seq_kv, p.window), " keys")
                         : std::string(": every key left is inside each query's window (a plain causal call)"))
              << "\n";
  if (p.paged)
    std::cout << "paged:   pages of " << p.page_size << " slots; each sequence's keys up to " << p.seq_kv << "\n";
  std::cout << "bucket:  " << bucket << "\n";
  std::cout << "arch:    " << arch << (fp ? " (this GPU: " + fp->name + ")" : std::string(" (--arch)")) << "\n";
  if (pairs_as != pairs)
    std::cout << "SMs:     " << sms << ": " << pairs << " (sequence, query head) pairs fill the waves as " << pairs_as
              << " do on the " << measured << " SMs the defaults' max_bh edges were measured on\n";
  std::cout << "serves:  " << variant << "\n";
  std::cout << "source:  " << source << ": " << why << "\n";
  if (entry.index >= 0)
    std::cout << "entry:   configs/defaults.yaml" << (entry.line > 0 ? cat(" line ", entry.line) : std::string())
              << ", the " << entry.list << " list's entry " << entry.index + 1
              << (entry.list != arch ? cat(" (the ", arch, " list continues with ", entry.list, "'s)") : std::string())
              << ": " << entry.conditions << "\n";
  // bench runs head dims below the kernels' that are multiples of 8 in place, as the runtime
  // does; others (copies in the runtime) it times at the kernels' head dim.
  const int bench_d = p.head_dim % 8 == 0 ? p.head_dim : kd;
  if (p.paged) {
    std::cout << "time it: "
              << cat("sage-tune bench --variant ", variant, " -d ", bench_d, " -n ", p.seq_q, " --seq-kv ", p.seq_kv,
                     " --batch ", p.batch, " --heads ", p.heads_q,
                     p.heads_kv != p.heads_q ? cat(" --heads-kv ", p.heads_kv) : std::string(), " --causal ", a.causal,
                     window ? cat(" --window ", p.window) : std::string(), " --paged ", p.page_size,
                     p.kv_fp8 ? " --kv-fp8" : "", a.layout != "HND" ? " --layout " + a.layout : std::string(),
                     a.dtype != "fp16" ? " --dtype " + a.dtype : std::string())
              << "\n";
    return kOk;
  }
  if (a.varlen) {
    std::cout << "time it: "
              << cat("sage-tune bench --variant ", variant, " -d ", bench_d, " --varlen ", p.seq_q, "x", p.batch,
                     " --heads ", p.heads_q, p.heads_kv != p.heads_q ? cat(" --heads-kv ", p.heads_kv) : std::string(),
                     " --causal ", a.causal, window ? cat(" --window ", p.window) : std::string(),
                     a.dtype != "fp16" ? " --dtype " + a.dtype : std::string())
              << "\n";
    return kOk;
  }
  std::cout << "time it: "
            << cat("sage-tune bench --variant ", variant, " -d ", bench_d, " -n ", p.seq_q,
                   p.seq_kv != p.seq_q ? cat(" --seq-kv ", p.seq_kv) : std::string(), " --batch ", p.batch, " --heads ",
                   p.heads_q, p.heads_kv != p.heads_q ? cat(" --heads-kv ", p.heads_kv) : std::string(), " --causal ",
                   a.causal, window ? cat(" --window ", p.window) : std::string(),
                   a.layout != "HND" ? " --layout " + a.layout : std::string(),
                   a.dtype != "fp16" ? " --dtype " + a.dtype : std::string(),
                   a.sms > 0 ? cat(" --sms ", a.sms) : std::string())
            << "\n";
  return kOk;
}

Registrar reg_select(
    "select", "Show which kernel variant serves a call and why: its bucket, a tuned winner or the default's entry",
    [](CLI::App& sub) -> Action {
      auto a = std::make_shared<SelectArgs>();
      sub.add_option("-d,--head-dim", a->head_dim, "the call's head dim (1-256)")->required();
      sub.add_option("-n,--seq", a->seq, "queries (and keys unless --seq-kv)")->required();
      sub.add_option("--seq-kv", a->seq_kv, "keys (default: -n)");
      sub.add_option("-b,--batch", a->batch, "batch size")->capture_default_str();
      sub.add_option("--heads", a->heads, "query heads (and kv heads unless --heads-kv)")->capture_default_str();
      sub.add_option("--heads-kv", a->heads_kv, "kv heads (grouped-query attention; default: --heads)");
      sub.add_option("--causal", a->causal, "yes or no")->capture_default_str();
      sub.add_option("--layout", a->layout, "HND or NHD")->capture_default_str();
      sub.add_option("--dtype", a->dtype, "fp16 or bf16")->capture_default_str();
      sub.add_option("--policy", a->policy, "accuracy policy: accurate, balanced or fast")->capture_default_str();
      sub.add_option("--arch", a->arch,
                     cat("architecture whose default to show (", target_archs_text(),
                         "); default: this GPU's, with its tuned winners"));
      sub.add_option("--db", a->db, "user tune database (default: $SAGE_DB or ~/.cache/sage-tune/tune.db)");
      sub.add_option("--sms", a->sms,
                     "SMs the call runs on: another GPU of the architecture (H100 PCIe 114, H20 78) or a green "
                     "context's partition; default: this GPU's, or with --arch the count the defaults were measured on");
      sub.add_flag("--json", a->json, "print JSON");
      sub.add_flag("--varlen", a->varlen,
                   "a variable-length batch (sage_attention_varlen): -b sequences packed [total, heads, D], -n and "
                   "--seq-kv the longest; shows its varlen default");
      sub.add_option("--paged", a->paged,
                     "a paged KV cache of pages of P slots (sage_attention_paged; --seq-kv the keys' upper bound; "
                     "with --varlen, variable-length queries over it: sage_attention_varlen_paged); shows its paged "
                     "default");
      sub.add_flag("--kv-fp8", a->kv_fp8, "--paged: FP8 (e4m3) pages (sage_paged_kv::kv_dtype); shows the kernel that reads them");
      sub.add_option("--window", a->window,
                     "a causal sliding window: each query sees its W most recent keys (0: none); shows the kernel "
                     "that serves it (its window defaults, then the varlen ones, at the keys a query sees)");
      return [a]() { return run_select(*a); };
    },
    52);

}  // namespace
}  // namespace sage::cli
