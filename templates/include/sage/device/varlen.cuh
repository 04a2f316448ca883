// Variable-length batches (SageAttnParams::cu_seqlens_q): a CTA's view of its sequence, as a
// call of its own. The native kernels (varlen_view) and the quantized kernels and their
// preparation (varlen_view_ws) take it.
#pragma once
#include "sage/device/common.cuh"

namespace sage {
namespace mma_attn {
using namespace dev;

// Sequence b's rows in the packed tensors: queries [*q0, *q1), keys [*k0, *k1), clamped to the
// packed totals (p.seq_q, p.seq_kv), so rows past them are never read nor written whatever
// cu_seqlens holds.
SAGE_DEV void varlen_rows(const SageAttnParams& p, int b, int* q0, int* q1, int* k0, int* k1) {
  *q0 = min_(max_(p.cu_seqlens_q[b], 0), p.seq_q);
  *q1 = min_(max_(p.cu_seqlens_q[b + 1], *q0), p.seq_q);
  *k0 = min_(max_(p.cu_seqlens_kv[b], 0), p.seq_kv);
  *k1 = min_(max_(p.cu_seqlens_kv[b + 1], *k0), p.seq_kv);
}

// The view's lengths and its caller's tensors, O and LSE from the sequence's first rows (q0, k0),
// LSE as [heads_q, total] (lse_stride_h); q_row0 and kv_row0 for the TMA kernels, whose maps
// cover the packed tensors.
SAGE_DEV void varlen_at(const SageAttnParams& p, int q0, int q1, int k0, int k1, SageAttnParams& v) {
  v.seq_q = q1 - q0;
  v.seq_kv = k1 - k0;
  v.lse_stride_h = p.seq_q;
  v.q_row0 = q0;
  v.kv_row0 = k0;
  v.q.ptr = static_cast<const u8*>(p.q.ptr) + i64(q0) * p.q.stride_n * 2;
  v.k.ptr = static_cast<const u8*>(p.k.ptr) + i64(k0) * p.k.stride_n * 2;
  v.v.ptr = static_cast<const u8*>(p.v.ptr) + i64(k0) * p.v.stride_n * 2;
  v.o = static_cast<u8*>(p.o) + i64(q0) * p.o_stride_n * 2;
  if (p.lse) v.lse = p.lse + q0;
}

// A variable-length batch (p.cu_seqlens_q set: the launcher's grid is (query tiles of the
// longest sequence, Hq, sequences)): the call of this CTA's sequence blockIdx.z, in `v` (a copy
// of p): its lengths, tiles and the pointers to its first rows, batch 1, varlen set (cta_coords
// then takes b = 0). False: this CTA's query tile lies past its sequence (the CTA has nothing to
// do).
template <int BM, int BN>
SAGE_DEV bool varlen_view(const SageAttnParams& p, SageAttnParams& v) {
  int q0, q1, k0, k1;
  varlen_rows(p, int(blockIdx.z), &q0, &q1, &k0, &k1);
  v.q_tiles = (q1 - q0 + BM - 1) / BM;
  v.k_tiles = (k1 - k0 + BN - 1) / BN;
  if (int(blockIdx.x) >= v.q_tiles) return false;
  v.batch = 1;
  v.varlen = 1;
  varlen_at(p, q0, q1, k0, k1, v);
  return true;
}

// Sequence b of a variable-length batch as the quantized kernels and their preparation see it
// (SageAttnParams::kv_tile_pitch), in `v` (a copy of p): its lengths, tiles (BM and BN rows),
// statistics rows (at most p.stat_rows of its keys), first tile in the workspace (kv_tile0),
// and the caller's tensors, O, LSE and q_kmean from its first rows, with batch strides 0, so
// that the batch index b still selects its statistics, scales and sync words. False: the
// sequence has no query tile `q_tile` (-1: no check).
template <int BM, int BN>
SAGE_DEV bool varlen_view_ws(const SageAttnParams& p, int b, int q_tile, SageAttnParams& v) {
  int q0, q1, k0, k1;
  varlen_rows(p, b, &q0, &q1, &k0, &k1);
  v.q_tiles = (q1 - q0 + BM - 1) / BM;
  if (q_tile >= v.q_tiles) return false;
  v.k_tiles = (k1 - k0 + BN - 1) / BN;
  v.kv_tile0 = k0 / BN + b;
  v.stat_rows = min_(p.stat_rows, k1 - k0);
  v.varlen = 2;
  varlen_at(p, q0, q1, k0, k1, v);
  v.q.stride_b = v.k.stride_b = v.v.stride_b = 0;
  v.o_stride_b = 0;
  if (p.q_kmean) v.q_kmean = p.q_kmean + q0;
  return true;
}

// The sequence whose key tiles (SageAttnParams::kv_tile_pitch) hold tile `tile` of a kv head's
// row: the last b with cu_seqlens_kv[b] / BN + b <= tile (offsets clamped as varlen_view_ws's;
// a tile in the gap after a sequence's last one belongs to it and lies past its k_tiles).
template <int BN>
SAGE_DEV int varlen_kv_seq(const SageAttnParams& p, int tile) {
  int lo = 0, hi = p.batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (min_(max_(p.cu_seqlens_kv[mid], 0), p.seq_kv) / BN + mid <= tile) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace mma_attn
}  // namespace sage
