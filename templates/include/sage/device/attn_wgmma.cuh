// The Hopper pipeline (sm_90a): wgmma tensor-core MMAs issued by warpgroups of 64 query rows.
//   S = Q K^T        wgmma m64nBNk32 s8: Q and K from shared memory (K-major, swizzled)
//   softmax          softmax.cuh, on the accumulators (same per-lane layout as mma.sync)
//   O += P V         wgmma m64nDk32 e4m3 with P from registers (the FP8 A fragment takes
//                    P in the order the preparation permuted V's tokens for) and V^T from
//                    shared memory, into a fresh FP32 accumulator added into O (two-level);
//                    or (pv int8) u8 P x INT8 V^T into a fresh int32 accumulator, exact over
//                    the tile, converted and added into O
// K/V tiles stream through a cp.async ring whose XOR layout (swz<>) is wgmma's 128-byte /
// 64-byte swizzle, so the same tiles serve as wgmma operands through descriptors.
#pragma once
#include "sage/device/attn_mma.cuh"
#include "sage/device/tma_sm90.cuh"
#include "sage/device/wgmma_sm90.cuh"

namespace sage {

// One to three consumer warpgroups (64 rows each); the preparation kernels see it as an
// mma-style config with 16 query rows per warp, which is the wgmma accumulator's layout.
template <int HEAD_DIM, int BLOCK_N, int WARPGROUPS, int STAGES_, Gran GRAN_, bool SMOOTH_K_, bool SMOOTH_V_,
          Schedule SCHED_ = Schedule::plain, int MIN_CTAS_ = 1, bool HALF_EXP_ = false, bool TMA_ = false,
          bool SUM_MMA_ = false, bool FUSE_Q_ = false, bool PV_INT8_ = false>
struct WgmmaAttnConfig
    : MmaAttnConfig<HEAD_DIM, 64 * WARPGROUPS, BLOCK_N, 4 * WARPGROUPS, STAGES_, QkType::int8,
                    PV_INT8_ ? PvType::int8 : PvType::fp8, GRAN_, SMOOTH_K_, /*smooth_q=*/false, SMOOTH_V_, SCHED_,
                    MIN_CTAS_, HALF_EXP_> {
  using Base = MmaAttnConfig<HEAD_DIM, 64 * WARPGROUPS, BLOCK_N, 4 * WARPGROUPS, STAGES_, QkType::int8,
                             PV_INT8_ ? PvType::int8 : PvType::fp8, GRAN_, SMOOTH_K_, false, SMOOTH_V_, SCHED_,
                             MIN_CTAS_, HALF_EXP_>;
  static constexpr int WGS = WARPGROUPS;
  // P V in INT8 (pv int8): P rounded to u8 (x255), V INT8 per channel (the preparation's int8
  // V^T, tokens permuted as for FP8), wgmma m64nNk32 s32.u8.s8 into a fresh int32 accumulator
  // per tile: the tile's sum is exact (|x| <= BN * 255 * 127 < 2^22) and is converted once
  // (I2FP) and added into O. Its row sums are those of the rounded P, on the tensor cores
  // (sum_mma, against INT8 ones), so O's normalizer matches what was multiplied; the LSE takes
  // FP32 sums of P before rounding (the entry sage_attn_lse).
  static constexpr bool PV_INT8 = PV_INT8_;
  // K/V (and Q) tiles arrive by TMA into an mbarrier-tracked ring instead of per-thread cp.async.
  static constexpr bool TMA = TMA_;
  // Warp-specialized (pingpong): a producer warpgroup issues the TMA loads and gives its
  // registers to the two consumer warpgroups, which own the query rows.
  static constexpr bool WS = is_ws(SCHED_);
  static constexpr int THREADS = Base::THREADS + (WS ? 128 : 0);
  // Row sums of P on the tensor cores: with every k-step of P V, one more wgmma m64n8k32
  // multiplies the same P fragment by 8 columns of FP8 ones (a 512-byte block after the ring,
  // written once), so each lane gets its rows' whole sums of exactly the FP8 P that was
  // multiplied. The softmax then adds nothing up (64 FADDs per lane and 64x128 tile fewer).
  static constexpr bool SUM_MMA = SUM_MMA_;
  static constexpr bool ROW_SUMS_COMPLETE = SUM_MMA;
  static constexpr int ONES_BYTES = SUM_MMA ? 512 : 0;
  // Q quantized by the attention kernel (the preparation leaves Q alone): the CTA loads its
  // FP16/BF16 Q tile by TMA from the caller's tensor, quantizes it with the per-thread groups
  // its lanes own into the INT8 Q tile, and only then runs Q K^T. The one-warpgroup kernel
  // stages it in V slot 1 (64 rows x D x 2 bytes = one 128-key V^T tile) and loads V tile 1
  // there afterwards (first needed by P V of tile 1), so that three CTAs still share an SM;
  // the kernels of several warpgroups (one CTA per SM: the shared ring's turns and plain
  // schedules, ws_overlap) have a buffer of their own after the ring (RAW_Q_BYTES: BM rows x
  // D x 2 bytes), so that no K/V load waits for the quantization (with the Q tile in V slots
  // 1-3, the shared ring's 16K-key calls lost in the kernel what the preparation saved).
  static constexpr bool FUSE_Q = FUSE_Q_;
  static_assert(!FUSE_Q || (TMA && BLOCK_N == 128 && STAGES_ >= 2 && GRAN_ == Gran::per_thread &&
                            ((!WS && (SCHED_ == Schedule::plain || SCHED_ == Schedule::turns)) ||
                             SCHED_ == Schedule::ws_overlap)),
                "fuse_q: TMA, 128-key tiles, 2+ stages, per-thread groups; the plain, turns or ws_overlap kernel");
  // Without Q jobs to quantize (the attention kernel does), the preparation's K and V jobs fit
  // 64 registers at D=128 too: four CTAs per SM instead of three.
  static constexpr int PREP_MIN_BLOCKS = FUSE_Q && HEAD_DIM <= 128 ? 4 : Base::PREP_MIN_BLOCKS;
  // The preparation of variable-length batches (sage_prep_varlen): each job's sequence view and
  // the search for a K tile's sequence spill at those caps (D=64 at 64 registers, D=128 at 80).
  static constexpr int PREP_VARLEN_MIN_BLOCKS = HEAD_DIM <= 64 ? 3 : HEAD_DIM <= 128 ? 2 : 1;
  static constexpr int RAW_Q_BYTES = FUSE_Q && WARPGROUPS > 1 ? 64 * WARPGROUPS * HEAD_DIM * 2 : 0;
  // The raw Q buffer (1 KiB aligned, as the 128B swizzle needs) then the ones block, after the ring.
  static constexpr int RAW_Q_OFF = Base::SMEM_MAIN;
  static constexpr int ONES_OFF = Base::SMEM_MAIN + RAW_Q_BYTES;
  static constexpr int SMEM_MAIN = Base::SMEM_MAIN + ONES_BYTES + RAW_Q_BYTES;
  static_assert(!SUM_MMA || (TMA && !WS), "sum_mma: the TMA kernel of the plain and turns schedules");
  static_assert(!SUM_MMA || !HALF_EXP_, "sum_mma takes the FP32 exponentials");
  static_assert(!PV_INT8 || (SUM_MMA && HEAD_DIM <= 128), "pv int8: the sum_mma kernels (row sums of the rounded P), head dim 64 or 128");
  static_assert(!ws_intra(SCHED_) || !HALF_EXP_, "the overlapped warp-specialized softmax takes the FP32 exponentials");
  static_assert(!TMA || SCHED_ != Schedule::overlap, "the TMA loader serves the plain and pingpong schedules");
  static_assert(SCHED_ != Schedule::turns || (TMA && WARPGROUPS >= 2),
                "turns: two or three warpgroups taking turns at a shared TMA ring");
  static_assert(!WS || (TMA && WARPGROUPS == 2 && MIN_CTAS_ == 1),
                "warp-specialized schedules: TMA loads, two consumer warpgroups, one CTA per SM");
  // The swizzle atoms need 1024-byte aligned tiles: the kernel aligns the dynamic shared
  // memory's base itself, with up to 1 KiB of slack.
  static constexpr int SMEM_BYTES = (SMEM_MAIN > Base::SMEM_EPI ? SMEM_MAIN : Base::SMEM_EPI) + 1024;
  static_assert(BLOCK_N == 64 || BLOCK_N == 128, "wgmma n = BLOCK_N is instantiated for 64 and 128");
  // Q/K tiles as wgmma and TMA take them: boxes of QK_BOX-byte rows ([box][rows][QK_BOX]), one
  // 128B swizzle atom column and one TMA box each. Rows of up to 128 bytes are one box; the
  // 256-byte INT8 rows of head_dim 256 are two.
  static constexpr int QK_BOX = Base::QROW > 128 ? 128 : Base::QROW;
  static constexpr int QK_BOXES = Base::QROW / QK_BOX;
  // P V into fresh accumulators of PV_N columns: all of D up to 128; at head_dim 256 (O alone
  // is 128 registers a thread) four quarters of 64, two in flight, each added into O as it lands.
  static constexpr int PV_N = HEAD_DIM > 128 ? 64 : HEAD_DIM;
  static_assert(HEAD_DIM != 256 || (TMA && SCHED_ == Schedule::plain && !SUM_MMA_),
                "head_dim 256 (quantized): the TMA kernel of the plain schedule, without sum_mma");
  static_assert(Base::SMEM_Q % 1024 == 0 && Base::SMEM_K_STAGE % 1024 == 0 && Base::SMEM_V_STAGE % 1024 == 0,
                "tiles must keep 1024-byte alignment");
};

namespace wgmma_attn {
using namespace dev;
using mma_attn::KvLoader;
using mma_attn::Layout;

template <int N>
SAGE_DEV void qk_mma(i32 (&d)[N / 2], u64 da, u64 db, int acc) {
  if constexpr (N == 64) wgmma_s8_m64n64k32(d, da, db, acc);
  else wgmma_s8_m64n128k32(d, da, db, acc);
}
template <int N>
SAGE_DEV void pv_mma(float (&d)[N / 2], const u32 (&a)[4], u64 db, int acc) {
  if constexpr (N == 64) wgmma_e4m3_m64n64k32(d, a, db, acc);
  else if constexpr (N == 96) wgmma_e4m3_m64n96k32(d, a, db, acc);
  else wgmma_e4m3_m64n128k32(d, a, db, acc);
}
template <int N>
SAGE_DEV void pv_mma(i32 (&d)[N / 2], const u32 (&a)[4], u64 db, int acc) {
  if constexpr (N == 64) wgmma_u8s8_m64n64k32_rs(d, a, db, acc);
  else if constexpr (N == 96) wgmma_u8s8_m64n96k32_rs(d, a, db, acc);
  else wgmma_u8s8_m64n128k32_rs(d, a, db, acc);
}
// P's row sums against the ones block (sum_mma): FP8, or exact int32 for u8 P.
SAGE_DEV void sum_mma(float (&d)[4], const u32 (&a)[4], u64 db, int acc) { wgmma_e4m3_m64n8k32(d, a, db, acc); }
SAGE_DEV void sum_mma(i32 (&d)[4], const u32 (&a)[4], u64 db, int acc) { wgmma_u8s8_m64n8k32_rs(d, a, db, acc); }
// A P V accumulator element as a float: FP32 as is; the int32 tile sum (|x| < 2^22: exact) by
// cvt.rn.f32.s32 (one I2FP on sm_90; the magic-number form, an integer add and a float
// subtraction, measured 1-3% slower on the H100: two instructions where the kernel is bound by
// its instruction issue, docs/kernels.md 2026-11-28 (ad)).
SAGE_DEV float acc_f(float x) { return x; }
SAGE_DEV float acc_f(i32 x) { return float(x); }
// P V's accumulator type: FP32 (FP8 P V) or int32 (u8 P x INT8 V).
template <class Cfg> using PvAcc = typename mma_attn::P8Acc<Cfg::PV_INT8>::type;

template <int N>
SAGE_DEV void qk_mma_rs(i32 (&d)[N / 2], const u32 (&a)[4], u64 db, int acc) {
  if constexpr (N == 64) wgmma_s8_m64n64k32_rs(d, a, db, acc);
  else wgmma_s8_m64n128k32_rs(d, a, db, acc);
}

// This warp's 16 Q rows (from `row` of the CTA's tile in shared memory) as wgmma A fragments:
// per 32-byte k-step, rows gid and gid + 8, bytes 4 tig.. and 16 + 4 tig.. (the m16n8k32
// layout), read through the tile's swizzle.
template <class Cfg, int KS>
SAGE_DEV void load_q_frags(u32 (&qa)[KS][4], const u8* smem, int row) {
  using L = Layout<Cfg>;
  static_assert(KS == Cfg::QK_KSTEPS, "every k-step");
  static_assert(Cfg::QK_BOXES == 1, "Q fragments from rows of one box");
  load_a_frags(qa, smem + L::Q, row, [](int r, int c) { return swz<L::QCPR>(r, c); });
}

// The shared-memory descriptors of Q/K tiles (K-major rows of QROW bytes) and of V^T tiles
// (rows of BLOCK_N bytes) from their low words (desc_lo: the kernels keep one 32-bit low word
// per operand and add offsets for k-steps and slots).
template <class Cfg>
SAGE_DEV u64 qk_desc(u32 lo) {
  return desc_from_lo(lo, 8 * Cfg::QK_BOX, wgmma_swizzle_mode(Cfg::QK_BOX));
}
// The descriptor low-word offset of Q/K k-step k (32 bytes each) in a tile of ROWS rows: within
// a box, then the next box (ROWS x QK_BOX bytes further) past its row bytes.
template <class Cfg, int ROWS>
SAGE_DEV constexpr u32 qk_kstep(int k) {
  return u32((k * 32 / Cfg::QK_BOX) * ROWS * Cfg::QK_BOX + (k * 32) % Cfg::QK_BOX) / 16;
}
template <class Cfg>
SAGE_DEV u64 v_desc(u32 lo) {
  return desc_from_lo(lo, 8 * Cfg::BN, wgmma_swizzle_mode(Cfg::BN));
}

// S = Q K^T with Q from registers: the tensor cores read only K from shared memory.
template <class Cfg, int KS>
SAGE_DEV void qk_issue_rs(i32 (&s)[1][Cfg::BN / 8][4], const u32 (&qa)[KS][4], u32 sK) {
  const u32 dK = desc_lo(sK);
  i32(&sf)[Cfg::BN / 2] = reinterpret_cast<i32(&)[Cfg::BN / 2]>(s);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < Cfg::QK_KSTEPS; ++k) qk_mma_rs<Cfg::BN>(sf, qa[k], qk_desc<Cfg>(dK + qk_kstep<Cfg, Cfg::BN>(k)), k > 0);
}

// Issues S = Q K^T for one tile from Q's and K's descriptor low words (asynchronous: the
// caller commits and waits), over the first KS k-steps (of 32 bytes): all of them, or at head
// dim 256 those that hold the call's columns (the rest of Q's and K's bytes are not read).
template <class Cfg, int KS = Cfg::QK_KSTEPS>
SAGE_DEV void qk_issue_d(i32 (&s)[1][Cfg::BN / 8][4], u32 dQ, u32 dK) {
  static_assert(KS > 0 && KS <= Cfg::QK_KSTEPS, "k-steps of the tile");
  i32(&sf)[Cfg::BN / 2] = reinterpret_cast<i32(&)[Cfg::BN / 2]>(s);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < KS; ++k)  // 32 bytes per k-step
    qk_mma<Cfg::BN>(sf, qk_desc<Cfg>(dQ + qk_kstep<Cfg, Cfg::BM>(k)), qk_desc<Cfg>(dK + qk_kstep<Cfg, Cfg::BN>(k)), k > 0);
}
template <class Cfg>
SAGE_DEV void qk_issue(i32 (&s)[1][Cfg::BN / 8][4], u32 sQw, u32 sK) {
  qk_issue_d<Cfg>(s, desc_lo(sQw), desc_lo(sK));
}

// P (FP32, accumulator layout, scaled to its 8-bit type's range) as the FP8 (or, pv int8, u8)
// A fragments of P V, in the token order the preparation permuted V for.
template <class Cfg>
SAGE_DEV void pack_p8(const float (&pf)[1][Cfg::BN / 8][4], u32 (&pa)[Cfg::BN / 32][4]) {
  constexpr bool U8 = Cfg::PV_INT8;
#pragma unroll
  for (int k = 0; k < Cfg::BN / 32; ++k) {
    pa[k][0] = mma_attn::pack_p8<U8>(pf[0][4 * k][0], pf[0][4 * k][1], pf[0][4 * k + 1][0], pf[0][4 * k + 1][1]);
    pa[k][1] = mma_attn::pack_p8<U8>(pf[0][4 * k][2], pf[0][4 * k][3], pf[0][4 * k + 1][2], pf[0][4 * k + 1][3]);
    pa[k][2] = mma_attn::pack_p8<U8>(pf[0][4 * k + 2][0], pf[0][4 * k + 2][1], pf[0][4 * k + 3][0], pf[0][4 * k + 3][1]);
    pa[k][3] = mma_attn::pack_p8<U8>(pf[0][4 * k + 2][2], pf[0][4 * k + 2][3], pf[0][4 * k + 3][2], pf[0][4 * k + 3][3]);
  }
}

// Softmax of a tile's scores into FP32 probabilities `pf` (the 8-bit P's range) and the factors O
// must be rescaled by. `pf` may be `s` itself (reinterpreted): online() reads each score
// before it writes that element's probability and never reads it again.
template <class Cfg, int MASK>
SAGE_DEV void softmax_f(const SageAttnParams& p, float (&m)[1][2], float (&l)[1][2], i32 (&s)[1][Cfg::BN / 8][4],
                        float dq, int tile, int row0, float (&pf)[1][Cfg::BN / 8][4], float (&alpha)[1][2]) {
  const i32 no_ds[1][4] = {{0, 0, 0, 0}};
  // The warp-specialized kernel runs one softmax warp per scheduler: split its chains.
  softmax::online<1, Cfg::BN / 8, false, MASK, Cfg::P_SCALE, Cfg::WS ? 4 : 1, !Cfg::SUM_MMA>(
      p, m, l, s, no_ds, dq, 0.f, tile * Cfg::BN, row0, pf, alpha);
}

// Softmax of a tile's scores into the 8-bit A fragments of P V (`pa`) and the factors O must
// be rescaled by. LSE (pv int8, sage_attn_lse): lx also adds up this lane's P before its
// rounding to u8 (the LSE's sums: P below 1/510 of the row maximum rounds to 0, which would
// bias it low for peaked rows; O is normalized by the rounded P's sums either way).
template <class Cfg, int MASK, bool LSE = false>
SAGE_DEV void softmax_p(const SageAttnParams& p, float (&m)[1][2], float (&l)[1][2], i32 (&s)[1][Cfg::BN / 8][4],
                        float dq, int tile, int row0, u32 (&pa)[Cfg::BN / 32][4], float (&alpha)[1][2],
                        float (*lx)[2] = nullptr) {
  static_assert(!LSE || Cfg::PV_INT8, "separate LSE sums are the int8 P V path's");
  constexpr int BN = Cfg::BN, NT = BN / 8, KK = BN / 32;
  if constexpr (Cfg::HALF_EXP) {
    const i32 no_ds[1][4] = {{0, 0, 0, 0}};
    u32 ph[1][NT][2];
    softmax::online_h<1, NT, false, MASK, PScale::e4m3>(p, m, l, s, no_ds, dq, 0.f, tile * BN, row0, ph, alpha);
#pragma unroll
    for (int k = 0; k < KK; ++k) {
      pa[k][0] = pack_e4m3x4_h(ph[0][4 * k][0], ph[0][4 * k + 1][0]);
      pa[k][1] = pack_e4m3x4_h(ph[0][4 * k][1], ph[0][4 * k + 1][1]);
      pa[k][2] = pack_e4m3x4_h(ph[0][4 * k + 2][0], ph[0][4 * k + 3][0]);
      pa[k][3] = pack_e4m3x4_h(ph[0][4 * k + 2][1], ph[0][4 * k + 3][1]);
    }
  } else {
    float pf[1][NT][4];
    softmax_f<Cfg, MASK>(p, m, l, s, dq, tile, row0, pf, alpha);
    if constexpr (LSE) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float r = 0.f;
#pragma unroll
        for (int n = 0; n < NT; ++n) r += pf[0][n][2 * hh] + pf[0][n][2 * hh + 1];
        lx[0][hh] = lx[0][hh] * alpha[0][hh] + r;
      }
    }
    pack_p8<Cfg>(pf, pa);
  }
}

// The descriptor of the sum_mma ones block (no swizzle: 8-row x 16-byte core matrices,
// leading offset 128 bytes between the two along K, stride offset 256; every byte read is a
// one whichever way the offsets are taken, since both stay inside the 512-byte block).
SAGE_DEV u64 ones_desc(u32 addr) {
  return u64((addr & 0x3FFFF) >> 4) | (u64(128 >> 4) << 16) | (u64(256 >> 4) << 32);
}

// Issues acc = P V for one tile into a fresh accumulator (asynchronous: the caller commits),
// from V^T's descriptor; with SUM_MMA also rs = the row sums of P (dOnes: the ones block).
// N: V^T's rows (O's columns) multiplied, PV_N, or 96 in the three-quarter entry of head dim 128.
// A: the accumulators' type, PvAcc<Cfg> (FP32, or int32 for pv int8).
template <class Cfg, int N = Cfg::PV_N, class A>
SAGE_DEV void pv_issue_d(A (&acc)[N / 2], A (&rs)[4], const u32 (&pa)[Cfg::BN / 32][4], u32 dV, u64 dOnes) {
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < Cfg::BN / 32; ++k) {
    pv_mma<N>(acc, pa[k], v_desc<Cfg>(dV + 2 * k), k > 0);  // 32 bytes per k-step
    if constexpr (Cfg::SUM_MMA) sum_mma(rs, pa[k], dOnes, k > 0);
  }
}
template <class Cfg>
SAGE_DEV void pv_issue(float (&acc)[Cfg::PV_N / 2], const u32 (&pa)[Cfg::BN / 32][4], u32 sV) {
  static_assert(!Cfg::SUM_MMA, "sum_mma variants issue P V with the ones block (pv_issue_d)");
  float rs[4];
  pv_issue_d<Cfg>(acc, rs, pa, desc_lo(sV), 0);
}

// The second accumulation level: O = O * alpha + acc, one FFMA per element (pv int8: and the
// int32 sum's conversion, I2FP); with SUM_MMA also l = l * alpha + the tile's row sums (rs[0]:
// row gid, rs[2]: row gid + 8 of this lane).
template <class Cfg, int C = 0, int N = Cfg::PV_N, class A>
SAGE_DEV void fold(float (&o)[1][Cfg::D / 8][4], float (&l)[1][2], const A (&acc)[N / 2], const A (&rs)[4],
                   const float (&alpha)[1][2]) {
  // acc: O's columns C * N .. + N - 1 (N = 96: O's last quarter stays 0).
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[0][C * N / 8 + j][e] = fmaf(o[0][C * N / 8 + j][e], alpha[0][e / 2], acc_f(acc[4 * j + e]));
  if constexpr (Cfg::SUM_MMA) {
    l[0][0] = fmaf(l[0][0], alpha[0][0], acc_f(rs[0]));
    l[0][1] = fmaf(l[0][1], alpha[0][1], acc_f(rs[2]));
  }
}

// O = O * alpha + P V in chunks of PV_N columns of V^T (PV_N rows of the tile, BN bytes each)
// (head_dim 256: O is 128 registers, a whole fresh accumulator would be 128 more): two chunks
// in flight in two fresh accumulators, each chunk added into its columns of O as it lands while
// the next is on the tensor cores. NC: the chunks that hold the call's columns (4, or 3 for
// head dims up to 192: O's last quarter stays 0 and is not stored).
template <class Cfg, int NC>
SAGE_DEV void pv_chunks(float (&o)[1][Cfg::D / 8][4], float (&l)[1][2], const u32 (&pa)[Cfg::BN / 32][4], u32 dV,
                        const float (&alpha)[1][2]) {
  constexpr u32 CHUNK = Cfg::PV_N * Cfg::BN / 16;  // descriptor units between chunks
  static_assert(Cfg::D / Cfg::PV_N == 4 && (NC == 3 || NC == 4) && !Cfg::SUM_MMA,
                "three or four of four chunks, row sums by the softmax");
  float a0[Cfg::PV_N / 2], a1[Cfg::PV_N / 2], rs[4] = {0.f, 0.f, 0.f, 0.f};
  pv_issue_d<Cfg>(a0, rs, pa, dV, 0);
  wgmma_commit();
  pv_issue_d<Cfg>(a1, rs, pa, dV + CHUNK, 0);
  wgmma_commit();
  wgmma_wait<1>();
  fence_regs(a0);
  fold<Cfg, 0>(o, l, a0, rs, alpha);
  pv_issue_d<Cfg>(a0, rs, pa, dV + 2 * CHUNK, 0);
  wgmma_commit();
  wgmma_wait<1>();
  fence_regs(a1);
  fold<Cfg, 1>(o, l, a1, rs, alpha);
  if constexpr (NC == 4) {
    pv_issue_d<Cfg>(a1, rs, pa, dV + 3 * CHUNK, 0);
    wgmma_commit();
    wgmma_wait<1>();
    fence_regs(a0);
    fold<Cfg, 2>(o, l, a0, rs, alpha);
    wgmma_wait<0>();
    fence_regs(a1);
    fold<Cfg, 3>(o, l, a1, rs, alpha);
  } else {
    wgmma_wait<0>();
    fence_regs(a0);
    fold<Cfg, 2>(o, l, a0, rs, alpha);
  }
}

// Softmax of a tile's scores and O += P V, waiting for the P V (head dim 256: over QN
// quarters of O's columns, see plain_tile). LSE, lx: softmax_p.
template <class Cfg, int MASK, int QN = 4, bool LSE = false>
SAGE_DEV void softmax_pv(const SageAttnParams& p, float (&m)[1][2], float (&l)[1][2], float (&o)[1][Cfg::D / 8][4],
                         i32 (&s)[1][Cfg::BN / 8][4], u32 dV, u64 dOnes, float dq, int tile, int row0,
                         float (*lx)[2] = nullptr) {
  float alpha[1][2];
  u32 pa[Cfg::BN / 32][4];
  softmax_p<Cfg, MASK, LSE>(p, m, l, s, dq, tile, row0, pa, alpha, lx);
  if constexpr (Cfg::PV_N < Cfg::D) {
    pv_chunks<Cfg, QN>(o, l, pa, dV, alpha);
  } else {
    constexpr int N = QN * Cfg::D / 4;  // head dim 128: 96 columns in the three-quarter entry
    PvAcc<Cfg> acc[N / 2], rs[4];
    pv_issue_d<Cfg, N>(acc, rs, pa, dV, dOnes);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
    fence_regs(rs);
    fold<Cfg, 0, N>(o, l, acc, rs, alpha);
  }
}

// One tile of the plain schedule, both loaders: S = Q K^T (waited), then softmax_pv; `masked`
// picks the diagonal/tail path. dQ, dK, dV: the descriptors of this warpgroup's Q rows, of
// the K tile and of the V^T tile. MASK: a masked tile's (softmax::online: 1, or with a sliding
// window kMaskWindow). QN: the quarters of the row (Q K^T's k-steps, P V's columns
// of O) that hold the call's columns, 4 or 3 (head dims up to 3/4 of D: at D=256 up to 192, at
// D=128 up to 96; Q's and K's last quarter of bytes and V^T's last quarter of rows are not
// read, O's last quarter stays 0).
template <class Cfg, int QN = 4, bool LSE = false, int MASK = 1>
SAGE_DEV void plain_tile(const SageAttnParams& p, float (&m)[1][2], float (&l)[1][2], float (&o)[1][Cfg::D / 8][4],
                         u32 dQ, u32 dK, u32 dV, u64 dOnes, float dq, int tile, bool masked, int row0,
                         float (*lx)[2] = nullptr) {
  static_assert(QN == 4 || (QN == 3 && (Cfg::D == 256 || Cfg::D == 128)), "three quarters: head dim 128 or 256");
  i32 s[1][Cfg::BN / 8][4];
  qk_issue_d<Cfg, QN * Cfg::QK_KSTEPS / 4>(s, dQ, dK);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(reinterpret_cast<i32(&)[Cfg::BN / 2]>(s));
  if (masked) softmax_pv<Cfg, MASK, QN, LSE>(p, m, l, o, s, dV, dOnes, dq, tile, row0, lx);
  else softmax_pv<Cfg, 0, QN, LSE>(p, m, l, o, s, dV, dOnes, dq, tile, row0, lx);
}

// Where a CTA works (mma_attn::cta_coords: the grid (q_tiles, Hq, B), or a causal grid's
// longest-first order), and its lane's fixed quantities: shared by both loaders' kernels.
template <class Cfg, bool WINDOW = false>
struct CtaTile {
  // The key tiles [t_begin, n_tiles), masked below mask_before and from mask_from
  // (mma_attn::kv_range; t_begin and mask_before are 0 without WINDOW, a sliding window's
  // kernel).
  int warp, gid, tig, wg, h, hkv, b, m0, row0, t_begin, n_tiles, mask_before, mask_from;
  i64 q_tile_id, kv_bh;
  // `tid`: the thread's index among the CTA's consumer threads.
  SAGE_DEV CtaTile(const SageAttnParams& p, unsigned tid) {
    // Broadcast from lane 0: ptxas then knows the warp (and warpgroup) index is the same for
    // every lane, and keeps what derives from it (the Q tile's wgmma descriptors) in uniform
    // registers instead of building it in vector registers and moving it over per wgmma.
    warp = __shfl_sync(0xffffffffu, int(tid / 32), 0);
    const int lane = int(tid % 32);
    gid = lane / 4;
    tig = lane % 4;
    wg = warp / 4;
    const mma_attn::CtaCoords cc = mma_attn::cta_coords(p);
    const int q_tile = cc.q_tile;
    h = cc.h;
    b = cc.b;
    hkv = h / (p.heads_q / p.heads_kv);
    m0 = q_tile * Cfg::BM;
    row0 = m0 + warp * 16;
    mma_attn::kv_range<WINDOW>(p, m0, Cfg::BM, Cfg::BN, &t_begin, &n_tiles, &mask_before, &mask_from);
    q_tile_id = (i64(b) * p.heads_q + h) * p.q_tiles + q_tile;
    kv_bh = i64(b) * p.heads_kv + hkv;
  }
  // The lane's Q scale, and its K scales (tile t: [t * K_GROUPS]).
  SAGE_DEV float q_scale(const SageAttnParams& p) const {
    int qg = 0;
    if constexpr (Cfg::GRAN == Gran::per_thread) qg = warp * 8 + gid;
    else if constexpr (Cfg::GRAN == Gran::per_warp) qg = warp;
    return p.q_scale[q_tile_id * Cfg::Q_GROUPS + qg];
  }
  // The index of the CTA's first K tile in the workspace (quant.cuh: k_tile_index): VARLEN, a
  // variable-length batch's sequence in its kv head's row of tiles.
  template <bool VARLEN = false>
  SAGE_DEV i64 k_tile0(const SageAttnParams& p) const {
    return VARLEN ? i64(hkv) * p.kv_tile_pitch + p.kv_tile0 : kv_bh * p.k_tiles;
  }
  template <bool VARLEN = false>
  SAGE_DEV const float* k_scales(const SageAttnParams& p) const {
    return p.k_scale + k_tile0<VARLEN>(p) * Cfg::K_GROUPS + (Cfg::GRAN == Gran::per_thread ? tig : 0);
  }
};

// Thread 0 prefetches the three tensor maps and initializes `count` mbarriers from bar0 (one
// arrival each), then `arrivals_count` more after them that complete on `arrivals` arrivals
// ("empty" barriers, one arrival per consumer warp); then the CTA synchronizes. The TMA
// kernels' set-up, before any load.
SAGE_DEV void tma_barriers_init(const SageAttnParams& p, u32 bar0, int count, int arrivals_count = 0, int arrivals = 1) {
  // (`p`: the kernel's parameters, whose maps are in the grid constant space)
  if (threadIdx.x == 0) {
    tma_prefetch_map(&p.tma_q);
    tma_prefetch_map(&p.tma_k);
    tma_prefetch_map(&p.tma_v);
    for (int i = 0; i < count + arrivals_count; ++i) mbar_init(bar0 + 8u * i, i < count ? 1 : arrivals);
    mbar_init_fence();
  }
  __syncthreads();
}

// The running softmax state of a warp's 16 rows: max -inf, sum 0, O 0.
template <int D>
SAGE_DEV void init_state(float (&m)[1][2], float (&l)[1][2], float (&o)[1][D / 8][4]) {
  m[0][0] = m[0][1] = neg_inf();
  l[0][0] = l[0][1] = 0.f;
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][j][e] = 0.f;
}

// Byte offset of 16-byte chunk c of row r of the INT8 Q tile: in box c / (QK_BOX / 16), whose
// rows are QK_BOX bytes, 128B (64B) swizzled.
template <class Cfg>
SAGE_DEV int q_chunk(int r, int c) {
  constexpr int CPB = Cfg::QK_BOX / 16;
  return (c / CPB) * Cfg::BM * Cfg::QK_BOX + swz<CPB>(r, c % CPB);
}

// fuse_q: quantizes this CTA's Q tile (64 rows, FP16/BF16, as TMA left it: boxes of 64
// columns, 128-byte rows, 128B swizzle, at `raw`) into the INT8 wgmma tile at `q` and returns
// the lane's Q scale (sm_scale * log2 e folded in). Warp w owns rows 16w..16w+15; the lanes
// of a quad (gid) share the group {16w + gid, 16w + gid + 8}, each taking a quarter of its
// columns, so one quad_max gives the group's max, exactly the groups of the preparation.
// VARLEN: the tile's rows from `rows` on (past its sequence: another sequence's, read through
// the map over the packed Q) are taken as zeros.
template <class Cfg, bool VARLEN = false>
SAGE_DEV float quantize_q(const SageAttnParams& p, const u8* raw, u8* q, int warp, int rows = 0) {
  constexpr int D = Cfg::D, CPL = D / 32;  // 8-column chunks per lane and row
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  float x[2][CPL][8];
  float amax = 0.f;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = 16 * warp + gid + 8 * hh;
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
      const int c = tig * CPL + i, box = c / 8, cb = c % 8;
      u32x4 v = *reinterpret_cast<const u32x4*>(raw + box * Cfg::BM * 128 + r * 128 + ((cb ^ (r & 7)) * 16));
      if (VARLEN && r >= rows) v = u32x4{0u, 0u, 0u, 0u};
      unpack8(v, p.dtype, x[hh][i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(x[hh][i][e]));
    }
  }
  amax = quad_max(amax);
  const float inv = amax > 0.f ? Cfg::QMAX / amax : 0.f;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = 16 * warp + gid + 8 * hh;
#pragma unroll
    for (int j = 0; j < CPL / 2; ++j) {  // 16 columns = one 16-byte INT8 chunk
      u32x4 w;
      u32* wp = &w.x;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float* f = &x[hh][2 * j + k / 2][4 * (k % 2)];
        wp[k] = pack_s8x4(quant_s8(f[0] * inv), quant_s8(f[1] * inv), quant_s8(f[2] * inv), quant_s8(f[3] * inv));
      }
      *reinterpret_cast<u32x4*>(q + q_chunk<Cfg>(r, (tig * CPL) / 2 + j)) = w;
    }
  }
  return (amax > 0.f ? amax / Cfg::QMAX : 0.f) * p.sm_scale * kLog2e;
}

// The TMA loader: thread 0 issues one cp.async.bulk.tensor per operand and tile into a ring of
// STAGES slots, each with a "full" mbarrier whose transaction count the copies complete. The
// consumers wait on the barrier's phase. No thread computes a global address per chunk, and
// no generic-proxy fence is needed.
// One warpgroup: once every warp is done with a slot (one CTA barrier per tile, after P V has
// completed), thread 0 refills it with the tile STAGES ahead.
// Several warpgroups (BM = 64 x WGS rows share each K/V tile, so the L2 -> SM traffic per
// query row drops by WGS): each warp counts itself out of a slot once its P V of the slot has
// completed (a shared-memory atomic), and the last of the CTA's warps refills it, so the
// warpgroups never wait for each other at a CTA barrier. With the `turns` schedule their
// GEMMs go to the tensor cores in a fixed rotation: Q K^T of warpgroup 0, 1, 2, then their
// P V, and so on (named barrier w is warpgroup w's turn: it syncs there, its predecessor
// arrives), so one warpgroup's softmax runs while the others' GEMMs do, instead of all of them
// running their softmax (and then their GEMMs) at the same time.
// LSE (pv int8, sage_attn_lse): the LSE from FP32 sums of P before rounding (softmax_p).
// VARLEN (sage_attn_varlen): `p` is the view of this CTA's sequence (mma_attn::varlen_view_ws),
// `g` the kernel's parameters, whose tensor maps TMA reads in place: Q's over the packed
// [1, total_q, Hq, D] tensor (the sequence from row p.q_row0), K's and V's over the
// workspace, where the sequence's tiles start at tile p.kv_tile0 of its kv head's row.
template <class Cfg, int QN = 4, bool LSE = false, bool VARLEN = false, bool WINDOW = false>
SAGE_DEV void attn_kernel_tma(const SageAttnParams& p, const SageAttnParams& g) {
  using L = Layout<Cfg>;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, ST = Cfg::STAGES, WGS = Cfg::WGS;
  constexpr u32 KV_BYTES = Cfg::SMEM_K_STAGE + Cfg::SMEM_V_STAGE;
  constexpr bool SHARED = WGS > 1;
  constexpr bool TURNS = Cfg::SCHED == Schedule::turns;
  constexpr int NWARPS = 4 * WGS, kBarTurn = 1;
  extern __shared__ __align__(1024) u8 smem_raw[];
  __shared__ __align__(8) u64 bars[1 + ST];  // [0]: Q, [1 + s]: slot s full
  __shared__ u32 released[ST];               // SHARED: warps done with slot s, cumulative
  u8* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const CtaTile<Cfg, WINDOW> c(p, threadIdx.x);
  const int warp = c.warp, wg = c.wg, h = c.h, b = c.b, row0 = c.row0;
  // The loop counts tiles from the CTA's first (kt0: a sliding window's, WINDOW; else 0), whose
  // K and V rows and K scales the loads start at; the softmax takes the key tile's own index,
  // t + kt0. A masked tile's softmax: MASK.
  constexpr int MASK = WINDOW ? softmax::kMaskWindow : 1;
  const int kt0 = c.t_begin, n_tiles = c.n_tiles - kt0, mask_from = c.mask_from - kt0,
            mask_before = c.mask_before - kt0;
  const i64 q_tile_id = c.q_tile_id, kv_bh = c.kv_bh;
  const u32 sQ = smem_addr(smem + L::Q);
  const u32 sK0 = smem_addr(smem + L::K);
  const u32 sV0 = smem_addr(smem + L::V);
  const u32 bar0 = smem_addr(&bars[0]);
  auto full = [&](int slot) { return bar0 + 8u * u32(1 + slot); };
  // Rows of the tensor maps: K is [B*Hkv*npad, QROW], V^T is [B*Hkv*D, npad], Q is
  // [B*Hq*q_tiles*BM, QROW] (VARLEN: K [Hkv*kv_tile_pitch*BN, QROW], V^T [Hkv*D,
  // kv_tile_pitch*BN], the sequence's tokens from v_col0).
  const int k_row0 = int((c.template k_tile0<VARLEN>(p) + kt0) * BN);
  const int v_row0 = int(VARLEN ? i64(c.hkv) * D : kv_bh * D), v_col0 = ((VARLEN ? p.kv_tile0 : 0) + kt0) * BN;
  // K tile `tile` into slot `slot` (its boxes side by side), completing on that slot's barrier.
  auto load_k = [&](int tile, int slot) {
#pragma unroll
    for (int box = 0; box < Cfg::QK_BOXES; ++box)
      tma_load_2d(sK0 + slot * Cfg::SMEM_K_STAGE + box * BN * Cfg::QK_BOX, &g.tma_k, box * Cfg::QK_BOX,
                  k_row0 + tile * BN, full(slot));
  };
  auto load_kv = [&](int tile, int slot) {
    mbar_arrive_expect_tx(full(slot), KV_BYTES);
    load_k(tile, slot);
    tma_load_2d(sV0 + slot * Cfg::SMEM_V_STAGE, &g.tma_v, v_col0 + tile * BN, v_row0, full(slot));
  };
  if (SHARED && threadIdx.x < ST) released[threadIdx.x] = 0u;
  // sum_mma: the ones block after the ring (E4M3 1.0 = 0x38; INT8 1 for pv int8), for the
  // tensor cores' async proxy.
  const u32 sOnes = smem_addr(smem + Cfg::ONES_OFF);
  if constexpr (Cfg::SUM_MMA) {
    constexpr u32 kOne4 = Cfg::PV_INT8 ? 0x01010101u : 0x38383838u;
    if (threadIdx.x < Cfg::ONES_BYTES / 16)
      *reinterpret_cast<u32x4*>(smem + Cfg::ONES_OFF + 16 * threadIdx.x) = u32x4{kOne4, kOne4, kOne4, kOne4};
    fence_proxy_async();
  }
  tma_barriers_init(g, bar0, 1 + ST);
  // fuse_q: the caller's Q tile (boxes of 64 columns, 128-byte rows) lands in V slot 1 (one
  // warpgroup: V tile 1 is loaded once Q is out of the slot) or in its own buffer.
  constexpr bool Q_IN_V1 = Cfg::FUSE_Q && Cfg::RAW_Q_BYTES == 0;
  static_assert(!Q_IN_V1 || BM * D * 2 == Cfg::SMEM_V_STAGE, "fuse_q: the raw Q tile fills V slot 1");
  const u32 sQraw = Q_IN_V1 ? sV0 + Cfg::SMEM_V_STAGE : smem_addr(smem + Cfg::RAW_Q_OFF);
  if (threadIdx.x == 0) {
    if constexpr (Cfg::FUSE_Q) {
      mbar_arrive_expect_tx(bar0, BM * D * 2);
#pragma unroll
      for (int box = 0; box < D / 64; ++box)
        tma_load_4d(sQraw + box * BM * 128, &g.tma_q, 64 * box, c.m0 + (VARLEN ? p.q_row0 : 0), h, VARLEN ? 0 : b, bar0);
      if (n_tiles > 0) load_kv(0, 0);
      if (Q_IN_V1 && n_tiles > 1) {  // K now, V once Q is out of the slot
        mbar_arrive_expect_tx(full(1), KV_BYTES);
        load_k(1, 1);
      }
#pragma unroll
      for (int s = Q_IN_V1 ? 2 : 1; s < ST; ++s)
        if (s < n_tiles) load_kv(s, s);
    } else {
      mbar_arrive_expect_tx(bar0, Cfg::SMEM_Q);
#pragma unroll
      for (int box = 0; box < Cfg::QK_BOXES; ++box)
        tma_load_2d(sQ + box * BM * Cfg::QK_BOX, &g.tma_q, box * Cfg::QK_BOX, int(q_tile_id * BM), bar0);
#pragma unroll
      for (int s = 0; s < ST; ++s)
        if (s < n_tiles) load_kv(s, s);
    }
  }

  float qs;
  if constexpr (Cfg::FUSE_Q) {
    mbar_wait(bar0, 0);
    qs = quantize_q<Cfg, VARLEN>(p, smem + (sQraw - smem_addr(smem)), smem + L::Q, warp, p.seq_q - c.m0);
    // The quantized Q for the tensor cores (and V slot 1 free for the copy engine).
    fence_proxy_async();
    __syncthreads();
    if (Q_IN_V1 && threadIdx.x == 0 && n_tiles > 1) tma_load_2d(sQraw, &g.tma_v, v_col0 + BN, v_row0, full(1));
  } else {
    qs = c.q_scale(p);
  }
  const float* kscale = c.template k_scales<VARLEN>(p) + kt0 * Cfg::K_GROUPS;
  const u32 sQw = sQ + wg * 64 * Cfg::QK_BOX;
  const u32 dQ = desc_lo(sQw), dK0 = desc_lo(sK0), dV0 = desc_lo(sV0);
  const u64 dOnes = ones_desc(sOnes);

  // Turns: every warpgroup takes 2 per tile; the last warpgroup's arrival opens warpgroup 0's
  // first turn, and its very last arrival is left out, so that every barrier phase completes.
  const int turns = 2 * n_tiles;
  int taken = 0;
  if (TURNS && wg == WGS - 1 && turns > 0) named_bar_arrive(kBarTurn, 256);
  auto turn_begin = [&] {
    if constexpr (TURNS) named_bar_sync(kBarTurn + wg, 256);
  };
  auto turn_end = [&] {
    if constexpr (TURNS) {
      ++taken;
      if (wg != WGS - 1 || taken < turns) named_bar_arrive(kBarTurn + (wg + 1) % WGS, 256);
    }
  };

  float m[1][2], l[1][2], o[1][D / 8][4];
  init_state<D>(m, l, o);
  float lx[1][2] = {{0.f, 0.f}};  // LSE: this lane's sums of P before rounding

  if constexpr (!Cfg::FUSE_Q) mbar_wait(bar0, 0);
  // Tile t's K scale is loaded during tile t-1.
  float ks = n_tiles > 0 ? kscale[0] : 0.f;
  for (int t = 0; t < n_tiles; ++t) {
    const int slot = t % ST;
    const float dq = qs * ks;
    if (t + 1 < n_tiles) ks = kscale[(t + 1) * Cfg::K_GROUPS];
    mbar_wait(full(slot), (t / ST) & 1);
    const u32 dK = dK0 + slot * (Cfg::SMEM_K_STAGE / 16), dV = dV0 + slot * (Cfg::SMEM_V_STAGE / 16);
    if constexpr (!TURNS) {
      plain_tile<Cfg, QN, LSE, MASK>(p, m, l, o, dQ, dK, dV, dOnes, dq, t + kt0,
                                     t >= mask_from || (WINDOW && t < mask_before), row0, lx);
    } else {
      // The tile of plain_tile with the turn barriers around its two GEMMs, written out: the
      // same steps routed through plain_tile with turn hooks put the barriers in both the
      // masked and the unmasked branch and measured 20% slower (D=128 N=8K: 608 vs 762 TOPS).
      i32 s[1][BN / 8][4];
      turn_begin();
      qk_issue_d<Cfg, QN * Cfg::QK_KSTEPS / 4>(s, dQ, dK);
      wgmma_commit();
      turn_end();
      wgmma_wait<0>();
      fence_regs(reinterpret_cast<i32(&)[BN / 2]>(s));
      float alpha[1][2];
      u32 pa[BN / 32][4];
      if (t >= mask_from || (WINDOW && t < mask_before)) softmax_p<Cfg, MASK, LSE>(p, m, l, s, dq, t + kt0, row0, pa, alpha, lx);
      else softmax_p<Cfg, 0, LSE>(p, m, l, s, dq, t + kt0, row0, pa, alpha, lx);
      constexpr int N = QN * Cfg::D / 4;
      PvAcc<Cfg> acc[N / 2], rs[4];
      turn_begin();
      pv_issue_d<Cfg, N>(acc, rs, pa, dV, dOnes);
      wgmma_commit();
      turn_end();
      wgmma_wait<0>();
      fence_regs(acc);
      fence_regs(rs);
      fold<Cfg, 0, N>(o, l, acc, rs, alpha);
    }
    if constexpr (SHARED) {
      // This warp's wgmma reads of the slot have completed (P V waited): count it out; the
      // CTA's last warp refills the slot.
      if (threadIdx.x % 32 == 0) {
        const u32 done = atomicAdd(&released[slot], 1u) + 1u;
        if (done % NWARPS == 0 && t + ST < n_tiles) load_kv(t + ST, slot);
      }
    } else {
      // Every warp's wgmma reads of this slot have completed (P V waited): refill it.
      __syncthreads();
      if (threadIdx.x == 0 && t + ST < n_tiles) load_kv(t + ST, slot);
    }
  }
  // All issued copies were waited for: the epilogue may reuse the ring (once every warpgroup
  // is past its last tile).
  if constexpr (SHARED) __syncthreads();
  // The CTA's coordinates again (cheaper than keeping them live through the mainloop).
  const CtaTile<Cfg> ce(p, threadIdx.x);
  epilogue::store<Cfg, 1>(p, m, l, o, ce.b, ce.h, ce.kv_bh, ce.warp, ce.row0, smem, LSE ? lx : nullptr);
}

// The warp-specialized pingpong kernel: warpgroup 0 is the producer, whose one elected thread
// streams Q and the K/V tiles by TMA into a STAGES-deep ring of "full" mbarriers and refills a
// slot once both consumers have released it on its "empty" mbarrier; it keeps 24 registers
// and gives the rest (setmaxnreg) to warpgroups 1 and 2, the consumers, 64 query rows each at
// 240 registers. A consumer's turn at the tensor cores issues Q K^T of tile t and P V of tile
// t-1 back to back; turns alternate between the two on named barriers, so one warpgroup's
// softmax runs while the other's GEMMs do. With INTRA (intra-warpgroup overlap) a consumer
// starts the softmax of tile t as soon as its Q K^T has landed, while its P V of t-1 is still
// on the tensor cores; without it, it waits for both first (fewer live registers).
template <class Cfg, bool TURNS, bool INTRA>
SAGE_DEV void attn_kernel_ws(const SageAttnParams& p) {
  using L = Layout<Cfg>;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, ST = Cfg::STAGES, KK = BN / 32;
  constexpr u32 KV_BYTES = Cfg::SMEM_K_STAGE + Cfg::SMEM_V_STAGE;
  constexpr int CONSUMERS = 128 * Cfg::WGS;
  // named barriers: turn of consumer w = 1 + w; fuse_q: consumer w's Q tile written = 4 + w
  constexpr int kBarTurn = 1, kBarEpilogue = 3, kBarQ = 4;
  extern __shared__ __align__(1024) u8 smem_raw[];
  __shared__ __align__(8) u64 bars[1 + 2 * ST];  // [0]: Q; [1 + s]: slot s full; [1 + ST + s]: empty
  u8* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const u32 sQ = smem_addr(smem + L::Q);
  const u32 sK0 = smem_addr(smem + L::K);
  const u32 sV0 = smem_addr(smem + L::V);
  const u32 bar0 = smem_addr(&bars[0]);
  auto full = [&](int slot) { return bar0 + 8u * u32(1 + slot); };
  auto empty = [&](int slot) { return bar0 + 8u * u32(1 + ST + slot); };
  // fuse_q: the caller's Q tile (boxes of 64 columns, 128-byte rows), after the ring.
  constexpr int kRawQ = Cfg::RAW_Q_OFF;
  const u32 sQraw = smem_addr(smem + kRawQ);
  if (threadIdx.x == 0) {
    tma_prefetch_map(&p.tma_q);
    tma_prefetch_map(&p.tma_k);
    tma_prefetch_map(&p.tma_v);
    mbar_init(bar0, 1);
#pragma unroll
    for (int s = 0; s < ST; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), 4 * Cfg::WGS);  // lane 0 of every consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  // The warpgroup index, broadcast so that the compiler knows it is warp-uniform (wgmma in a
  // branch it cannot prove uniform gets serialized).
  const int wg_role = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg_role == 0) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      const CtaTile<Cfg> c(p, 0u);
      const int k_row0 = int(c.kv_bh * p.k_tiles * BN), v_row0 = int(c.kv_bh * D);
      if constexpr (Cfg::FUSE_Q) {
        mbar_arrive_expect_tx(bar0, BM * D * 2);
#pragma unroll
        for (int box = 0; box < D / 64; ++box) tma_load_4d(sQraw + box * BM * 128, &p.tma_q, 64 * box, c.m0, c.h, c.b, bar0);
      } else {
        mbar_arrive_expect_tx(bar0, Cfg::SMEM_Q);
        tma_load_2d(sQ, &p.tma_q, 0, int(c.q_tile_id * BM), bar0);
      }
      for (int t = 0; t < c.n_tiles; ++t) {
        const int slot = t % ST;
        if (t >= ST) mbar_wait(empty(slot), ((t / ST) - 1) & 1);
        mbar_arrive_expect_tx(full(slot), KV_BYTES);
        tma_load_2d(sK0 + slot * Cfg::SMEM_K_STAGE, &p.tma_k, 0, k_row0 + t * BN, full(slot));
        tma_load_2d(sV0 + slot * Cfg::SMEM_V_STAGE, &p.tma_v, t * BN, v_row0, full(slot));
      }
    }
    return;
  }
  setmaxnreg_inc<240>();

  const CtaTile<Cfg> c(p, threadIdx.x - 128);
  const int cw = c.wg, row0 = c.row0, n_tiles = c.n_tiles, mask_from = c.mask_from;
  const bool lane0 = threadIdx.x % 32 == 0;
  float qs;
  if constexpr (Cfg::FUSE_Q) {
    // Each warp quantizes its own 16 rows; the warpgroup's wgmma reads them once all four
    // warps have written theirs (generic -> async proxy).
    mbar_wait(bar0, 0);
    qs = quantize_q<Cfg>(p, smem + kRawQ, smem + L::Q, c.warp);
    fence_proxy_async();
    named_bar_sync(kBarQ + cw, 128);
  } else {
    qs = c.q_scale(p);
  }
  const float* kscale = c.k_scales(p);
  const u32 sQw = sQ + cw * 64 * Cfg::QK_BOX;
  float m[1][2], l[1][2], o[1][D / 8][4];
  init_state<D>(m, l, o);

  // Turn k of consumer w waits on barrier kBarTurn + w: its own 128 threads sync, the other
  // consumer's arrive when its turn k-1 (for consumer 1: k) has issued. Consumer 0 goes
  // first; both take n_tiles + 1 turns, and consumer 1's last arrival is left out so that
  // every barrier phase completes.
  // (Every turn but consumer 1's last arrives: turn_end(last) says which it is, so no turn
  // count stays live through the loop.)
  if (TURNS && cw == 1 && n_tiles > 0) named_bar_arrive(kBarTurn, CONSUMERS);
  auto turn_end = [&](bool last) {
    if (TURNS && (cw == 0 || !last)) named_bar_arrive(kBarTurn + (1 - cw), CONSUMERS);
  };
  auto release = [&](int tile) {
    if (lane0) mbar_arrive(empty(tile % ST));
  };

  u32 pa[KK][4];
  float alpha[1][2];
  float acc[Cfg::D / 2], rs[4];
  // `dq`: the lane's Q scale times tile t's K scale (loaded before the tile's turn, so that
  // its latency hides behind the GEMMs).
  auto softmax = [&](i32(&s)[1][BN / 8][4], int t, float dq, u32(&pa_)[KK][4], float(&alpha_)[1][2]) {
    if (t >= mask_from) softmax_p<Cfg, true>(p, m, l, s, dq, t, row0, pa_, alpha_);
    else softmax_p<Cfg, false>(p, m, l, s, dq, t, row0, pa_, alpha_);
  };
  mbar_wait(bar0, 0);
  // Q from registers where they fit (the tensor cores then read only K from shared memory);
  // at D=128 with 128-key tiles the two in-flight accumulators leave no room for it.
  constexpr bool QREG = !(D == 128 && BN == 128);
  u32 qa[QREG ? Cfg::QK_KSTEPS : 1][4];
  if constexpr (QREG) load_q_frags<Cfg>(qa, smem, 16 * c.warp);
  auto qk = [&](i32(&s)[1][BN / 8][4], u32 sK) {
    if constexpr (QREG) qk_issue_rs<Cfg>(s, qa, sK);
    else qk_issue<Cfg>(s, sQw, sK);
  };
  if (n_tiles > 0) {  // turn 0: Q K^T of tile 0 alone
    i32 s[1][BN / 8][4];
    const float dq = qs * kscale[0];
    mbar_wait(full(0), 0);
    if (TURNS) named_bar_sync(kBarTurn + cw, CONSUMERS);
    qk(s, sK0);
    wgmma_commit();
    turn_end(false);
    wgmma_wait<0>();
    fence_regs(reinterpret_cast<i32(&)[BN / 2]>(s));
    softmax(s, 0, dq, pa, alpha);
  }
  // Turn t: Q K^T of tile t, then P V of tile t-1 (P in `pa`); the softmax of tile t leaves
  // the factors O is rescaled by in `alpha` (INTRA: while that P V runs, into FP32 in place of
  // the scores; P is packed into `pa` once the P V has completed, so one P tile is live).
  auto step = [&](int t) {
    const int slot = t % ST;
    const float dq = qs * kscale[t * Cfg::K_GROUPS];
    mbar_wait(full(slot), (t / ST) & 1);
    i32 s[1][BN / 8][4];
    if (TURNS) named_bar_sync(kBarTurn + cw, CONSUMERS);
    qk(s, sK0 + slot * Cfg::SMEM_K_STAGE);
    wgmma_commit();
    pv_issue<Cfg>(acc, pa, sV0 + ((t - 1) % ST) * Cfg::SMEM_V_STAGE);
    wgmma_commit();
    turn_end(false);
    if constexpr (INTRA) {
      wgmma_wait<1>();
      fence_regs(reinterpret_cast<i32(&)[BN / 2]>(s));
      float a2[1][2];
      float(&pf)[1][BN / 8][4] = reinterpret_cast<float(&)[1][BN / 8][4]>(s);
      if (t >= mask_from) softmax_f<Cfg, true>(p, m, l, s, dq, t, row0, pf, a2);
      else softmax_f<Cfg, false>(p, m, l, s, dq, t, row0, pf, a2);
      wgmma_wait<0>();
      fence_regs(acc);
      fold<Cfg>(o, l, acc, rs, alpha);
      alpha[0][0] = a2[0][0];
      alpha[0][1] = a2[0][1];
      pack_p8<Cfg>(pf, pa);
    } else {
      wgmma_wait<0>();
      fence_regs(reinterpret_cast<i32(&)[BN / 2]>(s));
      fence_regs(acc);
      fold<Cfg>(o, l, acc, rs, alpha);
      softmax(s, t, dq, pa, alpha);
    }
    release(t - 1);
  };
  if (n_tiles > 0) {
#pragma unroll 1
    for (int t = 1; t < n_tiles; ++t) step(t);
    // The last turn: P V of the last tile.
    if (TURNS) named_bar_sync(kBarTurn + cw, CONSUMERS);
    pv_issue<Cfg>(acc, pa, sV0 + ((n_tiles - 1) % ST) * Cfg::SMEM_V_STAGE);
    wgmma_commit();
    turn_end(true);
    wgmma_wait<0>();
    fence_regs(acc);
    fold<Cfg>(o, l, acc, rs, alpha);
  }
  // Both consumers' tensor-core reads are done (and every TMA write was waited for): the
  // epilogue may reuse the ring.
  named_bar_sync(kBarEpilogue, CONSUMERS);
  // The CTA's coordinates again (cheaper than keeping them live through the mainloop).
  const CtaTile<Cfg> ce(p, threadIdx.x - 128);
  epilogue::store<Cfg, 1>(p, m, l, o, ce.b, ce.h, ce.kv_bh, ce.warp, ce.row0, smem);
}

// The cp.async loader: every thread copies its chunks of each tile (plain and overlap schedules).
template <class Cfg>
SAGE_DEV void attn_kernel_cp(const SageAttnParams& p) {
  using L = Layout<Cfg>;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, ST = Cfg::STAGES;
  extern __shared__ __align__(1024) u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const CtaTile<Cfg> c(p, threadIdx.x);
  const int warp = c.warp, wg = c.wg, h = c.h, b = c.b, row0 = c.row0, n_tiles = c.n_tiles, mask_from = c.mask_from;
  const i64 q_tile_id = c.q_tile_id, kv_bh = c.kv_bh;
  const u8* gQ = reinterpret_cast<const u8*>(p.q_quant) + q_tile_id * BM * Cfg::QROW;
  const u8* gK = reinterpret_cast<const u8*>(p.k_quant) + kv_bh * p.k_tiles * BN * Cfg::QROW;
  const mma_attn::KSource ks{gK, Cfg::QROW, 0};
  mma_attn::VSource vs;
  const i64 npad = i64(p.k_tiles) * BN;
  vs.base = static_cast<const u8*>(p.v_prep) + kv_bh * D * npad;
  vs.row_stride = npad;
  vs.rows_valid = D;

  const u32 sQ = smem_addr(smem + L::Q);
  const u32 sK0 = smem_addr(smem + L::K);
  const u32 sV0 = smem_addr(smem + L::V);
  KvLoader<Cfg> ld;
  ld.init(ks, vs);
  for (int ch = threadIdx.x; ch < BM * L::QCPR; ch += Cfg::THREADS) {
    const int r = ch / L::QCPR, cc = ch % L::QCPR;
    cp_async16(sQ + swz<L::QCPR>(r, cc), gQ + r * Cfg::QROW + cc * 16);
  }
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < n_tiles) ld.load(ks, vs, s, sK0 + s * Cfg::SMEM_K_STAGE, sV0 + s * Cfg::SMEM_V_STAGE);
    cp_async_commit();
  }

  const float qs = c.q_scale(p);
  const float* kscale = c.k_scales(p);
  const u32 sQw = sQ + wg * 64 * Cfg::QK_BOX;  // this warpgroup's 64 rows

  float m[1][2], l[1][2], o[1][D / 8][4];
  init_state<D>(m, l, o);

  if constexpr (Cfg::SCHED == Schedule::plain) {
    for (int t = 0; t < n_tiles; ++t) {
      // Tile t (and, the first time, Q) landed for this thread; make the cp.async writes
      // visible to the tensor cores' async proxy, then for every thread.
      if constexpr (ST == 1) {
        __syncthreads();
        ld.load(ks, vs, t, sK0, sV0);
        cp_async_commit();
        cp_async_wait<0>();
      } else {
        cp_async_wait<ST - 2>();
      }
      fence_proxy_async();
      __syncthreads();
      int slot = 0;
      if constexpr (ST > 1) {
        const int nt = t + ST - 1;
        if (nt < n_tiles) {
          const int ns = nt % ST;
          ld.load(ks, vs, nt, sK0 + ns * Cfg::SMEM_K_STAGE, sV0 + ns * Cfg::SMEM_V_STAGE);
        }
        cp_async_commit();
        slot = t % ST;
      }
      const float dq = qs * kscale[t * Cfg::K_GROUPS];
      plain_tile<Cfg>(p, m, l, o, desc_lo(sQw), desc_lo(sK0 + slot * Cfg::SMEM_K_STAGE),
                      desc_lo(sV0 + slot * Cfg::SMEM_V_STAGE), 0, dq, t, t >= mask_from, row0);
    }
  } else {
    // Overlap: tiles t and t+1 are resident; iteration t issues Q K^T of t+1, runs the softmax
    // of t on the CUDA cores meanwhile, then P V of t; the load it issues refills t-1's slot.
    i32 cur[1][BN / 8][4];
    if (n_tiles > 0) {
      cp_async_wait<ST - 2>();  // Q and tile 0
      fence_proxy_async();
      __syncthreads();
      qk_issue<Cfg>(cur, sQw, sK0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(reinterpret_cast<i32(&)[BN / 2]>(cur));
    }
    for (int t = 0; t < n_tiles; ++t) {
      cp_async_wait<ST - 3>();  // tile t+1
      fence_proxy_async();
      __syncthreads();
      const int nt = t + ST - 1;
      if (nt < n_tiles) {
        const int ns = nt % ST;
        ld.load(ks, vs, nt, sK0 + ns * Cfg::SMEM_K_STAGE, sV0 + ns * Cfg::SMEM_V_STAGE);
      }
      cp_async_commit();
      i32 next[1][BN / 8][4];
      const bool more = t + 1 < n_tiles;
      if (more) {
        qk_issue<Cfg>(next, sQw, sK0 + ((t + 1) % ST) * Cfg::SMEM_K_STAGE);
        wgmma_commit();
      }
      const float dq = qs * kscale[t * Cfg::K_GROUPS];
      const u32 sV = sV0 + (t % ST) * Cfg::SMEM_V_STAGE;
      if (t >= mask_from) softmax_pv<Cfg, true>(p, m, l, o, cur, desc_lo(sV), 0, dq, t, row0);
      else softmax_pv<Cfg, false>(p, m, l, o, cur, desc_lo(sV), 0, dq, t, row0);
      if (more) {
        fence_regs(reinterpret_cast<i32(&)[BN / 2]>(next));
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) cur[0][n][e] = next[0][n][e];
      }
    }
  }

  cp_async_wait<0>();
  __syncthreads();
  // The CTA's coordinates again (cheaper than keeping them live through the mainloop).
  const CtaTile<Cfg> ce(p, threadIdx.x);
  epilogue::store<Cfg, 1>(p, m, l, o, ce.b, ce.h, ce.kv_bh, ce.warp, ce.row0, smem);
}

// grid (q_tiles, Hq, B) (causal: mma_attn::cta_coords), Cfg::THREADS threads,
// Cfg::SMEM_BYTES dynamic shared memory. Launched as a programmatic dependent of the
// preparation (griddep_wait in common.cuh).
// LSE: the pv int8 entry for calls that return the LSE (sage_attn_lse).
template <class Cfg, int QN = 4, bool LSE = false>
SAGE_DEV void attn_kernel(const SageAttnParams& p) {
  static_assert(QN == 4 || (QN == 3 && (Cfg::D == 128 || Cfg::D == 256) && Cfg::TMA && !Cfg::WS),
                "three quarters (sage_attn_q3): head dim 128 or 256, the TMA kernel of the plain and turns schedules");
  static_assert(!LSE || (Cfg::PV_INT8 && QN == 4), "sage_attn_lse: the pv int8 kernels' whole-row entry");
  griddep_wait();
  if constexpr (Cfg::WS) attn_kernel_ws<Cfg, ws_turns(Cfg::SCHED), ws_intra(Cfg::SCHED)>(p);
  else if constexpr (Cfg::TMA) attn_kernel_tma<Cfg, QN, LSE>(p, p);
  else attn_kernel_cp<Cfg>(p);
}

// Variable-length batches (p.cu_seqlens_q; the TMA kernels that quantize Q themselves, FP8
// P.V): grid (query tiles of the longest sequence, Hq, sequences); each CTA runs its
// sequence's query tile on the sequence's view (mma_attn::varlen_view_ws), its K and V from
// the preparation's per-sequence tiles (prep::prep_kernel_varlen). The entry waits for the
// preparation first (griddep_wait, release_sync), as sage_attn's.
template <class Cfg, bool WINDOW = false>
SAGE_DEV void attn_kernel_varlen(const SageAttnParams& p) {
  static_assert(Cfg::TMA && Cfg::FUSE_Q && !Cfg::WS && !Cfg::PV_INT8,
                "variable-length batches: the TMA kernels of FP8 P.V that quantize Q themselves");
  SageAttnParams v = p;
  if (!mma_attn::varlen_view_ws<Cfg::BM, Cfg::BN>(p, int(blockIdx.z), int(blockIdx.x), v)) return;
  attn_kernel_tma<Cfg, 4, false, true, WINDOW>(v, p);
}

// A sliding window (p.window > 0; launch.cpp has_window_entry): the dense call or, with
// p.cu_seqlens_q, the variable-length batch, each CTA starting at its window's first key tile and
// masking the tiles on the window's edge (the dense and varlen entries stay without that code).
template <class Cfg>
SAGE_DEV void attn_kernel_window(const SageAttnParams& p) {
  static_assert(Cfg::TMA && !Cfg::WS, "sliding windows: the TMA kernels of the plain and turns schedules");
  // a variable-length batch: cu_seqlens_q in the launch's parameters (its views set p.varlen)
  if (p.cu_seqlens_q) attn_kernel_varlen<Cfg, true>(p);
  else attn_kernel_tma<Cfg, 4, false, false, true>(p, p);
}

}  // namespace wgmma_attn
}  // namespace sage
