// The unquantized Hopper kernel (sm_90a; qk and pv "native"): Q, K and V are read as the
// caller gave them (FP16 or BF16, any of the layouts SageTensor describes) by TMA through 4-D
// tensor maps over the caller's tensors, so no preparation kernel runs at all. Where the
// quantized pipeline's preparation costs more than its faster MMAs save (short sequences),
// the tuner picks this family.
//   S = Q K^T        wgmma m64nBNk16 f16/bf16: Q and K from shared memory (K-major, 128B swizzle)
//   softmax          FP32 scores, online, exp2 with sm_scale * log2 e folded into one FFMA;
//                    each row's reference maximum moves only when the row's maximum exceeds
//                    it by more than a factor of 2^8 (lazy rescaling: P at most 256); the
//                    persistent kernels skip the row maxima where the references hold
//                    (softmax_fast: P at most 2^12, else the tile again, exactly)
//   O += P V         O rescaled in registers where a reference moved (rarely after the first
//                    tiles), then wgmma m64nDk16 with P from registers (the
//                    S accumulator layout is the 16-bit A fragment layout) and V from shared
//                    memory as an MN-major (transposed) B operand: V needs no transpose
// Tiles are stored as 64-column blocks of 128-byte rows (one TMA box each), the 128B swizzle
// atom of wgmma; the input dtype picks the f16 or bf16 instructions at run time.
#pragma once
#include "sage/device/attn_wgmma.cuh"

namespace sage {

// PERSISTENT: the `persistent` schedule (attn_kernel_persistent_t below): a producer
// warpgroup after the consumer warpgroups, two Q buffers (O is staged in an item's own Q rows
// once no wgmma reads them), a grid of at most one CTA per SM and occupancy slot.
// OVERLAP (persistent_overlap): each consumer runs tile t's softmax while its P V of tile t-1
// is on the tensor cores. PINGPONG (persistent_pingpong, with OVERLAP): the two consumers take
// turns at issuing their GEMMs (named barriers), so one's softmax runs under the others' GEMMs.
// SPLIT (persistent_split, with PINGPONG): non-causal calls whose query tiles do not divide
// evenly among the CTAs cut the last round's key tiles over the CTAs (TailSplit below); the
// producer warp hands each item to the consumers in shared memory.
// PV8 (pv: fp8, with PINGPONG): P V in FP8 (wgmma e4m3), without a preparation launch. The
// producer warpgroup's three other warps convert V, each tile once for the whole call, into FP8
// V^T tiles in the workspace (keys in P's FP8 fragment order, a power-of-two scale a tile, less
// the kv head's mean over its first tile, which the epilogue adds back), taking the tiles by
// ticket in the order the CTAs need them (V8 jobs, below); the ring then holds FP8 V^T tiles,
// which the loading lane asks TMA for once their flags are set. P V accumulates in
// FP16 on the tensor cores over PV8_FOLD tiles, which O (FP32) then takes (two-level;
// attn_kernel_persistent_t).
template <int HEAD_DIM, int BLOCK_N, int WARPGROUPS, int STAGES_, int MIN_CTAS_, bool PERSISTENT_ = false,
          bool OVERLAP_ = false, bool PINGPONG_ = false, bool SPLIT_ = false, bool PV8_ = false>
struct NativeAttnConfig {
  static constexpr int D = HEAD_DIM;
  static constexpr int BN = BLOCK_N;
  static constexpr int WGS = WARPGROUPS;
  static constexpr int BM = 64 * WARPGROUPS;
  static constexpr int STAGES = STAGES_;
  static constexpr int MIN_CTAS = MIN_CTAS_;
  static constexpr bool PERSISTENT = PERSISTENT_;
  static constexpr bool OVERLAP = OVERLAP_;
  static constexpr bool PINGPONG = PINGPONG_;
  static constexpr bool SPLIT = SPLIT_;
  static constexpr bool PV8 = PV8_;
  static constexpr int CONSUMERS = 128 * WARPGROUPS;
  static constexpr int THREADS = CONSUMERS + (PERSISTENT ? 128 : 0);
  // What the shared helpers (CtaTile, the epilogue) read: no scales, no FP8, no smoothing.
  static constexpr Gran GRAN = Gran::per_block;
  static constexpr int Q_GROUPS = 1, K_GROUPS = 1;
  // PV8: V is converted less its mean over its first key tile a kv head (mean_v8), which the
  // epilogue adds back (p.v_mean, the quantized kernels' smooth_v).
  static constexpr bool V_FP8 = false, V8 = false, SMOOTH_V = PV8, SMOOTH_K = false, ROW_SUMS_COMPLETE = false;
  // FP8 P (PV8): P x 4, so that P down to 2^-8 of its row's reference stays normal in E4M3.
  static constexpr dev::PScale P_SCALE = PV8 ? dev::PScale::e4m3_lazy : dev::PScale::one;
  // The lazy reference's slack (log2) on the exact softmax path and the fast softmax's bound on
  // a lane's partial row sum (of P after its factor): FP16 P at most 2^8 and 2^12. PV8: P V
  // accumulates in FP16 over PV8_FOLD tiles, of V^T below 2^PV8_V_EXP (convert_v8), so no slack:
  // a row's P sums to at most 128 x 4 a tile on the exact path and 4 x 256 on the fast one, and
  // PV8_FOLD tiles' P V to at most 4 x 1024 x 8, below FP16's 65504.
  static constexpr float SLACK = PV8 ? 0.0f : 8.0f;
  static constexpr int PV8_FOLD = 4, PV8_V_EXP = 3;
  static constexpr float FAST_SUM_MAX = PV8 ? 256.0f : 4096.0f;

  // Q K^T k-steps whose Q fragments stay in registers (the rest read Q from shared memory):
  // at D=256 an SS m64n64k16 reads 4 KiB of shared memory in its 32 tensor cycles, the SM's
  // whole 128 bytes a cycle, so the register half of the k-steps (A from registers, 2 KiB)
  // leaves the ring's TMA writes room; the other half would not fit beside O's 128 registers.
  // (H100: 8 k-steps about 2% ahead of 4 and of none, docs/kernels.md 2026-11-27 (q).)
  static constexpr int Q_REG_STEPS = D == 256 && !PERSISTENT ? 8 : 0;
  static constexpr int COLS = 64;         // elements of one 128-byte swizzled row block
  static constexpr int CHUNKS = D / COLS;  // column blocks of a tile
  static constexpr int SMEM_Q = BM * D * 2;
  static constexpr int SMEM_K_STAGE = BN * D * 2;
  // PV8: the V ring holds FP8 V^T tiles (D rows of BN bytes, 128B swizzle)
  static constexpr int SMEM_V_STAGE = PV8 ? D * BN : BN * D * 2;
  static constexpr int Q_BUFS = PERSISTENT ? 2 : 1;
  // PV8: after the ring, the converting warps' FP16 V tile (as TMA loads it) and FP8 V^T tile
  // (as TMA stores it)
  static constexpr int SMEM_CONV16 = PV8 ? BN * D * 2 : 0;
  static constexpr int SMEM_CONV8 = PV8 ? D * BN : 0;
  static constexpr int SMEM_MAIN =
      Q_BUFS * SMEM_Q + STAGES * (SMEM_K_STAGE + SMEM_V_STAGE) + SMEM_CONV16 + SMEM_CONV8;
  static constexpr int O_ROW_BYTES = D * 2 + 16;
  // persistent: O is staged in the warp's own rows of its Q buffer and stored by TMA
  static constexpr int SMEM_EPI = PERSISTENT ? 0 : BM * O_ROW_BYTES;
  // +1024: the kernel aligns its tiles to the 1 KiB swizzle atom itself (the plain kernel keeps
  // its mbarriers in what the alignment leaves over, before or after the tiles).
  static constexpr int SMEM_BYTES = (SMEM_MAIN > SMEM_EPI ? SMEM_MAIN : SMEM_EPI) + 1024;

  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
  static_assert(BN == 64 || BN == 128, "wgmma n = BLOCK_N is instantiated for 64 and 128");
  // D=256: O alone takes 128 registers a thread; the persistent kernels' two Q buffers and
  // their ring do not fit shared memory next to 256-column tiles.
  static_assert(D < 256 || (BN == 64 && !PERSISTENT), "head_dim 256: 64-key tiles, not persistent");
  static_assert(WARPGROUPS >= 1 && WARPGROUPS <= (PERSISTENT ? 3 : 2), "one or two warpgroups (persistent: up to three)");
  static_assert(!PERSISTENT || WARPGROUPS >= 2, "the persistent kernel has two or three consumers");
  // persistent: the registers setmaxnreg leaves the producer's threads and gives the
  // consumers'. A CTA starts with ptxas's launch allocation (64K over its warpgroups, in
  // multiples of 8) and setmaxnreg.inc waits for registers the CTA's own .dec released: the
  // consumers may take at most what the producer gives up, or they wait forever. SPLIT: 32 for
  // the producer (its work list with the split tail spilled at 24), 232 for two consumers.
  static constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8;
  // PV8: 40 for the producer (its converting warps), 232 for the consumers.
  static constexpr int PRODUCER_REGS = PV8 ? 40 : WARPGROUPS == 3 || SPLIT ? 32 : 24;
  static constexpr int CONSUMER_REGS = WARPGROUPS == 3 ? 160 : PV8 ? 232 : SPLIT ? 232 : 240;
  static_assert(!PERSISTENT || (CONSUMER_REGS - LAUNCH_REGS) * CONSUMERS <= (LAUNCH_REGS - PRODUCER_REGS) * 128,
                "the consumers take more registers than the producer gives up");
  static_assert(!OVERLAP || PERSISTENT, "the overlap is the persistent kernel's");
  static_assert(!PINGPONG || OVERLAP, "the turns are built into the overlapped loop");
  static_assert(!SPLIT || PINGPONG, "the split tail is built on the pingpong schedule");
  static_assert(STAGES >= 1 && STAGES <= 4, "1 to 4 stages");
  static_assert(!PV8 || (PINGPONG && !SPLIT && WARPGROUPS == 2 && BN == 128 && D <= 128),
                "FP8 P V: the pingpong kernel of two warpgroups, 128-key tiles, head dim 64 or 128");
};

namespace native_attn {
using namespace dev;


// PV8: the producer warpgroup's warps that convert V (all but its loading warp), and their
// named barrier (1 .. WGS: the pingpong turns; the split's item barriers are not in PV8 kernels).
constexpr int kConvertWarps = 3, kConvertBar = 14;


// S = A B for 16 of K (the first k-step of a tile), written only: S's registers need not be
// live before it (the PV8 kernel, whose P V accumulator shares the turn with them).
template <int N, bool BF16>
SAGE_DEV void mma_ss_fresh(float (&d)[N / 2], u64 a, u64 b) {
  if constexpr (BF16) {
    if constexpr (N == 64) wgmma_bf16_m64n64k16_ss_fresh(d, a, b);
    else wgmma_bf16_m64n128k16_ss_fresh(d, a, b);
  } else {
    if constexpr (N == 64) wgmma_f16_m64n64k16_ss_fresh(d, a, b);
    else wgmma_f16_m64n128k16_ss_fresh(d, a, b);
  }
}
// S (+)= A B for 16 of K, both operands from shared memory (K-major).
template <int N, bool BF16>
SAGE_DEV void mma_ss(float (&d)[N / 2], u64 a, u64 b, int acc) {
  if constexpr (BF16) {
    if constexpr (N == 64) wgmma_bf16_m64n64k16_ss(d, a, b, acc);
    else wgmma_bf16_m64n128k16_ss(d, a, b, acc);
  } else {
    if constexpr (N == 64) wgmma_f16_m64n64k16_ss(d, a, b, acc);
    else wgmma_f16_m64n128k16_ss(d, a, b, acc);
  }
}
// S (+)= A B for 16 of K: A from registers, B from shared memory (K-major); N = 64.
template <bool BF16>
SAGE_DEV void mma_rs_k(float (&d)[32], const u32 (&a)[4], u64 b, int acc) {
  if constexpr (BF16) wgmma_bf16_m64n64k16_rs(d, a, b, acc);
  else wgmma_f16_m64n64k16_rs(d, a, b, acc);
}
// O (+)= P V for 16 keys: P from registers, V from shared memory (MN-major).
template <int N, bool BF16>
SAGE_DEV void mma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 b, int acc) {
  if constexpr (BF16) {
    if constexpr (N == 32) wgmma_bf16_m64n32k16_rs_mn(d, a, b, acc);
    else if constexpr (N == 64) wgmma_bf16_m64n64k16_rs_mn(d, a, b, acc);
    else if constexpr (N == 96) wgmma_bf16_m64n96k16_rs_mn(d, a, b, acc);
    else wgmma_bf16_m64n128k16_rs_mn(d, a, b, acc);
  } else {
    if constexpr (N == 32) wgmma_f16_m64n32k16_rs_mn(d, a, b, acc);
    else if constexpr (N == 64) wgmma_f16_m64n64k16_rs_mn(d, a, b, acc);
    else if constexpr (N == 96) wgmma_f16_m64n96k16_rs_mn(d, a, b, acc);
    else wgmma_f16_m64n128k16_rs_mn(d, a, b, acc);
  }
}

// A tile's descriptor from its low word (desc_lo, built once per tile; each k-step adds its
// offset / 16): 64-column blocks of 128-byte rows, 128B swizzle, 8-row groups 1024 bytes apart.
SAGE_DEV u64 desc_of(u32 lo) { return desc_from_lo(lo, 1024, 1); }

// S = Q K^T of one tile, issued as one wgmma group: Q's rows at sQw (column blocks of BM rows,
// the CTA's Q tile) and the K tile at sK, both K-major. KS: the k-steps of 16 columns that hold
// the call's columns (all of them, or 6 in the three-quarter entry of head dim 128).
template <class Cfg, bool BF16, int KS = Cfg::D / 16>
SAGE_DEV void issue_qk(float (&s)[Cfg::BN / 2], u32 sQw, u32 sK) {
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN;
  static_assert(KS > 0 && KS <= D / 16, "k-steps of the tile");
  const u32 dq = desc_lo(sQw), dk = desc_lo(sK);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    const u64 da = desc_of(dq + u32(((k / 4) * BM * 128 + (k % 4) * 32) >> 4));
    const u64 db = desc_of(dk + u32(((k / 4) * BN * 128 + (k % 4) * 32) >> 4));
    if (Cfg::PV8 && k == 0) mma_ss_fresh<BN, BF16>(s, da, db);
    else mma_ss<BN, BF16>(s, da, db, k > 0);
  }
  wgmma_commit();
}
// The same with the first Cfg::Q_REG_STEPS k-steps' Q from registers (qa: load_q_regs).
// KS k-steps only: the 64-column boxes of Q and K past them were not loaded (a call of a
// smaller head dim: their columns are zeros, whose products would add nothing).
template <class Cfg, bool BF16, int KS>
SAGE_DEV void issue_qk(float (&s)[Cfg::BN / 2], const u32 (&qa)[Cfg::Q_REG_STEPS > 0 ? Cfg::Q_REG_STEPS : 1][4],
                       u32 sQw, u32 sK) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, QR = Cfg::Q_REG_STEPS;
  static_assert(BN == 64, "A from registers: the N = 64 wrapper");
  static_assert(KS % 4 == 0 && KS <= Cfg::D / 16, "whole 64-column boxes");
  const u32 dq = desc_lo(sQw), dk = desc_lo(sK);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    const u64 bk = desc_of(dk + u32(((k / 4) * BN * 128 + (k % 4) * 32) >> 4));
    if (k < QR) mma_rs_k<BF16>(s, qa[k < QR ? k : 0], bk, k > 0);
    else mma_ss<BN, BF16>(s, desc_of(dq + u32(((k / 4) * BM * 128 + (k % 4) * 32) >> 4)), bk, k > 0);
  }
  wgmma_commit();
}
// Q's A fragments (m16n8k16 layout per warp) of the first Cfg::Q_REG_STEPS k-steps, from the
// CTA's Q tile (64-column blocks of BM 128-byte rows, 128B swizzle); wrow: the warp's first row.
template <class Cfg>
SAGE_DEV void load_q_regs(u32 (&qa)[Cfg::Q_REG_STEPS][4], const u8* sQ, int wrow) {
  load_a_frags(qa, sQ, wrow, [](int r, int c) { return (c / 8) * Cfg::BM * 128 + r * 128 + ((c % 8) ^ (r & 7)) * 16; });
}
// O += P V of one tile at D=256 over O's first QUARTERS 64-column quarters, those of the V
// boxes that were loaded (past them O stays 0 and is not stored): N = 128 per pair of
// quarters, N = 64 for a last odd one.
template <class Cfg, bool BF16, int QUARTERS>
SAGE_DEV void issue_pv_quarters(float (&o)[Cfg::D / 2], const u32 (&pa)[Cfg::BN / 16][4], u32 sV) {
  constexpr int BN = Cfg::BN;
  static_assert(Cfg::D == 256 && QUARTERS >= 1 && QUARTERS <= 4, "the column quarters of D=256");
  const u32 dv = desc_lo(sV, BN * 128);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < BN / 16; ++k) {
    const u32 kv = u32(k * 16 * 128);
#pragma unroll
    for (int q = 0; q + 1 < QUARTERS; q += 2)
      mma_rs<128, BF16>(reinterpret_cast<float(&)[64]>(o[q * 32]), pa[k], desc_of(dv + ((kv + q * BN * 128) >> 4)), 1);
    if constexpr (QUARTERS % 2 == 1)
      mma_rs<64, BF16>(reinterpret_cast<float(&)[32]>(o[(QUARTERS - 1) * 32]), pa[k],
                       desc_of(dv + ((kv + (QUARTERS - 1) * BN * 128) >> 4)), 1);
  }
  wgmma_commit();
}
// O += P V of one tile, issued as one wgmma group: P's A fragments from registers, the V tile
// at sV read MN-major (the leading offset: the next 64-column block, BN rows further). QN: the
// quarters of O computed, 4, or 3 in the three-quarter entry of head dim 128 (N = 96: the
// first block and half the second; O's last quarter stays 0 and is not stored).
template <class Cfg, bool BF16, int QN = 4>
SAGE_DEV void issue_pv(float (&o)[Cfg::D / 2], const u32 (&pa)[Cfg::BN / 16][4], u32 sV) {
  constexpr int D = Cfg::D, BN = Cfg::BN, N = QN * D / 4;
  static_assert(D <= 128, "N = D in one wgmma (D=256: issue_pv_quarters)");
  static_assert(QN == 4 || (QN == 3 && D == 128), "three quarters: head dim 128 (D=256: issue_pv_quarters)");
  const u32 dv = desc_lo(sV, BN * 128);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < BN / 16; ++k)
    mma_rs<N, BF16>(reinterpret_cast<float(&)[N / 2]>(o[0]), pa[k], desc_of(dv + u32((k * 16 * 128) >> 4)), 1);
  wgmma_commit();
}

// FP8 P V (Cfg::PV8). P (the softmax's output, accumulator layout, P x 4) as the E4M3 A
// fragments of wgmma m64nNk32: per 32 keys, bytes 4 tig.. hold keys 2 tig, 2 tig + 1, 8 + 2 tig,
// 9 + 2 tig and bytes 16 + 4 tig.. the same 16 keys on; convert_v8 orders V^T's keys to match.
template <class Cfg>
SAGE_DEV void pack_p8(const float (&pf)[Cfg::BN / 2], u32 (&pa)[Cfg::BN / 32][4]) {
#pragma unroll
  for (int k = 0; k < Cfg::BN / 32; ++k) {
    const float* f = &pf[16 * k];
    pa[k][0] = pack_e4m3x4(f[0], f[1], f[4], f[5]);     // row gid
    pa[k][1] = pack_e4m3x4(f[2], f[3], f[6], f[7]);     // row gid + 8
    pa[k][2] = pack_e4m3x4(f[8], f[9], f[12], f[13]);   // row gid,     keys 16 on
    pa[k][3] = pack_e4m3x4(f[10], f[11], f[14], f[15]); // row gid + 8
  }
}
// acc = P V' of one tile in FP8, one wgmma group, into FP16 accumulators (d: N/4 registers of
// two halves): the V^T tile at sV8 (D rows of BN bytes, 128B swizzle, K-major). N: the columns
// of O (rows of V^T from sV8). FRESH: the first k-step overwrites d.
template <class Cfg, int N, bool FRESH = true>
SAGE_DEV void issue_pv8_16(u32 (&d)[N / 4], const u32 (&pa)[Cfg::BN / 32][4], u32 sV8) {
  const u32 dv = desc_lo(sV8);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < Cfg::BN / 32; ++k) {
    const u64 db = desc_from_lo(dv + u32(2 * k), 8 * Cfg::BN, 1);
    if (FRESH && k == 0) {
      if constexpr (N == 64) wgmma_e4m3_m64n64k32_f16acc_fresh(d, pa[k], db);
      else if constexpr (N == 96) wgmma_e4m3_m64n96k32_f16acc_fresh(d, pa[k], db);
      else wgmma_e4m3_m64n128k32_f16acc_fresh(d, pa[k], db);
    } else {
      if constexpr (N == 64) wgmma_e4m3_m64n64k32_f16acc(d, pa[k], db);
      else if constexpr (N == 96) wgmma_e4m3_m64n96k32_f16acc(d, pa[k], db);
      else wgmma_e4m3_m64n128k32_f16acc(d, pa[k], db);
    }
  }
  wgmma_commit();
}
// V's mean over the keys of the tile at sV (FP16/BF16 as TMA left it; rows past `keys` are
// TMA's zeros), by the NW warps of the calling threads (ct: 0 .. 32 NW - 1): a kv head's first
// key tile gives the mean that every tile of the head is converted less (convert_v8) and that
// the epilogue adds back (O = P (V - mean) / l + mean, exact for any mean: P's row sums are l),
// so that a channel's offset (SageAttention2's V outliers) leaves E4M3 its precision for the
// rest. The mean is rounded to a multiple of 2^(E + 2 - M), E the exponent of the channel's
// largest magnitude in the tile and M the input type's mantissa bits (10 or 7): then v - mean,
// taken in the input type, rounds only by v's own low bits for |v - mean| up to 2^(E + 3),
// which are random. A mean of M bits would round every v - mean of a binade the same way
// (measured: BF16 at 4K keys, Gaussian rel-L1 0.042 against 0.038 without the mean). A warp
// sums whole channel groups (units of ldmatrix.x4.trans, as convert_v8: 8 keys of channel
// d0 + gid a lane, the quad's lanes the rest), so the quad's shuffles end each sum. The mean
// goes to gmean (FP32, the epilogue's) and smean (two copies packed, convert_v8's).
template <class Cfg, bool BF16, int NW>
SAGE_DEV void mean_v8(u32 sV, int ct, int keys, float* gmean, u32* smean) {
  constexpr int D = Cfg::D, BN = Cfg::BN;
  const int lane = ct % 32, w = ct / 32, gid = lane / 4, tig = lane % 4;
  const u32 ul = u32(lane), swz = ul & 7u;
  const float inv = 1.f / float(keys < BN ? keys : BN);
#pragma unroll 1
  for (int cg = w; cg < D / 8; cg += NW) {
    const u32 d0 = 8u * u32(cg);
    const u32 src0 = sV + (d0 >> 6) * u32(BN * 128) + ul * 128u + ((((d0 & 63u) >> 3) ^ swz) << 4);
    float s = 0.f;
    u32 mx2 = 0;  // two halves' largest magnitudes (as convert_v8)
#pragma unroll
    for (int kg = 0; kg < BN / 32; ++kg) {
      u32 r[4];
      ldsm_x4_t(r, src0 + u32(kg * 32 * 128));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (BF16) {
          s += bf16_to_f32(u16(r[j] & 0xffff)) + bf16_to_f32(u16(r[j] >> 16));
          asm("max.xorsign.abs.bf16x2 %0, %0, %1;" : "+r"(mx2) : "r"(r[j]));
        } else {
          s += f16x2_sum(r[j]);
          asm("max.xorsign.abs.f16x2 %0, %0, %1;" : "+r"(mx2) : "r"(r[j]));
        }
      }
    }
    u32 mx = max_(mx2 & 0x7fffu, (mx2 >> 16) & 0x7fffu);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    mx = max_(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    mx = max_(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    if (tig == 0) {
      // the grid 2^(E + 2 - M) (E at least the smallest normal's, so that the grid is a value)
      const int e = BF16 ? max_(int((mx >> 7) & 0xff) - 127, -100) : max_(int((mx >> 10) & 0x1f) - 15, -14);
      const int g = e + 2 - (BF16 ? 7 : 10);
      const float mean = rintf(s * inv * __int_as_float((127 - g) << 23)) * __int_as_float((127 + g) << 23);
      smean[d0 + u32(gid)] = pack_x2(mean, mean, BF16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16);  // exact
      gmean[d0 + u32(gid)] = mean;
    }
  }
}

// One V tile (FP16/BF16 at sV: 64-column blocks of BN 128-byte rows, 128B swizzle, as TMA left
// it), less its kv head's mean (`mean`: two copies a channel, mean_v8), into FP8 V^T at sV8, by
// the `NW` warps of the calling threads (ct: 0 .. 32 NW - 1), with a power-of-two scale 2^k: `kp`, the last tile's, as long as it puts this tile's largest magnitude
// in [1, 8) (else the tile is converted again with the k that puts it in [4, 8): Cfg::PV8_V_EXP).
// Returns k (every thread). `red`: NW words of shared scratch for the warps' maxima; `bar`: a
// named barrier of the NW warps. Each unit is one ldmatrix.x4.trans: 32 keys x 8 channels, so
// that a lane holds keys 2 tig, 2 tig + 1 (+ 8, + 16, + 24) of channel d0 + gid, which are the
// bytes 4 tig.. and 16 + 4 tig.. of V^T's row in P's fragment order (pack_p8). `wait_free` runs
// before the first write to sV8.
template <class Cfg, bool BF16, int NW, class WaitFree>
SAGE_DEV int convert_v8(u32 sV, u32 sV8, int ct, u32* red, int bar, int kp, const u32* mean, WaitFree wait_free) {
  constexpr int D = Cfg::D, BN = Cfg::BN;
  const int lane = ct % 32, w = ct / 32, gid = lane / 4, tig = lane % 4;
  // The largest magnitude, as the bits of a non-negative half (bf16: its high bits), compared as
  // integers (their order is the values' for non-negative floats; NaN above all).
  u32 mx2 = 0;  // two halves' largest magnitudes (max.xorsign.abs: the sign is not the maximum's)
  auto pass = [&](int k, bool track) {
    const u32 h = u32(k + 15) << 10, s2 = h | (h << 16);  // 2^k, two halves (FP16: k in [-8, 14])
    const float sf = __int_as_float((k + 127) << 23);
    // A warp takes halves (two 32-key groups) of groups of 8 channels, in turn: lane l gives the
    // row address of key 32 kg + l (matrix l / 8), whose swizzle depends on l alone.
    const u32 ul = u32(lane), swz = ul & 7u;
#pragma unroll 1
    for (u32 hg = u32(w); hg < u32(D / 4); hg += u32(NW)) {
      const u32 d0 = 8u * (hg >> 1), kg0 = 2u * (hg & 1u);
      const u32 src0 = sV + (d0 >> 6) * u32(BN * 128) + (32u * kg0 + ul) * 128u + ((((d0 & 63u) >> 3) ^ swz) << 4);
      const u32 dst0 = sV8 + (d0 + u32(gid)) * u32(BN) + 4u * u32(tig);
      const u32 mu = mean[d0 + u32(gid)];  // the channel's mean, two copies
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const u32 kg = kg0 + u32(kk);
        u32 r[4];
        ldsm_x4_t(r, src0 + u32(kk * 32 * 128));
#pragma unroll
        for (int j = 0; j < 4; ++j) r[j] = sub2<BF16>(r[j], mu);
        if (track) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if constexpr (BF16) asm("max.xorsign.abs.bf16x2 %0, %0, %1;" : "+r"(mx2) : "r"(r[j]));
            else asm("max.xorsign.abs.f16x2 %0, %0, %1;" : "+r"(mx2) : "r"(r[j]));
          }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          u16 lo, hi;
          if constexpr (BF16) {
            lo = pack_e4m3x2(bf16_to_f32(u16(r[2 * j] & 0xffff)) * sf, bf16_to_f32(u16(r[2 * j] >> 16)) * sf);
            hi = pack_e4m3x2(bf16_to_f32(u16(r[2 * j + 1] & 0xffff)) * sf, bf16_to_f32(u16(r[2 * j + 1] >> 16)) * sf);
          } else {
            lo = f16x2_to_e4m3x2(hmul2(r[2 * j], s2));
            hi = f16x2_to_e4m3x2(hmul2(r[2 * j + 1], s2));
          }
          // bytes 4 tig.. (j = 0) and 16 + 4 tig.. (j = 1) of the 32 keys: 16-byte chunk 2 kg + j
          const u32 dst = dst0 + ((((2u * kg + u32(j)) ^ u32(gid))) << 4);
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(dst), "r"(u32(lo) | (u32(hi) << 16)));
        }
      }
    }
  };
  wait_free();
  pass(kp, true);
  u32 mx = max_(mx2 & 0x7fffu, (mx2 >> 16) & 0x7fffu);  // the magnitudes' bits
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = max_(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) red[w] = mx;
  named_bar_sync(bar, 32 * NW);
#pragma unroll
  for (int j = 0; j < NW; ++j) mx = max_(mx, red[j]);
  // The exponent E of the largest magnitude (2^E <= x < 2^(E+1)): k = PV8_V_EXP - 1 - E puts it
  // in [4, 8) (the bound of Cfg::SLACK: FP16 accumulators). A zero or subnormal tile takes the
  // largest k; inf or NaN the smallest (its outputs are not finite anyway). kp stands while it
  // puts the largest in [1, 8): k - 2 <= kp <= k. (E4M3 keeps 3 bits down to 2^-6, 9 binades
  // below the tile's largest.)
  const int e = BF16 ? int((mx >> 7) & 0xff) - 127 : int((mx >> 10) & 0x1f) - 15;
  constexpr int KMIN = BF16 ? -100 : -8, KMAX = BF16 ? 100 : 14;
  int k = Cfg::PV8_V_EXP - 1 - e;
  k = k < KMIN ? KMIN : k > KMAX ? KMAX : k;
  if (kp > k || kp < k - 2) {
    pass(k, false);
    return k;
  }
  return kp;
}

// PV8's V8 jobs: job x = (b x heads_kv + kv head) x k_tiles + key tile converts that V tile into
// the FP8 V^T tile x of the workspace (v_prep: D rows of 128 bytes, tma_v8) with its scale 2^-k
// (v_scale[4x]: 16 bytes a tile, tma_vs), then sets flags[x] to the call's generation. The converting warps of every CTA
// take jobs by ticket, in this order, which is the order in which the CTAs' work units reach the
// kv heads, so the first wave's tiles come first; a CTA's loading lane waits for a tile's flag
// before it asks TMA for it. No converter waits for a consumer, and every ticket is taken by a
// running CTA, so the jobs finish whatever is resident. After the flags, in p.sync: the ticket
// counter and the count of finished roles (each CTA's converting warps and loading warp), both
// tagged with the generation (arrive_count); the role that finishes last puts the flags and both
// counters back to 0, so that a CUDA graph's replays (one generation) start clean.
template <bool B, class T, class F>
struct Pick {
  using type = T;
};
template <class T, class F>
struct Pick<false, T, F> {
  using type = F;
};
// The warp index (broadcast from lane 0, so that ptxas sees it warp-uniform) and the lane index,
// read again wherever used (constructed from the first read, which they ignore).
struct RecomputedWarp {
  SAGE_DEV RecomputedWarp(int) {}
  SAGE_DEV operator int() const { return __shfl_sync(0xffffffffu, int(threadIdx.x / 32), 0); }
};
struct RecomputedLane {
  SAGE_DEV RecomputedLane(int) {}
  SAGE_DEV operator int() const {
    int l;
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(l));
    return l;
  }
};
// After the two counters (done + 1 on): a flag a kv head, set once its V mean is in p.v_mean
// (mean_v8).
struct V8Jobs {
  int n;
  unsigned long long *flags, *ticket, *done;
};
SAGE_DEV V8Jobs v8_jobs(const SageAttnParams& p) {
  const int n = p.batch * p.heads_kv * p.k_tiles;
  return {n, p.sync, p.sync + n, p.sync + n + 1};
}
// The first round (items a CTA takes before it: unit / gridDim.x) whose unit reads V8 job x's kv
// head: the units are a head's query tiles (causal: pairs of them; packed GQA: a kv head's
// tiles), heads in order (work_item).
template <class Cfg>
SAGE_DEV int v8_first_round(const SageAttnParams& p, int x) {
  const int kvh = x / p.k_tiles, b = kvh / p.heads_kv, hk = kvh - b * p.heads_kv;
  i64 u0;
  if (p.pack_rows > 0) u0 = i64(kvh) * p.q_tiles;
  else {
    const i64 bh = i64(b) * p.heads_q + i64(hk) * (p.heads_q / p.heads_kv);
    u0 = bh * (p.causal && !p.causal_single ? (p.q_tiles + 1) / 2 : p.q_tiles);
  }
  return int(u0 / i64(gridDim.x));
}
// One role of this CTA is done with the V8 jobs (the converting warps: no ticket left; the
// loading warp: every flag read). Threads tid = 0 .. nthreads - 1 of the role call it; `bar`:
// their named barrier (-1: one warp). The last of the grid's 2 x gridDim.x roles clears.
SAGE_DEV void v8_jobs_done(const SageAttnParams& p, const V8Jobs& j, int tid, int nthreads, int bar, int* shared) {
  int last = 0;
  if (tid == 0) {
    __threadfence();
    last = add_count(j.done, p.generation) + 1u == 2u * gridDim.x;
    __threadfence();
  }
  if (bar < 0) {
    last = __shfl_sync(0xffffffffu, last, 0);
  } else {
    if (tid == 0) *shared = last;
    named_bar_sync(bar, nthreads);
    last = *shared;
  }
  if (!last) return;
  for (int i = tid; i < j.n; i += nthreads) j.flags[i] = 0ull;
  for (int i = tid; i < p.batch * p.heads_kv; i += nthreads) j.done[1 + i] = 0ull;
  if (tid == 0) {
    *j.ticket = 0ull;
    *j.done = 0ull;
  }
}

// hide, kRescaleSlack and softmax_tile: softmax.cuh (shared with the native mma.sync kernel).
using softmax::hide;
using softmax::kRescaleSlack;
using softmax::softmax_tile;

// The online softmax of one tile without its row maxima: the exponentials are taken against
// the rows' reference maxima as they stand, and they stand when no lane's partial row sum
// exceeds Cfg::FAST_SUM_MAX (then no P of the tile does: FP16 P at most 2^12, which it holds
// with its usual relative precision; FP8 P at most 256 after its factor): O needs no rescaling and the reference
// stays. Saves the max pass (a compare per score and two shuffles a row) and its latency
// before the first exponential. Returns 0 when that held for the whole warp (s is P, and
// `sum` this lane's partial row sums for l); 1 when a row of the warp has no reference yet
// (-inf: nothing was done, s is intact); 2 when a sum passed the bound or is not a number
// (s is clobbered). Warp-uniform.
template <class Cfg, int MASK>
SAGE_DEV int softmax_fast(const SageAttnParams& p, const float (&m)[2], float (&s)[Cfg::BN / 2], float scale,
                          int col_base, int row0, float (&sum)[2]) {
  constexpr int NT = Cfg::BN / 8;
  constexpr float shift = p_log2_scale(Cfg::P_SCALE);
  if (!__all_sync(0xffffffffu, m[0] != neg_inf() && m[1] != neg_inf())) return 1;
  bool ok = true;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if constexpr (MASK) hide<Cfg, MASK == softmax::kMaskWindow>(p, s, col_base, row0, hh);
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = ex2(fmaf(s[4 * n + 2 * hh + e], scale, shift - m[hh]));
        s[4 * n + 2 * hh + e] = v;
        rs[e] += v;
      }
    sum[hh] = rs[0] + rs[1];
    ok = ok && sum[hh] <= Cfg::FAST_SUM_MAX;  // false for NaN too
  }
  return __all_sync(0xffffffffu, ok) ? 0 : 2;
}

// P (the softmax's output, accumulator layout) as the 16-bit A fragments of P V: the S
// accumulator's layout is the A fragment's, so this is only packing.
template <class Cfg, bool BF16>
SAGE_DEV void pack_p(const float (&pf)[Cfg::BN / 2], u32 (&pa)[Cfg::BN / 16][4]) {
  constexpr int dtype = BF16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16;
#pragma unroll
  for (int k = 0; k < Cfg::BN / 16; ++k) {
    pa[k][0] = pack_x2(pf[8 * k + 0], pf[8 * k + 1], dtype);  // row gid,     keys 16k + 2tig, +1
    pa[k][1] = pack_x2(pf[8 * k + 2], pf[8 * k + 3], dtype);  // row gid + 8
    pa[k][2] = pack_x2(pf[8 * k + 4], pf[8 * k + 5], dtype);  // row gid,     keys 16k + 8 + 2tig, +1
    pa[k][3] = pack_x2(pf[8 * k + 6], pf[8 * k + 7], dtype);  // row gid + 8
  }
}

// S of one warp's 16 rows by mma.sync m16n8k16 (warp-local, unlike a wgmma): the persistent
// kernels' fallback from softmax_fast. Q's rows at sQw (column blocks of BM rows), the warp's
// first row `wrow` of them, the K tile at sK; both 64-column blocks of 128-byte rows, 16-byte
// chunks swizzled by (row % 8). The m16n8 accumulator is the wgmma accumulator's layout for
// the warp's rows. (In the plain kernels, whose registers are capped by their occupancy, it
// cost 40-70 registers: S lands outside the wgmma accumulator's registers.)
template <class Cfg, bool BF16>
SAGE_DEV void qk_warp(float (&s)[Cfg::BN / 2], u32 sQw, u32 sK, int wrow) {
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN;
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  auto pair = [](u32 base, int rows, int r, int k) {  // elements k, k + 1 of row r (k even)
    u32 v;
    const u32 addr = base + u32((k / 64) * rows * 128 + r * 128 + ((((k % 64) / 8) ^ (r & 7)) << 4) + (k % 8) * 2);
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
  };
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) {
    float(&d)[4] = *reinterpret_cast<float(*)[4]>(&s[4 * n]);
    d[0] = d[1] = d[2] = d[3] = 0.f;
#pragma unroll 1
    for (int kk = 0; kk < D; kk += 16) {
      const u32 a[4] = {pair(sQw, BM, wrow + gid, kk + 2 * tig), pair(sQw, BM, wrow + gid + 8, kk + 2 * tig),
                        pair(sQw, BM, wrow + gid, kk + 8 + 2 * tig), pair(sQw, BM, wrow + gid + 8, kk + 8 + 2 * tig)};
      const u32 b0 = pair(sK, BN, 8 * n + gid, kk + 2 * tig), b1 = pair(sK, BN, 8 * n + gid, kk + 8 + 2 * tig);
      if constexpr (BF16) mma_bf16_f32(d, a, b0, b1);
      else mma_f16_f32(d, a, b0, b1);
    }
  }
}

// Tile t's online softmax for one warp of the persistent kernels (S in s): the fast form where
// it holds, else S again for the warp's rows (qk_warp: the caller keeps the Q and K tiles
// until this returns) and the exact form, its reference moved to the tile's maximum (so that
// the next tiles are fast again). Returns whether O needs rescaling by alpha.
template <class Cfg, int MASK, bool BF16>
SAGE_DEV bool fast_tile(const SageAttnParams& p, float (&m)[2], float (&l)[2], float (&s)[Cfg::BN / 2], float scale,
                        int col_base, int row0, float (&alpha)[2], u32 sQw, u32 sK, int wrow) {
  float sum[2];
  const int fast = softmax_fast<Cfg, MASK>(p, m, s, scale, col_base, row0, sum);
  if (fast == 0) {
    l[0] += sum[0];
    l[1] += sum[1];
    return false;
  }
  if (fast == 2) qk_warp<Cfg, BF16>(s, sQw, sK, wrow);
  return softmax_tile<Cfg, MASK>(p, m, l, s, scale, col_base, row0, alpha, fast == 2 ? 0.f : Cfg::SLACK);
}

// The plain kernel's Q K^T of one tile: with Q's first k-steps in registers (Cfg::Q_REG_STEPS,
// head dim 256), one straight wgmma sequence a box count (a bound inside the sequence makes
// ptxas fence every wgmma, C7519); else every k-step from shared memory.
template <class Cfg, bool BF16>
SAGE_DEV void issue_qk_boxes(float (&s)[Cfg::BN / 2], const u32 (&qa)[Cfg::Q_REG_STEPS > 0 ? Cfg::Q_REG_STEPS : 1][4],
                             int boxes, u32 sQw, u32 sK) {
  if constexpr (Cfg::Q_REG_STEPS > 0) {
    if (boxes == 4) issue_qk<Cfg, BF16, 16>(s, qa, sQw, sK);
    else if (boxes == 3) issue_qk<Cfg, BF16, 12>(s, qa, sQw, sK);
    else if (boxes == 2) issue_qk<Cfg, BF16, 8>(s, qa, sQw, sK);
    else issue_qk<Cfg, BF16, 4>(s, qa, sQw, sK);
  } else {
    issue_qk<Cfg, BF16>(s, sQw, sK);
  }
}
// ... and its P V: at head dim 256 over the `boxes` quarters of O whose V boxes were loaded.
template <class Cfg, bool BF16>
SAGE_DEV void issue_pv_boxes(float (&of)[Cfg::D / 2], const u32 (&pa)[Cfg::BN / 16][4], int boxes, u32 sV) {
  if constexpr (Cfg::D == 256) {
    if (boxes == 4) issue_pv_quarters<Cfg, BF16, 4>(of, pa, sV);
    else if (boxes == 3) issue_pv_quarters<Cfg, BF16, 3>(of, pa, sV);
    else if (boxes == 2) issue_pv_quarters<Cfg, BF16, 2>(of, pa, sV);
    else issue_pv_quarters<Cfg, BF16, 1>(of, pa, sV);
  } else {
    issue_pv<Cfg, BF16>(of, pa, sV);
  }
}
// O's rows rescaled where their reference maximum moved (alpha: the rows' factors).
template <int D>
SAGE_DEV void rescale_o(float (&o)[1][D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][j][e] *= alpha[e / 2];
}

// A paged KV cache's key tiles as TMA boxes (the plain kernel's PAGED entry, sage_attn_paged):
// the maps tma_k and tma_v are 4-D (D, page_size, Hkv, num_pages) over the caches (launch.cpp:
// native_tensor_maps), boxes of 64 columns by R = min(page_size, BN) rows, so a tile is BN / R
// boxes of consecutive keys: box j of tile t holds keys t BN + j R .. + R - 1, slots
// (t BN + j R) % page_size .. of page table[(t BN + j R) / page_size]. Pages are powers of two,
// so a box never straddles two. Each box lands R 128-byte rows after the last, where the 128B
// swizzle (a function of the shared memory address) puts it as one box of BN rows would. Each
// box is one lane's (attn_kernel_t: the warps share a tile's boxes), its entry looked up a tile
// ahead (the caller's `ahead`: the entry of the next tile it will load, so the lookup's latency
// passes under a tile's work). An entry past the sequence's keys or outside [0, num_pages) reads
// page 0.
template <int BN>
struct PagedBoxes {
  const sage_i32* table;  // the sequence's row of the block table
  int shift;              // log2 page_size
  int rshift;             // log2 R
  int boxes;              // BN / R
  int count;              // pages in the caches
  int keys;               // the sequence's keys
  static constexpr int LOG2_BN = BN == 256 ? 8 : BN == 128 ? 7 : BN == 64 ? 6 : BN == 32 ? 5 : 4;
  static_assert((1 << LOG2_BN) == BN, "key tiles of 16 to 256 rows");
  SAGE_DEV PagedBoxes(const SageAttnParams& p, int b)
      : table(p.block_table + i64(b) * p.bt_stride),
        shift(p.page_shift),
        rshift(min_(p.page_shift, LOG2_BN)),
        boxes(BN >> min_(p.page_shift, LOG2_BN)),
        count(p.num_pages),
        keys(p.seq_kv) {}
  // Box j's table entry in tile t, as the table holds it (0 past the keys or the tile's boxes).
  SAGE_DEV int entry(int t, int j) const {
    const int key = t * BN + (j << rshift);
    return j < boxes && key < keys ? __ldg(table + (key >> shift)) : 0;
  }
  SAGE_DEV int page(int e) const { return unsigned(e) < unsigned(count) ? e : 0; }
  SAGE_DEV int slot(int t, int j) const { return (t * BN + (j << rshift)) & ((1 << shift) - 1); }
};

// grid (q_tiles, Hq, B) (causal: mma_attn::cta_coords), Cfg::THREADS threads,
// Cfg::SMEM_BYTES dynamic shared memory. The tensor maps tma_q/k/v are 4-D (D, N, H, B) over
// the caller's tensors, boxes of 64 columns by BM (Q) or BN (K, V) rows.
// K and V have "full" barriers of their own per ring slot. With one stage, or two warpgroups,
// each is refilled as soon as the CTA is done with it (SPLIT): a slot's K once every warp's
// Q K^T of it has completed (so the next K tile loads under this tile's softmax and P V), its
// V once every P V has (under the next tile's Q K^T and softmax). Each warp arrives on the
// slot's "empty" barriers (no CTA barrier in the loop: the warpgroups of a two-warpgroup CTA do
// not wait for each other); thread 0 waits for them and refills the slot: K while its own P V
// runs, V before it waits for the next tile's K. One warpgroup with two or more stages keeps a
// CTA barrier per tile after P V and refills K and V together (H100, D=64, 64x64 and 64x128
// tiles, two stages: 2-5% faster than SPLIT).
// `p`: the call, or with VARLEN the view of this CTA's sequence (mma_attn::varlen_view: b = 0,
// its lengths); `g`: the kernel's parameters, whose tensor maps TMA reads in place (a view's
// copies of them are local memory), over the packed [1, total, heads, D] tensors with VARLEN,
// whose sequence starts at rows p.q_row0 and p.kv_row0.
// PAGED: a paged KV cache (p: the sequence's mma_attn::paged_view; g's maps tma_k and tma_v
// over the caches' pages: PagedBoxes); with VARLEN, its varlen_paged_view (Q packed, b = 0 and
// the sequence's row of the block table).
template <class Cfg, bool BF16, int BOXES = 0, bool VARLEN = false, bool WINDOW = false, bool PAGED = false>
SAGE_DEV void attn_kernel_t(const SageAttnParams& p, const SageAttnParams& g) {
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, ST = Cfg::STAGES, CH = Cfg::CHUNKS;
  constexpr int NWARPS = Cfg::CONSUMERS / 32;
  constexpr bool SPLIT = ST == 1 || Cfg::WGS > 1;
  extern __shared__ __align__(1024) u8 smem_raw[];
  // The barriers, [0]: Q full; then per slot s: K full, V full, K empty, V empty (SPLIT). They
  // live in the dynamic buffer's alignment slack (no static shared memory: a 128x128 tile of two
  // warpgroups with three stages at D=64 then fits two CTAs per SM): before the tiles where the
  // base's padding to 1 KiB holds them, else after the tiles (SMEM_BYTES leaves 1024 - pad).
  constexpr u32 BAR_BYTES = 8u * (1 + (SPLIT ? 4 : 2) * ST);
  constexpr u32 TILES_BYTES = Cfg::SMEM_BYTES - 1024;
  static_assert(BAR_BYTES <= 512, "the barriers fit the slack on one side of the tiles");
  const u32 base = smem_addr(smem_raw);
  const u32 pad = (1024u - (base & 1023u)) & 1023u;
  u8* smem = smem_raw + pad;
  const wgmma_attn::CtaTile<Cfg, WINDOW> c(p, threadIdx.x);
  const int warp = c.warp, wg = c.wg, h = c.h, hkv = c.hkv, b = c.b, m0 = c.m0, row0 = c.row0;
  // The loop counts tiles from the CTA's first (kt0: a sliding window's, WINDOW; else 0), whose
  // rows the loads start at; the softmax takes the key tile's own columns, (t + kt0) * BN. A
  // masked tile's softmax: MASK.
  constexpr int MASK = WINDOW ? softmax::kMaskWindow : 1;
  const int kt0 = c.t_begin, n_tiles = c.n_tiles - kt0, mask_from = c.mask_from - kt0,
            mask_before = c.mask_before - kt0;
  const int q_row0 = VARLEN ? p.q_row0 : 0, kv_row0 = (VARLEN ? p.kv_row0 : 0) + kt0 * BN;
  const u32 sQ = smem_addr(smem);
  const u32 sK0 = sQ + Cfg::SMEM_Q;
  const u32 sV0 = sK0 + ST * Cfg::SMEM_K_STAGE;
  const u32 bar0 = pad >= BAR_BYTES ? base : base + pad + TILES_BYTES;
  auto k_full = [&](int slot) { return bar0 + 8u * u32(1 + slot); };
  auto v_full = [&](int slot) { return bar0 + 8u * u32(1 + ST + slot); };
  auto k_empty = [&](int slot) { return bar0 + 8u * u32(1 + 2 * ST + slot); };
  auto v_empty = [&](int slot) { return bar0 + 8u * u32(1 + 3 * ST + slot); };
  // D=256: the 64-column boxes loaded and computed, BOXES where the entry fixes them
  // (sage_attn_q3: 3; a call's columns past its head dim read as zeros, TMA's fill past the
  // tensor map's row), else those that hold some of the caller's columns (the k-steps and O's
  // quarters past them are skipped, so the boxes' stale shared memory is never read). Below
  // 256 every box.
  static_assert(BOXES == 0 || (D == 256 && BOXES >= 1 && BOXES <= CH), "fixed boxes: head dim 256");
  const int boxes = D == 256 ? (BOXES > 0 ? BOXES : min_(CH, (p.head_dim + 63) / 64)) : CH;
  // PAGED: the warps load their share of a tile's boxes (PagedBoxes: box warp + NWARPS x lane,
  // so each TMA instruction issues for one lane, or a few with pages of under 16 slots, and no
  // warp stalls its warpgroup's wgmma for long; warps past the boxes, as with pages of a whole
  // tile, neither load nor wait for the slots), thread 0 arms the barriers; the next tile's
  // entries of K and V in ek, ev.
  static_assert(!PAGED || !WINDOW, "a paged cache's queries have no window");
  static_assert(!PAGED || 32 * NWARPS >= BN, "a box a lane at most (pages of one slot)");
  const PagedBoxes<BN> pg(p, b);
  const bool loader = PAGED ? warp < pg.boxes : threadIdx.x == 0;
  const int pbox = warp + NWARPS * int(threadIdx.x % 32);  // this lane's box of a tile (PAGED)
  int ek = 0, ev = 0;
  // The paged tile's box of this lane from `ahead` (its entry), which then becomes the next
  // tile's.
  auto load_paged = [&](u32 dst, const void* map, u32 bar, int tile, int& ahead) {
    if (pbox < pg.boxes) {
      const int pe = pg.page(ahead), row = pg.slot(tile, pbox);
#pragma unroll
      for (int cc = 0; cc < CH; ++cc)
        if (D < 256 || cc < boxes) tma_load_4d(dst + cc * BN * 128 + (pbox << pg.rshift) * 128, map, cc * 64, row, hkv, pe, bar);
    }
    ahead = pg.entry(tile + 1, pbox);
  };
  auto load_k = [&](int tile, int slot) {
    if (!PAGED || threadIdx.x == 0) mbar_arrive_expect_tx(k_full(slot), D == 256 ? boxes * BN * 128 : Cfg::SMEM_K_STAGE);
    if constexpr (PAGED) {
      load_paged(sK0 + slot * Cfg::SMEM_K_STAGE, &g.tma_k, k_full(slot), tile, ek);
      return;
    }
#pragma unroll
    for (int cc = 0; cc < CH; ++cc)
      if (D < 256 || cc < boxes)
        tma_load_4d(sK0 + slot * Cfg::SMEM_K_STAGE + cc * BN * 128, &g.tma_k, cc * 64, tile * BN + kv_row0, hkv, b,
                    k_full(slot));
  };
  auto load_v = [&](int tile, int slot) {
    if (!PAGED || threadIdx.x == 0) mbar_arrive_expect_tx(v_full(slot), D == 256 ? boxes * BN * 128 : Cfg::SMEM_V_STAGE);
    if constexpr (PAGED) {
      load_paged(sV0 + slot * Cfg::SMEM_V_STAGE, &g.tma_v, v_full(slot), tile, ev);
      return;
    }
#pragma unroll
    for (int cc = 0; cc < CH; ++cc)
      if (D < 256 || cc < boxes)
        tma_load_4d(sV0 + slot * Cfg::SMEM_V_STAGE + cc * BN * 128, &g.tma_v, cc * 64, tile * BN + kv_row0, hkv, b,
                    v_full(slot));
  };
  wgmma_attn::tma_barriers_init(g, bar0, 1 + 2 * ST, SPLIT ? 2 * ST : 0, NWARPS);
  if (loader) {
    if (!PAGED || threadIdx.x == 0) {
      mbar_arrive_expect_tx(bar0, D == 256 ? boxes * BM * 128 : Cfg::SMEM_Q);
#pragma unroll
      for (int cc = 0; cc < CH; ++cc)
        if (D < 256 || cc < boxes) tma_load_4d(sQ + cc * BM * 128, &g.tma_q, cc * 64, m0 + q_row0, h, b, bar0);
    }
    if constexpr (PAGED) ek = ev = pg.entry(0, pbox);
#pragma unroll
    for (int s = 0; s < ST; ++s)
      if (s < n_tiles) {
        load_k(s, s);
        load_v(s, s);
      }
  }

  const float scale = p.sm_scale * kLog2e;
  float m[1][2], l[1][2], o[1][D / 8][4];
  wgmma_attn::init_state<D>(m, l, o);
  float(&of)[D / 2] = reinterpret_cast<float(&)[D / 2]>(o);  // the wgmma accumulator view

  const u32 sQw = sQ + wg * 64 * 128;
  const bool lane0 = threadIdx.x % 32 == 0;
  mbar_wait(bar0, 0);
  constexpr int QR = Cfg::Q_REG_STEPS;
  u32 qa[QR > 0 ? QR : 1][4];
  if constexpr (QR > 0) load_q_regs<Cfg>(qa, smem, wg * 64 + 16 * (warp % 4));
  // FAST: each warp's softmax first tries softmax_fast (no row maxima). A warp for which it
  // does not hold adds nothing to O on this tile (P V with P = 0), and a CTA barrier at the
  // tile's end votes (bar.red): if any warp gave up, the tile runs again (its K and V are still
  // in their slot), those warps with the exact softmax and the others with P = 0. One Q K^T
  // and one P V stay in the loop body (a second pair in a redo branch cost 30-70 registers).
  // The one-warpgroup kernels with two or more stages end each tile with that barrier anyway.
  // SPLIT kernels take it only with a register cap (MIN_CTAS >= 2; D=64 128x128 of two
  // warpgroups stays at 128 registers, no spills): uncapped, ptxas gives them 167 and one CTA
  // per SM. With FAST a SPLIT kernel releases a slot's K at the tile's end too and refills it
  // with V at the top of the next tile; one-stage rings keep the exact softmax and the K
  // refill under P V.
  constexpr bool FAST = ST >= 2 && (!SPLIT || Cfg::MIN_CTAS >= 2);
  bool again = false;  // this iteration repeats tile t
  bool mine = false;   // ... for this warp's sake
  for (int t = 0; t < n_tiles;) {
    const int slot = t % ST;
    const u32 phase = (t / ST) & 1;
    const u32 sK = sK0 + slot * Cfg::SMEM_K_STAGE, sV = sV0 + slot * Cfg::SMEM_V_STAGE;
    // SPLIT: tile t-1's V slot, once every warp's P V of it has completed (before this tile's
    // K is awaited: with one stage, V is loaded under this tile's Q K^T and softmax).
    if (SPLIT && loader && !again && t >= 1 && t - 1 + ST < n_tiles) {
      const int ps = (t - 1) % ST;
      const u32 pph = ((t - 1) / ST) & 1;
      if (FAST) {
        mbar_wait(k_empty(ps), pph);
        load_k(t - 1 + ST, ps);
      }
      mbar_wait(v_empty(ps), pph);
      load_v(t - 1 + ST, ps);
    }
    mbar_wait(k_full(slot), phase);
    float s[BN / 2];
    issue_qk_boxes<Cfg, BF16>(s, qa, boxes, sQw, sK);
    wgmma_wait<0>();
    fence_regs(s);
    if (SPLIT && !FAST && lane0) mbar_arrive(k_empty(slot));
    u32 pa[BN / 16][4];
    float alpha[2] = {1.f, 1.f};
    // 0: fast softmax held; 1: exact (lazy); 2: gave up (P = 0 now, exact on the repeat);
    // 3: exact with the reference moved to the tile's maximum (the repeat, for this warp);
    // 4: P = 0 (the repeat, for the other warps).
    int mode = 1;
    if (FAST) {
      if (again) {
        mode = mine ? 3 : 4;
      } else {
        float sum[2];
        const bool masked = t >= mask_from || (WINDOW && t < mask_before);
        mode = masked ? softmax_fast<Cfg, MASK>(p, m[0], s, scale, (t + kt0) * BN, row0, sum)
                      : softmax_fast<Cfg, 0>(p, m[0], s, scale, (t + kt0) * BN, row0, sum);
        if (mode == 0) {
          l[0][0] += sum[0];
          l[0][1] += sum[1];
        }
      }
    }
    bool moved = false;
    if (mode == 1 || mode == 3) {
      const float slack = mode == 3 ? 0.f : kRescaleSlack;
      moved = t >= mask_from || (WINDOW && t < mask_before)
                  ? softmax_tile<Cfg, MASK>(p, m[0], l[0], s, scale, (t + kt0) * BN, row0, alpha, slack)
                  : softmax_tile<Cfg, 0>(p, m[0], l[0], s, scale, (t + kt0) * BN, row0, alpha, slack);
    }
    if (mode == 2 || mode == 4) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
    }
    pack_p<Cfg, BF16>(s, pa);
    if (moved) rescale_o<D>(o, alpha);
    mbar_wait(v_full(slot), phase);
    if constexpr (PAGED) {
      // The sequence's last tile: V's rows past its keys are zeroed (their slots of its last
      // page, or page 0 past it, may hold anything, and P = 0 times an infinity or a NaN is
      // not 0), 16 bytes a thread at a time, before any warp's P V reads them.
      const int rem = p.seq_kv - t * BN;
      if (rem < BN) {
        const int chunks = (BN - rem) * 8;  // a box's 16-byte chunks past the keys
        for (int i = int(threadIdx.x); i < boxes * chunks; i += Cfg::THREADS)
          sts_v4(sV + (i / chunks) * BN * 128 + rem * 128 + (i % chunks) * 16, 0.f, 0.f, 0.f, 0.f);
        fence_proxy_async();
        __syncthreads();
      }
    }
    issue_pv_boxes<Cfg, BF16>(of, pa, boxes, sV);
    // SPLIT, under this P V: this slot's K, once every warp's Q K^T of it has completed.
    if (SPLIT && !FAST && loader && t + ST < n_tiles) {
      mbar_wait(k_empty(slot), phase);
      load_k(t + ST, slot);
    }
    wgmma_wait<0>();
    fence_regs(of);
    if (FAST) {
      if (__syncthreads_or(mode == 2) != 0) {
        again = true;
        mine = mode == 2;
        continue;
      }
      again = false;
    }
    if constexpr (SPLIT) {
      if (lane0) {
        if (FAST) mbar_arrive(k_empty(slot));
        mbar_arrive(v_empty(slot));
      }
    } else {
      if (loader && t + ST < n_tiles) {
        load_k(t + ST, slot);
        load_v(t + ST, slot);
      }
    }
    ++t;
  }
  // Every issued copy was waited for; the epilogue stages O over the tiles once every warp is
  // past its last P V (without SPLIT, the barrier that ended the last tile saw to that; with
  // no tile, Q has landed and no warp reads the tiles).
  if constexpr (SPLIT && !FAST) __syncthreads();
  epilogue::store<Cfg, 1>(p, m, l, o, b, h, c.kv_bh, warp, row0, smem);
}

// ---- The persistent schedule ----------------------------------------------------------------
// One CTA per SM (and occupancy slot) walks a static list of work units: unit u covers query
// tile u % q_tiles of head u / q_tiles, or for causal masks the pair (q_tiles - 1 - j, j) of a
// head (the tile that sees the most keys with the one that sees the fewest, so every unit costs
// about the same), heads in order so that the CTAs running together share K and V in L2.
// CTA c takes units c, c + gridDim.x, ... (the launcher's grid is min(units, SMs x CTAs/SM),
// or every CTA where fewer units are split over them). With p.pack_rows a unit is a query
// tile of a (batch, kv head): BM / pack_rows of its group's query heads, pack_rows rows each,
// the group over p.q_tiles such tiles (more than one only in persistent_split: a group of more
// heads than a tile holds); with p.causal_single (causal calls of no more query tiles than
// CTAs) a unit is one query tile.
template <class Cfg>
SAGE_DEV int persistent_units(const SageAttnParams& p) {
  if (p.pack_rows > 0) return p.heads_kv * p.batch * (Cfg::SPLIT ? p.q_tiles : 1);
  return (p.causal && !p.causal_single ? (p.q_tiles + 1) / 2 : p.q_tiles) * p.heads_q * p.batch;
}

// The split tail (calls with p.split_o, when the units do not divide evenly among the G CTAs;
// causal ones only with one query tile per head, so that every unit sees every key tile; with
// fewer units than CTAs, all of them, over every CTA: decoding): the rounds of G units run as
// above, and the key tiles of the last, partial round's units (`work` in all) are cut into
// p.split_ranges <= G contiguous ranges of nearly equal length (the launcher's choice:
// launch.cpp, split_ranges), so the CTAs end at about the same time instead of G - units % G
// of them idling through the last round. Range r (tail tiles [lo(r), lo(r + 1))) is CTA
// G - 1 - r's. A range is no longer than a unit, so it holds at most two pieces: first the end
// of a unit begun in range r - 1 (a partial piece: its O, row maxima and row sums go to the
// workspace, slot r), then the start of the next unit (its owner piece: once done, it waits
// for the partials of the ranges after r that hold the unit's other tiles, merges them and
// stores O; with four or more, in two levels: merge_plan). Pieces wait only for CTAs of lower
// index, whose partial pieces come first and wait for nothing but CTAs of lower index still:
// dispatched before the waiter, they finish whatever else the GPU runs. 32-bit
// arithmetic throughout (the launcher splits only where work x ranges < 2^31): a 64-bit
// division is a call, and a call in the kernel takes the wgmma descriptors out of the uniform
// registers.
struct TailSplit {
  int first;   // the first unit of the tail (the units when there is none)
  int tiles;   // key tiles of a unit
  int work;    // key tiles of the tail
  int ranges;  // ranges they are cut into
  SAGE_DEV int lo(int r) const { return int(unsigned(work) * unsigned(min_(r, ranges)) / unsigned(ranges)); }
};
template <class Cfg>
SAGE_DEV TailSplit tail_split(const SageAttnParams& p) {
  const int units = persistent_units<Cfg>(p), G = int(gridDim.x);
  TailSplit t;
  t.tiles = p.k_tiles;
  const bool split = Cfg::SPLIT && p.split_o && p.split_ranges > 0;
  t.first = split ? units / G * G : units;
  t.work = (units - t.first) * t.tiles;
  t.ranges = split ? p.split_ranges : 1;
  return t;
}

// One query tile of a unit (or a piece of one), as the producer hands it to the consumers with
// its Q buffer: query head, batch, first row, and key tiles [t0, t0 + n_tiles); n_tiles < 0
// ends the list; mask_from: the first key tile that needs masking; part: what the consumers
// do with the result (0 store it; 2 a partial piece of a split unit, the end of its keys: to
// the workspace, slot G - 1 - blockIdx.x; 1 its owner piece, the start of its keys: merge the
// partials of the ranges after this CTA's, then store); j0: packed, the tile's first head within
// its group (h - j0 is the group's first; persistent_split's alone). It is handed over in
// shared memory on named barriers (consumers that computed the list themselves took 40 bytes
// of spills and the wgmma descriptors out of the uniform registers).
struct WorkItem {
  int h, b, m0, t0, n_tiles, mask_from, part, j0;
};
// Item i (0 or 1) of unit u; false when the unit has no such item.
template <class Cfg>
SAGE_DEV bool work_item(const SageAttnParams& p, int u, int i, WorkItem* w) {
  int qt, bh;
  if (Cfg::SPLIT && p.pack_rows > 0) {  // packed (a group over p.q_tiles tiles): one tile a unit
    if (i == 1) return false;
    qt = u % p.q_tiles;
    bh = u / p.q_tiles;
  } else if (p.causal && p.causal_single) {  // one tile a unit, a head's longest first
    if (i == 1) return false;
    qt = p.q_tiles - 1 - u % p.q_tiles;
    bh = u / p.q_tiles;
  } else if (p.causal) {
    const int per = (p.q_tiles + 1) / 2, j = u % per;
    bh = u / per;
    qt = i == 0 ? p.q_tiles - 1 - j : j;
    if (i == 1 && qt == p.q_tiles - 1 - j) return false;  // odd count: the middle tile is alone
  } else {
    if (i == 1) return false;
    qt = u % p.q_tiles;
    bh = u / p.q_tiles;
  }
  if constexpr (Cfg::SPLIT) {
    if (p.pack_rows > 0) {  // the tile's first query head: head qt * (BM / pack_rows) of the group
      w->j0 = qt * (Cfg::BM / p.pack_rows);
      w->h = (bh % p.heads_kv) * (p.heads_q / p.heads_kv) + w->j0;
      w->b = bh / p.heads_kv;
      qt = 0;  // every tile's queries from row 0
    } else {
      w->j0 = 0;
      w->h = bh % p.heads_q;
      w->b = bh / p.heads_q;
    }
  } else if (p.pack_rows > 0) {  // the group's first query head (q_tiles = 1: qt = 0, bh = u)
    w->h = (bh % p.heads_kv) * (p.heads_q / p.heads_kv);
    w->b = bh / p.heads_kv;
  } else {  // (j0 is persistent_split's alone)
    w->h = bh % p.heads_q;
    w->b = bh / p.heads_q;
  }
  w->m0 = qt * Cfg::BM;
  w->t0 = 0;
  w->part = 0;
  mma_attn::kv_range(p, w->m0, Cfg::BM, Cfg::BN, &w->n_tiles, &w->mask_from);
  return true;
}

// A CTA's place in its work list: unit u, item i (start: blockIdx.x, 0), then the next tail
// tile x of its range, which ends at x_end.
struct Cursor {
  int u, i, x, x_end;
};
template <class Cfg>
SAGE_DEV Cursor cursor_start(const SageAttnParams& p) {
  const TailSplit ts = tail_split<Cfg>(p);
  const int r = int(gridDim.x - 1 - blockIdx.x);
  return {int(blockIdx.x), 0, ts.lo(r), ts.lo(r + 1)};
}

// This CTA's next work item after the cursor, which it advances; false when none is left.
template <class Cfg>
SAGE_DEV bool next_item(const SageAttnParams& p, Cursor& c, WorkItem* w) {
  const TailSplit ts = tail_split<Cfg>(p);
  while (c.u < ts.first) {
    const bool ok = work_item<Cfg>(p, c.u, c.i, w);
    if (++c.i == 2) {
      c.i = 0;
      c.u += gridDim.x;
    }
    if (ok) return true;
  }
  if (c.x >= c.x_end) return false;
  int ut, t0;
  udivmod(c.x, ts.tiles, ut, t0);
  work_item<Cfg>(p, ts.first + ut, 0, w);
  w->t0 = t0;
  w->n_tiles = min_(ts.tiles - t0, c.x_end - c.x);
  w->part = t0 > 0 ? 2 : w->n_tiles < ts.tiles ? 1 : 0;
  c.x += w->n_tiles;
  return true;
}

// The split tail's partial results: slot's element e (of D/2 + 4) of consumer thread `tid`.
template <class Cfg>
SAGE_DEV float* partial_at(const SageAttnParams& p, int slot, int e, int tid) {
  return p.split_o + (i64(slot) * (Cfg::D / 2 + 4) + e) * Cfg::CONSUMERS + tid;
}
// A partial piece's O (this thread's fragment), row maxima and row sums, then the warp's flag.
template <class Cfg>
SAGE_DEV void write_partial(const SageAttnParams& p, int slot, int warp, int lane, const float (&m)[2],
                            const float (&l)[2], const float (&of)[Cfg::D / 2]) {
  const int tid = warp * 32 + lane;
#pragma unroll
  for (int e = 0; e < Cfg::D / 2; ++e) __stcg(partial_at<Cfg>(p, slot, e, tid), of[e]);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    __stcg(partial_at<Cfg>(p, slot, Cfg::D / 2 + hh, tid), m[hh]);
    __stcg(partial_at<Cfg>(p, slot, Cfg::D / 2 + 2 + hh, tid), l[hh]);
  }
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");  // this lane's stores, before lane 0's release
  __syncwarp();
  if (lane == 0) st_release(p.sync + i64(slot) * (Cfg::CONSUMERS / 32) + warp, p.generation);
}
// The partials a piece merges: ranges first, first + step, ... up to last.
struct MergePlan {
  int first, last, step;
};
// Which partials range r's piece merges (owner: its owner piece; else its partial piece, the
// range's first). A unit's tiles lie in its owner's range o and the k ranges after it, each a
// partial piece. With k >= 4 (decoding: about 15) they merge in two levels, so that the owner
// does not fold k partials one after another while every other CTA is done: the partial
// ranges form groups of s = sqrt(k) (rounded) consecutive ones, the first of each (its leader)
// merges the group's others into its own partial before writing it, and the owner merges the
// leaders'. Everyone still waits only for ranges after its own (CTAs of lower index). Fewer
// partials, or ranges that may be empty (fewer tail tiles than ranges), keep one level.
// In clusters (p.split_cluster = C > 1, decoding): the ranges of a unit in one cluster hand
// their results to the first of them in shared memory (cluster_merge), the unit's other
// clusters' first ranges (multiples of C) write theirs, and the owner merges those, at most
// three (launch.cpp: cluster_plan; a two-level tree over them spilled registers at D=64).
SAGE_DEV MergePlan merge_plan(const TailSplit& ts, int r, bool owner, int cluster) {
  if (cluster > 1) {  // every unit R ranges, from o; its other clusters' first ranges: multiples of C
    const int R = ts.ranges / (ts.work / ts.tiles), o = r - r % R;
    return owner ? MergePlan{(o / cluster + 1) * cluster, o + R - 1, cluster} : MergePlan{0, -1, 1};
  }
  // The piece's unit, [x0, x0 + tiles) in tail tiles: the unit that starts in r (owner) or the
  // one that r's first tile continues.
  const int x0 = owner ? (ts.lo(r) + ts.tiles - 1) / ts.tiles * ts.tiles : ts.lo(r) / ts.tiles * ts.tiles;
  int o = r;
  while (ts.lo(o) > x0) --o;  // the owner's range: lo(o) <= x0 < lo(o + 1)
  int last = o;
  while (last + 1 < ts.ranges && ts.lo(last + 1) < x0 + ts.tiles) ++last;
  const int k = last - o;
  const bool tree = k >= 4 && ts.work >= ts.ranges;
  const int s = tree ? int(sqrtf(float(k)) + 0.5f) : k + 1;
  if (owner) return {o + 1, last, tree ? s : 1};
  if (!tree || (r - o - 1) % s != 0) return {0, -1, 1};  // not a leader: nothing to merge
  return {r + 1, min_(r + s - 1, last), 1};
}

// Waits for the warp's partial in each range of the plan and folds it into m, l and O (each
// against the larger of the two maxima; the row sums stay per lane, as the epilogue expects).
template <class Cfg>
SAGE_DEV void merge_partials(const SageAttnParams& p, const MergePlan& mp, int warp, int lane, float (&m)[2],
                             float (&l)[2], float (&of)[Cfg::D / 2]) {
  const TailSplit ts = tail_split<Cfg>(p);
  const int tid = warp * 32 + lane;
  for (int r = mp.first; r <= mp.last; r += mp.step) {
    if (ts.lo(r + 1) == ts.lo(r)) continue;  // an empty range
    unsigned long long* flag = p.sync + i64(r) * (Cfg::CONSUMERS / 32) + warp;
    while (ld_acquire(flag) != p.generation) __nanosleep(64);
    // Each flag has this one reader, which puts it back to 0 once every lane has seen it: a
    // CUDA graph replays the launch with the same generation, so a flag left at it would pass
    // the next replay's wait before its partial is written.
    __syncwarp();
    if (lane == 0) *flag = 0ull;
    float f0[2], f1[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float m2 = __ldcg(partial_at<Cfg>(p, r, Cfg::D / 2 + hh, tid));
      const float l2 = __ldcg(partial_at<Cfg>(p, r, Cfg::D / 2 + 2 + hh, tid));
      const float mm = max_(m[hh], m2);
      f0[hh] = mm == neg_inf() ? 0.f : ex2(m[hh] - mm);
      f1[hh] = mm == neg_inf() ? 0.f : ex2(m2 - mm);
      m[hh] = mm;
      l[hh] = l[hh] * f0[hh] + l2 * f1[hh];
    }
#pragma unroll
    for (int e = 0; e < Cfg::D / 2; ++e) {
      const int hh = (e / 2) % 2;  // the fragment's rows: elements 0, 1 row gid, 2, 3 row gid + 8
      of[e] = of[e] * f0[hh] + __ldcg(partial_at<Cfg>(p, r, e, tid)) * f1[hh];
    }
  }
}

// Consumer warp w's rows of a unit's query tile from row m0: its first query row and its query
// head past the unit's first. Packed GQA heads (p.pack_rows > 0, a power of two; m0 = 0): tile
// row 16 w is row (16 w) % pack_rows of the tile's head (16 w) / pack_rows, head j0 + that of
// its group. persistent_split (FULL) also packs groups that do not fill the tile (7 heads at 16
// rows of 128) or take several (48 heads at 16 rows: 6 tiles of 8; launch.cpp: pack_rows): a
// warp past the group's last head gets row p.seq_q, past the queries, so
// that it neither stores nor merges anything (launch.cpp: cluster_plan counts it so). The other
// schedules pack only groups that fill the tile and keep the two-select form: the check
// changed persistent_pingpong's code around its loop and cost it 3-7% (H100, D=128 1K-2K).
struct WarpRows {
  int row0, h_off;
};
template <bool FULL>
SAGE_DEV WarpRows warp_rows(const SageAttnParams& p, int w, int m0, int j0 = 0) {
  const int row0 = p.pack_rows > 0 ? (w * 16) & (p.pack_rows - 1) : m0 + w * 16;
  const int h_off = p.pack_rows > 0 ? (w * 16) >> (__ffs(p.pack_rows) - 1) : 0;
  if constexpr (FULL) {
    if ((j0 + h_off) * p.heads_kv >= p.heads_q) return {p.seq_q, h_off};  // past the group's heads
  }
  return {row0, h_off};
}
// Rows of queries among consumer warp w's 16 rows of a decoding unit's one query tile (cluster
// mode: m0 = 0), the tile's first head j0 of its group.
SAGE_DEV int cluster_rows(const SageAttnParams& p, int w, int j0) {
  return min_(max_(p.seq_q - warp_rows<true>(p, w, 0, j0).row0, 0), 16);
}
// The cluster's merge (p.split_cluster = C > 1), run by every consumer warp once its key loop
// is done. The launcher cuts every unit's keys into R = ranges / units ranges (no range holds
// two units) and launches clusters of C consecutive CTAs, so that a cluster holds C consecutive
// ranges, from a multiple of C (range r's CTA has cluster rank C - 1 - r % C). A cluster's
// ranges of one unit form a group; the group's first range (its leader) takes the others' rows
// of queries into its K/V ring, which is free once its own consumers are past their loops: it
// tells each member so on the member's `ready` barrier (phase 0), each member's warps store
// their rows into the ring by st.async (16 bytes each, counted on the leader's `data`
// barrier), the leader folds them into its own, then tells the members they may exit (phase
// 1). A row in the ring: its 4 lanes' D/4 values of O's fragment, row maximum, row sum (per
// lane) and two floats of padding (16-byte stores); member i's rows are block i - 1, each
// warp's after those of the warps before it. Returns whether this CTA is its group's leader:
// the unit's owner (its first range), or a leader whose partial goes on through split_o to
// the owner (merge_plan); a member's results are its leader's now.
template <class Cfg>
SAGE_DEV bool cluster_merge(const SageAttnParams& p, int range, int warp, int lane, float (&m)[2], float (&l)[2],
                            float (&of)[Cfg::D / 2], u32 ring, u32 ready_bar, u32 data_bar, int free_bar) {
  constexpr int D = Cfg::D, CW = Cfg::CONSUMERS / 32;
  constexpr u32 LANE_BYTES = 4 * (D / 4 + 4), ROW_BYTES = 4 * LANE_BYTES;
  const int C = p.split_cluster, R = p.split_ranges / persistent_units<Cfg>(p);
  const int u = range / R, rc0 = range - range % C;
  const int j0 = p.pack_rows > 0 ? u % p.q_tiles * (Cfg::BM / p.pack_rows) : 0;  // work_item's
  const int lo = max_(rc0, u * R), hi = min_(rc0 + C, (u + 1) * R);
  const int j = range - lo, members = hi - lo - 1;  // j: 0 for the leader
  int before = 0, per_cta = 0;
#pragma unroll
  for (int w = 0; w < CW; ++w) {
    const int r = cluster_rows(p, w, j0);
    per_cta += r;
    if (w < warp) before += r;
  }
  const int nr = cluster_rows(p, warp, j0);
  const int gid = lane / 4, q = lane % 4;
  if (members == 0 && j == 0) return true;  // a group of one
  cluster_wait_acquire();  // every CTA of the cluster has initialized its barriers
  const u32 rank = u32(C - 1 - range % C);
  if (j == 0) {
    if (lane == 0) mbar_arrive_expect_tx(data_bar, u32(members) * u32(nr) * ROW_BYTES);
    named_bar_sync(free_bar, Cfg::CONSUMERS);  // no consumer reads the ring any more
    if (warp == 0 && lane < members) mbar_arrive_remote(cluster_map(ready_bar, rank - 1 - u32(lane)));
    mbar_wait_cluster(data_bar, 0);
    if (warp == 0 && lane < members) mbar_arrive_remote(cluster_map(ready_bar, rank - 1 - u32(lane)));
#pragma unroll 1
    for (int pj = 1; pj <= members; ++pj) {
      const u32 base = ring + u32((pj - 1) * per_cta + before) * ROW_BYTES + u32(q) * LANE_BYTES;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        if (gid + 8 * hh >= nr) continue;
        const u32 a = base + u32(gid + 8 * hh) * ROW_BYTES;
        float ml[4];
        lds_v4(a + 4 * (D / 4), ml);
        const float mm = max_(m[hh], ml[0]);
        const float f0 = mm == neg_inf() ? 0.f : ex2(m[hh] - mm);
        const float f1 = mm == neg_inf() ? 0.f : ex2(ml[0] - mm);
        m[hh] = mm;
        l[hh] = l[hh] * f0 + ml[1] * f1;
#pragma unroll
        for (int c = 0; c < D / 16; ++c) {
          float v[4];
          lds_v4(a + 16 * c, v);
          of[8 * c + 2 * hh] = of[8 * c + 2 * hh] * f0 + v[0] * f1;
          of[8 * c + 2 * hh + 1] = of[8 * c + 2 * hh + 1] * f0 + v[1] * f1;
          of[8 * c + 4 + 2 * hh] = of[8 * c + 4 + 2 * hh] * f0 + v[2] * f1;
          of[8 * c + 5 + 2 * hh] = of[8 * c + 5 + 2 * hh] * f0 + v[3] * f1;
        }
      }
    }
    return true;
  }
  if (nr > 0) {
    mbar_wait_cluster(ready_bar, 0);  // the leader's ring is free
    const u32 leader = rank + u32(j);
    const u32 rbar = cluster_map(data_bar, leader);
    const u32 base = cluster_map(ring, leader) + u32((j - 1) * per_cta + before) * ROW_BYTES + u32(q) * LANE_BYTES;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (gid + 8 * hh >= nr) continue;
      const u32 a = base + u32(gid + 8 * hh) * ROW_BYTES;
#pragma unroll
      for (int c = 0; c < D / 16; ++c)
        st_async_v4(a + 16 * c, of[8 * c + 2 * hh], of[8 * c + 2 * hh + 1], of[8 * c + 4 + 2 * hh], of[8 * c + 5 + 2 * hh],
                    rbar);
      st_async_v4(a + 4 * (D / 4), m[hh], l[hh], 0.f, 0.f, rbar);
    }
    // Phase 1: the leader holds every member's rows, so this CTA may exit (its warps without
    // rows store nothing and do not wait: phase 1 may be done before they would wait for 0).
    mbar_wait_cluster(ready_bar, 1);
  }
  return false;
}

// The share merge (p.split_share = NM > 0, decoding: every unit split into R = split_ranges /
// units ranges, none holding two units, and every CTA one range). Every range writes its
// partial (write_partial, the owner's too) and goes on to no store of its own; the unit's
// ranges 0 .. NM - 1 (the CTAs started last: range r is CTA G - 1 - r) then merge every
// range's partial, each a share of the items, and store O and the LSE themselves. An item is a
// pair of O's fragment elements (2c, 2c + 1: the same row, columns 8 (c / 2) + 2 tig and next)
// of one consumer thread t, t fastest. With fewer items than threads, PT parts of the threads
// take every PT-th range each (a part's loads of MB ranges in flight together: one round trip
// to L2) and meet in shared memory (`scratch`: the K/V ring, free once the key loop is done).
// So the merge's cost no longer grows with the ranges, as the owner's fold of every partial
// (merge_plan) does: the ranges can fill the GPU where few units have many keys. Each merger,
// once it has seen every flag, adds one to its unit's first; the one that brings it to
// generation + NM - 1 has seen every other merger past its waits and puts the unit's flags
// back to 0 (a CUDA graph's replays share one generation). Every range is one CTA of one wave
// (the launcher's grid), so no CTA waits for one that cannot start. Run by all consumer
// threads (ctid < Cfg::CONSUMERS) of the range's CTA; `bar`: a named barrier of theirs.
template <class Cfg>
SAGE_DEV void share_merge(const SageAttnParams& p, int range, int b, int h, int j0, int ctid, u32 scratch, int bar) {
  static_assert(!Cfg::V8 && !Cfg::SMOOTH_V, "the native kernels' O needs no V scale or mean");
  constexpr int D = Cfg::D, E = D / 2, CW = Cfg::CONSUMERS / 32, NT = Cfg::CONSUMERS, MB = 8;
  const int units = persistent_units<Cfg>(p), R = p.split_ranges / units, NM = p.split_share;
  const int u = range / R, mj = range - u * R, s0 = u * R;
  if (mj >= NM) return;
  const unsigned long long gen = p.generation;
  unsigned long long* flags = p.sync + i64(s0) * CW;  // [R][CW]
  for (int f = ctid; f < R * CW; f += NT) {
    if (warp_rows<true>(p, f % CW, 0, j0).row0 >= p.seq_q) continue;  // a warp without rows: no partial
    while (ld_acquire(flags + f) - gen >= unsigned(NM)) __nanosleep(32);  // gen .. gen + NM - 1
  }
  named_bar_sync(bar, NT);
  if (ctid == 0) {  // warp 0 always has rows, so its flag of range s0 was written
    const unsigned long long seen = NM == 1 ? gen : atomicAdd(flags, 1ull);
    if (seen == gen + NM - 1)
      for (int f = 0; f < R * CW; ++f) flags[f] = 0ull;
  }
  __threadfence();
  constexpr int NI = (E / 2) * NT;  // items (c, t)
  const int I0 = (NI / 32 * mj / NM) * 32, I1 = (NI / 32 * (mj + 1) / NM) * 32, NS = I1 - I0;
  const int PT = max_(1, min_(NT / max_(NS, 1), (R + MB - 1) / MB));
  const float shift = p_log2_scale(Cfg::P_SCALE);
  // Item it's merged pair (a0, a1), maximum and this lane's sum: stored, with the LSE, by all 32
  // lanes of a warp together (the row's sum over its quad; NS and I0 are multiples of 32).
  auto finish = [&](int it, float a0, float a1, float mx, float sum) {
    const int c = it / NT, t = it % NT, w = t / 32, lane = t % 32, hh = c & 1;
    const float lt = Cfg::ROW_SUMS_COMPLETE ? sum : quad_sum(sum);
    const WarpRows wr = warp_rows<true>(p, w, 0, j0);
    const int row = wr.row0 + lane / 4 + 8 * hh, col = 8 * (c >> 1) + 2 * (lane % 4), hq = h + wr.h_off;
    if (wr.row0 >= p.seq_q || row >= p.seq_q) return;
    const float inv = lt > 0.f ? 1.0f / lt : 0.f;
    if (col < p.head_dim)
      *reinterpret_cast<u32*>(static_cast<u8*>(p.o) +
                              (b * p.o_stride_b + hq * p.o_stride_h + i64(row) * p.o_stride_n + col) * 2) =
          pack_x2(a0 * inv, a1 * inv, p.dtype);
    if (p.lse && c < 2 && lane % 4 == 0) {
      const i64 idx = (i64(b) * p.heads_q + hq) * p.seq_q + row;
      float lse = neg_inf();
      if (lt > 0.f) {
        lse = (mx + lg2(lt) - shift) * kLn2;
        if (p.q_kmean) lse += p.q_kmean[idx];
      }
      p.lse[idx] = lse;
    }
  };
  for (int x = ctid; x < NS * PT; x += NT) {
    const int part = PT == 1 ? 0 : x / NS, it = I0 + x - part * NS;
    const int c = it / NT, t = it % NT, hh = c & 1;
    const bool rows = warp_rows<true>(p, t / 32, 0, j0).row0 < p.seq_q;
    // An online merge over batches of ranges, each batch's loads in flight together.
    float mx = neg_inf(), sum = 0.f, a0 = 0.f, a1 = 0.f;
    for (int r0 = part; rows && r0 < R; r0 += MB * PT) {
      float xm[MB], xl[MB], v0[MB], v1[MB];
#pragma unroll
      for (int jb = 0; jb < MB; ++jb) {
        const int ri = r0 + jb * PT;
        if (ri < R) {
          xm[jb] = __ldcg(partial_at<Cfg>(p, s0 + ri, E + hh, t));
          xl[jb] = __ldcg(partial_at<Cfg>(p, s0 + ri, E + 2 + hh, t));
          v0[jb] = __ldcg(partial_at<Cfg>(p, s0 + ri, 2 * c, t));
          v1[jb] = __ldcg(partial_at<Cfg>(p, s0 + ri, 2 * c + 1, t));
        } else {
          xm[jb] = neg_inf();
          xl[jb] = v0[jb] = v1[jb] = 0.f;
        }
      }
      float bm = mx;
#pragma unroll
      for (int jb = 0; jb < MB; ++jb) bm = fmaxf(bm, xm[jb]);
      const float base = bm == neg_inf() ? 0.f : bm;
      const float sc = ex2(mx - base);
      sum *= sc;
      a0 *= sc;
      a1 *= sc;
#pragma unroll
      for (int jb = 0; jb < MB; ++jb) {
        const float wt = ex2(xm[jb] - base);  // 0 for a range whose keys this row does not see
        sum = fmaf(wt, xl[jb], sum);
        a0 = fmaf(wt, v0[jb], a0);
        a1 = fmaf(wt, v1[jb], a1);
      }
      mx = bm;
    }
    if (PT == 1) finish(it, a0, a1, mx, sum);
    else sts_v4(scratch + u32(x) * 16u, a0, a1, mx, sum);
  }
  if (PT == 1) return;
  named_bar_sync(bar, NT);
  for (int i = ctid; i < NS; i += NT) {
    float mx = neg_inf();
    for (int q = 0; q < PT; ++q) {
      float v[4];
      lds_v4(scratch + u32(q * NS + i) * 16u, v);
      mx = fmaxf(mx, v[2]);
    }
    const float base = mx == neg_inf() ? 0.f : mx;
    float sum = 0.f, a0 = 0.f, a1 = 0.f;
    for (int q = 0; q < PT; ++q) {
      float v[4];
      lds_v4(scratch + u32(q * NS + i) * 16u, v);
      const float wt = ex2(v[2] - base);  // 0 for a part without visible keys
      sum = fmaf(wt, v[3], sum);
      a0 = fmaf(wt, v[0], a0);
      a1 = fmaf(wt, v[1], a1);
    }
    finish(I0 + i, a0, a1, mx, sum);
  }
}

// grid (min(units, SMs x CTAs per SM)), Cfg::THREADS threads (the consumer warpgroups, then
// the producer warpgroup: setmaxnreg moves registers from it, Cfg::PRODUCER_REGS a thread, to
// the consumers, Cfg::CONSUMER_REGS: ptxas sizes a wgmma kernel's registers for whole warpgroups), Cfg::SMEM_BYTES dynamic shared memory; the tensor maps as for the plain
// kernel. Shared memory: two Q buffers, then the K ring and the V ring. Barriers, each a
// "full" (the producer's expect_tx, one arrival) and an "empty" (one arrival per consumer
// warp): Q per buffer, K and V per ring slot. The producer runs ahead over the items: the next
// item's Q and first K/V tiles load while this item's last tiles and epilogue run. A consumer
// warp releases K once its Q K^T has completed and V once its P V has; O is staged for the
// epilogue in the warpgroup's own (dead) rows of its Q buffer, which it then releases.
// QN: the quarters of the head dim computed, 4, or 3 (head dim 128, the entry sage_attn_q3 for
// calls of up to 96 columns): Q K^T's first 6 k-steps and O's first 96 columns; the loads are
// unchanged (columns past the call's head dim arrive as zeros).
template <class Cfg, bool BF16, int QN = 4>
SAGE_DEV void attn_kernel_persistent_t(const SageAttnParams& p) {
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, ST = Cfg::STAGES, CH = Cfg::CHUNKS;
  static_assert(QN == 4 || (QN == 3 && D == 128), "three quarters: head dim 128");
  constexpr u32 CONSUMER_WARPS = Cfg::CONSUMERS / 32;
  extern __shared__ __align__(1024) u8 smem_raw[];
  // [0, 2): Q full, [2, 4): Q empty, then K full, V full, K empty, V empty (ST each); PV8:
  // then the converting warps' FP16 tile's "full"
  __shared__ __align__(8) u64 bars[4 + 4 * ST + (Cfg::PV8 ? 1 : 0)];
  // PV8: each V slot's scale (2^-k: V^T = V x 2^k; the first of the 16 bytes a TMA load brings
  // with the tile; 128 bytes a slot, a tensor load's alignment), the converting warps' maxima
  // and their ticket
  __shared__ __align__(128) float v8_scale[Cfg::PV8 ? ST : 1][32];
  __shared__ u32 v8_red[kConvertWarps];
  __shared__ u32 v8_mean[Cfg::PV8 ? D : 1];  // the converting warps' kv head's V mean (mean_v8)
  __shared__ int v8_ticket, v8_last, v8_items;
  // SPLIT: the item of each Q buffer, handed over on named barriers (1 .. WGS are the pingpong
  // turns'): written, one per (buffer, consumer warpgroup), so that the hand-over does not align
  // the warpgroups (a CTA-wide one cost the pingpong 1-3% at 1K-2K keys); read, one per buffer
  // (the consumers arrive, the producer warp waits). Without SPLIT every role walks the list.
  __shared__ WorkItem items[Cfg::SPLIT ? 2 : 1];
  // SPLIT in clusters (p.split_cluster): the `ready` and `data` barriers of cluster_merge.
  __shared__ __align__(8) u64 cbars[2];
  constexpr int kItemFull = 4, kItemFree = 4 + 2 * Cfg::WGS, kClusterFree = kItemFree + 2, FULL_THREADS = 128 + 32,
                FREE_THREADS = Cfg::CONSUMERS + 32;
  static_assert(kClusterFree < 16, "named barriers");
  u8* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const u32 sQ0 = smem_addr(smem);
  const u32 sK0 = sQ0 + 2 * Cfg::SMEM_Q;
  const u32 sV0 = sK0 + ST * Cfg::SMEM_K_STAGE;
  const u32 sC16 = sV0 + ST * Cfg::SMEM_V_STAGE, sC8 = sC16 + Cfg::SMEM_CONV16;  // PV8
  const u32 bar0 = smem_addr(&bars[0]);
  auto q_full = [&](int qb) { return bar0 + 8u * u32(qb); };
  auto q_empty = [&](int qb) { return bar0 + 8u * u32(2 + qb); };
  auto k_full = [&](int s) { return bar0 + 8u * u32(4 + s); };
  auto v_full = [&](int s) { return bar0 + 8u * u32(4 + ST + s); };
  auto k_empty = [&](int s) { return bar0 + 8u * u32(4 + 2 * ST + s); };
  auto v_empty = [&](int s) { return bar0 + 8u * u32(4 + 3 * ST + s); };
  const u32 conv_full = bar0 + 8u * u32(4 + 4 * ST);  // PV8
  // The warp index, broadcast so that ptxas sees the role branch as warp-uniform.
  // PV8: read again at every use (RecomputedWarp, RecomputedLane): at its register split
  // ptxas kept both across setmaxnreg and the item loop in local memory.
  const typename Pick<Cfg::PV8, RecomputedWarp, int>::type warp = __shfl_sync(0xffffffffu, int(threadIdx.x / 32), 0);
  const typename Pick<Cfg::PV8, RecomputedLane, int>::type lane = int(threadIdx.x % 32);
  if (threadIdx.x == 0) {
    tma_prefetch_map(&p.tma_q);
    tma_prefetch_map(&p.tma_k);
    tma_prefetch_map(&p.tma_v);
    tma_prefetch_map(&p.tma_o);
    if constexpr (Cfg::PV8) {
      tma_prefetch_map(&p.tma_v8);
      tma_prefetch_map(&p.tma_vs);
    }
    for (int i = 0; i < 2; ++i) {
      mbar_init(q_full(i), 1);
      mbar_init(q_empty(i), CONSUMER_WARPS);
    }
    for (int s = 0; s < ST; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), CONSUMER_WARPS);
      mbar_init(v_empty(s), CONSUMER_WARPS);
    }
    if constexpr (Cfg::PV8) {
      mbar_init(conv_full, 1);
      v8_items = 0;
    }
    if (Cfg::SPLIT && p.split_cluster > 1) {
      mbar_init(smem_addr(&cbars[0]), 1);
      mbar_init(smem_addr(&cbars[1]), CONSUMER_WARPS);
    }
    mbar_init_fence();
  }
  __syncthreads();
  // Clusters: the barriers above are visible to the other CTAs once all have arrived here
  // (cluster_merge waits for that; the producer's loading warp waits once its list has ended,
  // its other warps exit).
  if (Cfg::SPLIT && p.split_cluster > 1) cluster_arrive_release();

  if (warp >= int(CONSUMER_WARPS)) {  // the producer warpgroup: one warp, one lane issues every load
    setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    if constexpr (Cfg::PV8) {
      if (warp > int(CONSUMER_WARPS)) {  // the converting warps: V8 jobs until none is left
        const int ct = int(threadIdx.x) - Cfg::CONSUMERS - 32;
        const V8Jobs jobs = v8_jobs(p);
        auto load = [&](int x) {  // job x's FP16 V tile, by TMA (rows past the keys as zeros)
          int kvh, i, b, hk;
          udivmod(x, p.k_tiles, kvh, i);
          udivmod(kvh, p.heads_kv, b, hk);
          mbar_arrive_expect_tx(conv_full, Cfg::SMEM_CONV16);
#pragma unroll
          for (int cc = 0; cc < CH; ++cc)
            tma_load_4d(sC16 + cc * BN * 128, &p.tma_v, cc * 64, i * BN, hk, b, conv_full);
        };
        // The first thread takes each ticket and hands it to the three warps in v8_ticket (a
        // barrier later; the loop's barriers end every read of it before the next write).
        if (ct == 0) v8_ticket = int(add_count(jobs.ticket, p.generation));
        named_bar_sync(kConvertBar, 32 * kConvertWarps);
        int x = v8_ticket, kp = 0, mean_kvh = -1;
        u32 ph = 0;
        // A job waits until this CTA's loading lane has begun the item one round before the
        // first that reads the job's kv head (the jobs run about a round ahead of their use rather
        // than all at the start). No deadlock: tickets go in the order of that round, and a loading
        // lane waits only for jobs of its own round or earlier.
        // (v8_items is read and written by atomics: racecheck reports the plain accesses of a polled
        // word as hazards.)
        auto throttle = [&](int x) {
          const int r = v8_first_round<Cfg>(p, x) - 1;
          while (atomicAdd(&v8_items, 0) < r) __nanosleep(256);
        };
        if (ct == 0 && x < jobs.n) {
          throttle(x);
          load(x);
        }
#pragma unroll 1
        while (x < jobs.n) {
          int nt = 0;
          if (ct == 0) nt = int(add_count(jobs.ticket, p.generation));  // in flight under the conversion
          mbar_wait(conv_full, ph);
          ph ^= 1u;
          // V's mean for the job's kv head: its first tile's job takes it and sets the head's
          // mean flag once it is in p.v_mean, before it converts; the head's other jobs read it
          // from there once that flag is set. Tickets go in the order of the heads' tiles, so
          // the first tile's job has started before any other of its head waits.
          const int kvh = x / p.k_tiles;
          if (x == kvh * p.k_tiles) {
            mean_v8<Cfg, BF16, kConvertWarps>(sC16, ct, p.seq_kv, p.v_mean + i64(kvh) * D, v8_mean);
            named_bar_sync(kConvertBar, 32 * kConvertWarps);
            if (ct == 0) st_release(jobs.done + 1 + kvh, p.generation);
          } else if (kvh != mean_kvh) {
            if (ct == 0)
              while (ld_acquire(jobs.done + 1 + kvh) != p.generation) __nanosleep(64);
            named_bar_sync(kConvertBar, 32 * kConvertWarps);
            if (ct < D / 4) {  // four channels a thread
              const float4 mf = __ldcg(reinterpret_cast<const float4*>(p.v_mean + i64(kvh) * D) + ct);
              constexpr int dt = BF16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16;
              v8_mean[4 * ct] = pack_x2(mf.x, mf.x, dt);
              v8_mean[4 * ct + 1] = pack_x2(mf.y, mf.y, dt);
              v8_mean[4 * ct + 2] = pack_x2(mf.z, mf.z, dt);
              v8_mean[4 * ct + 3] = pack_x2(mf.w, mf.w, dt);
            }
            named_bar_sync(kConvertBar, 32 * kConvertWarps);
          }
          mean_kvh = kvh;
          // sC8 is free: the last job's store had completed before its flag was set
          kp = convert_v8<Cfg, BF16, kConvertWarps>(sC16, sC8, ct, v8_red, kConvertBar, kp, v8_mean, [] {});
          fence_proxy_async();  // this thread's FP8 writes, before the TMA store reads them
          if (ct == 0) v8_ticket = nt;
          named_bar_sync(kConvertBar, 32 * kConvertWarps);  // also: every thread is done with sC16, sC8
          const int nx = v8_ticket;
          if (ct == 0) {
            tma_store_2d(&p.tma_v8, sC8, 0, x * D);
            tma_store_commit();
            p.v_scale[4 * x] = __int_as_float((127 - kp) << 23);
            tma_store_wait<0, false>();  // the tile is in global memory
            fence_proxy_async_global();
            st_release(jobs.flags + x, p.generation);
            if (nx < jobs.n) {
              throttle(nx);
              load(nx);
            }
          }
          x = nx;
        }
        v8_jobs_done(p, jobs, ct, 32 * kConvertWarps, kConvertBar, &v8_last);
        return;
      }
    }
    // PV8: the whole warp stays (its lanes clear the V8 jobs' flags if it ends last).
    if (warp != int(CONSUMER_WARPS) || (!Cfg::SPLIT && !Cfg::PV8 && lane != 0)) return;
    // One lane issues every load; SPLIT: its warp computes the work list and hands each item to
    // the consumers through items[] (kItemFull: written; kItemFree + qb: read, and free again).
    // Items loaded so far (k), and the ring slot and round of the next K/V tile: counters, not
    // divisions, as this warp has only Cfg::PRODUCER_REGS registers.
    int k = 0, s = 0, round = 0;
    Cursor cur = cursor_start<Cfg>(p);
    WorkItem w;
    while (true) {
      const int qb = k & 1;
      if (k >= 2) {
        if constexpr (Cfg::SPLIT) named_bar_sync(kItemFree + qb, FREE_THREADS);
        mbar_wait(q_empty(qb), ((k >> 1) - 1) & 1);
      }
      const bool more = next_item<Cfg>(p, cur, &w);
      if constexpr (Cfg::SPLIT) {
        if (!more) w.n_tiles = -1;  // the end of the list
        if (lane == 0) items[qb] = w;
#pragma unroll
        for (int c = 0; c < Cfg::WGS; ++c) named_bar_arrive(kItemFull + qb * Cfg::WGS + c, FULL_THREADS);
        // Clusters: the warp's cluster wait, once it has issued its last load (on the hardware it
        // returns at once: every thread arrived at the start). compute-sanitizer's racecheck
        // counts a live thread's arrival only once that thread waits, so without this wait the
        // consumers' wait in cluster_merge stalls there while this warp waits for them below.
        if (!more && p.split_cluster > 1) cluster_wait_acquire();
        if (!more && k >= 1) named_bar_sync(kItemFree + (qb ^ 1), FREE_THREADS);  // the last item's
      }
      if constexpr (Cfg::PV8)  // the converting warps' throttle (v8_first_round): items begun
        if (lane == 0) atomicExch(&v8_items, more ? k : 1 << 30);
      if (!more) break;
      // Lane 0 issues the loads; the warp stays converged for the named barriers.
      const int hkv = w.h / (p.heads_q / p.heads_kv);
      if (lane == 0) {
        mbar_arrive_expect_tx(q_full(qb), Cfg::SMEM_Q);
#pragma unroll
        for (int cc = 0; cc < CH; ++cc)
          tma_load_4d(sQ0 + qb * Cfg::SMEM_Q + cc * BM * 128, &p.tma_q, cc * 64, w.m0, w.h, w.b, q_full(qb));
      }
#pragma unroll 1
      for (int t = w.t0; t < w.t0 + w.n_tiles; ++t) {
        if (round > 0) mbar_wait(k_empty(s), (round - 1) & 1);
        if (lane == 0) {
          mbar_arrive_expect_tx(k_full(s), Cfg::SMEM_K_STAGE);
#pragma unroll
          for (int cc = 0; cc < CH; ++cc)
            tma_load_4d(sK0 + s * Cfg::SMEM_K_STAGE + cc * BN * 128, &p.tma_k, cc * 64, t * BN, hkv, w.b, k_full(s));
        }
        if (round > 0) mbar_wait(v_empty(s), (round - 1) & 1);
        if constexpr (Cfg::PV8) {
          // The FP8 V^T tile of job (b, kv head, t), once its converter has flagged it, and its
          // scale (16 bytes of p.v_scale, tma_vs) into the slot's words by a TMA load, both on the
          // slot's barrier (the consumers read the scale after their wait). A relaxed load of the
          // scale here kept the loading lane a round trip to L2 from each V tile's issue: loading
          // it with the tile is 3-7% faster at 2K-8K (H200, 2026-11-28 (ak)). A tensor load, not a
          // non-tensor bulk copy: compute-sanitizer's racecheck tracks the latter's writes but
          // not the barrier that orders them before the consumers' reads.
          if (lane == 0) {
            const int x = (w.b * p.heads_kv + hkv) * p.k_tiles + t;
            const V8Jobs jobs = v8_jobs(p);
            while (ld_acquire(jobs.flags + x) != p.generation) __nanosleep(32);
            fence_proxy_async_global();  // the tile, written by another CTA's TMA store, before this TMA read
            mbar_arrive_expect_tx(v_full(s), Cfg::SMEM_V_STAGE + 16);
            tma_load_2d(sV0 + s * Cfg::SMEM_V_STAGE, &p.tma_v8, 0, x * D, v_full(s));
            tma_load_2d(smem_addr(&v8_scale[s][0]), &p.tma_vs, 0, x, v_full(s));
          }
        } else if (lane == 0) {
          mbar_arrive_expect_tx(v_full(s), Cfg::SMEM_V_STAGE);
#pragma unroll
          for (int cc = 0; cc < CH; ++cc)
            tma_load_4d(sV0 + s * Cfg::SMEM_V_STAGE + cc * BN * 128, &p.tma_v, cc * 64, t * BN, hkv, w.b, v_full(s));
        }
        if (++s == ST) {
          s = 0;
          ++round;
        }
      }
      ++k;
    }
    if constexpr (Cfg::PV8) {
      __syncwarp();
      v8_jobs_done(p, v8_jobs(p), lane, 32, -1, nullptr);
    }
    return;
  }

  // Consumers: warpgroup wg owns rows 64 wg .. 64 wg + 63 of each item.
  setmaxnreg_inc<Cfg::CONSUMER_REGS>();
  const int wg = warp / 4;
  const float scale = p.sm_scale * kLog2e;
  // PINGPONG: a turn is one batch of GEMM issues; consumer wg waits on named barrier 1 + wg
  // for its turn and hands the next to consumer wg + 1 (mod WGS): each barrier counts the 128
  // threads that wait on it and the 128 that arrive. Consumer 0 takes the first turn (the last
  // consumer hands it over up front; consumer 0 takes that hand-over's match, the last
  // consumer's last one, after its last item). Every consumer walks the same items and makes
  // the same choices, so all take the same number of turns.
  auto turn_begin = [&] {
    if constexpr (Cfg::PINGPONG) named_bar_sync(1 + wg, 256);
  };
  auto turn_end = [&] {
    if constexpr (Cfg::PINGPONG) named_bar_arrive(1 + (wg + 1) % Cfg::WGS, 256);
  };
  if (Cfg::PINGPONG && wg == Cfg::WGS - 1) named_bar_arrive(1, 256);
  auto release = [&](u32 bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  // The Q buffer whose O store is in flight (-1: none), released once the store has read it.
  int pending_q = -1;
  auto release_q = [&] {
    if (pending_q < 0) return;
    if (lane == 0) tma_store_wait<0, true>();
    release(q_empty(pending_q));
    pending_q = -1;
  };
  int g = 0, k = 0;  // ring tiles and items taken so far
  Cursor cur = cursor_start<Cfg>(p);  // without SPLIT: this warp's own walk of the list
  WorkItem w;
  while (true) {
    const int qb = k & 1;
    int n, t0, m0, mask_from, j0;
    if constexpr (Cfg::SPLIT) {
      named_bar_sync(kItemFull + qb * Cfg::WGS + wg, FULL_THREADS);
      // The item's fields, read from shared memory where they are used; those that set ring
      // slots and branches broadcast from lane 0, so that ptxas sees them warp-uniform (the
      // wgmma descriptors then stay in uniform registers).
      n = __shfl_sync(0xffffffffu, items[qb].n_tiles, 0);
      if (n < 0) break;
      t0 = __shfl_sync(0xffffffffu, items[qb].t0, 0);
      m0 = items[qb].m0;
      j0 = items[qb].j0;
      mask_from = __shfl_sync(0xffffffffu, items[qb].mask_from, 0);
    } else {
      if (!next_item<Cfg>(p, cur, &w)) break;
      n = w.n_tiles;
      t0 = 0;
      m0 = w.m0;
      j0 = 0;  // one tile a group (warp_rows<false> does not read it)
      mask_from = w.mask_from;
    }
    const u32 sQw = sQ0 + qb * Cfg::SMEM_Q + wg * 64 * 128;
    // This warp's first query row, and its query head past the item's (warp_rows).
    const WarpRows wr = warp_rows<Cfg::SPLIT>(p, warp, m0, j0);
    const int row0 = wr.row0, h_off = wr.h_off;
    float m[1][2], l[1][2], o[1][D / 8][4];
    wgmma_attn::init_state<D>(m, l, o);
    float(&of)[D / 2] = reinterpret_cast<float(&)[D / 2]>(o);
    float sc[BN / 2];
    u32 pa[Cfg::PV8 ? 1 : BN / 16][4];
    u32 pa8[Cfg::PV8 ? BN / 32 : 1][4];
    float alpha[2] = {1.f, 1.f};
    const int g0 = g;
    g += n;
    // Tile t of this item (key tile t0 + t): its ring slot and the parity of its fill.
    auto slot = [&](int t) { return (g0 + t) % ST; };
    auto phase = [&](int t) { return u32((g0 + t) / ST) & 1u; };
    // S = Q K^T and O += P V of tile t, issued once its K or V has landed.
    auto qk = [&](int t) {
      mbar_wait(k_full(slot(t)), phase(t));
      issue_qk<Cfg, BF16, QN * D / 64>(sc, sQw, sK0 + slot(t) * Cfg::SMEM_K_STAGE);
    };
    bool moved = false;  // the last softmax moved a row's reference maximum: O needs rescaling
    // PV8: each tile's P V goes to a fresh FP32 accumulator (acc) that is then added into O in
    // FP32 registers, V's scale 2^-k of the tile folded in: Hopper's FP8 wgmma keeps about 14 bits
    // of its FP32 accumulator (DeepSeek-V3, 2024), which over thousands of keys accumulated on
    // the tensor cores lost the small products (rel-L1 0.047 on outliers; 2026-11-28 (ah)).
    // PV8: tile t's P V goes to FP16 accumulators (acc16: 32 registers at head dim 128, where a
    // fresh FP32 accumulator beside S and O spilled 416-744 bytes), which O (FP32) takes every
    // Cfg::PV8_FOLD tiles, V's scale folded in: O itself cannot accumulate on the tensor cores, as
    // Hopper's FP8 wgmma keeps about 14 bits of its FP32 accumulator (DeepSeek-V3, 2024), which
    // over thousands of keys lost the small products (rel-L1 0.047 on outliers; 2026-11-28 (ah)).
    // acc16 holds the tiles since O last took it (grp, all of V scale gvf): a tile of another
    // scale, PV8_FOLD tiles or the item's end add it into O first; a moved reference maximum
    // rescales it with O (rescale). Every decision is the warpgroup's (its wgmma is fresh, or
    // not, for all of its threads).
    constexpr int PV_COLS = QN * D / 4;
    u32 acc16[Cfg::PV8 ? PV_COLS / 4 : 1];
    int grp = 0;
    float gvf = 1.f;
    auto release_v = [&](int t) { release(v_empty(slot(t))); };
    auto fold = [&] {
      if constexpr (Cfg::PV8) {
        fence_regs(acc16);
#pragma unroll
        for (int j = 0; j < PV_COLS / 4; ++j) {
          of[2 * j] = fmaf(f16_to_f32(u16(acc16[j] & 0xffffu)), gvf, of[2 * j]);
          of[2 * j + 1] = fmaf(f16_to_f32(u16(acc16[j] >> 16)), gvf, of[2 * j + 1]);
        }
        grp = 0;
      }
    };
    auto pv = [&](int t) {
      mbar_wait(v_full(slot(t)), phase(t));
      const u32 sV = sV0 + slot(t) * Cfg::SMEM_V_STAGE;
      if constexpr (Cfg::PV8) {
        const float vf = v8_scale[slot(t)][0];
        if (grp > 0 && vf != gvf) fold();  // the group's wgmmas completed before this turn
        gvf = vf;
        if (grp++ == 0) issue_pv8_16<Cfg, PV_COLS, true>(acc16, pa8, sV);
        else issue_pv8_16<Cfg, PV_COLS, false>(acc16, pa8, sV);
      } else {
        issue_pv<Cfg, BF16, QN>(of, pa, sV);
      }
    };
    auto pack = [&] {
      if constexpr (Cfg::PV8) pack_p8<Cfg>(sc, pa8);
      else pack_p<Cfg, BF16>(sc, pa);
    };
    // Tile t's softmax (the fast one where it holds; S recomputed when it does not, so the K
    // slot is released only after it).
    auto softmax = [&](int t) {
      const u32 sK = sK0 + slot(t) * Cfg::SMEM_K_STAGE;
      const int wrow = (warp % 4) * 16;
      const int kt = t0 + t;
      moved = kt >= mask_from
                  ? fast_tile<Cfg, true, BF16>(p, m[0], l[0], sc, scale, kt * BN, row0, alpha, sQw, sK, wrow)
                  : fast_tile<Cfg, false, BF16>(p, m[0], l[0], sc, scale, kt * BN, row0, alpha, sQw, sK, wrow);
    };
    mbar_wait(q_full(qb), (k >> 1) & 1);
    auto rescale = [&] {
      if (!moved) return;
#pragma unroll
      for (int j = 0; j < QN * D / 32; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][j][e] *= alpha[e / 2];
      // ACC16: the P V not yet in O too (its tiles' P were taken against the old maxima). A
      // moved maximum is a thread's own, so acc16 is rescaled rather than added into O: the
      // warpgroup's next wgmma must be fresh, or not, for all of its threads.
      if constexpr (Cfg::PV8)
        if (grp > 0) {
          const u32 a0 = pack_f16x2(alpha[0], alpha[0]), a1 = pack_f16x2(alpha[1], alpha[1]);
#pragma unroll
          for (int j = 0; j < PV_COLS / 4; ++j) acc16[j] = hmul2(acc16[j], j % 2 == 0 ? a0 : a1);
        }
    };
    if constexpr (Cfg::OVERLAP) {
      // Intra-warpgroup overlap: tile t's softmax runs (in place, on S) while P V of tile t-1
      // is on the tensor cores, issued right after Q K^T of tile t; P is packed into the A
      // fragments only once that P V has completed, so one P tile is live.
      if (n > 0) {
        turn_begin();
        qk(0);
        turn_end();
        release_q();
        wgmma_wait<0>();
        fence_regs(sc);
        softmax(0);  // O is still zero: nothing to rescale
        release(k_empty(slot(0)));
        pack();
#pragma unroll 1
        for (int t = 1; t < n; ++t) {
          turn_begin();
          qk(t);
          pv(t - 1);
          turn_end();
          wgmma_wait<1>();
          fence_regs(sc);
          softmax(t);
          release(k_empty(slot(t)));
          wgmma_wait<0>();
          if constexpr (Cfg::PV8) {
            if (grp == Cfg::PV8_FOLD) fold();  // PV8: P V went to acc16, which O takes every PV8_FOLD tiles
          } else {
            fence_regs(of);
          }
          release_v(t - 1);
          rescale();
          pack();
        }
        turn_begin();
        pv(n - 1);
        turn_end();
        wgmma_wait<0>();
        fold();
        fence_regs(of);
        release_v(n - 1);
      }
    } else {
#pragma unroll 1
      for (int t = 0; t < n; ++t) {
        qk(t);
        release_q();
        wgmma_wait<0>();
        fence_regs(sc);
        softmax(t);
        release(k_empty(slot(t)));
        pack();
        rescale();
        pv(t);
        wgmma_wait<0>();
        fence_regs(of);
        release(v_empty(slot(t)));
      }
    }
    // The epilogue: O is staged in this warp's own rows of its Q buffer, which no wgmma reads
    // any more, in the Q tile's layout (the TMA store's: 64-column blocks of 128-byte rows),
    // and one lane stores them with TMA (box 64 columns x 16 rows; rows past the sequence's
    // end are not written). The staging writes (generic proxy) are fenced before the store
    // (async proxy) reads them. The Q buffer is released once the store has read it, after
    // the next item's first Q K^T is issued (or at the end), so the warp does not wait for it.
    release_q();
    // A split unit's partial piece goes to the workspace (O is staged as for a store, but
    // neither it nor the LSE is stored: one epilogue path keeps the wgmma descriptors in
    // uniform registers, which a branch around the epilogue did not); its owner piece merges
    // the other pieces' partials first.
    int part = 0, b, h;
    if constexpr (Cfg::SPLIT) {
      part = __shfl_sync(0xffffffffu, items[qb].part, 0);
      const int range = int(gridDim.x - 1 - blockIdx.x);
      // A warp whose rows are all past the queries (a short query block, decoding: most of the
      // tile) neither writes nor merges partials: its rows are never stored. Every piece of a
      // unit gives the warp the same rows, so writers and mergers agree.
      // Clusters: a member's rows go to its leader, and only leaders go on (every consumer warp
      // takes part: the leader's ring must be free of all of them).
      const bool go_on = p.split_cluster > 1 ? cluster_merge<Cfg>(p, range, warp, lane, m[0], l[0], of, sK0,
                                                                  smem_addr(&cbars[0]), smem_addr(&cbars[1]), kClusterFree)
                                             : true;
      if (p.split_share > 0) {  // every range's partial; the mergers store O (share_merge, below)
        if (row0 < p.seq_q) write_partial<Cfg>(p, range, warp, lane, m[0], l[0], of);
        part = 2;
      } else if (row0 < p.seq_q && go_on) {
        const TailSplit ts = tail_split<Cfg>(p);
        if (part == 2) {
          merge_partials<Cfg>(p, merge_plan(ts, range, false, p.split_cluster), warp, lane, m[0], l[0], of);
          write_partial<Cfg>(p, range, warp, lane, m[0], l[0], of);
        }
        if (part == 1) merge_partials<Cfg>(p, merge_plan(ts, range, true, p.split_cluster), warp, lane, m[0], l[0], of);
      }
      b = items[qb].b;
      h = items[qb].h + h_off;
      named_bar_arrive(kItemFree + qb, FREE_THREADS);  // items[qb] read
    } else {
      b = w.b;
      h = w.h + h_off;
    }
    const int wi = warp % 4;
    const u32 stage = (qb * Cfg::SMEM_Q) + (wg * 64 + wi * 16) * 128;
    epilogue::store<Cfg, 1, BM * 128>(p, m, l, o, b, h, i64(b) * p.heads_kv + h / (p.heads_q / p.heads_kv), warp, row0,
                                      smem + stage, nullptr, part != 2);
    fence_proxy_async();
    __syncwarp();
    if (lane == 0 && part != 2) {
#pragma unroll
      for (int cc = 0; cc < CH; ++cc) tma_store_4d(&p.tma_o, sQ0 + stage + cc * BM * 128, cc * 64, row0, h, b);
      tma_store_commit();
    }
    pending_q = qb;
    ++k;
  }
  release_q();
  if (lane == 0) tma_store_wait<0, false>();
  // PV8: the warpgroup index from the thread's (ptxas otherwise keeps `warp` in local memory
  // across the loop).
  if (Cfg::PINGPONG && (Cfg::PV8 ? __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0) : wg) == 0) named_bar_sync(1, 256);
  if constexpr (Cfg::SPLIT) {
    // The share merge: this CTA's one item is done (its unit is recomputed here rather than kept
    // live across the loop, which spilled), so the ring is free, a scratch of 4 KiB.
    const int range = int(gridDim.x - 1 - blockIdx.x);
    if (p.split_share > 0 && range < p.split_ranges) {
      WorkItem wi;
      work_item<Cfg>(p, range / (p.split_ranges / persistent_units<Cfg>(p)), 0, &wi);
      share_merge<Cfg>(p, range, wi.b, wi.h, wi.j0, int(threadIdx.x), sK0, kClusterFree);
    }
  }
}

// QN: the quarters of the head dim every call of this entry computes. 4: all of them (the
// plain kernel at head dim 256: the 64-column boxes of the call's head dim); 3: the
// three-quarter entry sage_attn_q3 (head dim 256, the plain kernel: three boxes; head dim
// 128, the persistent kernels: 96 columns).
template <class Cfg, int QN = 4>
SAGE_DEV void attn_kernel(const SageAttnParams& p) {
  static_assert(QN == 4 || (QN == 3 && (Cfg::PERSISTENT ? Cfg::D == 128 : Cfg::D == 256)),
                "three quarters: head dim 128 (persistent kernels) or 256 (the plain kernel)");
  if constexpr (Cfg::PERSISTENT) {
    if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_persistent_t<Cfg, true, QN>(p);
    else attn_kernel_persistent_t<Cfg, false, QN>(p);
  } else {
    constexpr int BOXES = QN == 3 ? 3 : 0;
    if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_t<Cfg, true, BOXES>(p, p);
    else attn_kernel_t<Cfg, false, BOXES>(p, p);
  }
}

// Variable-length batches (p.cu_seqlens_q; the plain kernel): each CTA runs its sequence as a
// call of its own (mma_attn::varlen_view), its tiles read through the maps over the packed
// tensors at the sequence's first rows.
template <class Cfg, bool WINDOW = false>
SAGE_DEV void attn_kernel_varlen(const SageAttnParams& p) {
  static_assert(!Cfg::PERSISTENT, "variable-length batches run on the plain kernel");
  SageAttnParams v = p;
  if (!mma_attn::varlen_view<Cfg::BM, Cfg::BN>(p, v)) return;
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_t<Cfg, true, 0, true, WINDOW>(v, p);
  else attn_kernel_t<Cfg, false, 0, true, WINDOW>(v, p);
}

// A paged KV cache (p.block_table; launch.cpp has_paged_entry): each CTA on its sequence's
// mma_attn::paged_view (its keys), the tiles read as PagedBoxes through the maps over the pages.
template <class Cfg>
SAGE_DEV void attn_kernel_paged(const SageAttnParams& p) {
  static_assert(!Cfg::PERSISTENT, "paged caches run on the plain kernel");
  SageAttnParams v = p;
  mma_attn::paged_view<Cfg::BN>(p, mma_attn::cta_coords(p).b, v);
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_t<Cfg, true, 0, false, false, true>(v, p);
  else attn_kernel_t<Cfg, false, 0, false, false, true>(v, p);
}

// Variable-length queries over a paged KV cache (p.cu_seqlens_q and p.block_table): each CTA runs
// its sequence as a call of its own (mma_attn::varlen_paged_view: its rows of the packed Q through
// the map over it, its keys as the paged entry's boxes of its row of the block table).
template <class Cfg>
SAGE_DEV void attn_kernel_varlen_paged(const SageAttnParams& p) {
  static_assert(!Cfg::PERSISTENT, "paged caches run on the plain kernel");
  SageAttnParams v = p;
  if (!mma_attn::varlen_paged_view<Cfg::BM, Cfg::BN, false>(p, int(blockIdx.z), v)) return;
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_t<Cfg, true, 0, true, false, true>(v, p);
  else attn_kernel_t<Cfg, false, 0, true, false, true>(v, p);
}

// A sliding window (p.window > 0; launch.cpp has_window_entry): the dense call or, with
// p.cu_seqlens_q, the variable-length batch, each CTA starting at its window's first key tile and
// masking the tiles on the window's edge (the dense and varlen entries stay without that code).
template <class Cfg>
SAGE_DEV void attn_kernel_window(const SageAttnParams& p) {
  static_assert(!Cfg::PERSISTENT, "sliding windows run on the plain kernel");
  if (p.cu_seqlens_q) {  // a variable-length batch (the launch's parameters; its views set p.varlen)
    attn_kernel_varlen<Cfg, true>(p);
  } else {
    if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_t<Cfg, true, 0, false, true>(p, p);
    else attn_kernel_t<Cfg, false, 0, false, true>(p, p);
  }
}

}  // namespace native_attn
}  // namespace sage
