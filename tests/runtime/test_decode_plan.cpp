// The decode schedule's launch plan (launch.h: decode_pack_rows, decode_split_ranges): which GQA
// groups pack into a 16-row tile, and how a tile's keys are cut into ranges.
#include <gtest/gtest.h>

#include "sage/internal/launch.h"

namespace sage {
namespace {

TEST(DecodePlan, AnyGroupOfUpToTheTileRowsPacksAtTileRowsOverGroupRowsAHead) {
  EXPECT_EQ(decode_pack_rows(16, 4, 1), 4);   // Llama 3 8B: 4 rows a head
  EXPECT_EQ(decode_pack_rows(16, 7, 1), 2);   // Qwen2.5 7B: 7 heads at 2 rows, 14 of 16 rows used
  EXPECT_EQ(decode_pack_rows(16, 5, 2), 3);   // two queries of a group of 5 fit 3 rows a head
  EXPECT_EQ(decode_pack_rows(16, 16, 1), 1);  // a group of 16 at one row each
  EXPECT_EQ(decode_pack_rows(16, 17, 1), 0);  // past the tile's rows: a head a tile
  EXPECT_EQ(decode_pack_rows(16, 4, 5), 0);   // 5 queries of a 4:1 group need 20 rows
  EXPECT_EQ(decode_pack_rows(16, 1, 1), 0);   // MHA: nothing to pack
  EXPECT_EQ(decode_pack_rows(32, 8, 4), 4);
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

}  // namespace
}  // namespace sage
