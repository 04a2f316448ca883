// sage-tune runtime, C++ interface: a thin header-only layer over sage/sage.h that turns
// statuses into exceptions and builds descriptors fluently.
//
//   sage::Attention attn(batch, heads_q, heads_kv, seq_q, seq_kv, 128);
//   attn.causal().layout(SAGE_LAYOUT_NHD).dtype(SAGE_BF16);
//   attn.run(q, k, v, o, stream);                       // throws sage::ApiError on failure
//
// Everything here is inline and uses only the C entry points, so it works with any build of
// the library (JIT or exported static) and across compilers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "sage/sage.h"

namespace sage {

// A failed call: the status and the library's message.
class ApiError : public std::runtime_error {
 public:
  ApiError(sage_status status, const std::string& message)
      : std::runtime_error(std::string(sage_status_string(status)) + ": " + message), status_(status) {}
  sage_status status() const noexcept { return status_; }

 private:
  sage_status status_;
};

// Throws ApiError carrying sage_last_error() when `s` is not SAGE_OK.
inline void check(sage_status s) {
  if (s != SAGE_OK) throw ApiError(s, sage_last_error());
}

// Optional outputs and memory of one call.
struct RunOptions {
  float* lse = nullptr;            // FP32 [B, heads_q, seq_q]; nullptr: not computed
  void* workspace = nullptr;       // nullptr: the library's stream-ordered pool
  std::size_t workspace_bytes = 0;
};

// An attention problem: the descriptor plus calls on it.
class Attention {
 public:
  Attention(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv, int head_dim)
      : desc_(sage_attention_desc_init(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim)) {}
  explicit Attention(const sage_attention_desc& d) : desc_(d) {}

  Attention& layout(sage_layout l) { desc_.layout = l; return *this; }
  Attention& dtype(sage_dtype d) { desc_.dtype = d; return *this; }
  Attention& causal(bool c = true) { desc_.causal = c ? 1 : 0; return *this; }
  Attention& scale(float s) { desc_.sm_scale = s; return *this; }
  Attention& policy(sage_policy p) { desc_.policy = p; return *this; }
  // A causal sliding window: each query sees its `w` most recent keys (0: none; needs causal()).
  Attention& window(int w) { desc_.window = w; return *this; }
  const sage_attention_desc& desc() const { return desc_; }

  // Bytes of workspace a call needs (with or without LSE): on the current context's streams, or
  // on `stream` (whose SMs may be a green context's partition).
  std::size_t workspace_size() const {
    std::size_t n = 0;
    check(sage_workspace_size(&desc_, &n));
    return n;
  }
  std::size_t workspace_size(void* stream) const {
    std::size_t n = 0;
    check(sage_workspace_size_on_stream(&desc_, stream, &n));
    return n;
  }
  // The variant serving this problem on the current device; as a variable-length batch's, or with
  // dense queries over a paged KV cache.
  std::string variant() const {
    char buf[256];
    check(sage_variant_name(&desc_, buf, sizeof buf));
    return buf;
  }
  std::string variant_varlen(const sage_varlen& varlen) const {
    char buf[256];
    check(sage_variant_name_varlen(&desc_, &varlen, buf, sizeof buf));
    return buf;
  }
  std::string variant_paged(const sage_paged_kv& kv) const {
    char buf[256];
    check(sage_variant_name_paged(&desc_, &kv, buf, sizeof buf));
    return buf;
  }
  // Runs on `stream` (a cudaStream_t / CUstream; nullptr: the legacy default stream).
  void run(const void* q, const void* k, const void* v, void* o, void* stream = nullptr,
           const RunOptions& opt = {}) const {
    check(sage_attention(&desc_, q, k, v, o, opt.lse, opt.workspace, opt.workspace_bytes, stream));
  }
  // A variable-length batch (sage_attention_varlen): this descriptor's batch is the sequence
  // count, seq_q / seq_kv the longest sequence's, its layout NHD; q, k, v, o packed
  // [total, heads, head_dim]; RunOptions::lse then FP32 [heads_q, total_q].
  void run_varlen(const sage_varlen& varlen, const void* q, const void* k, const void* v, void* o,
                  void* stream = nullptr, const RunOptions& opt = {}) const {
    check(sage_attention_varlen(&desc_, &varlen, q, k, v, o, opt.lse, opt.workspace, opt.workspace_bytes, stream));
  }
  std::size_t workspace_size_varlen(const sage_varlen& varlen) const {
    std::size_t n = 0;
    check(sage_workspace_size_varlen(&desc_, &varlen, &n));
    return n;
  }
  // Dense queries over a paged KV cache (sage_attention_paged): this descriptor's seq_kv is the
  // upper bound of any sequence's keys; q and o contiguous in its layout.
  void run_paged(const sage_paged_kv& kv, const void* q, void* o, void* stream = nullptr,
                 const RunOptions& opt = {}) const {
    check(sage_attention_paged(&desc_, &kv, q, o, opt.lse, opt.workspace, opt.workspace_bytes, stream));
  }
  std::size_t workspace_size_paged(const sage_paged_kv& kv) const {
    std::size_t n = 0;
    check(sage_workspace_size_paged(&desc_, &kv, &n));
    return n;
  }
  // Variable-length queries over a paged KV cache (sage_attention_varlen_paged): this
  // descriptor's batch is the sequence count, seq_q the longest sequence's queries, seq_kv the
  // upper bound of its keys, its layout NHD; q and o packed [total_q, heads_q, head_dim],
  // cu_seqlens_q batch + 1 device offsets; RunOptions::lse then FP32 [heads_q, total_q].
  void run_varlen_paged(const std::int32_t* cu_seqlens_q, int total_q, const sage_paged_kv& kv, const void* q, void* o,
                        void* stream = nullptr, const RunOptions& opt = {}) const {
    check(sage_attention_varlen_paged(&desc_, cu_seqlens_q, total_q, &kv, q, o, opt.lse, opt.workspace,
                                      opt.workspace_bytes, stream));
  }
  std::size_t workspace_size_varlen_paged(int total_q, const sage_paged_kv& kv) const {
    std::size_t n = 0;
    check(sage_workspace_size_varlen_paged(&desc_, total_q, &kv, &n));
    return n;
  }
  // The same on tensors with strides of their own (sage_attention_strided; nullptr: contiguous).
  void run_strided(const void* q, const sage_strides* qs, const void* k, const sage_strides* ks, const void* v,
                   const sage_strides* vs, void* o, const sage_strides* os, void* stream = nullptr,
                   const RunOptions& opt = {}) const {
    check(sage_attention_strided(&desc_, q, qs, k, ks, v, vs, o, os, opt.lse, opt.workspace, opt.workspace_bytes,
                                 stream));
  }

 private:
  sage_attention_desc desc_;
};

}  // namespace sage
