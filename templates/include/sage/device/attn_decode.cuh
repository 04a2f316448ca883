// The decoding schedule of the native mma.sync kernel (schedule: decode, sm_80+): a CTA takes a
// tile of at most BM rows of queries (packed: query heads of one kv head, p.pack_rows rows
// each, as many as the tile holds; a larger group takes several tiles) and one range of its keys. The rows are too few for the MMAs' M, so they are their N,
// and each of the NW warps takes 16 keys of every BN = 16 NW-key tile as M:
//   S^T  = K Q^T      m16n8k16: A = the warp's 16 K rows (ldmatrix), B = Q's rows (ldmatrix)
//   O^T += V^T P^T    m16n8k16: A = V^T (ldmatrix.trans of V's 16 rows), B = P^T, the score
//                     fragments transposed in registers (movmatrix)
// A tile's MMAs are then D/8 per warp and 8-row block of queries, where the row-major kernels
// spend 16 rows a warp on every key. Each warp keeps its own maxima, sums and O^T over its keys
// (no per-tile exchange between warps); at the range's end the warps meet in shared memory, and
// the CTA stores O and the LSE (one range a tile), or its partial for the last of the tile's
// CTAs to merge (split keys: the workspace layout of attn_mma.cuh's split_partial).
#pragma once
#include "sage/device/attn_mma.cuh"

namespace sage {
namespace mma_attn {

SAGE_DEV u32 movmatrix_t(u32 x) {
  u32 y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Row r of query tile t of a decoding tile's (batch, head): query qr of query head qh, and
// whether that query exists. Packed, h is the kv head and a tile holds BM / pack_rows heads of
// its group, pack_rows rows each: tile t its heads t * (BM / pack_rows) on (a group of more
// heads than one tile holds takes several tiles, launch.cpp: decode_pack_tiles). Else h is
// the query head and tile t its queries from t * BM.
struct DecodeRow {
  int qh, qr;
  bool ok;
};
template <int BM>
SAGE_DEV DecodeRow decode_row(const SageAttnParams& p, int r, int h, int t) {
  if (p.pack_rows > 0) {
    const int grp = p.heads_q / p.heads_kv, hpt = BM / p.pack_rows, j = r / p.pack_rows, qr = r % p.pack_rows;
    const int jg = t * hpt + j;
    return {h * grp + jg, qr, j < hpt && jg < grp && qr < p.seq_q};
  }
  return {h, t * BM + r, t * BM + r < p.seq_q};
}

// Grid as the native mma.sync kernel's (cta_coords<true>), Cfg::THREADS threads,
// Cfg::SMEM_BYTES dynamic shared memory. QN: the quarters of the head dim computed. PAGED: a
// paged KV cache (p is the sequence's paged_view). VARLEN: variable-length queries over it (p is
// the sequence's varlen_paged_view<.., KEEP_B, OUT = false>: packed Q and O, LSE [heads_q, total]).
// WINDOW: a sliding window (p.window > 0, causal): the tile's keys start at the tile containing
// its first row's first visible key (kv_range<true>), the ranges split those, and the tiles
// before mask_before mask the keys left of each row's window too. KV8: FP8 (e4m3) pages
// (PAGED; attn_mma.cuh: Fp8Pages<Cfg, true>), their scales folded into the softmax scale and O's
// normalization: each warp's FP8 rows go from the ring straight into FP16 A fragments (K's
// k-steps and O^T's rows are permutations of d: Q's rows are stored in K's, O^T's rows are put
// back where the warps meet), no ldmatrix of K or V; FP16 MMAs for BF16 queries too.
template <class Cfg, bool BF16, int QN = 4, bool PAGED = false, bool VARLEN = false, bool WINDOW = false, bool KV8 = false>
SAGE_DEV void decode_kernel(const SageAttnParams& p) {
  static_assert(Cfg::DECODE, "the decoding schedule's kernel");
  using L = Layout<Cfg>;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, ST = Cfg::STAGES, NW = Cfg::NWARPS;
  constexpr int NB = BM / 8;                           // 8-row blocks of queries: the MMAs' N
  constexpr int KS = quarters_of<Cfg, QN>(D / 16);     // k-steps of S^T, 16-row blocks of O^T
  extern __shared__ __align__(128) u8 smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const CtaCoords cc = cta_coords<true>(p);
  const bool packed = p.pack_rows > 0;
  const int hkv = packed ? cc.h : cc.h / (p.heads_q / p.heads_kv);
  const int m0 = packed ? 0 : cc.q_tile * BM;  // packed: every tile's queries from 0

  int t0, n_tiles, mask_before, mask_from;
  kv_range<WINDOW>(p, m0, packed ? min_(p.pack_rows, p.seq_q) : BM, BN, &t0, &n_tiles, &mask_before, &mask_from);
  if (p.split_ranges > 0) {
    const int first = t0, all = n_tiles - t0, r = split_index(p);
    t0 = first + int(i64(all) * r / p.split_ranges);
    n_tiles = first + int(i64(all) * (r + 1) / p.split_ranges);
  }
  // WINDOW (its entries run with p.window > 0 only): a key window or more before a row's last
  // visible one is left of its window.

  static_assert(!KV8 || PAGED, "FP8 pages are a paged cache's");
  const KSource ks = caller_rows<KSource>(p, p.k, PAGED ? 0 : cc.b, hkv);  // paged: the kv head's first page
  const VSource vs = caller_rows<VSource>(p, p.v, PAGED ? 0 : cc.b, hkv);
  const PagedRows pg = paged_rows<PAGED>(p, cc.b);

  const u32 sQ = smem_addr(smem + L::Q), sK0 = smem_addr(smem + L::K), sV0 = smem_addr(smem + L::V);
  using F8 = Fp8Pages<Cfg, true>;
  static_assert(!KV8 || QN == 4, "FP8 pages: every quarter of the head dim (their d is permuted)");
  // KV8: FP16 MMAs whatever the queries' type. e4m3 keys and values are FP16 values exactly (one
  // cvt a pair, where BF16 takes bit operations), P in FP16 keeps more bits than in BF16, and
  // BF16 queries are scaled by a power of two a row into FP16's range, exactly (but elements
  // under 2^-28 of their row's largest), undone in the softmax's factor (q_unscale).
  constexpr bool MMA_BF16 = BF16 && !KV8;
  __shared__ float q_unscale[KV8 && BF16 ? BM : 1];
  {  // the tile's query rows, zero-filled past the queries and past the call's head dim
    const u8* gQ = static_cast<const u8*>(p.q.ptr) + cc.b * p.q.stride_b * 2;
    // KV8: a warp a row, each row's pairs of d in the order the FP8 K fragments' columns take
    // (F8::q_d), by 4-byte loads and stores (the __syncthreads before the loop publishes them);
    // BF16 rows into FP16, times 2^(14 - e), e the exponent of the row's largest magnitude.
    if constexpr (KV8) {
      constexpr int PPL = D / 64;  // pairs a lane
      for (int r = warp; r < BM; r += NW) {
        const DecodeRow dr = decode_row<BM>(p, r, cc.h, cc.q_tile);
        u32 x[PPL];
#pragma unroll
        for (int i = 0; i < PPL; ++i) {
          const int d = F8::q_d(2 * (lane + 32 * i));
          x[i] = dr.ok && d < p.head_dim ? *reinterpret_cast<const u32*>(gQ + (dr.qh * p.q.stride_h + i64(dr.qr) * p.q.stride_n + d) * 2) : 0u;
        }
        if constexpr (BF16) {  // the row times 2^sg into FP16 (common.cuh: f16_row_exponent)
          float mx = 0.f;
#pragma unroll
          for (int i = 0; i < PPL; ++i) mx = bf16x2_absmax(x[i], mx);
#pragma unroll
          for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
          const int sg = f16_row_exponent(mx);
          const float f = pow2f(sg);
#pragma unroll
          for (int i = 0; i < PPL; ++i) x[i] = bf16x2_to_f16x2(x[i], f);
          if (lane == 0) q_unscale[r] = pow2f(-sg);
        }
#pragma unroll
        for (int i = 0; i < PPL; ++i) {
          const int pc = lane + 32 * i;
          *reinterpret_cast<u32*>(smem + L::Q + swz<L::QCPR>(r, pc / 4) + (pc % 4) * 4) = x[i];
        }
      }
    } else
    for (int c = threadIdx.x; c < BM * L::QCPR; c += Cfg::THREADS) {
      const int r = c / L::QCPR, ch = c % L::QCPR;
      const DecodeRow dr = decode_row<BM>(p, r, cc.h, cc.q_tile);
      const bool ok = dr.ok && ch * 16 < p.head_dim * 2;
      cp_async16(sQ + swz<L::QCPR>(r, ch), ok ? gQ + (dr.qh * p.q.stride_h + i64(dr.qr) * p.q.stride_n) * 2 + ch * 16 : gQ,
                 ok ? 16 : 0);
    }
  }
  cp_async_commit();
  KvLoader<Cfg> ld;
  typename Fp8Loader<KV8, F8>::type ld8;  // KV8: each warp its own keys (no CTA barrier in the loop)
  // The ring's slots (STAGES, or KV8 the FP8 ring's 2 STAGES), and the tiles loaded ahead: all
  // but the one being read (each tile's load goes out into the slot that the tile before was read from).
  constexpr int R = KV8 ? F8::RING : ST, AHEAD = R - 1;
  // A tile into its stage (KV8: its ring slot).
  auto fetch = [&](int t) {
    if constexpr (KV8) ld8.load(pg, p.seq_kv, t, sK0, sV0, t % R);
    else ld.template fetch<PAGED>(ks, vs, pg, t, sK0 + (t % ST) * Cfg::SMEM_K_STAGE, sV0 + (t % ST) * Cfg::SMEM_V_STAGE);
  };
  if constexpr (KV8) ld8.init(p, hkv);
  else ld.init(ks, vs);
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    const int t = t0 + s;
    if (t < n_tiles) fetch(t);
    cp_async_commit();
  }

  // Lane addresses (bytes in a tile) of this warp's ldmatrix reads: its 16 K rows as A (k-step
  // k: + 32 k bytes, within a swizzle group of 8 chunks: see k_at), Q's rows as B (rows 16 i +
  // (lane & 7) + 8 ((lane >> 4) & 1), chunk + ((lane >> 3) & 1)), V's 16 rows as A^T.
  const int key0 = 16 * warp;
  auto k_at = [&](int k) { return swz<L::QCPR>(key0 + (lane & 15), 2 * k + (lane >> 4)); };
  auto q_at = [&](int i, int k) { return swz<L::QCPR>(16 * i + (lane & 7) + 8 * (lane >> 4), 2 * k + ((lane >> 3) & 1)); };
  auto v_at = [&](int mb) { return swz<L::VCPR>(key0 + (lane & 7) + 8 * (lane >> 4), 2 * mb + ((lane >> 3) & 1)); };

  // the scores' factor into the log2 domain (KV8: K's scale too)
  const float scale = p.sm_scale * kLog2e * (KV8 ? page_scale(p.kv_k_scale, p.kv_scale_stride, hkv) : 1.f);
  const int off = p.seq_kv - p.seq_q;       // causal, bottom-right: query qr sees keys <= qr + off
  float m[NB][2], l[NB][2], o[D / 16][NB][4];
  int vis[NB][2];  // causal: the last key each of this lane's columns sees
#pragma unroll
  for (int j = 0; j < NB; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      m[j][c] = neg_inf();
      l[j][c] = 0.f;
      const DecodeRow dr = decode_row<BM>(p, 8 * j + 2 * tig + c, cc.h, cc.q_tile);
      vis[j][c] = p.causal ? dr.qr + off : p.seq_kv - 1;
    }
#pragma unroll
  for (int mb = 0; mb < D / 16; ++mb)
#pragma unroll
    for (int j = 0; j < NB; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mb][j][e] = 0.f;

  // The scores' factor of each of this lane's columns (KV8 and BF16: with its row's q_unscale).
  float qsc[KV8 && BF16 ? NB : 1][2];
  if constexpr (KV8) {  // Q's rows, which every warp reads (then only each warp's own keys)
    cp_async_wait<AHEAD>();
    __syncthreads();
    if constexpr (BF16)
#pragma unroll
      for (int j = 0; j < NB; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) qsc[j][c] = scale * q_unscale[8 * j + 2 * tig + c];
  }
  for (int t = t0; t < n_tiles; ++t) {
    cp_async_wait<AHEAD - 1>();
    if constexpr (KV8) __syncwarp();  // the warp's own rows (its lanes' copies of tile t landed, its reads of t - 1 done)
    else __syncthreads();
    const int nt = t + AHEAD;
    if (nt < n_tiles) fetch(nt);
    cp_async_commit();
    const u32 sK = sK0 + (t % ST) * Cfg::SMEM_K_STAGE, sV = sV0 + (t % ST) * Cfg::SMEM_V_STAGE;
    const u8* k8 = smem + L::K + (t % R) * F8::TILE;  // KV8: the tile's ring slots
    const u8* v8 = smem + L::V + (t % R) * F8::TILE;

    // S^T: s[j] = keys gid, gid + 8 of the warp's 16 x query rows 8 j + 2 tig, + 1.
    float s[NB][4];
#pragma unroll
    for (int j = 0; j < NB; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
    u32x4 kw[2];  // KV8: the lane's FP8 words of four k-steps
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      u32 a[4];
      if constexpr (KV8) {
        if (k % 4 == 0) F8::k_words(k8, key0, k / 4, gid, tig, kw);
        e4m3x4_to_x2((&kw[0].x)[k % 4], false, a[0], a[2]);
        e4m3x4_to_x2((&kw[1].x)[k % 4], false, a[1], a[3]);
      } else {
        ldsm_x4(a, sK + k_at(k));
      }
#pragma unroll
      for (int i = 0; i < NB / 2; ++i) {
        u32 b[4];
        ldsm_x4(b, sQ + q_at(i, k));
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          if constexpr (MMA_BF16) mma_bf16_f32(s[2 * i + jj], a, b[2 * jj], b[2 * jj + 1]);
          else mma_f16_f32(s[2 * i + jj], a, b[2 * jj], b[2 * jj + 1]);
        }
      }
    }

    // The online softmax of each query column over the warp's 16 keys (log2 domain).
    const int kbase = t * BN + key0 + gid;
    const bool mask = t >= mask_from || (WINDOW && t < mask_before);
    float alpha[NB][2];
    u32 pb[NB][2];  // P^T as the B operand: keys 2 tig, + 1 (b0) and + 8 (b1) of query row gid
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      float pr[4];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float sc = KV8 && BF16 ? qsc[KV8 && BF16 ? j : 0][c] : scale;
        float x0 = s[j][c] * sc, x1 = s[j][c + 2] * sc;
        if (mask) {
          if (kbase > vis[j][c] || kbase >= p.seq_kv || (WINDOW && vis[j][c] - kbase >= p.window)) x0 = neg_inf();
          if (kbase + 8 > vis[j][c] || kbase + 8 >= p.seq_kv || (WINDOW && vis[j][c] - (kbase + 8) >= p.window)) x1 = neg_inf();
        }
        float mx = fmaxf(x0, x1);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float mn = fmaxf(m[j][c], mx);
        const float base = mn == neg_inf() ? 0.f : mn;  // no visible key yet: every P is 0
        alpha[j][c] = ex2(m[j][c] - base);
        m[j][c] = mn;
        pr[c] = ex2(x0 - base);
        pr[c + 2] = ex2(x1 - base);
        l[j][c] = fmaf(l[j][c], alpha[j][c], pr[c] + pr[c + 2]);
      }
      pb[j][0] = movmatrix_t(pack_x2(pr[0], pr[1], MMA_BF16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16));
      pb[j][1] = movmatrix_t(pack_x2(pr[2], pr[3], MMA_BF16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16));
    }

    // O^T = O^T alpha + V^T P^T.
    u32 vw[4][KV8 ? F8::VW : 1];  // KV8: the lane's FP8 words of V's rows 2 tig, + 1, + 8, + 9
#pragma unroll
    for (int mb = 0; mb < KS; ++mb) {
      u32 a[4];
      if constexpr (KV8) {  // pairs of keys' bytes side by side: the A fragment's f16x2 / bf16x2
        constexpr int MPS = 2 * F8::VW;  // m-blocks a segment
        if (mb % MPS == 0) F8::v_words(v8, key0, mb / MPS, gid, tig, vw);
        const int w = (mb % MPS) / 2;
        const u32 sel = mb % 2 ? 0x7362u : 0x5140u;
        e4m3x4_to_x2(__byte_perm(vw[0][w], vw[1][w], sel), false, a[0], a[1]);
        e4m3x4_to_x2(__byte_perm(vw[2][w], vw[3][w], sel), false, a[2], a[3]);
      } else {
        ldsm_x4_t(a, sV + v_at(mb));
      }
#pragma unroll
      for (int j = 0; j < NB; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mb][j][e] *= alpha[j][e % 2];
        if constexpr (MMA_BF16) mma_bf16_f32(o[mb][j], a, pb[j][0], pb[j][1]);
        else mma_f16_f32(o[mb][j], a, pb[j][0], pb[j][1]);
      }
    }
  }

  // ---- the warps meet: their maxima, sums and O^T in shared memory ----------------------------
  // Only the rows of queries are stored and combined (a 4:1 group's one query fills 4 of the 16
  // rows), O^T's rows padded to OS floats so that a warp's stores hit 32 banks (D + 4 = 4 mod 32:
  // lane (gid, tig) at bank 8 tig + gid). A table of the tile's rows, one thread a row, spares the
  // other threads decode_row's divisions: each row's query head (-1: no query there) and query,
  // and the rows of queries in order: NQ queries of each of the tile's heads (packed: of the group's).
  cp_async_wait<0>();
  __syncthreads();
  constexpr int OS = D + 4;
  static_assert(Cfg::SMEM_COMBINE == (4 * BM + NW * BM * (OS + 2)) * 4, "the combine's shared memory");
  int* rqh = reinterpret_cast<int*>(smem);  // [BM] query heads, [BM] queries, [BM] rows of queries
  int* rqr = rqh + BM;
  int* rrow = rqr + BM;
  float* cm = reinterpret_cast<float*>(smem) + 4 * BM;  // [NW][BM] maxima, [NW][BM] sums, [NW][BM][OS] O
  float* cl = cm + NW * BM;
  float* co = cl + NW * BM;
  const CtaCoords ce = cta_coords<true>(p);
  const int NQ = packed ? min_(p.pack_rows, p.seq_q) : min_(BM, p.seq_q - m0);
  const int hpt = packed ? BM / p.pack_rows : 1;                                            // heads a tile
  const int NV = NQ * (packed ? min_(hpt, p.heads_q / p.heads_kv - ce.q_tile * hpt) : 1);  // rows of queries
  if (threadIdx.x < BM) {
    const int r = threadIdx.x;
    const DecodeRow dr = decode_row<BM>(p, r, ce.h, ce.q_tile);
    rqh[r] = dr.ok ? dr.qh : -1;
    rqr[r] = dr.qr;
    if (dr.ok) rrow[packed ? (r / p.pack_rows) * NQ + r % p.pack_rows : r] = r;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < NB; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float x = l[j][c];
      x += __shfl_xor_sync(0xffffffffu, x, 4);
      x += __shfl_xor_sync(0xffffffffu, x, 8);
      x += __shfl_xor_sync(0xffffffffu, x, 16);
      const int r = 8 * j + 2 * tig + c;
      if (rqh[r] < 0) continue;
      if (gid == 0) {
        cm[warp * BM + r] = m[j][c];
        cl[warp * BM + r] = x;
      }
#pragma unroll
      for (int mb = 0; mb < KS; ++mb)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          co[(warp * BM + r) * OS + (KV8 ? F8::o_d(gid, mb, hh) : 16 * mb + gid + 8 * hh)] = o[mb][j][c + 2 * hh];
    }
  __syncthreads();

  // Work items: (row of queries, four columns), those within the call's head dim.
  constexpr int C4 = D / 4;
  const int NI = NV * C4;
  const bool split = p.split_ranges > 0;
  const i64 units = i64(p.batch) * (packed ? p.heads_kv : p.heads_q) * p.q_tiles;
  const i64 u = (i64(ce.b) * (packed ? p.heads_kv : p.heads_q) + ce.h) * p.q_tiles + ce.q_tile;
  float* ml = split ? p.split_o + i64(p.split_ranges) * units * BM * D : nullptr;
  // VARLEN: O and the LSE from the sequence's first query row, its offset read again here (the
  // view leaves them the call's: varlen_paged_view<.., OUT = false>, nothing kept in registers
  // through the main loop, where it cost D=64 its second CTA an SM).
  u8* vo = nullptr;
  float* vl = nullptr;
  if constexpr (VARLEN) {
    const int q0 = min_(max_(__ldg(p.cu_seqlens_q + ce.b), 0), p.lse_stride_h);
    vo = static_cast<u8*>(p.o) + i64(q0) * p.o_stride_n * 2;
    vl = p.lse ? p.lse + q0 : nullptr;
  }
  // KV8: V's scale, with O's normalization.
  const float vsc = KV8 ? page_scale(p.kv_v_scale, p.kv_scale_stride, packed ? ce.h : ce.h / (p.heads_q / p.heads_kv)) : 1.f;
  auto store = [&](int r, int c4, float4 acc, float mx, float sum) {
    const int qh = rqh[r], qr = rqr[r];
    const float inv = sum > 0.f ? vsc / sum : 0.f;
    u8* dst = static_cast<u8*>(VARLEN ? vo : p.o) + (ce.b * p.o_stride_b + qh * p.o_stride_h + i64(qr) * p.o_stride_n + c4) * 2;
    *reinterpret_cast<u32x2*>(dst) = u32x2{pack_x2(acc.x * inv, acc.y * inv, p.dtype), pack_x2(acc.z * inv, acc.w * inv, p.dtype)};
    if (p.lse && c4 == 0)
      (VARLEN ? vl : p.lse)[VARLEN ? i64(qh) * p.lse_stride_h + qr : (i64(ce.b) * p.heads_q + qh) * p.seq_q + qr] =
          sum > 0.f ? (mx + lg2(sum)) * kLn2 : neg_inf();
  };
  for (int it = threadIdx.x; it < NI; it += Cfg::THREADS) {
    const int r = rrow[it / C4], c4 = (it % C4) * 4;
    if (c4 >= p.head_dim) continue;
    float mx = neg_inf();
#pragma unroll
    for (int w = 0; w < NW; ++w) mx = fmaxf(mx, cm[w * BM + r]);
    const float base = mx == neg_inf() ? 0.f : mx;
    float sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float wt = ex2(cm[w * BM + r] - base);  // 0 for a warp that saw no key of this row
      sum = fmaf(wt, cl[w * BM + r], sum);
      const float4 x = *reinterpret_cast<const float4*>(co + (w * BM + r) * OS + c4);
      acc = make_float4(fmaf(wt, x.x, acc.x), fmaf(wt, x.y, acc.y), fmaf(wt, x.z, acc.z), fmaf(wt, x.w, acc.w));
    }
    if (!split) {
      store(r, c4, acc, mx, sum);
    } else {  // this range's partial: O (unnormalized), then the row's maximum and sum
      const i64 i = (i64(split_index(p)) * units + u) * BM + r;
      *reinterpret_cast<float4*>(p.split_o + i * D + c4) = acc;
      if (c4 == 0) *reinterpret_cast<float2*>(ml + 2 * i) = make_float2(mx, sum);
    }
  }
  if (!split) return;

  // The tile's last NM ranges merge every range's partial, each a share of the items, once the
  // others have flagged theirs (each flag = this call's generation). NM > 1 where one CTA's
  // threads would take more than two round trips to L2 each (a large tile, few units: MQA at
  // head dim 256 over 64 ranges, 32 before): every range then flags, and each merger, once it
  // has seen every other flag, adds one to the last range's; the one that brings it to
  // generation + NM - 1 has seen the others pass their waits, and puts the flags back to 0 for a
  // CUDA graph's replays, whose calls share one generation. The GPU starts a tile's ranges in
  // order and the launcher keeps them within one wave, so no CTA waits for one that cannot start.
  const int S = p.split_ranges, rr = split_index(p);
  constexpr int MB = kMergeBatch;  // ranges whose loads are in flight together
  const int trips = ((NI + Cfg::THREADS - 1) / Cfg::THREADS) * ((S + MB - 1) / MB);
  const int NM = min_(S, max_(1, min_(kMaxMergers, (trips + 1) / 2)));
  unsigned long long* flags = p.sync + u * S;
  const unsigned long long gen = p.generation;
  __threadfence();
  __syncthreads();
  if (rr < S - NM || NM > 1) {
    if (threadIdx.x == 0) st_release(flags + rr, gen);
    if (rr < S - NM) return;
  }
  for (int f = threadIdx.x; f < S; f += Cfg::THREADS) {
    if (f == rr || (NM == 1 && f == S - 1)) continue;
    while (ld_acquire(flags + f) - gen >= unsigned(NM)) __nanosleep(32);  // gen .. gen + NM - 1
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long seen = NM == 1 ? gen : atomicAdd(flags + (S - 1), 1ull);
    if (seen == gen + NM - 1)
      for (int f = 0; f < S; ++f) flags[f] = 0ull;
  }
  __syncthreads();
  __threadfence();
  // The merge, on every thread of each merger, over its share of the items [I0, I1): with
  // fewer items than threads, PT parts of the threads take every PT-th range each (all of a
  // part's loads in flight together where it has at most MB ranges: one round trip to L2), and
  // meet in shared memory (the combine's, read above).
  const int mj = rr - (S - NM), I0 = NI * mj / NM, I1 = NI * (mj + 1) / NM, NS = I1 - I0;
  const int PT = max_(1, min_(Cfg::THREADS / max_(NS, 1), (S + MB - 1) / MB));
  float4* racc = reinterpret_cast<float4*>(co);  // [PT][NS]: a part's O, then its maxima and sums
  float2* rml = reinterpret_cast<float2*>(racc + PT * NS);
  for (int t = threadIdx.x; t < NS * PT; t += Cfg::THREADS) {
    const int part = PT == 1 ? 0 : t / NS, it = I0 + t - part * NS;
    const int r = rrow[it / C4], c4 = (it % C4) * 4;
    if (c4 >= p.head_dim) continue;
    // An online merge over batches of ranges, each batch's loads in flight together.
    const i64 at0 = u * BM + r, stride = units * BM;
    float mx = neg_inf(), sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r0 = part; r0 < S; r0 += MB * PT) {
      float2 x[MB];
      float4 v[MB];
#pragma unroll
      for (int jb = 0; jb < MB; ++jb) {
        const int ri = r0 + jb * PT;
        const i64 at = at0 + ri * stride;
        if (ri < S) {
          x[jb] = __ldcg(reinterpret_cast<const float2*>(ml + 2 * at));
          v[jb] = __ldcg(reinterpret_cast<const float4*>(p.split_o + at * D + c4));
        } else {
          x[jb] = make_float2(neg_inf(), 0.f);
          v[jb] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
      float bm = mx;
#pragma unroll
      for (int jb = 0; jb < MB; ++jb) bm = fmaxf(bm, x[jb].x);
      const float base = bm == neg_inf() ? 0.f : bm;
      const float sc = ex2(mx - base);
      sum *= sc;
      acc = make_float4(acc.x * sc, acc.y * sc, acc.z * sc, acc.w * sc);
#pragma unroll
      for (int jb = 0; jb < MB; ++jb) {
        const float wt = ex2(x[jb].x - base);  // 0 for a range without visible keys
        sum = fmaf(wt, x[jb].y, sum);
        acc = make_float4(fmaf(wt, v[jb].x, acc.x), fmaf(wt, v[jb].y, acc.y), fmaf(wt, v[jb].z, acc.z),
                          fmaf(wt, v[jb].w, acc.w));
      }
      mx = bm;
    }
    if (PT == 1) {
      store(r, c4, acc, mx, sum);
    } else {
      racc[t] = acc;
      rml[t] = make_float2(mx, sum);
    }
  }
  if (PT == 1) return;
  __syncthreads();
  for (int i = threadIdx.x; i < NS; i += Cfg::THREADS) {
    const int it = I0 + i;
    if ((it % C4) * 4 >= p.head_dim) continue;
    float mx = neg_inf();
    for (int q = 0; q < PT; ++q) mx = fmaxf(mx, rml[q * NS + i].x);
    const float base = mx == neg_inf() ? 0.f : mx;
    float sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int q = 0; q < PT; ++q) {
      const float2 x = rml[q * NS + i];
      const float4 a = racc[q * NS + i];
      const float wt = ex2(x.x - base);  // 0 for a part without visible keys
      sum = fmaf(wt, x.y, sum);
      acc = make_float4(fmaf(wt, a.x, acc.x), fmaf(wt, a.y, acc.y), fmaf(wt, a.z, acc.z), fmaf(wt, a.w, acc.w));
    }
    store(rrow[it / C4], (it % C4) * 4, acc, mx, sum);
  }
}

}  // namespace mma_attn
}  // namespace sage
