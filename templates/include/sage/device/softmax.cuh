// Online softmax of one tile (FlashAttention-2 style, log2 domain), shared by the mma.sync and
// wgmma pipelines: their per-warp accumulators have the same layout (SL slabs of 16 rows; per
// 8-column chunk, lane l holds rows l/4 and l/4+8, columns 2(l%4) and 2(l%4)+1).
#pragma once
#include "sage/device/common.cuh"

namespace sage {
namespace softmax {
using namespace dev;

// The q_mean . K^T corrections of the lane's columns, scaled (SMOOTH_Q only).
template <int NT, bool SMOOTH_Q>
SAGE_DEV void scaled_ds(const i32 (&ds)[SMOOTH_Q ? NT : 1][4], float ds_scale, float (&dsf)[SMOOTH_Q ? NT : 1][2]) {
  if constexpr (SMOOTH_Q) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      dsf[n][0] = float(ds[n][0]) * ds_scale;
      dsf[n][1] = float(ds[n][1]) * ds_scale;
    }
  }
}

// Whether this lane's column 8n + e of a tile (first lane column col0) is visible to query
// `row`: before the sequence end and, when causal, on or below the diagonal (bottom-right
// aligned; causal_off = seq_kv - seq_q). Both bounds fold into one per row: the lane's last
// visible column relative to col0, so that each column costs one compare with an immediate.
// WINDOW (the masked tiles of a sliding window's kernels, MASK == kMaskWindow): also from the
// row's first visible column (row + causal_off - p.window + 1); otherwise that bound is a
// constant that every column passes, and the compare folds away.
constexpr int kMaskWindow = 2;  // MASK: 0 none, 1 the sequence end and the diagonal, 2 also a window's start
struct Visible {
  int last;   // column col0 + 8n + e is visible iff first <= 8n + e <= last
  int first;
  SAGE_DEV Visible(const SageAttnParams& p, int col0, int causal_off, int row, bool window = false)
      : last((p.causal ? min_(row + causal_off, p.seq_kv - 1) : p.seq_kv - 1) - col0),
        first(window ? row + causal_off - p.window + 1 - col0 : -(1 << 30)) {}
  SAGE_DEV bool operator()(int n, int e) const { return 8 * n + e <= last && 8 * n + e >= first; }
};

// What online() and online_h() share for one row (half hh of a slab's scores `s`, this lane's
// columns): with SMOOTH_Q the row's scores in the log2 domain, masked to -inf, into `x`; the
// row max over the quad (taken on the int32 scores without SMOOTH_Q); the new running max `m`
// and O's rescale factor `alpha`. Returns the exponent base: the new max, or 0 while the row
// has nothing visible.
template <int NT, bool SMOOTH_Q, int MASK, int CHAINS = 1>
SAGE_DEV float row_max(const i32 (&s)[NT][4], int hh, const float (&dsf)[SMOOTH_Q ? NT : 1][2], float dq,
                       const Visible& visible, float (&x)[SMOOTH_Q ? NT : 1][2], float& m, float& alpha) {
  float tmax;
  if constexpr (SMOOTH_Q) {
    tmax = neg_inf();
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = float(s[n][2 * hh + e]) * dq + dsf[n][e];
        if (MASK && !visible(n, e)) v = neg_inf();
        x[n][e] = v;
        tmax = fmaxf(tmax, v);
      }
  } else {
    // CHAINS independent running maxima (one chain of 2*NT dependent IMNMX leaves a warp
    // waiting on each when no other warp of its scheduler has work).
    i32 mx[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) mx[c] = i32(0x80000000);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (!MASK || visible(n, e)) mx[(2 * n + e) % CHAINS] = max_(mx[(2 * n + e) % CHAINS], s[n][2 * hh + e]);
#pragma unroll
    for (int w = CHAINS / 2; w > 0; w /= 2)
#pragma unroll
      for (int c = 0; c < w; ++c) mx[c] = max_(mx[c], mx[c + w]);
    const i32 imax = mx[0];
    tmax = imax == i32(0x80000000) ? neg_inf() : float(imax) * dq;
  }
  tmax = quad_max(tmax);
  const float m_new = fmaxf(m, tmax);
  const float base = m_new == neg_inf() ? 0.f : m_new;
  alpha = ex2(m - base);
  m = m_new;
  return base;
}

// Turns one tile's int32 scores `s` into probabilities `pf` (times 448 when P is stored as
// FP8, 255 as u8, so that it fills the type's range: PS) and updates the running row max `m` and this lane's
// partial row sum `l`; `alpha` is the factor O must be rescaled by. `dq` is the lane's Q
// scale times its K scale (sm_scale * log2 e folded in); with SMOOTH_Q, `ds` holds the
// q_mean . K^T correction of the lane's columns and `ds_scale` its scale. MASK applies the
// sequence end and the causal diagonal (bottom-right aligned) to columns from `col_base`, and
// with kMaskWindow also the start of a sliding window (Visible).
// CHAINS (a power of two) splits the row max and sum into independent dependency chains.
// Without ROW_SUM the caller takes the row sums elsewhere (the sum_mma variants: on the tensor
// cores) and `l` is left alone.
// Without SMOOTH_Q a masked tile's hidden scores are first overwritten (in `s`) with
// kHiddenScore, below every real score (|S| <= D * 127 * 127 < 2^21), whose magic-number
// conversion is -inf (0xB4400000 + 0x4B400000 = 0xFF800000): the row max needs no mask, and
// the exponentials are the unmasked ones (exp2(-inf * dq - c) = 0 for any dq > 0, which the
// masked path guarantees with dq >= kMinDq: a zero scale means a zero score). No per-column
// visibility stays live between the two passes, so a masked tile needs no more registers than
// an unmasked one, and a hidden score costs one compare and one select.
constexpr i32 kHiddenScore = i32(0xB4400000u);
static_assert(u32(kHiddenScore) + 0x4B400000u == 0xFF800000u, "the magic conversion of a hidden score is -inf");
constexpr float kMinDq = 1.17549435e-38f;  // the smallest normal float
template <int SL, int NT, bool SMOOTH_Q, int MASK, PScale PS, int CHAINS = 1, bool ROW_SUM = true>
SAGE_DEV void online(const SageAttnParams& p, float (&m)[SL][2], float (&l)[SL][2], i32 (&s)[SL][NT][4],
                     const i32 (&ds)[SMOOTH_Q ? NT : 1][4], float dq, float ds_scale, int col_base, int row0,
                     float (&pf)[SL][NT][4], float (&alpha)[SL][2]) {
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const float shift = p_log2_scale(PS);  // P scaled to fill its MMA type's range
  const int col0 = col_base + 2 * tig;
  const int causal_off = p.seq_kv - p.seq_q;
  float dsf[SMOOTH_Q ? NT : 1][2];
  scaled_ds<NT, SMOOTH_Q>(ds, ds_scale, dsf);
#pragma unroll
  for (int a = 0; a < SL; ++a) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const Visible visible(p, col0, causal_off, row0 + 16 * a + gid + 8 * hh, MASK == kMaskWindow);
      constexpr bool HIDE = MASK && !SMOOTH_Q;  // hidden scores overwritten, see kHiddenScore
      if constexpr (HIDE) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (!visible(n, e)) s[a][n][2 * hh + e] = kHiddenScore;
      }
      float x[SMOOTH_Q ? NT : 1][2];
      const float base =
          row_max<NT, SMOOTH_Q, MASK && !HIDE, CHAINS>(s[a], hh, dsf, dq, visible, x, m[a][hh], alpha[a][hh]);
      float rs[CHAINS];
#pragma unroll
      for (int c = 0; c < CHAINS; ++c) rs[c] = 0.f;
      if constexpr (SMOOTH_Q) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float v = ex2(x[n][e] - base + shift);
            pf[a][n][2 * hh + e] = v;
            rs[(2 * n + e) % CHAINS] += v;
          }
      } else {
        // exp2(S*dq - base + shift) with S converted by the magic-number trick:
        // (S + 12582912) * dq - (12582912 * dq + base - shift), one FFMA. A hidden score
        // converts to -inf, and dq > 0 (dqm) makes its exponential 0.
        const float dqm = HIDE ? fmaxf(dq, kMinDq) : dq;
        const float c = kMagic * dqm + base - shift;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float v = ex2(fmaf(magic_i2f(s[a][n][2 * hh + e]), dqm, -c));
            pf[a][n][2 * hh + e] = v;
            if (ROW_SUM) rs[(2 * n + e) % CHAINS] += v;
          }
      }
      if constexpr (ROW_SUM) {
#pragma unroll
        for (int w = CHAINS / 2; w > 0; w /= 2)
#pragma unroll
          for (int c = 0; c < w; ++c) rs[c] += rs[c + w];
        l[a][hh] = l[a][hh] * alpha[a][hh] + rs[0];
      }
    }
  }

}

// online() with half-precision exponentials (the half_exp axis): the same row maxima and
// rescale factors, but the exponent of each pair of adjacent columns (one row) is packed into
// an f16x2 and raised with one ex2.approx.f16x2, so the MUFU pipe does half the work. `ph`
// holds the probabilities as f16x2: ph[a][n][hh] = columns 2tig, 2tig+1 of chunk n, row
// gid + 8hh of slab a (exactly the FP16 A-fragment register, or two bytes of the FP8 one).
// The row sum adds the pairs in f16x2 (pairwise; a half sums at most NT values <= 448, far
// below 65504) and the two halves in FP32.
template <int SL, int NT, bool SMOOTH_Q, int MASK, PScale PS>
SAGE_DEV void online_h(const SageAttnParams& p, float (&m)[SL][2], float (&l)[SL][2], const i32 (&s)[SL][NT][4],
                       const i32 (&ds)[SMOOTH_Q ? NT : 1][4], float dq, float ds_scale, int col_base, int row0,
                       u32 (&ph)[SL][NT][2], float (&alpha)[SL][2]) {
  static_assert(NT % 2 == 0, "pairwise f16 row sums need an even number of 8-column chunks");
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const float shift = p_log2_scale(PS);
  const int col0 = col_base + 2 * tig;
  const int causal_off = p.seq_kv - p.seq_q;
  float dsf[SMOOTH_Q ? NT : 1][2];
  scaled_ds<NT, SMOOTH_Q>(ds, ds_scale, dsf);
#pragma unroll
  for (int a = 0; a < SL; ++a) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const Visible visible(p, col0, causal_off, row0 + 16 * a + gid + 8 * hh, MASK == kMaskWindow);
      float x[SMOOTH_Q ? NT : 1][2];
      const float base = row_max<NT, SMOOTH_Q, MASK>(s[a], hh, dsf, dq, visible, x, m[a][hh], alpha[a][hh]);
      u32 h[NT];
      if constexpr (SMOOTH_Q) {
#pragma unroll
        for (int n = 0; n < NT; ++n) h[n] = ex2_f16x2(pack_f16x2(x[n][0] - base + shift, x[n][1] - base + shift));
      } else {
        const float c = kMagic * dq + base - shift;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          float x0 = fmaf(magic_i2f(s[a][n][2 * hh]), dq, -c);
          float x1 = fmaf(magic_i2f(s[a][n][2 * hh + 1]), dq, -c);
          if (MASK && !visible(n, 0)) x0 = neg_inf();
          if (MASK && !visible(n, 1)) x1 = neg_inf();
          h[n] = ex2_f16x2(pack_f16x2(x0, x1));
        }
      }
      u32 t[NT / 2];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        ph[a][n][hh] = h[n];
        if (n % 2) t[n / 2] = hadd2(h[n - 1], h[n]);
      }
#pragma unroll
      for (int cnt = NT / 2; cnt > 1; cnt = (cnt + 1) / 2)
#pragma unroll
        for (int i = 0; i < cnt / 2; ++i) t[i] = hadd2(t[i], t[i + (cnt + 1) / 2]);
      l[a][hh] = l[a][hh] * alpha[a][hh] + f16x2_sum(t[0]);
    }
  }
}

// Hidden scores of one tile (the lane's row gid + 8 hh, accumulator layout) become -inf: the
// scale is positive, so their exponentials are 0. WINDOW: also those left of a sliding window.
template <class Cfg, bool WINDOW = false>
SAGE_DEV void hide(const SageAttnParams& p, float (&s)[Cfg::BN / 2], int col_base, int row0, int hh) {
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const Visible visible(p, col_base + 2 * tig, p.seq_kv - p.seq_q, row0 + gid + 8 * hh, WINDOW);
#pragma unroll
  for (int n = 0; n < Cfg::BN / 8; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (!visible(n, e)) s[4 * n + 2 * hh + e] = neg_inf();
}

// How far (log2 domain) a row's maximum may pass the reference its exponentials are taken
// against before the reference moves: P is then at most 2^8, which FP16/BF16 P, the FP32 row
// sums and O hold exactly as well, and O needs no rescaling on most tiles.
constexpr float kRescaleSlack = 8.0f;

// The online softmax of one tile of FP32 scores `s` (the unquantized kernels, wgmma and
// mma.sync; Cfg::BN keys; accumulator layout: chunk n, rows gid
// and gid + 8 at [4n + 2hh + e]), in place: s becomes this tile's unnormalized P, with the row
// state m (the reference maximum, log2 domain, scaled), l (this lane's partial sums) and O's
// rescale factors `alpha`. The reference moves only where a row's maximum passes it by more
// than `slack` (lazy rescaling; 0 after softmax_fast gave up on the tile, so that the next
// tiles are fast again); returns whether it moved for any row of the warp
// (warp-uniform: only then does O need rescaling, by alpha; otherwise alpha is 1).
// MASK: hidden scores become -inf first (hide), and the rest is the unmasked softmax: no
// per-column visibility stays live between passes.
template <class Cfg, int MASK>
SAGE_DEV bool softmax_tile(const SageAttnParams& p, float (&m)[2], float (&l)[2], float (&s)[Cfg::BN / 2],
                           float scale, int col_base, int row0, float (&alpha)[2], float slack = kRescaleSlack) {
  constexpr int NT = Cfg::BN / 8;
  constexpr float shift = p_log2_scale(Cfg::P_SCALE);  // P's factor (FP8 P: x4), 0 for FP16 P
  bool moved = false;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if constexpr (MASK) hide<Cfg, MASK == kMaskWindow>(p, s, col_base, row0, hh);
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) mx[e] = fmaxf(mx[e], s[4 * n + 2 * hh + e]);
    const float tmax = quad_max(fmaxf(mx[0], mx[1])) * scale;
    // -inf + slack is -inf: the first visible score moves the reference.
    const bool move = tmax > m[hh] + slack;
    moved |= move;
    const float m_new = move ? tmax : m[hh];
    const float base = m_new == neg_inf() ? 0.f : m_new;
    alpha[hh] = ex2(m[hh] - base);  // 1 where the reference stays (0 while it is -inf: O is 0)
    m[hh] = m_new;
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = ex2(fmaf(s[4 * n + 2 * hh + e], scale, shift - base));
        s[4 * n + 2 * hh + e] = v;
        rs[e] += v;
      }
    l[hh] = l[hh] * alpha[hh] + (rs[0] + rs[1]);
  }
  return __any_sync(0xffffffffu, moved);
}

}  // namespace softmax
}  // namespace sage
