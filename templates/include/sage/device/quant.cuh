// Preparation kernel of the attention pipelines, one launch of two kinds of CTAs:
//   1. statistics: per (batch, kv head, channel) partial sums over sequence splits of K
//      (for the K mean) and of V (sum, max, min: V's mean and its per-channel 8-bit range),
//      K and V in separate CTAs, published through a per-head counter. Only when smoothing or
//      8-bit V needs them. They read all rows, or (p.stat_rows < seq_kv) an evenly spaced
//      sample: any mean subtracted from K leaves the scores' softmax unchanged, and a V mean
//      is added back, so a sampled mean is exact; FP8 V's range is the sample's with
//      kVHeadroom to spare, and a V tile that exceeds it flags its head.
//   2. quantization: one CTA per tile of Q, K or V, which issues its tile's loads and then
//      waits for its head's statistics (the wait overlaps the loads). Q and K are smoothed and
//      quantized to INT8/INT4 with the scale groups of the attention kernel's fragments; V is quantized
//      to FP8 E4M3 or INT8 per channel and written transposed with tokens permuted to the
//      order the 8-bit MMA's A fragment takes P in, or converted to FP16. Tails are zero-filled, so the
//      attention kernel reads whole tiles without bounds checks.
// With sampled statistics Q, K and V are each read once. A second kernel (sage_prep_v, one CTA
// per b * kv head) re-quantizes V exactly, from all its rows, for the flagged heads.
#pragma once
#include "sage/device/attn_config.cuh"
#include "sage/device/varlen.cuh"

namespace sage {
namespace prep {
using namespace dev;

enum Stat { kKSum = 0, kVSum = 1, kVMax = 2, kVMin = 3, kNumStats = 4 };

SAGE_DEV const u32x4* row_ptr(const SageTensor& t, int b, int h, int n, int c0) {
  const u16* base = static_cast<const u16*>(t.ptr);
  return reinterpret_cast<const u32x4*>(base + b * t.stride_b + h * t.stride_h + i64(n) * t.stride_n + c0);
}

// Values c0 .. c0+7 of row n of the caller's tensor; +0 (FP16 and BF16 alike) past the
// caller's head dim (p.head_dim, a multiple of 8: a chunk is wholly in or out), so a call of a
// smaller head dim is the variant's on zero-padded rows.
SAGE_DEV u32x4 load_chunk(const SageAttnParams& p, const SageTensor& t, int b, int h, int n, int c0) {
  return c0 < p.head_dim ? *row_ptr(t, b, h, n, c0) : u32x4{0u, 0u, 0u, 0u};
}

// V is rewritten by the preparation (8-bit, smoothed, converted from BF16 to FP16, or FP16 of a
// head dim below D, zero-padded to D: the attention kernels then read V's rows whole).
template <class Cfg>
SAGE_DEV bool v_prepared(const SageAttnParams& p) {
  return Cfg::V8 || Cfg::SMOOTH_V || p.dtype == SAGE_DTYPE_BF16 || p.head_dim < Cfg::D;
}

// The index of K tile `tile` of (b, kv head h) among the workspace's K tiles (its scales: x
// K_GROUPS; FP16 V: x BN rows): [B][Hkv][k_tiles] for a batch, or for a variable-length batch
// (VARLEN: p is a sequence's view, mma_attn::varlen_view_ws) [Hkv][kv_tile_pitch] from the
// sequence's first tile. (VARLEN is a template argument throughout the preparation, so that the
// dense kernels' code, at their register caps, is the same as without variable-length batches.)
template <bool VARLEN>
SAGE_DEV i64 k_tile_index(const SageAttnParams& p, int b, int h, int tile) {
  if constexpr (VARLEN) return i64(h) * p.kv_tile_pitch + p.kv_tile0 + tile;
  else return (i64(b) * p.heads_kv + h) * p.k_tiles + tile;
}

// 8-bit V^T of (b, kv head h): the offset of its first row's first token, and in *npad the
// tokens a row holds (a batch: [B*Hkv*D][k_tiles*BN]; a variable-length batch:
// [Hkv*D][kv_tile_pitch*BN], the sequence from its first tile).
template <int D, int BN, bool VARLEN>
SAGE_DEV i64 v8_offset(const SageAttnParams& p, int b, int h, i64* npad) {
  if constexpr (VARLEN) {
    *npad = i64(p.kv_tile_pitch) * BN;
    return i64(h) * D * *npad + i64(p.kv_tile0) * BN;
  }
  *npad = i64(p.k_tiles) * BN;
  return (i64(b) * p.heads_kv + h) * D * *npad;
}

// ---- statistics -----------------------------------------------------------------------------
// Kinds of statistics CTAs: K (its sum, when smoothing K) and V (sum, max, min: smoothing V or
// 8-bit V), each read by its own CTAs so that more rows are in flight per thread.
template <class Cfg>
__host__ __device__ constexpr int stat_kinds() {
  return int(Cfg::SMOOTH_K) + int(Cfg::SMOOTH_V || Cfg::V8);
}

// FP8 V with sampled statistics: the per-channel scale leaves this factor of the sample's
// range to spare (E4M3 keeps its 3-bit precision over the 15 binades below its maximum, so
// 16x costs nothing measurable); a V tile with a value past it flags its head for the exact
// pass.
constexpr float kVHeadroom = 16.0f;

// The flag of (b, kv head) `bh` (after the B*Hkv statistics counters): this call's generation
// once a V tile of the head went past its sampled range.
SAGE_DEV unsigned long long* v_flag(const SageAttnParams& p, int bh) {
  return p.sync + i64(p.batch) * p.heads_kv + bh;
}

// Sums (and for V max and min) of the statistic rows i0 .. i1-1 of (b, kv head) `bh` (rows
// given by `row(i)`), reduced over the CTA into out[stat * D + c]. Thread t owns channels
// 8*(t % TPR) .. +7 of rows i0 + t / TPR, + RPP, ... `red` holds RPP x (D + 1) floats.
template <class Cfg, bool IS_V, class RowOf>
SAGE_DEV void stats_rows(const SageAttnParams& p, int bh, int i0, int i1, RowOf row, float* red_raw, float* out) {
  constexpr int D = Cfg::D, TPR = D / 8, RPP = kPrepThreads / TPR;
  // Rows per thread in flight at once (128-bit loads): V keeps three more accumulators.
  constexpr int U = IS_V ? 4 : 8;
  float(*red)[D + 1] = reinterpret_cast<float(*)[D + 1]>(red_raw);
  const int b = bh / p.heads_kv, h = bh % p.heads_kv;
  const SageTensor& t = IS_V ? p.v : p.k;
  const int c0 = (threadIdx.x % TPR) * 8, r = threadIdx.x / TPR;
  float sum[8], mx[8], mn[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) { sum[i] = 0.f; mx[i] = neg_inf(); mn[i] = -neg_inf(); }
  // Channels past the caller's head dim: no rows read, and the statistics of zeros (see
  // load_chunk); a guard per load instead spills at the preparation's 64 registers (D=128).
  const bool cols = c0 < p.head_dim;
  for (int n = i0 + r; n < (cols ? i1 : i0); n += U * RPP) {
    u32x4 raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u] = n + u * RPP < i1 ? *row_ptr(t, b, h, row(n + u * RPP), c0) : u32x4{0u, 0u, 0u, 0u};
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float x[8];
      unpack8(raw[u], p.dtype, x);
      if constexpr (IS_V) {
        if (n + u * RPP < i1) {
#pragma unroll
          for (int i = 0; i < 8; ++i) { sum[i] += x[i]; mx[i] = fmaxf(mx[i], x[i]); mn[i] = fminf(mn[i], x[i]); }
        }
      } else {  // rows past the split add +0
#pragma unroll
        for (int i = 0; i < 8; ++i) sum[i] += x[i];
      }
    }
  }
  if (!cols) {
#pragma unroll
    for (int i = 0; i < 8; ++i) { mx[i] = 0.f; mn[i] = 0.f; }
  }
  // Reduce the RPP partial rows of each statistic through shared memory.
  auto reduce = [&](const float (&v)[8], int stat, int op) {
#pragma unroll
    for (int i = 0; i < 8; ++i) red[r][c0 + i] = v[i];
    __syncthreads();
    for (int c = threadIdx.x; c < D; c += kPrepThreads) {
      float a = red[0][c];
      for (int j = 1; j < RPP; ++j) a = op == 0 ? a + red[j][c] : op == 1 ? fmaxf(a, red[j][c]) : fminf(a, red[j][c]);
      out[stat * D + c] = a;
    }
    __syncthreads();
  };
  if constexpr (IS_V) {
    reduce(sum, kVSum, 0);
    reduce(mx, kVMax, 1);
    reduce(mn, kVMin, 2);
  } else {
    reduce(sum, kKSum, 0);
  }
}

// One CTA per (kind, split, batch * kv head): the split's share of the p.stat_rows rows the
// statistics read (all seq_kv rows, or every (seq_kv / stat_rows)-th from the first).
template <class Cfg, bool IS_V, bool VARLEN = false>
SAGE_DEV void stats_job(const SageAttnParams& p, int split, int bh, float* red) {
  const int chunk = cdiv(p.stat_rows, p.stat_splits);
  const int i0 = split * chunk, i1 = min_(i0 + chunk, p.stat_rows);
  float* out = p.stats + (i64(split) * p.batch * p.heads_kv + bh) * kNumStats * Cfg::D;
  // (a variable-length batch's sequence may have no keys)
  const int stride = p.seq_kv / (VARLEN ? max_(p.stat_rows, 1) : p.stat_rows);
  stats_rows<Cfg, IS_V>(p, bh, i0, i1, [stride](int i) { return i * stride; }, red, out);
  // Publish: every thread's partials visible device-wide, then one count for this CTA under
  // this call's generation (a counter left by an earlier call restarts at 1).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) arrive_count(p.sync + bh, p.generation);
}

// The preparation's sync words (the B*Hkv statistics counters, then the B*Hkv V flags) back to
// 0, by the attention kernel's first CTA once every kernel before it has ended (griddep_wait):
// no reader is left. The counters and flags carry the call's generation so that a workspace
// needs no zeroing between calls; a CUDA graph replays a call with its generation, though,
// and the replay's counts would go on past the waits' target, and a flag left set would send
// every later replay through the exact pass.
SAGE_DEV void release_sync(const SageAttnParams& p) {
  if (p.sync == nullptr || (blockIdx.x | blockIdx.y | blockIdx.z) != 0) return;
  const int n = 2 * p.batch * p.heads_kv;
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) p.sync[i] = 0ull;
}

// Waits until the statistics of (batch, kv head) `bh` are published (all kinds and splits).
// Safe from deadlock: all statistics CTAs have lower block indices, so they were dispatched
// before any waiting CTA, and they wait for nothing themselves.
template <class Cfg>
SAGE_DEV void wait_stats(const SageAttnParams& p, int bh) {
  if (threadIdx.x == 0) {
    const unsigned long long target = (p.generation << 24) | (unsigned long long)(stat_kinds<Cfg>() * p.stat_splits);
    const volatile unsigned long long* c = p.sync + bh;
    while (*c != target) asm volatile("nanosleep.u32 64;\n");
    __threadfence();
  }
  __syncthreads();
}

// Combines the splits of one statistic for 8 channels of one (b, kv head).
SAGE_DEV void load_stat8(const SageAttnParams& p, int D, int bh, int stat, int c0, float (&v)[8]) {
  const i64 step = i64(p.batch) * p.heads_kv * kNumStats * D;
  const float* s = p.stats + i64(bh) * kNumStats * D + stat * D + c0;
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = s[i];
  for (int k = 1; k < p.stat_splits; ++k) {
    s += step;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = stat == kVMax ? fmaxf(v[i], s[i]) : stat == kVMin ? fminf(v[i], s[i]) : v[i] + s[i];
  }
}

// ---- quantization ----------------------------------------------------------------------------
// Quantizes one tile of ROWS rows of Q (IS_Q) or K. Scale groups (rows sharing a scale):
//   Q per_thread: (row / WARP_Q) * 8 + row % 8    Q per_warp: row / WARP_Q    per_block: 0
//   K per_thread: (row % 8) / 2                   otherwise: 0
// The tile stays in registers as packed FP16/BF16 (4 registers per 8 values) and is
// converted on each use: the kernel is bound by memory, and fewer registers mean more CTAs
// per SM and more loads in flight.
template <class Cfg, bool IS_Q>
SAGE_DEV int scale_group(int row) {
  if constexpr (IS_Q) {
    if constexpr (Cfg::GRAN == Gran::per_thread) return (row / Cfg::WARP_Q) * 8 + row % 8;
    else if constexpr (Cfg::GRAN == Gran::per_warp) return row / Cfg::WARP_Q;
    else return 0;
  } else {
    if constexpr (Cfg::GRAN == Gran::per_thread) return (row % 8) / 2;
    else return 0;
  }
}

// Without QUANT (Q quantized by the attention kernel itself: fuse_q) a Q tile only gets its
// LSE correction. A Q job covers JT consecutive tiles from `tile` (Cfg::Q_TILES_PER_JOB, or 1
// without QUANT; rows of a tile past the last one are neither written nor given scales).
// WAIT: the statistics of kv head (b, hkv) are awaited after the tile's loads are issued, so
// the wait and the loads overlap.
template <class Cfg, bool IS_Q, bool QUANT = true, int JT = 1, bool VARLEN = false>
SAGE_DEV void quant_qk_tile(const SageAttnParams& p, int b, int h, int tile, bool wait, float* smem_gmax, float* smem_red) {
  constexpr int D = Cfg::D, TPR = D / 8, RPP = kPrepThreads / TPR;
  constexpr int TILE_ROWS = IS_Q ? Cfg::BM : Cfg::BN;
  constexpr int ROWS = TILE_ROWS * JT;
  constexpr int PASSES = ROWS / RPP;
  constexpr int TILE_GROUPS = IS_Q ? Cfg::Q_GROUPS : Cfg::K_GROUPS;
  constexpr int GROUPS = TILE_GROUPS * JT;
  static_assert(ROWS % RPP == 0, "tile rows must be a multiple of the rows per pass");
  static_assert(JT == 1 || (IS_Q && !Cfg::SMOOTH_Q && Cfg::GRAN != Gran::per_block), "one block mean / scale per tile");
  const int heads = IS_Q ? p.heads_q : p.heads_kv;
  const int seq = IS_Q ? p.seq_q : p.seq_kv;
  const int tiles = IS_Q ? p.q_tiles : p.k_tiles;
  const int rows_out = (tiles - tile) * TILE_ROWS;  // rows of this job that belong to a tile
  const SageTensor& t = IS_Q ? p.q : p.k;
  const int c0 = (threadIdx.x % TPR) * 8, r = threadIdx.x / TPR;
  const int n0 = tile * TILE_ROWS;
  const int hkv = IS_Q ? h / (p.heads_q / p.heads_kv) : h;
  const int dtype = p.dtype;

  auto load_row = [&](int ps) {
    const int n = n0 + ps * RPP + r;
    return n < seq ? load_chunk(p, t, b, h, n, c0) : u32x4{0u, 0u, 0u, 0u};  // +0 in both FP16 and BF16
  };
  // The rows stay in registers for the quantization; a job that only computes the LSE
  // correction (no QUANT) reads each row where it uses it, after the wait (a 192-row tile
  // held whole spills at the preparation's 80 registers).
  u32x4 raw[PASSES];
  if constexpr (QUANT) {
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) raw[ps] = load_row(ps);
  }
  if (wait) wait_stats<Cfg>(p, b * p.heads_kv + hkv);
  for (int g = threadIdx.x; g < GROUPS; g += kPrepThreads) smem_gmax[g] = 0.f;

  // What is subtracted from every value of a channel: K's mean (smoothing K), or Q's block
  // mean (smoothing Q). Rows past the sequence stay zero.
  float sub[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) sub[i] = 0.f;
  if constexpr (Cfg::SMOOTH_K) {
    float kmean[8];
    load_stat8(p, D, b * p.heads_kv + hkv, kKSum, c0, kmean);
#pragma unroll
    for (int i = 0; i < 8; ++i) kmean[i] *= 1.0f / float(VARLEN ? max_(p.stat_rows, 1) : p.stat_rows);
    if constexpr (IS_Q) {
      // LSE correction: sm_scale * q . mean(K) per query row.
      if (p.q_kmean) {
#pragma unroll
        for (int ps = 0; ps < PASSES; ++ps) {
          float x[8];
          unpack8(QUANT ? raw[ps] : load_row(ps), dtype, x);
          float dot = 0.f;
#pragma unroll
          for (int i = 0; i < 8; ++i) dot += x[i] * kmean[i];
          dot = group_sum<TPR>(dot);
          const int n = n0 + ps * RPP + r;
          // (a variable-length batch's: [heads_q, total_q], like its LSE)
          if (threadIdx.x % TPR == 0 && n < seq)
            p.q_kmean[VARLEN ? i64(h) * p.lse_stride_h + n : (i64(b) * heads + h) * seq + n] = dot * p.sm_scale;
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) sub[i] = kmean[i];
    }
  }
  if constexpr (!QUANT) return;
  const float qscale = IS_Q ? p.sm_scale * kLog2e : 1.0f;
  const i64 tile_id = IS_Q || !VARLEN ? (i64(b) * heads + h) * tiles + tile : k_tile_index<true>(p, b, h, tile);
  // Q smoothing: subtract the block's channel means; quantize the means separately (the
  // attention kernel adds q_mean . (K - mean K) back to every score of the block).
  if constexpr (IS_Q && Cfg::SMOOTH_Q) {
#pragma unroll
    for (int i = 0; i < 8; ++i) sub[i] = 0.f;
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      float x[8];
      unpack8(raw[ps], dtype, x);
#pragma unroll
      for (int i = 0; i < 8; ++i) sub[i] += x[i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) smem_red[r * (D + 1) + c0 + i] = sub[i];
    __syncthreads();
    const float inv_rows = 1.0f / float(min_(ROWS, seq - n0));
    for (int c = threadIdx.x; c < D; c += kPrepThreads) {
      float a = 0.f;
      for (int j = 0; j < RPP; ++j) a += smem_red[j * (D + 1) + c];
      smem_red[RPP * (D + 1) + c] = a * inv_rows;
    }
    __syncthreads();
    float am = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      sub[i] = smem_red[RPP * (D + 1) + c0 + i];
      am = fmaxf(am, fabsf(sub[i]));
    }
    am = group_max<TPR>(am);
    const float inv = am > 0.f ? __fdividef(Cfg::QMAX, am) : 0.f;
    if (r == 0) {
      if constexpr (Cfg::INT4) {
        u32 w = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) w |= (u32(quant_s4(sub[i] * inv)) & 0xfu) << (4 * i);
        *reinterpret_cast<u32*>(p.q_mean_quant + tile_id * Cfg::QROW + c0 / 2) = w;
      } else {
        u32x2 w;
        w.x = pack_s8x4(quant_s8(sub[0] * inv), quant_s8(sub[1] * inv), quant_s8(sub[2] * inv), quant_s8(sub[3] * inv));
        w.y = pack_s8x4(quant_s8(sub[4] * inv), quant_s8(sub[5] * inv), quant_s8(sub[6] * inv), quant_s8(sub[7] * inv));
        *reinterpret_cast<u32x2*>(p.q_mean_quant + tile_id * Cfg::QROW + c0) = w;
      }
      if (threadIdx.x == 0) p.q_mean_scale[tile_id] = am * (1.0f / Cfg::QMAX) * qscale;
    }
  } else {
    __syncthreads();  // smem_gmax initialized
  }
  // Group maxima of |x - sub| (non-negative floats order like their bit patterns). Where a
  // thread's rows all fall in one scale group (K: rows r, r + RPP, ... agree mod 8; Q per
  // block), one reduction and one shared-memory atomic per thread, after its last row.
  constexpr bool ONE_GROUP = IS_Q ? Cfg::GRAN == Gran::per_block : (Cfg::GRAN != Gran::per_thread || RPP % 8 == 0);
  float am_rows = 0.f;
#pragma unroll
  for (int ps = 0; ps < PASSES; ++ps) {
    const int row = ps * RPP + r;
    float x[8];
    unpack8(raw[ps], dtype, x);
    float am = 0.f;
    if (n0 + row < seq) {
#pragma unroll
      for (int i = 0; i < 8; ++i) am = fmaxf(am, fabsf(x[i] - sub[i]));
    }
    if constexpr (ONE_GROUP) {
      am_rows = fmaxf(am_rows, am);
    } else {
      am = group_max<TPR>(am);
      if (threadIdx.x % TPR == 0 && am > 0.f)
        atomicMax(reinterpret_cast<int*>(smem_gmax) + scale_group<Cfg, IS_Q>(row), __float_as_int(am));
    }
  }
  if constexpr (ONE_GROUP) {
    am_rows = group_max<TPR>(am_rows);
    if (threadIdx.x % TPR == 0 && am_rows > 0.f)
      atomicMax(reinterpret_cast<int*>(smem_gmax) + scale_group<Cfg, IS_Q>(r), __float_as_int(am_rows));
  }
  __syncthreads();
  const int groups_out = JT == 1 ? GROUPS : min_(GROUPS, (tiles - tile) * TILE_GROUPS);
  // Each group's scale out, and its reciprocal in place of its maximum: one MUFU.RCP-based
  // quotient per group (within 2 ulp: |x - sub| * inv stays below QMAX + 0.5, so rounding still
  // gives at most QMAX) instead of an IEEE division per row pass.
  for (int g = threadIdx.x; g < groups_out; g += kPrepThreads) {
    const float m = smem_gmax[g];
    (IS_Q ? p.q_scale : p.k_scale)[tile_id * TILE_GROUPS + g] = m * (1.0f / Cfg::QMAX) * qscale;
    smem_gmax[g] = m > 0.f ? __fdividef(Cfg::QMAX, m) : 0.f;
  }
  __syncthreads();
  sage_i8* out = (IS_Q ? p.q_quant : p.k_quant) + tile_id * TILE_ROWS * Cfg::QROW;
#pragma unroll
  for (int ps = 0; ps < PASSES; ++ps) {
    const int row = ps * RPP + r;
    if (JT > 1 && row >= rows_out) break;  // past the last tile
    // Rows past the sequence (loaded as zeros) are written as zeros: (0 - sub) * 0.
    const float inv = n0 + row < seq ? smem_gmax[scale_group<Cfg, IS_Q>(row)] : 0.f;
    float x[8];
    unpack8(raw[ps], dtype, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] -= sub[i];
    if constexpr (Cfg::INT4) {
      u32 w = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) w |= (u32(quant_s4(x[i] * inv)) & 0xfu) << (4 * i);
      *reinterpret_cast<u32*>(out + row * Cfg::QROW + c0 / 2) = w;
    } else {
      // round(|x - sub| * inv) <= QMAX: |x - sub| <= the group's maximum m (the same FADD),
      // inv ~ QMAX / m; the product is rounded once (an FFMA with the magic number).
      u32x2 w;
      w.x = pack_s8x4_scaled(x[0], x[1], x[2], x[3], inv);
      w.y = pack_s8x4_scaled(x[4], x[5], x[6], x[7], inv);
      *reinterpret_cast<u32x2*>(out + row * Cfg::QROW + c0) = w;
    }
  }
}

// V's mean and per-channel 8-bit scale for 8 channels (scale = max |V - mean| / V_QMAX:
// 448 for FP8, 127 for INT8), from the published statistics, or from `exact` (the CTA's own
// statistics over every row, kNumStats x D floats in shared memory: the exact pass). With
// sampled statistics FP8 V's range is kVHeadroom times the sample's (and never 0, so that any
// value past it, scaled, exceeds V_QMAX: v_sampled_range).
template <class Cfg>
SAGE_DEV bool v_sampled_range(const SageAttnParams& p, const float* exact) {
  return Cfg::V_FP8 && !exact && p.stat_rows < p.seq_kv;
}
template <class Cfg, bool VARLEN = false>
SAGE_DEV void v_channel_stats(const SageAttnParams& p, int bh, int c0, const float* exact, float (&mean)[8],
                              float (&inv_scale)[8], float (&scale)[8]) {
  constexpr int D = Cfg::D;
  auto stat8 = [&](int stat, float (&v)[8]) {
    if (exact) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = exact[stat * D + c0 + i];
    } else {
      load_stat8(p, D, bh, stat, c0, v);
    }
  };
  const int rows = VARLEN ? max_(exact ? p.seq_kv : p.stat_rows, 1) : exact ? p.seq_kv : p.stat_rows;
#pragma unroll
  for (int i = 0; i < 8; ++i) mean[i] = 0.f;
  if constexpr (Cfg::SMOOTH_V) {
    stat8(kVSum, mean);
#pragma unroll
    for (int i = 0; i < 8; ++i) mean[i] *= 1.0f / float(rows);
  }
  if constexpr (Cfg::V8) {
    float mx[8], mn[8];
    stat8(kVMax, mx);
    stat8(kVMin, mn);
    const bool sampled = v_sampled_range<Cfg>(p, exact);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float a = fmaxf(mx[i] - mean[i], mean[i] - mn[i]);
      if (sampled) a = fmaxf(a * kVHeadroom, 1e-30f);
      scale[i] = a > 0.f ? a * (1.0f / Cfg::V_QMAX) : 1.0f;
      inv_scale[i] = a > 0.f ? Cfg::V_QMAX * rcp_approx(a) : 0.f;  // within 2 ulp, as quant_qk_tile's inv
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) { scale[i] = 1.f; inv_scale[i] = 1.f; }
  }
}

// 8-bit V tile (FP8 E4M3 or INT8): V^T [D][BN] per (b, kv head), tokens permuted within each
// group of 16 so that MMA k position 4t+e of a group holds token 2t + (e&1) + 8*(e>>1): the
// order in which a lane's P values (columns 2t, 2t+1 of two adjacent n8 accumulator tiles)
// fill the A fragment of m16n8k32 (e4m3 and u8 alike). Thread (cc, t, g) owns tokens {2t,
// 2t+1, 8+2t, 9+2t} of group g and channels 8cc..8cc+7, i.e. exactly one 32-bit word of each
// of its 8 V^T rows.
// `exact`: see v_channel_stats (null: the published statistics; where those are a sample, a
// value past their range flags the head, p.sync[B*Hkv + bh] = generation, for the exact pass).
template <class Cfg, bool VARLEN = false>
SAGE_DEV void quant_v8_tile(const SageAttnParams& p, int b, int h, int tile, bool wait, const float* exact, u32* smem_t) {
  constexpr int D = Cfg::D, BN = Cfg::BN, CC = D / 8, WPR = BN / 4;  // words per V^T row
  constexpr int SLOTS = (BN / 16) * 4 * CC;
  constexpr int ITERS = (SLOTS + kPrepThreads - 1) / kPrepThreads;
  const int bh = b * p.heads_kv + h;
  const int cc = threadIdx.x % CC;
  const int n0 = tile * BN;
  // The tile's loads first (tails zero), then the statistics they need.
  u32x4 raw[ITERS][4];
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int rest = (threadIdx.x + it * kPrepThreads) / CC, t = rest % 4, g = rest / 4;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int n = n0 + 16 * g + 2 * t + (k & 1) + 8 * (k >> 1);
      if (n < p.seq_kv && (SLOTS % kPrepThreads == 0 || threadIdx.x + it * kPrepThreads < SLOTS))
        raw[it][k] = load_chunk(p, p.v, b, h, n, cc * 8);
      else
        raw[it][k] = u32x4{0u, 0u, 0u, 0u};
    }
  }
  if (wait) wait_stats<Cfg>(p, bh);
  float mean[8], inv[8], scale[8];
  v_channel_stats<Cfg, VARLEN>(p, bh, cc * 8, exact, mean, inv, scale);
  float peak = 0.f;  // the largest scaled |V - mean| this thread quantizes
  if (tile == 0 && threadIdx.x < CC) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      p.v_scale[i64(bh) * D + cc * 8 + i] = scale[i];
      if (p.v_mean) p.v_mean[i64(bh) * D + cc * 8 + i] = mean[i];
    }
  }
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int slot = threadIdx.x + it * kPrepThreads;
    if (SLOTS % kPrepThreads != 0 && slot >= SLOTS) break;
    const int rest = slot / CC, t = rest % 4, g = rest / 4;
    float x[4][8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int n = n0 + 16 * g + 2 * t + (k & 1) + 8 * (k >> 1);
      unpack8(raw[it][k], p.dtype, x[k]);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        // Tokens past the sequence were loaded as zeros: without smoothing they stay 0.
        if constexpr (Cfg::SMOOTH_V) x[k][i] = n < p.seq_kv ? (x[k][i] - mean[i]) * inv[i] : 0.f;
        else x[k][i] *= inv[i];
        peak = fmaxf(peak, fabsf(x[k][i]));
      }
    }
    const int w = 4 * g + t;  // word index in the V^T row
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int row = cc * 8 + i;
      u32 packed = 0;
      if constexpr (Cfg::V_INT8) {
        packed = pack_s8x4_rn(x[0][i], x[1][i], x[2][i], x[3][i]);  // |x| <= 127 by the scale
      } else {
#if defined(SAGE_HAS_FP8)
        packed = pack_e4m3x4(x[0][i], x[1][i], x[2][i], x[3][i]);
#endif
      }
      smem_t[row * WPR + (w ^ (cc % WPR))] = packed;
    }
  }
  // Past the range (beyond the 2-ulp slack of inv): E4M3 would saturate it.
  if (v_sampled_range<Cfg>(p, exact) && peak > Cfg::V_QMAX * 1.0001f)
    *reinterpret_cast<volatile unsigned long long*>(v_flag(p, bh)) = p.generation;
  __syncthreads();
  i64 npad = i64(p.k_tiles) * BN;
  u8* out = static_cast<u8*>(p.v_prep) + i64(bh) * D * npad + n0;
  if constexpr (VARLEN) out = static_cast<u8*>(p.v_prep) + v8_offset<D, BN, true>(p, b, h, &npad) + n0;
  for (int ch = threadIdx.x; ch < D * (BN / 16); ch += kPrepThreads) {
    const int row = ch / (BN / 16), j = ch % (BN / 16);
    const int x = (row / 8) % WPR;
    u32x4 v;
    v.x = smem_t[row * WPR + ((4 * j + 0) ^ x)];
    v.y = smem_t[row * WPR + ((4 * j + 1) ^ x)];
    v.z = smem_t[row * WPR + ((4 * j + 2) ^ x)];
    v.w = smem_t[row * WPR + ((4 * j + 3) ^ x)];
    *reinterpret_cast<u32x4*>(out + row * npad + j * 16) = v;
  }
}

// FP16 V tile [BN][D] (smoothed and/or converted from BF16), zero tail.
template <class Cfg, bool VARLEN = false>
SAGE_DEV void convert_v_fp16_tile(const SageAttnParams& p, int b, int h, int tile, bool wait) {
  constexpr int D = Cfg::D, BN = Cfg::BN, CC = D / 8, RPP = kPrepThreads / CC, PASSES = BN / RPP;
  static_assert(BN % RPP == 0, "V tile rows must be a multiple of the rows per pass");
  const int bh = b * p.heads_kv + h;
  const int cc = threadIdx.x % CC, r = threadIdx.x / CC;
  u32x4 raw[PASSES];
#pragma unroll
  for (int ps = 0; ps < PASSES; ++ps) {
    const int n = tile * BN + ps * RPP + r;
    raw[ps] = n < p.seq_kv ? load_chunk(p, p.v, b, h, n, cc * 8) : u32x4{0u, 0u, 0u, 0u};
  }
  if (wait) wait_stats<Cfg>(p, bh);
  float mean[8], inv[8], scale[8];
  v_channel_stats<Cfg, VARLEN>(p, bh, cc * 8, nullptr, mean, inv, scale);
  if (tile == 0 && threadIdx.x < CC && p.v_mean) {
#pragma unroll
    for (int i = 0; i < 8; ++i) p.v_mean[i64(bh) * D + cc * 8 + i] = mean[i];
  }
  const i64 npad = i64(p.k_tiles) * BN;
  u16* out = static_cast<u16*>(p.v_prep) + (i64(bh) * npad + i64(tile) * BN) * D;
  if constexpr (VARLEN) out = static_cast<u16*>(p.v_prep) + k_tile_index<true>(p, b, h, tile) * BN * D;
#pragma unroll
  for (int ps = 0; ps < PASSES; ++ps) {
    const int row = ps * RPP + r;
    const bool valid = tile * BN + row < p.seq_kv;
    float x[8];
    unpack8(raw[ps], p.dtype, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = valid ? x[i] - mean[i] : 0.f;
    u32x4 v;
    v.x = pack_f16x2(x[0], x[1]);
    v.y = pack_f16x2(x[2], x[3]);
    v.z = pack_f16x2(x[4], x[5]);
    v.w = pack_f16x2(x[6], x[7]);
    *reinterpret_cast<u32x4*>(out + row * D + cc * 8) = v;
  }
}

// The exact pass over FP8 V (kernel sage_prep_v, launched after the preparation when its
// statistics were a sample; one CTA per b * kv head, kPrepThreads threads): for a head whose V
// went past the range its sampled statistics allowed, this CTA's own statistics over every
// row, then every V tile quantized again with them (and the head's scale rewritten). Other
// heads return at once. Its own kernel: the loop over tiles does not fit the preparation's
// register cap at D=64. VARLEN (sage_prep_v_varlen): a variable-length batch, one CTA per
// (sequence, kv head), on the sequence's view (mma_attn::varlen_view_ws).
template <class Cfg, bool VARLEN = false>
SAGE_DEV void v_exact_kernel(const SageAttnParams& g) {
  constexpr int D = Cfg::D, TPR = D / 8, RPP = kPrepThreads / TPR;
  constexpr int VT = D * Cfg::BN / 4, STATS_WORDS = RPP * (D + 1);
  __shared__ __align__(16) u32 smem[kNumStats * D + (VT > STATS_WORDS ? VT : STATS_WORDS)];
  griddep_launch_dependents();
  griddep_wait();  // the preparation's flags and statistics
  const int bh = blockIdx.x;
  if (*reinterpret_cast<const volatile unsigned long long*>(v_flag(g, bh)) != g.generation) return;
  auto run = [&](const SageAttnParams& p) {
    float* exact = reinterpret_cast<float*>(smem);
    stats_rows<Cfg, true>(p, bh, 0, p.seq_kv, [](int i) { return i; }, exact + kNumStats * D, exact);
    for (int tile = 0; tile < p.k_tiles; ++tile) {
      quant_v8_tile<Cfg, VARLEN>(p, bh / p.heads_kv, bh % p.heads_kv, tile, false, exact, smem + kNumStats * D);
      __syncthreads();  // before the next tile overwrites the shared V tile
    }
  };
  if constexpr (VARLEN) {
    SageAttnParams p = g;
    mma_attn::varlen_view_ws<Cfg::BM, Cfg::BN>(g, bh / g.heads_kv, -1, p);
    run(p);
  } else {
    run(g);
  }
}

// The preparation of a variable-length batch (sage_prep_varlen; the kernels that quantize Q
// themselves, fuse_q): the jobs of prep_kernel, each on its sequence's view
// (mma_attn::varlen_view_ws). Grid: the statistics CTAs of the B*Hkv (sequence, kv head) pairs
// (one split: p.stat_splits = 1), then Hkv * kv_tile_pitch K tiles, each followed by its V
// tile, in the workspace's order (a tile between two sequences' returns at once), then, when
// the LSE needs its correction (p.q_kmean), B * Hq * q_tiles Q jobs (q_tiles of the longest
// sequence; those past their sequence's tiles return at once).
template <class Cfg>
SAGE_DEV void prep_kernel_varlen(const SageAttnParams& p) {
  constexpr int D = Cfg::D, TPR = D / 8, RPP = kPrepThreads / TPR;
  constexpr int GMAX = Cfg::Q_GROUPS > Cfg::K_GROUPS ? Cfg::Q_GROUPS : Cfg::K_GROUPS;
  constexpr int VT = Cfg::V8 ? D * Cfg::BN / 4 : 1;
  constexpr int GMAX_WORDS = (GMAX + 3) / 4 * 4;
  constexpr int QUANT_WORDS = GMAX_WORDS + 4 + VT;
  constexpr int STATS_WORDS = RPP * (D + 1);
  constexpr int WORDS = QUANT_WORDS > STATS_WORDS ? QUANT_WORDS : STATS_WORDS;
  static_assert(!Cfg::SMOOTH_Q, "variable-length batches: the kernels that quantize Q themselves");
  __shared__ __align__(16) u32 smem[WORDS];
  griddep_launch_dependents();
  float* smem_gmax = reinterpret_cast<float*>(smem);
  float* smem_red = reinterpret_cast<float*>(smem + GMAX_WORDS);
  u32* smem_t = smem + GMAX_WORDS + 4;
  (void)smem_t;
  constexpr int KINDS = stat_kinds<Cfg>();
  const int n_stats = KINDS * p.batch * p.heads_kv;
  SageAttnParams v = p;
  int job = blockIdx.x;
  if (job < n_stats) {
    const int kind = KINDS == 2 ? job % 2 : int(!Cfg::SMOOTH_K), bh = job / KINDS;
    mma_attn::varlen_view_ws<Cfg::BM, Cfg::BN>(p, bh / p.heads_kv, -1, v);
    if (kind == 0) stats_job<Cfg, false, true>(v, 0, bh, reinterpret_cast<float*>(smem));
    else stats_job<Cfg, true, true>(v, 0, bh, reinterpret_cast<float*>(smem));
    return;
  }
  job -= n_stats;
  const int kv_kinds = v_prepared<Cfg>(p) ? 2 : 1;  // launch.cpp: has_v_prep
  const int kv_jobs = p.heads_kv * p.kv_tile_pitch * kv_kinds;
  if (job >= kv_jobs) {  // Q: the LSE correction only
    job -= kv_jobs;
    const int tile = job % p.q_tiles, bh = job / p.q_tiles;
    const int b = bh / p.heads_q, h = bh % p.heads_q;
    if (!mma_attn::varlen_view_ws<Cfg::BM, Cfg::BN>(p, b, tile, v)) return;
    quant_qk_tile<Cfg, true, false, 1, true>(v, b, h, tile, Cfg::SMOOTH_K && p.q_kmean, smem_gmax, smem_red);
    return;
  }
  const bool is_v = job % kv_kinds == 1;
  const int kv = job / kv_kinds;
  const int h = kv / p.kv_tile_pitch, at = kv % p.kv_tile_pitch;
  const int b = mma_attn::varlen_kv_seq<Cfg::BN>(p, at);
  mma_attn::varlen_view_ws<Cfg::BM, Cfg::BN>(p, b, -1, v);
  const int tile = at - v.kv_tile0;
  if (tile < 0 || tile >= v.k_tiles) return;  // between two sequences' tiles
  if (!is_v) {
    quant_qk_tile<Cfg, false, true, 1, true>(v, b, h, tile, Cfg::SMOOTH_K, smem_gmax, smem_red);
    return;
  }
  const bool wait = Cfg::V8 || Cfg::SMOOTH_V;
  if constexpr (Cfg::V8) {
    quant_v8_tile<Cfg, true>(v, b, h, tile, wait, nullptr, smem_t);
  } else {
    convert_v_fp16_tile<Cfg, true>(v, b, h, tile, wait);
  }
}

// The preparation, one launch: grid (statistics CTAs [stat_kinds * stat_splits * B*Hkv, when
// needed], then B*Hkv*k_tiles K tiles, each followed by its V tile when V is prepared, then
// the Q jobs of Q_TILES_PER_JOB tiles), kPrepThreads threads. Q_IN_ATTN (fuse_q: the
// attention kernel quantizes Q): Q tiles only when the LSE correction needs them (p.q_kmean),
// and only for that.
template <class Cfg, bool Q_IN_ATTN = false>
SAGE_DEV void prep_kernel(const SageAttnParams& p) {
  constexpr int D = Cfg::D, TPR = D / 8, RPP = kPrepThreads / TPR;
  constexpr int QG = Cfg::Q_GROUPS * Cfg::Q_TILES_PER_JOB;
  constexpr int GMAX = QG > Cfg::K_GROUPS ? QG : Cfg::K_GROUPS;
  constexpr int RED = Cfg::SMOOTH_Q ? (RPP + 1) * (D + 1) : 1;
  constexpr int VT = Cfg::V8 ? D * Cfg::BN / 4 : 1;
  constexpr int GMAX_WORDS = (GMAX + 3) / 4 * 4, RED_WORDS = (RED + 3) / 4 * 4;
  constexpr int QUANT_WORDS = GMAX_WORDS + RED_WORDS + VT;
  constexpr int STATS_WORDS = RPP * (D + 1);
  constexpr int WORDS = QUANT_WORDS > STATS_WORDS ? QUANT_WORDS : STATS_WORDS;
  __shared__ __align__(16) u32 smem[WORDS];
  griddep_launch_dependents();  // the next kernel (sage_prep_v, sage_attn) still waits for this one to end
  float* smem_gmax = reinterpret_cast<float*>(smem);
  float* smem_red = reinterpret_cast<float*>(smem + GMAX_WORDS);
  u32* smem_t = smem + GMAX_WORDS + RED_WORDS;
  (void)smem_t;
  // Statistics CTAs: (kind, split) fastest, so a head's statistics are dispatched together.
  constexpr int KINDS = stat_kinds<Cfg>();
  const int n_stats = KINDS * p.stat_splits * p.batch * p.heads_kv;
  int job = blockIdx.x;
  if (job < n_stats) {
    const int kind = KINDS == 2 ? job % 2 : int(!Cfg::SMOOTH_K), rest = job / KINDS;
    if (kind == 0) stats_job<Cfg, false>(p, rest % p.stat_splits, rest / p.stat_splits, reinterpret_cast<float*>(smem));
    else stats_job<Cfg, true>(p, rest % p.stat_splits, rest / p.stat_splits, reinterpret_cast<float*>(smem));
    return;
  }
  job -= n_stats;
  constexpr int JT = Q_IN_ATTN ? 1 : Cfg::Q_TILES_PER_JOB;  // launch.cpp: q_tiles_per_job
  const int q_jobs_per_head = cdiv(p.q_tiles, JT);
  // Then the K and V tiles, the K and V tile of one (head, tile) adjacent when V is prepared
  // (they wait for the same statistics; with statistics over every row they re-read what those
  // just read, perhaps still in L2), then the Q jobs, which wait for nothing. Measured on the
  // H100 (INT8 P.V tiles, statistics over every row) against Q first,
  // then all K, then all V: D=64 N=1K 2.18-2.21 -> 2.24-2.25 TB/s, D=128 2.44 -> 2.56-2.57,
  // N=32K 1-4% faster.
  const int kv_kinds = v_prepared<Cfg>(p) ? 2 : 1;  // launch.cpp: has_v_prep
  const int kv_jobs = p.batch * p.heads_kv * p.k_tiles * kv_kinds;
  if (job >= kv_jobs) {
    job -= kv_jobs;
    const int tile = (job % q_jobs_per_head) * JT, bh = job / q_jobs_per_head;
    const int b = bh / p.heads_q, h = bh % p.heads_q;
    // Q reads mean(K) only for the LSE correction.
    quant_qk_tile<Cfg, true, !Q_IN_ATTN, JT>(p, b, h, tile, Cfg::SMOOTH_K && p.q_kmean, smem_gmax, smem_red);
    return;
  }
  const bool is_v = job % kv_kinds == 1;
  const int kv = job / kv_kinds;
  // Unsigned division here (the Q jobs' decode above keeps int division: unsigned there spills
  // the three-warpgroup kernels' 192-row Q job at the 80-register cap).
  int bh, tile, b, h;
  udivmod(kv, p.k_tiles, bh, tile);
  udivmod(bh, p.heads_kv, b, h);
  if (!is_v) {
    quant_qk_tile<Cfg, false>(p, b, h, tile, Cfg::SMOOTH_K, smem_gmax, smem_red);
    return;
  }
  const bool wait = Cfg::V8 || Cfg::SMOOTH_V;
  if constexpr (Cfg::V8) {
    quant_v8_tile<Cfg>(p, b, h, tile, wait, nullptr, smem_t);
  } else {
    convert_v_fp16_tile<Cfg>(p, b, h, tile, wait);
  }
}

}  // namespace prep
}  // namespace sage
