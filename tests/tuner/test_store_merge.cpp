// merge_stores: union of databases, winner conflicts resolved by the lower median with the
// margin recomputed, provenance recorded, inputs never modified, bad requests refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store_fixtures.h"

using namespace sage;
using namespace sage::tuner;
using namespace sage::test;
using ::testing::HasSubstr;

namespace {

const WinnerKey kShared = winner_key();                          // tuned in both shards
const WinnerKey kOnlyA = winner_key(h100(), problem(8192));
const WinnerKey kOnlyB = winner_key(a100(), problem(1024, false));

// Shard A: k0 wins the shared key at 100 us (runner-up k1 at 110), plus its own key.
// Shard B: k2 wins the shared key at 95 us (runner-up k0 at 103), plus its own key, and a
// copy of one of A's measurements (same uid) as if B had been seeded from A.
struct Shards {
  TempDir dir;
  std::string a = dir.file("a.db"), b = dir.file("b.db"), out = dir.file("merged.db");
  std::string shared_uid;

  Shards() {
    KernelRecord k0 = kernel(0), k1 = kernel(1), k2 = kernel(2);
    {
      Store s(a);
      s.record_variant({k0.variant, "p0", "{}", kGen, 0});
      s.record_kernel(k0);
      s.record_kernel(k1);
      Measurement m = measurement(k0, 100.0);
      m.uid = shared_uid = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
      s.record_measurement(m);
      s.record_measurement(measurement(k1, 110.0));
      s.record_measurement(measurement(k0, 150.0, h100(), problem(8192)));
      Winner w = winner(k0, 100.0, kShared);
      w.runner_up = k1.variant;
      w.runner_up_median_us = 110.0;
      w.margin = 0.1;
      w.noise = 0.02;
      s.set_winner(w);
      s.set_winner(winner(k0, 150.0, kOnlyA));
    }
    {
      Store s(b);
      s.record_variant({k2.variant, "p2", "{}", kGen, 0});
      s.record_kernel(k1);
      s.record_kernel(k2);
      Measurement copy = measurement(kernel(0), 100.0);
      copy.uid = shared_uid;
      s.record_measurement(copy);
      s.record_measurement(measurement(k2, 95.0));
      s.record_measurement(measurement(k0, 103.0));
      s.record_measurement(measurement(k1, 70.0, a100(), problem(1024, false)));
      Winner w = winner(k2, 95.0, kShared);
      w.runner_up = k0.variant;
      w.runner_up_median_us = 103.0;
      w.margin = 103.0 / 95.0 - 1;
      w.noise = 0.03;
      s.set_winner(w);
      s.set_winner(winner(k1, 70.0, kOnlyB));
    }
  }
  MergeOptions quiet() const {
    MergeOptions o;
    o.warn = [](const std::string&) {};
    return o;
  }
};

template <class F>
Error expect_error(F&& f, Errc code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e;
  }
  ADD_FAILURE() << "no sage::Error thrown";
  return Error(Errc::internal, "none");
}

}  // namespace

TEST(StoreMerge, TwoShards_UnionWithConflictResolvedByLowerMedian) {
  Shards sh;
  std::string a_before = file_bytes(sh.a), b_before = file_bytes(sh.b);
  MergeReport r = merge_stores({sh.a, sh.b}, sh.out, sh.quiet());
  EXPECT_EQ(r.winner_conflicts, 1);
  EXPECT_EQ(r.winners_replaced, 1);
  EXPECT_EQ(r.duplicate_measurements, 1);
  EXPECT_EQ(r.kernels, 3);
  EXPECT_EQ(r.corrupt_kernels_skipped, 0);

  // Inputs are never modified. (Reading a WAL database may leave SQLite's empty -wal and
  // -shm index files beside it; they carry no data.)
  EXPECT_EQ(file_bytes(sh.a), a_before);
  EXPECT_EQ(file_bytes(sh.b), b_before);
  if (fs::exists(sh.a + "-wal")) {
    EXPECT_EQ(fs::file_size(sh.a + "-wal"), 0u);
  }
  // The output is one self-contained file, in rollback-journal mode (ready to ship).
  EXPECT_FALSE(fs::exists(sh.out + "-wal"));
  EXPECT_EQ(RawDb(sh.out, SQLITE_OPEN_READONLY).scalar("PRAGMA journal_mode"), "delete");

  Store c(sh.out);
  StoreCounts n = c.counts();
  EXPECT_EQ(n.devices, 2);
  EXPECT_EQ(n.variants, 2);
  EXPECT_EQ(n.kernels, 3);
  EXPECT_EQ(n.measurements, 3 + 4 - 1);
  EXPECT_EQ(n.winners, 3);
  EXPECT_EQ(n.merges, 2);

  auto w = c.winner(kShared);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->variant, kernel(2).variant);
  EXPECT_DOUBLE_EQ(w->median_us, 95.0);
  // Runner-up over both shards: k0's best is A's 100 us (better than B's 103).
  EXPECT_EQ(w->runner_up, kernel(0).variant);
  EXPECT_DOUBLE_EQ(*w->runner_up_median_us, 100.0);
  EXPECT_NEAR(*w->margin, 100.0 / 95.0 - 1, 1e-12);
  EXPECT_DOUBLE_EQ(w->noise, 0.03);
  EXPECT_FALSE(w->tie);
  EXPECT_EQ(w->source, sh.b);  // provenance: which input it came from

  auto wa = c.winner(kOnlyA);
  ASSERT_TRUE(wa);
  EXPECT_EQ(wa->source, sh.a);
  auto wb = c.winner(kOnlyB);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->variant, kernel(1).variant);

  // Provenance rows name the inputs.
  RawDb raw(sh.out);
  EXPECT_EQ(raw.scalar("SELECT input_path FROM provenance ORDER BY id LIMIT 1"), fs::absolute(sh.a).string());
  EXPECT_EQ(raw.scalar("SELECT winners_replaced FROM provenance ORDER BY id DESC LIMIT 1"), "1");
  // Every winner's kernel made it and verifies.
  for (const auto& x : c.winners()) EXPECT_TRUE(c.kernel(x.kernel_hash)) << x.variant;
}

TEST(StoreMerge, EqualMedians_KeepTheEarlierInputAndMarkATie) {
  TempDir dir;
  KernelRecord k0 = kernel(0), k1 = kernel(1);
  for (auto [path, k] : {std::pair{dir.file("a.db"), k0}, std::pair{dir.file("b.db"), k1}}) {
    Store s(path);
    s.record_kernel(k);
    s.set_winner(winner(k, 100.0));
  }
  MergeReport r = merge_stores({dir.file("a.db"), dir.file("b.db")}, dir.file("c.db"));
  EXPECT_EQ(r.winner_conflicts, 1);
  EXPECT_EQ(r.winners_replaced, 0);
  Store c(dir.file("c.db"));
  auto w = c.winner(winner_key());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->variant, k0.variant);
  EXPECT_EQ(w->runner_up, k1.variant);
  EXPECT_DOUBLE_EQ(*w->margin, 0.0);
  EXPECT_TRUE(w->tie);
}

TEST(StoreMerge, MergingAgain_IsIdempotentForMeasurements) {
  Shards sh;
  merge_stores({sh.a, sh.b}, sh.out, sh.quiet());
  std::string again = sh.dir.file("again.db");
  MergeReport r = merge_stores({sh.out, sh.a}, again, sh.quiet());
  EXPECT_EQ(r.duplicate_measurements, 3);
  Store c(again);
  EXPECT_EQ(c.counts().measurements, 6);
  EXPECT_EQ(c.winner(kShared)->variant, kernel(2).variant);
  EXPECT_EQ(c.winner(kShared)->source, sh.b);  // origin survives a second merge
}

TEST(StoreMerge, RefusesBadRequestsWithoutWritingAnything) {
  Shards sh;
  Error e = expect_error([&] { merge_stores({sh.a, sh.b}, sh.a); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("also an input"));
  e = expect_error([&] { merge_stores({sh.a, sh.dir.file("missing.db")}, sh.out); }, Errc::not_found);
  EXPECT_EQ(e.where(), sh.dir.file("missing.db"));
  EXPECT_FALSE(fs::exists(sh.out));
  expect_error([&] { merge_stores({}, sh.out); }, Errc::invalid_argument);

  std::string junk = sh.dir.file("junk.db");
  {
    std::ofstream f(junk, std::ios::binary);
    f << std::string(4096, 'x');
  }
  e = expect_error([&] { merge_stores({sh.a, junk}, sh.out, sh.quiet()); }, Errc::corrupt);
  EXPECT_EQ(e.where(), junk);
  EXPECT_FALSE(fs::exists(sh.out));
  EXPECT_EQ(file_bytes(junk), std::string(4096, 'x'));  // an input is never "repaired"
  for (auto& entry : fs::directory_iterator(sh.dir.path()))
    EXPECT_EQ(entry.path().string().find(".merge-"), std::string::npos) << "temporary left: " << entry.path();

  // An existing output is kept unless overwriting is asked for.
  merge_stores({sh.a}, sh.out, sh.quiet());
  std::string first = file_bytes(sh.out);
  e = expect_error([&] { merge_stores({sh.a, sh.b}, sh.out, sh.quiet()); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("--force"));
  EXPECT_EQ(file_bytes(sh.out), first);
  MergeOptions force = sh.quiet();
  force.overwrite = true;
  merge_stores({sh.a, sh.b}, sh.out, force);
  EXPECT_EQ(Store(sh.out).counts().winners, 3);
}

TEST(StoreMerge, DamagedCubinInAnInput_IsSkippedAndTheWinnerNeedsRebuild) {
  Shards sh;
  {
    RawDb raw(sh.a);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(raw.get(), "UPDATE kernels SET cubin = zeroblob(4096) WHERE hash = ?", -1, &st, nullptr);
    std::string h = kernel(0).hash;
    sqlite3_bind_text(st, 1, h.c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
  }
  std::string a_before = file_bytes(sh.a);
  std::vector<std::string> warnings;
  MergeOptions o;
  o.warn = [&](const std::string& m) { warnings.push_back(m); };
  MergeReport r = merge_stores({sh.a, sh.b}, sh.out, o);
  EXPECT_EQ(r.corrupt_kernels_skipped, 1);
  ASSERT_FALSE(warnings.empty());
  EXPECT_THAT(warnings[0], HasSubstr(kernel(0).hash));
  EXPECT_EQ(file_bytes(sh.a), a_before);  // read-only input: not quarantined

  LookupOptions lo;
  lo.user_db = sh.out;
  lo.use_system = false;
  LookupResult lr = find_winner(kOnlyA, lo);  // A's own winner uses the damaged k0
  EXPECT_EQ(lr.status, LookupResult::Status::needs_rebuild);
}
