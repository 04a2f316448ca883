// FP8 (e4m3) pages on the native wgmma kernels of the plain schedule (sm_90a): the entries
// sage_attn_paged_fp8 and sage_attn_varlen_paged_fp8 of the modules whose Fp8PagesLayout fits
// (launch.cpp: has_paged_fp8_entry). wgmma reads its B operands from shared memory as they lie,
// and FP8 wgmma takes no MN-major (transposed) B, so V in the cache's layout cannot feed an FP8
// P V, nor an FP8 K a 16-bit Q K^T. So each key tile is converted, exactly, into the FP16
// tile that the dense kernel's wgmma reads (64-column blocks of 128-byte rows, 128B swizzle;
// FP16 for BF16 queries too, whose rows are rewritten as FP16 once: q_bf16_to_f16):
//   - TMA loads a tile's FP8 rows from the pages into a ring of FP8 slots, K's and V's apart
//     (two, or one where two do not fit: PagedBoxes of D bytes by R rows, no swizzle, so a slot
//     holds the tile's rows in order);
//   - the CTA's threads convert tile t + 1 while tile t's GEMMs run on the tensor cores: its K
//     after tile t's Q K^T is issued, its V after tile t's P V is, into the other of two FP16
//     slots (each 16 FP8 bytes of a row read at once, conflict-free; their 32 FP16 bytes stored
//     as two swizzled chunks, a quarter-warp's chunks chosen so that its stores meet 8 bank
//     groups: convert_tile8);
//   - one CTA barrier a tile orders the slots' uses (attn_kernel_fp8_t).
// Where one CTA an SM leaves the registers (two warpgroups, head dim 64 or 128 at occupancy 1),
// two converting warpgroups of their own load and convert instead, and the consumers only wait
// for the FP16 slots (mbarriers: attn_kernel_fp8_ws_t).
// Rows past the sequence's keys are stored as zeros (its last page's slots past them may hold
// anything: P = 0 times a NaN of V is NaN). K's scale folds into the softmax scale, V's into
// O's normalization, so no element is rescaled. The softmax is the exact (lazy) one.
#pragma once
#include "sage/device/attn_native.cuh"

namespace sage {

// An FP8 entry's shared memory: Q, two FP16 slots of K and V, SLOTS8 FP8 slots of K and V; its
// dynamic size and whether the module has the entries at all (FITS: within the SM's 227 KiB);
// launch.cpp mirrors both (paged_fp8_smem_bytes, has_paged_fp8_entry).
template <class Cfg>
struct Fp8PagesLayout {
  static constexpr int D = Cfg::D, BN = Cfg::BN;
  static constexpr int TILE16 = BN * D * 2;  // one FP16 K or V tile
  static constexpr int TILE8 = BN * D;       // one FP8 K or V tile
  static constexpr int OFF16 = Cfg::SMEM_Q;
  static constexpr int OFF8 = OFF16 + 2 * 2 * TILE16;
  // two FP8 slots where they fit, else one (head dim 256 of two warpgroups)
  static constexpr int SLOTS8 = OFF8 + 2 * 2 * TILE8 + 1024 <= 227 * 1024 ? 2 : 1;
  static constexpr int MAIN = OFF8 + SLOTS8 * 2 * TILE8;
  // +1024: the alignment of the tiles to the swizzle atom (the barriers live in what it leaves)
  static constexpr int SMEM_BYTES = (MAIN > Cfg::SMEM_EPI ? MAIN : Cfg::SMEM_EPI) + 1024;
  static constexpr bool FITS = SMEM_BYTES <= 227 * 1024;
  // CTAs an SM that the shared memory allows (each CTA also takes 1 KiB the system reserves),
  // at most the module's occupancy target: the entry's __launch_bounds__.
  static constexpr int CTAS_SMEM = (228 * 1024) / (SMEM_BYTES + 1024);
  static constexpr int MIN_CTAS = CTAS_SMEM < Cfg::MIN_CTAS ? (CTAS_SMEM > 0 ? CTAS_SMEM : 1) : Cfg::MIN_CTAS;
  // WS: two converting warpgroups beside two consumer warpgroups (attn_kernel_fp8_ws_t), where
  // one CTA an SM leaves the registers for them: setmaxnreg lowers the converters to
  // CONVERTER_REGS a thread and raises the consumers to CONSUMER_REGS. Else the consumers
  // convert (attn_kernel_fp8_t): one warpgroup; two CTAs an SM (head dim 64's occupancy 2); head
  // dim 256, whose O takes 128 registers a thread (with one converting warpgroup and 224
  // registers its 128x64 kernel ran 5.04 ms against 4.55, H200, 4 x 2048 queries over 8K keys).
  static constexpr bool WS = Cfg::WGS == 2 && MIN_CTAS == 1 && D <= 128;
  static constexpr int CONVERTERS = WS ? 256 : 0;  // the converting warpgroups' threads
  static constexpr int THREADS = Cfg::CONSUMERS + CONVERTERS;
  static constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8;
  static constexpr int CONVERTER_REGS = 56, CONSUMER_REGS = 200;
  static_assert(!WS || (CONSUMER_REGS - LAUNCH_REGS) * Cfg::CONSUMERS <= (LAUNCH_REGS - CONVERTER_REGS) * CONVERTERS,
                "the consumers take more registers than the converter gives up");
};

namespace native_attn {

SAGE_DEV void lds_u4(u32 addr, u32 (&v)[4]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(addr) : "memory");
}
SAGE_DEV void sts_u4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// One FP8 tile (BN rows of D bytes at src) into the FP16/BF16 tile at dst (64-column blocks of
// BN 128-byte rows, 128B swizzle), by the CTA's THREADS threads; rows at or past `rows` as
// zeros. Thread i takes the 16-byte chunk indices i, i + THREADS, ...; index c is chunk k of row r
// (sage/fp8_chunks.h: a quarter-warp's reads and stores on 8 bank groups), row r's columns
// 16 k .. 16 k + 15, which become chunks 2 (k % 4) and 2 (k % 4) + 1 of row r of block k / 4,
// stored in that order. (Until 2026-11-29 (az) a quarter-warp took one row's 8 chunks at D >= 128,
// blocks 0 and 1 on the same bank groups, and stored them in per-thread orders, which ptxas made
// four half-predicated stores of twice the wavefronts.)
// THREADS threads take part (tid: the thread's index among them); UNROLL: chunks a thread has
// in flight (0: all of them; four at head dim 256, where one was kept until 2026-11-29 (az):
// 4.45 -> 3.81 ms at 4 x 2048 queries over 8K keys, H200, with no spills).
template <class Cfg, bool BF16, int THREADS = Cfg::THREADS, int UNROLL = Cfg::D == 256 ? 4 : 0>
SAGE_DEV void convert_tile8(u32 src, u32 dst, int rows, int tid = int(threadIdx.x)) {
  constexpr int D = Cfg::D, BN = Cfg::BN, KC = D / 16;
  constexpr int CHUNKS = BN * KC;
  static_assert(CHUNKS % THREADS == 0, "whole chunks a thread");
  static_assert(KC < 8 || (KC % 8 == 0 && BN % 2 == 0), "row pairs of whole 8-chunk groups");
#pragma unroll(UNROLL > 0 ? UNROLL : CHUNKS / THREADS)
  for (int j = 0; j < CHUNKS / THREADS; ++j) {
    const int c = tid + j * THREADS;
    int r, k;
    fp8_chunks::place<KC>(c, r, k);
    u32 x[4];
    lds_u4(src + u32(r * KC + k) * 16u, x);
    u32 h[8];
    if (r < rows) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dev::e4m3x4_to_x2(x[i], BF16, h[2 * i], h[2 * i + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) h[i] = 0u;
    }
    const u32 row = dst + u32((k / 4) * BN * 128 + r * 128);
    const u32 c0 = u32(2 * (k % 4)), sw = u32(r & 7);
    const u32 a0 = row + (((c0) ^ sw) << 4), a1 = row + (((c0 + 1u) ^ sw) << 4);
    sts_u4(a0, h[0], h[1], h[2], h[3]);
    sts_u4(a1, h[4], h[5], h[6], h[7]);
  }
}

// BF16 queries over FP8 pages run FP16 wgmma: e4m3 keys and values are FP16 values exactly (one
// cvt a pair, where BF16 takes byte permutes, masks and an FMA), and P in FP16 keeps more bits.
// This warp's 16 query rows from r0 (`cols` 64-column blocks of the Q tile at sq, BM-row blocks
// of 128-byte rows; rows whole, so the swizzle does not matter) are rewritten in place as FP16
// times 2^(14 - e), e the exponent of their largest magnitude: exact but for elements under
// 2^-28 of it (at most 2^100: rows of zeros or BF16 subnormals). Returns 2^(e - 14), the factor
// of the warp's scores. The caller fences for the async proxy and syncs the warpgroup.
template <class Cfg>
SAGE_DEV float q_bf16_to_f16(u32 sq, int r0, int cols) {
  constexpr int BM = Cfg::BM, PER = Cfg::CHUNKS * 4;  // 16-byte chunks a lane: 16 rows x 8 a block
  const int lane = int(threadIdx.x % 32);
  auto at = [&](int k) {
    const int i = lane + 32 * k;
    return sq + u32((i / 128) * BM * 128 + (r0 + (i % 128) / 8) * 128 + (i % 8) * 16);
  };
  // (two passes over the rows, each loop its own: one loop over a lambda for both changed the
  // machine code at head dim 256 from what the GPU tests ran)
  float mx = 0.f;
#pragma unroll 4
  for (int k = 0; k < PER; ++k) {
    if ((lane + 32 * k) / 128 >= cols) break;
    u32 x[4];
    lds_u4(at(k), x);
#pragma unroll
    for (int i = 0; i < 4; ++i) mx = bf16x2_absmax(x[i], mx);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const int sg = f16_row_exponent(mx);
  const float f = pow2f(sg);
#pragma unroll 4
  for (int k = 0; k < PER; ++k) {
    if ((lane + 32 * k) / 128 >= cols) break;
    u32 x[4];
    lds_u4(at(k), x);
    sts_u4(at(k), bf16x2_to_f16x2(x[0], f), bf16x2_to_f16x2(x[1], f), bf16x2_to_f16x2(x[2], f), bf16x2_to_f16x2(x[3], f));
  }
  return pow2f(-sg);
}

// grid and threads as attn_kernel_t's PAGED entry, Fp8PagesLayout<Cfg>::SMEM_BYTES dynamic
// shared memory. p: the sequence's mma_attn::paged_view (VARLEN: varlen_paged_view); g: the
// kernel's parameters, whose maps tma_k and tma_v are 4-D (D bytes, page_size, Hkv, num_pages)
// over the FP8 caches, boxes of D bytes by min(page_size, BN) rows, no swizzle.
// One CTA barrier a tile, after its P V: it publishes tile t + 1's FP16 slots (each writer's
// fence.proxy.async before it: wgmma reads through the async proxy), frees their FP16 slot's
// last readers (tile t - 1's GEMMs completed before it) and tile t + 1's FP8 slots, which the
// loading warps then refill with tile t + 1 + SLOTS8. (mbarriers of one arrival a warp in its
// place, the warpgroups loosely coupled, ran 6-8% slower: H200, 4 x 2048 queries over 8K keys.)
template <class Cfg, bool BF16, bool VARLEN>
SAGE_DEV void attn_kernel_fp8_t(const SageAttnParams& p, const SageAttnParams& g) {
  using L = Fp8PagesLayout<Cfg>;
  static_assert(L::FITS, "the FP8 entry's tiles fit shared memory");
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, CH = Cfg::CHUNKS, S8 = L::SLOTS8;
  constexpr int NWARPS = Cfg::CONSUMERS / 32;
  static_assert(!Cfg::PERSISTENT && 32 * NWARPS >= BN, "the plain kernel; a box a lane at most (pages of one slot)");
  extern __shared__ __align__(1024) u8 smem_raw[];
  // barriers: [0] Q full; FP8 K full [S8], FP8 V full [S8] (TMA)
  constexpr u32 BAR_BYTES = 8u * (1 + 2 * S8);
  const u32 base = smem_addr(smem_raw);
  const u32 pad = (1024u - (base & 1023u)) & 1023u;
  u8* smem = smem_raw + pad;
  const u32 sQ = smem_addr(smem);
  const u32 bar0 = pad >= BAR_BYTES ? base : base + pad + u32(L::SMEM_BYTES - 1024);
  auto k8_full = [&](int s) { return bar0 + 8u * u32(1 + s); };
  auto v8_full = [&](int s) { return bar0 + 8u * u32(1 + S8 + s); };
  auto k16 = [&](int s) { return sQ + u32(L::OFF16 + s * 2 * L::TILE16); };
  auto v16 = [&](int s) { return k16(s) + u32(L::TILE16); };
  auto k8 = [&](int s) { return sQ + u32(L::OFF8 + s * 2 * L::TILE8); };
  auto v8 = [&](int s) { return k8(s) + u32(L::TILE8); };

  const wgmma_attn::CtaTile<Cfg, false> c(p, threadIdx.x);
  const int warp = c.warp, wg = c.wg, h = c.h, hkv = c.hkv, b = c.b, m0 = c.m0, row0 = c.row0;
  const int n_tiles = c.n_tiles, mask_from = c.mask_from;
  const int q_row0 = VARLEN ? p.q_row0 : 0;
  // D=256: the 64-column blocks computed (the call's head dim; the FP8 rows are loaded whole,
  // TMA's zeros past the caller's columns, and converted whole).
  const int boxes = D == 256 ? min_(CH, (p.head_dim + 63) / 64) : CH;
  // The loading warps: box warp + NWARPS x lane of a tile (PagedBoxes), its entry a tile ahead.
  const PagedBoxes<BN> pg(p, b);
  const bool loader = warp < pg.boxes;
  const int pbox = warp + NWARPS * int(threadIdx.x % 32);
  int ahead = 0;
  auto load8 = [&](int tile) {
    const int s = tile % S8;
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(k8_full(s), u32(L::TILE8));
      mbar_arrive_expect_tx(v8_full(s), u32(L::TILE8));
    }
    if (pbox < pg.boxes) {
      const int pe = pg.page(ahead), row = pg.slot(tile, pbox);
      const u32 off = u32((pbox << pg.rshift) * D);
      tma_load_4d(k8(s) + off, &g.tma_k, 0, row, hkv, pe, k8_full(s));
      tma_load_4d(v8(s) + off, &g.tma_v, 0, row, hkv, pe, v8_full(s));
    }
    ahead = pg.entry(tile + 1, pbox);
  };
  wgmma_attn::tma_barriers_init(g, bar0, 1 + 2 * S8);
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar0, D == 256 ? boxes * BM * 128 : Cfg::SMEM_Q);
#pragma unroll
    for (int cc = 0; cc < CH; ++cc)
      if (D < 256 || cc < boxes) tma_load_4d(sQ + cc * BM * 128, &g.tma_q, cc * 64, m0 + q_row0, h, b, bar0);
  }
  if (loader) {
    ahead = pg.entry(0, pbox);
#pragma unroll
    for (int s = 0; s < S8; ++s)
      if (s < n_tiles) load8(s);
  }

  // (BF16: times the warp's Q factor, q_bf16_to_f16)
  float scale = p.sm_scale * kLog2e * mma_attn::page_scale(p.kv_k_scale, p.kv_scale_stride, hkv);
  float m[1][2], l[1][2], o[1][D / 8][4];
  wgmma_attn::init_state<D>(m, l, o);
  float(&of)[D / 2] = reinterpret_cast<float(&)[D / 2]>(o);
  const u32 sQw = sQ + wg * 64 * 128;

  // Tile 0 into FP16 slot 0; its FP8 slots then take tile S8.
  if (n_tiles > 0) {
    mbar_wait(k8_full(0), 0);
    convert_tile8<Cfg, false>(k8(0), k16(0), p.seq_kv);
    mbar_wait(v8_full(0), 0);
    convert_tile8<Cfg, false>(v8(0), v16(0), p.seq_kv);
    if constexpr (BF16) {  // FP16 wgmma: the warp's Q rows into FP16, their factor into the scores'
      mbar_wait(bar0, 0);
      scale *= q_bf16_to_f16<Cfg>(sQ, wg * 64 + 16 * (warp % 4), boxes);
    }
    fence_proxy_async();
    __syncthreads();
    if (loader && S8 < n_tiles) load8(S8);
  }
  constexpr int QR = Cfg::Q_REG_STEPS;
  u32 qa[QR > 0 ? QR : 1][4];
  mbar_wait(bar0, 0);
  if constexpr (QR > 0) load_q_regs<Cfg>(qa, smem, wg * 64 + 16 * (warp % 4));

  for (int t = 0; t < n_tiles; ++t) {
    const int cur = t & 1, nxt = cur ^ 1;
    const bool next = t + 1 < n_tiles;
    const int s8 = (t + 1) % S8;
    const u32 ph8 = u32((t + 1) / S8) & 1u;
    const int rem = p.seq_kv - (t + 1) * BN;  // tile t + 1's keys
    float s[BN / 2];
    issue_qk_boxes<Cfg, false>(s, qa, boxes, sQw, k16(cur));
    // Tile t + 1's K under this Q K^T (its FP16 slot's last reader, tile t - 1's Q K^T, ended
    // before the last barrier).
    if (next) {
      mbar_wait(k8_full(s8), ph8);
      convert_tile8<Cfg, false>(k8(s8), k16(nxt), rem);
    }
    wgmma_wait<0>();
    fence_regs(s);
    float alpha[2] = {1.f, 1.f};
    const bool moved = t >= mask_from ? softmax_tile<Cfg, 1>(p, m[0], l[0], s, scale, t * BN, row0, alpha)
                                      : softmax_tile<Cfg, 0>(p, m[0], l[0], s, scale, t * BN, row0, alpha);
    u32 pa[BN / 16][4];
    pack_p<Cfg, false>(s, pa);
    if (moved) rescale_o<D>(o, alpha);
    issue_pv_boxes<Cfg, false>(of, pa, boxes, v16(cur));
    // ... and its V under this P V.
    if (next) {
      mbar_wait(v8_full(s8), ph8);
      convert_tile8<Cfg, false>(v8(s8), v16(nxt), rem);
    }
    wgmma_wait<0>();
    fence_regs(of);
    if (next) {
      fence_proxy_async();
      __syncthreads();
      if (loader && t + 1 + S8 < n_tiles) load8(t + 1 + S8);
    }
  }
  // The epilogue stages O over the tiles: every warp past its last P V.
  __syncthreads();
  const float vsc = mma_attn::page_scale(p.kv_v_scale, p.kv_scale_stride, hkv);
  epilogue::store<Cfg, 1>(p, m, l, o, b, h, c.kv_bh, warp, row0, smem, nullptr, true, vsc);
}

// The warp-specialized form (Fp8PagesLayout::WS): grid as attn_kernel_fp8_t's, L::THREADS
// threads: two consumer warpgroups, then two converting warpgroups (the converters). The
// converters load the FP8 tiles (PagedBoxes over their 8 warps) and convert each, K then V, into
// the FP16 slot of its tile's parity, up to two tiles ahead of the consumers; the consumers only
// wait for a slot and run the dense plain kernel's loop on it, so the conversion stays off their
// path and the two consumer warpgroups drift apart as in the dense kernel (one's softmax under
// the other's GEMMs). Two converting warpgroups, not one: a converter thread's chunks are
// chains of a shared load, eight cvt and two shared stores, and one warp a scheduler left them
// the critical path (D=128 128x128, H200, 4 x 2048 queries over 8K keys: 2.55 ms with one, as
// the consumers converting; 2.22 with two; 1.55 with the conversion left out). Since
// 2026-11-29 (az) convert_tile8's stores meet 8 bank groups (1.96 ms) and each converter thread
// has its tile's four chunks in flight, at 56 registers (1.76 ms; at 48 it spilled). mbarriers:
//   - FP8 K/V full [S8] (TMA bytes);
//   - FP16 K/V full [2]: one arrival a converter warp, each lane's fence.proxy.async and the
//     warp's __syncwarp before it (wgmma reads through the async proxy);
//   - FP16 K/V empty [2]: one arrival a consumer warp once its GEMM of the slot has completed.
// The converters' own named barrier frees a tile's FP8 slots once all their threads have read
// them; their loading threads then refill them with the tile S8 ahead.
template <class Cfg, bool BF16, bool VARLEN>
SAGE_DEV void attn_kernel_fp8_ws_t(const SageAttnParams& p, const SageAttnParams& g) {
  using L = Fp8PagesLayout<Cfg>;
  static_assert(L::FITS && L::WS && Cfg::D <= 128 && Cfg::Q_REG_STEPS == 0, "the warp-specialized FP8 entry");
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, CH = Cfg::CHUNKS, S8 = L::SLOTS8;
  constexpr int NWARPS = Cfg::CONSUMERS / 32;
  constexpr int CONV_BAR = 13, EPI_BAR = 12, Q_BAR = 10;  // named barriers: the converter's; the consumers' before O; a consumer warpgroup's (BF16 Q, 10 + wg)
  constexpr int NC = L::CONVERTERS, NCW = NC / 32;
  static_assert(!Cfg::PERSISTENT && NC >= BN, "the plain kernel; a box a converter lane at most (pages of one slot)");
  extern __shared__ __align__(1024) u8 smem_raw[];
  // barriers: [0] Q full; FP8 K full [S8], FP8 V full [S8]; FP16 K full [2], V full [2],
  // K empty [2], V empty [2]
  constexpr int NBAR = 1 + 2 * S8 + 8;
  constexpr u32 BAR_BYTES = 8u * NBAR;
  const u32 base = smem_addr(smem_raw);
  const u32 pad = (1024u - (base & 1023u)) & 1023u;
  u8* smem = smem_raw + pad;
  const u32 sQ = smem_addr(smem);
  const u32 bar0 = pad >= BAR_BYTES ? base : base + pad + u32(L::SMEM_BYTES - 1024);
  auto k8_full = [&](int s) { return bar0 + 8u * u32(1 + s); };
  auto v8_full = [&](int s) { return bar0 + 8u * u32(1 + S8 + s); };
  auto k16_full = [&](int s) { return bar0 + 8u * u32(1 + 2 * S8 + s); };
  auto v16_full = [&](int s) { return bar0 + 8u * u32(3 + 2 * S8 + s); };
  auto k16_empty = [&](int s) { return bar0 + 8u * u32(5 + 2 * S8 + s); };
  auto v16_empty = [&](int s) { return bar0 + 8u * u32(7 + 2 * S8 + s); };
  auto k16 = [&](int s) { return sQ + u32(L::OFF16 + s * 2 * L::TILE16); };
  auto v16 = [&](int s) { return k16(s) + u32(L::TILE16); };
  auto k8 = [&](int s) { return sQ + u32(L::OFF8 + s * 2 * L::TILE8); };
  auto v8 = [&](int s) { return k8(s) + u32(L::TILE8); };

  const wgmma_attn::CtaTile<Cfg, false> c(p, threadIdx.x);
  const int warp = c.warp, h = c.h, hkv = c.hkv, b = c.b, m0 = c.m0;
  const int n_tiles = c.n_tiles;
  const int q_row0 = VARLEN ? p.q_row0 : 0;
  // tma_barriers_init's count-1 barriers, then the FP16 slots' (converter warps, consumer warps)
  if (threadIdx.x == 0) {
    tma_prefetch_map(&g.tma_q);
    tma_prefetch_map(&g.tma_k);
    tma_prefetch_map(&g.tma_v);
    for (int i = 0; i < NBAR; ++i) mbar_init(bar0 + 8u * i, i < 1 + 2 * S8 ? 1 : i < 5 + 2 * S8 ? NCW : NWARPS);
    mbar_init_fence();
  }
  __syncthreads();

  if (warp >= NWARPS) {
    // The converters.
    setmaxnreg_dec<L::CONVERTER_REGS>();
    const int tid = int(threadIdx.x) - Cfg::CONSUMERS, cw = tid / 32;
    const PagedBoxes<BN> pg(p, b);
    const int pbox = cw + NCW * (tid % 32);
    int ahead = pbox < pg.boxes ? pg.entry(0, pbox) : 0;
    // (attn_kernel_fp8_t's load8 over the converters' warps; one helper for both changed the
    // machine code of every FP8 entry, so each kernel keeps the loop it was measured with)
    auto load8 = [&](int tile) {
      const int s = tile % S8;
      if (tid == 0) {
        mbar_arrive_expect_tx(k8_full(s), u32(L::TILE8));
        mbar_arrive_expect_tx(v8_full(s), u32(L::TILE8));
      }
      if (pbox < pg.boxes) {
        const int pe = pg.page(ahead), row = pg.slot(tile, pbox);
        const u32 off = u32((pbox << pg.rshift) * D);
        tma_load_4d(k8(s) + off, &g.tma_k, 0, row, hkv, pe, k8_full(s));
        tma_load_4d(v8(s) + off, &g.tma_v, 0, row, hkv, pe, v8_full(s));
        ahead = pg.entry(tile + 1, pbox);
      }
    };
#pragma unroll 1
    for (int s = 0; s < S8; ++s)
      if (s < n_tiles) load8(s);
#pragma unroll 1
    for (int t = 0; t < n_tiles; ++t) {
      const int slot = t & 1, s8 = t % S8;
      const u32 ph8 = u32(t / S8) & 1u, ph_free = u32((t >> 1) + 1) & 1u;
      const int rem = p.seq_kv - t * BN;  // tile t's keys
      mbar_wait(k8_full(s8), ph8);
      if (t >= 2) mbar_wait(k16_empty(slot), ph_free);
      convert_tile8<Cfg, false, NC, 4>(k8(s8), k16(slot), rem, tid);
      fence_proxy_async();
      __syncwarp();
      if (tid % 32 == 0) mbar_arrive(k16_full(slot));
      mbar_wait(v8_full(s8), ph8);
      if (t >= 2) mbar_wait(v16_empty(slot), ph_free);
      convert_tile8<Cfg, false, NC, 4>(v8(s8), v16(slot), rem, tid);
      fence_proxy_async();
      __syncwarp();
      if (tid % 32 == 0) mbar_arrive(v16_full(slot));
      // tile t's FP8 slots read by every converter: refill them
      if (t + S8 < n_tiles) {
        named_bar_sync(CONV_BAR, NC);
        load8(t + S8);
      }
    }
    return;
  }

  // The consumers.
  setmaxnreg_inc<L::CONSUMER_REGS>();
  const int wg = c.wg, row0 = c.row0, mask_from = c.mask_from;
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar0, Cfg::SMEM_Q);
#pragma unroll
    for (int cc = 0; cc < CH; ++cc) tma_load_4d(sQ + cc * BM * 128, &g.tma_q, cc * 64, m0 + q_row0, h, b, bar0);
  }
  float scale = p.sm_scale * kLog2e * mma_attn::page_scale(p.kv_k_scale, p.kv_scale_stride, hkv);
  float m[1][2], l[1][2], o[1][D / 8][4];
  wgmma_attn::init_state<D>(m, l, o);
  float(&of)[D / 2] = reinterpret_cast<float(&)[D / 2]>(o);
  const u32 sQw = sQ + wg * 64 * 128;
  u32 qa[1][4];  // (Q stays in shared memory: Q_REG_STEPS is 0 below head dim 256)
  mbar_wait(bar0, 0);
  if constexpr (BF16) {  // FP16 wgmma: the warp's Q rows into FP16 (q_bf16_to_f16), then its warpgroup's
    scale *= q_bf16_to_f16<Cfg>(sQ, wg * 64 + 16 * (warp % 4), CH);
    fence_proxy_async();
    named_bar_sync(Q_BAR + wg, 128);
  }
  const bool lane0 = threadIdx.x % 32 == 0;

  for (int t = 0; t < n_tiles; ++t) {
    const int cur = t & 1;
    const u32 ph = u32(t >> 1) & 1u;
    float s[BN / 2];
    mbar_wait(k16_full(cur), ph);
    issue_qk_boxes<Cfg, false>(s, qa, CH, sQw, k16(cur));
    wgmma_wait<0>();
    fence_regs(s);
    if (lane0) mbar_arrive(k16_empty(cur));
    float alpha[2] = {1.f, 1.f};
    const bool moved = t >= mask_from ? softmax_tile<Cfg, 1>(p, m[0], l[0], s, scale, t * BN, row0, alpha)
                                      : softmax_tile<Cfg, 0>(p, m[0], l[0], s, scale, t * BN, row0, alpha);
    u32 pa[BN / 16][4];
    pack_p<Cfg, false>(s, pa);
    if (moved) rescale_o<D>(o, alpha);
    mbar_wait(v16_full(cur), ph);
    issue_pv_boxes<Cfg, false>(of, pa, CH, v16(cur));
    wgmma_wait<0>();
    fence_regs(of);
    if (lane0) mbar_arrive(v16_empty(cur));
  }
  // The epilogue stages O over Q and the first FP16 slot: every consumer warp past its last
  // GEMM (the converters wrote their last tile before the consumers could read it).
  named_bar_sync(EPI_BAR, Cfg::CONSUMERS);
  const float vsc = mma_attn::page_scale(p.kv_v_scale, p.kv_scale_stride, hkv);
  epilogue::store<Cfg, 1>(p, m, l, o, b, h, c.kv_bh, warp, row0, smem, nullptr, true, vsc);
}

// FP8 pages, dense queries (sage_attn_paged_fp8): each CTA on its sequence's paged_view.
template <class Cfg>
SAGE_DEV void attn_kernel_paged_fp8(const SageAttnParams& p) {
  SageAttnParams v = p;
  mma_attn::paged_view<Cfg::BN>(p, mma_attn::cta_coords(p).b, v);
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_fp8_t<Cfg, true, false>(v, p);
  else attn_kernel_fp8_t<Cfg, false, false>(v, p);
}

// FP8 pages, variable-length queries (sage_attn_varlen_paged_fp8): each CTA on its sequence's
// varlen_paged_view.
template <class Cfg>
SAGE_DEV void attn_kernel_varlen_paged_fp8(const SageAttnParams& p) {
  SageAttnParams v = p;
  if (!mma_attn::varlen_paged_view<Cfg::BM, Cfg::BN, false>(p, int(blockIdx.z), v)) return;
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_fp8_t<Cfg, true, true>(v, p);
  else attn_kernel_fp8_t<Cfg, false, true>(v, p);
}

// ... and the same two on the warp-specialized form (Fp8PagesLayout::WS; the template instantiates
// the one its module's variant has).
template <class Cfg>
SAGE_DEV void attn_kernel_paged_fp8_ws(const SageAttnParams& p) {
  static_assert(Fp8PagesLayout<Cfg>::WS, "the converting warpgroups' entry");
  SageAttnParams v = p;
  mma_attn::paged_view<Cfg::BN>(p, mma_attn::cta_coords(p).b, v);
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_fp8_ws_t<Cfg, true, false>(v, p);
  else attn_kernel_fp8_ws_t<Cfg, false, false>(v, p);
}
template <class Cfg>
SAGE_DEV void attn_kernel_varlen_paged_fp8_ws(const SageAttnParams& p) {
  static_assert(Fp8PagesLayout<Cfg>::WS, "the converting warpgroups' entry");
  SageAttnParams v = p;
  if (!mma_attn::varlen_paged_view<Cfg::BM, Cfg::BN, false>(p, int(blockIdx.z), v)) return;
  if (p.dtype == SAGE_DTYPE_BF16) attn_kernel_fp8_ws_t<Cfg, true, true>(v, p);
  else attn_kernel_fp8_ws_t<Cfg, false, true>(v, p);
}

}  // namespace native_attn
}  // namespace sage
