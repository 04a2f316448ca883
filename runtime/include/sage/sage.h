/* sage-tune runtime: SageAttention-style quantized attention with kernels tuned per GPU.
 *
 * One call computes O = softmax(sm_scale * Q K^T [causal mask]) V for FP16/BF16 tensors on
 * the device. At the first call for a problem bucket the library picks the tuned variant for
 * this GPU (user database, then system database, then the architecture's default), compiles
 * it if needed (NVRTC) and caches it; later calls only launch. An exported static build
 * (sage-tune export) serves the kernels built into it instead, with no NVRTC and no database:
 * the exported winners, and for every other call the defaults it exported (chosen as a JIT
 * build chooses them; SAGE_ERR_NOT_IN_BUILD for an architecture or head dim it did not export).
 *
 * Every function returns a status; on failure sage_last_error() tells what went wrong, in
 * words, for the calling thread. No function aborts the process.
 *
 * Environment: SAGE_DB (user database path), SAGE_SYSTEM_DB, SAGE_CACHE_DIR (cubin cache),
 * SAGE_DISABLE_JIT=1 (a kernel that is not compiled yet is an error instead of a compile),
 * SAGE_LOG=1 (on stderr: why each kernel was chosen, and the sage-tune command that
 * reproduces the call), SAGE_CHECK_POINTERS=1 (check that every pointer is device memory
 * large enough for its tensor; a few driver queries per call). See docs/runtime.md. */
#ifndef SAGE_SAGE_H
#define SAGE_SAGE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define SAGE_API
#else
#define SAGE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sage_status {
  SAGE_OK = 0,
  SAGE_ERR_INVALID_ARGUMENT = 1, /* null pointer, size < 1, heads not divisible, misaligned pointer,
                                    causal with seq_q > seq_kv, an enum out of range, a window < 0
                                    or without causal */
  SAGE_ERR_UNSUPPORTED = 2,      /* valid but not supported: head_dim, device architecture */
  SAGE_ERR_NOT_IN_BUILD = 3,     /* a static (exported) build without this problem's winner or
                                    defaults (its architecture or head dim not exported) */
  SAGE_ERR_JIT_DISABLED = 4,     /* SAGE_DISABLE_JIT=1 and no compiled kernel is stored */
  SAGE_ERR_COMPILE = 5,          /* a kernel failed to compile */
  SAGE_ERR_CUDA = 6,             /* a CUDA driver call failed */
  SAGE_ERR_NO_DEVICE = 7,        /* no driver or no GPU */
  SAGE_ERR_WORKSPACE = 8,        /* the supplied workspace is smaller than sage_workspace_size() */
  SAGE_ERR_DATABASE = 9,         /* a tune database or the cubin cache could not be read or written */
  SAGE_ERR_INTERNAL = 10         /* a bug: please report it with the SAGE_LOG=1 output */
} sage_status;

typedef enum sage_layout {
  SAGE_LAYOUT_HND = 0, /* [batch, heads, seq, head_dim] */
  SAGE_LAYOUT_NHD = 1  /* [batch, seq, heads, head_dim] */
} sage_layout;

/* Use SAGE_FP16 / SAGE_BF16. (The enumerators carry a trailing underscore because the kernel
 * ABI header, templates/include/sage/params.h, has enumerators SAGE_DTYPE_FP16/BF16.) */
typedef enum sage_dtype { SAGE_DTYPE_FP16_ = 0, SAGE_DTYPE_BF16_ = 1 } sage_dtype;
#define SAGE_FP16 SAGE_DTYPE_FP16_
#define SAGE_BF16 SAGE_DTYPE_BF16_

typedef enum sage_policy {
  SAGE_POLICY_BALANCED = 0, /* the default: SageAttention2-level accuracy, fastest */
  SAGE_POLICY_ACCURATE = 1, /* FP16 P.V only (rel-L1 <= 0.013 on Gaussian inputs) */
  SAGE_POLICY_FAST = 2      /* the loosest thresholds of configs/problems.yaml */
} sage_policy;

/* One attention call's shape and options. Q and O are [B, heads_q, seq_q, D] and K, V are
 * [B, heads_kv, seq_kv, D] in `layout`, contiguous, of `dtype`. heads_q must be a multiple
 * of heads_kv (grouped-query attention: query head h reads kv head h / (heads_q/heads_kv)).
 * Causal masking is bottom-right aligned (query i sees key j iff j <= i + seq_kv - seq_q),
 * which needs seq_q <= seq_kv. head_dim: the kernels have 64, 128 and 256 (all three quantized
 * and unquantized); any other up to 256 runs on the next of them: a multiple of 8 on the caller's tensors, read as zero-padded
 * (no extra workspace); any other on zero-padded copies of Q, K, V and O in the workspace. */
typedef struct sage_attention_desc {
  int batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
  sage_layout layout;
  sage_dtype dtype;
  int causal;         /* 0 or 1 */
  float sm_scale;     /* softmax scale; 0 means 1/sqrt(head_dim) */
  sage_policy policy;
  int window;         /* sliding window, causal only: 0 none; W > 0: query i sees its W most recent
                         keys, j in (i + seq_kv - seq_q - W, i + seq_kv - seq_q] (Mistral's and
                         Gemma's sliding_window = W; FlashAttention's window_size = (W - 1, 0)) */
} sage_attention_desc;

/* A descriptor with defaults (HND, FP16, non-causal, sm_scale 0, balanced, no window) and the sizes. */
SAGE_API sage_attention_desc sage_attention_desc_init(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv,
                                                      int head_dim);

/* Bytes of workspace sage_attention() needs for `desc` on the current device, with or without
 * LSE. Selects (and at the first call for the bucket, loads or compiles) the kernel. A call is
 * sized to the SMs its stream runs on (a green context's partition of them): this answers for
 * the current context's own streams (with a green context current, its partition). */
SAGE_API sage_status sage_workspace_size(const sage_attention_desc* desc, size_t* bytes);

/* The same for calls on `stream` (NULL: the legacy default stream), whose SMs may be a green
 * context's partition (a stream of cuGreenCtxStreamCreate while the primary context is
 * current), or whose context may be another than the current one (another device's): the
 * kernel that serves them, and its workspace, may differ from the current context's. */
SAGE_API sage_status sage_workspace_size_on_stream(const sage_attention_desc* desc, void* stream, size_t* bytes);

/* Runs attention on `stream` (a CUstream / cudaStream_t; NULL: the legacy default stream of
 * the calling thread's current CUDA context, device 0's primary context when none is current),
 * in the stream's context: a stream of another device than the current one runs there, with
 * the workspace plan of sage_workspace_size_on_stream. `lse`, when not NULL, receives the
 * natural-log log-sum-exp of each query row, FP32 [B, heads_q, seq_q], 4-byte aligned. `workspace` may be NULL (the library then takes
 * it from its own stream-ordered memory pool on `stream`, which keeps freed memory for reuse)
 * or device memory of at least sage_workspace_size() bytes, 256-byte aligned, not used by
 * other work while this call runs on `stream`. Pointers q, k, v, o must be 16-byte aligned.
 * The call is asynchronous like a kernel launch. Thread-safe. */
SAGE_API sage_status sage_attention(const sage_attention_desc* desc, const void* q, const void* k, const void* v,
                                    void* o, float* lse, void* workspace, size_t workspace_bytes, void* stream);

/* Element strides of one tensor between batches, heads and sequence positions; its head
 * dimension is contiguous (stride 1). */
typedef struct sage_strides {
  int64_t batch, head, seq;
} sage_strides;

/* sage_attention() on tensors with strides of their own, e.g. Q, K and V as views of one
 * packed QKV projection ([B, N, 3, H, D]: seq stride 3*H*D, head stride D), or O written into a
 * slice of a larger buffer. A NULL strides pointer means that tensor is contiguous in
 * desc->layout, which still names the bucket (the tuned winner) the call takes. Strides must be
 * positive multiples of 8 elements (16 bytes: the kernels load 16-byte vectors and TMA rows),
 * so head_dim must be a multiple of 8 where any is given; a dimension of size 1 may have any
 * stride. O's rows must not overlap each other (checked) nor Q, K or V (not checked); the
 * inputs' may. Everything else is as for sage_attention(). */
SAGE_API sage_status sage_attention_strided(const sage_attention_desc* desc, const void* q, const sage_strides* q_strides,
                                            const void* k, const sage_strides* k_strides, const void* v,
                                            const sage_strides* v_strides, void* o, const sage_strides* o_strides,
                                            float* lse, void* workspace, size_t workspace_bytes, void* stream);

/* Variable-length batches: desc->batch sequences packed one after another along the rows of
 * q, k, v and o, which are [total_q, heads_q, head_dim] and [total_kv, heads_kv, head_dim]
 * (contiguous; desc->layout must be SAGE_LAYOUT_NHD). Sequence b's queries are rows
 * cu_seqlens_q[b] to cu_seqlens_q[b + 1] - 1, its keys and values rows cu_seqlens_kv[b] to
 * cu_seqlens_kv[b + 1] - 1: two device arrays of batch + 1 nondecreasing int32 offsets from 0,
 * the last at most total_q / total_kv (every offset is clamped to [0, total] on the device, so
 * no offset reads or writes outside the tensors; the library does not read them on the host).
 * desc->seq_q and desc->seq_kv are the longest sequence's lengths (an upper bound: a sequence's
 * rows past desc->seq_q are not computed), which also pick the kernel. Causal masks are
 * bottom-right aligned per sequence; a sequence of more queries than keys leaves its first rows
 * without keys (O 0, LSE -inf), and an empty one is skipped. `lse`, when not NULL, receives FP32
 * [heads_q, total_q]. head_dim: 64, 128 (on sm_90a also 256), or a multiple of 8 below one of
 * them (SAGE_ERR_UNSUPPORTED on a GPU without that head dim's kernel). Kernels: on sm_90a under
 * the balanced and fast policies past 512-1K keys the quantized ones (INT8 Q.K^T, FP8 P.V, each
 * sequence's own statistics), otherwise the unquantized (FP16/BF16 MMA) ones: wgmma with TMA on
 * sm_90a, mma.sync on the other architectures (docs/runtime.md); an exported static build serves
 * them from its exported defaults. */
typedef struct sage_varlen {
  const int32_t* cu_seqlens_q;  /* device memory, batch + 1 offsets, 4-byte aligned */
  const int32_t* cu_seqlens_kv; /* device memory, batch + 1 offsets, 4-byte aligned */
  int total_q, total_kv;        /* rows of q and o, of k and v */
} sage_varlen;

/* Bytes of workspace sage_attention_varlen() needs for `desc` and `varlen` on the current
 * context's streams (selecting the kernel if needed). */
SAGE_API sage_status sage_workspace_size_varlen(const sage_attention_desc* desc, const sage_varlen* varlen,
                                                size_t* bytes);

/* Runs attention over a variable-length batch on `stream`; workspace, stream and thread-safety
 * as sage_attention(). */
SAGE_API sage_status sage_attention_varlen(const sage_attention_desc* desc, const sage_varlen* varlen, const void* q,
                                           const void* k, const void* v, void* o, float* lse, void* workspace,
                                           size_t workspace_bytes, void* stream);

/* A paged KV cache (vLLM's, FlashInfer's and FlashAttention's block tables): K and V live in
 * num_pages pages of page_size slots each (a power of two), and a block table gives each
 * sequence its pages: sequence b's key i is slot i % page_size of page
 * block_table[b * max_pages + i / page_size]. Sequence b has seqlens_kv[b] keys (clamped to
 * [0, desc->seq_kv] on the device: desc->seq_kv is an upper bound, which also picks the kernel
 * and sizes its key splits; max_pages * page_size must be at least desc->seq_kv). A table entry
 * outside [0, num_pages) reads page 0, so no table sends an access out of the caches (the
 * library does not read them on the host). */
/* Element types of a paged cache's K and V (sage_paged_kv::kv_dtype). */
typedef enum sage_kv_dtype {
  SAGE_KV_DTYPE_INPUT = 0,    /* the queries' (desc->dtype): FP16 or BF16 */
  SAGE_KV_DTYPE_FP8_E4M3 = 1  /* FP8 e4m3 (OCP; torch.float8_e4m3fn), one byte an element, with scales */
} sage_kv_dtype;

typedef struct sage_paged_kv {
  const void* k_pages, *v_pages; /* page 0 of K and of V, 16-byte aligned */
  /* Element strides between pages (batch), kv heads (head) and slots (seq), positive multiples
   * of 8 (FP8 pages: of 16); all zero: contiguous [num_pages, page_size, heads_kv, head_dim] pages. */
  sage_strides k_strides, v_strides;
  const int32_t* block_table; /* device memory, [batch, max_pages] int32, 4-byte aligned */
  const int32_t* seqlens_kv;  /* device memory, [batch] int32: each sequence's keys */
  int page_size;              /* slots a page: a power of two */
  int max_pages;              /* pages a sequence's row of the table holds (its row stride) */
  int num_pages;              /* pages in the caches */
  /* FP8 pages (vLLM's kv_cache_dtype "fp8_e4m3"): kv_dtype SAGE_KV_DTYPE_FP8_E4M3, head_dim a
   * multiple of 16; K's element is e4m3(byte) * k_scale, V's e4m3(byte) * v_scale. The scales are
   * device FP32 (NULL: 1), one for every kv head (scale_per_head 0) or [heads_kv] (1); the kernels
   * read them, so a CUDA graph's replays see new values. Zero-initialized: the queries' type. */
  int kv_dtype;               /* sage_kv_dtype */
  const float* k_scale, *v_scale;
  int scale_per_head;
} sage_paged_kv;

/* Bytes of workspace sage_attention_paged() needs (selecting the kernel if needed). */
SAGE_API sage_status sage_workspace_size_paged(const sage_attention_desc* desc, const sage_paged_kv* kv, size_t* bytes);

/* Attention of dense queries over a paged KV cache (decoding and speculative or chunked steps
 * of a serving engine): q and o are [B, heads_q, seq_q, D] in desc->layout, contiguous (seq_q
 * queries a sequence, the last seq_q positions of its keys under a causal mask: bottom-right
 * aligned per sequence, a sequence of fewer keys than queries leaves its first rows without
 * keys, O 0 and LSE -inf); `lse` FP32 [B, heads_q, seq_q]. head_dim: a multiple of 8 up to 128,
 * and up to 256 on sm_80, sm_90a and sm_100 (the decode kernel of head dim 256, whatever the
 * queries; SAGE_ERR_UNSUPPORTED elsewhere). desc->window (causal): a sliding window per sequence,
 * query i seeing keys (i + seqlens_kv[b] - seq_q - window, i + seqlens_kv[b] - seq_q] (the
 * mma.sync kernels' window entries; on sm_90a also for the chunks that would take wgmma). FP8 e4m3
 * pages (kv->kv_dtype, with scales): the same mma.sync kernels' FP8 entries, each tile converted to
 * the queries' type in shared memory (docs/runtime.md, "FP8 pages"). The kernels are the
 * unquantized (FP16/BF16 MMA) ones, every policy: the mma.sync decode schedule for up to 4
 * queries on sm_90a (one elsewhere), its plain one beyond, and on sm_90a the wgmma kernels for
 * longer chunks (docs/runtime.md, "Paged KV caches"); an exported static build serves them from
 * its exported defaults. Workspace, stream and thread-safety as sage_attention(). */
SAGE_API sage_status sage_attention_paged(const sage_attention_desc* desc, const sage_paged_kv* kv, const void* q,
                                          void* o, float* lse, void* workspace, size_t workspace_bytes, void* stream);

/* Variable-length queries over a paged KV cache (vLLM's flash_attn_varlen_func with a block
 * table: a serving step's prefill chunks and decoding sequences in one call). q and o are packed
 * [total_q, heads_q, head_dim] as sage_attention_varlen()'s (desc->layout must be
 * SAGE_LAYOUT_NHD): sequence b's queries are rows cu_seqlens_q[b] to cu_seqlens_q[b + 1] - 1, a
 * device array of batch + 1 nondecreasing int32 offsets from 0 (clamped to [0, total_q] on the
 * device). Its keys are kv's: seqlens_kv[b] of them through its row of the block table, as
 * sage_attention_paged()'s. desc->seq_q is the longest sequence's queries (rows past it are not
 * computed), desc->seq_kv the upper bound of its keys; both pick the kernel. Causal masks are
 * bottom-right aligned per sequence: query i of a sequence of n queries and k keys sees keys
 * j <= i + k - n (a sequence of more queries than keys leaves its first rows without keys: O 0,
 * LSE -inf); an empty sequence is skipped. `lse`, when not NULL, receives FP32
 * [heads_q, total_q]. head_dim and kernels as sage_attention_paged()'s, selected by the longest
 * sequence's queries; where that is not the decode schedule's kernel, the sequences of up to 4
 * queries (the decode schedule's edge; at head dim 64 before a wgmma kernel also 5-8) run on it
 * first, GQA heads packed and keys split, and the longer ones on the selected kernel (docs/runtime.md, "Variable-length queries over a paged
 * cache"); desc->window (causal): a sliding window per sequence, as sage_attention_paged()'s.
 * Workspace, stream and thread-safety as sage_attention(). */
SAGE_API sage_status sage_workspace_size_varlen_paged(const sage_attention_desc* desc, int total_q,
                                                      const sage_paged_kv* kv, size_t* bytes);
SAGE_API sage_status sage_attention_varlen_paged(const sage_attention_desc* desc, const int32_t* cu_seqlens_q,
                                                 int total_q, const sage_paged_kv* kv, const void* q, void* o,
                                                 float* lse, void* workspace, size_t workspace_bytes, void* stream);

/* Writes the name of the variant that serves `desc` on the current device into `name`
 * (NUL-terminated, truncated to `capacity` bytes), selecting it first if needed. */
SAGE_API sage_status sage_variant_name(const sage_attention_desc* desc, char* name, size_t capacity);
/* The same for a variable-length batch (sage_attention_varlen's desc and varlen: its totals are
 * checked, its offsets not read) and for dense queries over a paged KV cache (sage_attention_paged's
 * desc and kv: its page size, page counts and kv_dtype; pages, tables and lengths not read). */
SAGE_API sage_status sage_variant_name_varlen(const sage_attention_desc* desc, const sage_varlen* varlen, char* name,
                                              size_t capacity);
SAGE_API sage_status sage_variant_name_paged(const sage_attention_desc* desc, const sage_paged_kv* kv, char* name,
                                             size_t capacity);

/* The reason of the calling thread's last failure ("" after a success). */
SAGE_API const char* sage_last_error(void);
/* A fixed description of a status ("invalid argument", ...). */
SAGE_API const char* sage_status_string(sage_status status);

#ifdef __cplusplus
}
#endif
#endif /* SAGE_SAGE_H */
