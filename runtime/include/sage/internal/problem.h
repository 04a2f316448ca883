// An attention call's shape and options, independent of any kernel. Internal header.
#pragma once
#include <cstdint>
#include <string>

namespace sage {

enum class Layout { HND, NHD };  // [B, H, N, D] or [B, N, H, D], D contiguous
enum class DType { fp16, bf16 };

const char* to_string(Layout l);
const char* to_string(DType d);
Layout parse_layout(const std::string& s);  // throws Error(invalid_argument)
DType parse_dtype(const std::string& s);

struct AttnProblem {
  int batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_kv = 1, head_dim = 128;
  Layout layout = Layout::HND;
  DType dtype = DType::fp16;
  bool causal = false;
  // A sliding window (causal only; 0: none): query i sees the `window` keys ending at its
  // diagonal, j in (i + seq_kv - seq_q - window, i + seq_kv - seq_q] (SageAttnParams::window).
  int window = 0;
  float sm_scale = 0.f;  // 0: 1/sqrt(head_dim)
  bool return_lse = false;
  // The SMs the call's work may run on: a green context's partition of the GPU (its stream's,
  // rt::stream_sms), which sizes the persistent grids and the key splits to what is resident at
  // once there. 0: every SM of the device.
  int sms = 0;
  // A variable-length batch (sage_attention_varlen): `batch` sequences packed one after another
  // along the sequence dimension of [total, heads, D] tensors (layout NHD, batch stride 0), their
  // offsets in device arrays (AttnArgs::cu_seqlens_q/kv); seq_q and seq_kv are the longest
  // sequence's (the grid's query tiles, the bucket), total_q and total_kv the packed rows.
  bool varlen = false;
  int total_q = 0, total_kv = 0;
  // A paged KV cache (sage_attention_paged): K and V are pages of page_size slots (a power of
  // two) that a block table gives each sequence (AttnArgs::block_table); sequence b has
  // min(seqlens_kv[b], seq_kv) keys, so seq_kv is their upper bound (the grid, the key splits,
  // the bucket). Q, O and the LSE are dense in `layout`, or with varlen packed [total_q, heads, D]
  // (sage_attention_varlen_paged: total_kv 0, the keys the caches').
  bool paged = false;
  int page_size = 0;
  // FP8 (e4m3) pages (sage_paged_kv::kv_dtype): K and V of one byte an element, dequantized by
  // the caller's scales (AttnArgs::kv_k_scale), read by the mma.sync kernels' entries
  // sage_attn_paged_fp8 / sage_attn_varlen_paged_fp8 (has_paged_fp8_entry).
  bool kv_fp8 = false;

  float scale() const;   // sm_scale, or its default
  // Element strides (batch, head, seq) of a [B, heads, seq, D] tensor in this layout.
  void strides(int heads, int seq, std::int64_t* sb, std::int64_t* sh, std::int64_t* sn) const;
  std::int64_t q_elems() const { return std::int64_t(batch) * heads_q * seq_q * head_dim; }
  std::int64_t kv_elems() const { return std::int64_t(batch) * heads_kv * seq_kv * head_dim; }
  // A sliding window's keys that no query sees: those before the first query's window, which a
  // dense call leaves out (rt::trim_window: K and V start after them; head dims that run on
  // padded copies, no multiple of 8, keep them); 0 otherwise (a paged cache's sequences have
  // lengths of their own: its kernels start each tile at its window, kv_range<true>).
  int window_skip() const;
  // Leaves out window_skip() keys, then drops a window that holds every key a query sees.
  void trim_window();
  // 4*B*Hq*Nq*Nkv*D, halved for causal; with a window 4*B*Hq*D times the visible (query, key)
  // pairs.
  double flops() const;
  // Throws Error(invalid_argument) for sizes < 1, heads_q % heads_kv != 0, sms < 0, a window
  // < 0 or without causal; varlen: totals < 0, or a layout other than NHD; paged: a page size
  // that is no power of two, or paged with a window (paged with varlen: variable-length queries
  // over the cache, total_kv unused).
  void validate() const;
  // "B4 Hq32 Hkv32 Nq4096 Nkv4096 D128 HND fp16 causal" (" window 4096" with a window, " on 64
  // SMs" with sms; varlen: " varlen Tq9000 Tkv9000", the packed totals, with Nq/Nkv the longest
  // sequence's; paged: " paged 16", the page size)
  std::string str() const;
};

}  // namespace sage
