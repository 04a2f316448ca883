#include "sage/common/default_rules.h"

#include <algorithm>
#include <cstdint>

namespace sage {

namespace {
bool lists(std::string_view list, std::string_view name) {
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    if (list.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}
}  // namespace

bool default_rule_matches(const DefaultRule& r, const DefaultCall& c) {
  if (r.head_dim != c.head_dim) return false;
  if (r.paged != c.paged) return false;
  // A window's call reads as a variable-length one after the window entries.
  const bool varlen = c.varlen || c.window;
  if (r.kv8 && (!c.kv8 || r.window != c.window)) return false;  // FP8 pages' own entries
  if (c.paged) {
    if (r.window && !c.window) return false;  // a paged entry of windows: windowed calls only
  } else if (r.window) {
    if (!c.window || (r.dense && c.varlen)) return false;
  } else if (r.varlen != varlen) {
    return false;
  }
  if (r.max_seq_kv >= 0 && (c.seq_kv <= 0 || c.seq_kv > r.max_seq_kv)) return false;
  if (r.max_seq_q >= 0 && (c.seq_q <= 0 || c.seq_q > r.max_seq_q)) return false;
  if (r.min_seq_q >= 0 && c.seq_q <= r.min_seq_q) return false;
  if (r.max_bh >= 0 && (c.bh <= 0 || c.bh > r.max_bh)) return false;
  if (r.causal >= 0 && (c.causal < 0 || r.causal != c.causal)) return false;
  if (r.rows16 >= 0 && (r.rows16 == 1) != c.rows16) return false;
  if (!r.policies.empty() && !lists(r.policies, c.policy)) return false;
  return true;
}

int default_pairs(int pairs, int measured, int sms) {
  if (pairs <= 0 || sms <= 0 || measured <= 0 || sms == measured) return pairs;
  return std::max(1, int(std::int64_t(pairs) * measured / sms));
}

}  // namespace sage
