// The unquantized Hopper kernel (sm_90a; qk and pv "native"): Q, K and V are read as the
// caller gave them (FP16 or BF16, any of the layouts SageTensor describes) by TMA through 4-D
// tensor maps over the caller's tensors, so no preparation kernel runs at all. Where the
// quantized pipeline's preparation costs more than its faster MMAs save (short sequences),
// the tuner picks this family.
//   S = Q K^T        wgmma m64nBNk16 f16/bf16: Q and K from shared memory (K-major, 128B swizzle)
//   softmax          FP32 scores, online, exp2 with sm_scale * log2 e folded into one FFMA
//   O += P V         O rescaled in registers, then wgmma m64nDk16 with P from registers (the
//                    S accumulator layout is the 16-bit A fragment layout) and V from shared
//                    memory as an MN-major (transposed) B operand: V needs no transpose
// Tiles are stored as 64-column blocks of 128-byte rows (one TMA box each), the 128B swizzle
// atom of wgmma; the input dtype picks the f16 or bf16 instructions at run time.
#pragma once
#include "sage/device/attn_wgmma.cuh"

namespace sage {

template <int HEAD_DIM, int BLOCK_N, int WARPGROUPS, int STAGES_, int MIN_CTAS_>
struct NativeAttnConfig {
  static constexpr int D = HEAD_DIM;
  static constexpr int BN = BLOCK_N;
  static constexpr int WGS = WARPGROUPS;
  static constexpr int BM = 64 * WARPGROUPS;
  static constexpr int STAGES = STAGES_;
  static constexpr int MIN_CTAS = MIN_CTAS_;
  static constexpr int THREADS = 128 * WARPGROUPS;
  // What the shared helpers (CtaTile, the epilogue) read: no scales, no FP8, no smoothing.
  static constexpr Gran GRAN = Gran::per_block;
  static constexpr int Q_GROUPS = 1, K_GROUPS = 1;
  static constexpr bool V_FP8 = false, V8 = false, SMOOTH_V = false, SMOOTH_K = false, ROW_SUMS_COMPLETE = false;
  static constexpr dev::PScale P_SCALE = dev::PScale::one;

  static constexpr int COLS = 64;         // elements of one 128-byte swizzled row block
  static constexpr int CHUNKS = D / COLS;  // column blocks of a tile
  static constexpr int SMEM_Q = BM * D * 2;
  static constexpr int SMEM_K_STAGE = BN * D * 2;
  static constexpr int SMEM_V_STAGE = BN * D * 2;
  static constexpr int SMEM_MAIN = SMEM_Q + STAGES * (SMEM_K_STAGE + SMEM_V_STAGE);
  static constexpr int O_ROW_BYTES = D * 2 + 16;
  static constexpr int SMEM_EPI = BM * O_ROW_BYTES;
  // +1024: the kernel aligns its tiles to the 1 KiB swizzle atom itself.
  static constexpr int SMEM_BYTES = (SMEM_MAIN > SMEM_EPI ? SMEM_MAIN : SMEM_EPI) + 1024;

  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BN == 64 || BN == 128, "wgmma n = BLOCK_N is instantiated for 64 and 128");
  static_assert(WARPGROUPS == 1 || WARPGROUPS == 2, "one or two warpgroups");
  static_assert(STAGES >= 1 && STAGES <= 4, "1 to 4 stages");
};

namespace native_attn {
using namespace dev;

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
// O (+)= P V for 16 keys: P from registers, V from shared memory (MN-major).
template <int N, bool BF16>
SAGE_DEV void mma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 b, int acc) {
  if constexpr (BF16) {
    if constexpr (N == 64) wgmma_bf16_m64n64k16_rs_mn(d, a, b, acc);
    else wgmma_bf16_m64n128k16_rs_mn(d, a, b, acc);
  } else {
    if constexpr (N == 64) wgmma_f16_m64n64k16_rs_mn(d, a, b, acc);
    else wgmma_f16_m64n128k16_rs_mn(d, a, b, acc);
  }
}

// The online softmax of one tile of FP32 scores `s` (accumulator layout: chunk n, rows gid
// and gid + 8 at [4n + 2hh + e]) into the 16-bit A fragments of P V, with the row state
// m (log2 domain, scaled), l (this lane's partial sums) and O's rescale factors `alpha`.
template <class Cfg, bool MASK, bool BF16>
SAGE_DEV void softmax_tile(const SageAttnParams& p, float (&m)[2], float (&l)[2], const float (&s)[Cfg::BN / 2],
                           float scale, int col_base, int row0, u32 (&pa)[Cfg::BN / 16][4], float (&alpha)[2]) {
  constexpr int NT = Cfg::BN / 8;
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int causal_off = p.seq_kv - p.seq_q;
  float pf[Cfg::BN / 2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const softmax::Visible visible(p, col_base + 2 * tig, causal_off, row0 + gid + 8 * hh);
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (!MASK || visible(n, e)) mx[e] = fmaxf(mx[e], s[4 * n + 2 * hh + e]);
    const float tmax = quad_max(fmaxf(mx[0], mx[1])) * scale;
    const float m_new = fmaxf(m[hh], tmax);
    const float base = m_new == neg_inf() ? 0.f : m_new;
    alpha[hh] = ex2(m[hh] - base);
    m[hh] = m_new;
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = ex2(fmaf(s[4 * n + 2 * hh + e], scale, -base));
        if (MASK && !visible(n, e)) v = 0.f;
        pf[4 * n + 2 * hh + e] = v;
        rs[e] += v;
      }
    l[hh] = l[hh] * alpha[hh] + (rs[0] + rs[1]);
  }
  constexpr int dtype = BF16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16;
  auto pack = [](float lo, float hi) { return pack_x2(lo, hi, dtype); };
#pragma unroll
  for (int k = 0; k < Cfg::BN / 16; ++k) {
    pa[k][0] = pack(pf[8 * k + 0], pf[8 * k + 1]);  // row gid,     keys 16k + 2tig, +1
    pa[k][1] = pack(pf[8 * k + 2], pf[8 * k + 3]);  // row gid + 8
    pa[k][2] = pack(pf[8 * k + 4], pf[8 * k + 5]);  // row gid,     keys 16k + 8 + 2tig, +1
    pa[k][3] = pack(pf[8 * k + 6], pf[8 * k + 7]);  // row gid + 8
  }
}

// grid (q_tiles, Hq, B), Cfg::THREADS threads, Cfg::SMEM_BYTES dynamic shared memory. The
// tensor maps tma_q/k/v are 4-D (D, N, H, B) over the caller's tensors, boxes of 64 columns
// by BM (Q) or BN (K, V) rows.
template <class Cfg, bool BF16>
SAGE_DEV void attn_kernel_t(const SageAttnParams& p) {
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, ST = Cfg::STAGES, CH = Cfg::CHUNKS;
  constexpr u32 KV_BYTES = Cfg::SMEM_K_STAGE + Cfg::SMEM_V_STAGE;
  extern __shared__ __align__(1024) u8 smem_raw[];
  __shared__ __align__(8) u64 bars[1 + ST];  // [0]: Q, [1 + s]: slot s full
  u8* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const wgmma_attn::CtaTile<Cfg> c(p, threadIdx.x);
  const int warp = c.warp, wg = c.wg, h = c.h, hkv = c.hkv, b = c.b, m0 = c.m0, row0 = c.row0;
  const int n_tiles = c.n_tiles, mask_from = c.mask_from;
  const u32 sQ = smem_addr(smem);
  const u32 sK0 = sQ + Cfg::SMEM_Q;
  const u32 sV0 = sK0 + ST * Cfg::SMEM_K_STAGE;
  const u32 bar0 = smem_addr(&bars[0]);
  auto full = [&](int slot) { return bar0 + 8u * u32(1 + slot); };
  auto load_kv = [&](int tile, int slot) {
    mbar_arrive_expect_tx(full(slot), KV_BYTES);
#pragma unroll
    for (int cc = 0; cc < CH; ++cc) {
      tma_load_4d(sK0 + slot * Cfg::SMEM_K_STAGE + cc * BN * 128, &p.tma_k, cc * 64, tile * BN, hkv, b, full(slot));
      tma_load_4d(sV0 + slot * Cfg::SMEM_V_STAGE + cc * BN * 128, &p.tma_v, cc * 64, tile * BN, hkv, b, full(slot));
    }
  };
  wgmma_attn::tma_barriers_init(p, bar0, 1 + ST);
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar0, Cfg::SMEM_Q);
#pragma unroll
    for (int cc = 0; cc < CH; ++cc) tma_load_4d(sQ + cc * BM * 128, &p.tma_q, cc * 64, m0, h, b, bar0);
#pragma unroll
    for (int s = 0; s < ST; ++s)
      if (s < n_tiles) load_kv(s, s);
  }

  const float scale = p.sm_scale * kLog2e;
  float m[1][2], l[1][2], o[1][D / 8][4];
  wgmma_attn::init_state<D>(m, l, o);
  float(&of)[D / 2] = reinterpret_cast<float(&)[D / 2]>(o);  // the wgmma accumulator view

  const u32 sQw = sQ + wg * 64 * 128;
  mbar_wait(bar0, 0);
  for (int t = 0; t < n_tiles; ++t) {
    const int slot = t % ST;
    const u32 sK = sK0 + slot * Cfg::SMEM_K_STAGE, sV = sV0 + slot * Cfg::SMEM_V_STAGE;
    mbar_wait(full(slot), (t / ST) & 1);
    float s[BN / 2];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      mma_ss<BN, BF16>(s, wgmma_desc(sQw + (k / 4) * BM * 128 + (k % 4) * 32, 1024, 1),
                       wgmma_desc(sK + (k / 4) * BN * 128 + (k % 4) * 32, 1024, 1), k > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    u32 pa[BN / 16][4];
    float alpha[2];
    if (t >= mask_from) softmax_tile<Cfg, true, BF16>(p, m[0], l[0], s, scale, t * BN, row0, pa, alpha);
    else softmax_tile<Cfg, false, BF16>(p, m[0], l[0], s, scale, t * BN, row0, pa, alpha);
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][j][e] *= alpha[e / 2];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < BN / 16; ++k) mma_rs<D, BF16>(of, pa[k], wgmma_desc_mn(sV + k * 16 * 128, BN * 128, 1024, 1), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(of);
    // Every warp's wgmma reads of this slot have completed: refill it.
    __syncthreads();
    if (threadIdx.x == 0 && t + ST < n_tiles) load_kv(t + ST, slot);
  }
  epilogue::store<Cfg, 1>(p, m, l, o, b, h, c.kv_bh, warp, row0, smem);
}

template <class Cfg>
SAGE_DEV void attn_kernel(const SageAttnParams& p) {
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_t<Cfg, true>(p);
  else attn_kernel_t<Cfg, false>(p);
}

}  // namespace native_attn
}  // namespace sage
