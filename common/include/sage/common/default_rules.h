// The conditions of one configs/defaults.yaml entry and the call they are matched against.
// Shared by the tuner, which reads the entries from the YAML (tuner::default_match), and by an
// exported static runtime, which holds them as `sage-tune export` wrote them: both walk an
// architecture's entries in order and take the first that matches, so a static build chooses
// the kernel a JIT build would.
#pragma once
#include <string_view>

namespace sage {

struct DefaultRule {
  int head_dim = 0;
  bool paged = false;   // `paged: true`: paged KV caches' calls, which match no other entry
  bool window = false;  // `window: true`: sliding windows' calls only (with paged: those over a
                        // paged cache, which also match the paged entries that do not name it)
  bool varlen = false;  // `varlen: true`: variable-length batches, and windows after the window entries
  bool kv8 = false;     // `kv8: true`: calls over FP8 pages only (with window: those with a window,
                        // else those without); FP8 pages also match every paged entry as FP16 ones
  bool dense = false;   // `window: true, varlen: false`: windows of dense calls only (kernels whose
                        // sage_attn_window takes no packed batch)
  // -1 where the entry does not name it.
  int max_seq_kv = -1, max_seq_q = -1, min_seq_q = -1, max_bh = -1;
  int causal = -1, rows16 = -1;  // 0 or 1 where named
  std::string_view policies;     // "balanced,fast"; empty: every policy
};

// A call as the defaults see it (tuner::default_variant's arguments).
struct DefaultCall {
  int head_dim = 0;
  std::string_view policy;
  int seq_kv = 0;     // 0: entries with max_seq_kv do not match
  int causal = -1;    // 1 causal, 0 not, -1 unknown (entries that name causal do not match)
  int seq_q = 0;      // 0: entries with max_seq_q or min_seq_q do not match
  bool rows16 = false;
  int bh = 0;         // batch x query heads at the measured SMs (default_pairs); 0: entries with max_bh do not match
  bool varlen = false;  // a variable-length batch (a window's call is matched as one after the window entries)
  bool window = false, paged = false;
  bool kv8 = false;   // a paged call over FP8 pages
};

bool default_rule_matches(const DefaultRule& r, const DefaultCall& c);

// `pairs` on `sms` SMs as the count that fills the waves of the GPU the max_bh edges were
// measured on (`measured` SMs) as much: floor(pairs x measured / sms), at least 1; unchanged
// where any of them is 0 or sms == measured.
int default_pairs(int pairs, int measured, int sms);

}  // namespace sage
