#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/internal/problem.h"

namespace sage {

const char* to_string(Layout l) { return l == Layout::HND ? "HND" : "NHD"; }
const char* to_string(DType d) { return d == DType::fp16 ? "fp16" : "bf16"; }

Layout parse_layout(const std::string& s) {
  if (s == "HND" || s == "hnd") return Layout::HND;
  if (s == "NHD" || s == "nhd") return Layout::NHD;
  throw Error(Errc::invalid_argument, "unknown layout '" + s + "' (expected HND or NHD)");
}

DType parse_dtype(const std::string& s) {
  if (s == "fp16" || s == "float16" || s == "half") return DType::fp16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw Error(Errc::invalid_argument, "unknown dtype '" + s + "' (expected fp16 or bf16)");
}

float AttnProblem::scale() const {
  return sm_scale != 0.f ? sm_scale : 1.0f / std::sqrt(float(head_dim));
}

void AttnProblem::strides(int heads, int seq, std::int64_t* sb, std::int64_t* sh, std::int64_t* sn) const {
  const std::int64_t d = head_dim;
  if (layout == Layout::HND) {
    *sn = d;
    *sh = std::int64_t(seq) * d;
    *sb = std::int64_t(heads) * seq * d;
  } else {
    *sh = d;
    *sn = std::int64_t(heads) * d;
    *sb = std::int64_t(seq) * heads * d;
  }
}

int AttnProblem::window_skip() const {
  if (window <= 0 || varlen || paged || head_dim % 8 != 0) return 0;
  return std::max(0, seq_kv - seq_q - window + 1);  // the first query's first key
}

void AttnProblem::trim_window() {
  seq_kv -= window_skip();
  if (window >= seq_kv) window = 0;  // every key a query sees (its causal range) is in its window
}

double AttnProblem::flops() const {
  if (causal && window > 0) {
    double pairs = 0;  // each query row's visible keys, (i + off - window, i + off] within [0, seq_kv)
    const std::int64_t off = std::int64_t(seq_kv) - seq_q;
    for (std::int64_t i = 0; i < seq_q; ++i) {
      const std::int64_t hi = std::min<std::int64_t>(i + off, seq_kv - 1), lo = std::max<std::int64_t>(i + off - window + 1, 0);
      if (hi >= lo) pairs += double(hi - lo + 1);
    }
    return 4.0 * batch * heads_q * pairs * head_dim;
  }
  double f = 4.0 * batch * heads_q * double(seq_q) * double(seq_kv) * head_dim;
  return causal ? f / 2 : f;
}

void AttnProblem::validate() const {
  auto pos = [](int v, const char* what) {
    if (v < 1) throw Error(Errc::invalid_argument, cat(what, " must be >= 1, got ", v));
  };
  pos(batch, "batch");
  pos(heads_q, "heads_q");
  pos(heads_kv, "heads_kv");
  pos(seq_q, "seq_q");
  pos(seq_kv, "seq_kv");
  pos(head_dim, "head_dim");
  if (heads_q % heads_kv != 0)
    throw Error(Errc::invalid_argument, cat("heads_q (", heads_q, ") must be a multiple of heads_kv (", heads_kv, ")"));
  if (!(sm_scale >= 0.f) || std::isinf(sm_scale))
    throw Error(Errc::invalid_argument, cat("sm_scale must be finite and >= 0 (0 means 1/sqrt(d)), got ", sm_scale));
  if (sms < 0) throw Error(Errc::invalid_argument, cat("sms must be >= 0 (0: every SM of the device), got ", sms));
  if (window < 0) throw Error(Errc::invalid_argument, cat("window must be >= 0 (0: none), got ", window));
  if (window > 0 && !causal)
    throw Error(Errc::invalid_argument, cat("a sliding window (", window, ") needs a causal mask"));
  if (varlen) {
    if (total_q < 0 || total_kv < 0)
      throw Error(Errc::invalid_argument, cat("total_q and total_kv must be >= 0, got ", total_q, " and ", total_kv));
    if (layout != Layout::NHD)
      throw Error(Errc::invalid_argument,
                  "a variable-length batch's tensors are packed [total, heads, head_dim]: its layout must be NHD");
  }
  if (kv_fp8 && !paged) throw Error(Errc::invalid_argument, "FP8 pages (kv_fp8) are a paged KV cache's");
  if (kv_fp8 && head_dim % 16 != 0)
    throw Error(Errc::invalid_argument, cat("FP8 pages need a head dim that is a multiple of 16, got ", head_dim));
  if (paged) {
    if (page_size < 1 || (page_size & (page_size - 1)) != 0)
      throw Error(Errc::invalid_argument, cat("a paged KV cache's page size must be a power of two, got ", page_size));
  }
}

std::string AttnProblem::str() const {
  return cat("B", batch, " Hq", heads_q, " Hkv", heads_kv, " Nq", seq_q, " Nkv", seq_kv, " D", head_dim, " ",
             to_string(layout), " ", to_string(dtype), causal ? " causal" : "",
             window > 0 ? cat(" window ", window) : std::string(), return_lse ? " lse" : "",
             varlen ? cat(" varlen Tq", total_q, " Tkv", total_kv) : std::string(),
             paged ? cat(" paged ", page_size, kv_fp8 ? " fp8" : "") : std::string(),
             sms > 0 ? cat(" on ", sms, " SMs") : std::string());
}

}  // namespace sage
