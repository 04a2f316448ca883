// FP8 pages' conversion map (templates/include/sage/fp8_chunks.h), on the host: which FP8 chunk of
// a tile each converting thread takes. convert_tile8 (the wgmma entries) and Fp8Pages (the mma.sync
// entries) index their chunks through it; the shared-memory pipe serves 16-byte accesses a
// quarter-warp at a time, in one pass only where the quarter-warp's 8 chunks sit on 8 different
// 16-byte positions of a 128-byte line. These tests replay the kernels' address arithmetic.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sage/fp8_chunks.h"

namespace {

struct Chunk {
  int r, k;
};

// The map of a tile of `rows` rows of CPR chunks, each index by both spellings (which must agree).
template <int CPR>
std::vector<Chunk> map_of(int rows) {
  std::vector<Chunk> m;
  for (int i = 0; i < rows * CPR; ++i) {
    int r = -1, k = -1;
    sage::fp8_chunks::place<CPR>(i, r, k);
    EXPECT_EQ(sage::fp8_chunks::row_of<CPR>(i), r) << "CPR " << CPR << " index " << i;
    EXPECT_EQ(sage::fp8_chunks::chunk_of<CPR>(i), k) << "CPR " << CPR << " index " << i;
    m.push_back({r, k});
  }
  return m;
}

// Distinct 16-byte positions of a 128-byte line among `pos`.
int groups(const std::vector<int>& pos) { return int(std::set<int>(pos.begin(), pos.end()).size()); }

// For every quarter-warp (8 consecutive indices): the FP8 reads (rows of 16 CPR bytes, in order)
// and the two FP16 stores (chunks 2k, then 2k + 1, of 128-byte rows XORed by the row % 8: the
// wgmma tiles' 128B swizzle and the mma.sync tiles' swz alike) each meet 8 groups.
template <int CPR>
void expect_conflict_free(int rows) {
  const std::vector<Chunk> m = map_of<CPR>(rows);
  for (std::size_t q = 0; q < m.size(); q += 8) {
    std::vector<int> rd, st0, st1;
    for (std::size_t i = q; i < q + 8; ++i) {
      rd.push_back(((m[i].r * CPR + m[i].k) * 16 % 128) / 16);
      st0.push_back(((2 * m[i].k) % 8) ^ (m[i].r & 7));
      st1.push_back(((2 * m[i].k + 1) % 8) ^ (m[i].r & 7));
    }
    const std::string at = "CPR " + std::to_string(CPR) + ", quarter-warp of indices " + std::to_string(q);
    EXPECT_EQ(groups(rd), 8) << at << ": FP8 reads";
    EXPECT_EQ(groups(st0), 8) << at << ": first FP16 stores";
    EXPECT_EQ(groups(st1), 8) << at << ": second FP16 stores";
  }
}

}  // namespace

// Every (row, chunk) of the tile exactly once, rows within the tile: at head dims 64, 128 and 256
// (4, 8 and 16 chunks a row) for the tiles of the search space (16 to 128 rows).
TEST(Fp8Chunks, MapEveryChunkOfATileOnce) {
  auto check = [](auto cpr_tag, int rows) {
    constexpr int CPR = decltype(cpr_tag)::value;
    std::set<std::pair<int, int>> seen;
    for (const Chunk& c : map_of<CPR>(rows)) {
      EXPECT_GE(c.r, 0);
      EXPECT_LT(c.r, rows);
      EXPECT_GE(c.k, 0);
      EXPECT_LT(c.k, CPR);
      seen.insert({c.r, c.k});
    }
    EXPECT_EQ(int(seen.size()), rows * CPR) << "CPR " << CPR << ", " << rows << " rows";
  };
  for (int rows : {16, 32, 64, 128}) {
    check(std::integral_constant<int, 4>{}, rows);
    check(std::integral_constant<int, 8>{}, rows);
    check(std::integral_constant<int, 16>{}, rows);
  }
}

// The point of the map: one pass of the shared-memory pipe for each of a quarter-warp's accesses.
TEST(Fp8Chunks, QuarterWarpsReadAndStoreOnEightBankGroups) {
  for (int rows : {16, 64, 128}) {
    expect_conflict_free<4>(rows);
    expect_conflict_free<8>(rows);
    expect_conflict_free<16>(rows);
  }
}

// Fp8Pages gives each thread one chunk column for all its rows (its cp.async source column), its
// rows ROWS_PER_PASS = threads / CPR apart: a thread's index i + n * threads must keep the chunk
// and move the row by n * ROWS_PER_PASS, for the kernels' 128 and 256 threads.
TEST(Fp8Chunks, AThreadKeepsItsChunkFromPassToPass) {
  auto check = [](auto cpr_tag, int threads) {
    constexpr int CPR = decltype(cpr_tag)::value;
    for (int t = 0; t < threads; ++t)
      for (int n = 1; n < 4; ++n) {
        const int i = t + n * threads;
        EXPECT_EQ(sage::fp8_chunks::chunk_of<CPR>(i), sage::fp8_chunks::chunk_of<CPR>(t)) << CPR << " " << t << " " << n;
        EXPECT_EQ(sage::fp8_chunks::row_of<CPR>(i), sage::fp8_chunks::row_of<CPR>(t) + n * threads / CPR)
            << CPR << " " << t << " " << n;
      }
  };
  for (int threads : {128, 256}) {
    check(std::integral_constant<int, 4>{}, threads);
    check(std::integral_constant<int, 8>{}, threads);
    check(std::integral_constant<int, 16>{}, threads);
  }
}

// What the map replaced (one row's 8 chunks a quarter-warp at head dim 128) fails the same check:
// the test can tell the two apart.
TEST(Fp8Chunks, OneRowAQuarterWarpWouldStoreOnFourGroups) {
  const int r = 5;
  std::vector<int> st0;
  for (int k = 0; k < 8; ++k) st0.push_back(((2 * k) % 8) ^ (r & 7));
  EXPECT_EQ(groups(st0), 4);
}
