// Decoding's split in thread block clusters (launch.h: choose_split_clusters): the cluster size
// and the ranges a unit, from the work, the GPU's resident CTAs and clusters, and the bytes a
// member hands its leader. That the kernel then merges every range's rows exactly once is
// checked on the GPU (kernels/gpu_test_mma_attention.cpp, SplitKeysOfFewQueryTiles...).
#include <gtest/gtest.h>

#include <random>

#include "sage/internal/launch.h"

namespace sage {
namespace {

// The H100's persistent_split kernels at 193 KiB a CTA: 132 CTAs at once, and as many
// clusters of 2, 4 and 8 as its GPCs hold (cuOccupancyMaxActiveClusters on the H100).
constexpr std::array<int, 3> kH100Clusters = {66, 31, 15};

// One query of each of a kv head's g query heads (packed 32 rows a head: one row of queries in
// each of g warps) over `keys` keys, D=128, 128-key tiles, a two-stage ring.
SplitClusterInputs decoding(std::int64_t units, int keys, int rows_a_cta, std::int64_t l2_ranges) {
  SplitClusterInputs in;
  in.units = units;
  in.tiles = (keys + 127) / 128;
  in.slots = 132;
  in.row_bytes = std::int64_t(rows_a_cta) * 4 * (128 + 16);
  in.ring_bytes = 2 * 2 * 128 * 128 * 2;
  in.max_clusters = kH100Clusters;
  in.l2_ranges = l2_ranges;
  return in;
}

// The launcher's choice for `in`: clusters of `cluster` CTAs, `ranges` a unit.
void expect_choice(const SplitClusterInputs& in, int cluster, int ranges) {
  const SplitClusters s = choose_split_clusters(in);
  EXPECT_EQ(s.cluster, cluster) << "units " << in.units << ", tiles " << in.tiles;
  EXPECT_EQ(s.ranges_per_unit, ranges) << "units " << in.units << ", tiles " << in.tiles;
}

TEST(SplitClusters, OneQueryOfAGqaGroupTakesClustersOfEight) {
  // Llama 3 8B, one token over 32K keys: 8 units; 15 clusters of 8 resident, so 15 ranges a
  // unit (120 CTAs), where the merge through L2 cuts 128 ranges (16 a unit).
  expect_choice(decoding(8, 32768, 4, 128), 8, 15);
  // 4K keys (32 tiles): ranges of at least 4 tiles, 8 a unit.
  expect_choice(decoding(8, 4096, 4, 45), 8, 8);
  // 2K keys (16 tiles): ranges of 2 tiles, where that makes no more than 8 a unit.
  expect_choice(decoding(8, 2048, 4, 0), 8, 8);
  // 512 and 768 keys (4 and 6 tiles): ranges of one tile, 32 and 48 CTAs.
  expect_choice(decoding(8, 512, 4, 0), 8, 4);  // clusters holding two units' ranges
  expect_choice(decoding(8, 768, 4, 0), 8, 6);
  // 1K keys (8 tiles): one-tile ranges would make 64 CTAs; 2-tile ones, 4 a unit.
  expect_choice(decoding(8, 1024, 4, 0), 8, 4);
  // Two sequences over 512 keys: 16 units, so 2-tile ranges.
  expect_choice(decoding(16, 512, 4, 0), 8, 2);
  // 256 and 384 keys (2 and 3 tiles): one range a unit, so no clusters.
  EXPECT_EQ(choose_split_clusters(decoding(8, 256, 4, 0)).cluster, 0);
  EXPECT_EQ(choose_split_clusters(decoding(8, 384, 4, 0)).cluster, 0);
}

TEST(SplitClusters, TheLargestSizeWithinAnEighthOfTheMostRanges) {
  // Two sequences of a 4:1 group over 16K keys: 16 units, 8 ranges a unit fit 132 CTAs; clusters
  // of 8 and 4 run 7 (15 x 8 / 16, 31 x 4 / 16), of 2 run 8: within an eighth, so clusters of 8.
  expect_choice(decoding(16, 16384, 4, 132), 8, 7);
}

TEST(SplitClusters, ManyUnitsTakeClustersOfTwo) {
  // One query of 32 MHA heads over 32K keys: 4 ranges a unit fit 132 CTAs; clusters of 8 or 4
  // would run only 3 (15 x 8 / 32, 31 x 4 / 32).
  expect_choice(decoding(32, 32768, 1, 132), 2, 4);
}

TEST(SplitClusters, RowsThatDoNotFitTheRingOrTooFewRangesKeepTheMergeThroughL2) {
  // 16 causal queries of an 8:1 group: 128 rows a CTA (72 KiB) fit the 128 KiB ring only once
  // (clusters of 2, at most 4 clusters' worth: 8 ranges a unit), where the merge through L2
  // cuts 16 a unit.
  EXPECT_EQ(choose_split_clusters(decoding(8, 32768, 128, 128)).cluster, 0);
  // The same where L2 would cut no more ranges than clusters of 2 give: clusters.
  expect_choice(decoding(8, 4096, 128, 64), 2, 8);
  // No cluster fits the GPU (or SAGE_SPLIT_CLUSTERS=0 left them all at 0).
  SplitClusterInputs none = decoding(8, 32768, 4, 128);
  none.max_clusters = {0, 0, 0};
  EXPECT_EQ(choose_split_clusters(none).cluster, 0);
  // More units than half the CTAs: no range a unit to spare.
  EXPECT_EQ(choose_split_clusters(decoding(100, 32768, 4, 132)).cluster, 0);
}

TEST(SplitClusters, ChoicesKeepTheKernelsInvariants) {
  std::mt19937 rng(20261126);
  int chosen = 0;
  for (int i = 0; i < 20000; ++i) {
    SplitClusterInputs in;
    in.units = 1 + rng() % 80;
    in.tiles = 1 + rng() % 600;
    in.slots = 1 + rng() % 300;
    in.row_bytes = std::int64_t(1 + rng() % 128) * 4 * (64 + 16 * int(rng() % 5));
    in.ring_bytes = std::int64_t(32 << (rng() % 3)) * 1024;
    for (int& m : in.max_clusters) m = int(rng() % 80);
    in.l2_ranges = rng() % 300;
    const SplitClusters s = choose_split_clusters(in);
    if (s.cluster == 0) continue;
    ++chosen;
    SCOPED_TRACE(::testing::Message() << "units " << in.units << " tiles " << in.tiles << " slots " << in.slots
                                      << " cluster " << s.cluster << " ranges " << s.ranges_per_unit);
    const std::size_t i_c = s.cluster == 2 ? 0 : s.cluster == 4 ? 1 : 2;
    ASSERT_TRUE(s.cluster == 2 || s.cluster == 4 || s.cluster == 8);
    EXPECT_GE(s.ranges_per_unit, 2);
    // Every CTA resident at once, in whole clusters (a CTA waits for others).
    const std::int64_t ctas = in.units * s.ranges_per_unit;
    EXPECT_LE(ctas, in.slots);
    EXPECT_LE((ctas + s.cluster - 1) / s.cluster, in.max_clusters[i_c]);
    // The members' rows fit the leader's ring.
    EXPECT_LE((s.cluster - 1) * in.row_bytes, in.ring_bytes);
    // Every range at least 2 key tiles (one where a unit has 4 to 8 and there are at most 48
    // CTAs), and at least 4 where a unit has more than 8 ranges.
    const bool one_tile = in.tiles >= 4 && in.tiles <= 8 && in.units * in.tiles <= 48;
    EXPECT_EQ(one_tile, cluster_one_tile_ranges(in.units, in.tiles));
    EXPECT_LE(s.ranges_per_unit * (one_tile ? 1 : 2), in.tiles);
    if (s.ranges_per_unit > kClusterShortRanges) {
      EXPECT_LE(s.ranges_per_unit * kClusterMinTiles, in.tiles);
    }
    // At most kClusterMaxSpan clusters' worth a unit: the owner merges at most three leaders.
    EXPECT_LE(s.ranges_per_unit, kClusterMaxSpan * s.cluster);
    // Not clearly fewer ranges than the merge through L2 would cut: the most any size runs at
    // least 7/8 of those, and the chosen size 7/8 of the most.
    EXPECT_GE(ctas * 64, in.l2_ranges * 49);
  }
  EXPECT_GT(chosen, 1000);
}

// Decoding's share merge (launch.h: choose_share_ranges): units of at least 8K keys (64 tiles
// of 128) cut into ranges of at least 4 tiles, as many as one wave holds, where that makes at
// least 8 a unit.
TEST(ShareMerge, FewUnitsOfManyKeysFillTheWave) {
  EXPECT_EQ(choose_share_ranges(1, 1024, 132), 132);  // one unit over 128K keys: every CTA
  EXPECT_EQ(choose_share_ranges(1, 256, 132), 64);    // 32K keys: ranges of 4 tiles
  EXPECT_EQ(choose_share_ranges(2, 256, 132), 64);    // two units: 128 CTAs
  EXPECT_EQ(choose_share_ranges(4, 64, 132), 16);     // 8K keys
  EXPECT_EQ(choose_share_ranges(8, 256, 132), 16);    // 8 units: the wave's share
  EXPECT_EQ(choose_share_ranges(1, 256, 132, 2), 128);  // SAGE_SPLIT_SHARE_TILES=2
}

TEST(ShareMerge, ShortKeysAndManyUnitsKeepTheOwnersMerge) {
  EXPECT_EQ(choose_share_ranges(1, 63, 132), 0);  // under 8K keys
  EXPECT_EQ(choose_share_ranges(1, 32, 132), 0);  // 4K keys (the owner's merge measured level or faster)
  EXPECT_EQ(choose_share_ranges(1, 16, 132), 0);  // 2K keys
  EXPECT_EQ(choose_share_ranges(32, 64, 132), 0);  // 32 units: 4 ranges each (measured slower)
  EXPECT_EQ(choose_share_ranges(17, 256, 132), 0); // 7 ranges each
  EXPECT_EQ(choose_share_ranges(16, 256, 132), 8);
  EXPECT_EQ(choose_share_ranges(0, 256, 132), 0);
}

TEST(ShareMerge, ChoicesKeepTheKernelsInvariants) {
  std::mt19937 rng(20261127);
  int chosen = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::int64_t units = 1 + rng() % 80, tiles = 1 + rng() % 4000, slots = 1 + rng() % 300;
    const int r = choose_share_ranges(units, tiles, slots);
    if (r == 0) continue;
    ++chosen;
    SCOPED_TRACE(::testing::Message() << "units " << units << " tiles " << tiles << " slots " << slots << " ranges " << r);
    EXPECT_LE(units * r, slots) << "every range resident at once: mergers wait for every range";
    EXPECT_GE(r, kShareMinRanges);
    EXPECT_LE(r * kShareMinTiles, tiles) << "every range at least kShareMinTiles tiles";
    EXPECT_LT(units * tiles * units * r, std::int64_t(1) << 31) << "the kernel's range arithmetic is 32-bit";
  }
  EXPECT_GT(chosen, 1000);
}

}  // namespace
}  // namespace sage
