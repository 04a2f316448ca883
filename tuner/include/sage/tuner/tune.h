// `sage-tune tune`: for each problem bucket and accuracy policy, gate every variant of the
// device's architecture against the FP32 reference, time the ones that pass, and store every
// measurement and the winner.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sage/common/default_rules.h"
#include "sage/gen/search_space.h"
#include "sage/internal/launch.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/store.h"

namespace sage::tuner {

struct TuneOptions {
  std::string db_path;                          // empty: default_user_db_path()
  std::string problems_file;                    // empty: the built-in configs/problems.yaml
  std::vector<std::string> policies{"balanced"};
  double budget_s = 0;                          // stop starting new work after this; 0: none
  bool resume = false;                          // skip what the database already has
  int shard_index = 0, shard_count = 1;         // this process takes problems i, i+n, ...
  std::vector<int> devices{0};                  // one worker thread per device
  std::string filter;                           // regex over variant names
  unsigned compile_jobs = 0;                    // 0: one per core
  std::string cache_dir;                        // cubin cache; empty: default
};

struct ProblemResult {
  ProblemKey key;                // with its policy
  int device = 0;
  std::string winner;            // empty: no variant passed
  double median_us = 0, tops = 0, spread = 0;
  std::string runner_up;
  double margin = 0;             // runner-up median / winner median - 1
  bool tie = false;
  std::string default_variant;   // the architecture's default (configs/defaults.yaml)
  double default_us = 0;         // 0: not measured (did not pass this policy)
  double speedup = 0;            // default_us / median_us
  Accuracy gaussian, outliers;   // the winner's
  int candidates = 0, passed = 0, timed = 0, resumed = 0;
  // Not tuned: no variant of the device's architecture serves the bucket (unservable_why); such a
  // bucket has no winner and is no failure of the run.
  std::string skipped;
};

struct TuneProgress {
  std::string phase;             // "compile" | "tune"
  std::size_t done = 0, total = 0;
  std::string detail;
};

struct TuneReport {
  std::vector<DeviceFingerprint> devices;
  std::string db_path;
  int variants = 0, compiled = 0, compile_failed = 0, spilled = 0, cache_hits = 0;
  double compile_s = 0, gate_s = 0, timing_s = 0, total_s = 0;
  bool budget_exhausted = false;
  std::vector<ProblemResult> results;
  std::vector<std::string> warnings;
};

TuneReport tune(const TuneOptions& opts, const std::function<void(const TuneProgress&)>& on_progress = {});

// What tune would do on a GPU of `arch` (`sage-tune tune --dry-run`), without a GPU, a compile or a
// database: this shard's problems (their first policy), each with its candidates (the variants of
// its head dim that serve it, through --filter; a paged bucket's: the readers of its pages), the
// default first, as tune measures them. `sms`: the GPU's SMs, for the defaults' max_bh edges (0:
// as measured).
struct TunePlanEntry {
  ProblemKey key;
  std::string default_variant;          // empty: configs/defaults.yaml has none (note says why)
  std::vector<std::string> candidates;  // the default first where it is one
  std::string note;
};
struct TunePlan {
  std::string arch;
  int variants = 0;               // compiled for the run (every head dim, through --filter)
  std::size_t measurements = 0;   // candidates over every problem (a gate and a timing each, per policy set)
  std::vector<TunePlanEntry> problems;
};
TunePlan plan_tune(const TuneOptions& opts, const std::string& arch, int sms = 0);

// Why no variant of arch's whole search space (whatever --filter keeps) serves a bucket, in words
// ("no sm_80 variant takes sliding windows at head dim 256"); empty where one does. tune skips such
// buckets (ProblemResult::skipped), and the plan says so.
std::string unservable_why(const std::string& arch, const ProblemKey& k);

// What the tuner stores as a variant's record (VariantRecord::params_json): the pipeline, the
// architecture, the parameters, and the launcher's KernelConfig text, so that a runtime can
// serve a stored winner without parsing the search space.
std::string variant_record_json(const gen::Variant& v);
// The KernelConfig of a record written by variant_record_json (nullopt for other records).
std::optional<KernelConfig> stored_kernel_config(const VariantRecord& r);

// The architecture's default variant for a problem (configs/defaults.yaml), by name; throws
// Error(not_found) when the configuration has none or names a variant outside the space.
// `seq_kv` (the call's, or its bucket's) lets entries with `max_seq_kv` match; 0 skips them.
// `causal` (1 causal, 0 not) lets entries that name `causal` match; -1 (unknown) skips them.
// `seq_q` (the call's, or its bucket's) lets entries with `max_seq_q` match, and entries with
// `min_seq_q` only where it is above that; 0 skips both.
// `rows16`: the call is below head_dim and its rows are 16 but not 32 bytes long a multiple of
// (d % 16 == 8); entries that name `rows16: true` match only such calls.
// `bh` (the call's batch x query heads, or its bucket) lets entries with `max_bh` match; 0
// skips them.
// `sms`: the SMs the call runs on (the GPU's, or a green context's partition of them; 0: as
// measured). The max_bh edges are wave edges of the GPU they were measured on (defaults.yaml's
// `measured_sms`): on `sms` SMs, `bh` matches them as pairs_at_measured_sms(arch, bh, sms).
// `varlen`: a variable-length batch, which only the entries that name `varlen: true` match
// (and they match nothing else). `window`: a sliding window's call (its seq_kv the keys a query
// sees, min(seq_kv, window); causal 0: each query tile sees about that many), which the entries
// that name `window: true` match (and nothing else; those that also name `varlen: false` only
// where `varlen` is false: their kernels' window entry takes no packed batch), then the
// `varlen: true` ones (their kernels all take windows: the entry sage_attn_window).
// `paged`: a paged KV cache's call, which only the `paged: true` entries match (and with a
// window also those that name `window: true`). `kv8`: over FP8 pages, which also the entries that
// name `kv8: true` match (and nothing else), and they first where they come first.
std::string default_variant(const std::string& arch, int head_dim, const std::string& policy, int seq_kv = 0,
                            int causal = -1, int seq_q = 0, bool rows16 = false, int bh = 0, int sms = 0,
                            bool varlen = false, bool window = false, bool paged = false, bool kv8 = false);
// The SM count configs/defaults.yaml's max_bh edges of `arch` were measured on (0: none given).
int measured_sms(const std::string& arch);
// `pairs` (batch x query heads) on `sms` SMs as the count that fills the measured GPU's waves
// as much: floor(pairs * measured_sms / sms), at least 1. A kernel's grid of pairs x tiles CTAs
// fills ceil(that / (SMs x CTAs an SM)) waves, so the edges move with the SMs: on 112 SMs, 21
// pairs of 16 CTAs (336) are one wave of three CTAs an SM, as 24 (384 of 396) are on 132.
// `pairs` unchanged where sms is 0 or the measured count, or the file gives none.
int pairs_at_measured_sms(const std::string& arch, int pairs, int sms);
// default_variant's answer with the configs/defaults.yaml entry that gave it: its position in
// the architecture's list (from 0), its line in the file (from 1; 0 where unknown), and its
// conditions in words, as the file names them ("head_dim 128, max_seq_kv 4096, max_bh 8").
struct DefaultMatch {
  std::string variant;
  std::string list;  // the arch whose list holds the entry: the call's, or one it continues with
  int index = -1;    // the entry's place in that list
  int line = 0;
  std::string conditions;
  int bh = 0;  // the batch x query heads matched against max_bh (pairs_at_measured_sms)
};
DefaultMatch default_match(const std::string& arch, int head_dim, const std::string& policy, int seq_kv = 0,
                           int causal = -1, int seq_q = 0, bool rows16 = false, int bh = 0, int sms = 0,
                           bool varlen = false, bool window = false, bool paged = false, bool kv8 = false);
// One entry of an architecture's list in configs/defaults.yaml, in the order default_match walks
// them (the list's, then its continuation's): its conditions, the params that name its variant,
// and where it is, for messages. `sage-tune export` writes them into static builds.
struct DefaultEntry {
  DefaultRule rule;      // rule.policies views `policies`
  std::string policies;  // "balanced,fast"; empty: every policy
  std::vector<std::pair<std::string, std::string>> params;  // as the file writes them
  std::string list;      // the arch whose list holds the entry
  int index = -1;        // its place there
  int line = 0;          // in the file (from 1; 0 where unknown)
  std::string conditions;  // in words, as DefaultMatch::conditions
};
// The architecture's entries (parsed once per process; the reference stays valid). Throws
// Error(not_found) when the file has no list for `arch`.
const std::vector<DefaultEntry>& default_entries(const std::string& arch);
// The variant of arch's search space that an entry names; nullopt where none is (or it was pruned).
std::optional<std::string> entry_variant(const std::string& arch, const DefaultEntry& e);
// A rows16 call's default where defaults.yaml has an entry of its own for it: one that differs
// from the default of aligned rows in the same bucket. nullopt where it has none (or no default
// at all). Such a default serves the call ahead of a tuned winner, which the tuner measured on
// aligned rows (the runtime's jit::choose, `sage-tune bench --tuned`).
std::optional<std::string> rows16_default(const std::string& arch, int head_dim, const std::string& policy, int seq_kv,
                                          int causal, int seq_q, int bh = 0, int sms = 0);
// The default of a call whose batch x query heads (`pairs`) is not its bucket's boundary
// (`bh_bucket`), where defaults.yaml gives it another kernel than the boundary's: the entries'
// max_bh edges were measured on such counts, while a tuned winner was timed at the boundary
// only (ProblemsConfig::representative), so such a default serves the call ahead of the winner
// (the runtime's jit::choose, `sage-tune select`, `sage-tune bench --tuned`). nullopt where the
// two defaults agree (the winner serves the call) or where there is no default.
// `paged` / `kv8`: a paged bucket's call (ProblemKey::paged, kv8), asked of the paged entries.
std::optional<std::string> pairs_default(const std::string& arch, int head_dim, const std::string& policy, int seq_kv,
                                         int causal, int seq_q, bool rows16, int pairs, int bh_bucket, int sms = 0,
                                         bool paged = false, bool kv8 = false);

// The same for any bucket (ProblemKey): pairs_default with the key's fields (a paged key asked of
// the paged entries, a variable-length or window key of the varlen / window ones, as key_default).
std::optional<std::string> key_pairs_default(const std::string& arch, const ProblemKey& k, bool rows16, int pairs,
                                             int sms = 0);

// Whether a variant's kernel serves a bucket: every kernel a dense one; a paged bucket needs the
// entry sage_attn_paged (has_paged_entry), over FP8 pages sage_attn_paged_fp8 (has_paged_fp8_entry);
// a variable-length bucket sage_attn_varlen (has_varlen_entry), a sliding window's
// sage_attn_window (has_window_entry). The tuner measures a bucket's candidates that serve it
// only, and the runtime serves a stored winner only where it does.
bool serves(const KernelConfig& c, const ProblemKey& k);
// What a kernel that does not serve `k` lacks, in words ("reads no paged KV cache", "takes no
// variable-length batch", ...); empty where it serves it.
std::string not_served_why(const KernelConfig& c, const ProblemKey& k);
// The launcher config of a variant of arch's search space (enumerated once per process); nullopt
// where the space has no such variant.
std::optional<KernelConfig> variant_config(const std::string& arch, const std::string& name);
// A bucket's default at `bh` batch x query heads (0: the bucket's), as the runtime asks it for the
// bucket's calls: default_variant with the key's fields (a paged key of the paged entries; a
// variable-length one of the varlen entries; a window one of the window entries, then the varlen
// ones, as a non-causal call of its window's keys). `rows16` (rows off the 32-byte sectors) applies
// to dense keys only, as the runtime's choice does.
std::string key_default(const std::string& arch, const ProblemKey& k, int bh = 0, int sms = 0, bool rows16 = false);

}  // namespace sage::tuner
