// Problem buckets, cache keys, architectures and reproducing command lines.
#include <algorithm>
#include <cstdio>
#include <functional>

#include "sage/common/archs.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/internal/runtime.h"
#include "sage/common/paged.h"

namespace sage::rt {

const char* to_string(Policy p) {
  switch (p) {
    case Policy::accurate: return "accurate";
    case Policy::balanced: return "balanced";
    case Policy::fast: return "fast";
  }
  return "?";
}

Policy parse_policy(const std::string& s) {
  if (s == "accurate") return Policy::accurate;
  if (s == "balanced") return Policy::balanced;
  if (s == "fast") return Policy::fast;
  throw Error(Errc::invalid_argument, "unknown policy '" + s + "' (expected accurate, balanced or fast)");
}

const char* to_string(Source s) {
  switch (s) {
    case Source::user_db: return "user DB";
    case Source::system_db: return "system DB";
    case Source::default_variant: return "default";
    case Source::static_table: return "static table";
  }
  return "?";
}

std::string BucketKey::str() const {
  return cat("d", head_dim, "_", causal ? "causal" : "noncausal", "_", to_string(dtype), "_", to_string(layout), "_q",
             seq_q, "_kv", seq_kv, "_bh", bh, "_", to_string(policy), rows16 ? "_r16" : "", varlen ? "_varlen" : "",
             window ? "_window" : "", kv8 ? "_kv8" : "", paged ? "_paged" : "");
}

BucketKey BucketKey::parse(const std::string& s) {
  auto bad = [&](const std::string& why) -> Error {
    return Error(Errc::invalid_argument, "bucket key '" + s + "': " + why);
  };
  std::vector<std::string> f = split(s, '_');
  const bool paged = f.size() > 8 && f.back() == "paged";
  if (paged) f.pop_back();
  const bool kv8 = f.size() > 8 && f.back() == "kv8";
  if (kv8) f.pop_back();
  if (kv8 && !paged) throw bad("kv8 (FP8 pages) is a paged key's");
  const bool window = f.size() > 8 && f.back() == "window";
  if (window) f.pop_back();
  const bool varlen = f.size() > 8 && f.back() == "varlen";
  if (varlen) f.pop_back();
  if (f.size() != 8 && !(f.size() == 9 && f[8] == "r16"))
    throw bad(cat("expected 8 '_'-separated fields (d128_causal_fp16_HND_q4096_kv4096_bh128_balanced), and an optional "
                  "ninth, r16, each optionally followed by varlen, then by window, then by kv8, then by paged; got ", f.size()));
  auto num = [&](const std::string& field, const char* prefix, const char* name) {
    if (!starts_with(field, prefix)) throw bad(cat("field ", name, " must start with '", prefix, "', got '", field, "'"));
    const std::string digits = field.substr(std::string(prefix).size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw bad(cat("field ", name, " needs a positive integer, got '", field, "'"));
    const int v = std::stoi(digits);
    if (v < 1) throw bad(cat("field ", name, " must be >= 1, got '", field, "'"));
    return v;
  };
  BucketKey k;
  k.head_dim = num(f[0], "d", "head_dim");
  if (f[1] == "causal") k.causal = true;
  else if (f[1] == "noncausal") k.causal = false;
  else throw bad("field causal must be 'causal' or 'noncausal', got '" + f[1] + "'");
  if (f[2] == "fp16") k.dtype = DType::fp16;
  else if (f[2] == "bf16") k.dtype = DType::bf16;
  else throw bad("field dtype must be fp16 or bf16, got '" + f[2] + "'");
  if (f[3] == "HND") k.layout = Layout::HND;
  else if (f[3] == "NHD") k.layout = Layout::NHD;
  else throw bad("field layout must be HND or NHD, got '" + f[3] + "'");
  k.seq_q = num(f[4], "q", "seq_q_bucket");
  k.seq_kv = num(f[5], "kv", "seq_kv_bucket");
  k.bh = num(f[6], "bh", "bh_bucket");
  try {
    k.policy = parse_policy(f[7]);
  } catch (const Error& e) {
    throw bad("field policy: " + e.message());
  }
  k.rows16 = f.size() == 9;
  k.varlen = varlen;
  k.window = window;
  if (window && !k.causal) throw bad("a window key must be causal");
  k.paged = paged;
  k.kv8 = kv8;
  return k;
}

static int bucket_of(const std::vector<int>& b, int v) {
  for (int x : b)
    if (v <= x) return x;
  return b.empty() ? v : b.back();
}
int Buckets::seq_bucket(int v) const { return bucket_of(seq, v); }
int Buckets::bh_bucket(int v) const { return bucket_of(bh, v); }

BucketKey Buckets::key_of(const AttnProblem& p, Policy policy, int call_head_dim) const {
  BucketKey k;
  k.rows16 = call_head_dim > 0 && call_head_dim < p.head_dim && call_head_dim % 16 == 8;
  k.head_dim = p.head_dim;
  k.causal = p.causal;
  k.dtype = p.dtype;
  k.layout = p.layout;
  k.seq_q = p.paged ? paged_seq_q_bucket(p.seq_q, seq_bucket(p.seq_q)) : seq_bucket(p.seq_q);
  // A sliding window's calls are selected by the keys a query sees.
  k.seq_kv = seq_bucket(p.window > 0 ? std::min(p.seq_kv, p.window) : p.seq_kv);
  // Validated problems keep batch and heads_q below 65536 each, so the product fits an int.
  k.bh = bh_bucket(p.batch * p.heads_q);
  k.policy = policy;
  k.varlen = p.varlen;
  k.window = p.window > 0;
  k.paged = p.paged;
  k.kv8 = p.paged && p.kv_fp8;
  return k;
}

std::size_t CacheKeyHash::operator()(const CacheKey& k) const noexcept {
  // FNV-style mixing of the fields; collisions only cost a comparison.
  std::size_t h = std::hash<std::uint64_t>()(k.ctx);
  auto mix = [&h](std::size_t v) { h = (h ^ v) * 1099511628211ull; };
  const BucketKey& b = k.bucket;
  mix(std::size_t(b.head_dim));
  mix(std::size_t(b.causal));
  mix(std::size_t(b.dtype));
  mix(std::size_t(b.layout));
  mix(std::size_t(b.seq_q));
  mix(std::size_t(b.seq_kv));
  mix(std::size_t(b.bh));
  mix(std::size_t(b.policy));
  mix(std::size_t(b.rows16));
  mix(std::size_t(b.varlen));
  mix(std::size_t(b.window));
  mix(std::size_t(b.paged));
  mix(std::size_t(b.kv8));
  mix(std::size_t(k.pairs));
  mix(std::size_t(k.sms));
  return h;
}

const std::vector<int>& supported_head_dims() {
  // templates/attn_mma.cu.j2 and configs/search_space.yaml: every pipeline has variants for
  // these (tests/runtime/test_keys.cpp checks this against the search space).
  static const std::vector<int> dims{64, 128, 256};
  return dims;
}

int kernel_head_dim(int d) {
  for (int x : supported_head_dims())  // ascending
    if (x >= d) return x;
  return 0;
}

std::string arch_for_cc(int cc) { return target_arch_for_cc(cc); }

std::string reproduce_command(const AttnProblem& p, Policy policy, const std::string& variant) {
  std::string s = cat("sage-tune bench --variant ", variant, " -d ", p.head_dim, " -n ", p.seq_q);
  if (p.seq_kv != p.seq_q) s += cat(" --seq-kv ", p.seq_kv);
  s += cat(" --batch ", p.batch, " --heads ", p.heads_q);
  if (p.heads_kv != p.heads_q) s += cat(" --heads-kv ", p.heads_kv);
  s += cat(" --causal ", p.causal ? "yes" : "no");
  if (p.window > 0) s += cat(" --window ", p.window);
  if (p.paged) s += cat(" --paged ", p.page_size);
  if (p.kv_fp8) s += " --kv-fp8";
  if (p.layout != Layout::HND) s += " --layout NHD";
  if (p.dtype != DType::fp16) s += " --dtype bf16";
  // The policy chose the variant; the bench times the named variant whatever the policy, so
  // it is a comment for the reader rather than an option.
  s += cat("   # policy ", to_string(policy));
  if (p.sm_scale != 0.f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", double(p.sm_scale));
    s += cat(", sm_scale ", buf);
  }
  if (p.return_lse) s += ", with LSE";
  return s;
}

}  // namespace sage::rt
