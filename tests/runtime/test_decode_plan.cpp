// The decode schedule's launch plan (launch.h: decode_pack_rows, decode_pack_tiles,
// decode_split_ranges): which GQA groups pack into 16-row tiles, over how many tiles, and how a
// tile's keys are cut into ranges; and which groups the row-major native kernels pack
// (tile_pack_rows).
#include <gtest/gtest.h>

#include "sage/common/strings.h"
#include "sage/internal/launch.h"

namespace sage {
namespace {

TEST(DecodePlan, AnyGroupOfUpToTheTileRowsPacksAtTileRowsOverGroupRowsAHead) {
  EXPECT_EQ(decode_pack_rows(16, 4, 1), 4);   // Llama 3 8B: 4 rows a head
  EXPECT_EQ(decode_pack_rows(16, 7, 1), 2);   // Qwen2.5 7B: 7 heads at 2 rows, 14 of 16 rows used
  EXPECT_EQ(decode_pack_rows(16, 5, 2), 3);   // two queries of a group of 5 fit 3 rows a head
  EXPECT_EQ(decode_pack_rows(16, 16, 1), 1);  // a group of 16 at one row each
  EXPECT_EQ(decode_pack_rows(16, 1, 1), 0);   // MHA: nothing to pack
  EXPECT_EQ(decode_pack_rows(32, 8, 4), 4);
  // One tile holds the group: a tile a (batch, kv head).
  EXPECT_EQ(decode_pack_tiles(16, 4, 4), 1);
  EXPECT_EQ(decode_pack_tiles(16, 7, 2), 1);
  EXPECT_EQ(decode_pack_tiles(16, 5, 3), 1);
}

TEST(DecodePlan, GroupsPastTheTileRowsPackOverSeveralTilesAtTheirQueriesRowsAHead) {
  // StarCoder (48 query heads, one kv head): one query a head, 3 tiles of 16 heads.
  EXPECT_EQ(decode_pack_rows(16, 48, 1), 1);
  EXPECT_EQ(decode_pack_tiles(16, 48, 1), 3);
  // Falcon 7B (71 heads, one kv head): 5 tiles, the last of 7 heads.
  EXPECT_EQ(decode_pack_rows(16, 71, 1), 1);
  EXPECT_EQ(decode_pack_tiles(16, 71, 1), 5);
  EXPECT_EQ(decode_pack_rows(16, 17, 1), 1);  // one head past the tile's rows: 2 tiles
  EXPECT_EQ(decode_pack_tiles(16, 17, 1), 2);
  // 5 queries of a 4:1 group need 20 rows: 3 heads of 5 rows a tile, 2 tiles.
  EXPECT_EQ(decode_pack_rows(16, 4, 5), 5);
  EXPECT_EQ(decode_pack_tiles(16, 4, 5), 2);
  // 4 draft queries of Qwen2.5 7B's 7 heads: 4 heads a tile, 2 tiles.
  EXPECT_EQ(decode_pack_rows(16, 7, 4), 4);
  EXPECT_EQ(decode_pack_tiles(16, 7, 4), 2);
  // 8 queries: two heads a tile; 9 queries leave room for one head only, so a head a tile.
  EXPECT_EQ(decode_pack_rows(16, 4, 8), 8);
  EXPECT_EQ(decode_pack_tiles(16, 4, 8), 2);
  EXPECT_EQ(decode_pack_rows(16, 4, 9), 0);
  EXPECT_EQ(decode_pack_rows(16, 48, 0), 0);
}

TEST(TilePackRows, GroupsPackAtThePowerOfTwoOfAtLeast16RowsThatFitsTheTile) {
  EXPECT_EQ(tile_pack_rows(128, 4, 1), 32);    // Llama 3 8B: 4 x 32 rows
  EXPECT_EQ(tile_pack_rows(128, 8, 16), 16);   // 16 queries of an 8:1 group fill the tile
  EXPECT_EQ(tile_pack_rows(128, 2, 64), 64);
  EXPECT_EQ(tile_pack_rows(128, 7, 4), 16);    // Qwen2.5 7B: 7 x 16 of 128 rows, the last warp idle
  EXPECT_EQ(tile_pack_rows(128, 5, 16), 16);   // 80 rows
  EXPECT_EQ(tile_pack_rows(128, 3, 24), 32);   // 96 rows: 32 a head, not 42
  EXPECT_EQ(tile_pack_rows(128, 6, 17), 0);    // 17 queries need more than 16 rows a head
  EXPECT_EQ(tile_pack_rows(128, 9, 1), 0);     // 9 x 16 rows pass the tile
  EXPECT_EQ(tile_pack_rows(128, 16, 1), 0);    // 8 rows a head would split a warp's rows
  EXPECT_EQ(tile_pack_rows(128, 1, 1), 0);     // MHA: nothing to pack
  EXPECT_EQ(tile_pack_rows(64, 4, 1), 16);
  EXPECT_EQ(tile_pack_rows(64, 7, 1), 0);      // 7 x 16 rows pass a 64-row tile
  // The mma.sync kernel: a head's rows must be whole warps' (128 x 64 tiles, 8 or 4 warps).
  EXPECT_EQ(tile_pack_rows(128, 7, 4, 16), 16);
  EXPECT_EQ(tile_pack_rows(128, 7, 4, 32), 0);
  EXPECT_EQ(tile_pack_rows(128, 3, 4, 32), 32);
  // The persistent schedules other than persistent_split pack only groups that fill the tile:
  // 3 heads of a 192-row tile at 64 rows each, not 2 or 4 heads.
  EXPECT_EQ(tile_pack_rows(192, 3, 1, 0, true), 64);
  EXPECT_EQ(tile_pack_rows(192, 6, 1, 0, true), 32);
  EXPECT_EQ(tile_pack_rows(192, 2, 1, 0, true), 0);
  EXPECT_EQ(tile_pack_rows(192, 4, 1, 0, true), 0);
  EXPECT_EQ(tile_pack_rows(192, 8, 1, 0, true), 0);
  EXPECT_EQ(tile_pack_rows(128, 4, 1, 0, true), 32);
  EXPECT_EQ(tile_pack_rows(128, 7, 4, 0, true), 0);
}

// persistent_split: a group of more heads than a 128-row tile holds takes several tiles, each
// of as many heads as it holds at the power of two of at least 16 rows that holds the queries.
TEST(TilePackRows, PersistentSplitPacksLargerGroupsOverSeveralTiles) {
  EXPECT_EQ(tile_pack_rows_over_tiles(128, 1), 16);  // 8 heads a tile
  EXPECT_EQ(tile_pack_rows_over_tiles(128, 16), 16);
  EXPECT_EQ(tile_pack_rows_over_tiles(128, 17), 32);  // 4 heads a tile
  EXPECT_EQ(tile_pack_rows_over_tiles(128, 64), 64);  // 2 heads a tile
  EXPECT_EQ(tile_pack_rows_over_tiles(128, 65), 0);   // one head a tile: nothing to pack
  EXPECT_EQ(tile_pack_rows_over_tiles(64, 32), 32);
  EXPECT_EQ(tile_pack_rows_over_tiles(64, 33), 0);
  EXPECT_EQ(decode_pack_tiles(128, 48, 16), 6);  // StarCoder's 48 heads, a few draft tokens
  EXPECT_EQ(decode_pack_tiles(128, 16, 16), 2);  // Llama 3.1 405B on 8 GPUs: 16 heads, one kv head
  EXPECT_EQ(decode_pack_tiles(128, 20, 16), 3);  // the last tile 4 heads
  EXPECT_EQ(decode_pack_tiles(128, 7, 16), 1);
}

TEST(TilePackRows, PersistentKernelsPackFromEightKvHeadsOr128KvHeadKeyTiles) {
  EXPECT_FALSE(pack_pays(2, 16));  // 16:2 over 2K keys (128-key tiles): unpacked
  EXPECT_FALSE(pack_pays(4, 16));  // 28:4 over 2K keys
  EXPECT_TRUE(pack_pays(4, 32));   // 28:4 over 4K keys
  EXPECT_TRUE(pack_pays(2, 64));   // 14:2 over 8K keys
  EXPECT_TRUE(pack_pays(8, 8));    // 40:8 over 1K keys: eight units
  EXPECT_TRUE(pack_pays(32, 2));   // 4 sequences of 8 kv heads over 256 keys
  EXPECT_FALSE(pack_pays(0, 1000));
}

TEST(DecodePlan, RangesFillOneWaveAtTheShortestRangeAndTheMergeBound) {
  // 8 units (one query of a 4:1 group, 32 query heads) on 132 CTAs: 16 ranges a unit.
  EXPECT_EQ(decode_split_ranges(8, 132, 32768), 16);
  // 4K keys: 16 ranges of 256 keys; 1K keys: 4; 300 keys: fewer than two ranges, no split.
  EXPECT_EQ(decode_split_ranges(8, 396, 4096), 16);
  EXPECT_EQ(decode_split_ranges(8, 396, 1024), 4);
  EXPECT_EQ(decode_split_ranges(8, 396, 300), 0);
  // At most kDecodeMaxRanges, however many CTAs fit.
  EXPECT_EQ(decode_split_ranges(1, 1000, 1 << 20), int(kDecodeMaxRanges));
  // Units past half the wave are not split; at half of it, each gets two ranges.
  EXPECT_EQ(decode_split_ranges(67, 132, 32768), 0);
  EXPECT_EQ(decode_split_ranges(66, 132, 32768), 2);
  // A shorter range where asked (SAGE_DECODE_MIN_KEYS): 1K keys in ranges of 128.
  EXPECT_EQ(decode_split_ranges(8, 396, 1024, 128), 8);
  EXPECT_EQ(decode_split_ranges(0, 132, 4096), 0);
}

// The shortest range the launcher asks for (decode_min_keys): from 1K keys, 128 keys at head dim
// 256 (two of its 64-key tiles), and at head dim 128 up to 2K keys over at most 4 units; else
// 256 (head dim 64, more units, longer or shorter calls). One query of 16 heads over one kv head
// (one unit) over 1K keys: 8 ranges instead of 4; over 4K, 16 of 256 keys at head dim 128 and
// 32 of 128 at head dim 256.
TEST(DecodePlan, ShortCallsOfFewUnitsAndHeadDim256TakeRangesOf128Keys) {
  EXPECT_EQ(decode_min_keys(128, 1024, 1), 128);
  EXPECT_EQ(decode_min_keys(128, 2048, 4), 128);
  EXPECT_EQ(decode_min_keys(128, 2048, 8), 256);   // Llama 3 8B's 8 kv heads: level or behind
  EXPECT_EQ(decode_min_keys(128, 2049, 1), 256);
  EXPECT_EQ(decode_min_keys(128, 1023, 1), 256);
  EXPECT_EQ(decode_min_keys(64, 1024, 1), 256);
  EXPECT_EQ(decode_min_keys(256, 32768, 8), 128);
  EXPECT_EQ(decode_min_keys(256, 1023, 1), 256);
  EXPECT_EQ(decode_split_ranges(1, 132, 1024, decode_min_keys(128, 1024, 1)), 8);
  EXPECT_EQ(decode_split_ranges(1, 132, 4096, decode_min_keys(128, 4096, 1)), 16);
  EXPECT_EQ(decode_split_ranges(1, 132, 4096, decode_min_keys(256, 4096, 1)), 32);
  EXPECT_EQ(decode_split_ranges(1, 132, 300, decode_min_keys(128, 300, 1)), 0);  // too few keys to split
}

TEST(DecodePlan, RangesStopWhereTheMergeTakesMoreThanTwoRoundTripsUnlessTooFewCtasWork) {
  // The merge's items are a tile's rows of queries x four columns; 256 threads (16x128, 8 warps).
  EXPECT_EQ(decode_merge_cap(7, 128, 256), 16);   // Qwen2.5 7B's 7 heads: 224 items, one part
  EXPECT_EQ(decode_merge_cap(16, 128, 256), 16);  // a group of 16: 512 items, two a thread
  EXPECT_EQ(decode_merge_cap(4, 128, 256), 32);   // a 4:1 group: 128 items, two parts
  EXPECT_EQ(decode_merge_cap(4, 64, 256), 64);    // ... at D=64: 64 items, four parts
  EXPECT_EQ(decode_merge_cap(1, 128, 256), 128);  // MHA, one query: 32 items
  // 4 units (28:4 or 64:4, one sequence) over 32K keys on 132 CTAs: 16 ranges, not 33.
  EXPECT_EQ(decode_split_ranges(4, 132, 32768), 33);
  EXPECT_EQ(decode_split_ranges(4, 132, 32768, 0, 16), 16);
  // 2 units: the cap would leave 32 CTAs; kDecodeMinCtas keeps 64 at work (32 ranges a unit).
  EXPECT_EQ(decode_split_ranges(2, 132, 32768, 0, 16), int(kDecodeMinCtas / 2));
  // 8 units of a 4:1 group: the wave's 16 ranges are within the cap.
  EXPECT_EQ(decode_split_ranges(8, 132, 32768, 0, decode_merge_cap(4, 128, 256)), 16);
  // The cap never cuts below two ranges' worth of keys: short caches keep their 256-key ranges.
  EXPECT_EQ(decode_split_ranges(4, 132, 4096, 0, 16), 16);
  EXPECT_EQ(decode_split_ranges(4, 132, 2048, 0, 16), 8);
}

// Which kernels pack a call's GQA group, and at how many rows a head (launch.h: pack_rows_for).
KernelConfig native_config(const std::string& pipeline, const std::string& schedule, int block_m, int warps) {
  KernelConfig c;
  c.pipeline = pipeline;
  c.head_dim = 128;
  c.block_m = block_m;
  c.block_n = pipeline == "mma" && schedule != "decode" ? 64 : 128;
  c.warps = warps;
  c.qk = c.pv = "native";
  c.schedule = schedule;
  return c;
}
AttnProblem gqa_call(int hq, int hkv, int nq, int nkv) {
  AttnProblem p;
  p.batch = 1;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = nq;
  p.seq_kv = nkv;
  p.head_dim = 128;
  p.causal = true;
  return p;
}

TEST(PackRows, GroupsThatDoNotFillTheTilePackWhereTheKernelIdlesTheWarpsPastThem) {
  // 4 draft tokens of Qwen2.5 7B's 7:1 group: 7 heads at 16 rows of a 128-row tile. The native
  // mma.sync kernel of 8 warps (16 rows each) and persistent_split idle the last warp; the other
  // persistent schedules pack only groups that fill the tile. (Commit 02d7f5f had the mma.sync
  // kernel ask for a full tile, and it stopped packing these.)
  const AttnProblem qwen = gqa_call(28, 4, 4, 5000);
  EXPECT_EQ(pack_rows_for(native_config("mma", "plain", 128, 8), qwen), 16);
  EXPECT_EQ(pack_rows_for(native_config("wgmma", "persistent_split", 128, 0), qwen), 16);
  EXPECT_EQ(pack_rows_for(native_config("wgmma", "persistent_pingpong", 128, 0), qwen), 0);
  // A 4:1 group fills the tile at 32 rows a head: every one of them packs.
  const AttnProblem llama = gqa_call(32, 8, 4, 5000);
  EXPECT_EQ(pack_rows_for(native_config("mma", "plain", 128, 8), llama), 32);
  EXPECT_EQ(pack_rows_for(native_config("wgmma", "persistent_pingpong", 128, 0), llama), 32);
  // The mma.sync kernel of 4 warps (32 rows each) needs whole warps a head: 16 rows do not.
  EXPECT_EQ(pack_rows_for(native_config("mma", "plain", 128, 4), qwen), 0);
  // The decode schedule's own rule (7 heads of 4 queries: 4 heads a 16-row tile).
  EXPECT_EQ(pack_rows_for(native_config("mma", "decode", 16, 8), qwen), 4);
}

// Variable-length queries: the plain kernels run each sequence's tiles whole (no packing); over a
// paged cache the mma.sync kernels keep the paged call's grid, and pack the group as they would
// for the longest sequence's queries.
TEST(PackRows, VariableLengthQueriesPackOnlyOnTheMmaSyncKernelsOverAPagedCache) {
  AttnProblem qwen = gqa_call(28, 4, 4, 5000);
  qwen.varlen = true;
  qwen.layout = Layout::NHD;
  qwen.total_q = 40;
  EXPECT_EQ(pack_rows_for(native_config("mma", "plain", 128, 8), qwen), 0);
  EXPECT_EQ(pack_rows_for(native_config("mma", "decode", 16, 8), qwen), 0);
  qwen.paged = true;
  qwen.page_size = 16;
  EXPECT_EQ(pack_rows_for(native_config("mma", "plain", 128, 8), qwen), 16);
  EXPECT_EQ(pack_rows_for(native_config("mma", "decode", 16, 8), qwen), 4);
  EXPECT_EQ(pack_rows_for(native_config("wgmma", "persistent_split", 128, 0), qwen), 0);
}

// Variable-length queries over a paged cache: the bands of sequences that run on the decode kernel
// before the longest's kernel (launch.h: decode_bands).
TEST(DecodeBands, DecodingSequencesRunOnTheDecodeKernelInBandsOfQueries) {
  auto bands = [](const KernelConfig& c, int seq_q, int edge, int forced = -1) {
    std::string s;
    for (const QueryBand& b : decode_bands(c, seq_q, edge, forced)) s += cat(s.empty() ? "" : " ", b.lo, "-", b.hi);
    return s;
  };
  KernelConfig wgmma64 = native_config("wgmma", "plain", 128, 0);
  wgmma64.head_dim = 64;
  const KernelConfig wgmma128 = native_config("wgmma", "plain", 64, 0);
  const KernelConfig mma = native_config("mma", "plain", 64, 4);
  // The defaults' edge; at head dim 64 before a wgmma kernel also 5 to 8 queries.
  EXPECT_EQ(bands(wgmma128, 512, 4), "1-4");
  EXPECT_EQ(bands(wgmma64, 512, 4), "1-4 5-8");
  EXPECT_EQ(bands(mma, 40, 4), "1-4");
  EXPECT_EQ(bands(mma, 40, 1), "1-1");
  // The bands end below the longest sequence's queries (its kernel takes it).
  EXPECT_EQ(bands(wgmma64, 6, 4), "1-4 5-5");
  EXPECT_EQ(bands(wgmma64, 5, 4), "1-4");
  EXPECT_EQ(bands(wgmma128, 3, 4), "1-2");
  EXPECT_EQ(bands(wgmma128, 1, 4), "");
  // No decode kernel (edge 0), the decode kernel itself selected, or forced off: none.
  EXPECT_EQ(bands(wgmma64, 512, 0), "");
  EXPECT_EQ(bands(native_config("mma", "decode", 16, 8), 512, 4), "");
  EXPECT_EQ(bands(wgmma64, 512, 4, 0), "");
  // Forced (SAGE_DECODE_PART, bench --decode-part): one band of that many.
  EXPECT_EQ(bands(wgmma128, 512, 4, 16), "1-16");
  EXPECT_EQ(bands(wgmma128, 9, 4, 16), "1-8");
}

TEST(PackRows, NothingPacksForMhaQuantizedKernelsOrWhenTurnedOff) {
  const AttnProblem qwen = gqa_call(28, 4, 4, 5000);
  EXPECT_EQ(pack_rows_for(native_config("mma", "plain", 128, 8), gqa_call(32, 32, 4, 5000)), 0);  // MHA
  KernelConfig quantized = native_config("wgmma", "persistent_split", 128, 0);
  quantized.qk = "int8";
  quantized.pv = "fp8";
  EXPECT_EQ(pack_rows_for(quantized, qwen), 0);
  EXPECT_EQ(pack_rows_for(native_config("mma", "plain", 128, 8), qwen, 0), 0);  // SAGE_PACK_HEADS=0
  // The persistent kernels pack where the call has at least 8 (batch, kv head) pairs or 128 of
  // their key tiles (pack_pays): 4 kv heads over 2K keys (64 tiles) do not, unless forced.
  const AttnProblem short_call = gqa_call(28, 4, 4, 2048);
  EXPECT_EQ(pack_rows_for(native_config("wgmma", "persistent_split", 128, 0), short_call), 0);
  EXPECT_EQ(pack_rows_for(native_config("wgmma", "persistent_split", 128, 0), short_call, 2), 16);
}

}  // namespace
}  // namespace sage
