// Kernel parameter structs shared by host code (C++) and device code (NVRTC). Plain C
// layout only: no pointers to host objects, fixed-width types, no constructors.
#pragma once

#if defined(__CUDACC_RTC__)
typedef signed char sage_i8;
typedef unsigned char sage_u8;
typedef int sage_i32;
typedef unsigned int sage_u32;
typedef long long sage_i64;
#else
#include <cstdint>
typedef std::int8_t sage_i8;
typedef std::uint8_t sage_u8;
typedef std::int32_t sage_i32;
typedef std::uint32_t sage_u32;
typedef std::int64_t sage_i64;
#endif

// 5: the launch grid of causal calls (non-persistent kernels) is (pairs of a group, q_tiles,
// groups), attn_mma.cuh: cta_coords. 6: split_o (the persistent native kernels' split tail).
// 7: pack_rows (the persistent native kernels' GQA heads packed into one query tile) and
// causal_single (their causal query tiles not paired). 8: split_cluster (decoding's split
// merged within thread block clusters). 9: head_dim may be below the variant's D (a multiple
// of 8): the kernels read the caller's columns past it as zeros and do not write O's. 10: the
// decode schedule packs a GQA group larger than a tile into q_tiles tiles a kv head. 11:
// split_share (the persistent split kernel's partials merged by several ranges, a share each).
// 12: tma_v8 (the native pingpong kernel's FP8 V^T tiles in the workspace). 13: tma_vs (their
// scales, read by a tensor TMA load). 14: variable-length batches (cu_seqlens_q/kv, varlen,
// lse_stride_h, q_row0, kv_row0; the native kernels' sage_attn_varlen entry). 15: the
// quantized kernels' variable-length batches (kv_tile_pitch, kv_tile0; varlen = 2). 16: window
// (sliding-window causal masks). 17: paged KV caches (block_table, seqlens_kv, bt_stride,
// page_shift, num_pages; the native mma.sync kernels' sage_attn_paged entry). 18: vq_min,
// vq_max (variable-length queries over a paged cache: the sequences one launch takes). 19:
// kv_k_scale, kv_v_scale, kv_scale_stride (FP8 pages: the entries sage_attn_paged_fp8 and
// sage_attn_varlen_paged_fp8).
#define SAGE_KERNEL_ABI_VERSION 19

// Element types of the user's tensors.
enum SageDType { SAGE_DTYPE_FP16 = 0, SAGE_DTYPE_BF16 = 1 };

// One tensor of the user's: element strides for batch, head and sequence; the head
// dimension is contiguous (stride 1). HND and NHD differ only in these strides.
struct SageTensor {
  const void* ptr;
  sage_i64 stride_b, stride_h, stride_n;
};

// Everything the preparation and attention kernels of a variant read at run time. The
// host fills it once per call (runtime/src/launch), the kernels take it by value.
struct SageAttnParams {
  SageTensor q, k, v;
  void* o;                     // output, dtype like the input, strides in o_stride_*
  sage_i64 o_stride_b, o_stride_h, o_stride_n;
  float* lse;                  // optional [B, Hq, Nq] natural-log LSE, or null
  sage_i32 batch, heads_q, heads_kv, seq_q, seq_kv;
  sage_i32 head_dim;           // the caller's: the variant's D, or below it and a multiple of 8
                               // (checked on the host); the kernels read the columns of Q, K
                               // and V past it as zeros (TMA: the tensor maps' bounds) and
                               // write none of O's past it
  sage_i32 dtype;              // SageDType
  sage_i32 causal;             // bottom-right aligned when seq_q != seq_kv
  float sm_scale;              // softmax scale (1/sqrt(d) by default)

  // Workspace (owned by the caller of the launcher; sizes from the launcher's plan).
  sage_i32 q_tiles, k_tiles;   // ceil(seq / BLOCK_M) (packed: see pack_rows), ceil(seq / BLOCK_N)
  sage_i32 stat_splits;        // partial sums along the sequence in the stats kernel
  sage_i32 stat_rows;          // rows of K and V per (b, kv head) the statistics read: seq_kv,
                               // or every (seq_kv / stat_rows)-th row from the first
  float* stats;                // [stat_splits][B*Hkv][4][D]: K sum, V sum, V max, V min
  sage_i8* q_quant;            // [B, Hq, q_tiles*BLOCK_M, D] (int4: D/2 bytes a row)
  float* q_scale;              // [B, Hq, q_tiles, Q_GROUPS]
  sage_i8* q_mean_quant;       // smooth_q: [B, Hq, q_tiles, QROW] quantized block means of Q
  float* q_mean_scale;         // smooth_q: [B, Hq, q_tiles] their scales (sm_scale*log2e folded in)
  float* q_kmean;              // [B, Hq, seq_q]: sm_scale * q . mean(K), for LSE; or null
  sage_i8* k_quant;            // [B, Hkv, k_tiles*BLOCK_N, D]
  float* k_scale;              // [B, Hkv, k_tiles, K_GROUPS]
  void* v_prep;                // fp8: [B, Hkv, D, k_tiles*BLOCK_N] (tokens permuted);
                               // fp16: [B, Hkv, k_tiles*BLOCK_N, D]; null: read v directly;
                               // native Q.K^T with FP8 P.V: [B*Hkv*k_tiles][D][BLOCK_N] FP8
                               // V^T tiles, written by the attention kernel (attn_native.cuh)
  float* v_scale;              // fp8: [B, Hkv, D] per-channel scale; native Q.K^T with FP8 P.V:
                               // [B*Hkv*k_tiles][4], each tile's 2^-k first (16 bytes a
                               // tile: the kernel reads it by a TMA load, tma_vs)
  float* v_mean;               // smooth_v: [B, Hkv, D]
  // The persistent native kernels, non-causal calls whose query tiles do not divide evenly
  // among the CTAs: the last round's key tiles are cut into split_ranges ranges, each a CTA's
  // (attn_native.cuh: TailSplit). split_o: [split_ranges][D/2 + 4][consumer threads] FP32
  // partial results (O's fragment, row maxima, row sums); sync: [split_ranges][consumer warps]
  // flags, = generation once a warp's partial is written. Null: no split.
  // The native mma.sync kernel (decoding): each query tile's keys are cut into split_ranges
  // ranges, one CTA each; split_o holds every range's partial rows (O, then maxima and sums:
  // attn_mma.cuh, split_partial) and sync one counter per query tile.
  float* split_o;
  // The statistics and the quantization run in one launch: quantization CTAs that need the
  // statistics of a (batch, kv head) wait until its statistics CTAs (stat_splits of each
  // kind: K, V) have published them.
  unsigned long long* sync;    // [B*Hkv] counters: generation << 24 | statistics CTAs done;
                               // then [B*Hkv] V flags: = generation when V of that head went
                               // past the range its sampled statistics allowed (native
                               // persistent kernels: the split tail's flags, see split_o;
                               // native FP8 P.V: a flag a V tile, then its ticket and role
                               // counters)
  unsigned long long generation;  // unique per call (40 bits): a stale counter never matches
  sage_i32 num_sms;            // for grid sizing inside the kernels (persistent loops)
  sage_i32 split_ranges;       // see split_o (0: no split)
  // The persistent native kernels, few queries of grouped-query heads (decoding): a query tile
  // holds the heads_q / heads_kv query heads of one kv head, pack_rows rows each (a power of
  // two, at least 16: a warp's rows are one head's), so each K/V tile is read once for the
  // group. A work unit is then a (batch, kv head), and tma_q's box is pack_rows rows x the
  // group's heads. The native mma.sync kernel packs the same way (a warp's rows one head's).
  // Its decode schedule packs BM / pack_rows heads a tile (any pack_rows), a group of more
  // heads over q_tiles tiles a (batch, kv head). 0: one head a tile.
  sage_i32 pack_rows;
  // The persistent native kernels, causal calls with no more query tiles than CTAs: a work
  // unit is one query tile (longest first within a head), not a pair of them, so that every
  // tile has an SM of its own. 0: pairs.
  sage_i32 causal_single;
  // The persistent split kernel, decoding (every unit split, one query tile a unit): the grid
  // is launched in clusters of split_cluster CTAs (a power of two, at least 2), each unit's
  // ranges are whole clusters, and the partial pieces of a cluster hand their results to the
  // cluster's leader (its lowest range) through distributed shared memory, so that only the
  // leaders' merged partials go through split_o (attn_native.cuh: cluster_merge). 0: no clusters.
  sage_i32 split_cluster;
  // The persistent split kernel, decoding: every unit's split_ranges / units ranges write their
  // partials, and the first split_share of them (the CTAs started last) each merge a share of
  // them and store O (attn_native.cuh: share_merge). 0: the owner merges (merge_plan).
  sage_i32 split_share;
  // TMA variants (wgmma pipeline): tensor maps (CUtensorMap, opaque) of q_quant, k_quant and
  // v_prep in the tile boxes and swizzle the kernel reads, encoded by the launcher (zero
  // otherwise); the persistent native kernels also store O through tma_o. Kernels take the
  // parameters as __grid_constant__, so TMA reads them in place. tma_v8: the native pingpong
  // kernel with FP8 P V (pv: fp8), its FP8 V^T tiles in the workspace at v_prep (attn_native.cuh:
  // V8 jobs), stored and read by TMA in boxes of head_dim rows of 128 bytes (128B swizzle);
  // tma_vs: their scales (v_scale), FP32 [tiles][4] in boxes of one tile's 16 bytes.
  struct alignas(64) SageTensorMap { unsigned long long opaque[16]; } tma_q, tma_k, tma_v, tma_o, tma_v8, tma_vs;
  // Variable-length batches (the entry sage_attn_varlen; null elsewhere): the sequences are
  // packed one after another along the sequence dimension of q, k, v and o ([total, heads, D]
  // with batch strides 0), sequence b's queries at rows [cu_seqlens_q[b], cu_seqlens_q[b + 1])
  // and its keys at rows [cu_seqlens_kv[b], cu_seqlens_kv[b + 1]); `batch` is the sequence
  // count, seq_q and seq_kv are the packed totals (the rows q/o and k/v hold: every offset is
  // clamped to them), q_tiles the grid's query tiles (of the longest sequence). Each CTA runs
  // its sequence as a call of its own (attn_mma.cuh: varlen_view), with varlen = 1 there; the
  // native mma.sync kernels and the plain native wgmma kernel have the entry. LSE
  // is [heads_q, total] (lse_stride_h = the total; 0: seq_q, the dense [B, heads_q, seq_q]).
  // q_row0, kv_row0: in a sequence's view, its first rows in the packed tensors (the TMA
  // kernels' coordinates; the others offset the view's pointers instead).
  // The quantized kernels (the FP8 P.V wgmma kernels of the TMA loader that quantize Q
  // themselves; attn_mma.cuh: varlen_view_ws) keep per-sequence data in their workspace: the
  // statistics, sync words, V's scales and means per (sequence, kv head) as for a batch, and
  // each kv head's K and V tiles in a row of kv_tile_pitch tiles (= total_kv / BLOCK_N + batch)
  // where sequence b's start at tile kv_tile0 = cu_seqlens_kv[b] / BLOCK_N + b (no two
  // sequences' tiles overlap, and none passes the pitch, whatever the offsets). q_kmean, like
  // the LSE, is [heads_q, total_q]. Their views keep the batch index (varlen = 2; the native
  // kernels' views are batch 1, varlen = 1). kv_tile_pitch 0: a dense call's layout.
  const sage_i32* cu_seqlens_q;
  const sage_i32* cu_seqlens_kv;
  sage_i32 varlen;
  sage_i32 lse_stride_h;
  sage_i32 q_row0, kv_row0;
  sage_i32 kv_tile_pitch, kv_tile0;
  // Sliding window (causal calls only; 0: none): query i sees key j iff
  // i + seq_kv - seq_q - window < j <= i + seq_kv - seq_q, its `window` most recent keys. The
  // kernels that take it (launch.cpp: window_capable) start each query tile at its first
  // visible key tile and mask the tiles on the window's edge (mma_attn::kv_range).
  sage_i32 window;
  // Paged KV cache (the entry sage_attn_paged; null elsewhere): K and V are pages of
  // 1 << page_shift slots, slot s of page j at k.ptr + j * k.stride_b + hkv * k.stride_h +
  // s * k.stride_n (elements; v likewise), num_pages of them. Sequence b has
  // min(seqlens_kv[b], seq_kv) keys (seq_kv: the call's upper bound, which sizes the grid and
  // the key splits), its key i in page block_table[b * bt_stride + (i >> page_shift)] (an entry
  // outside [0, num_pages) reads page 0: no access leaves the cache whatever the table holds).
  // Q, O and the LSE are dense [B, ...]; causal masks are bottom-right aligned per sequence.
  // Each CTA runs its sequence as a dense call of that many keys (attn_mma.cuh: paged_view).
  const sage_i32* block_table;
  const sage_i32* seqlens_kv;
  sage_i32 bt_stride, page_shift, num_pages;
  // Variable-length queries over a paged cache (the entry sage_attn_varlen_paged, cu_seqlens_q
  // and block_table set): the sequences of vq_min to vq_max queries (vq_max 0: no bound) are this
  // launch's, the others' CTAs return at once (a mixed batch's decoding sequences on the decode
  // schedule, its longer ones on another kernel: launch.h, AttnArgs::vq_min).
  sage_i32 vq_min, vq_max;
  // FP8 (e4m3) pages (the entries sage_attn_paged_fp8 and sage_attn_varlen_paged_fp8): K and V
  // hold one byte an element (their strides above count bytes), key i of kv head h dequantized
  // as e4m3(byte) * kv_k_scale[h * kv_scale_stride] (V alike with kv_v_scale); a null scale is 1.
  // kv_scale_stride: 0 (one scale for every head) or 1 (one a kv head).
  const float* kv_k_scale;
  const float* kv_v_scale;
  sage_i32 kv_scale_stride;
};

// The FP32 reference attention's arguments: O and LSE in FP32, [B, Hq, Nq, D] / [B, Hq, Nq].
struct SageRefParams {
  SageTensor q, k, v;
  float* o;
  float* lse;
  sage_i32 batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
  sage_i32 dtype;
  sage_i32 causal;
  float sm_scale;
  sage_i32 window;  // as SageAttnParams::window
};
