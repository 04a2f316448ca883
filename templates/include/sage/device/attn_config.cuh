// Compile-time configuration of an mma.sync attention variant and of the preparation
// kernels that feed it (the per-thread scale layout follows the attention kernel's MMA
// fragments, so both are instantiated from the same parameters).
#pragma once
#include "sage/device/common.cuh"

namespace sage {

enum class QkType { int8, int4, native };  // native: the caller's FP16/BF16 Q and K, unquantized
enum class PvType { fp16, fp16acc, fp8, int8, native };  // fp16: fp32 accumulators; fp16acc: fp16
                                                 // accumulators flushed to fp32 every tile;
                                                 // fp8: e4m3 operands, two-level fp32;
                                                 // int8: P as u8 (x255), V int8 per channel,
                                                 // exact int32 per tile added into fp32;
                                                 // native: P and the caller's V in its FP16/BF16,
                                                 // fp32 accumulators
enum class Gran { per_thread, per_warp, per_block, none };  // none: no scales (native)
enum class Schedule { plain,      // per tile: S = QK^T, softmax, O += PV
                      overlap,    // S of tile t+1 is issued before the softmax of tile t, so the
                                  // tensor pipe works while the exp/FMA pipes do (needs 3 stages)
                      pingpong,   // wgmma: a TMA producer warpgroup and two consumer warpgroups
                                  // taking turns at the tensor cores (named barriers)
                      pingpong_overlap,  // pingpong, and each consumer's softmax of tile t runs
                                         // while its P V of tile t-1 does
                      ws,                // the warp-specialized kernel without turns: the two
                                         // consumers issue their GEMMs whenever they are ready
                      ws_overlap,        // ws with the intra-warpgroup overlap
                      turns,             // wgmma, TMA, 2-3 warpgroups sharing one K/V ring (no
                                         // producer): their GEMMs go to the tensor cores in a
                                         // fixed rotation (named barriers)
                      decode };          // mma.sync, native: a tile of at most BM rows of queries
                                         // is the MMAs' N, and each warp takes 16 keys of every
                                         // K/V tile (attn_decode.cuh)
// The schedules of the warp-specialized wgmma kernel, and their two ingredients.
__host__ __device__ constexpr bool is_ws(Schedule s) {
  return s == Schedule::pingpong || s == Schedule::pingpong_overlap || s == Schedule::ws || s == Schedule::ws_overlap;
}
__host__ __device__ constexpr bool ws_turns(Schedule s) { return s == Schedule::pingpong || s == Schedule::pingpong_overlap; }
__host__ __device__ constexpr bool ws_intra(Schedule s) { return s == Schedule::pingpong_overlap || s == Schedule::ws_overlap; }

template <int HEAD_DIM, int BLOCK_M, int BLOCK_N, int WARPS, int STAGES_, QkType QK_, PvType PV_,
          Gran GRAN_, bool SMOOTH_K_, bool SMOOTH_Q_, bool SMOOTH_V_, Schedule SCHED_ = Schedule::plain,
          int MIN_CTAS_ = 1, bool HALF_EXP_ = false>
struct MmaAttnConfig {
  static constexpr int D = HEAD_DIM;
  static constexpr int BM = BLOCK_M;
  static constexpr int BN = BLOCK_N;
  static constexpr int NWARPS = WARPS;
  static constexpr int STAGES = STAGES_;
  static constexpr QkType QK = QK_;
  static constexpr PvType PV = PV_;
  static constexpr Gran GRAN = GRAN_;
  static constexpr bool SMOOTH_K = SMOOTH_K_;
  static constexpr bool SMOOTH_Q = SMOOTH_Q_;
  static constexpr bool SMOOTH_V = SMOOTH_V_;
  static constexpr Schedule SCHED = SCHED_;
  static constexpr int MIN_CTAS = MIN_CTAS_;  // __launch_bounds__ occupancy target (caps registers)
  static constexpr bool HALF_EXP = HALF_EXP_;  // softmax exponentials as ex2.approx.f16x2 (softmax::online_h)
  // Whether each lane's running row sum l is its row's whole sum (the wgmma sum_mma variants)
  // rather than the part over its own columns, which the epilogue adds up across the quad.
  // The int8 P.V path sums P on the tensor cores (an IMMA against ones), complete per lane.
  static constexpr bool ROW_SUMS_COMPLETE = PV_ == PvType::int8;

  static constexpr int THREADS = WARPS * 32;
  // The decoding schedule (native): the tile's BM query rows are the N of every warp's MMAs,
  // whose 16 keys of each tile are their M (S^T = K Q^T, O^T = V^T P^T; attn_decode.cuh).
  static constexpr bool DECODE = SCHED_ == Schedule::decode;
  static constexpr int WARP_Q = BM / WARPS;   // query rows per warp (not the decoding schedule's)
  static constexpr int SLABS = WARP_Q / 16;   // 16-row MMA slabs per warp
  static constexpr bool INT4 = QK == QkType::int4;
  // Unquantized: Q, K and V are the caller's FP16/BF16 tensors, read in place (no preparation);
  // Q.K^T and P.V are m16n8k16 MMAs of that type with FP32 accumulators.
  static constexpr bool NATIVE = QK == QkType::native;
  // The native kernel also serves decoding: where the query tiles are fewer than the CTAs that
  // fit the GPU, the launcher cuts each tile's keys over p.split_ranges CTAs, and the last of
  // them merges their partial results (attn_mma.cuh: split_partial, split_merge).
  static constexpr bool SPLIT = NATIVE;
  static constexpr int QROW = NATIVE ? 2 * D : INT4 ? D / 2 : D;  // bytes of one Q/K row
  static constexpr int QK_KSTEP_BYTES = 32;         // m16n8k32 (s8), m16n8k64 (s4), m16n8k16 (16-bit)
  static constexpr int QK_KSTEPS = QROW / QK_KSTEP_BYTES;
  // head_dim 256 (native): Q's A fragments would take 64 registers beside O's 128, so each
  // k-step reads them from shared memory (attn_mma.cuh: QOperand).
  static constexpr bool Q_SMEM = NATIVE && D == 256;
  static constexpr float QMAX = INT4 ? 7.0f : 127.0f;
  static constexpr int Q_GROUPS = GRAN == Gran::per_thread ? WARPS * 8 : GRAN == Gran::per_warp ? WARPS : 1;
  static constexpr int K_GROUPS = GRAN == Gran::per_thread ? 4 : 1;
  static_assert(NATIVE == (PV_ == PvType::native), "native Q.K^T and P.V go together");
  static_assert(!NATIVE || (GRAN_ == Gran::none && !SMOOTH_K_ && !SMOOTH_Q_ && !SMOOTH_V_ && !HALF_EXP_),
                "the native kernel has no scales, smoothing or half-precision exponentials");
  static_assert(NATIVE || GRAN_ != Gran::none, "quantized Q.K^T needs scale groups");

  static constexpr bool V_FP8 = PV == PvType::fp8;
  static constexpr bool V_INT8 = PV == PvType::int8;
  // V prepared as an 8-bit V^T (FP8 or INT8, per-channel scales), tokens permuted for the
  // 8-bit MMA's A-fragment order of P.
  static constexpr bool V8 = V_FP8 || V_INT8;
  static constexpr int V_ELEM = V8 ? 1 : 2;
  // How P is scaled before it is rounded to its MMA type (exp2 shift; undone by the epilogue).
  static constexpr dev::PScale P_SCALE = V_FP8 ? dev::PScale::e4m3 : V_INT8 ? dev::PScale::u8 : dev::PScale::one;
  static constexpr float V_QMAX = V_FP8 ? dev::kFp8Max : 127.0f;  // |V| range of the 8-bit type

  static constexpr int SMEM_Q = BM * QROW;
  static constexpr int SMEM_K_STAGE = BN * QROW;
  static constexpr int SMEM_V_STAGE = BN * D * V_ELEM;
  static constexpr int SMEM_MAIN = SMEM_Q + STAGES * (SMEM_K_STAGE + SMEM_V_STAGE);
  // The epilogue stages O (out dtype, rows padded by 16 bytes against bank conflicts)
  // through the same memory, for 16-byte coalesced stores.
  static constexpr int O_ROW_BYTES = D * 2 + 16;
  static constexpr int SMEM_EPI = BM * O_ROW_BYTES;
  // The decoding schedule's warps meet at a range's end: a table of the tile's rows (4 ints a
  // row), each warp's O^T (D FP32 values a row, rows D + 4 apart against bank conflicts), row
  // maxima and sums.
  static constexpr int SMEM_COMBINE = DECODE ? (4 * BM + WARPS * BM * (D + 6)) * 4 : 0;
  static constexpr int SMEM_BYTES = SMEM_MAIN > SMEM_EPI ? (SMEM_MAIN > SMEM_COMBINE ? SMEM_MAIN : SMEM_COMBINE)
                                                         : (SMEM_EPI > SMEM_COMBINE ? SMEM_EPI : SMEM_COMBINE);
  // Occupancy target of the preparation kernel (CTAs of kPrepThreads per SM): its tile jobs
  // move 8-48 KB each, so at short sequences their latency sets the pace and more of them in
  // flight help. At D=64 four fit in 64 registers; at D=128 the packed tile needs ~80 (three),
  // except without Q jobs (WgmmaAttnConfig, fuse_q: four).
  // At D=256 (a row is a warp's 32 lanes of 8 channels) two: three spill. sm_120's ptxas
  // spills 4-16 bytes at each of these caps (CUDA 13.0): one CTA fewer there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
  static constexpr int PREP_MIN_BLOCKS = D == 64 ? 3 : D == 128 ? 2 : 1;
#else
  static constexpr int PREP_MIN_BLOCKS = D == 64 ? 4 : D == 128 ? 3 : 2;
#endif
  // Q tiles one preparation job quantizes (at least 128 rows, as a K job): small jobs are
  // latency-bound. Consecutive tiles' outputs and scales are contiguous, and the per-thread and
  // per-warp scale-group formulas run on across them; a block mean (smooth_q) or one scale per
  // tile (per_block) needs one tile per job. runtime/src/launch/launch.cpp: q_tiles_per_job.
  static constexpr int Q_TILES_PER_JOB = (BM < 128 && 128 % BM == 0 && !SMOOTH_Q && GRAN != Gran::per_block) ? 128 / BM : 1;

  // head_dim 256: the native kernels, and INT8 Q.K^T with FP16 or FP8 P.V (the wgmma kernel's
  // 256-byte Q/K rows are two 128-byte TMA boxes; WgmmaAttnConfig checks the rest).
  static_assert(D == 64 || D == 128 || (D == 256 && (NATIVE || (QK == QkType::int8 && PV != PvType::int8))),
                "head_dim 64 or 128 (native, and INT8 Q.K^T with FP16 or FP8 P.V: also 256)");
  static_assert(DECODE || WARP_Q == 16 || WARP_Q == 32, "16 or 32 query rows per warp");
  static_assert(!DECODE || (NATIVE && BN == 16 * WARPS && (BM == 16 || BM == 32) && STAGES >= 2),
                "the decoding schedule: native, 16 keys a warp, 16 or 32 rows of queries, 2+ stages");
  static_assert(BN % 32 == 0 && BN >= 32, "BLOCK_N must be a multiple of 32");
  static_assert(STAGES >= 1 && STAGES <= 4, "1 to 4 stages");
  static_assert(SCHED != Schedule::overlap || STAGES >= 3, "the overlap schedule keeps two tiles resident: 3+ stages");
  // Exactness of the int32 -> float "magic number" conversion (|S| < 2^22).
  static_assert(!(QK == QkType::int8) || D * 127 * 127 < (1 << 22), "int8 QK dot products must stay below 2^22");
};

// Sizes of the preparation kernels' work.
constexpr int kPrepThreads = 256;

}  // namespace sage
