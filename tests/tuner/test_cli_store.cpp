// The store commands of the real sage-tune binary (list, show, merge, gc, db): outputs, JSON
// validity, exit codes for errors. Databases live in a temporary directory; the child's
// SAGE_DB, SAGE_SYSTEM_DB and XDG_CACHE_HOME point there, so ~/.cache is never touched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include "sage/tuner/store_json.h"
#include "sage/tuner/store_schema.h"
#include "store_fixtures.h"

using namespace sage;
using namespace sage::tuner;
using namespace sage::test;
using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

namespace {

// Exit codes from tools/sage-tune/commands.h (docs/cli.md).
constexpr int kOk = 0, kUsage = 2, kIoError = 7, kNotFound = 8, kUnsupported = 9;

struct CliRun {
  int rc = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class CliStore : public ::testing::Test {
 protected:
  TempDir dir;
  std::string user = dir.file("user.db");
  std::string system = dir.file("system.db");

  // Runs sage-tune with `args`; the environment names only our temporary files.
  CliRun sage(const std::vector<std::string>& args) {
    std::string cmd = "env SAGE_DB=" + quote(user) + " SAGE_SYSTEM_DB=" + quote(system) +
                      " XDG_CACHE_HOME=" + quote(dir.file("cache")) + " " + quote(SAGE_TUNE_EXE);
    for (const auto& a : args) cmd += " " + quote(a);
    std::string errfile = dir.file("stderr.txt");
    cmd += " 2>" + quote(errfile);
    CliRun r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("popen failed");
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int status = ::pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = file_bytes(errfile);
    return r;
  }

  json sage_json(const std::vector<std::string>& args, int want_rc = kOk) {
    CliRun r = sage(args);
    EXPECT_EQ(r.rc, want_rc) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out;
    return j;
  }

  // A user DB with two winners (H100 and A100), three kernels, measurements of three
  // variants, and one extra kernel no winner uses.
  void populate(const std::string& path) {
    Store s(path);
    KernelRecord k0 = kernel(0), k1 = kernel(1), k2 = kernel(2), unused = kernel(9, 32 * 1024);
    s.record_variant({k0.variant, "params-0", R"({"m":128})", kGen, 0});
    for (auto* k : {&k0, &k1, &k2, &unused}) s.record_kernel(*k);
    s.record_measurement(measurement(k0, 100.0));
    s.record_measurement(measurement(k1, 104.0));
    Measurement bad = measurement(k2, 50.0);
    bad.status = MeasurementStatus::incorrect;
    bad.detail = "cos 0.91 < 0.999";
    s.record_measurement(bad);
    s.record_measurement(measurement(k1, 80.0, a100(), problem(8192)));
    s.decide_winner(winner_key());
    s.decide_winner(winner_key(a100(), problem(8192)));
  }

  void write_garbage(const std::string& path) {
    std::ofstream f(path, std::ios::binary);
    f << std::string(3000, '\x42');
  }
};

}  // namespace

// ---- list ---------------------------------------------------------------------------------------

TEST_F(CliStore, List_PrintsTheWinnersTable) {
  populate(user);
  CliRun r = sage({"list"});
  ASSERT_EQ(r.rc, kOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("VARIANT"));
  EXPECT_THAT(r.out, HasSubstr("MARGIN"));
  EXPECT_THAT(r.out, HasSubstr(kernel(0).variant));
  EXPECT_THAT(r.out, HasSubstr(problem().str()));
  EXPECT_THAT(r.out, HasSubstr("+4.0%"));
  EXPECT_THAT(r.out, HasSubstr("NVIDIA A100"));
  EXPECT_THAT(r.out, Not(HasSubstr(kernel(2).variant)));  // incorrect: never a winner
}

TEST_F(CliStore, List_JsonIsValidAndComplete) {
  populate(user);
  json j = sage_json({"list", "--json"});
  EXPECT_EQ(j["db"], user);
  ASSERT_EQ(j["winners"].size(), 2u);
  json w = j["winners"][1];  // ordered by device key: H100 after A100
  EXPECT_EQ(w["variant"], kernel(0).variant);
  EXPECT_EQ(w["key"]["problem"]["key"], problem().str());
  EXPECT_EQ(w["key"]["device"]["cc"], 90);
  EXPECT_DOUBLE_EQ(w["median_us"].get<double>(), 100.0);
  EXPECT_NEAR(w["margin"].get<double>(), 0.04, 1e-9);
  EXPECT_EQ(w["runner_up"], kernel(1).variant);
  EXPECT_FALSE(w["tie"].get<bool>());
}

TEST_F(CliStore, List_FiltersByDeviceAndProblem) {
  populate(user);
  json j = sage_json({"list", "--json", "--device", "A100"});
  ASSERT_EQ(j["winners"].size(), 1u);
  EXPECT_EQ(j["winners"][0]["key"]["problem"]["seq_q_bucket"], 8192);
  j = sage_json({"list", "--json", "--problem", "q4096"});
  ASSERT_EQ(j["winners"].size(), 1u);
  EXPECT_EQ(j["winners"][0]["key"]["device"]["cc"], 90);
  CliRun r = sage({"list", "--device", "RTX 4090"});
  EXPECT_EQ(r.rc, kOk);
  EXPECT_THAT(r.out, HasSubstr("no winners"));
}

TEST_F(CliStore, List_DbAndSystemOptionsPickTheDatabase) {
  populate(system);
  std::string other = dir.file("other.db");
  { Store s(other); }
  json j = sage_json({"list", "--json", "--system"});
  EXPECT_EQ(j["db"], system);
  EXPECT_EQ(j["winners"].size(), 2u);
  // Read like the runtime reads it (immutable): no lock or index files appear beside it,
  // which is what lets it live in a read-only install directory.
  EXPECT_FALSE(fs::exists(system + "-shm"));
  EXPECT_FALSE(fs::exists(system + "-wal"));
  j = sage_json({"list", "--json", "--db", other});
  EXPECT_EQ(j["db"], other);
  EXPECT_EQ(j["winners"].size(), 0u);
}

TEST_F(CliStore, List_MissingDb_ExitsNotFoundAndCreatesNothing) {
  CliRun r = sage({"list"});
  EXPECT_EQ(r.rc, kNotFound);
  EXPECT_THAT(r.err, HasSubstr("no tune database"));
  EXPECT_THAT(r.err, HasSubstr(user));
  EXPECT_FALSE(fs::exists(user));
}

TEST_F(CliStore, List_CorruptDb_ExitsIoErrorAndTouchesNothing) {
  write_garbage(user);
  CliRun r = sage({"list"});
  EXPECT_EQ(r.rc, kIoError);
  EXPECT_THAT(r.err, HasSubstr("db repair"));
  EXPECT_EQ(file_bytes(user), std::string(3000, '\x42'));
}

TEST_F(CliStore, List_NewerSchema_ExitsUnsupported) {
  { Store s(user); }
  RawDb(user).exec("UPDATE meta SET value = '7' WHERE key = 'schema_version'");
  CliRun r = sage({"list"});
  EXPECT_EQ(r.rc, kUnsupported);
  EXPECT_THAT(r.err, HasSubstr("newer"));
}

// ---- show -----------------------------------------------------------------------------------------

TEST_F(CliStore, Show_VariantListsItsMeasurementsAndKernel) {
  populate(user);
  CliRun r = sage({"show", kernel(1).variant});
  ASSERT_EQ(r.rc, kOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kernel " + kernel(1).hash));
  EXPECT_THAT(r.out, HasSubstr(problem().str()));
  EXPECT_THAT(r.out, HasSubstr(problem(8192).str()));
  EXPECT_THAT(r.out, HasSubstr("104.0"));

  json j = sage_json({"show", kernel(1).variant, "--json"});
  EXPECT_EQ(j["kind"], "variant");
  ASSERT_EQ(j["measurements"].size(), 2u);
  // k1 wins on the A100 problem, not on the H100 one.
  for (const auto& m : j["measurements"])
    EXPECT_EQ(m["winner"].get<bool>(), m["device"]["cc"] == 80) << m.dump();
  ASSERT_EQ(j["kernels"].size(), 1u);
  EXPECT_EQ(j["kernels"][0]["hash"], kernel(1).hash);
}

TEST_F(CliStore, Show_ProblemListsEveryVariantMeasured) {
  populate(user);
  json j = sage_json({"show", problem().str(), "--json"});
  EXPECT_EQ(j["kind"], "problem");
  ASSERT_EQ(j["measurements"].size(), 3u);
  EXPECT_EQ(j["measurements"][2]["status"], "incorrect");
  EXPECT_EQ(j["measurements"][2]["detail"], "cos 0.91 < 0.999");
  j = sage_json({"show", problem().str(), "--json", "--status", "passed"});
  EXPECT_EQ(j["measurements"].size(), 2u);
  CliRun r = sage({"show", problem().str()});
  EXPECT_EQ(r.rc, kOk);
  EXPECT_THAT(r.out, HasSubstr("incorrect"));
  EXPECT_THAT(r.out, HasSubstr(kernel(2).variant));
}

TEST_F(CliStore, Show_UnknownVariantOrProblem_ExitsNotFound) {
  populate(user);
  CliRun r = sage({"show", "attn_no_such_variant"});
  EXPECT_EQ(r.rc, kNotFound);
  EXPECT_THAT(r.err, HasSubstr("neither a known variant nor a problem key"));
  r = sage({"show", problem(2048).str()});
  EXPECT_EQ(r.rc, kNotFound);
  EXPECT_THAT(r.err, HasSubstr("no measurements of problem"));
}

TEST_F(CliStore, Show_BadStatusOrMissingArgument_ExitsUsage) {
  populate(user);
  CliRun r = sage({"show", problem().str(), "--status", "great"});
  EXPECT_EQ(r.rc, kUsage);
  EXPECT_THAT(r.err, HasSubstr("measurement status"));
  EXPECT_EQ(sage({"show"}).rc, kUsage);
}

TEST_F(CliStore, Show_MissingDb_ExitsNotFound) {
  CliRun r = sage({"show", kernel(0).variant, "--db", dir.file("nope.db")});
  EXPECT_EQ(r.rc, kNotFound);
  EXPECT_FALSE(fs::exists(dir.file("nope.db")));
}

// ---- merge ----------------------------------------------------------------------------------------

TEST_F(CliStore, Merge_WritesTheUnionAndLeavesInputs) {
  std::string a = dir.file("a.db"), b = dir.file("b.db"), c = dir.file("c.db");
  populate(a);
  {
    Store s(b);
    KernelRecord k = kernel(5);
    s.record_kernel(k);
    s.record_measurement(measurement(k, 90.0));
    s.decide_winner(winner_key());  // faster than a.db's winner
  }
  std::string a_before = file_bytes(a);
  CliRun r = sage({"merge", a, b, "-o", c});
  ASSERT_EQ(r.rc, kOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("merged 2 database(s) into " + c));
  EXPECT_THAT(r.out, HasSubstr("1 replaced"));
  EXPECT_EQ(file_bytes(a), a_before);
  json j = sage_json({"list", "--json", "--db", c, "--problem", "q4096"});
  ASSERT_EQ(j["winners"].size(), 1u);
  EXPECT_EQ(j["winners"][0]["variant"], kernel(5).variant);
  EXPECT_EQ(j["winners"][0]["source"], b);

  j = sage_json({"merge", a, b, "-o", dir.file("d.db"), "--json"});
  EXPECT_EQ(j["winner_conflicts"], 1);
  EXPECT_EQ(j["winners_replaced"], 1);
  EXPECT_EQ(j["inputs"].size(), 2u);
}

TEST_F(CliStore, Merge_Errors) {
  std::string a = dir.file("a.db"), c = dir.file("c.db");
  populate(a);
  CliRun r = sage({"merge", a, dir.file("missing.db"), "-o", c});
  EXPECT_EQ(r.rc, kNotFound);
  EXPECT_THAT(r.err, HasSubstr("missing.db"));
  EXPECT_FALSE(fs::exists(c));

  write_garbage(dir.file("junk.db"));
  r = sage({"merge", a, dir.file("junk.db"), "-o", c});
  EXPECT_EQ(r.rc, kIoError);
  EXPECT_FALSE(fs::exists(c));

  EXPECT_EQ(sage({"merge", a}).rc, kUsage);  // no -o
  r = sage({"merge", a, "-o", a});
  EXPECT_EQ(r.rc, kUsage);
  EXPECT_THAT(r.err, HasSubstr("also an input"));

  ASSERT_EQ(sage({"merge", a, "-o", c}).rc, kOk);
  r = sage({"merge", a, "-o", c});
  EXPECT_EQ(r.rc, kUsage);
  EXPECT_THAT(r.err, HasSubstr("--force"));
  EXPECT_EQ(sage({"merge", a, "-o", c, "--force"}).rc, kOk);
}

// ---- gc -------------------------------------------------------------------------------------------

TEST_F(CliStore, Gc_RemovesUnusedKernels) {
  populate(user);
  CliRun r = sage({"gc", "--dry-run"});
  ASSERT_EQ(r.rc, kOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("would remove 2 unused kernel(s)"));  // k2 and the unused one
  EXPECT_EQ(Store(user).counts().kernels, 4);
  json j = sage_json({"gc", "--json"});
  EXPECT_EQ(j["kernels_removed"], 2);
  EXPECT_EQ(j["kernel_bytes_removed"], 4096 + 32 * 1024);
  EXPECT_FALSE(j["dry_run"].get<bool>());
  Store s(user);
  EXPECT_EQ(s.counts().kernels, 2);
  EXPECT_EQ(s.counts().winners, 2);
  r = sage({"gc"});
  EXPECT_EQ(r.rc, kOk);
  EXPECT_THAT(r.out, HasSubstr("removed 0 unused kernel(s)"));
}

TEST_F(CliStore, Gc_MissingOrCorruptDb) {
  CliRun r = sage({"gc"});
  EXPECT_EQ(r.rc, kNotFound);
  EXPECT_FALSE(fs::exists(user));
  write_garbage(user);
  r = sage({"gc"});
  EXPECT_EQ(r.rc, kIoError);
  EXPECT_EQ(file_bytes(user), std::string(3000, '\x42'));  // gc never rebuilds
}

// ---- db -------------------------------------------------------------------------------------------

TEST_F(CliStore, DbCheck_ReportsStateThroughExitCodeAndJson) {
  populate(user);
  CliRun r = sage({"db", "check"});
  EXPECT_EQ(r.rc, kOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ok (schema v2"));
  json j = sage_json({"db", "check", "--json", "--full"});
  EXPECT_EQ(j["state"], "ok");
  EXPECT_EQ(j["counts"]["winners"], 2);
  EXPECT_TRUE(j["full"].get<bool>());

  r = sage({"db", "check", "--db", dir.file("none.db")});
  EXPECT_EQ(r.rc, kNotFound);
  write_garbage(dir.file("junk.db"));
  j = sage_json({"db", "check", "--db", dir.file("junk.db"), "--json"}, kIoError);
  EXPECT_EQ(j["state"], "corrupt");
  RawDb(dir.file("foreign.db")).exec("CREATE TABLE x (y)");
  EXPECT_EQ(sage({"db", "check", "--db", dir.file("foreign.db")}).rc, kUnsupported);
  EXPECT_EQ(sage({"db"}).rc, kUsage);
}

TEST_F(CliStore, DbRepair_RebuildsACorruptFileAndQuarantinesBadCubins) {
  write_garbage(user);
  CliRun r = sage({"db", "repair"});
  ASSERT_EQ(r.rc, kOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("was corrupt"));
  EXPECT_THAT(r.out, HasSubstr(user + ".corrupt-"));
  EXPECT_EQ(sage({"db", "check"}).rc, kOk);

  fs::remove(user);
  populate(user);
  {
    RawDb raw(user);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(raw.get(), "UPDATE kernels SET cubin = zeroblob(10) WHERE hash = ?", -1, &st, nullptr);
    std::string h = kernel(0).hash;
    sqlite3_bind_text(st, 1, h.c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
  }
  EXPECT_EQ(sage({"db", "check", "--full"}).rc, kIoError);
  json j = sage_json({"db", "repair", "--json"});
  ASSERT_EQ(j["quarantined_now"].size(), 1u);
  EXPECT_EQ(j["quarantined_now"][0], kernel(0).hash);
  EXPECT_EQ(j["counts"]["quarantined"], 1);
  EXPECT_EQ(sage({"db", "check", "--full"}).rc, kOk);
  EXPECT_EQ(sage({"db", "repair", "--db", dir.file("none.db")}).rc, kNotFound);
}

TEST_F(CliStore, DbMigrate_UpgradesAVersion1File) {
  {
    RawDb raw(user);
    raw.exec(store_migrations().at(0).sql);
    raw.exec("INSERT INTO meta VALUES ('schema_version', '1')");
  }
  json j = sage_json({"db", "check", "--json"});
  EXPECT_TRUE(j["needs_migration"].get<bool>());
  CliRun r = sage({"db", "migrate"});
  ASSERT_EQ(r.rc, kOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("migrated schema v1 -> v2"));
  r = sage({"db", "migrate"});
  EXPECT_THAT(r.out, HasSubstr("already at schema v2"));
  EXPECT_EQ(sage({"db", "migrate", "--db", dir.file("none.db")}).rc, kNotFound);
  EXPECT_FALSE(fs::exists(dir.file("none.db")));
}

TEST_F(CliStore, DbPath_NamesTheConfiguredFiles) {
  json j = sage_json({"db", "path", "--json"});
  EXPECT_EQ(j["user"]["path"], user);
  EXPECT_FALSE(j["user"]["exists"].get<bool>());
  EXPECT_EQ(j["system"]["path"], system);
  CliRun r = sage({"db", "path"});
  EXPECT_THAT(r.out, HasSubstr(user));
  EXPECT_THAT(r.out, HasSubstr("not created yet"));
}
