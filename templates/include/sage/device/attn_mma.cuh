// The mma.sync + cp.async attention pipeline (sm_80+): one CTA per BLOCK_M query rows of one
// (batch, head); warps own WARP_Q rows each and stream the K/V tiles of their kv head through
// a STAGES-deep shared-memory ring. Per tile and warp:
//   S = Q K^T        INT8 m16n8k32 (INT4 m16n8k64), int32 accumulators
//   softmax          one Q scale and one K scale per lane (per-thread groups), dequantization
//                    folded into the exp2 FMA, online max/sum in FP32
//   O += P V         FP8 m16n8k32 into a fresh accumulator added into FP32 O (two-level),
//                    u8 x s8 m16n8k32 (P x255, INT8 V) into an exact int32 accumulator per
//                    tile added into FP32 O, or FP16 m16n8k16 with FP32 (or FP16, flushed
//                    every tile) accumulators
// Native (qk, pv: native): Q, K and V are the caller's FP16/BF16 tensors, read in place (no
// preparation); S = Q K^T and O += P V are m16n8k16 MMAs of that type with FP32 accumulators,
// and the softmax rescales O only where a row's maximum moved by more than kRescaleSlack (the
// native wgmma kernel's). Where the launcher cuts each query tile's keys over p.split_ranges
// CTAs (decoding: fewer query tiles than CTAs; flash-decoding), each CTA writes its partial
// O, row maxima and sums to the workspace and the last of a tile's CTAs merges them.
// Causal: tiles past the diagonal are skipped, only the diagonal (and the tail) tiles masked.
#pragma once
#include "sage/device/attn_config.cuh"
#include "sage/device/varlen.cuh"
#include "sage/device/epilogue.cuh"
#include "sage/device/mma_sm80.cuh"
#include "sage/device/softmax.cuh"
#include "sage/fp8_chunks.h"

namespace sage {
namespace mma_attn {
using namespace dev;

template <class Cfg>
struct Layout {
  static constexpr int Q = 0;
  static constexpr int K = Cfg::SMEM_Q;
  static constexpr int V = K + Cfg::STAGES * Cfg::SMEM_K_STAGE;
  static constexpr int QCPR = Cfg::QROW / 16;                       // 16-byte chunks per Q/K row
  static constexpr int VCPR = Cfg::V8 ? Cfg::BN / 16 : Cfg::D / 8;  // per V^T row / V row
};

// Where this CTA reads V from: prepared 8-bit (FP8 or INT8) V^T, prepared FP16 V, or the user's FP16 V.
struct VSource {
  const u8* base;
  i64 row_stride;  // bytes between rows (V^T rows for 8-bit V)
  int rows_valid;  // rows past this are zero-filled (user's V only)
  int row_bytes = 1 << 30;  // the user's V: bytes of a row read (head_dim x 2), zeros past them
};

// The KV tiles a CTA of query rows [m0, m0 + BM) visits: n_tiles (fewer when causal: tiles
// past the diagonal are skipped), and the first that needs masking (the causal diagonal,
// bottom-right aligned, or the sequence tail).
SAGE_DEV void kv_range(const SageAttnParams& p, int m0, int BM, int BN, int* n_tiles, int* mask_from) {
  *n_tiles = p.k_tiles;
  *mask_from = p.k_tiles;
  if (p.causal) {
    const int off = p.seq_kv - p.seq_q;
    const int last_key = m0 + BM - 1 + off;
    *n_tiles = last_key < 0 ? 0 : min_(p.k_tiles, last_key / BN + 1);
    const int lim = m0 + off + 1;  // keys below lim are visible to every row of the CTA
    *mask_from = lim <= 0 ? 0 : lim / BN;
  }
  if (p.seq_kv % BN != 0) *mask_from = min_(*mask_from, p.k_tiles - 1);
}

// The same for the kernels that take a sliding window (WINDOW: their entry sage_attn_window,
// p.window > 0): the tiles the CTA visits are [*begin, *n_tiles), from the one that holds its
// first row's first visible key (row + seq_kv - seq_q - window + 1); those before *mask_before
// hold keys left of some row's window and are masked too (tile t is masked iff t < *mask_before
// or t >= *mask_from). Without WINDOW, *begin and *mask_before are 0.
template <bool WINDOW>
SAGE_DEV void kv_range(const SageAttnParams& p, int m0, int BM, int BN, int* begin, int* n_tiles, int* mask_before,
                       int* mask_from) {
  kv_range(p, m0, BM, BN, n_tiles, mask_from);
  *begin = 0;
  *mask_before = 0;
  if (WINDOW && p.window > 0) {
    const int first = m0 + p.seq_kv - p.seq_q - p.window + 1;  // the first row's first visible key
    *begin = min_(first <= 0 ? 0 : first / BN, *n_tiles);
    const int all = first + BM - 1;  // keys from here are inside every row's window
    *mask_before = min_(all <= 0 ? 0 : (all + BN - 1) / BN, *n_tiles);
  }
}

// The query tile and (batch, query head) of this CTA. Without a mask the grid is (q_tiles, Hq,
// B). With a causal mask a CTA visits 1 to k_tiles key tiles, and the long ones that start last
// set how late the grid ends, so the launcher orders them longest-processing-time first: the
// grid is (pairs of a group, q_tiles, groups) over groups of consecutive (batch, head) pairs
// (launch.h: causal_group; one pair past 8K keys), and since the GPU starts a grid x fastest,
// every pair's longest query tile (y = 0) starts before any pair's next one.
struct CtaCoords {
  int q_tile, h, b;
  // The (batch, kv head) index of K, V and their scales in the workspace.
  SAGE_DEV i64 kv_bh(const SageAttnParams& p) const { return i64(b) * p.heads_kv + h / (p.heads_q / p.heads_kv); }
};
// Split keys or packed heads (the native kernel with p.split_ranges or p.pack_rows > 0, causal
// or not): the grid is (q_tiles * ranges, Hq, B), a tile's ranges adjacent; packed, h is the
// kv head (a tile holds its group's query heads, pack_rows rows each).
template <bool SPLIT = false>
SAGE_DEV CtaCoords cta_coords(const SageAttnParams& p) {
  // A sequence of a variable-length batch (varlen_view): the grid is (query tiles of the longest
  // sequence, Hq, sequences), causal tiles longest first, and the view's pointers start at the
  // sequence's rows (b = 0).
  // The quantized kernels' views (varlen_view_ws, varlen = 2) keep the sequence's index: their
  // workspace holds per-sequence data.
  if (p.varlen) {
    return {p.causal ? p.q_tiles - 1 - int(blockIdx.x) : int(blockIdx.x), int(blockIdx.y),
            p.varlen == 2 ? int(blockIdx.z) : 0};
  }
  if (SPLIT && (p.split_ranges > 0 || p.pack_rows > 0)) {
    return {int(blockIdx.x) / max_(p.split_ranges, 1), int(blockIdx.y), int(blockIdx.z)};
  }
  if (!p.causal) return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
  const int pair = int(blockIdx.z * gridDim.x + blockIdx.x);
  return {p.q_tiles - 1 - int(blockIdx.y), pair % p.heads_q, pair / p.heads_q};
}

// Split keys: which of its tile's p.split_ranges key ranges this CTA takes.
SAGE_DEV int split_index(const SageAttnParams& p) { return int(blockIdx.x) % p.split_ranges; }

// Where this CTA reads K from: the quantized workspace (packed tiles of QROW-byte rows), or
// the caller's FP16/BF16 K (native: rows row_stride bytes apart, zero-filled past rows_valid,
// and past row_bytes within a row: a call of a smaller head dim than D).
struct KSource {
  const u8* base;
  i64 row_stride;
  int rows_valid;
  int row_bytes = 1 << 30;
};

// The caller's K or V rows of batch b and kv head hkv, as the native kernels read them (a
// KSource or VSource): stride_n apart, zero-filled past seq_kv and past the call's head dim.
template <class S>
SAGE_DEV S caller_rows(const SageAttnParams& p, const SageTensor& t, int b, int hkv) {
  S s;
  s.base = static_cast<const u8*>(t.ptr) + (b * t.stride_b + hkv * t.stride_h) * 2;
  s.row_stride = t.stride_n * 2;
  s.rows_valid = p.seq_kv;
  s.row_bytes = p.head_dim * 2;
  return s;
}

// A paged KV cache's rows (SageAttnParams::block_table; the entry sage_attn_paged): row n of this
// CTA's sequence is slot n & (2^shift - 1) of page table[n >> shift], pages k_stride / v_stride
// bytes apart (KvLoader::load_paged). An entry outside [0, count) reads page 0.
struct PagedRows {
  const sage_i32* table;
  i64 k_stride, v_stride;
  int shift, count;
};
// Sequence b's rows (PAGED), or nothing the loads read (a dense call).
template <bool PAGED>
SAGE_DEV PagedRows paged_rows(const SageAttnParams& p, int b) {
  if constexpr (!PAGED) return PagedRows{};
  return {p.block_table + i64(b) * p.bt_stride, p.k.stride_b * 2, p.v.stride_b * 2, p.page_shift, p.num_pages};
}

// A paged call's view of sequence b (p.block_table set): its keys, min(seqlens_kv[b], seq_kv),
// and their tiles; everything else (the grid, the batch index of Q, O and the LSE, the key
// splits' units) stays the call's.
template <int BN>
SAGE_DEV void paged_view(const SageAttnParams& p, int b, SageAttnParams& v) {
  v.seq_kv = min_(max_(__ldg(p.seqlens_kv + b), 0), p.seq_kv);
  v.k_tiles = (v.seq_kv + BN - 1) / BN;
}

// Variable-length queries over a paged KV cache (p.cu_seqlens_q and p.block_table; the entry
// sage_attn_varlen_paged): sequence b's view, its queries rows [cu_seqlens_q[b], cu_seqlens_q[b + 1])
// of the packed Q and O (clamped to p.seq_q, the packed total), LSE [heads_q, total]
// (lse_stride_h: the packed total), its keys paged_view's. KEEP_B (the mma.sync kernels, whose
// grid and key splits are the paged call's): the view keeps the sequence's index b, Q and O with
// batch stride 0 and the call's query tiles (a tile past the sequence's queries holds no row).
// Else (the wgmma kernel; grid (query tiles of the longest sequence, Hq, sequences)) a call of its
// own as varlen_view's: batch 1, varlen = 1 (cta_coords: b = 0), its row of the block table; false:
// this CTA's query tile lies past its sequence. False also (either way): the sequence's queries
// are not this launch's (p.vq_min, p.vq_max). OUT = false: O and the LSE stay the call's, for
// the kernel to move to the sequence's rows at its end (varlen_paged_out: nothing of them is kept
// in registers through the main loop).
template <int BM, int BN, bool KEEP_B, bool OUT = true>
SAGE_DEV bool varlen_paged_view(const SageAttnParams& p, int b, SageAttnParams& v) {
  const int q0 = min_(max_(p.cu_seqlens_q[b], 0), p.seq_q);
  const int q1 = min_(max_(p.cu_seqlens_q[b + 1], q0), p.seq_q);
  paged_view<BN>(p, b, v);
  v.seq_q = q1 - q0;
  v.lse_stride_h = p.seq_q;
  v.q_row0 = q0;
  v.q.ptr = static_cast<const u8*>(p.q.ptr) + i64(q0) * p.q.stride_n * 2;
  if constexpr (OUT) {
    v.o = static_cast<u8*>(p.o) + i64(q0) * p.o_stride_n * 2;
    if (p.lse) v.lse = p.lse + q0;
  }
  const bool mine = q1 - q0 >= p.vq_min && (p.vq_max == 0 || q1 - q0 <= p.vq_max);
  if constexpr (KEEP_B) {
    v.q.stride_b = 0;
    v.o_stride_b = 0;
    return mine;
  } else {
    if (!mine) return false;
    v.q_tiles = (q1 - q0 + BM - 1) / BM;
    if (int(blockIdx.x) >= v.q_tiles) return false;
    v.batch = 1;
    v.varlen = 1;
    v.block_table = p.block_table + i64(b) * p.bt_stride;
    return true;
  }
}

// A varlen_paged_view<.., OUT = false>'s O and LSE moved to sequence b's rows (in `e`, a copy of
// the view), from its first query row again.
SAGE_DEV void varlen_paged_out(const SageAttnParams& v, int b, SageAttnParams& e) {
  const int q0 = min_(max_(__ldg(v.cu_seqlens_q + b), 0), v.lse_stride_h);
  e.o = static_cast<u8*>(v.o) + i64(q0) * v.o_stride_n * 2;
  if (v.lse) e.lse = v.lse + q0;
}

// Per-thread cp.async plan for one K/V tile: every thread copies chunks tid, tid + THREADS,
// ... of the tile. THREADS is a multiple of the chunks per row and of 8 rows, so a thread's
// column and swizzle phase are the same for all its chunks: the shared and global offsets
// of chunk i are the first one's plus a compile-time (or per-CTA) stride, computed once.
template <class Cfg>
struct KvLoader {
  using L = Layout<Cfg>;
  static constexpr int T = Cfg::THREADS;
  static constexpr int K_CHUNKS = Cfg::BN * L::QCPR;
  static constexpr int K_ROWS_PER_PASS = T / L::QCPR;
  static constexpr int V_ROWS = Cfg::V8 ? Cfg::D : Cfg::BN;
  static constexpr int V_CHUNKS = V_ROWS * L::VCPR;
  static constexpr int V_ROWS_PER_PASS = T / L::VCPR;
  static_assert(T % L::QCPR == 0 && T % L::VCPR == 0, "threads must cover whole rows");
  // A thread's swizzle phase (row & 7) is the same in every pass when a pass covers a multiple
  // of 8 rows; with 4 rows a pass (head_dim 256 native: 32 chunks a row, 128 threads) it
  // alternates, and the odd passes' chunks sit at the column XOR 4 (k_dx, v_dx).
  static constexpr bool K_ALT = K_ROWS_PER_PASS % 8 == 4 && K_CHUNKS > T;
  static constexpr bool V_ALT = V_ROWS_PER_PASS % 8 == 4 && V_CHUNKS > T;
  static_assert(K_ROWS_PER_PASS % 8 == 0 || K_CHUNKS <= T || (K_ALT && L::QCPR >= 8), "swizzle phase must repeat across passes");
  static_assert(V_ROWS_PER_PASS % 8 == 0 || V_CHUNKS <= T || (V_ALT && L::VCPR >= 8), "swizzle phase must repeat across passes");

  u32 k_dst, v_dst;      // shared-memory offsets of this thread's first chunk
  int k_dx, v_dx;        // K_ALT / V_ALT: what the odd passes add to them
  u32 k_src;             // byte offset of its first K chunk within a tile
  i64 k_nsrc;            // native: the same in the caller's K (row part)
  i64 k_pass_stride;     // native: bytes between this thread's K chunks
  int k_row0;            // native: its first K row (for the zero-fill check)
  i64 v_src;             // byte offset of its first V chunk within a tile (row part)
  i64 v_pass_stride;     // bytes between this thread's V chunks
  int v_row0;            // its first V row (FP16 V: for the zero-fill check)
  int k_rows, v_rows;    // native K / FP16 V: rows past this are zero-filled, all of them where
                         // its chunks' column is past the caller's row (rows_valid, or 0)
  int k_col, v_col;      // native, paged: the byte column of its K / V chunks

  SAGE_DEV void init(const KSource& ks, const VSource& vs) {
    const int tid = threadIdx.x;
    const int kr = tid / L::QCPR, kc = tid % L::QCPR;
    k_dst = swz<L::QCPR>(kr, kc);
    k_dx = K_ALT ? int(swz<L::QCPR>(kr + 4, kc)) - int(k_dst) - 4 * L::QCPR * 16 : 0;
    k_src = kr * Cfg::QROW + kc * 16;
    k_nsrc = i64(kr) * ks.row_stride + kc * 16;
    k_pass_stride = i64(K_ROWS_PER_PASS) * ks.row_stride;
    k_row0 = kr;
    k_rows = kc * 16 < ks.row_bytes ? ks.rows_valid : 0;
    const int vr = tid / L::VCPR, vc = tid % L::VCPR;
    v_dst = swz<L::VCPR>(vr, vc);
    v_dx = V_ALT ? int(swz<L::VCPR>(vr + 4, vc)) - int(v_dst) - 4 * L::VCPR * 16 : 0;
    v_src = i64(vr) * vs.row_stride + vc * 16;
    v_pass_stride = i64(V_ROWS_PER_PASS) * vs.row_stride;
    v_row0 = vr;
    // (the quantized kernels read the caller's V only at the variant's head dim: v_prepared)
    v_rows = !Cfg::NATIVE || vc * 16 < vs.row_bytes ? vs.rows_valid : 0;
    k_col = kc * 16;
    v_col = vc * 16;
  }

  // A paged cache (load_paged): the block-table entries of tile pg_tile's chunks of this thread,
  // loaded one tile ahead at head dim 128 (each lookup issued right before its loads stalled them
  // for a round trip to L1 or L2 on every tile: H200, one query over 8K keys, pages of 256 / 64 /
  // 16: 0.139 / 0.153 / 0.172 ms with the lookahead, 0.150 / 0.173 / 0.185 without, 0.136 for the
  // dense call). Not at head dim 64, whose kernels' registers then fell under two CTAs an SM
  // (0.0883 / 0.102 / 0.115 ms with it, 0.0853 / 0.0875 / 0.0894 without), nor where a thread has
  // more than 8 chunks a tile (head dim 256's decode kernel: its registers spilled); those look
  // their entries up as they load, after an L1 prefetch one tile ahead. K's and V's chunks of a
  // thread share rows.
  static constexpr int PAGE_SLOTS = cdiv(K_CHUNKS, T);
  static constexpr bool LOOKAHEAD = Cfg::D == 128 && PAGE_SLOTS <= 8;
  int pg_tile = -1;
  int pg_next[LOOKAHEAD ? PAGE_SLOTS : 1];

  // Tile `tile`'s entries (its chunks' rows past the thread's keys read none), into `page`.
  SAGE_DEV void page_entries(const PagedRows& pg, int tile, int (&page)[PAGE_SLOTS]) const {
    const int n0 = tile * Cfg::BN;
    const bool whole = (1 << pg.shift) >= Cfg::BN;  // the tile within one page: one lookup
#pragma unroll
    for (int i = 0; i < PAGE_SLOTS; ++i) {
      const int n = whole ? n0 : n0 + k_row0 + i * K_ROWS_PER_PASS;
      page[i] = (whole && i > 0) ? page[0] : n < k_rows ? __ldg(pg.table + (n >> pg.shift)) : 0;
    }
  }

  // One tile of a paged cache's rows (native: the caller's K and V, `ks` and `vs` at the kv head's
  // first page), with LOOKAHEAD its entries from the previous call's when it loaded the tile before
  // (the tiles are loaded in order), then the next tile's entries looked up for the next call. A
  // tile within one page (pages of at least BN slots: powers of two, so a tile never straddles two)
  // takes the dense path's addresses from its page's first row; smaller pages place each chunk.
  // An entry outside [0, count) reads page 0.
  SAGE_DEV void load_paged(const KSource& ks, const VSource& vs, const PagedRows& pg, int tile, u32 sK, u32 sV) {
    static_assert(Cfg::NATIVE && !Cfg::V8, "paged caches are read by the native kernels");
    static_assert(V_ROWS_PER_PASS == K_ROWS_PER_PASS && V_CHUNKS == K_CHUNKS, "K's and V's chunks share rows");
    const int n0 = tile * Cfg::BN;
    // The entries of the tile after the one whose entries are looked up below, into L1.
    const int pf = n0 + (LOOKAHEAD ? 2 : 1) * Cfg::BN + k_row0;
    if (pf < k_rows) asm volatile("prefetch.global.L1 [%0];" ::"l"(pg.table + (pf >> pg.shift)));
    int page[LOOKAHEAD ? PAGE_SLOTS : 1];
    if constexpr (LOOKAHEAD) {
      if (pg_tile == tile) {
#pragma unroll
        for (int i = 0; i < PAGE_SLOTS; ++i) page[i] = pg_next[i];
      } else {
        page_entries(pg, tile, page);
      }
      page_entries(pg, tile + 1, pg_next);
      pg_tile = tile + 1;
    }
    // Chunk i's entry (row n): the lookahead's, or looked up now.
    auto entry = [&](int i, int n) {
      if constexpr (LOOKAHEAD) return page[i];
      else return n < k_rows ? __ldg(pg.table + (n >> pg.shift)) : 0;
    };
    auto first = [&](int j) { return i64(unsigned(j) < unsigned(pg.count) ? j : 0); };
    const int mask = (1 << pg.shift) - 1;
    if ((1 << pg.shift) >= Cfg::BN) {
      const i64 j = first(entry(0, n0)), r = n0 & mask;
      copy_k_rows(ks.base + j * pg.k_stride + r * ks.row_stride + k_nsrc, ks.base, n0, sK);
      copy_v_rows(vs.base + j * pg.v_stride + r * vs.row_stride + v_src, vs.base, n0, sV);
      return;
    }
#pragma unroll
    for (int i = 0; i < cdiv(K_CHUNKS, T); ++i) {
      if (K_CHUNKS % T == 0 || threadIdx.x + i * T < K_CHUNKS) {
        const int n = n0 + k_row0 + i * K_ROWS_PER_PASS;
        const i64 j = first(entry(i, n)), r = n & mask;
        const bool kok = n < k_rows, vok = n < v_rows;
        cp_async16(sK + k_dst + i * T * 16 + (K_ALT && i % 2 ? k_dx : 0),
                   kok ? ks.base + j * pg.k_stride + r * ks.row_stride + k_col : ks.base, kok ? 16 : 0);
        cp_async16(sV + v_dst + i * T * 16 + (V_ALT && i % 2 ? v_dx : 0),
                   vok ? vs.base + j * pg.v_stride + r * vs.row_stride + v_col : vs.base, vok ? 16 : 0);
      }
    }
  }

  // A tile of the dense or (PAGED) the paged rows.
  template <bool PAGED>
  SAGE_DEV void fetch(const KSource& ks, const VSource& vs, const PagedRows& pg, int tile, u32 sK, u32 sV) {
    if constexpr (PAGED) load_paged(ks, vs, pg, tile, sK, sV);
    else load(ks, vs, tile, sK, sV);
  }

  // The caller's K rows of a tile from row n0 (the native kernels): this thread's chunks from k,
  // its passes k_pass_stride apart, zero-filled (reading `zero`) past k_rows.
  SAGE_DEV void copy_k_rows(const u8* k, const u8* zero, int n0, u32 sK) const {
    const bool full = n0 + Cfg::BN <= k_rows;
#pragma unroll
    for (int i = 0; i < cdiv(K_CHUNKS, T); ++i) {
      if (K_CHUNKS % T == 0 || threadIdx.x + i * T < K_CHUNKS) {
        const bool ok = full || n0 + k_row0 + i * K_ROWS_PER_PASS < k_rows;
        cp_async16(sK + k_dst + i * T * 16 + (K_ALT && i % 2 ? k_dx : 0), ok ? k + i * k_pass_stride : zero, ok ? 16 : 0);
      }
    }
  }
  // The same for V's rows (FP16 V: the caller's or the prepared), past v_rows.
  SAGE_DEV void copy_v_rows(const u8* v, const u8* zero, int n0, u32 sV) const {
    const bool full = n0 + Cfg::BN <= v_rows;
#pragma unroll
    for (int i = 0; i < cdiv(V_CHUNKS, T); ++i) {
      if (V_CHUNKS % T == 0 || threadIdx.x + i * T < V_CHUNKS) {
        const bool ok = full || n0 + v_row0 + i * V_ROWS_PER_PASS < v_rows;
        cp_async16(sV + v_dst + i * T * 16 + (V_ALT && i % 2 ? v_dx : 0), ok ? v + i * v_pass_stride : zero, ok ? 16 : 0);
      }
    }
  }

  SAGE_DEV void load(const KSource& ks, const VSource& vs, int tile, u32 sK, u32 sV) const {
    if constexpr (Cfg::NATIVE) {
      const int n0 = tile * Cfg::BN;
      copy_k_rows(ks.base + i64(n0) * ks.row_stride + k_nsrc, ks.base, n0, sK);
    } else {
      const u8* k = ks.base + i64(tile) * Cfg::BN * Cfg::QROW + k_src;
#pragma unroll
      for (int i = 0; i < cdiv(K_CHUNKS, T); ++i)
        if (K_CHUNKS % T == 0 || threadIdx.x + i * T < K_CHUNKS)
          cp_async16(sK + k_dst + i * T * 16 + (K_ALT && i % 2 ? k_dx : 0), k + i * K_ROWS_PER_PASS * Cfg::QROW);
    }
    if constexpr (Cfg::V8) {
      const u8* v = vs.base + i64(tile) * Cfg::BN + v_src;
#pragma unroll
      for (int i = 0; i < cdiv(V_CHUNKS, T); ++i)
        if (V_CHUNKS % T == 0 || threadIdx.x + i * T < V_CHUNKS)
          cp_async16(sV + v_dst + i * T * 16 + (V_ALT && i % 2 ? v_dx : 0), v + i * v_pass_stride);
    } else {
      const int n0 = tile * Cfg::BN;
      copy_v_rows(vs.base + i64(n0) * vs.row_stride + v_src, vs.base, n0, sV);
    }
  }
};

// The ring's slots of the kernels that read FP8 pages (KV8), else their stages.
template <bool KV8, class Cfg>
SAGE_DEV constexpr int fp8_ring() {
  if constexpr (KV8) return 2 * (Cfg::STAGES - 1);
  else return Cfg::STAGES;
}

// FP8 (e4m3) pages (the entries sage_attn_paged_fp8 and sage_attn_varlen_paged_fp8; the native
// kernels, STAGES >= 2): K and V pages of one byte an element, read through the block table as
// KvLoader::load_paged reads FP16 ones, into an FP8 staging ring in shared memory; each tile is
// then converted to FP16/BF16 (the queries' type) into one tile that the MMAs read as a dense
// kernel's. The ring lives where the FP16 stages 1.. were: stage s of K at K + SMEM_K_STAGE +
// s * BN * D, the FP16 tile at stage 0 (2 (STAGES - 1) FP8 tiles fit where STAGES - 1 FP16 ones
// did). Per tile: wait, barrier (the FP16 tile free, the tile's FP8 bytes landed), the next
// load, convert, barrier, compute. The pages' scales are the caller's (SageAttnParams::kv_k_scale,
// kv_v_scale): K's folds into the softmax scale, V's into O's normalization, so the conversion
// is exact. Each thread's chunks share a column (THREADS is a multiple of a row's chunks).
// WARP (the decode kernel, whose warp w reads only keys 16 w .. 16 w + 15 of a tile): each warp
// loads its own 16 rows, so the loop needs no CTA barrier, only the warp's (its warps compute out
// of step), and reads them straight into its MMA fragments (k_words, v_words; attn_decode.cuh):
// no FP16 tile, so the ring takes every stage, 2 STAGES slots, its rows swizzled (sw).
template <class Cfg, bool WARP = false>
struct Fp8Pages {
  static constexpr int T = WARP ? 32 : Cfg::THREADS, BN = Cfg::BN, D = Cfg::D;
  static constexpr int ROWS = WARP ? 16 : BN;  // the rows a thread's group loads and converts
  static constexpr int CPR = D / 16;        // 16-byte FP8 chunks a row
  static constexpr int CHUNKS = ROWS * CPR; // of a K (or V) tile, the group's
  static constexpr int PER = cdiv(CHUNKS, T);
  static constexpr int ROWS_PER_PASS = T / CPR;
  static constexpr int TILE = BN * D;       // bytes of an FP8 tile
  static constexpr int QCPR = Layout<Cfg>::QCPR, VCPR = Layout<Cfg>::VCPR;
  // Ring slots: two an FP16 stage past the first. The kernels prefetch RING - 1 tiles ahead, where
  // the FP16 pipeline prefetches STAGES - 1: with three stages, three FP8 tiles in flight (96 KB of
  // K and V at D=128, 128 keys) against two FP16 ones (128 KB); fewer bytes in flight than that
  // left FP8 pages slower than FP16 ones (each tile's load latency, not the bytes, sets the pace).
  static constexpr int RING = WARP ? 2 * Cfg::STAGES : fp8_ring<true, Cfg>();

  // This thread's chunks: K's and V's bytes at the kv head's first page plus its column, their
  // slots and pages k_slot / k_page bytes apart (V alike; 32-bit: validate.cpp bounds them), its
  // first chunk's row, its bytes within the head dim (past them zero-filled).
  const u8 *kb, *vb;
  int k_slot, v_slot, k_page, v_page;
  int row0, col_bytes;

  // The thread's index in its group (WARP: its lane).
  static SAGE_DEV int tix() { return WARP ? int(threadIdx.x) % 32 : int(threadIdx.x); }
  // The thread's chunk of every row it loads and converts, and its first row in the group. PAIRS
  // (rows of 8 chunks or more, converted into FP16 tiles): a quarter-warp takes two rows' halves
  // (sage/fp8_chunks.h), so that convert's reads and both of its stores meet 8 bank groups (one
  // row's 8 chunks a quarter-warp put FP16 chunks 2c of c = 0..3 and 4..7 on the same 4 of them).
  // The decode kernel's warps read their rows into fragments, in a layout of their own (sw).
  static constexpr bool PAIRS = !WARP && CPR >= 8;
  static SAGE_DEV int col_chunk() { return PAIRS ? fp8_chunks::chunk_of<CPR>(tix()) : tix() % CPR; }
  static SAGE_DEV int first_row() { return PAIRS ? fp8_chunks::row_of<CPR>(tix()) : tix() / CPR; }

  // p: the call's (or the sequence's view's) parameters; hkv: the kv head.
  SAGE_DEV void init(const SageAttnParams& p, int hkv) {
    static_assert(Cfg::NATIVE && !Cfg::V8 && QCPR == 2 * CPR && VCPR == 2 * CPR, "FP8 pages feed the native kernels' FP16 tiles");
    static_assert(Cfg::STAGES >= 2, "the FP8 ring lives in the FP16 stages 1..");
    static_assert(T % CPR == 0, "threads must cover whole rows");
    static_assert(!PAIRS || (CPR % 8 == 0 && T % (2 * CPR) == 0), "threads must cover whole pairs of rows");
    static_assert(Cfg::SMEM_K_STAGE == 2 * TILE && Cfg::SMEM_V_STAGE == 2 * TILE, "FP16 tiles of BN x D");
    static_assert(!WARP || BN == 16 * Cfg::NWARPS, "a warp's 16 keys of every tile");
    row0 = (WARP ? 16 * (int(threadIdx.x) / 32) : 0) + first_row();
    const int col = col_chunk() * 16;
    col_bytes = p.head_dim > col ? 16 : 0;  // 0 or 16: FP8 pages' head dims are multiples of 16
    kb = static_cast<const u8*>(p.k.ptr) + hkv * p.k.stride_h + col;
    vb = static_cast<const u8*>(p.v.ptr) + hkv * p.v.stride_h + col;
    k_slot = int(p.k.stride_n);
    v_slot = int(p.v.stride_n);
    k_page = int(p.k.stride_b);
    v_page = int(p.v.stride_b);
  }
  static SAGE_DEV u32 ring(u32 s0, int slot) { return s0 + (WARP ? 0 : 2 * TILE) + slot * TILE; }
  // WARP: chunk c of row r at chunk c ^ sw(r) of its row, so that the fragment reads below hit 8
  // bank groups a quarter-warp: K's rows 2i, 2i + 1 at chunks 4j .. 4j + 3 (sw differs in bit 2),
  // V's rows 2t (and 2t + 1) of t = 0..3 at chunks 2i, 2i + 1 (sw 0, 2, 4, 6); at head dim 64
  // (rows of 64 bytes, two a bank line) V's 8-byte reads take two passes.
  static SAGE_DEV int sw(int r) { return ((((r >> 1) & 3) << 1) ^ ((r & 1) << 2)) & (CPR - 1); }
  static SAGE_DEV int chunk_at(int r, int c) { return r * D + (WARP ? c ^ sw(r) : c) * 16; }
  SAGE_DEV u32 at(int r) const { return chunk_at(r, col_chunk()); }
  // Whether the thread has an i-th chunk (the last pass may hold fewer rows).
  SAGE_DEV bool has(int i) const {
    if constexpr (CHUNKS % T == 0) return true;
    else if constexpr (PAIRS) return row0 + i * ROWS_PER_PASS < ROWS;
    else return tix() + i * T < CHUNKS;
  }

  // The block-table entries of tile `next_tile`'s chunks of this thread, looked up by the load of
  // the tile before (the tiles are loaded in order): a lookup right before its copies would stall
  // them for a round trip to L1 or L2 on every tile (KvLoader's LOOKAHEAD alike). Where a page
  // holds the group's ROWS rows of a tile (pages of at least 16 slots in the decode kernel, whose
  // warp's 16 keys start 16-aligned; of at least BN elsewhere) one entry serves them all.
  int next_tile = -1;
  int next[PER];

  // The rows of tile `tile` this thread's group loads start at g0 (its warp's, or the tile's).
  SAGE_DEV int group_row0(int tile) const { return tile * BN + (WARP ? 16 * (int(threadIdx.x) / 32) : 0); }
  static SAGE_DEV bool one_page(const PagedRows& pg) { return (1 << pg.shift) >= ROWS; }

  // Tile `tile`'s entries of this thread's chunks (rows past rows_valid read none) into `e`.
  SAGE_DEV void entries(const PagedRows& pg, int rows_valid, int tile, int (&e)[PER]) const {
    const int g0 = group_row0(tile);
    if (one_page(pg)) {
      e[0] = g0 < rows_valid ? __ldg(pg.table + (g0 >> pg.shift)) : 0;
      return;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int n = tile * BN + row0 + i * ROWS_PER_PASS;
      e[i] = n < rows_valid ? __ldg(pg.table + (n >> pg.shift)) : 0;
    }
  }

  // Tile `tile` of the sequence's rows (rows_valid keys; its block table pg.table, pages of
  // 2^pg.shift slots, pg.count of them) into ring slot `slot`, then the next tile's entries
  // looked up. Rows past rows_valid and bytes past the head dim are zero-filled; an entry outside
  // [0, count) reads page 0.
  SAGE_DEV void load(const PagedRows& pg, int rows_valid, int tile, u32 sK0, u32 sV0, int slot) {
    const int n0 = tile * BN, mask = (1 << pg.shift) - 1;
    int e[PER];
    if (next_tile == tile) {
#pragma unroll
      for (int i = 0; i < PER; ++i) e[i] = next[i];
    } else {
      entries(pg, rows_valid, tile, e);
    }
    const u32 dk = ring(sK0, slot), dv = ring(sV0, slot);
    if (one_page(pg)) {
      // The group's rows in one page: its first row's address once, each chunk a constant past it.
      const int g0 = group_row0(tile), rel = row0 - (g0 - n0);
      const bool full = g0 + ROWS <= rows_valid && col_bytes > 0;
      const i64 page = unsigned(e[0]) < unsigned(pg.count) ? e[0] : 0;
      const int s0 = (g0 & mask) + rel;
      const u8* k = kb + page * k_page + i64(s0) * k_slot;
      const u8* v = vb + page * v_page + i64(s0) * v_slot;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        if (has(i)) {
          const int r = row0 + i * ROWS_PER_PASS;
          const bool ok = full || (n0 + r < rows_valid && col_bytes > 0);
          cp_async16(dk + at(r), ok ? k + i * ROWS_PER_PASS * k_slot : kb, ok ? 16 : 0);
          cp_async16(dv + at(r), ok ? v + i * ROWS_PER_PASS * v_slot : vb, ok ? 16 : 0);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        if (has(i)) {
          const int r = row0 + i * ROWS_PER_PASS, n = n0 + r;
          const bool ok = n < rows_valid && col_bytes > 0;
          const i64 page = unsigned(e[i]) < unsigned(pg.count) ? e[i] : 0;
          const int s = n & mask;
          cp_async16(dk + at(r), ok ? kb + page * k_page + s * k_slot : kb, ok ? 16 : 0);
          cp_async16(dv + at(r), ok ? vb + page * v_page + s * v_slot : vb, ok ? 16 : 0);
        }
      }
    }
    entries(pg, rows_valid, tile + 1, next);
    next_tile = tile + 1;
  }

  // WARP: the decode kernel's MMA fragments straight from a ring slot `s` (a pointer to shared
  // memory), its warp's rows from r0, for lane (gid, tig) = (lane / 4, lane % 4).
  // K (S^T = K Q^T, K as A): the 16 bytes of chunk 4 j + tig of rows r0 + gid and r0 + gid + 8.
  // Word i of them feeds k-step 4 j + i: its bytes 0-1 are the step's columns 2 tig, + 1 and its
  // bytes 2-3 columns 2 tig + 8, + 9, so a k-step's columns are a permutation of d (q_d), which
  // the kernel stores Q's rows in.
  static SAGE_DEV void k_words(const u8* s, int r0, int j, int gid, int tig, u32x4 (&w)[2]) {
    w[0] = *reinterpret_cast<const u32x4*>(s + chunk_at(r0 + gid, 4 * j + tig));
    w[1] = *reinterpret_cast<const u32x4*>(s + chunk_at(r0 + gid + 8, 4 * j + tig));
  }
  // The d of S^T's permuted column c (even: its pair's first): k-step c / 16, position c % 16.
  static SAGE_DEV int q_d(int c) {
    const int ks = c / 16, pos = c % 16;
    return 16 * (4 * (ks / 4) + (pos % 8) / 2) + 4 * (ks % 4) + 2 * (pos / 8);
  }
  // V (O^T += V^T P^T, V^T as A: 16 rows of d, 16 keys): segment jv of the lane's D / 8 elements
  // of d, VW words of each of rows r0 + 2 tig, + 1, + 8, + 9 (the A fragment's keys): chunk
  // gid + 8 jv (head dim 64: 8 bytes at byte 8 gid). Bytes 2 m, 2 m + 1 of a row's words are
  // m-block jv * 2 VW + m's rows gid and gid + 8, so O^T's rows are a permutation of d (o_d).
  static constexpr int VW = D >= 128 ? 4 : 2, SEG = 4 * VW, NSEG = D / 8 / SEG;
  static SAGE_DEV void v_words(const u8* s, int r0, int jv, int gid, int tig, u32 (&w)[4][VW]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + 2 * tig + (i & 1) + 8 * (i >> 1);
      if constexpr (VW == 4) {
        const u32x4 x = *reinterpret_cast<const u32x4*>(s + chunk_at(r, gid + 8 * jv));
        w[i][0] = x.x, w[i][1] = x.y, w[i][2] = x.z, w[i][3] = x.w;
      } else {
        const u32x2 x = *reinterpret_cast<const u32x2*>(s + chunk_at(r, gid / 2) + 8 * (gid & 1));
        w[i][0] = x.x, w[i][1] = x.y;
      }
    }
  }
  // The d of O^T's row gid (+ 8 for the second half) of m-block mb: the lane's element 2 mb + half.
  static SAGE_DEV int o_d(int gid, int mb, int half) {
    const int i = 2 * mb + half;
    return 8 * SEG * (i / SEG) + SEG * gid + i % SEG;
  }

  // Ring slot `slot` converted into the FP16/BF16 tiles at K and V (byte offsets in `sm`, the
  // kernel's shared memory; the kernels' layout). Plain shared-memory accesses: the compiler
  // overlaps one chunk's loads with another's conversion (ordered against the cp.async copies and
  // the MMAs' reads by the barriers around the call).
  SAGE_DEV void convert(u8* sm, int K, int V, int slot, bool bf16) const {
    static_assert(!WARP, "the decode kernel reads its FP8 rows into fragments");
    const int k8 = K + 2 * TILE + slot * TILE, v8 = V + 2 * TILE + slot * TILE;
    auto chunk = [&](int i) {
      if (has(i)) {
        // FP8 chunk c becomes FP16 chunks 2c and 2c + 1: a quarter-warp's rows r and r + 1 (PAIRS,
        // or head dim 64's 4 chunks a row) differ in the swizzle's bit 0, so each store meets 8
        // bank groups.
        const int r = row0 + i * ROWS_PER_PASS, c = col_chunk();
        one(sm + k8 + at(r), sm + K + swz<QCPR>(r, 2 * c), sm + K + swz<QCPR>(r, 2 * c + 1), bf16);
        one(sm + v8 + at(r), sm + V + swz<VCPR>(r, 2 * c), sm + V + swz<VCPR>(r, 2 * c + 1), bf16);
      }
    };
    // A K and a V chunk at a time (two at a time where a thread has more than two): the decode
    // kernel of head dim 64, held to 128 registers, spilled with its chunks all in flight.
    if constexpr (PER > 2) {
#pragma unroll 2
      for (int i = 0; i < PER; ++i) chunk(i);
    } else {
#pragma unroll 1
      for (int i = 0; i < PER; ++i) chunk(i);
    }
  }
  // A 16-byte FP8 chunk at src into its two FP16 chunks: the first (elements 0-7) at d0, the
  // second at d1.
  static SAGE_DEV void one(const u8* src, u8* d0, u8* d1, bool bf16) {
    const u32x4 x = *reinterpret_cast<const u32x4*>(src);
    u32x4 a, b;
    e4m3x4_to_x2(x.x, bf16, a.x, a.y);
    e4m3x4_to_x2(x.y, bf16, a.z, a.w);
    e4m3x4_to_x2(x.z, bf16, b.x, b.y);
    e4m3x4_to_x2(x.w, bf16, b.z, b.w);
    *reinterpret_cast<u32x4*>(d0) = a;
    *reinterpret_cast<u32x4*>(d1) = b;
  }
};

// The FP8 pages' loader of the kernels that read them (KV8), else nothing: the other kernels
// neither instantiate it nor hold its state.
struct NoFp8Pages {};
template <bool KV8, class F>
struct Fp8Loader {
  using type = F;
};
template <class F>
struct Fp8Loader<false, F> {
  using type = NoFp8Pages;
};

// The caller's FP8 pages' scales of kv head hkv (1 where none is given).
SAGE_DEV float page_scale(const float* s, int stride, int hkv) { return s ? __ldg(s + i64(hkv) * stride) : 1.f; }

// Per-lane ldmatrix offsets, computed once. Within a 16-row block the swizzle phase of a
// lane's row depends only on the lane, so the offsets for other row blocks and chunk groups
// are these plus compile-time constants (folded into the instructions' immediates).
template <class Cfg>
struct LaneOffsets {
  using L = Layout<Cfg>;
  static constexpr int VK = Cfg::V8 ? Cfg::BN / 32 : (Cfg::D / 16 < 4 ? Cfg::D / 16 : 4);
  // Q_SMEM: the offsets of one 8-chunk group, the k-th at k[k % 4] + (k / 4) * 128 (kof).
  static constexpr int KK = Cfg::Q_SMEM ? 4 : Cfg::QK_KSTEPS;
  u32 k[KK];
  u32 v[VK];
  SAGE_DEV void init() {
    const int lane = threadIdx.x % 32;
    const int row = (lane & 7) + 8 * (lane >> 4), b = (lane >> 3) & 1;
#pragma unroll
    for (int i = 0; i < KK; ++i) k[i] = swz<L::QCPR>(row, 2 * i + b);
    if constexpr (Cfg::V8) {
#pragma unroll
      for (int i = 0; i < VK; ++i) v[i] = swz<L::VCPR>(row, 2 * i + b);
    } else {
      const int trow = (lane & 7) + 8 * ((lane >> 3) & 1), hb = lane >> 4;
#pragma unroll
      for (int i = 0; i < VK; ++i) v[i] = swz<L::VCPR>(trow, 2 * i + hb);
    }
  }
  SAGE_DEV u32 kof(int i) const { return Cfg::Q_SMEM ? k[i % 4] + (i / 4) * 128 : k[i]; }
  // FP16 V, chunk pair q: chunks 2q and 2q+1 of 8-chunk group q/4 (XOR stays inside a group).
  SAGE_DEV u32 v16(int q) const { return v[q % 4] + (q / 4) * 8 * 16; }
};

template <class Cfg>
struct WarpState {
  static constexpr int SL = Cfg::SLABS;
  float m[SL][2];             // running max (log2 domain, scaled), rows gid and gid+8 of each slab
  float l[SL][2];             // running sum, this lane's columns only (reduced at the end);
                              // int8 P.V: the whole row's sum of the u8 P (ROW_SUMS_COMPLETE)
  float lx[Cfg::V_INT8 ? SL : 1][2];  // int8 P.V: the FP32 sum of P before rounding, this
                                      // lane's columns (for the LSE only: the LSE_SUMS entry)
  float o[SL][Cfg::D / 8][4]; // output accumulators
};

// Scores of one tile, as the QK^T MMAs leave them (int32; native: FP32), plus the smooth-Q
// correction.
template <bool NATIVE> struct ScoreType { using type = i32; };
template <> struct ScoreType<true> { using type = float; };
template <class Cfg>
struct TileScores {
  static constexpr int NT = Cfg::BN / 8;
  typename ScoreType<Cfg::NATIVE>::type s[Cfg::SLABS][NT][4];
  i32 ds[Cfg::SMOOTH_Q ? NT : 1][4];
};

// The warp's Q as the A operand of Q K^T: its fragments in registers, loaded once (f), or
// (Q_SMEM) the lane's ldmatrix addresses in the Q tile for the k-steps of one 8-chunk group
// (at), the k-th fragment at at[a][k % 4] + (k / 4) * 128: the swizzle XORs within a group.
template <class Cfg, bool = Cfg::Q_SMEM>
struct QOperand {
  u32 f[Cfg::SLABS][Cfg::QK_KSTEPS][4];
  SAGE_DEV void init(u32 sQ, int warp, int lane) {
    using L = Layout<Cfg>;
#pragma unroll
    for (int a = 0; a < Cfg::SLABS; ++a)
#pragma unroll
      for (int k = 0; k < Cfg::QK_KSTEPS; ++k)
        ldsm_x4(f[a][k], sQ + swz<L::QCPR>(warp * Cfg::WARP_Q + 16 * a + (lane & 15), 2 * k + (lane >> 4)));
  }
};
template <class Cfg>
struct QOperand<Cfg, true> {
  u32 at[Cfg::SLABS][4];
  SAGE_DEV void init(u32 sQ, int warp, int lane) {
    using L = Layout<Cfg>;
    static_assert(L::QCPR % 8 == 0, "whole 8-chunk swizzle groups");
#pragma unroll
    for (int a = 0; a < Cfg::SLABS; ++a)
#pragma unroll
      for (int j = 0; j < 4; ++j) at[a][j] = sQ + swz<L::QCPR>(warp * Cfg::WARP_Q + 16 * a + (lane & 15), 2 * j + (lane >> 4));
  }
};

// The quarters of the head dim a tile computes (QN): 4, or 3 for calls of up to three quarters
// of it (the sage_attn_q3 entry: 192 columns of 256, 96 of 128), whose columns past those are
// zeros in the tiles. n: a count of whole quarters' units (k-steps, 8- or 16-column tiles of O).
template <class Cfg, int QN>
__host__ __device__ constexpr int quarters_of(int n) {
  static_assert(QN == 4 || (QN == 3 && (Cfg::D == 256 || Cfg::D == 128)), "three quarters: head dim 128 or 256");
  return n * QN / 4;
}

// S = Q K^T for one tile (and dS = q_mean K^T when smoothing Q). BF16: the native kernel's
// BF16 inputs. QN: the quarters of the head dim it reads (quarters_of).
template <class Cfg, bool BF16 = false, int QN = 4>
SAGE_DEV void qk_tile(TileScores<Cfg>& S, const QOperand<Cfg>& q,
                      const u32 (&qbar)[Cfg::QK_KSTEPS][4], u32 sK, const LaneOffsets<Cfg>& lo) {
  using L = Layout<Cfg>;
  constexpr int SL = Cfg::SLABS, NT = Cfg::BN / 8, KS = quarters_of<Cfg, QN>(Cfg::QK_KSTEPS);
  auto& s = S.s;
  auto& ds = S.ds;
#pragma unroll
  for (int a = 0; a < SL; ++a)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[a][n][e] = 0;
  if constexpr (Cfg::Q_SMEM) {
    // Native only: k-steps outside, so each Q fragment is read from shared memory once a tile.
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      u32 qa[SL][4];
#pragma unroll
      for (int a = 0; a < SL; ++a) ldsm_x4(qa[a], q.at[a][k % 4] + (k / 4) * 128);
#pragma unroll
      for (int p2 = 0; p2 < NT / 2; ++p2) {
        u32 kf[4];
        ldsm_x4(kf, sK + lo.kof(k) + p2 * 16 * L::QCPR * 16);
#pragma unroll
        for (int a = 0; a < SL; ++a) {
          if constexpr (BF16) {
            mma_bf16_f32(s[a][2 * p2], qa[a], kf[0], kf[1]);
            mma_bf16_f32(s[a][2 * p2 + 1], qa[a], kf[2], kf[3]);
          } else {
            mma_f16_f32(s[a][2 * p2], qa[a], kf[0], kf[1]);
            mma_f16_f32(s[a][2 * p2 + 1], qa[a], kf[2], kf[3]);
          }
        }
      }
    }
    return;
  } else {
  const auto& qf = q.f;
  if constexpr (Cfg::SMOOTH_Q) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = 0;
  }
#pragma unroll
  for (int p2 = 0; p2 < NT / 2; ++p2) {
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      u32 kf[4];
      ldsm_x4(kf, sK + lo.kof(k) + p2 * 16 * L::QCPR * 16);
#pragma unroll
      for (int a = 0; a < SL; ++a) {
        if constexpr (Cfg::NATIVE && BF16) {
          mma_bf16_f32(s[a][2 * p2], qf[a][k], kf[0], kf[1]);
          mma_bf16_f32(s[a][2 * p2 + 1], qf[a][k], kf[2], kf[3]);
        } else if constexpr (Cfg::NATIVE) {
          mma_f16_f32(s[a][2 * p2], qf[a][k], kf[0], kf[1]);
          mma_f16_f32(s[a][2 * p2 + 1], qf[a][k], kf[2], kf[3]);
        } else if constexpr (Cfg::INT4) {
          mma_s4(s[a][2 * p2], qf[a][k], kf[0], kf[1]);
          mma_s4(s[a][2 * p2 + 1], qf[a][k], kf[2], kf[3]);
        } else {
          mma_s8(s[a][2 * p2], qf[a][k], kf[0], kf[1]);
          mma_s8(s[a][2 * p2 + 1], qf[a][k], kf[2], kf[3]);
        }
      }
      if constexpr (Cfg::SMOOTH_Q) {
        if constexpr (Cfg::INT4) {
          mma_s4(ds[2 * p2], qbar[k], kf[0], kf[1]);
          mma_s4(ds[2 * p2 + 1], qbar[k], kf[2], kf[3]);
        } else {
          mma_s8(ds[2 * p2], qbar[k], kf[0], kf[1]);
          mma_s8(ds[2 * p2 + 1], qbar[k], kf[2], kf[3]);
        }
      }
    }
  }
  }
}

// O += P V with 16-bit P (A fragments pa, BLOCK_N / 16 k-steps) and 16-bit V from shared
// memory (ldmatrix.trans), FP32 accumulators; O is rescaled by alpha first where `rescale`
// (warp-uniform). BF16: the native kernel's BF16 operands. QN: the quarters of O computed.
template <class Cfg, bool BF16, int QN = 4>
SAGE_DEV void pv16(WarpState<Cfg>& st, const u32 (&pa)[Cfg::SLABS][Cfg::BN / 16][4], const float (&alpha)[Cfg::SLABS][2],
                   bool rescale, u32 sV, const LaneOffsets<Cfg>& lo) {
  using L = Layout<Cfg>;
  constexpr int SL = Cfg::SLABS, D = Cfg::D;
  if (rescale) {
#pragma unroll
    for (int a = 0; a < SL; ++a)
#pragma unroll
      for (int j = 0; j < quarters_of<Cfg, QN>(D / 8); ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[a][j][e] *= alpha[a][e / 2];
  }
#pragma unroll
  for (int k = 0; k < Cfg::BN / 16; ++k)
#pragma unroll
    for (int q = 0; q < quarters_of<Cfg, QN>(D / 16); ++q) {
      u32 vf[4];
      ldsm_x4_t(vf, sV + lo.v16(q) + 16 * k * L::VCPR * 16);
#pragma unroll
      for (int a = 0; a < SL; ++a) {
        if constexpr (BF16) {
          mma_bf16_f32(st.o[a][2 * q], pa[a][k], vf[0], vf[1]);
          mma_bf16_f32(st.o[a][2 * q + 1], pa[a][k], vf[2], vf[3]);
        } else {
          mma_f16_f32(st.o[a][2 * q], pa[a][k], vf[0], vf[1]);
          mma_f16_f32(st.o[a][2 * q + 1], pa[a][k], vf[2], vf[3]);
        }
      }
    }
}

// The 8-bit P.V paths (FP8 E4M3, or u8 P x INT8 V) share everything but the element types:
// P's packing, the MMA (the int8 one starts a tile's accumulator at the magic-number bits),
// and how an accumulator reads as a float.
template <bool U8>
SAGE_DEV u32 pack_p8(float a, float b, float c, float d) {
  if constexpr (U8) {
    return pack_u8x4(a, b, c, d);
  } else {
#if defined(SAGE_HAS_FP8)
    return pack_e4m3x4(a, b, c, d);
#else
    return 0u;  // not instantiated: FP8 P.V variants need sm_89+ (static_assert in softmax_pv)
#endif
  }
}
template <bool U8> struct P8Acc { using type = float; };
template <> struct P8Acc<true> { using type = i32; };
SAGE_DEV void mma_p8(i32 (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, bool first) {
  if (first) mma_u8s8_c(d, a, b0, b1, 0x4B400000);
  else mma_u8s8(d, a, b0, b1);
}
SAGE_DEV void mma_p8(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, bool) {
#if defined(SAGE_HAS_FP8)
  mma_e4m3(d, a, b0, b1);
#endif
}
SAGE_DEV float p8_sum(i32 x) { return __int_as_float(x) - kMagic; }
SAGE_DEV float p8_sum(float x) { return x; }

// Online softmax of one tile's scores, then O += P V. LSE_SUMS (int8 P.V): also keep the sums
// of P before rounding, for the LSE. QN: the quarters of O computed.
template <class Cfg, int MASK, bool LSE_SUMS, int QN = 4>
SAGE_DEV void softmax_pv(const SageAttnParams& p, WarpState<Cfg>& st, TileScores<Cfg>& S, float qs, float qbar_scale,
                         float ks, u32 sV, int tile, int row0, const LaneOffsets<Cfg>& lo) {
  using L = Layout<Cfg>;
  constexpr int SL = Cfg::SLABS, NT = Cfg::BN / 8, D = Cfg::D, BN = Cfg::BN;
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  auto& s = S.s;
  auto& ds = S.ds;

  // The probabilities: FP32 (pf) or, with half_exp, f16x2 pairs (ph) that are already the
  // FP16 A-fragment registers (and convert to FP8 two at a time).
  float pf[Cfg::HALF_EXP ? 1 : SL][Cfg::HALF_EXP ? 1 : NT][4];
  u32 ph[Cfg::HALF_EXP ? SL : 1][Cfg::HALF_EXP ? NT : 1][2];
  float alpha[SL][2];
  static_assert(!(Cfg::HALF_EXP && Cfg::V_INT8), "half_exp has no u8 P path");
  if constexpr (Cfg::HALF_EXP)
    softmax::online_h<SL, NT, Cfg::SMOOTH_Q, MASK, Cfg::P_SCALE>(p, st.m, st.l, s, ds, qs * ks, qbar_scale * ks,
                                                                 tile * BN, row0, ph, alpha);
  else  // int8 P.V: the row sums come from the tensor cores below
    softmax::online<SL, NT, Cfg::SMOOTH_Q, MASK, Cfg::P_SCALE, 1, !Cfg::V_INT8>(
        p, st.m, st.l, s, ds, qs * ks, qbar_scale * ks, tile * BN, row0, pf, alpha);

  // ---- O += P V --------------------------------------------------------------------------
  if constexpr (Cfg::V8) {
    // P as m16n8k32 8-bit A fragments (V's tokens are permuted to match): FP8 E4M3 (x448), or
    // u8 (x255) for INT8 V. FP8: a fresh FP32 accumulator per d-chunk group and tile, added
    // into O (two-level). INT8: each group's products over the tile are exact in an int32
    // accumulator started at the magic-number bits, so the sum arrives as 12582912 + x in
    // float form (|x| <= BN * 255 * 127 < 2^22), and O = O * alpha + x.
    constexpr int KK = BN / 32;
    constexpr bool U8 = Cfg::V_INT8;
    static_assert(BN * 255 * 127 < (1 << 22), "int8 P.V tile sums must stay below 2^22");
#if !defined(SAGE_HAS_FP8)
    static_assert(U8, "FP8 P.V needs sm_89+");
#endif
    if constexpr (U8) {
      // O is normalized by the sums of the rounded P (consistent with what was multiplied),
      // but the LSE needs the sums before rounding: probabilities below 1/510 of the row max
      // round to 0, which would bias it low for peaked rows. (A separate entry point, so that
      // calls without an LSE carry neither the sums nor a branch; in it, the run-time test
      // keeps ptxas from interleaving the sums with the tile, which spills at D=128.)
      if (LSE_SUMS && p.lse) {
#pragma unroll
        for (int a = 0; a < SL; ++a)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float r = 0.f;
#pragma unroll
            for (int n = 0; n < NT; ++n) r += pf[a][n][2 * hh] + pf[a][n][2 * hh + 1];
            st.lx[a][hh] = st.lx[a][hh] * alpha[a][hh] + r;
          }
      }
    }
    u32 pa[SL][KK][4];
#pragma unroll
    for (int a = 0; a < SL; ++a)
#pragma unroll
      for (int k = 0; k < KK; ++k) {
        if constexpr (Cfg::HALF_EXP) {
#if defined(SAGE_HAS_FP8)
          pa[a][k][0] = pack_e4m3x4_h(ph[a][4 * k][0], ph[a][4 * k + 1][0]);
          pa[a][k][1] = pack_e4m3x4_h(ph[a][4 * k][1], ph[a][4 * k + 1][1]);
          pa[a][k][2] = pack_e4m3x4_h(ph[a][4 * k + 2][0], ph[a][4 * k + 3][0]);
          pa[a][k][3] = pack_e4m3x4_h(ph[a][4 * k + 2][1], ph[a][4 * k + 3][1]);
#endif
        } else {
          pa[a][k][0] = pack_p8<U8>(pf[a][4 * k][0], pf[a][4 * k][1], pf[a][4 * k + 1][0], pf[a][4 * k + 1][1]);
          pa[a][k][1] = pack_p8<U8>(pf[a][4 * k][2], pf[a][4 * k][3], pf[a][4 * k + 1][2], pf[a][4 * k + 1][3]);
          pa[a][k][2] = pack_p8<U8>(pf[a][4 * k + 2][0], pf[a][4 * k + 2][1], pf[a][4 * k + 3][0], pf[a][4 * k + 3][1]);
          pa[a][k][3] = pack_p8<U8>(pf[a][4 * k + 2][2], pf[a][4 * k + 2][3], pf[a][4 * k + 3][2], pf[a][4 * k + 3][3]);
        }
      }
    if constexpr (U8) {
      // Row sums of exactly the u8 P that is multiplied: P times a block of ones (every
      // column of the result is the row's sum over the tile, so each lane has its rows' whole
      // sums).
      constexpr u32 kOnes = 0x01010101u;
#pragma unroll
      for (int a = 0; a < SL; ++a) {
        i32 rs[4];
#pragma unroll
        for (int k = 0; k < KK; ++k) mma_p8(rs, pa[a][k], kOnes, kOnes, k == 0);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) st.l[a][hh] = fmaf(st.l[a][hh], alpha[a][hh], p8_sum(rs[2 * hh]));
      }
    }
    constexpr int DCH = D / 8 < 8 ? D / 8 : 8;  // d-tiles per accumulator group
    // O's 8-column tiles computed (QN): whole groups of DCH, and at D=128 in the three-quarter
    // entry a last group of half as many (12 tiles: 8 + 4). Past NJ a group's tiles are skipped
    // (constant once unrolled).
    constexpr int NJ = quarters_of<Cfg, QN>(D / 8);
#pragma unroll
    for (int dc = 0; dc < (NJ + DCH - 1) / DCH; ++dc) {
      typename P8Acc<U8>::type acc[SL][DCH][4];
      if constexpr (!U8) {
#pragma unroll
        for (int a = 0; a < SL; ++a)
#pragma unroll
          for (int j = 0; j < DCH; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[a][j][e] = 0.f;
      }
#pragma unroll
      for (int k = 0; k < KK; ++k)
#pragma unroll
        for (int q = 0; q < DCH / 2; ++q) {
          if (dc * DCH + 2 * q >= NJ) continue;
          u32 vf[4];
          ldsm_x4(vf, sV + lo.v[k] + (dc * DCH * 8 + 16 * q) * L::VCPR * 16);
#pragma unroll
          for (int a = 0; a < SL; ++a) {
            mma_p8(acc[a][2 * q], pa[a][k], vf[0], vf[1], k == 0);
            mma_p8(acc[a][2 * q + 1], pa[a][k], vf[2], vf[3], k == 0);
          }
        }
#pragma unroll
      for (int a = 0; a < SL; ++a)
#pragma unroll
        for (int j = 0; j < DCH; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (dc * DCH + j < NJ)
              st.o[a][dc * DCH + j][e] = fmaf(st.o[a][dc * DCH + j][e], alpha[a][e / 2], p8_sum(acc[a][j][e]));
    }
  } else {
    constexpr int KK = BN / 16;
    u32 pa[SL][KK][4];
#pragma unroll
    for (int a = 0; a < SL; ++a)
#pragma unroll
      for (int k = 0; k < KK; ++k) {
        if constexpr (Cfg::HALF_EXP) {
          pa[a][k][0] = ph[a][2 * k][0];
          pa[a][k][1] = ph[a][2 * k][1];
          pa[a][k][2] = ph[a][2 * k + 1][0];
          pa[a][k][3] = ph[a][2 * k + 1][1];
        } else {
          pa[a][k][0] = pack_f16x2(pf[a][2 * k][0], pf[a][2 * k][1]);
          pa[a][k][1] = pack_f16x2(pf[a][2 * k][2], pf[a][2 * k][3]);
          pa[a][k][2] = pack_f16x2(pf[a][2 * k + 1][0], pf[a][2 * k + 1][1]);
          pa[a][k][3] = pack_f16x2(pf[a][2 * k + 1][2], pf[a][2 * k + 1][3]);
        }
      }
    if constexpr (Cfg::PV == PvType::fp16) {
      // Once the row maxima settle (after a few tiles), alpha is 1 for the whole warp.
      bool rescale = false;
#pragma unroll
      for (int a = 0; a < SL; ++a) rescale |= alpha[a][0] != 1.f || alpha[a][1] != 1.f;
      pv16<Cfg, false, QN>(st, pa, alpha, __any_sync(0xffffffffu, rescale), sV, lo);
    } else {  // fp16 accumulators, flushed into FP32 O once per tile
      constexpr int DCH = D / 8 < 8 ? D / 8 : 8;
      constexpr int NJ = quarters_of<Cfg, QN>(D / 8);  // as in the 8-bit path above
#pragma unroll
      for (int dc = 0; dc < (NJ + DCH - 1) / DCH; ++dc) {
        u32 acc[SL][DCH][2];
#pragma unroll
        for (int a = 0; a < SL; ++a)
#pragma unroll
          for (int j = 0; j < DCH; ++j) acc[a][j][0] = acc[a][j][1] = 0u;
#pragma unroll
        for (int k = 0; k < KK; ++k)
#pragma unroll
          for (int q = 0; q < DCH / 2; ++q) {
            if (dc * DCH + 2 * q >= NJ) continue;
            u32 vf[4];
            ldsm_x4_t(vf, sV + lo.v16(dc * DCH / 2 + q) + 16 * k * L::VCPR * 16);
#pragma unroll
            for (int a = 0; a < SL; ++a) {
              mma_f16_f16(acc[a][2 * q], pa[a][k], vf[0], vf[1]);
              mma_f16_f16(acc[a][2 * q + 1], pa[a][k], vf[2], vf[3]);
            }
          }
#pragma unroll
        for (int a = 0; a < SL; ++a)
#pragma unroll
          for (int j = 0; j < DCH; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if (dc * DCH + j >= NJ) continue;
              const u32 w = acc[a][j][e / 2];
              const float v = (e & 1) ? f16_to_f32(u16(w >> 16)) : f16_to_f32(u16(w & 0xffff));
              st.o[a][dc * DCH + j][e] = fmaf(st.o[a][dc * DCH + j][e], alpha[a][e / 2], v);
            }
      }
    }
  }
}

// The native kernel's tile: the online softmax of the FP32 scores (lazy rescaling, the native
// wgmma kernel's softmax_tile), then O += P V with P in the inputs' type (FP16 or BF16) from
// registers and V from shared memory, FP32 accumulators.
template <class Cfg, int MASK, bool BF16, int QN = 4>
SAGE_DEV void softmax_pv_native(const SageAttnParams& p, WarpState<Cfg>& st, TileScores<Cfg>& S, float scale, u32 sV,
                                int tile, int row0, const LaneOffsets<Cfg>& lo) {
  constexpr int SL = Cfg::SLABS, BN = Cfg::BN, KK = BN / 16;
  constexpr int dtype = BF16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16;
  float alpha[SL][2];
  bool moved = false;
#pragma unroll
  for (int a = 0; a < SL; ++a)
    moved |= softmax::softmax_tile<Cfg, MASK>(p, st.m[a], st.l[a], reinterpret_cast<float (&)[BN / 2]>(S.s[a]), scale,
                                              tile * BN, row0 + 16 * a, alpha[a]);
  u32 pa[SL][KK][4];
#pragma unroll
  for (int a = 0; a < SL; ++a)
#pragma unroll
    for (int k = 0; k < KK; ++k) {
      const auto& x = S.s[a];
      pa[a][k][0] = pack_x2(x[2 * k][0], x[2 * k][1], dtype);
      pa[a][k][1] = pack_x2(x[2 * k][2], x[2 * k][3], dtype);
      pa[a][k][2] = pack_x2(x[2 * k + 1][0], x[2 * k + 1][1], dtype);
      pa[a][k][3] = pack_x2(x[2 * k + 1][2], x[2 * k + 1][3], dtype);
    }
  pv16<Cfg, BF16, QN>(st, pa, alpha, moved, sV, lo);  // moved: warp-uniform, rare after the first tiles
}

// Split keys' partial results: p.split_o holds, for range r of query tile u (= (b *
// Hq + h) * q_tiles + q_tile) and the tile's row i, O (unnormalized, FP32, D values) at
// split_o[((r * units + u) * BM + i) * D], then after all of them the row maximum (log2
// domain, scaled) and sum at [S * units * BM * D + ((r * units + u) * BM + i) * 2]; only rows
// before seq_q are written or read. p.sync[u] counts a tile's finished ranges (this call's
// generation). A warp writes its rows' partials; the last CTA of a tile reads them all back
// (through L2: other SMs wrote them) and stores O and the LSE.
template <class Cfg>
SAGE_DEV void split_partial(const SageAttnParams& p, const WarpState<Cfg>& st, i64 u, int split, int trow0, int row0) {
  constexpr int SL = Cfg::SLABS, D = Cfg::D, BM = Cfg::BM;
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const i64 units = i64(p.batch) * (p.pack_rows > 0 ? p.heads_kv : p.heads_q) * p.q_tiles;
  const i64 slab0 = (i64(split) * units + u) * BM;
  float* ml = p.split_o + i64(p.split_ranges) * units * BM * D;
#pragma unroll
  for (int a = 0; a < SL; ++a)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float lt = quad_sum(st.l[a][hh]);
      const int r = 16 * a + gid + 8 * hh;
      if (row0 + r >= p.seq_q) continue;
      const i64 i = slab0 + trow0 + r;
      float* o = p.split_o + i * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(o + 8 * j + 2 * tig) = make_float2(st.o[a][j][2 * hh], st.o[a][j][2 * hh + 1]);
      if (tig == 0) *reinterpret_cast<float2*>(ml + 2 * i) = make_float2(st.m[a][hh], lt);
    }
}

// Ranges a merging warp reads in one round trip (launch.cpp: kMmaMergeBatch).
constexpr int kMergeBatch = 8;
// The decode schedule's most merging ranges a tile (attn_decode.cuh).
constexpr int kMaxMergers = 16;

// Tile row i is query m0 + i of head h, or packed (p.pack_rows > 0, h the kv head) query
// i % pack_rows of head h * group + i / pack_rows.
// VQ: variable-length queries over a paged cache (p: the view with O and the LSE at the
// sequence's rows, LSE [heads_q, total]: lse_stride_h).
// o_scale: O's factor (FP8 pages: V's scale).
template <class Cfg, bool VQ = false>
SAGE_DEV void split_merge(const SageAttnParams& p, i64 u, int b, int h, int m0, float o_scale = 1.f) {
  constexpr int D = Cfg::D, BM = Cfg::BM, NW = Cfg::NWARPS;
  constexpr int PER = D / 32;  // columns a lane merges: PER consecutive ones
  static_assert(D % 64 == 0, "a lane merges an even number of columns");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 units = i64(p.batch) * (p.pack_rows > 0 ? p.heads_kv : p.heads_q) * p.q_tiles;
  const int S = p.split_ranges;
  const float* ml = p.split_o + i64(S) * units * BM * D;
  const int pack = p.pack_rows, g = p.heads_q / p.heads_kv;
  for (int i = warp; i < BM; i += NW) {
    const int row = pack > 0 ? i % pack : m0 + i;
    if (row >= p.seq_q || (pack > 0 && i / pack >= g)) continue;  // past the queries or the group's heads
    const int hq = pack > 0 ? h * g + i / pack : h;
    // Row i's partial of range r is at row (r * units + u) * BM + i: `at0 + r * stride`.
    const i64 at0 = u * BM + i, stride = units * BM;
    // An online merge over batches of MB ranges, each batch's loads (every lane its PER
    // columns of O, and the ranges' maxima and sums) in flight together: one round trip to L2
    // a batch. launch.cpp (mma_split_ranges) bounds the batches a warp takes in turn.
    float mx = neg_inf(), lsum = 0.f, acc[PER];
#pragma unroll
    for (int c = 0; c < PER; ++c) acc[c] = 0.f;
    for (int r0 = 0; r0 < S; r0 += kMergeBatch) {
      float2 x[kMergeBatch];
      float v[kMergeBatch][PER];
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const i64 at = at0 + (r0 + j) * stride;
        if (r0 + j < S) {
          x[j] = __ldcg(reinterpret_cast<const float2*>(ml + 2 * at));
          const float* o = p.split_o + at * D + lane * PER;
#pragma unroll
          for (int c = 0; c < PER; c += 2) {
            const float2 y = __ldcg(reinterpret_cast<const float2*>(o + c));
            v[j][c] = y.x;
            v[j][c + 1] = y.y;
          }
        } else {
          x[j] = make_float2(neg_inf(), 0.f);
#pragma unroll
          for (int c = 0; c < PER; ++c) v[j][c] = 0.f;
        }
      }
      float bm = mx;
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) bm = fmaxf(bm, x[j].x);
      const float base = bm == neg_inf() ? 0.f : bm;
      const float sc = ex2(mx - base);  // 0 while nothing was visible (mx = -inf)
      lsum *= sc;
#pragma unroll
      for (int c = 0; c < PER; ++c) acc[c] *= sc;
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const float w = ex2(x[j].x - base);  // 0 for a range without visible keys (m = -inf)
        lsum = fmaf(w, x[j].y, lsum);
#pragma unroll
        for (int c = 0; c < PER; ++c) acc[c] = fmaf(w, v[j][c], acc[c]);
      }
      mx = bm;
    }
    const float inv = lsum > 0.f ? o_scale / lsum : 0.f;
    u32 packed[PER / 2];
#pragma unroll
    for (int c = 0; c < PER; c += 2) packed[c / 2] = pack_x2(acc[c] * inv, acc[c + 1] * inv, p.dtype);
    u8* dst = static_cast<u8*>(p.o) + (b * p.o_stride_b + hq * p.o_stride_h + i64(row) * p.o_stride_n + lane * PER) * 2;
    if (lane * PER < p.head_dim) {  // a lane's PER <= 4 columns: wholly within the caller's head dim or past it
      if constexpr (PER == 4) {
        *reinterpret_cast<u32x2*>(dst) = u32x2{packed[0], packed[1]};
      } else {
#pragma unroll
        for (int c = 0; c < PER / 2; ++c) reinterpret_cast<u32*>(dst)[c] = packed[c];
      }
    }
    if (p.lse && lane == 0)
      p.lse[VQ ? i64(hq) * p.lse_stride_h + row : (i64(b) * p.heads_q + hq) * p.seq_q + row] =
          lsum > 0.f ? (mx + lg2(lsum)) * kLn2 : neg_inf();
  }
}

// grid (q_tiles, Hq, B) (causal, split: mma_attn::cta_coords), Cfg::THREADS threads,
// Cfg::SMEM_BYTES dynamic shared memory. LSE_SUMS: see softmax_pv (int8 P.V only; the
// launcher picks that entry when p.lse is set). BF16: the native kernel's BF16 inputs (the
// entry point picks by p.dtype).
// PAGED: a paged KV cache (native; p is the sequence's paged_view). VQ: variable-length queries
// over it (p: the sequence's varlen_paged_view<.., KEEP_B, OUT = false>). KV8: FP8 (e4m3) pages
// (Fp8Pages; the plain schedule, STAGES >= 2), their scales folded into the softmax scale and O's
// normalization.
template <class Cfg, bool LSE_SUMS = false, bool BF16 = false, int QN = 4, bool WINDOW = false, bool PAGED = false,
          bool VQ = false, bool KV8 = false>
SAGE_DEV void attn_kernel(const SageAttnParams& p) {
  static_assert(!VQ || PAGED, "variable-length queries over a paged cache");
  static_assert(!KV8 || (PAGED && Cfg::STAGES > 1), "FP8 pages are a paged cache's, through a ring of stages");
  static_assert(!PAGED || Cfg::NATIVE, "paged caches are read by the native kernels");
  static_assert(!LSE_SUMS || Cfg::V_INT8, "separate LSE sums are the int8 P.V path's");
  static_assert(Cfg::SCHED == Schedule::plain || Cfg::SCHED == Schedule::overlap,
                "the warp-specialized schedules are the wgmma pipeline's");
  static_assert(!Cfg::NATIVE || Cfg::SCHED == Schedule::plain, "the native kernel has the plain schedule");
  static_assert(!BF16 || Cfg::NATIVE, "BF16 MMAs are the native kernel's");
  using L = Layout<Cfg>;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, SL = Cfg::SLABS, ST = Cfg::STAGES;
  extern __shared__ __align__(128) u8 smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const CtaCoords cc = cta_coords<Cfg::SPLIT>(p);
  const int q_tile = cc.q_tile, h = cc.h, b = cc.b;
  // Packed GQA heads (native, p.pack_rows > 0; one query tile): h is the kv head, and this
  // warp's rows are queries row0... of query head hq; otherwise rows m0 + warp * WARP_Q... of h.
  // A warp past the group's last head (a group that does not fill the tile) gets row0 =
  // seq_q: past the queries, it stores nothing (launch.cpp: tile_pack_rows).
  const bool packed = Cfg::NATIVE && p.pack_rows > 0;
  const int hkv = packed ? h : h / (p.heads_q / p.heads_kv);
  const int m0 = q_tile * BM;
  const int row0 = !packed                                                     ? m0 + warp * Cfg::WARP_Q
                   : warp * Cfg::WARP_Q / p.pack_rows < p.heads_q / p.heads_kv ? warp * Cfg::WARP_Q % p.pack_rows
                                                                               : p.seq_q;

  // The tiles [t0, n_tiles); with a sliding window those from t0 and before mask_before are
  // masked too.
  int t0, n_tiles, mask_before, mask_from;
  kv_range<WINDOW>(p, m0, packed ? p.pack_rows : BM, BN, &t0, &n_tiles, &mask_before, &mask_from);
  constexpr int MASK = WINDOW ? softmax::kMaskWindow : 1;  // a masked tile's
  // Split keys (native, p.split_ranges > 0): this CTA's range [t0, n_tiles) of the tile's keys.
  if constexpr (Cfg::SPLIT) {
    if (p.split_ranges > 0) {
      const int first = t0, all = n_tiles - t0;
      const int r = split_index(p);
      t0 = first + int(i64(all) * r / p.split_ranges);
      n_tiles = first + int(i64(all) * (r + 1) / p.split_ranges);
    }
  }

  const i64 q_tile_id = (i64(b) * p.heads_q + h) * p.q_tiles + q_tile;
  const i64 kv_bh = i64(b) * p.heads_kv + hkv;
  KSource ks;
  if constexpr (Cfg::NATIVE) {
    ks = caller_rows<KSource>(p, p.k, PAGED ? 0 : b, hkv);  // paged: the kv head's first page
  } else {
    ks.base = reinterpret_cast<const u8*>(p.k_quant) + kv_bh * p.k_tiles * BN * Cfg::QROW;
    ks.row_stride = Cfg::QROW;
    ks.rows_valid = 0;  // the workspace's tiles are padded: no check
  }
  VSource vs;
  const i64 npad = i64(p.k_tiles) * BN;
  if constexpr (Cfg::V8) {
    vs.base = static_cast<const u8*>(p.v_prep) + kv_bh * D * npad;
    vs.row_stride = npad;
    vs.rows_valid = D;
  } else if (p.v_prep) {
    vs.base = static_cast<const u8*>(p.v_prep) + kv_bh * npad * D * 2;
    vs.row_stride = D * 2;
    vs.rows_valid = int(npad);
  } else {
    vs = caller_rows<VSource>(p, p.v, PAGED ? 0 : b, hkv);  // native; the quantized kernels' V is prepared below D
  }
  const PagedRows pg = paged_rows<PAGED>(p, b);

  const u32 sQ = smem_addr(smem + L::Q);
  const u32 sK0 = smem_addr(smem + L::K);
  const u32 sV0 = smem_addr(smem + L::V);
  KvLoader<Cfg> ld;
  typename Fp8Loader<KV8, Fp8Pages<Cfg>>::type ld8;
  // The ring's slots, and the tiles loaded ahead: STAGES - 1, or KV8 the whole FP8 ring (each
  // tile's load goes out once the tile before it in its slot is converted, before the compute).
  constexpr int R = fp8_ring<KV8, Cfg>(), AHEAD = KV8 ? R : ST - 1;
  // Tile t into stage `slot` (KV8: its ring slot).
  auto fetch = [&](int t, int slot) {
    if constexpr (KV8) ld8.load(pg, p.seq_kv, t, sK0, sV0, slot);
    else ld.template fetch<PAGED>(ks, vs, pg, t, sK0 + slot * Cfg::SMEM_K_STAGE, sV0 + slot * Cfg::SMEM_V_STAGE);
  };
  if constexpr (KV8) ld8.init(p, hkv);
  else ld.init(ks, vs);
  LaneOffsets<Cfg> lo;
  lo.init();
  if constexpr (Cfg::NATIVE) {  // the caller's Q rows, zero-filled past seq_q and past its head dim
    const u8* gQ = static_cast<const u8*>(p.q.ptr) + b * p.q.stride_b * 2;
    const int g = p.heads_q / p.heads_kv;
    for (int c = threadIdx.x; c < BM * L::QCPR; c += Cfg::THREADS) {
      const int r = c / L::QCPR, cc = c % L::QCPR;
      const int qh = packed ? h * g + r / p.pack_rows : h, qr = packed ? r % p.pack_rows : m0 + r;
      const bool ok = qr < p.seq_q && (!packed || r / p.pack_rows < g) && cc * 16 < p.head_dim * 2;
      cp_async16(sQ + swz<L::QCPR>(r, cc), ok ? gQ + (qh * p.q.stride_h + qr * p.q.stride_n) * 2 + cc * 16 : gQ,
                 ok ? 16 : 0);
    }
  } else {
    const u8* gQ = reinterpret_cast<const u8*>(p.q_quant) + q_tile_id * BM * Cfg::QROW;
    for (int c = threadIdx.x; c < BM * L::QCPR; c += Cfg::THREADS) {
      const int r = c / L::QCPR, cc = c % L::QCPR;
      cp_async16(sQ + swz<L::QCPR>(r, cc), gQ + r * Cfg::QROW + cc * 16);
    }
  }
  cp_async_commit();
  if constexpr (ST > 1) {
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
      const int t = t0 + s, slot = t % R;
      if (t < n_tiles) fetch(t, slot);
      cp_async_commit();
    }
    cp_async_wait<Cfg::SCHED == Schedule::overlap ? ST - 2 : AHEAD>();  // overlap: tile 0 too
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();

  QOperand<Cfg> qf;
  qf.init(sQ, warp, lane);
  int qg = 0;
  if constexpr (Cfg::GRAN == Gran::per_thread) qg = warp * 8 + gid;
  else if constexpr (Cfg::GRAN == Gran::per_warp) qg = warp;
  float qs = 0.f;
  if constexpr (!Cfg::NATIVE) qs = p.q_scale[q_tile_id * Cfg::Q_GROUPS + qg];
  // native: the scores' factor into the log2 domain (KV8: K's scale too)
  const float scale = p.sm_scale * kLog2e * (KV8 ? page_scale(p.kv_k_scale, p.kv_scale_stride, hkv) : 1.f);
  u32 qbar[Cfg::QK_KSTEPS][4];
  float qbar_scale = 0.f;
  if constexpr (Cfg::SMOOTH_Q) {
    // Every row of this A fragment is the block's mean row.
    const u32* qm = reinterpret_cast<const u32*>(p.q_mean_quant + q_tile_id * Cfg::QROW);
#pragma unroll
    for (int k = 0; k < Cfg::QK_KSTEPS; ++k) {
      qbar[k][0] = qbar[k][1] = qm[k * 8 + tig];
      qbar[k][2] = qbar[k][3] = qm[k * 8 + 4 + tig];
    }
    qbar_scale = p.q_mean_scale[q_tile_id];
  }

  WarpState<Cfg> st;
#pragma unroll
  for (int a = 0; a < SL; ++a) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) { st.m[a][hh] = neg_inf(); st.l[a][hh] = 0.f; }
    if constexpr (LSE_SUMS) st.lx[a][0] = st.lx[a][1] = 0.f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st.o[a][j][e] = 0.f;
  }
  const float* kscale = p.k_scale + kv_bh * p.k_tiles * Cfg::K_GROUPS + (Cfg::GRAN == Gran::per_thread ? tig : 0);

  if constexpr (Cfg::SCHED == Schedule::plain) {
    for (int t = t0; t < n_tiles; ++t) {
      int slot;
      if constexpr (ST == 1) {
        __syncthreads();
        ld.template fetch<PAGED>(ks, vs, pg, t, sK0, sV0);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        slot = 0;
      } else {
        cp_async_wait<AHEAD - 1>();
        __syncthreads();
        slot = t % R;
        if constexpr (KV8) {  // the tile's FP8 bytes into the FP16/BF16 tile at stage 0, then the slot's next tile
          ld8.convert(smem, L::K, L::V, slot, BF16);
          __syncthreads();
        }
        const int nt = t + AHEAD;
        if (nt < n_tiles) fetch(nt, nt % R);
        cp_async_commit();
        if constexpr (KV8) slot = 0;
      }
      const u32 sV = sV0 + slot * Cfg::SMEM_V_STAGE;
      if constexpr (Cfg::NATIVE) {
        // Warp-uniform: a warp whose rows all lie past seq_q (decoding) has nothing to compute.
        if (row0 < p.seq_q) {
          TileScores<Cfg> S;
          qk_tile<Cfg, BF16, QN>(S, qf, qbar, sK0 + slot * Cfg::SMEM_K_STAGE, lo);
          if (t >= mask_from || (WINDOW && t < mask_before))
            softmax_pv_native<Cfg, MASK, BF16, QN>(p, st, S, scale, sV, t, row0, lo);
          else
            softmax_pv_native<Cfg, 0, BF16, QN>(p, st, S, scale, sV, t, row0, lo);
        }
      } else {
        const float ksc = kscale[t * Cfg::K_GROUPS];
        TileScores<Cfg> S;
        qk_tile<Cfg, false, QN>(S, qf, qbar, sK0 + slot * Cfg::SMEM_K_STAGE, lo);
        if (t >= mask_from || (WINDOW && t < mask_before))
          softmax_pv<Cfg, MASK, LSE_SUMS, QN>(p, st, S, qs, qbar_scale, ksc, sV, t, row0, lo);
        else
          softmax_pv<Cfg, 0, LSE_SUMS, QN>(p, st, S, qs, qbar_scale, ksc, sV, t, row0, lo);
      }
    }
  } else {
    // Overlap: tiles t and t+1 are resident while iteration t runs QK^T of t+1 and the
    // softmax and PV of t; the load issued in iteration t refills the slot of t-1.
    TileScores<Cfg> cur;
    if (t0 < n_tiles) qk_tile<Cfg, false, QN>(cur, qf, qbar, sK0 + (t0 % ST) * Cfg::SMEM_K_STAGE, lo);
    for (int t = t0; t < n_tiles; ++t) {
      cp_async_wait<ST - 3>();
      __syncthreads();
      const int nt = t + ST - 1;
      if (nt < n_tiles) {
        const int ns = nt % ST;
        ld.load(ks, vs, nt, sK0 + ns * Cfg::SMEM_K_STAGE, sV0 + ns * Cfg::SMEM_V_STAGE);
      }
      cp_async_commit();
      TileScores<Cfg> next;
      if (t + 1 < n_tiles) qk_tile<Cfg, false, QN>(next, qf, qbar, sK0 + ((t + 1) % ST) * Cfg::SMEM_K_STAGE, lo);
      const float ksc = kscale[t * Cfg::K_GROUPS];
      const u32 sV = sV0 + (t % ST) * Cfg::SMEM_V_STAGE;
      if (t >= mask_from || (WINDOW && t < mask_before))
        softmax_pv<Cfg, MASK, LSE_SUMS, QN>(p, st, cur, qs, qbar_scale, ksc, sV, t, row0, lo);
      else
        softmax_pv<Cfg, 0, LSE_SUMS, QN>(p, st, cur, qs, qbar_scale, ksc, sV, t, row0, lo);
      cur = next;
    }
  }

  // ---- epilogue ----------------------------------------------------------------------------
  cp_async_wait<0>();
  __syncthreads();
  // The CTA's coordinates again (cheaper than keeping them live through the mainloop).
  const CtaCoords ce = cta_coords<Cfg::SPLIT>(p);
  // KV8: V's scale, with O's normalization.
  const float vsc = KV8 ? page_scale(p.kv_v_scale, p.kv_scale_stride, packed ? ce.h : ce.h / (p.heads_q / p.heads_kv)) : 1.f;
  if constexpr (Cfg::SPLIT) {
    if (p.split_ranges > 0) {
      // This range's partial, then one count for it; the tile's last range merges them all.
      const i64 u = (i64(ce.b) * (packed ? p.heads_kv : p.heads_q) + ce.h) * p.q_tiles + ce.q_tile;
      split_partial<Cfg>(p, st, u, split_index(p), warp * Cfg::WARP_Q, row0);
      __threadfence();
      __syncthreads();
      volatile int* last = reinterpret_cast<volatile int*>(smem);
      // The last range's CTA also puts the counter back to 0 (every range has counted): a CUDA
      // graph replays the launch with the same generation, whose counts would go on from here.
      if (threadIdx.x == 0) {
        const bool done = arrive_count(p.sync + u, p.generation) == unsigned(p.split_ranges);
        if (done) p.sync[u] = 0ull;
        *last = done;
      }
      __syncthreads();
      if (!*last) return;
      __threadfence();
      if constexpr (VQ) {
        SageAttnParams e = p;
        varlen_paged_out(p, ce.b, e);
        split_merge<Cfg, true>(e, u, ce.b, ce.h, ce.q_tile * BM, vsc);
      } else {
        split_merge<Cfg>(p, u, ce.b, ce.h, ce.q_tile * BM, vsc);
      }
      return;
    }
  }
  if constexpr (Cfg::NATIVE) {
    const int hq = packed ? ce.h * (p.heads_q / p.heads_kv) + warp * Cfg::WARP_Q / p.pack_rows : ce.h;
    if constexpr (VQ) {
      SageAttnParams e = p;
      varlen_paged_out(p, ce.b, e);
      epilogue::store<Cfg, SL>(e, st.m, st.l, st.o, ce.b, hq, 0, warp, row0, smem, nullptr, true, vsc);
    } else {
      epilogue::store<Cfg, SL>(p, st.m, st.l, st.o, ce.b, hq, 0, warp, row0, smem, nullptr, true, vsc);
    }
    return;
  }
  epilogue::store<Cfg, SL>(p, st.m, st.l, st.o, ce.b, ce.h, ce.kv_bh(p), warp, row0, smem, LSE_SUMS ? st.lx : nullptr);
}

}  // namespace mma_attn
}  // namespace sage
