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
// Causal: tiles past the diagonal are skipped, only the diagonal (and the tail) tiles masked.
#pragma once
#include "sage/device/attn_config.cuh"
#include "sage/device/epilogue.cuh"
#include "sage/device/mma_sm80.cuh"
#include "sage/device/softmax.cuh"

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
SAGE_DEV CtaCoords cta_coords(const SageAttnParams& p) {
  if (!p.causal) return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
  const int pair = int(blockIdx.z * gridDim.x + blockIdx.x);
  return {p.q_tiles - 1 - int(blockIdx.y), pair % p.heads_q, pair / p.heads_q};
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
  static_assert(K_ROWS_PER_PASS % 8 == 0 || K_CHUNKS <= T, "swizzle phase must repeat across passes");
  static_assert(V_ROWS_PER_PASS % 8 == 0 || V_CHUNKS <= T, "swizzle phase must repeat across passes");

  u32 k_dst, v_dst;      // shared-memory offsets of this thread's first chunk
  u32 k_src;             // byte offset of its first K chunk within a tile
  i64 v_src;             // byte offset of its first V chunk within a tile (row part)
  i64 v_pass_stride;     // bytes between this thread's V chunks
  int v_row0;            // its first V row (FP16 V: for the zero-fill check)

  SAGE_DEV void init(const VSource& vs) {
    const int tid = threadIdx.x;
    const int kr = tid / L::QCPR, kc = tid % L::QCPR;
    k_dst = swz<L::QCPR>(kr, kc);
    k_src = kr * Cfg::QROW + kc * 16;
    const int vr = tid / L::VCPR, vc = tid % L::VCPR;
    v_dst = swz<L::VCPR>(vr, vc);
    v_src = i64(vr) * vs.row_stride + vc * 16;
    v_pass_stride = i64(V_ROWS_PER_PASS) * vs.row_stride;
    v_row0 = vr;
  }

  SAGE_DEV void load(const u8* gK, const VSource& vs, int tile, u32 sK, u32 sV) const {
    const u8* k = gK + i64(tile) * Cfg::BN * Cfg::QROW + k_src;
#pragma unroll
    for (int i = 0; i < cdiv(K_CHUNKS, T); ++i)
      if (K_CHUNKS % T == 0 || threadIdx.x + i * T < K_CHUNKS)
        cp_async16(sK + k_dst + i * T * 16, k + i * K_ROWS_PER_PASS * Cfg::QROW);
    if constexpr (Cfg::V8) {
      const u8* v = vs.base + i64(tile) * Cfg::BN + v_src;
#pragma unroll
      for (int i = 0; i < cdiv(V_CHUNKS, T); ++i)
        if (V_CHUNKS % T == 0 || threadIdx.x + i * T < V_CHUNKS)
          cp_async16(sV + v_dst + i * T * 16, v + i * v_pass_stride);
    } else {
      const int n0 = tile * Cfg::BN;
      const u8* v = vs.base + i64(n0) * vs.row_stride + v_src;
      const bool full = n0 + Cfg::BN <= vs.rows_valid;
#pragma unroll
      for (int i = 0; i < cdiv(V_CHUNKS, T); ++i) {
        if (V_CHUNKS % T == 0 || threadIdx.x + i * T < V_CHUNKS) {
          const bool ok = full || n0 + v_row0 + i * V_ROWS_PER_PASS < vs.rows_valid;
          cp_async16(sV + v_dst + i * T * 16, ok ? v + i * v_pass_stride : vs.base, ok ? 16 : 0);
        }
      }
    }
  }
};

// Per-lane ldmatrix offsets, computed once. Within a 16-row block the swizzle phase of a
// lane's row depends only on the lane, so the offsets for other row blocks and chunk groups
// are these plus compile-time constants (folded into the instructions' immediates).
template <class Cfg>
struct LaneOffsets {
  using L = Layout<Cfg>;
  static constexpr int VK = Cfg::V8 ? Cfg::BN / 32 : (Cfg::D / 16 < 4 ? Cfg::D / 16 : 4);
  u32 k[Cfg::QK_KSTEPS];
  u32 v[VK];
  SAGE_DEV void init() {
    const int lane = threadIdx.x % 32;
    const int row = (lane & 7) + 8 * (lane >> 4), b = (lane >> 3) & 1;
#pragma unroll
    for (int i = 0; i < Cfg::QK_KSTEPS; ++i) k[i] = swz<L::QCPR>(row, 2 * i + b);
    if constexpr (Cfg::V8) {
#pragma unroll
      for (int i = 0; i < VK; ++i) v[i] = swz<L::VCPR>(row, 2 * i + b);
    } else {
      const int trow = (lane & 7) + 8 * ((lane >> 3) & 1), hb = lane >> 4;
#pragma unroll
      for (int i = 0; i < VK; ++i) v[i] = swz<L::VCPR>(trow, 2 * i + hb);
    }
  }
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

// Scores of one tile, as the QK^T MMAs leave them (int32), plus the smooth-Q correction.
template <class Cfg>
struct TileScores {
  static constexpr int NT = Cfg::BN / 8;
  i32 s[Cfg::SLABS][NT][4];
  i32 ds[Cfg::SMOOTH_Q ? NT : 1][4];
};

// S = Q K^T for one tile (and dS = q_mean K^T when smoothing Q).
template <class Cfg>
SAGE_DEV void qk_tile(TileScores<Cfg>& S, const u32 (&qf)[Cfg::SLABS][Cfg::QK_KSTEPS][4],
                      const u32 (&qbar)[Cfg::QK_KSTEPS][4], u32 sK, const LaneOffsets<Cfg>& lo) {
  using L = Layout<Cfg>;
  constexpr int SL = Cfg::SLABS, NT = Cfg::BN / 8;
  auto& s = S.s;
  auto& ds = S.ds;
#pragma unroll
  for (int a = 0; a < SL; ++a)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[a][n][e] = 0;
  if constexpr (Cfg::SMOOTH_Q) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = 0;
  }
#pragma unroll
  for (int p2 = 0; p2 < NT / 2; ++p2) {
#pragma unroll
    for (int k = 0; k < Cfg::QK_KSTEPS; ++k) {
      u32 kf[4];
      ldsm_x4(kf, sK + lo.k[k] + p2 * 16 * L::QCPR * 16);
#pragma unroll
      for (int a = 0; a < SL; ++a) {
        if constexpr (Cfg::INT4) {
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
// of P before rounding, for the LSE.
template <class Cfg, bool MASK, bool LSE_SUMS>
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
#pragma unroll
    for (int dc = 0; dc < D / 8 / DCH; ++dc) {
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
      if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int a = 0; a < SL; ++a)
#pragma unroll
          for (int j = 0; j < D / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) st.o[a][j][e] *= alpha[a][e / 2];
      }
#pragma unroll
      for (int k = 0; k < KK; ++k)
#pragma unroll
        for (int q = 0; q < D / 16; ++q) {
          u32 vf[4];
          ldsm_x4_t(vf, sV + lo.v16(q) + 16 * k * L::VCPR * 16);
#pragma unroll
          for (int a = 0; a < SL; ++a) {
            mma_f16_f32(st.o[a][2 * q], pa[a][k], vf[0], vf[1]);
            mma_f16_f32(st.o[a][2 * q + 1], pa[a][k], vf[2], vf[3]);
          }
        }
    } else {  // fp16 accumulators, flushed into FP32 O once per tile
      constexpr int DCH = D / 8 < 8 ? D / 8 : 8;
#pragma unroll
      for (int dc = 0; dc < D / 8 / DCH; ++dc) {
        u32 acc[SL][DCH][2];
#pragma unroll
        for (int a = 0; a < SL; ++a)
#pragma unroll
          for (int j = 0; j < DCH; ++j) acc[a][j][0] = acc[a][j][1] = 0u;
#pragma unroll
        for (int k = 0; k < KK; ++k)
#pragma unroll
          for (int q = 0; q < DCH / 2; ++q) {
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
              const u32 w = acc[a][j][e / 2];
              const float v = (e & 1) ? f16_to_f32(u16(w >> 16)) : f16_to_f32(u16(w & 0xffff));
              st.o[a][dc * DCH + j][e] = fmaf(st.o[a][dc * DCH + j][e], alpha[a][e / 2], v);
            }
      }
    }
  }
}

// grid (q_tiles, Hq, B) (causal: mma_attn::cta_coords), Cfg::THREADS threads,
// Cfg::SMEM_BYTES dynamic shared memory. LSE_SUMS: see softmax_pv (int8 P.V only; the
// launcher picks that entry when p.lse is set).
template <class Cfg, bool LSE_SUMS = false>
SAGE_DEV void attn_kernel(const SageAttnParams& p) {
  static_assert(!LSE_SUMS || Cfg::V_INT8, "separate LSE sums are the int8 P.V path's");
  static_assert(Cfg::SCHED == Schedule::plain || Cfg::SCHED == Schedule::overlap,
                "the warp-specialized schedules are the wgmma pipeline's");
  using L = Layout<Cfg>;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, SL = Cfg::SLABS, ST = Cfg::STAGES;
  extern __shared__ __align__(128) u8 smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const CtaCoords cc = cta_coords(p);
  const int q_tile = cc.q_tile, h = cc.h, b = cc.b;
  const int hkv = h / (p.heads_q / p.heads_kv);
  const int m0 = q_tile * BM;
  const int row0 = m0 + warp * Cfg::WARP_Q;

  int n_tiles, mask_from;
  kv_range(p, m0, BM, BN, &n_tiles, &mask_from);

  const i64 q_tile_id = (i64(b) * p.heads_q + h) * p.q_tiles + q_tile;
  const i64 kv_bh = i64(b) * p.heads_kv + hkv;
  const u8* gQ = reinterpret_cast<const u8*>(p.q_quant) + q_tile_id * BM * Cfg::QROW;
  const u8* gK = reinterpret_cast<const u8*>(p.k_quant) + kv_bh * p.k_tiles * BN * Cfg::QROW;
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
    vs.base = static_cast<const u8*>(p.v.ptr) + (b * p.v.stride_b + hkv * p.v.stride_h) * 2;
    vs.row_stride = p.v.stride_n * 2;
    vs.rows_valid = p.seq_kv;
  }

  const u32 sQ = smem_addr(smem + L::Q);
  const u32 sK0 = smem_addr(smem + L::K);
  const u32 sV0 = smem_addr(smem + L::V);
  KvLoader<Cfg> ld;
  ld.init(vs);
  LaneOffsets<Cfg> lo;
  lo.init();
  for (int c = threadIdx.x; c < BM * L::QCPR; c += Cfg::THREADS) {
    const int r = c / L::QCPR, cc = c % L::QCPR;
    cp_async16(sQ + swz<L::QCPR>(r, cc), gQ + r * Cfg::QROW + cc * 16);
  }
  cp_async_commit();
  if constexpr (ST > 1) {
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
      if (s < n_tiles) ld.load(gK, vs, s, sK0 + s * Cfg::SMEM_K_STAGE, sV0 + s * Cfg::SMEM_V_STAGE);
      cp_async_commit();
    }
    cp_async_wait<Cfg::SCHED == Schedule::overlap ? ST - 2 : ST - 1>();  // overlap: tile 0 too
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();

  u32 qf[SL][Cfg::QK_KSTEPS][4];
#pragma unroll
  for (int a = 0; a < SL; ++a)
#pragma unroll
    for (int k = 0; k < Cfg::QK_KSTEPS; ++k)
      ldsm_x4(qf[a][k], sQ + swz<L::QCPR>(warp * Cfg::WARP_Q + 16 * a + (lane & 15), 2 * k + (lane >> 4)));
  int qg = 0;
  if constexpr (Cfg::GRAN == Gran::per_thread) qg = warp * 8 + gid;
  else if constexpr (Cfg::GRAN == Gran::per_warp) qg = warp;
  const float qs = p.q_scale[q_tile_id * Cfg::Q_GROUPS + qg];
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
    for (int t = 0; t < n_tiles; ++t) {
      int slot;
      if constexpr (ST == 1) {
        __syncthreads();
        ld.load(gK, vs, t, sK0, sV0);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        slot = 0;
      } else {
        cp_async_wait<ST - 2>();
        __syncthreads();
        const int nt = t + ST - 1;
        if (nt < n_tiles) {
          const int ns = nt % ST;
          ld.load(gK, vs, nt, sK0 + ns * Cfg::SMEM_K_STAGE, sV0 + ns * Cfg::SMEM_V_STAGE);
        }
        cp_async_commit();
        slot = t % ST;
      }
      const float ks = kscale[t * Cfg::K_GROUPS];
      TileScores<Cfg> S;
      qk_tile<Cfg>(S, qf, qbar, sK0 + slot * Cfg::SMEM_K_STAGE, lo);
      const u32 sV = sV0 + slot * Cfg::SMEM_V_STAGE;
      if (t >= mask_from)
        softmax_pv<Cfg, true, LSE_SUMS>(p, st, S, qs, qbar_scale, ks, sV, t, row0, lo);
      else
        softmax_pv<Cfg, false, LSE_SUMS>(p, st, S, qs, qbar_scale, ks, sV, t, row0, lo);
    }
  } else {
    // Overlap: tiles t and t+1 are resident while iteration t runs QK^T of t+1 and the
    // softmax and PV of t; the load issued in iteration t refills the slot of t-1.
    TileScores<Cfg> cur;
    if (n_tiles > 0) qk_tile<Cfg>(cur, qf, qbar, sK0, lo);
    for (int t = 0; t < n_tiles; ++t) {
      cp_async_wait<ST - 3>();
      __syncthreads();
      const int nt = t + ST - 1;
      if (nt < n_tiles) {
        const int ns = nt % ST;
        ld.load(gK, vs, nt, sK0 + ns * Cfg::SMEM_K_STAGE, sV0 + ns * Cfg::SMEM_V_STAGE);
      }
      cp_async_commit();
      TileScores<Cfg> next;
      if (t + 1 < n_tiles) qk_tile<Cfg>(next, qf, qbar, sK0 + ((t + 1) % ST) * Cfg::SMEM_K_STAGE, lo);
      const float ks = kscale[t * Cfg::K_GROUPS];
      const u32 sV = sV0 + (t % ST) * Cfg::SMEM_V_STAGE;
      if (t >= mask_from)
        softmax_pv<Cfg, true, LSE_SUMS>(p, st, cur, qs, qbar_scale, ks, sV, t, row0, lo);
      else
        softmax_pv<Cfg, false, LSE_SUMS>(p, st, cur, qs, qbar_scale, ks, sV, t, row0, lo);
      cur = next;
    }
  }

  // ---- epilogue ----------------------------------------------------------------------------
  cp_async_wait<0>();
  __syncthreads();
  // The CTA's coordinates again (cheaper than keeping them live through the mainloop).
  const CtaCoords ce = cta_coords(p);
  epilogue::store<Cfg, SL>(p, st.m, st.l, st.o, ce.b, ce.h, ce.kv_bh(p), warp, row0, smem, LSE_SUMS ? st.lx : nullptr);
}

}  // namespace mma_attn
}  // namespace sage
