// Epilogue shared by the attention pipelines: normalize O by the row sums, undo V's 8-bit
// scale and mean, write LSE (natural log, K smoothing undone), and store O through shared
// memory as 16-byte rows. Called by every warp after the mainloop with the CTA synchronized
// (the shared memory is free).
#pragma once
#include "sage/device/common.cuh"

namespace sage {
namespace epilogue {
using namespace dev;

// One warp's SL x 16 rows starting at row0 (global query index); `warp` is its index in the CTA
// (its rows are staged at warp * 16 * SL rows of `smem`). D, V8, P_SCALE, SMOOTH_V, O_ROW_BYTES from Cfg.
// TMA_BLOCK > 0: O is only staged, for a TMA store by the caller: `smem` is this warp's own
// 16 * SL rows in the store's layout, 64-column blocks TMA_BLOCK bytes apart, each row 128
// bytes with its 16-byte chunks XOR-swizzled by (row % 8) (the 128B swizzle; the rows start
// 1024-byte aligned), so the fragment writes do not conflict on banks either (the persistent
// native kernel stages O in its dead Q rows; the store's tensor map ends at the caller's head
// dim). write_lse false: no LSE (a partial result). Columns at or past p.head_dim (a call of a
// smaller head dim than D) are not written. o_scale: O's factor (FP8 pages: V's scale).
template <class Cfg, int SL, int TMA_BLOCK = 0>
SAGE_DEV void store(const SageAttnParams& p, const float (&m)[SL][2], const float (&l)[SL][2],
                    const float (&o)[SL][Cfg::D / 8][4], int b, int h, i64 kv_bh, int warp, int row0, u8* smem,
                    const float (*l_lse)[2] = nullptr, bool write_lse = true, float o_scale = 1.f) {
  constexpr int D = Cfg::D, WARP_Q = 16 * SL;
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const float shift = p_log2_scale(Cfg::P_SCALE);
  float inv_l[SL][2];
  bool has[SL][2];  // a row that saw keys: V's mean is added back (a row without keys stays 0)
#pragma unroll
  for (int a = 0; a < SL; ++a)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float lt = Cfg::ROW_SUMS_COMPLETE ? l[a][hh] : quad_sum(l[a][hh]);
      inv_l[a][hh] = lt > 0.f ? o_scale / lt : 0.f;
      has[a][hh] = lt > 0.f;
      const int row = row0 + 16 * a + gid + 8 * hh;
      // l_lse: the row sums the LSE is taken from when they differ from O's normalizer
      // (this lane's columns; the int8 P.V path's sums of P before rounding).
      const float ls = p.lse && l_lse ? quad_sum(l_lse[a][hh]) : lt;
      if (write_lse && p.lse && tig == 0 && row < p.seq_q) {
        const i64 idx = (i64(b) * p.heads_q + h) * p.seq_q + row;
        // a variable-length batch's LSE and q_kmean: [heads_q, total] (SageAttnParams::lse_stride_h)
        const i64 vidx = i64(h) * p.lse_stride_h + row;
        float lse = neg_inf();
        if (ls > 0.f) {
          lse = (m[a][hh] + lg2(ls) - shift) * kLn2;
          if (p.q_kmean) lse += p.q_kmean[p.lse_stride_h > 0 ? vidx : idx];
        }
        p.lse[p.lse_stride_h > 0 ? vidx : idx] = lse;
      }
    }
  const float* vscale = Cfg::V8 ? p.v_scale + kv_bh * D : nullptr;
  const float* vmean = Cfg::SMOOTH_V ? p.v_mean + kv_bh * D : nullptr;
  constexpr bool TMA = TMA_BLOCK > 0;
  u8* so = TMA ? smem : smem + warp * WARP_Q * Cfg::O_ROW_BYTES;
  // Byte `x` of staged row r.
  auto at = [&](int r, int x) {
    if constexpr (TMA) return so + (x >> 7) * TMA_BLOCK + r * 128 + (((((x >> 4) & 7) ^ (r & 7)) << 4) | (x & 15));
    else return so + r * Cfg::O_ROW_BYTES + x;
  };
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    const int d = 8 * j + 2 * tig;
    float f0 = 1.f, f1 = 1.f, a0 = 0.f, a1 = 0.f;
    if constexpr (Cfg::V8) { f0 = vscale[d]; f1 = vscale[d + 1]; }
    if constexpr (Cfg::SMOOTH_V) { a0 = vmean[d]; a1 = vmean[d + 1]; }
#pragma unroll
    for (int a = 0; a < SL; ++a)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        // (a select, not a product: the mean of a head whose keys no row here saw may not be
        // written yet, in the PV8 kernel whose V jobs take it, and reads as anything)
        const float x0 = o[a][j][2 * hh] * inv_l[a][hh] * f0 + (Cfg::SMOOTH_V && has[a][hh] ? a0 : 0.f);
        const float x1 = o[a][j][2 * hh + 1] * inv_l[a][hh] * f1 + (Cfg::SMOOTH_V && has[a][hh] ? a1 : 0.f);
        *reinterpret_cast<u32*>(at(16 * a + gid + 8 * hh, d * 2)) = pack_x2(x0, x1, p.dtype);
      }
  }
  if constexpr (TMA) return;
  __syncwarp();
  constexpr int CPR = D / 8;  // 16-byte chunks per output row
  u8* gO = static_cast<u8*>(p.o) + (b * p.o_stride_b + h * p.o_stride_h) * 2;
#pragma unroll
  for (int i = lane; i < WARP_Q * CPR; i += 32) {
    const int r = i / CPR, c = i % CPR;
    const int row = row0 + r;
    if (row < p.seq_q && c * 8 < p.head_dim)  // none of the columns past the caller's head dim
      *reinterpret_cast<u32x4*>(gO + (i64(row) * p.o_stride_n + c * 8) * 2) =
          *reinterpret_cast<const u32x4*>(at(r, c * 16));
  }
}

}  // namespace epilogue
}  // namespace sage
