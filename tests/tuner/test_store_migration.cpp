// Schema migration: a database written by schema version 1 opens under the current build,
// keeps its data, gains the new columns and tables, and has its v1 winners' runner-ups
// recovered from the measurements.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "sage/tuner/store_schema.h"
#include "store_fixtures.h"

using namespace sage;
using namespace sage::tuner;
using namespace sage::test;
using ::testing::HasSubstr;

namespace {

// The layout sage-tune wrote at schema version 1, frozen here as a released file format:
// the migration must keep reading it even if someone edits the code's copy by mistake
// (MigrationStepOne_MatchesTheFrozenV1Layout catches that).
const char* kFrozenV1 = R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE devices (
  key            TEXT PRIMARY KEY,
  name           TEXT NOT NULL,
  cc             INTEGER NOT NULL,
  sm_count       INTEGER NOT NULL,
  memory_bytes   INTEGER NOT NULL,
  driver_version INTEGER NOT NULL,
  first_seen     INTEGER NOT NULL
);
CREATE TABLE variants (
  name           TEXT NOT NULL,
  params_hash    TEXT NOT NULL,
  params_json    TEXT NOT NULL,
  generator_hash TEXT NOT NULL,
  created_at     INTEGER NOT NULL,
  PRIMARY KEY (name, params_hash)
);
CREATE TABLE kernels (
  hash           TEXT PRIMARY KEY,
  variant        TEXT NOT NULL,
  arch           TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  generator_hash TEXT NOT NULL,
  cubin          BLOB NOT NULL,
  cubin_sha256   TEXT NOT NULL,
  registers      INTEGER,
  spills         INTEGER,
  smem_bytes     INTEGER,
  compile_ms     REAL,
  created_at     INTEGER NOT NULL
);
CREATE TABLE measurements (
  id             INTEGER PRIMARY KEY,
  device         TEXT NOT NULL REFERENCES devices(key),
  problem        TEXT NOT NULL,
  variant        TEXT NOT NULL,
  kernel_hash    TEXT,
  generator_hash TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  status         TEXT NOT NULL CHECK (status IN ('passed', 'incorrect', 'failed', 'unsupported')),
  cos            REAL,
  rel_l1         REAL,
  rmse           REAL,
  median_us      REAL,
  samples        INTEGER,
  tops           REAL,
  tool_version   TEXT NOT NULL,
  seed           INTEGER,
  created_at     INTEGER NOT NULL
);
CREATE INDEX measurements_by_problem ON measurements (device, problem);
CREATE INDEX measurements_by_variant ON measurements (variant);
CREATE TABLE winners (
  device         TEXT NOT NULL REFERENCES devices(key),
  problem        TEXT NOT NULL,
  generator_hash TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  variant        TEXT NOT NULL,
  kernel_hash    TEXT NOT NULL,
  median_us      REAL NOT NULL,
  tops           REAL,
  decided_at     INTEGER NOT NULL,
  PRIMARY KEY (device, problem, generator_hash, nvrtc_version)
);
)sql";

void bind_text(sqlite3_stmt* st, int i, const std::string& s) {
  sqlite3_bind_text(st, i, s.c_str(), int(s.size()), SQLITE_TRANSIENT);
}

// Writes a version-1 database the way sage-tune 0.1 did: three kernels, four passed
// measurements of three variants and one failed one, and the winner (variant 0).
void write_v1_db(const std::string& path) {
  RawDb raw(path);
  raw.exec("PRAGMA journal_mode = WAL");
  raw.exec(kFrozenV1);
  raw.exec(cat("PRAGMA application_id = ", kStoreApplicationId));
  raw.exec("INSERT INTO meta VALUES ('schema_version', '1'), ('created_by', 'sage-tune 0.1.0')");
  DeviceFingerprint d = h100();
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw.get(), "INSERT INTO devices VALUES (?, ?, 90, 132, 85029158912, 13000, 1700000000)", -1,
                     &st, nullptr);
  bind_text(st, 1, d.key());
  bind_text(st, 2, d.name);
  EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);

  sqlite3_prepare_v2(raw.get(),
                     "INSERT INTO kernels VALUES (?, ?, 'sm_90a', '13.0', ?, ?, ?, 168, ?, 98304, 900.0, 1700000000)",
                     -1, &st, nullptr);
  for (int i = 0; i < 3; ++i) {
    KernelRecord k = kernel(i);
    sqlite3_reset(st);
    bind_text(st, 1, k.hash);
    bind_text(st, 2, k.variant);
    bind_text(st, 3, kGen);
    sqlite3_bind_blob(st, 4, k.cubin.data(), int(k.cubin.size()), SQLITE_TRANSIENT);
    bind_text(st, 5, sha256_hex(k.cubin));
    sqlite3_bind_int(st, 6, 8 * i);  // spill bytes: becomes spill_stores
    EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
  }
  sqlite3_finalize(st);

  sqlite3_prepare_v2(raw.get(),
                     "INSERT INTO measurements (device, problem, variant, kernel_hash, generator_hash, nvrtc_version, "
                     "status, cos, rel_l1, rmse, median_us, samples, tops, tool_version, seed, created_at) "
                     "VALUES (?, ?, ?, ?, ?, '13.0', ?, 0.9999, 0.01, 0.002, ?, 50, 900.0, 'sage-tune 0.1.0', 42, "
                     "1700000000)",
                     -1, &st, nullptr);
  struct Row {
    int kernel;
    const char* status;
    double median;
  };
  for (Row r : {Row{0, "passed", 100.0}, Row{1, "passed", 104.0}, Row{2, "passed", 130.0}, Row{1, "passed", 106.0},
                Row{2, "failed", 0.0}}) {
    KernelRecord k = kernel(r.kernel);
    sqlite3_reset(st);
    bind_text(st, 1, d.key());
    bind_text(st, 2, problem().str());
    bind_text(st, 3, k.variant);
    bind_text(st, 4, k.hash);
    bind_text(st, 5, kGen);
    bind_text(st, 6, r.status);
    if (r.median > 0) sqlite3_bind_double(st, 7, r.median);
    else sqlite3_bind_null(st, 7);
    EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
  }
  sqlite3_finalize(st);

  sqlite3_prepare_v2(raw.get(), "INSERT INTO winners VALUES (?, ?, ?, '13.0', ?, ?, 100.0, 1000.0, 1700000000)", -1,
                     &st, nullptr);
  bind_text(st, 1, d.key());
  bind_text(st, 2, problem().str());
  bind_text(st, 3, kGen);
  bind_text(st, 4, kernel(0).variant);
  bind_text(st, 5, kernel(0).hash);
  EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);
}

std::set<std::string> columns(RawDb& raw, const std::string& table) {
  std::set<std::string> out;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw.get(), "SELECT name FROM pragma_table_info(?)", -1, &st, nullptr);
  bind_text(st, 1, table);
  while (sqlite3_step(st) == SQLITE_ROW) out.insert(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  sqlite3_finalize(st);
  return out;
}

std::string schema_text(const std::string& path) {
  RawDb raw(path);
  std::string out;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw.get(), "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name", -1, &st,
                     nullptr);
  while (sqlite3_step(st) == SQLITE_ROW)
    out += cat(sqlite3_column_text(st, 0), ": ", sqlite3_column_text(st, 1), "\n");
  sqlite3_finalize(st);
  return out;
}

}  // namespace

TEST(StoreMigration, MigrationStepOne_MatchesTheFrozenV1Layout) {
  TempDir dir;
  RawDb(dir.file("frozen.db")).exec(kFrozenV1);
  RawDb(dir.file("step1.db")).exec(store_migrations().at(0).sql);
  EXPECT_EQ(store_migrations().at(0).to_version, 1);
  EXPECT_EQ(schema_text(dir.file("step1.db")), schema_text(dir.file("frozen.db")));
}

TEST(StoreMigration, V1Db_MigratesKeepingDataAndGainingNewColumns) {
  TempDir dir;
  std::string path = dir.file("old.db");
  write_v1_db(path);
  {
    Store s(path);
    EXPECT_EQ(s.report().migrated_from, 1);
    EXPECT_FALSE(s.report().created);
    EXPECT_FALSE(s.report().rebuilt);
    EXPECT_EQ(s.schema_version(), 2);

    StoreCounts c = s.counts();
    EXPECT_EQ(c.devices, 1);
    EXPECT_EQ(c.kernels, 3);
    EXPECT_EQ(c.measurements, 5);
    EXPECT_EQ(c.winners, 1);
    EXPECT_EQ(c.quarantined, 0);

    // Kernels: cubins intact, "spills" now spill_stores.
    auto k2 = s.kernel(kernel(2).hash);
    ASSERT_TRUE(k2);
    EXPECT_EQ(k2->cubin, kernel(2).cubin);
    EXPECT_EQ(k2->stats.spill_stores, 16);
    EXPECT_EQ(k2->stats.spill_loads, 0);
    EXPECT_EQ(k2->stats.report_json, "[]");

    // Measurements: v1 accuracy is the Gaussian-input accuracy; every row got a unique uid.
    auto ms = s.measurements();
    ASSERT_EQ(ms.size(), 5u);
    std::set<std::string> uids;
    for (const auto& m : ms) {
      EXPECT_EQ(m.uid.size(), 32u);
      uids.insert(m.uid);
      EXPECT_FALSE(m.outlier);
      EXPECT_FALSE(m.p10_us);
    }
    EXPECT_EQ(uids.size(), 5u);
    ASSERT_TRUE(ms[0].gaussian);
    EXPECT_DOUBLE_EQ(ms[0].gaussian->cos, 0.9999);
    EXPECT_EQ(*ms[0].seed, 42);
    EXPECT_EQ(ms[4].status, MeasurementStatus::failed);

    // The winner's runner-up was recovered from the measurements: variant 1 at 104 us.
    auto w = s.winner(winner_key());
    ASSERT_TRUE(w);
    EXPECT_EQ(w->variant, kernel(0).variant);
    EXPECT_EQ(w->runner_up, kernel(1).variant);
    EXPECT_DOUBLE_EQ(*w->runner_up_median_us, 104.0);
    EXPECT_NEAR(*w->margin, 0.04, 1e-12);
    EXPECT_FALSE(w->tie);
    EXPECT_EQ(w->source, "tune");

    // New writes use the new columns.
    Measurement m = measurement(kernel(1), 99.0);
    s.record_measurement(m);
    auto back = s.measurements(of_variant(kernel(1).variant));
    ASSERT_EQ(back.size(), 3u);
    ASSERT_TRUE(back[2].outlier);
    EXPECT_DOUBLE_EQ(back[2].outlier->cos, 0.9991);
  }
  RawDb raw(path);
  EXPECT_EQ(raw.scalar("SELECT value FROM meta WHERE key = 'schema_version'"), "2");
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM sqlite_master WHERE name IN ('quarantine', 'provenance')"), "2");
  auto mcols = columns(raw, "measurements");
  for (const char* c : {"uid", "cos_outlier", "p10_us", "p90_us", "mad_us", "seed_outlier", "detail"})
    EXPECT_TRUE(mcols.count(c)) << c;
  auto kcols = columns(raw, "kernels");
  EXPECT_TRUE(kcols.count("spill_stores"));
  EXPECT_FALSE(kcols.count("spills"));
  EXPECT_EQ(raw.scalar("PRAGMA integrity_check"), "ok");
}

TEST(StoreMigration, ReadOnlyOpenOfV1_MigratesInMemoryAndLeavesTheFile) {
  TempDir dir;
  std::string path = dir.file("old.db");
  write_v1_db(path);
  StoreHealth h = check_health(path);
  EXPECT_TRUE(h.ok());
  EXPECT_TRUE(h.needs_migration);
  EXPECT_EQ(h.schema_version, 1);
  {
    OpenOptions o;
    o.read_only = true;
    Store s(path, o);
    EXPECT_TRUE(s.report().migrated_in_memory);
    EXPECT_EQ(s.report().migrated_from, 1);
    auto ws = s.winners();
    ASSERT_EQ(ws.size(), 1u);
    EXPECT_EQ(ws[0].runner_up, kernel(1).variant);
    EXPECT_EQ(s.measurements().size(), 5u);
  }
  EXPECT_EQ(RawDb(path).scalar("SELECT value FROM meta WHERE key = 'schema_version'"), "1");
}

TEST(StoreMigration, FourProcessesOpeningOneV1Db_MigrateItOnce) {
  TempDir dir;
  std::string path = dir.file("old.db");
  write_v1_db(path);
  std::vector<pid_t> kids;
  for (int p = 0; p < 4; ++p) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 0;
      try {
        Store s(path);
        s.record_measurement(measurement(kernel(p % 3), 200.0 + p));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        rc = 1;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  Store s(path);
  EXPECT_EQ(s.schema_version(), 2);
  EXPECT_EQ(s.counts().measurements, 9);
  EXPECT_EQ(s.counts().winners, 1);
  EXPECT_EQ(RawDb(path).scalar("PRAGMA integrity_check"), "ok");
}
