// Damaged databases: a garbage or truncated file, a damaged page, an altered cubin. Each is
// detected, reported, the bad part moved aside (file) or quarantined (cubin), and the caller
// carries on; nothing crashes and read-only databases are never modified.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "store_fixtures.h"

using namespace sage;
using namespace sage::tuner;
using namespace sage::test;
using ::testing::HasSubstr;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string garbage(std::size_t n) {
  std::string g(n, '\0');
  for (std::size_t i = 0; i < n; ++i) g[i] = char((i * 131 + 7) & 0xff);
  return g;
}

std::vector<std::string> corrupt_copies(const TempDir& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().find(".corrupt-") != std::string::npos &&
        e.path().extension() != ".db-wal" && e.path().string().find("-wal") == std::string::npos)
      out.push_back(e.path().string());
  return out;
}

// Flips bytes of one cubin inside the file, behind the store's back (bound parameters).
void tamper_cubin(const std::string& path, const std::string& hash) {
  RawDb raw(path);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw.get(), "UPDATE kernels SET cubin = ? WHERE hash = ?", -1, &st, nullptr), SQLITE_OK);
  std::string bad = kernel(0).cubin;
  bad[100] ^= 0x5a;
  bad[2000] ^= 0x01;
  sqlite3_bind_blob(st, 1, bad.data(), int(bad.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, hash.c_str(), -1, SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
  ASSERT_EQ(sqlite3_changes(raw.get()), 1);
  sqlite3_finalize(st);
}

// A database with a winner, its kernel and measurements, plus `extra` more 64 KiB kernels
// written last (so that they sit at the end of the file).
void populate(const std::string& path, int extra) {
  Store s(path);
  KernelRecord k = kernel(0);
  s.record_kernel(k);
  s.record_measurement(measurement(k, 100.0));
  s.set_winner(winner(k, 100.0));
  s.set_winner(winner(k, 120.0, winner_key(h100(), problem(8192))));
  s.set_winner(winner(k, 60.0, winner_key(h100(), problem(1024))));
  for (int i = 1; i <= extra; ++i) s.record_kernel(kernel(i, 64 * 1024));
}

}  // namespace

// ---- whole-file corruption ------------------------------------------------------------------

TEST(StoreCorruption, GarbageFile_IsReportedMovedAsideAndReplaced) {
  TempDir dir;
  std::string path = dir.file("tune.db");
  std::string junk = garbage(10000);
  write_bytes(path, junk);
  WarningSink sink;
  Store s(path, sink.options());
  EXPECT_TRUE(s.report().rebuilt);
  EXPECT_FALSE(s.report().corruption.empty());
  ASSERT_FALSE(s.report().moved_to.empty());
  EXPECT_THAT(s.report().moved_to, HasSubstr(path + ".corrupt-"));
  EXPECT_EQ(file_bytes(s.report().moved_to), junk);  // kept for inspection, byte for byte
  EXPECT_TRUE(sink.contains("is corrupt"));
  EXPECT_TRUE(sink.contains(s.report().moved_to));
  // The caller continues on a fresh database.
  s.record_kernel(kernel(1));
  EXPECT_EQ(s.counts().kernels, 1);
  EXPECT_EQ(check_health(path).state, StoreHealth::State::ok);
}

TEST(StoreCorruption, TruncatedFile_IsDetectedRebuiltAndEarlyRowsSalvaged) {
  TempDir dir;
  std::string path = dir.file("tune.db");
  populate(path, 30);
  auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  WarningSink sink;
  Store s(path, sink.options());
  ASSERT_TRUE(s.report().rebuilt);
  EXPECT_EQ(fs::file_size(s.report().moved_to), size / 2);
  EXPECT_GT(s.report().salvaged_rows, 0);
  // The winners were written first, so their rows lie in the surviving half.
  EXPECT_EQ(s.counts().winners, 3);
  EXPECT_TRUE(s.winner(winner_key()));
  EXPECT_TRUE(s.verify_kernels().empty());  // whatever was salvaged is intact
  EXPECT_LT(s.counts().kernels, 31);
  EXPECT_EQ(RawDb(path).scalar("PRAGMA integrity_check"), "ok");
}

TEST(StoreCorruption, DamagedPage_IsDetectedAndReadableRowsSalvaged) {
  TempDir dir;
  std::string path = dir.file("tune.db");
  populate(path, 40);
  // Overwrite the last two pages (overflow pages of the last cubin): their chain pointers
  // become invalid, which quick_check reports.
  auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(size - 8192));
    std::string ff(8192, '\xff');
    f.write(ff.data(), std::streamsize(ff.size()));
  }
  WarningSink sink;
  Store s(path, sink.options());
  ASSERT_TRUE(s.report().rebuilt) << "damage not detected";
  EXPECT_GE(s.report().dropped_rows, 1);
  EXPECT_EQ(s.counts().winners, 3);
  EXPECT_EQ(s.counts().measurements, 1);
  StoreCounts c = s.counts();
  EXPECT_GE(c.kernels, 39);  // all but the damaged one (its index page may go too)
  EXPECT_LE(c.kernels, 40);
  EXPECT_TRUE(s.verify_kernels().empty());
  EXPECT_TRUE(sink.contains("salvaged"));
}

TEST(StoreCorruption, ReadOnlyOpenOfCorruptFile_FailsClearlyAndTouchesNothing) {
  TempDir dir;
  std::string path = dir.file("tune.db");
  std::string junk = garbage(5000);
  write_bytes(path, junk);
  OpenOptions o;
  o.read_only = true;
  try {
    Store s(path, o);
    FAIL() << "opened a garbage file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::corrupt);
    EXPECT_EQ(e.where(), path);
    EXPECT_THAT(e.message(), HasSubstr("db repair"));
  }
  EXPECT_EQ(file_bytes(path), junk);
  EXPECT_TRUE(corrupt_copies(dir).empty());
}

TEST(StoreCorruption, OnCorruptFail_ThrowsAndLeavesTheFile) {
  TempDir dir;
  std::string path = dir.file("tune.db");
  populate(path, 4);
  fs::resize_file(path, fs::file_size(path) / 2);
  OpenOptions o;
  o.on_corrupt = OnCorrupt::fail;
  try {
    Store s(path, o);
    FAIL() << "opened a truncated file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::corrupt);
  }
  EXPECT_TRUE(corrupt_copies(dir).empty());
}

TEST(StoreCorruption, CorruptUserDbDuringLookup_IsRebuiltAndTheLookupMisses) {
  TempDir dir;
  write_bytes(dir.file("user.db"), garbage(3000));
  LookupOptions o;
  o.user_db = dir.file("user.db");
  o.system_db = dir.file("system.db");
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& m) { warnings.push_back(m); };
  LookupResult r = find_winner(winner_key(), o);
  EXPECT_EQ(r.status, LookupResult::Status::miss);
  ASSERT_FALSE(warnings.empty());
  EXPECT_THAT(warnings[0], HasSubstr("is corrupt"));
  EXPECT_EQ(corrupt_copies(dir).size(), 1u);
}

TEST(StoreCorruption, CorruptSystemDb_IsReportedIgnoredAndNotModified) {
  TempDir dir;
  std::string junk = garbage(4096);
  write_bytes(dir.file("system.db"), junk);
  KernelRecord k = kernel(0);
  {
    Store u(dir.file("user.db"));
    u.record_kernel(k);
    u.set_winner(winner(k, 100.0));
  }
  LookupOptions o;
  o.user_db = dir.file("user.db");
  o.system_db = dir.file("system.db");
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& m) { warnings.push_back(m); };
  WinnerLookup lookup(o);
  EXPECT_EQ(lookup.system(), nullptr);
  ASSERT_EQ(lookup.warnings().size(), 1u);
  EXPECT_THAT(lookup.warnings()[0], HasSubstr("system database ignored"));
  LookupResult r = lookup.find(winner_key());
  EXPECT_EQ(r.status, LookupResult::Status::found);
  EXPECT_EQ(file_bytes(dir.file("system.db")), junk);
  EXPECT_TRUE(corrupt_copies(dir).empty());
}

// ---- cubin corruption -----------------------------------------------------------------------------

TEST(StoreCorruption, AlteredCubin_ChecksumMismatchIsReportedAndQuarantined) {
  TempDir dir;
  std::string path = dir.file("tune.db");
  KernelRecord k = kernel(0);
  {
    Store s(path);
    s.record_kernel(k);
  }
  tamper_cubin(path, k.hash);
  WarningSink sink;
  Store s(path, sink.options());
  try {
    s.kernel(k.hash);
    FAIL() << "damaged cubin returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::corrupt);
    EXPECT_THAT(e.message(), HasSubstr(k.hash));
    EXPECT_THAT(e.message(), HasSubstr("checksum mismatch"));
    EXPECT_THAT(e.message(), HasSubstr("quarantine"));
  }
  EXPECT_FALSE(s.has_kernel(k.hash));
  auto q = s.quarantined();
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].hash, k.hash);
  EXPECT_EQ(q[0].stored_sha256, sha256_hex(k.cubin));
  EXPECT_NE(q[0].actual_sha256, q[0].stored_sha256);
  EXPECT_EQ(q[0].cubin_bytes, std::int64_t(k.cubin.size()));
  EXPECT_TRUE(sink.contains("quarantine"));
  EXPECT_FALSE(s.kernel(k.hash));  // now simply missing
}

TEST(StoreCorruption, AlteredCubin_LookupSaysRebuildAndReinsertRepairs) {
  TempDir dir;
  std::string path = dir.file("user.db");
  KernelRecord k = kernel(0);
  {
    Store s(path);
    s.record_kernel(k);
    s.set_winner(winner(k, 100.0));
  }
  tamper_cubin(path, k.hash);
  LookupOptions o;
  o.user_db = path;
  o.system_db = dir.file("none.db");
  o.warn = [](const std::string&) {};
  LookupResult r = find_winner(winner_key(), o);
  ASSERT_EQ(r.status, LookupResult::Status::needs_rebuild);
  EXPECT_EQ(r.winner->variant, k.variant);
  EXPECT_THAT(r.message, HasSubstr("checksum mismatch"));
  EXPECT_FALSE(r.kernel);

  // A second lookup finds the entry quarantined: still a rebuild, not an error.
  r = find_winner(winner_key(), o);
  EXPECT_EQ(r.status, LookupResult::Status::needs_rebuild);
  EXPECT_THAT(r.message, HasSubstr("no database holds it"));

  // The caller recompiles and stores the kernel again: the lookup is whole again.
  {
    Store s(path);
    s.record_kernel(k);
    EXPECT_EQ(s.quarantined().size(), 1u);  // history of the damage stays until gc
  }
  r = find_winner(winner_key(), o);
  ASSERT_EQ(r.status, LookupResult::Status::found) << r.message;
  EXPECT_EQ(r.kernel->cubin, k.cubin);
}

TEST(StoreCorruption, AlteredCubinInReadOnlyDb_IsReportedAndLeftInPlace) {
  TempDir dir;
  std::string path = dir.file("system.db");
  KernelRecord k = kernel(0);
  {
    Store s(path);
    s.record_kernel(k);
    s.set_winner(winner(k, 100.0));
  }
  tamper_cubin(path, k.hash);
  std::string before = file_bytes(path);
  LookupOptions o;
  o.user_db = dir.file("none.db");
  o.system_db = path;
  LookupResult r = find_winner(winner_key(), o);
  EXPECT_EQ(r.status, LookupResult::Status::needs_rebuild);
  EXPECT_THAT(r.message, HasSubstr("read-only"));
  EXPECT_EQ(file_bytes(path), before);
}

TEST(StoreCorruption, VerifyKernels_QuarantinesEveryDamagedCubin) {
  TempDir dir;
  std::string path = dir.file("tune.db");
  {
    Store s(path);
    for (int i = 0; i < 5; ++i) s.record_kernel(kernel(i));
  }
  tamper_cubin(path, kernel(1).hash);
  tamper_cubin(path, kernel(3).hash);
  WarningSink sink;
  Store s(path, sink.options());
  auto bad = s.verify_kernels();
  std::vector<std::string> expected = {kernel(1).hash, kernel(3).hash};
  std::sort(expected.begin(), expected.end());  // verify_kernels goes in hash order
  EXPECT_EQ(bad, expected);
  EXPECT_EQ(s.counts().kernels, 3);
  EXPECT_EQ(s.counts().quarantined, 2);
  EXPECT_TRUE(s.verify_kernels().empty());
}

// ---- health -------------------------------------------------------------------------------------

TEST(StoreHealthCheck, ReportsEachStateWithoutModifyingTheFile) {
  TempDir dir;
  EXPECT_EQ(check_health(dir.file("none.db")).state, StoreHealth::State::missing);
  EXPECT_FALSE(fs::exists(dir.file("none.db")));

  std::string good = dir.file("good.db");
  populate(good, 2);
  StoreHealth h = check_health(good);
  EXPECT_TRUE(h.ok()) << h.message;
  EXPECT_EQ(h.schema_version, 2);
  EXPECT_EQ(h.journal_mode, "wal");
  EXPECT_EQ(h.counts.kernels, 3);
  EXPECT_EQ(h.counts.winners, 3);
  EXPECT_FALSE(h.needs_migration);

  std::string junk = dir.file("junk.db");
  write_bytes(junk, garbage(2048));
  h = check_health(junk);
  EXPECT_EQ(h.state, StoreHealth::State::corrupt);
  EXPECT_FALSE(h.message.empty());
  EXPECT_EQ(file_bytes(junk), garbage(2048));

  tamper_cubin(good, kernel(0).hash);
  EXPECT_TRUE(check_health(good).ok());  // quick check does not read cubins
  h = check_health(good, /*full=*/true);
  EXPECT_EQ(h.state, StoreHealth::State::corrupt);
  EXPECT_EQ(h.corrupt_kernels, 1);
  EXPECT_THAT(h.message, HasSubstr("checksum"));

  std::string foreign = dir.file("foreign.db");
  RawDb(foreign).exec("CREATE TABLE t (x)");
  EXPECT_EQ(check_health(foreign).state, StoreHealth::State::foreign);

  std::string newer = dir.file("newer.db");
  { Store s(newer); }
  RawDb(newer).exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  h = check_health(newer);
  EXPECT_EQ(h.state, StoreHealth::State::too_new);
  EXPECT_THAT(h.message, HasSubstr("newer"));
}
