// configs/problems.yaml: problem buckets, accuracy policies, the gate's shape, timing
// settings, and the default problem set of `sage-tune tune`.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sage/internal/problem.h"
#include "sage/tuner/store.h"

namespace sage::tuner {

struct Thresholds {
  double cos_min = 0;
  double rel_l1_max = 0;
};

struct Policy {
  std::string name;              // accurate | balanced | fast
  std::vector<std::string> pv;   // admitted P.V precisions
  Thresholds gaussian, outliers;
  bool admits_pv(const std::string& pv_value) const;
};

struct GateShape {
  int batch = 1, heads_q = 8, heads_kv = 2, max_seq = 2048, seeds = 1;
};

// How a paged problem (ProblemKey::paged) is built for the gate and for timing: each sequence's
// keys in pages of page_size slots drawn in a shuffled order from a pool (tuner::PagedKv), and
// the timed problem's kv heads (of its 32 query heads: grouped-query attention, as the serving
// engines' models have it).
struct PagedConfig {
  int page_size = 16;
  int heads_kv = 8;
};
// How a variable-length bucket (ProblemKey::varlen) is timed: bh / 32 sequences (one below 32
// heads) of these fractions of the bucket's longest sequence, in turn (a packed prefill batch's
// spread of prompt lengths), over heads_kv kv heads of the 32 query heads (heads_q / 4 below 32).
struct VarlenConfig {
  std::vector<double> lengths{1.0, 0.75, 0.5, 0.25};
  int heads_kv = 8;
};

// A variable-length batch's sequences: each one's queries and keys.
struct SeqLens {
  std::vector<int> q, kv;
  bool empty() const { return q.empty(); }
};
// `base` (its heads, head dim, mask, window, dtype) as the variable-length call of `lens`:
// batch the sequences, seq_q / seq_kv the longest, total_q / total_kv the packed rows, NHD.
AttnProblem with_sequences(AttnProblem base, const SeqLens& lens);
// Sequences of `fractions` of q and kv queries and keys, in turn, n of them (at least one each);
// with a window (> 0) each sequence's keys are its queries + window - 1 (every query sees the
// window's keys: a chunk after a long prompt).
SeqLens fraction_sequences(const std::vector<double>& fractions, int n, int q, int kv, int window);

struct TimingConfig {
  int warmup = 2, min_samples = 10, max_samples = 30, input_sets = 2;
  double max_seconds = 1.0, abandon_margin = 0.10;
};

struct ProblemsConfig {
  std::vector<int> seq_buckets;   // ascending
  std::vector<int> bh_buckets;    // ascending
  std::map<std::string, Policy> policies;
  GateShape gate;
  TimingConfig timing;
  PagedConfig paged;
  VarlenConfig varlen;
  // The default problem set, policy left "balanced" (tune replaces it per --policy).
  std::vector<ProblemKey> problems;

  // Parses and validates; errors name file:line and the key.
  static ProblemsConfig from_file(const std::string& path);
  static ProblemsConfig from_string(const std::string& yaml, const std::string& display_name);
  static ProblemsConfig builtin();  // configs/problems.yaml embedded in the binary

  const Policy& policy(const std::string& name) const;  // throws Error(invalid_argument)
  int seq_bucket(int seq) const;  // smallest boundary >= seq, or the largest boundary
  int bh_bucket(int bh) const;
  // The bucket a call falls in, as the runtime keys it. A paged call without a window or
  // variable-length queries has a paged bucket (seq_q: paged_seq_q_bucket; kv8 for FP8 pages);
  // other paged calls (which take configs/defaults.yaml's entries, never a winner) the dense one.
  // A variable-length batch has a varlen bucket; a sliding window's call (trimmed first, as
  // AttnProblem::trim_window: one whose window holds every key a query sees is dense) a window
  // bucket of its window's keys, min(seq_kv, window).
  ProblemKey key_of(const AttnProblem& p, const std::string& policy) const;
  // The problem the tuner times for a bucket: B*H = bh (B = bh/32 when bh >= 32, H = 32),
  // seq_q = seq_q_bucket, seq_kv = seq_kv_bucket, heads_kv = heads_q. A paged bucket's: over
  // pages of paged.page_size slots (FP8 for kv8), paged.heads_kv kv heads of 32 (heads_q / 4
  // below 32 query heads, at least 1).
  // A variable-length bucket's: with_sequences of sequences(k), varlen.heads_kv kv heads. A
  // sliding window's (causal): seq_q = seq_q_bucket queries, each seeing window = seq_kv_bucket
  // keys (seq_kv = seq_q + window - 1; a variable-length one's sequences alike).
  AttnProblem representative(const ProblemKey& k) const;
  // A variable-length bucket's timed sequences (empty for other buckets).
  SeqLens sequences(const ProblemKey& k) const;
};

// Fingerprint of a device (driver API). Throws Error(no_device) without one.
DeviceFingerprint fingerprint_device(int device = 0);
// The target architecture of a compute capability (sage::target_arch_for_cc: "sm_80" ...
// "sm_120", sm_90 -> sm_90a); throws Error(unsupported) where none runs (below 8.0, 11.x).
std::string arch_for_cc(int cc);

}  // namespace sage::tuner
