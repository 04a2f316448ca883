// The runtime's internal C++ interface: problem buckets and cache keys, how a kernel was
// selected, the call path behind the C API, counters and test hooks. The public API is
// sage/sage.h (C) and sage/sage.hpp (C++); this header serves the runtime's own sources,
// its tests and the benchmarks. Internal header.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sage/common/error.h"
#include "sage/internal/launch.h"
#include "sage/internal/problem.h"

namespace sage::rt {

// Accuracy policy of configs/problems.yaml.
enum class Policy { accurate, balanced, fast };
const char* to_string(Policy p);
Policy parse_policy(const std::string& s);  // throws Error(invalid_argument)

// The problem bucket of a call: head_dim, causal, dtype and layout exactly; seq_q, seq_kv and
// batch*heads_q rounded up to a bucket boundary; the policy. Plain values, so that the call
// path computes and compares keys without allocating.
struct BucketKey {
  int head_dim = 0;
  bool causal = false;
  DType dtype = DType::fp16;
  Layout layout = Layout::HND;
  int seq_q = 0, seq_kv = 0, bh = 0;  // bucket boundaries
  Policy policy = Policy::balanced;
  // A call below the kernels' head dim whose rows are 16 but not 32 bytes long a multiple of
  // (d % 16 == 8: 72, 104, ...). The unquantized kernels read such rows in place, off the
  // 32-byte sectors, so the defaults take the quantized kernel sooner for them
  // (configs/defaults.yaml: rows16). Tuned winners are looked up without it (tuner::ProblemKey
  // has no such field) and serve it only where defaults.yaml has no entry of its own for it
  // (tuner::rows16_default, jit::choose; a static build's provider asks its exported defaults the same way).
  bool rows16 = false;
  // A variable-length batch (AttnProblem::varlen; seq_q and seq_kv its longest sequence's). Its
  // kernels: a tuned winner of its bucket whose kernel has sage_attn_varlen (tuner::serves), else
  // configs/defaults.yaml's `varlen` entries; a static build takes them from its export.
  bool varlen = false;
  // A sliding-window call (AttnProblem::window): seq_kv is the bucket of the keys a query sees,
  // min(seq_kv, window). Its kernels: a tuned winner of its bucket whose kernel has
  // sage_attn_window, else the `window` defaults, then the `varlen` ones (their kernels all have
  // that entry: launch.cpp has_window_entry), read as non-causal sequences of those keys (each
  // query tile sees about that many). With paged: the paged defaults, never a winner.
  bool window = false;
  // A paged KV cache (AttnProblem::paged; seq_kv the keys' upper bound). Its kernels: without a
  // window or variable-length queries a tuned winner of its bucket whose kernel reads pages, else
  // configs/defaults.yaml's `paged` entries (the native kernels with the entry sage_attn_paged);
  // a static build takes them from its export. Its seq_q is finer than the
  // buckets: the next power of two up to 128 (Buckets::key_of), where the paged defaults move
  // from the mma.sync kernels, which split the keys over the CTAs, to the wgmma ones.
  bool paged = false;
  // FP8 pages (AttnProblem::kv_fp8, paged): the paged entries as an FP16 pages' call matches them,
  // and those that name `kv8: true` (their kernels all have sage_attn_paged_fp8).
  bool kv8 = false;

  // "d128_causal_fp16_HND_q4096_kv4096_bh128_balanced": tuner::ProblemKey::str()'s form, with
  // "_r16" appended where rows16 is set, then "_varlen" where varlen is, then "_window" where
  // window is, then "_kv8" where kv8 is, then "_paged" where paged is.
  std::string str() const;
  // Inverse of str(); throws Error(invalid_argument) naming the key and the bad field.
  static BucketKey parse(const std::string& s);
  bool operator==(const BucketKey&) const = default;
};

// Bucket boundaries, ascending (configs/problems.yaml `buckets`, or an exported table's).
struct Buckets {
  std::vector<int> seq, bh;
  // The smallest boundary >= v, or the largest boundary when v is above them all (v itself
  // when there are no boundaries: a static build without kernels).
  int seq_bucket(int v) const;
  int bh_bucket(int v) const;
  // p is the kernels' problem (kernel_problem); call_head_dim the call's own head dim, which
  // sets rows16 (0: p's).
  BucketKey key_of(const AttnProblem& p, Policy policy, int call_head_dim = 0) const;
};

// Key of the in-memory kernel cache: one loaded kernel per CUDA context, bucket and exact
// batch x query heads. configs/defaults.yaml's max_bh matches the call's own batch x query
// heads (how many CTAs the kernels' grids hold, so how well they fill the GPU's waves: B=1 H=20
// and B=2 H=16 share a bucket and not a default), and such a default leads a winner timed at
// the bucket's boundary (tuner::pairs_default), so calls of one bucket with different pairs
// each get their selection.
struct CacheKey {
  // The context's identity (context_id, launch.h): its driver ID, which a primary context gets anew
  // when it is reset (cudaDeviceReset) though its handle stays the same.
  std::uint64_t ctx = 0;
  BucketKey bucket;
  int pairs = 0;  // the call's batch x query heads
  // The SMs of the call's green context (AttnProblem::sms; 0: every SM): the defaults' wave
  // edges scale with them (tuner::default_match), and the grids are sized per call.
  int sms = 0;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const noexcept;
};

// Where a bucket's variant came from.
enum class Source { user_db, system_db, default_variant, static_table };
const char* to_string(Source s);

// How a bucket's kernel was chosen and obtained: what SAGE_LOG=1 prints.
struct Selection {
  std::string bucket;         // canonical bucket key
  std::string device;         // device fingerprint key (JIT) or name (static)
  std::string arch;           // "sm_90a"
  Source source = Source::default_variant;
  std::string db;             // the database the winner came from
  std::string variant;
  KernelConfig config;
  std::string kernel_from;    // "database", "cubin cache", "JIT compile", "static table"
  std::string kernel_hash;    // content hash of the cubin, when known
  std::string miss;           // without a winner: how the nearest stored key differs
  std::vector<std::string> notes;  // database warnings, rebuilds, fallbacks
  double select_ms = 0, compile_ms = 0, load_ms = 0;
};

// The head dims the kernels support (the templates' and the search space's).
const std::vector<int>& supported_head_dims();
// The kernels' head dim that serves a call of head dim d: d itself when supported, else the
// smallest supported one above it (the kernel reads the call's rows as zero-padded, or runs on
// zero-padded copies: dispatch.cpp); 0 when
// d is above them all.
int kernel_head_dim(int d);

// The cubin architecture a device of compute capability `cc` runs (sage::target_arch_for_cc:
// "sm_80" ... "sm_120"), or "" when no target of this project runs on it. Used by static builds,
// which cannot ask the compile service (tuner::arch_for_cc gives the same answers).
std::string arch_for_cc(int cc);

// The command line that reproduces a call with a given variant:
// "sage-tune bench --variant V -d 128 -n 4096 --batch 4 --heads 32 --causal no".
std::string reproduce_command(const AttnProblem& p, Policy policy, const std::string& variant);

// ---- the call path (what the C API runs after validating its arguments) ----------------

// Converts and validates a C descriptor (sage.h) into a problem and a policy. Throws
// Error(invalid_argument) or Error(unsupported) naming the field. Touches no device.
struct DescView {
  int batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, layout, dtype, causal;
  float sm_scale;
  int policy;
  int window = 0;
};
// A variable-length batch's descriptor (sage_attention_varlen): as problem_of, then varlen with
// the packed totals; the layout must be NHD, and head_dim one the kernels read in place (a
// kernel head dim, or a multiple of 8 below one: no padded copies). Which head dims an arch
// serves is its `varlen` defaults' (head dim 256: sm_90a only).
AttnProblem varlen_problem_of(const DescView& d, int total_q, int total_kv, Policy* policy);
AttnProblem problem_of(const DescView& d, Policy* policy);
// A paged KV cache's call (sage_attention_paged): as problem_of, then paged with page_size; throws
// Error(invalid_argument) for a page size that is no power of two, max_pages * page_size below
// seq_kv or num_pages < 1, Error(unsupported) for a window or a head dim that is no multiple of 8.
AttnProblem paged_problem_of(const DescView& d, int page_size, int max_pages, int num_pages, Policy* policy);
// Variable-length queries over a paged KV cache (sage_attention_varlen_paged): the paged call's
// checks on the longest sequence (causal taken per sequence, so desc->seq_q may pass seq_kv),
// then varlen with total_q packed query rows (total_kv 0: the keys are the caches'); throws
// Error(invalid_argument) for a layout other than NHD or total_q < 0.
AttnProblem varlen_paged_problem_of(const DescView& d, int total_q, int page_size, int max_pages, int num_pages,
                                    Policy* policy);
// The paged call's tensors: q and o contiguous in p.layout, k and v the caches with their page
// strides (zero: contiguous [num_pages, page_size, heads_kv, head_dim]; checked as positive
// multiples of 8 where a dimension has more than one entry), the caches' and tables' pointers
// (null, misaligned: named as the kv fields).
// FP8 pages (p.kv_fp8): strides in bytes, positive multiples of 16.
void set_paged_args(const AttnProblem& p, AttnArgs& a, const TensorStrides& ks, const TensorStrides& vs,
                    const std::int32_t* block_table, const std::int32_t* seqlens_kv, int max_pages, int num_pages);
// The caches' element type (sage_paged_kv::kv_dtype: 0 the queries', 1 FP8 e4m3) on a paged call's
// problem: FP8 sets p.kv_fp8; throws Error(invalid_argument) for another value, Error(unsupported)
// for FP8 pages of a head dim that is no multiple of 16 (rows of 16-byte chunks) or of 2^30 keys
// or more.
void set_kv_dtype(AttnProblem& p, int kv_dtype);
// FP8 pages' scales (device FP32, null: 1) into `a`: one for every kv head (per_head 0) or one a
// kv head (1); throws Error(invalid_argument) for another per_head, or misaligned scales.
void set_page_scales(const AttnProblem& p, AttnArgs& a, const float* k_scale, const float* v_scale, int per_head);
// A sliding window's call as the kernels run it. A dense call leaves out the keys no query
// sees (those before its first query's window: a decoding step's or a chunk's long cache): K
// and V start at the first visible key (contiguous tensors become strided views of
// themselves; not at head dims that are no multiple of 8, which run on padded copies), so a
// decoding step (seq_q 1) has no window left. A window that holds every key is none (p.window
// 0). `a` (null for the workspace and name queries) gets the views.
void trim_window(AttnProblem& p, AttnArgs* a);
// Null and alignment checks of one call's pointers (lse and workspace may be null).
void check_pointers(const AttnArgs& a, const void* workspace);
// The strides of a strided call (a.strided): a dimension of size 1 gets stride 0 (any stride
// serves it); the others must be positive multiples of 8 elements, and then the head dim a
// multiple of 8. Throws Error(invalid_argument) naming the tensor and the stride.
void check_strides(const AttnProblem& p, AttnArgs& a);
// Elements from a tensor's first to one past its last (the extent SAGE_CHECK_POINTERS checks).
std::int64_t extent_elems(const TensorStrides& s, int batch, int heads, int seq, int head_dim);

// A caller-supplied workspace smaller than the kernel needs (SAGE_ERR_WORKSPACE).
class WorkspaceTooSmall : public Error {
 public:
  using Error::Error;
};

// Runs attention on the current context (validated problem; see sage_attention()), on the
// SMs of `stream` (p.sms is set from it: stream_sms).
void run(const AttnProblem& p, Policy policy, const AttnArgs& a, void* workspace, std::size_t workspace_bytes,
         CUstream stream);
// Workspace bytes for p (with LSE, which needs the most), selecting the kernel if needed; for
// the SMs of the current context (a green context's partition where one is current: p.sms is
// set from it).
std::size_t workspace_size(const AttnProblem& p, Policy policy);
// The same for a call on `stream` (p.sms from stream_sms(stream)).
std::size_t workspace_size(const AttnProblem& p, Policy policy, CUstream stream);
// The selection serving p on the current context (and its SMs, as workspace_size), selecting
// and loading it if needed.
const Selection& selection_for(const AttnProblem& p, Policy policy);

// ---- counters and test hooks -------------------------------------------------------------

struct Counters {
  std::uint64_t selections = 0;  // buckets selected (kernel chosen, obtained and loaded)
  std::uint64_t compiles = 0;    // NVRTC compiles actually run (cubin cache hits not counted)
  std::uint64_t loads = 0;       // modules loaded
};
Counters counters();
// Forgets every loaded kernel, the database handles and the counters, so that the next call
// selects again (reading SAGE_DB etc. afresh). Must not run while other threads call the
// runtime: for tests and benchmarks.
void reset();

}  // namespace sage::rt
