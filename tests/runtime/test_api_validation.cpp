// The C API's argument checks (sage/sage.h): every bad input gets its own status and a message
// naming the field, before any device is touched, so these run anywhere. Also the status
// strings, the thread-local last error, and the C++ wrapper's exceptions.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <thread>

#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/sage.h"
#include "sage/sage.hpp"

namespace sage {
namespace {

// Aligned addresses that are never dereferenced: every case below fails validation first.
void* const kQ = reinterpret_cast<void*>(0x10000);
void* const kK = reinterpret_cast<void*>(0x20000);
void* const kV = reinterpret_cast<void*>(0x30000);
void* const kO = reinterpret_cast<void*>(0x40000);

sage_attention_desc good() { return sage_attention_desc_init(2, 8, 2, 128, 256, 128); }

struct Outcome {
  sage_status status;
  std::string message;
};
Outcome call(const sage_attention_desc& d, const void* q = kQ, const void* k = kK, const void* v = kV, void* o = kO,
             float* lse = nullptr, void* ws = nullptr, size_t ws_bytes = 0) {
  const sage_status s = sage_attention(&d, q, k, v, o, lse, ws, ws_bytes, nullptr);
  return {s, sage_last_error()};
}

#define EXPECT_REJECTED(outcome, want, text)                                                      \
  do {                                                                                           \
    const Outcome o_ = (outcome);                                                                \
    EXPECT_EQ(o_.status, want) << o_.message;                                                    \
    EXPECT_NE(o_.message.find(text), std::string::npos) << "message: " << o_.message;            \
  } while (0)

TEST(RuntimeApiValidation, DescriptorInitHasTheDocumentedDefaults) {
  const sage_attention_desc d = sage_attention_desc_init(4, 32, 8, 1000, 2000, 64);
  EXPECT_EQ(d.batch, 4);
  EXPECT_EQ(d.heads_q, 32);
  EXPECT_EQ(d.heads_kv, 8);
  EXPECT_EQ(d.seq_q, 1000);
  EXPECT_EQ(d.seq_kv, 2000);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_EQ(d.layout, SAGE_LAYOUT_HND);
  EXPECT_EQ(d.dtype, SAGE_FP16);
  EXPECT_EQ(d.causal, 0);
  EXPECT_EQ(d.sm_scale, 0.f);
  EXPECT_EQ(d.policy, SAGE_POLICY_BALANCED);
}

TEST(RuntimeApiValidation, NullPointers) {
  EXPECT_EQ(sage_attention(nullptr, kQ, kK, kV, kO, nullptr, nullptr, 0, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc is NULL"), std::string::npos);
  EXPECT_REJECTED(call(good(), nullptr), SAGE_ERR_INVALID_ARGUMENT, "q is NULL");
  EXPECT_REJECTED(call(good(), kQ, nullptr), SAGE_ERR_INVALID_ARGUMENT, "k is NULL");
  EXPECT_REJECTED(call(good(), kQ, kK, nullptr), SAGE_ERR_INVALID_ARGUMENT, "v is NULL");
  EXPECT_REJECTED(call(good(), kQ, kK, kV, nullptr), SAGE_ERR_INVALID_ARGUMENT, "o is NULL");
  const sage_attention_desc d = good();
  EXPECT_EQ(sage_workspace_size(&d, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("bytes is NULL"), std::string::npos);
  size_t n = 0;
  EXPECT_EQ(sage_workspace_size(nullptr, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sage_workspace_size_on_stream(&d, nullptr, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("bytes is NULL"), std::string::npos);
  EXPECT_EQ(sage_workspace_size_on_stream(nullptr, nullptr, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sage_variant_name(&d, nullptr, 10), SAGE_ERR_INVALID_ARGUMENT);
  char buf[4];
  EXPECT_EQ(sage_variant_name(&d, buf, 0), SAGE_ERR_INVALID_ARGUMENT);
}

TEST(RuntimeApiValidation, MisalignedPointers) {
  auto at = [](std::uintptr_t a) { return reinterpret_cast<void*>(a); };
  EXPECT_REJECTED(call(good(), at(0x10008)), SAGE_ERR_INVALID_ARGUMENT, "q (0x10008) must be 16-byte aligned");
  EXPECT_REJECTED(call(good(), kQ, at(0x20004)), SAGE_ERR_INVALID_ARGUMENT, "k (0x20004) must be 16-byte aligned");
  EXPECT_REJECTED(call(good(), kQ, kK, at(0x30002)), SAGE_ERR_INVALID_ARGUMENT, "v (0x30002)");
  EXPECT_REJECTED(call(good(), kQ, kK, kV, at(0x40001)), SAGE_ERR_INVALID_ARGUMENT, "o (0x40001)");
  EXPECT_REJECTED(call(good(), kQ, kK, kV, kO, reinterpret_cast<float*>(0x50002)), SAGE_ERR_INVALID_ARGUMENT,
                  "lse (0x50002) must be 4-byte aligned");
  EXPECT_REJECTED(call(good(), kQ, kK, kV, kO, nullptr, at(0x60080), 1 << 20), SAGE_ERR_INVALID_ARGUMENT,
                  "workspace (0x60080) must be 256-byte aligned");
}

TEST(RuntimeApiValidation, SizesBelowOne) {
  const char* fields[] = {"batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"};
  for (int f = 0; f < 6; ++f)
    for (int bad : {0, -3}) {
      sage_attention_desc d = good();
      int* v[] = {&d.batch, &d.heads_q, &d.heads_kv, &d.seq_q, &d.seq_kv, &d.head_dim};
      *v[f] = bad;
      EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, std::string("desc->") + fields[f] + " must be >= 1, got " +
                                                              std::to_string(bad));
    }
}

TEST(RuntimeApiValidation, HeadsNotAMultiple) {
  sage_attention_desc d = good();
  d.heads_q = 6;
  d.heads_kv = 4;
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "heads_q (6) must be a multiple of desc->heads_kv (4)");
}

TEST(RuntimeApiValidation, UnsupportedHeadDim) {
  for (int dim : {257, 264, 512}) {
    sage_attention_desc d = good();
    d.head_dim = dim;
    EXPECT_REJECTED(call(d), SAGE_ERR_UNSUPPORTED,
                    "head_dim " + std::to_string(dim) +
                        " is not supported (the kernels' head dims are 64, 128, 256; any other up to 256 runs on "
                        "the next one's kernels)");
    size_t n = 0;
    EXPECT_EQ(sage_workspace_size(&d, &n), SAGE_ERR_UNSUPPORTED);
  }
}

TEST(RuntimeApiValidation, CausalNeedsSeqQAtMostSeqKv) {
  sage_attention_desc d = good();
  d.causal = 1;
  d.seq_q = 300;
  d.seq_kv = 200;
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "causal attention needs seq_q <= seq_kv");
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "bottom-right aligned");
}

TEST(RuntimeApiValidation, EnumsAndFlagsOutOfRange) {
  sage_attention_desc d = good();
  d.layout = static_cast<sage_layout>(5);
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "desc->layout 5");
  d = good();
  d.dtype = static_cast<sage_dtype>(3);
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "desc->dtype 3");
  d = good();
  d.policy = static_cast<sage_policy>(-1);
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "desc->policy -1");
  d = good();
  d.causal = 2;
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "desc->causal must be 0 or 1");
}

TEST(RuntimeApiValidation, BadScale) {
  for (float s : {-1.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    sage_attention_desc d = good();
    d.sm_scale = s;
    EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "desc->sm_scale must be finite and >= 0");
  }
}

TEST(RuntimeApiValidation, GridLimits) {
  sage_attention_desc d = good();
  d.heads_q = 70000;
  d.heads_kv = 1;
  EXPECT_REJECTED(call(d), SAGE_ERR_UNSUPPORTED, "CUDA grid limit");
}

// A valid call needs a device: where none is usable the answer is NO_DEVICE, not a crash. (With
// a GPU these fake pointers would reach a kernel; the GPU tests cover valid calls there.)
TEST(RuntimeApiValidation, ValidCallWithoutADeviceSaysSo) {
  std::string why;
  if (cu::have_device(&why)) GTEST_SKIP() << "a GPU is present: covered by tests/runtime/gpu_test_runtime.cpp";
  const Outcome o = call(good());
  EXPECT_EQ(o.status, SAGE_ERR_NO_DEVICE) << o.message;
  EXPECT_FALSE(o.message.empty());
  size_t n = 0;
  const sage_attention_desc d = good();
  EXPECT_EQ(sage_workspace_size(&d, &n), SAGE_ERR_NO_DEVICE);
  EXPECT_EQ(sage_workspace_size_on_stream(&d, nullptr, &n), SAGE_ERR_NO_DEVICE);
}

// sage_attention_strided: the same checks as sage_attention, then the strides'.
Outcome call_strided(const sage_attention_desc& d, const sage_strides* qs, const sage_strides* ks,
                     const sage_strides* vs, const sage_strides* os, const void* q = kQ) {
  const sage_status s = sage_attention_strided(&d, q, qs, kK, ks, kV, vs, kO, os, nullptr, nullptr, 0, nullptr);
  return {s, sage_last_error()};
}

TEST(RuntimeApiValidation, StridedArguments) {
  const sage_attention_desc d = good();  // B=2 Hq=8 Hkv=2 Nq=128 Nkv=256 D=128
  const sage_strides packed{256 * 3 * 8 * 128, 128, 3 * 8 * 128};  // Q of a packed [B, N, 3, H, D]
  EXPECT_EQ(sage_attention_strided(nullptr, kQ, &packed, kK, nullptr, kV, nullptr, kO, nullptr, nullptr, nullptr, 0,
                                   nullptr),
            SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_REJECTED(call_strided(d, &packed, nullptr, nullptr, nullptr, nullptr), SAGE_ERR_INVALID_ARGUMENT, "q is NULL");
  EXPECT_REJECTED(call_strided(d, &packed, nullptr, nullptr, nullptr, reinterpret_cast<void*>(0x10008)),
                  SAGE_ERR_INVALID_ARGUMENT, "16-byte aligned");
  const sage_strides odd{1 << 20, 128, 3 * 8 * 128 + 4};
  EXPECT_REJECTED(call_strided(d, &odd, nullptr, nullptr, nullptr), SAGE_ERR_INVALID_ARGUMENT,
                  "q_strides->seq must be a positive multiple of 8");
  const sage_strides negative{-(1 << 20), 128, 1024};
  EXPECT_REJECTED(call_strided(d, nullptr, nullptr, &negative, nullptr), SAGE_ERR_INVALID_ARGUMENT,
                  "v_strides->batch must be a positive multiple of 8");
  const sage_strides zero{1 << 20, 0, 128};  // an expanded K (every head the same rows): refused
  EXPECT_REJECTED(call_strided(d, nullptr, &zero, nullptr, nullptr), SAGE_ERR_INVALID_ARGUMENT,
                  "k_strides->head must be a positive multiple of 8 elements (16 bytes), got 0");
  const sage_strides head4{1 << 20, 4, 1024};
  EXPECT_REJECTED(call_strided(d, nullptr, &head4, nullptr, nullptr), SAGE_ERR_INVALID_ARGUMENT, "k_strides->head");
  EXPECT_REJECTED(call_strided(d, nullptr, nullptr, nullptr, &odd), SAGE_ERR_INVALID_ARGUMENT, "o_strides->seq");
  // O's rows must not overlap (the inputs' may: views of one packed buffer).
  const sage_strides o_overlap{1 << 20, 64, 8 * 128};  // heads 64 apart, rows of 128
  EXPECT_REJECTED(call_strided(d, nullptr, nullptr, nullptr, &o_overlap), SAGE_ERR_INVALID_ARGUMENT,
                  "o_strides->head (64) makes O's rows overlap: it must be >= 128");
  const sage_strides o_seq_overlap{1 << 20, 128, 512};  // 8 heads of 128 span 1024 > 512
  EXPECT_REJECTED(call_strided(d, nullptr, nullptr, nullptr, &o_seq_overlap), SAGE_ERR_INVALID_ARGUMENT,
                  "o_strides->seq (512) makes O's rows overlap: it must be >= 1024");
  // Strided tensors need whole 16-byte rows.
  sage_attention_desc d100 = d;
  d100.head_dim = 100;
  const sage_strides s100{1 << 20, 200, 1600};
  EXPECT_REJECTED(call_strided(d100, &s100, nullptr, nullptr, nullptr), SAGE_ERR_INVALID_ARGUMENT,
                  "strided tensors need head_dim a multiple of 8");
  // Valid calls reach the device: only where there is none (the fake pointers must not reach a
  // kernel; the GPU tests run strided calls).
  std::string why;
  if (cu::have_device(&why)) return;
  // A dimension of size 1 takes any stride (PyTorch gives such dimensions arbitrary ones).
  sage_attention_desc one = d;
  one.batch = 1;
  one.seq_q = 1;
  const sage_strides any{3, 128, 5};
  const Outcome o = call_strided(one, &any, nullptr, nullptr, &any);
  EXPECT_EQ(o.status, SAGE_ERR_NO_DEVICE) << o.message;
  // Inputs may overlap: K and V as interleaved views of one buffer [B, N, 2, Hkv, D].
  const sage_strides kv{256 * 2 * 2 * 128, 128, 2 * 2 * 128};
  const Outcome sh = call_strided(d, nullptr, &kv, &kv, nullptr);
  EXPECT_EQ(sh.status, SAGE_ERR_NO_DEVICE) << sh.message;
  // NULL strides everywhere: sage_attention itself, whatever the head dim.
  const Outcome c = call_strided(d100, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(c.status, SAGE_ERR_NO_DEVICE) << c.message;
}

// sage_attention_varlen: the dense call's checks, then the variable-length batch's own (packed
// NHD tensors, totals, offsets arrays, the head dims its kernels have).
sage_attention_desc good_varlen() {
  sage_attention_desc d = sage_attention_desc_init(3, 8, 2, 300, 500, 128);  // longest sequences
  d.layout = SAGE_LAYOUT_NHD;
  return d;
}
const int32_t* const kCuQ = reinterpret_cast<const int32_t*>(0x70000);
const int32_t* const kCuKv = reinterpret_cast<const int32_t*>(0x80000);
Outcome call_varlen(const sage_attention_desc& d, sage_varlen vl, float* lse = nullptr) {
  const sage_status s = sage_attention_varlen(&d, &vl, kQ, kK, kV, kO, lse, nullptr, 0, nullptr);
  return {s, sage_last_error()};
}

TEST(RuntimeApiValidation, VarlenArguments) {
  const sage_varlen vl{kCuQ, kCuKv, 600, 1000};
  const sage_attention_desc d = good_varlen();
  EXPECT_EQ(sage_attention_varlen(nullptr, &vl, kQ, kK, kV, kO, nullptr, nullptr, 0, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc is NULL"), std::string::npos);
  EXPECT_EQ(sage_attention_varlen(&d, nullptr, kQ, kK, kV, kO, nullptr, nullptr, 0, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("varlen is NULL"), std::string::npos);
  size_t n = 0;
  EXPECT_EQ(sage_workspace_size_varlen(&d, &vl, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("bytes is NULL"), std::string::npos);
  EXPECT_EQ(sage_workspace_size_varlen(&d, nullptr, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("varlen is NULL"), std::string::npos);
  // The packed tensors are [total, heads, head_dim]: HND is refused, naming the layout.
  sage_attention_desc hnd = d;
  hnd.layout = SAGE_LAYOUT_HND;
  EXPECT_REJECTED(call_varlen(hnd, vl), SAGE_ERR_INVALID_ARGUMENT, "desc->layout must be SAGE_LAYOUT_NHD");
  // The dense checks still apply (here: the longest sequence's length).
  sage_attention_desc zero = d;
  zero.seq_kv = 0;
  EXPECT_REJECTED(call_varlen(zero, vl), SAGE_ERR_INVALID_ARGUMENT, "desc->seq_kv must be >= 1, got 0");
  EXPECT_REJECTED(call_varlen(d, {kCuQ, kCuKv, -1, 1000}), SAGE_ERR_INVALID_ARGUMENT,
                  "varlen->total_q and total_kv must be >= 0, got -1 and 1000");
  EXPECT_REJECTED(call_varlen(d, {nullptr, kCuKv, 600, 1000}), SAGE_ERR_INVALID_ARGUMENT, "varlen->cu_seqlens_q is NULL");
  EXPECT_REJECTED(call_varlen(d, {kCuQ, nullptr, 600, 1000}), SAGE_ERR_INVALID_ARGUMENT, "varlen->cu_seqlens_kv is NULL");
  EXPECT_REJECTED(call_varlen(d, {reinterpret_cast<const int32_t*>(0x70002), kCuKv, 600, 1000}),
                  SAGE_ERR_INVALID_ARGUMENT, "varlen->cu_seqlens_q (0x70002) must be 4-byte aligned");
  EXPECT_REJECTED(call_varlen(d, vl, reinterpret_cast<float*>(0x50002)), SAGE_ERR_INVALID_ARGUMENT,
                  "lse (0x50002) must be 4-byte aligned");
  // Head dims that would need padded copies are refused before any device is touched; which of
  // the kernels' head dims a GPU serves is its varlen defaults' (GPU tests).
  for (int hd : {100, 250, 36}) {
    sage_attention_desc x = d;
    x.head_dim = hd;
    EXPECT_REJECTED(call_varlen(x, vl), SAGE_ERR_UNSUPPORTED, cat("head_dim ", hd, ": variable-length batches run on"));
  }
  // Causal sequences may have more queries than keys (their first rows see none): not refused
  // here, unlike the dense call. Without a device the call gets as far as needing one.
  std::string why;
  if (!cu::have_device(&why)) {
    sage_attention_desc causal = d;
    causal.causal = 1;
    causal.seq_q = 900;
    EXPECT_EQ(call_varlen(causal, vl).status, SAGE_ERR_NO_DEVICE);
    for (int hd : {64, 128, 72, 40, 256, 160}) {
      sage_attention_desc x = d;
      x.head_dim = hd;
      EXPECT_EQ(call_varlen(x, vl).status, SAGE_ERR_NO_DEVICE) << hd;
    }
    EXPECT_EQ(sage_workspace_size_varlen(&d, &vl, &n), SAGE_ERR_NO_DEVICE);
  }
}

// A sliding window: >= 0, and only with a causal mask (dense and variable-length calls alike),
// refused before any device is touched; the descriptor's default is none.
TEST(RuntimeApiValidation, SlidingWindowArguments) {
  EXPECT_EQ(good().window, 0);
  sage_attention_desc d = good();
  d.window = -3;
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "desc->window must be >= 0 (0: no sliding window), got -3");
  d.window = 64;
  EXPECT_REJECTED(call(d), SAGE_ERR_INVALID_ARGUMENT, "desc->window (64) is a sliding window over the most recent keys: "
                                                      "it needs desc->causal = 1");
  size_t n = 0;
  EXPECT_EQ(sage_workspace_size(&d, &n), SAGE_ERR_INVALID_ARGUMENT);
  char name[64];
  EXPECT_EQ(sage_variant_name(&d, name, sizeof name), SAGE_ERR_INVALID_ARGUMENT);
  const sage_varlen vl{kCuQ, kCuKv, 600, 1000};
  sage_attention_desc v = good_varlen();
  v.window = 64;
  EXPECT_REJECTED(call_varlen(v, vl), SAGE_ERR_INVALID_ARGUMENT, "it needs desc->causal = 1");
  v.window = -1;
  v.causal = 1;
  EXPECT_REJECTED(call_varlen(v, vl), SAGE_ERR_INVALID_ARGUMENT, "desc->window must be >= 0");
  std::string why;
  if (!cu::have_device(&why)) {  // valid: as far as needing a device
    d.causal = 1;
    EXPECT_EQ(call(d).status, SAGE_ERR_NO_DEVICE);
    v.window = 300;
    EXPECT_EQ(call_varlen(v, vl).status, SAGE_ERR_NO_DEVICE);
  }
  EXPECT_NO_THROW(sage::Attention(2, 8, 2, 128, 256, 128).causal().window(100));
  EXPECT_EQ(sage::Attention(2, 8, 2, 128, 256, 128).causal().window(100).desc().window, 100);
}

// sage_attention_paged: the dense call's checks, then the cache's own (page size, pages, the
// table's rows against desc->seq_kv, the tables' pointers, the caches' strides), and what its
// kernels do not take (a window, head dims that are no multiple of 8).
const int32_t* const kTable = reinterpret_cast<const int32_t*>(0x90000);
const int32_t* const kLens = reinterpret_cast<const int32_t*>(0xa0000);
sage_paged_kv good_paged() {
  sage_paged_kv kv{};
  kv.k_pages = kK;
  kv.v_pages = kV;
  kv.block_table = kTable;
  kv.seqlens_kv = kLens;
  kv.page_size = 16;
  kv.max_pages = 16;  // 256 keys: good()'s seq_kv
  kv.num_pages = 40;
  return kv;
}
Outcome call_paged(const sage_attention_desc& d, const sage_paged_kv& kv, const void* q = kQ, void* o = kO) {
  const sage_status s = sage_attention_paged(&d, &kv, q, o, nullptr, nullptr, 0, nullptr);
  return {s, sage_last_error()};
}

TEST(RuntimeApiValidation, PagedKvArguments) {
  const sage_attention_desc d = good();
  EXPECT_EQ(sage_attention_paged(nullptr, nullptr, kQ, kO, nullptr, nullptr, 0, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc is NULL"), std::string::npos);
  EXPECT_EQ(sage_attention_paged(&d, nullptr, kQ, kO, nullptr, nullptr, 0, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("kv is NULL"), std::string::npos);
  auto with = [](auto change) {
    sage_paged_kv kv = good_paged();
    change(kv);
    return kv;
  };
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.page_size = 12; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->page_size must be a power of two (up to 2^24), got 12");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.page_size = 0; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->page_size must be a power of two");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.num_pages = 0; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->num_pages must be >= 1, got 0");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.max_pages = 15; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->max_pages (15) pages of 16 slots cannot hold desc->seq_kv (256) keys");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.block_table = nullptr; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->block_table is NULL");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.seqlens_kv = nullptr; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->seqlens_kv is NULL");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.seqlens_kv = reinterpret_cast<const int32_t*>(0xa0002); })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->seqlens_kv (0xa0002) must be 4-byte aligned");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.k_pages = nullptr; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->k_pages is NULL");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.v_pages = reinterpret_cast<const void*>(0x30008); })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->v_pages (0x30008) must be 16-byte aligned");
  EXPECT_REJECTED(call_paged(d, good_paged(), nullptr), SAGE_ERR_INVALID_ARGUMENT, "q is NULL");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.k_strides = {12, 128, 256}; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->k_strides.batch (pages) must be a positive multiple of 8 elements (16 bytes), got 12");
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.v_strides = {4096, 128, -256}; })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->v_strides.seq (slots) must be a positive multiple of 8");
  // A sliding window: causal only, as for dense calls (a causal one is valid: below).
  sage_attention_desc w = d;
  w.window = 64;
  EXPECT_REJECTED(call_paged(w, good_paged()), SAGE_ERR_INVALID_ARGUMENT, "desc->window (64) is a sliding window");
  w.causal = 1;
  sage_attention_desc odd = d;
  odd.head_dim = 100;
  EXPECT_REJECTED(call_paged(odd, good_paged()), SAGE_ERR_UNSUPPORTED, "its head dim must be a multiple of 8");
  sage_attention_desc zero = d;
  zero.seq_kv = 0;
  EXPECT_REJECTED(call_paged(zero, good_paged()), SAGE_ERR_INVALID_ARGUMENT, "desc->seq_kv must be >= 1, got 0");
  size_t n = 0;
  const sage_paged_kv bad = with([](sage_paged_kv& k) { k.page_size = 3; });
  EXPECT_EQ(sage_workspace_size_paged(&d, &bad, &n), SAGE_ERR_INVALID_ARGUMENT);
  const sage_paged_kv ok = good_paged();
  EXPECT_EQ(sage_workspace_size_paged(&d, &ok, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  std::string why;
  if (!cu::have_device(&why)) {  // valid: as far as needing a device
    EXPECT_EQ(call_paged(d, good_paged()).status, SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(call_paged(w, good_paged()).status, SAGE_ERR_NO_DEVICE) << sage_last_error();
    EXPECT_EQ(call_paged(d, with([](sage_paged_kv& k) { k.page_size = 1; k.max_pages = 256; })).status,
              SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(call_paged(d, with([](sage_paged_kv& k) { k.k_strides = {16 * 2 * 128 + 64, 128, 256}; })).status,
              SAGE_ERR_NO_DEVICE);
  }
}

// FP8 pages (sage_paged_kv::kv_dtype SAGE_KV_DTYPE_FP8_E4M3): the element type, the head dim (16-byte
// chunks of 16 elements), strides of 16 elements below 2^31, the scales' layout and alignment; valid
// calls (scales or none, one a head, a window) get as far as needing a device, and so does
// sage_attention_varlen_paged's.
TEST(RuntimeApiValidation, Fp8PagesArguments) {
  const sage_attention_desc d = good();
  auto with = [](void (*f)(sage_paged_kv&)) {
    sage_paged_kv k = good_paged();
    f(k);
    return k;
  };
  auto fp8 = [](void (*f)(sage_paged_kv&)) {
    sage_paged_kv k = good_paged();
    k.kv_dtype = SAGE_KV_DTYPE_FP8_E4M3;
    f(k);
    return k;
  };
  EXPECT_REJECTED(call_paged(d, with([](sage_paged_kv& k) { k.kv_dtype = 2; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->kv_dtype must be SAGE_KV_DTYPE_INPUT (0) or SAGE_KV_DTYPE_FP8_E4M3 (1), got 2");
  sage_attention_desc d72 = d;
  d72.head_dim = 72;
  EXPECT_REJECTED(call_paged(d72, fp8([](sage_paged_kv&) {})), SAGE_ERR_UNSUPPORTED,
                  "head_dim 72: FP8 pages' rows are read as 16-byte chunks of 16 elements");
  EXPECT_REJECTED(call_paged(d, fp8([](sage_paged_kv& k) { k.k_strides = {16 * 2 * 128, 128 + 8, 256}; })),
                  SAGE_ERR_INVALID_ARGUMENT,
                  "kv->k_strides.head must be a positive multiple of 16 elements (16 bytes of FP8), got 136");
  EXPECT_REJECTED(call_paged(d, fp8([](sage_paged_kv& k) { k.v_strides = {std::int64_t(1) << 32, 128, 256}; })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->v_strides.batch (pages) must be below 2^31 bytes for FP8 pages");
  EXPECT_REJECTED(call_paged(d, fp8([](sage_paged_kv& k) { k.scale_per_head = 2; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->scale_per_head must be 0 or 1, got 2");
  EXPECT_REJECTED(call_paged(d, fp8([](sage_paged_kv& k) { k.k_scale = reinterpret_cast<const float*>(0x70002); })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->k_scale (0x70002) must be 4-byte aligned");
  // The queries' type: a stride of 8 elements and an unaligned scale are fine (no scale is read).
  std::string why;
  if (!cu::have_device(&why)) {
    EXPECT_EQ(call_paged(d, with([](sage_paged_kv& k) { k.k_scale = reinterpret_cast<const float*>(0x70002); })).status,
              SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(call_paged(d, fp8([](sage_paged_kv&) {})).status, SAGE_ERR_NO_DEVICE) << sage_last_error();
    EXPECT_EQ(call_paged(d, fp8([](sage_paged_kv& k) {
                k.k_scale = reinterpret_cast<const float*>(0x70000);
                k.v_scale = reinterpret_cast<const float*>(0x70100);
                k.scale_per_head = 1;
              })).status,
              SAGE_ERR_NO_DEVICE)
        << sage_last_error();
    sage_attention_desc w = d;
    w.causal = 1;
    w.window = 64;
    EXPECT_EQ(call_paged(w, fp8([](sage_paged_kv&) {})).status, SAGE_ERR_NO_DEVICE) << sage_last_error();
    sage_attention_desc v = d;
    v.layout = SAGE_LAYOUT_NHD;
    const sage_paged_kv k8 = fp8([](sage_paged_kv&) {});
    std::size_t n = 0;
    EXPECT_EQ(sage_workspace_size_varlen_paged(&v, 300, &k8, &n), SAGE_ERR_NO_DEVICE) << sage_last_error();
  }
}

// sage_attention_varlen_paged: desc and kv, the packed layout, the paged call's checks, then the
// packed queries' own (total_q, cu_seqlens_q), the caches' pointers and q and o. A causal call
// may have desc->seq_q above desc->seq_kv (causal masks are per sequence).
sage_attention_desc good_varlen_paged() {
  sage_attention_desc d = sage_attention_desc_init(3, 8, 2, 300, 256, 128);  // longest sequence's queries, key bound
  d.layout = SAGE_LAYOUT_NHD;
  return d;
}
Outcome call_varlen_paged(const sage_attention_desc& d, const sage_paged_kv& kv, const int32_t* cu = kCuQ,
                          int total_q = 600, const void* q = kQ, void* o = kO, float* lse = nullptr,
                          void* ws = nullptr, size_t ws_bytes = 0) {
  const sage_status s = sage_attention_varlen_paged(&d, cu, total_q, &kv, q, o, lse, ws, ws_bytes, nullptr);
  return {s, sage_last_error()};
}

TEST(RuntimeApiValidation, VarlenPagedArguments) {
  const sage_attention_desc d = good_varlen_paged();
  const sage_paged_kv ok = good_paged();  // 16 pages of 16 slots: d's 256 keys
  auto with = [](auto change) {
    sage_paged_kv kv = good_paged();
    change(kv);
    return kv;
  };
  auto desc_with = [&](auto change) {
    sage_attention_desc x = d;
    change(x);
    return x;
  };
  // desc, then kv.
  EXPECT_EQ(sage_attention_varlen_paged(nullptr, kCuQ, 600, nullptr, kQ, kO, nullptr, nullptr, 0, nullptr),
            SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc is NULL"), std::string::npos) << sage_last_error();
  EXPECT_EQ(sage_attention_varlen_paged(&d, kCuQ, 600, nullptr, kQ, kO, nullptr, nullptr, 0, nullptr),
            SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("kv is NULL"), std::string::npos) << sage_last_error();
  const sage_attention_desc hnd = desc_with([](sage_attention_desc& x) { x.layout = SAGE_LAYOUT_HND; });
  EXPECT_EQ(sage_attention_varlen_paged(&hnd, kCuQ, 600, nullptr, kQ, kO, nullptr, nullptr, 0, nullptr),
            SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("kv is NULL"), std::string::npos) << sage_last_error();
  // The packed tensors are [total_q, heads, head_dim]: HND is refused, naming the layout.
  EXPECT_REJECTED(call_varlen_paged(hnd, ok), SAGE_ERR_INVALID_ARGUMENT,
                  "desc->layout must be SAGE_LAYOUT_NHD (1) for variable-length queries");
  // The paged call's checks: a window (causal only), the head dim, the descriptor's sizes, the cache's geometry.
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.window = 64; }), ok),
                  SAGE_ERR_INVALID_ARGUMENT, "desc->window (64) is a sliding window");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.window = -1; }), ok),
                  SAGE_ERR_INVALID_ARGUMENT, "desc->window must be >= 0");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.head_dim = 100; }), ok),
                  SAGE_ERR_UNSUPPORTED, "its head dim must be a multiple of 8");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.head_dim = 512; }), ok),
                  SAGE_ERR_UNSUPPORTED, "head_dim 512 is not supported");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.seq_kv = 0; }), ok),
                  SAGE_ERR_INVALID_ARGUMENT, "desc->seq_kv must be >= 1, got 0");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.seq_q = 0; }), ok),
                  SAGE_ERR_INVALID_ARGUMENT, "desc->seq_q must be >= 1, got 0");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.heads_q = 6; x.heads_kv = 4; }), ok),
                  SAGE_ERR_INVALID_ARGUMENT, "heads_q (6) must be a multiple of desc->heads_kv (4)");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.causal = 2; }), ok),
                  SAGE_ERR_INVALID_ARGUMENT, "desc->causal must be 0 or 1, got 2");
  EXPECT_REJECTED(call_varlen_paged(desc_with([](sage_attention_desc& x) { x.dtype = static_cast<sage_dtype>(3); }), ok),
                  SAGE_ERR_INVALID_ARGUMENT, "desc->dtype 3");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.page_size = 12; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->page_size must be a power of two (up to 2^24), got 12");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.page_size = 0; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->page_size must be a power of two");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.num_pages = 0; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->num_pages must be >= 1, got 0");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.max_pages = 15; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->max_pages (15) pages of 16 slots cannot hold desc->seq_kv (256) keys");
  // Then the packed queries: the cache's geometry comes first, then total_q, then the offsets.
  EXPECT_REJECTED(call_varlen_paged(d, ok, kCuQ, -1), SAGE_ERR_INVALID_ARGUMENT, "total_q must be >= 0, got -1");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.page_size = 12; }), kCuQ, -1),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->page_size must be a power of two");
  EXPECT_REJECTED(call_varlen_paged(d, ok, nullptr), SAGE_ERR_INVALID_ARGUMENT, "cu_seqlens_q is NULL");
  EXPECT_REJECTED(call_varlen_paged(d, ok, nullptr, -1), SAGE_ERR_INVALID_ARGUMENT, "total_q must be >= 0, got -1");
  EXPECT_REJECTED(call_varlen_paged(d, ok, reinterpret_cast<const int32_t*>(0x70002)), SAGE_ERR_INVALID_ARGUMENT,
                  "cu_seqlens_q (0x70002) must be 4-byte aligned");
  // The caches' and tables' pointers and strides, as the paged call's.
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.block_table = nullptr; })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->block_table is NULL");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.seqlens_kv = nullptr; })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->seqlens_kv is NULL");
  EXPECT_REJECTED(
      call_varlen_paged(d, with([](sage_paged_kv& k) { k.seqlens_kv = reinterpret_cast<const int32_t*>(0xa0002); })),
      SAGE_ERR_INVALID_ARGUMENT, "kv->seqlens_kv (0xa0002) must be 4-byte aligned");
  EXPECT_REJECTED(
      call_varlen_paged(d, with([](sage_paged_kv& k) { k.block_table = reinterpret_cast<const int32_t*>(0x90001); })),
      SAGE_ERR_INVALID_ARGUMENT, "kv->block_table (0x90001) must be 4-byte aligned");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.k_pages = nullptr; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->k_pages is NULL");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.v_pages = nullptr; })), SAGE_ERR_INVALID_ARGUMENT,
                  "kv->v_pages is NULL");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.v_pages = reinterpret_cast<const void*>(0x30008); })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->v_pages (0x30008) must be 16-byte aligned");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.k_strides = {12, 128, 256}; })),
                  SAGE_ERR_INVALID_ARGUMENT,
                  "kv->k_strides.batch (pages) must be a positive multiple of 8 elements (16 bytes), got 12");
  EXPECT_REJECTED(call_varlen_paged(d, with([](sage_paged_kv& k) { k.v_strides = {4096, 128, -256}; })),
                  SAGE_ERR_INVALID_ARGUMENT, "kv->v_strides.seq (slots) must be a positive multiple of 8");
  // Then q, o, the LSE and the workspace.
  EXPECT_REJECTED(call_varlen_paged(d, ok, kCuQ, 600, nullptr), SAGE_ERR_INVALID_ARGUMENT, "q is NULL");
  EXPECT_REJECTED(call_varlen_paged(d, ok, kCuQ, 600, kQ, nullptr), SAGE_ERR_INVALID_ARGUMENT, "o is NULL");
  EXPECT_REJECTED(call_varlen_paged(d, ok, kCuQ, 600, reinterpret_cast<const void*>(0x10008)), SAGE_ERR_INVALID_ARGUMENT,
                  "q (0x10008) must be 16-byte aligned");
  EXPECT_REJECTED(call_varlen_paged(d, ok, kCuQ, 600, kQ, reinterpret_cast<void*>(0x40001)), SAGE_ERR_INVALID_ARGUMENT,
                  "o (0x40001) must be 16-byte aligned");
  EXPECT_REJECTED(call_varlen_paged(d, ok, kCuQ, 600, kQ, kO, reinterpret_cast<float*>(0x50002)),
                  SAGE_ERR_INVALID_ARGUMENT, "lse (0x50002) must be 4-byte aligned");
  EXPECT_REJECTED(call_varlen_paged(d, ok, kCuQ, 600, kQ, kO, nullptr, reinterpret_cast<void*>(0x60080), 1 << 20),
                  SAGE_ERR_INVALID_ARGUMENT, "workspace (0x60080) must be 256-byte aligned");
  // sage_workspace_size_varlen_paged: the same descriptor and cache checks, total_q, then bytes.
  size_t n = 0;
  EXPECT_EQ(sage_workspace_size_varlen_paged(nullptr, 600, &ok, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc is NULL"), std::string::npos) << sage_last_error();
  EXPECT_EQ(sage_workspace_size_varlen_paged(&d, 600, nullptr, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("kv is NULL"), std::string::npos) << sage_last_error();
  EXPECT_EQ(sage_workspace_size_varlen_paged(&d, 600, &ok, nullptr), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("bytes is NULL"), std::string::npos) << sage_last_error();
  const sage_paged_kv bad = with([](sage_paged_kv& k) { k.page_size = 3; });
  EXPECT_EQ(sage_workspace_size_varlen_paged(&d, 600, &bad, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("kv->page_size must be a power of two"), std::string::npos)
      << sage_last_error();
  EXPECT_EQ(sage_workspace_size_varlen_paged(&d, -1, &ok, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("total_q must be >= 0, got -1"), std::string::npos) << sage_last_error();
  EXPECT_EQ(sage_workspace_size_varlen_paged(&hnd, 600, &ok, &n), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc->layout must be SAGE_LAYOUT_NHD"), std::string::npos)
      << sage_last_error();
  // Valid calls get as far as needing a device (the fake pointers must not reach a kernel: only
  // where there is none; the GPU tests run valid calls).
  std::string why;
  if (!cu::have_device(&why)) {
    EXPECT_EQ(call_varlen_paged(d, ok).status, SAGE_ERR_NO_DEVICE) << sage_last_error();
    // Causal with more queries than the key bound: each sequence's mask is its own, not refused.
    sage_attention_desc causal = d;
    causal.causal = 1;
    causal.seq_q = 900;
    EXPECT_EQ(call_varlen_paged(causal, ok).status, SAGE_ERR_NO_DEVICE) << sage_last_error();
    causal.window = 64;  // a sliding window over the paged cache
    EXPECT_EQ(call_varlen_paged(causal, ok).status, SAGE_ERR_NO_DEVICE) << sage_last_error();
    EXPECT_EQ(call_varlen_paged(d, ok, kCuQ, 0).status, SAGE_ERR_NO_DEVICE) << sage_last_error();  // no query rows
    EXPECT_EQ(call_varlen_paged(d, ok, kCuQ, 600, kQ, kO, reinterpret_cast<float*>(0x50000)).status, SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(call_varlen_paged(d, with([](sage_paged_kv& k) { k.page_size = 1; k.max_pages = 256; })).status,
              SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(call_varlen_paged(d, with([](sage_paged_kv& k) { k.k_strides = {16 * 2 * 128 + 64, 128, 256}; })).status,
              SAGE_ERR_NO_DEVICE);
    for (int hd : {64, 128, 72, 96, 256}) {
      const sage_attention_desc x = desc_with([&](sage_attention_desc& y) { y.head_dim = hd; });
      EXPECT_EQ(call_varlen_paged(x, ok).status, SAGE_ERR_NO_DEVICE) << hd;
    }
    EXPECT_EQ(sage_workspace_size_varlen_paged(&d, 600, &ok, &n), SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(sage_workspace_size_varlen_paged(&causal, 0, &ok, &n), SAGE_ERR_NO_DEVICE);
  }
}

// sage_variant_name_varlen / _paged: the varlen and paged calls' checks (their offsets, pages and
// tables are not read), then the name's; valid, as far as needing a device.
TEST(RuntimeApiValidation, VariantNamesOfVarlenAndPagedCalls) {
  const sage_varlen vl{kCuQ, kCuKv, 600, 1000};
  const sage_attention_desc dv = good_varlen();
  char name[64];
  EXPECT_EQ(sage_variant_name_varlen(nullptr, &vl, name, sizeof name), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc is NULL"), std::string::npos);
  EXPECT_EQ(sage_variant_name_varlen(&dv, nullptr, name, sizeof name), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("varlen is NULL"), std::string::npos);
  EXPECT_EQ(sage_variant_name_varlen(&dv, &vl, nullptr, 10), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("name is NULL or capacity is 0"), std::string::npos);
  EXPECT_EQ(sage_variant_name_varlen(&dv, &vl, name, 0), SAGE_ERR_INVALID_ARGUMENT);
  sage_attention_desc hnd = dv;
  hnd.layout = SAGE_LAYOUT_HND;
  EXPECT_EQ(sage_variant_name_varlen(&hnd, &vl, name, sizeof name), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("desc->layout must be SAGE_LAYOUT_NHD"), std::string::npos);
  const sage_varlen negative{kCuQ, kCuKv, -1, 1000};
  EXPECT_EQ(sage_variant_name_varlen(&dv, &negative, name, sizeof name), SAGE_ERR_INVALID_ARGUMENT);
  const sage_varlen no_offsets{nullptr, nullptr, 600, 1000};  // offsets are not read

  const sage_attention_desc d = good();
  const sage_paged_kv kv = good_paged();
  EXPECT_EQ(sage_variant_name_paged(&d, nullptr, name, sizeof name), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("kv is NULL"), std::string::npos);
  EXPECT_EQ(sage_variant_name_paged(&d, &kv, name, 0), SAGE_ERR_INVALID_ARGUMENT);
  sage_paged_kv odd = kv;
  odd.page_size = 12;
  EXPECT_EQ(sage_variant_name_paged(&d, &odd, name, sizeof name), SAGE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sage_last_error()).find("page"), std::string::npos) << sage_last_error();
  sage_paged_kv no_tables{};  // pages and tables are not read
  no_tables.page_size = 16;
  no_tables.max_pages = 16;
  no_tables.num_pages = 40;

  sage::Attention a(good_varlen());
  std::string why;
  if (!cu::have_device(&why)) {
    EXPECT_EQ(sage_variant_name_varlen(&dv, &vl, name, sizeof name), SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(sage_variant_name_varlen(&dv, &no_offsets, name, sizeof name), SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(sage_variant_name_paged(&d, &kv, name, sizeof name), SAGE_ERR_NO_DEVICE);
    EXPECT_EQ(sage_variant_name_paged(&d, &no_tables, name, sizeof name), SAGE_ERR_NO_DEVICE);
    try {
      a.variant_varlen(vl);
      ADD_FAILURE() << "expected sage::ApiError";
    } catch (const sage::ApiError& e) {
      EXPECT_EQ(e.status(), SAGE_ERR_NO_DEVICE);
    }
    EXPECT_THROW(sage::Attention(good()).variant_paged(odd), sage::ApiError);
  }
}

TEST(RuntimeApiValidation, StatusStringsAreDistinct) {
  std::set<std::string> seen;
  for (int s = SAGE_OK; s <= SAGE_ERR_INTERNAL; ++s) {
    const std::string text = sage_status_string(static_cast<sage_status>(s));
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(seen.insert(text).second) << text;
  }
  EXPECT_STREQ(sage_status_string(static_cast<sage_status>(99)), "unknown status");
  EXPECT_STREQ(sage_status_string(SAGE_ERR_NOT_IN_BUILD), "not in this build");
}

TEST(RuntimeApiValidation, LastErrorIsPerThread) {
  sage_attention_desc d = good();
  d.batch = 0;
  ASSERT_EQ(call(d).status, SAGE_ERR_INVALID_ARGUMENT);
  std::string other = "unset";
  std::thread([&] { other = sage_last_error(); }).join();
  EXPECT_EQ(other, "");  // a thread that made no call has no error
  EXPECT_NE(std::string(sage_last_error()).find("batch"), std::string::npos);
  std::thread([&] {
    sage_attention_desc e = good();
    e.head_dim = 512;
    call(e);
    other = sage_last_error();
  }).join();
  EXPECT_NE(other.find("head_dim 512"), std::string::npos);
  EXPECT_NE(std::string(sage_last_error()).find("batch"), std::string::npos);  // unchanged here
}

TEST(RuntimeApiValidation, CppWrapperThrowsWithStatusAndMessage) {
  sage::Attention a(1, 4, 3, 16, 16, 128);  // 4 % 3 != 0
  a.causal().layout(SAGE_LAYOUT_NHD).dtype(SAGE_BF16).scale(0.5f).policy(SAGE_POLICY_ACCURATE);
  EXPECT_EQ(a.desc().causal, 1);
  EXPECT_EQ(a.desc().layout, SAGE_LAYOUT_NHD);
  EXPECT_EQ(a.desc().dtype, SAGE_BF16);
  EXPECT_EQ(a.desc().sm_scale, 0.5f);
  EXPECT_EQ(a.desc().policy, SAGE_POLICY_ACCURATE);
  try {
    a.run(kQ, kK, kV, kO);
    ADD_FAILURE() << "no exception";
  } catch (const sage::ApiError& e) {
    EXPECT_EQ(e.status(), SAGE_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("invalid argument: desc->heads_q (4) must be a multiple"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(a.workspace_size(), sage::ApiError);
  EXPECT_THROW(a.variant(), sage::ApiError);
  const sage_varlen vl{kCuQ, kCuKv, 16, 16};
  EXPECT_THROW(a.run_varlen(vl, kQ, kK, kV, kO), sage::ApiError);
  EXPECT_THROW(a.workspace_size_varlen(vl), sage::ApiError);
  try {
    sage::Attention(2, 4, 4, 16, 16, 100).layout(SAGE_LAYOUT_NHD).run_varlen(vl, kQ, kK, kV, kO);
    ADD_FAILURE() << "no exception";
  } catch (const sage::ApiError& e) {
    EXPECT_EQ(e.status(), SAGE_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("any other would need padded copies"), std::string::npos) << e.what();
  }
  const sage_strides odd{1 << 20, 128, 132};
  try {
    sage::Attention(1, 4, 4, 16, 16, 128).run_strided(kQ, &odd, kK, nullptr, kV, nullptr, kO, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const sage::ApiError& e) {
    EXPECT_EQ(e.status(), SAGE_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("q_strides->seq"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sage
