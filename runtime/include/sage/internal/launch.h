// The launcher: loads a variant's cubin and runs its kernels (preparation + attention, or
// the FP32 reference) for one problem on a stream. Tests, the tuner and the runtime all go
// through it. Uses only the CUDA driver API. Internal header.
#pragma once
#include <cuda.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sage/internal/problem.h"

struct SageAttnParams;  // templates/include/sage/params.h

namespace sage {

// What the host must know of a variant's compile-time parameters. Built from the
// generator's Variant (tuner) or from an exported static table (static builds).
struct KernelConfig {
  std::string pipeline;      // "mma" | "wgmma" | "reference"
  std::string name;          // the variant's readable name (for messages)
  int head_dim = 0, block_m = 0, block_n = 0, warps = 0, stages = 0;
  std::string qk = "int8";   // int8 | int4
  std::string pv = "fp8";    // fp16 | fp16acc | fp8 | int8 | native
  std::string granularity = "per_thread";  // per_thread | per_warp | per_block
  bool smooth_k = true, smooth_q = false, smooth_v = false;
  std::string schedule = "plain";  // plain | overlap | pingpong | pingpong_overlap | ws | ws_overlap | turns | persistent | persistent_overlap | persistent_pingpong | persistent_split | decode
  int min_ctas = 1;                // occupancy target of __launch_bounds__
  bool tma = false;                // wgmma: tiles loaded by TMA (the launcher encodes tensor maps)
  bool fuse_q = false;             // wgmma: the attention kernel quantizes Q (read from the caller's tensor)
  int threads = 0, smem_bytes = 0;

  // Parses "key=value;key=value" (the form stored in databases and exported tables).
  static KernelConfig parse(const std::string& text);
  std::string str() const;
  // Empty when this config can serve the problem; otherwise why not (for messages).
  std::string cannot_implement(const AttnProblem& p) const;
};

// Whether a variant's module has the entry sage_attn_varlen (variable-length batches): the
// native (unquantized) kernels of the plain schedule at head dims 64 and 128, mma.sync (every
// arch) and wgmma (sm_90a: TMA over the packed tensors; also at head dim 256).
bool has_varlen_entry(const KernelConfig& c);
// Whether a variant's module has the entry sage_attn_window (sliding windows, AttnProblem::
// window): those that have sage_attn_varlen (dense and packed calls), and the quantized mma.sync
// kernels of INT8 Q.K^T at per-thread granularity, FP16 or FP8 P.V and the plain schedule, and the
// native mma.sync kernels of the decode schedule (dense calls: a packed one needs sage_attn_varlen
// too).
bool has_window_entry(const KernelConfig& c);
// Whether a variant's module has the entry sage_attn_paged (paged KV caches, AttnProblem::paged):
// the native mma.sync kernels of the decode schedule, and of the plain one at head dims 64 and 128;
// the native wgmma kernels of the plain schedule.
bool has_paged_entry(const KernelConfig& c);
// Whether a variant's module has the entries sage_attn_paged_window and
// sage_attn_varlen_paged_window (sliding windows over a paged cache): the mma.sync kernels that
// have sage_attn_paged.
bool has_paged_window_entry(const KernelConfig& c);
// Whether a variant's module has the entries sage_attn_paged_fp8 and sage_attn_varlen_paged_fp8
// (FP8 pages): those of has_paged_window_entry with two stages or more (with or without a
// window), and the wgmma ones of has_paged_entry whose FP8 tiles fit (paged_fp8_smem_bytes up to
// 227 KiB; no window).
bool has_paged_fp8_entry(const KernelConfig& c);
// The dynamic shared memory of a wgmma kernel's FP8 entries (attn_native_fp8.cuh: Fp8PagesLayout).
int paged_fp8_smem_bytes(const KernelConfig& c);
// The FP8 entries' threads a CTA: the variant's, and on the wgmma kernels of two warpgroups at
// head dim 64 or 128 that hold one CTA an SM two converting warpgroups more (256 threads;
// Fp8PagesLayout::WS: attn_kernel_fp8_ws_t).
int paged_fp8_threads(const KernelConfig& c);

// Whether a variant's module has the entry sage_attn_q3, which computes three quarters of the
// head dim (calls of up to 192 columns at 256, 96 at 128), and whether a call of `head_dim`
// columns on it runs that entry (the templates' rule: launch.cpp).
bool has_q3_entry(const KernelConfig& c);
bool runs_q3_entry(const KernelConfig& c, int head_dim);

// A loaded CUDA module; unloaded on destruction (in the context it was loaded in).
class Module {
 public:
  static std::shared_ptr<Module> load(const std::string& cubin);  // throws Error(cuda_error)
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUfunction function(const char* name) const;  // throws Error(not_found)
  CUmodule handle() const { return mod_; }

 private:
  explicit Module(CUmodule m, CUcontext ctx) : mod_(m), ctx_(ctx) {}
  CUmodule mod_;
  CUcontext ctx_;
};

// Element strides of one tensor (batch, head, sequence); its head dimension is contiguous.
struct TensorStrides {
  std::int64_t b = 0, h = 0, n = 0;
  bool operator==(const TensorStrides&) const = default;
};

// Device pointers of one call. Q/O are [B, Hq, Nq, D] and K/V [B, Hkv, Nkv, D] of the
// problem's dtype, contiguous in its layout, or (strided) each with the strides given here
// (multiples of 8 elements: AttnProblem::check_strides); lse (optional) is [B, Hq, Nq] FP32.
struct AttnArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  bool strided = false;
  TensorStrides sq, sk, sv, so;
  // A variable-length batch (AttnProblem::varlen): device arrays of batch + 1 offsets, sequence
  // b's rows [cu[b], cu[b + 1]) of the packed tensors.
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_kv = nullptr;
  // A paged KV cache (AttnProblem::paged): k and v point at the caches' first page, sk and sv
  // are their strides {page, head, slot} (strided set); sequence b's key i is in page
  // block_table[b * bt_stride + i / page_size] (num_pages pages), and the sequence has
  // min(seqlens_kv[b], seq_kv) keys (device arrays of int32).
  const std::int32_t* block_table = nullptr;
  const std::int32_t* seqlens_kv = nullptr;
  int bt_stride = 0, num_pages = 0;
  // Variable-length queries over a paged cache: this launch takes the sequences of vq_min to
  // vq_max queries (vq_max 0: no bound; SageAttnParams::vq_min), the others' rows are another
  // launch's (rt::run: a mixed batch's decoding sequences on the decode schedule).
  int vq_min = 0, vq_max = 0;
  // FP8 pages (AttnProblem::kv_fp8): device FP32 scales of K and V (null: 1), one for every kv
  // head (kv_scale_stride 0) or one a kv head (1).
  const float* kv_k_scale = nullptr;
  const float* kv_v_scale = nullptr;
  int kv_scale_stride = 0;
};

// Where each part of the workspace starts (bytes from its base). Sizes depend on the
// problem; the plan is cheap to compute and identical for identical problems.
struct WorkspacePlan {
  std::size_t total = 0;
  std::size_t stats = 0, sync = 0, q_quant = 0, q_scale = 0, q_mean_quant = 0, q_mean_scale = 0, q_kmean = 0,
              k_quant = 0, k_scale = 0, v_prep = 0, v_scale = 0, v_mean = 0, split_o = 0;
  // persistent_split: the ranges the last round's key tiles are cut into (AttnKernel::split_ranges;
  // 0: no split), with partial results at split_o and flags at `sync` in the workspace.
  int split_ranges = 0;
  // Decoding's split in thread block clusters of this many CTAs (AttnKernel::split_cluster; 0: none).
  int split_cluster = 0;
  // Decoding's share merge: the mergers a unit (AttnKernel::split_share; 0: none).
  int split_share = 0;
  bool has_stats = false, has_q_mean = false, has_q_kmean = false, has_v_prep = false,
       has_v_scale = false, has_v_mean = false;
  int q_tiles = 0, k_tiles = 0, stat_splits = 1;
  // Rows of K and V per (batch, kv head) the statistics read: all, or an evenly spaced sample
  // (quant.cuh); v_exact_pass: a second preparation launch re-quantizes the V of heads whose
  // values went past the sampled range (FP8 V with sampled statistics only).
  int stat_rows = 0;
  bool v_exact_pass = false;
  // A variable-length batch on a quantized kernel: each kv head's K and V tiles in a row of
  // this many, sequence b's from tile cu_seqlens_kv[b] / block_n + b (params.h); 0 otherwise.
  int kv_tile_pitch = 0;
};

// Causal launches (non-persistent kernels) have the grid (group, q_tiles, pairs / group) over
// the problem's batch x heads_q (batch, head) pairs (attn_mma.cuh: cta_coords), which the GPU
// starts x fastest: within a group of pairs every pair's longest query tile (the most key
// tiles) starts before any pair's next. A query tile visits 1 to k_tiles key tiles, and a
// long one that starts last sets how late the grid ends; ordering the long ones first across
// the group's heads (longest processing time first) shortens that tail. A group's K and V, as
// the kernel reads them, fit kCausalGroupBytes of L2, so that the CTAs running together still
// share them; it is a divisor of the pairs (no empty CTAs) and a multiple of the query heads
// per kv head (a GQA group is never split). Past kCausalLptMaxKeys keys the group is one pair
// (each head in turn, its longest tile first): there the tail is a small share of the call,
// and on the H100 the grouped order measured slower at D=128, 16K keys (docs/kernels.md).
// All the pairs where pairs / group would pass the grid's z limit (65535).
constexpr std::int64_t kCausalGroupBytes = std::int64_t(16) << 20;
constexpr int kCausalLptMaxKeys = 8192;
int causal_group(const AttnProblem& p, const KernelConfig& c);

// Decoding's split in thread block clusters (AttnKernel::cluster_plan, which fills the inputs
// from the problem, the variant and the GPU): the cluster size (2, 4 or 8 CTAs) and the ranges
// every unit's keys are cut into, or {0, 0} where the merge through L2 stays. Rules and the
// measurements behind them: launch.cpp.
struct SplitClusterInputs {
  std::int64_t units = 0;  // work units (query tiles; packed: (batch, kv head))
  std::int64_t tiles = 0;  // key tiles of a unit
  std::int64_t slots = 0;  // CTAs resident at once
  std::int64_t row_bytes = 0;   // one member CTA's rows of queries, as the leader receives them
  std::int64_t ring_bytes = 0;  // the leader's K/V ring
  std::array<int, 3> max_clusters = {};  // clusters of 2, 4 and 8 CTAs resident at once
  std::int64_t l2_ranges = 0;  // the ranges the merge through L2 alone would cut (all units)
  std::int64_t max_span = 0;   // clusters a unit may span (0: kClusterMaxSpan)
};
struct SplitClusters {
  int cluster = 0;          // CTAs a cluster (0: none)
  int ranges_per_unit = 0;  // R
};
SplitClusters choose_split_clusters(const SplitClusterInputs& in);
// Decoding's share merge (AttnKernel::share_plan; attn_native.cuh: share_merge): units of at
// least kShareMinUnitTiles key tiles (8K keys) have their keys cut into R ranges of at least
// kShareMinTiles tiles, as many as the wave holds, every range merging a share of the
// partials, where that makes at least kShareMinRanges ranges a unit. Below those the merge's
// fixed cost (every range's partial written and read back, 3-5 us) outweighs its ranges, and
// the owner's merge (in clusters or through L2) stays. H100, causal, e2e us, share / owner's:
// 8 / 1 (one unit) with 8 queries over 2K keys 18.0 / 15.8 (ranges of 2 tiles), 4K 20.6 /
// 17.7, 8K 21.8 / 23.3, 32K 27.1 (ranges of 4 tiles; 30.5 of 2) / 42.3, 128K 52.7 / 74.0;
// 28 / 4 with 8 queries over 2K 23.1 / 17.8, 4K 23.8 / 23.8, 8K 24.5 / 27.3; 4 x 32 / 8
// (32 units, 4 ranges each) over 8K 70.9 / 66.7 (docs/kernels.md, 2026-11-27 (ab)).
constexpr std::int64_t kShareMinUnitTiles = 64, kShareMinTiles = 4, kShareMinRanges = 8;
// The share merge's ranges a unit for `units` units of `tiles` key tiles on `slots` CTAs
// resident at once (min_tiles: the shortest range, 0 for kShareMinTiles), or 0 where it does
// not apply.
int choose_share_ranges(std::int64_t units, std::int64_t tiles, std::int64_t slots, std::int64_t min_tiles = 0);
constexpr std::int64_t kClusterMinTiles = 4, kClusterShortRanges = 8, kClusterMaxSpan = 4;
// Units of kClusterOneTileFrom to kClusterShortRanges key tiles take ranges of one tile where
// that makes no more than kClusterOneTileCtas CTAs in all.
constexpr std::int64_t kClusterOneTileFrom = 4, kClusterOneTileCtas = 48;
inline bool cluster_one_tile_ranges(std::int64_t units, std::int64_t tiles) {
  return tiles >= kClusterOneTileFrom && tiles <= kClusterShortRanges && units * tiles <= kClusterOneTileCtas;
}

// The decode schedule of the native mma.sync kernel (attn_decode.cuh). A packed GQA group of
// `group` query heads takes block_m / group rows a head of a block_m-row tile, where that
// holds the call's seq_q queries, else seq_q rows a head over several tiles (decode_pack_rows;
// 0: the heads stay a tile each). Each tile's keys are cut into
// ranges of at least min_keys keys (kDecodeSplitMinKeys where 0), at most kDecodeMaxRanges and
// at most one wave of CTAs (slots) over the units; none (0) where the units are more than half
// the wave or a tile would get fewer than two ranges. A range's fixed cost is a CTA's start, its first
// tile's latency and its partial; the merging range folds every range's partial with eight
// ranges' loads in flight at a time (H100: docs/kernels.md, "The decode schedule"). Past
// merge_cap ranges (decode_merge_cap; 0: none) a tile's merge takes more than two such round
// trips on a thread, so the ranges stop there, unless that would leave fewer than
// kDecodeMinCtas CTAs at work (H100, one query over 32K keys, Qwen2.5 7B's 28 / 4 heads: 41-42
// us in 16 ranges against 44 in 33; 64 / 4: 43 against 47; docs/kernels.md, 2026-11-27 (x)).
constexpr std::int64_t kDecodeSplitMinKeys = 256, kDecodeMaxRanges = 64, kDecodeMinCtas = 64;
// The shortest range a call's tiles take (decode_min_keys): kDecodeShortMinKeys keys for calls
// of at least kDecodeShortKeysFrom keys at head dim 256 (16x64 tiles: two of them), and at
// head dim 128 for calls of up to kDecodeShortKeys keys over at most kDecodeShortMaxUnits
// units, where more ranges' parallelism outweighs their partials; else kDecodeSplitMinKeys.
// H100, one query, e2e us, ranges of at least 128 / 256 keys, two runs: head dim 128 over 1K /
// 2K keys, 16 / 1 12.6-13.2 / 13.9-14.0 and 12.8-13.4 / 14.4-14.6, 8 / 1 11.3-11.5 /
// 12.6-12.7 and 12.4-13.2 / 12.8-13.3, 48 / 1 (3 units) 12.6-12.7 / 14.1-14.2 and 13.2-13.8 /
// 13.9-14.2, 28 / 4 12.4 / 13.0-13.4 and 14.0-14.7 / 14.0, but 32 / 8 (8 units) 13.8-14.0 /
// 13.4 and 15.7-16.3 / 14.7-15.4; head dim 256 over 1K / 4K / 8K, 8 / 1 14.3-14.4 / 16.7-17.1,
// 16.2-17.0 / 18.0-18.3, 17.7-18.4 / 19.8, 32 / 8 17.3-17.6 / 18.5-18.6, 27.6 / 27.6-28.4,
// 42.0-42.5 / 42.0. Head dim 64 keeps 256: level or behind (16 / 1 over 1.5K 11.4-11.5 /
// 11.1-11.2). docs/kernels.md, 2026-11-27 (aa).
constexpr std::int64_t kDecodeShortMinKeys = 128, kDecodeShortKeysFrom = 1024, kDecodeShortKeys = 2048,
                       kDecodeShortMaxUnits = 4;
std::int64_t decode_min_keys(int head_dim, int seq_kv, std::int64_t units);
// The ranges whose merge takes at most two round trips to L2 on each thread: the merging CTA's
// `threads` threads take the tile's rows of queries (`rows`) four columns of `head_dim` each,
// parts of them a share of the ranges where those items are fewer than the threads, eight
// ranges' loads in flight at a time (attn_decode.cuh).
std::int64_t decode_merge_cap(std::int64_t rows, int head_dim, int threads);
// The decode schedule's packing: where a GQA group's seq_q queries fit one block_m-row tile,
// block_m / group rows a head; else, where a tile holds two heads' queries or more, seq_q rows a
// head, the group over decode_pack_tiles tiles of block_m / seq_q heads each (one query of
// StarCoder's 48 heads a kv head: 3 tiles of 16); else 0 (a query head a tile).
// Variable-length queries over a paged cache whose kernel (`selected`, chosen for the longest
// sequence's seq_q queries) is not the decode schedule's: the bands of sequences, by their
// queries, that run first on the decode kernel, a launch each, tiled for the band's most queries
// (rt::run). [1, edge] (edge: the most queries the paged defaults give the decode schedule; 0:
// none); where `selected` is a wgmma kernel of head dim 64, also [edge + 1, 8] (H200, 8K keys, a
// 512-query chunk with 63 sequences of 5 or 8 queries: 0.62 ms against 1.28 on the chunk's
// kernel; at head dim 128 the two were level, and one band of 1-8 queries slowed sequences of one
// query from 0.43 to 0.61). Bands end below seq_q. forced > 0 (SAGE_DECODE_PART, bench
// --decode-part): the one band [1, forced]; 0: none.
struct QueryBand {
  int lo, hi;
};
std::vector<QueryBand> decode_bands(const KernelConfig& selected, int seq_q, int edge, int forced = -1);
int decode_pack_rows(int block_m, int group, int seq_q);
int decode_pack_tiles(int block_m, int group, int pack_rows);
// The row-major native kernels' packing (persistent wgmma kernels, the plain native mma.sync
// kernel): a GQA group of `group` query heads takes `rows` rows a head of a block_m-row tile,
// the largest power of two of at least 16 with group x rows <= block_m (a warp's 16 rows then
// belong to one head, which the epilogue's stores and the causal mask's row index need), where
// that holds the call's seq_q queries and, for the mma.sync kernel, whole warps' rows
// (warp_rows > 0: a multiple of it), and with `fill` where the group's rows fill the tile
// exactly; 0 where none does (the heads stay a tile each). A group that does not fill the tile
// leaves its last warps idle: 7 heads at 16 rows of a 128-row tile.
int tile_pack_rows(int block_m, int group, int seq_q, int warp_rows = 0, bool fill = false);
// persistent_split's packing of a group of more heads than one tile holds: the power of two of
// at least 16 rows that holds seq_q, where a block_m-row tile holds two heads' or more (0
// else), the group over decode_pack_tiles(block_m, group, rows) tiles.
int tile_pack_rows_over_tiles(int block_m, int seq_q);
// Whether the persistent kernels pack a call's groups: where its (batch, kv head) pairs are at
// least kPackMinUnits, or they times the key tiles at least kPackMinTiles. Fewer, and the
// unpacked call's query heads spread the keys over more CTAs than its few packed units do, its
// extra K/V reads mostly hit in L2 (H100, persistent_split D=128, causal draft queries, e2e
// us packed / unpacked: 4 of 16:2 over 1K keys 17 / 14, 2K 19 / 18-19, 4K 21 / 21, 8K 25-26 /
// 28; 28:4 4 queries 1K 17 / 15-16, 2K 19 / 18, 4K 21 / 28, 8 queries 2K 21 / 17-18; 40:8 1K
// 15-16 / 19; D=64 14:2 2K 15 / 14, 4K 17-18 / 16, 8K 19-20 / 20-21, 16K 21 / 31-32).
constexpr std::int64_t kPackMinUnits = 8, kPackMinTiles = 128;
bool pack_pays(std::int64_t kv_heads, std::int64_t key_tiles);
int decode_split_ranges(std::int64_t units, std::int64_t slots, int seq_kv, std::int64_t min_keys = 0,
                        std::int64_t merge_cap = 0);
// The rows a head of a call's packed GQA group on variant c (AttnKernel::pack_rows;
// SageAttnParams::pack_rows), or 0: the native persistent and mma.sync kernels only. pack_heads
// (SAGE_PACK_HEADS): 0 never, 1 where pack_pays, 2 wherever the tile holds the group.
int pack_rows_for(const KernelConfig& c, const AttnProblem& p, int pack_heads = 1);

// A loaded quantized-attention variant (pipelines "mma" and "wgmma": same kernels' interface).
class AttnKernel {
 public:
  AttnKernel(KernelConfig cfg, std::shared_ptr<Module> module);
  const KernelConfig& config() const { return cfg_; }
  // The unquantized family (qk "native"): reads the caller's FP16/BF16 tensors directly, with
  // no preparation kernel (a workspace only for the persistent kernels' split tail).
  bool native() const { return cfg_.qk == "native"; }
  // The native mma.sync kernel (sm_80+): the caller's tensors by cp.async; decoding calls split
  // their keys over several CTAs (split_ranges) and pack GQA heads (pack_rows).
  bool mma_native() const { return native() && cfg_.pipeline == "mma"; }
  // The native pingpong kernel with FP8 P.V: V converted in the kernel into the workspace.
  bool native_pv8() const { return native() && cfg_.pv == "fp8"; }
  // Its decode schedule: the query rows are the MMAs' N, the warps take the keys (attn_decode.cuh).
  bool decode() const { return mma_native() && cfg_.schedule == "decode"; }
  bool has_prep() const { return !native(); }
  // The persistent schedule: a grid of one CTA per SM (and occupancy slot) walks the query tiles.
  bool persistent() const { return cfg_.schedule.rfind("persistent", 0) == 0; }
  // Its work units (query tiles, or causal pairs of them) and grid for `p`.
  std::int64_t persistent_units(const AttnProblem& p) const;
  std::int64_t persistent_grid(const AttnProblem& p) const;
  // persistent_split: the ranges the last round's key tiles are cut into (at most the grid; with
  // fewer query tiles than CTAs every tile is the last round's, and the grid is every CTA), or 0
  // where the split would not pay, the round is full, or the call is causal with more than one
  // query tile per head.
  int split_ranges(const AttnProblem& p) const;
  // persistent_split, decoding (every unit split, one query tile a unit): the cluster size
  // (2, 4 or 8 CTAs) whose ranges merge through distributed shared memory, with split_ranges then a
  // whole number of clusters a unit; 0 where no cluster size fits (SageAttnParams::split_cluster).
  int split_cluster(const AttnProblem& p) const;
  // persistent_split, decoding: the share merge's mergers a unit (SageAttnParams::split_share;
  // share_plan), or 0 where the owner merges.
  int split_share(const AttnProblem& p) const { return share_plan(p).second; }
  // The native mma.sync kernel's query tiles (where packed: decode_pack_tiles per (batch, kv
  // head), one but in the decode schedule).
  std::int64_t mma_units(const AttnProblem& p) const;
  // The native kernels' query tiles a (batch, head) (SageAttnParams::q_tiles): where packed, a
  // kv head's (decode_pack_tiles), else a query head's.
  int q_tiles(const AttnProblem& p) const;
  // Persistent native kernels: the rows each query head takes in a tile whose GQA group's
  // heads are packed together (SageAttnParams::pack_rows), or 0 (one head a tile).
  int pack_rows(const AttnProblem& p) const;
  // Persistent native kernels, causal calls: whether each query tile is a work unit of its own
  // (SageAttnParams::causal_single: no more tiles than CTAs) instead of a pair of them.
  bool causal_single(const AttnProblem& p) const;
  // The SMs a call runs on (AttnProblem::sms, at most the device's), and the CTAs resident on
  // them at once (persistent and native mma: the grid, and the ranges a split fills).
  int sms(const AttnProblem& p) const { return p.sms > 0 && p.sms < num_sms_ ? p.sms : num_sms_; }
  std::int64_t slots(const AttnProblem& p) const {
    return std::int64_t(sms(p)) * (p.kv_fp8 && per_sm_fp8_ > 0 ? per_sm_fp8_ : per_sm_);
  }
  // Whether p runs on a partition of the device's SMs (a green context: AttnProblem::sms).
  bool partial(const AttnProblem& p) const { return sms(p) < num_sms_; }
  WorkspacePlan plan(const AttnProblem& p) const;
  std::size_t workspace_size(const AttnProblem& p) const { return plan(p).total; }
  // Bytes the preparation kernels read and write (the bandwidth benchmark's numerator).
  double prep_bytes(const AttnProblem& p) const;
  // Runs preparation and attention on `stream`. `workspace` must hold workspace_size(p)
  // bytes (256-byte aligned). Validates the problem against the config first.
  void run(const AttnProblem& p, const AttnArgs& a, void* workspace, CUstream stream) const;
  // The same, split for timing the stages separately.
  void run_prep(const AttnProblem& p, const AttnArgs& a, void* workspace, CUstream stream) const;
  void run_attn(const AttnProblem& p, const AttnArgs& a, void* workspace, CUstream stream) const;

 private:
  void fill(const AttnProblem& p, const AttnArgs& a, void* ws, const WorkspacePlan& w, ::SageAttnParams* out) const;
  void launch_prep(const AttnProblem& p, const WorkspacePlan& w, const ::SageAttnParams& s, CUstream stream) const;
  void launch_attn(const AttnProblem& p, const ::SageAttnParams& s, CUstream stream) const;
  // TMA variants: the tensor maps of the workspace's quantized Q, K and prepared V, encoded
  // once per (workspace, shape) and reused while the caller keeps both (the steady state).
  void tensor_maps(const WorkspacePlan& w, const AttnProblem& p, ::SageAttnParams& s) const;
  // Native variants: maps over the caller's Q, K, V (O for the persistent kernels; the FP8 P.V
  // variant's also over its workspace), re-encoded when the pointers or the shape change.
  void native_tensor_maps(const AttnProblem& p, ::SageAttnParams& s) const;
  struct TmaCache {
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    const void* o = nullptr;  // persistent native: the output the O map describes
    std::int64_t q_rows = 0, k_rows = 0, v_rows = 0, npad = 0;
    std::array<std::int64_t, 21> shape = {};  // native, fuse_q: the problem and strides the maps describe
    // native FP8 P.V: the workspace's V^T tiles and tile scales the maps 4 and 5 describe
    const void* v8 = nullptr;
    const void* vs = nullptr;
    std::int64_t v8_tiles = 0;
    alignas(64) unsigned char maps[6][128] = {};  // Q, K, V, O; native FP8 P.V: V8, V scales
  };
  KernelConfig cfg_;
  std::shared_ptr<Module> module_;
  CUfunction prep_ = nullptr, attn_ = nullptr;
  CUfunction prep_v_ = nullptr;  // FP8 V: the exact pass after sampled statistics (sage_prep_v)
  bool dependent_ = false;       // sage_prep_v and sage_attn launch as programmatic dependents
  CUfunction attn_q3_ = nullptr;   // calls of up to 3/4 of the head dim (sage_attn_q3; has_q3_entry)
  CUfunction attn_lse_ = nullptr;  // the entry for calls with an LSE, where it differs (pv int8)
  CUfunction attn_varlen_ = nullptr;  // variable-length batches (sage_attn_varlen; has_varlen_entry)
  CUfunction attn_window_ = nullptr;  // sliding windows, dense or packed (sage_attn_window; has_window_entry)
  CUfunction attn_paged_ = nullptr;   // paged KV caches (sage_attn_paged; has_paged_entry)
  // variable-length queries over paged KV caches (sage_attn_varlen_paged; has_paged_entry)
  CUfunction attn_varlen_paged_ = nullptr;
  // both with a sliding window (sage_attn_paged_window, sage_attn_varlen_paged_window; has_paged_window_entry)
  CUfunction attn_paged_window_ = nullptr, attn_varlen_paged_window_ = nullptr;
  // both over FP8 pages, with or without a window (sage_attn_paged_fp8, sage_attn_varlen_paged_fp8; has_paged_fp8_entry)
  CUfunction attn_paged_fp8_ = nullptr, attn_varlen_paged_fp8_ = nullptr;
  int fp8_smem_ = 0;  // the FP8 entries' dynamic shared memory (wgmma: paged_fp8_smem_bytes)
  int fp8_threads_ = 0;  // and their threads a CTA (paged_fp8_threads)
  // ... and their preparation and exact pass over FP8 V (the quantized kernels)
  CUfunction prep_varlen_ = nullptr, prep_v_varlen_ = nullptr;
  int num_sms_ = 0;  // the device's
  int per_sm_ = 0;   // persistent and native mma: CTAs an SM holds
  int per_sm_fp8_ = 0;  // native mma: CTAs of the FP8 pages' entry an SM holds (0: per_sm_)
  int mma_split_ranges(const AttnProblem& p) const;
  int decode_min_keys_ = 0;  // SAGE_DECODE_MIN_KEYS (0: the default)
  int pack_heads_ = 1;       // SAGE_PACK_HEADS: 0 never, 1 where pack_pays, 2 wherever the tile holds the group
  // persistent_split: decoding in clusters, {cluster size, ranges} or {0, 0}.
  std::pair<int, int> cluster_plan(const AttnProblem& p) const;
  // persistent_split, decoding: {ranges a unit, mergers a unit} of the share merge, or {0, 0}.
  std::pair<int, int> share_plan(const AttnProblem& p) const;
  // persistent_split without clusters: the ranges merged through L2 (0: no split).
  int l2_split_ranges(const AttnProblem& p) const;
  // persistent_split: how many clusters of 2, 4 and 8 CTAs can run at once on the whole device
  // (0: none). On a partition of its SMs (a green context) the split merges through L2: how many
  // clusters a partition holds at once is the driver's answer for a stream of it, which
  // plan() (sage_workspace_size) does not have.
  std::array<int, 3> max_clusters_ = {};
  int cluster_span_ = 0;  // SAGE_SPLIT_CLUSTER_SPAN (0: the default)
  int share_ = 1;         // SAGE_SPLIT_SHARE: 0 keeps the owner's merge
  int share_min_tiles_ = 0;  // SAGE_SPLIT_SHARE_TILES (0: kShareMinTiles)
  mutable std::mutex tma_mu_;
  mutable TmaCache tma_cache_;
};

// The FP32 reference (pipeline "reference"): O [B, Hq, Nq, D] and LSE [B, Hq, Nq] in FP32.
class ReferenceKernel {
 public:
  explicit ReferenceKernel(std::shared_ptr<Module> module);
  void run(const AttnProblem& p, const AttnArgs& in, float* o, float* lse, CUstream stream) const;

 private:
  std::shared_ptr<Module> module_;
  CUfunction fn_ = nullptr;
};

// Makes the primary context of `device` current on this thread (retaining it once per
// process) and returns it.
CUcontext use_device(int device = 0);

// The identity of a context for the runtime's caches: its driver ID (cuCtxGetId), unique for
// the process's life. A primary context reset under the library (cudaDeviceReset,
// cuDevicePrimaryCtxReset) keeps its handle but gets a new ID, and with it new modules and a
// new workspace pool. Drivers without the call: the handle's bits.
std::uint64_t context_id(CUcontext ctx);

// How kernel k launches the problem kp (as the kernel sees it), in words: the persistent grid
// and its work units (else the query and key tiles), the keys' split over CTAs and how its
// partials merge (share merge, clusters, through L2), the GQA heads packed into one tile
// (SAGE_LOG's launch line, `sage-tune bench --json`'s "launch").
std::string launch_text(const AttnKernel& k, const AttnProblem& kp);

// The SMs `stream`'s work runs on where they are a partition of the device: its green
// context's (a stream of cuGreenCtxStreamCreate, one created while a green context was
// current, or the NULL / legacy stream of a thread whose current context is green), the value
// of AttnProblem::sms for a call on it; 0 for a stream of an ordinary context (every SM), or
// where the driver has no green contexts (before CUDA 12.5). `stream_ctx`, when given,
// receives the ordinary context the stream belongs to (the current one for the NULL stream;
// nullptr for a green context's stream, or where the driver does not say).
int stream_sms(CUstream stream, CUcontext* stream_ctx = nullptr);

}  // namespace sage
