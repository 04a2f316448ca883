// The tune store: keys, records, winners, lookup over user + system databases, gc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "sage/tuner/compiler.h"
#include "sage/tuner/store_json.h"
#include "sage/tuner/store_schema.h"
#include "store_fixtures.h"

using namespace sage;
using namespace sage::tuner;
using namespace sage::test;
using ::testing::HasSubstr;

namespace {

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

// ---- keys ---------------------------------------------------------------------------------

TEST(StoreKeys, DeviceFingerprint_CanonicalKeyRoundTrips) {
  DeviceFingerprint d = h100();
  EXPECT_EQ(d.key(), "NVIDIA H100 80GB HBM3|cc90|sm132|mem85029158912|drv13000");
  EXPECT_EQ(DeviceFingerprint::parse(d.key()), d);
}

TEST(StoreKeys, DeviceFingerprint_BadKeysNameTheField) {
  Error e = expect_error([] { DeviceFingerprint::parse("H100|cc90|sm132|mem1"); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("5 fields"));
  e = expect_error([] { DeviceFingerprint::parse("H100|ccX|sm132|mem1|drv1"); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("field cc"));
  e = expect_error([] { DeviceFingerprint::parse("H100|cc90|sm132|memory1|drv1"); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("memory_bytes"));
  DeviceFingerprint bad = h100();
  bad.name = "a|b";
  expect_error([&] { bad.validate(); }, Errc::invalid_argument);
}

TEST(StoreKeys, ProblemKey_CanonicalStringRoundTrips) {
  ProblemKey p = problem();
  EXPECT_EQ(p.str(), "d128_causal_fp16_HND_q4096_kv4096_bh128_balanced");
  EXPECT_EQ(ProblemKey::parse(p.str()), p);
  ProblemKey q = problem(1024, false, "accurate");
  q.dtype = "bf16";
  q.layout = "NHD";
  q.seq_kv_bucket = 8192;
  EXPECT_EQ(q.str(), "d128_noncausal_bf16_NHD_q1024_kv8192_bh128_accurate");
  EXPECT_EQ(ProblemKey::parse(q.str()), q);
}

TEST(StoreKeys, ProblemKey_BadStringsNameTheField) {
  Error e = expect_error([] { ProblemKey::parse("d128_causal_fp32_HND_q4096_kv4096_bh128_balanced"); },
                         Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("dtype"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_HND_q4096_kv4096_bh128"); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("8 fields"));
  e = expect_error([] { ProblemKey::parse("d128_sometimes_fp16_HND_q4096_kv4096_bh128_fast"); },
                   Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("causal"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_HND_q4096_kvx_bh128_fast"); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("seq_kv_bucket"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_HND_q4096_kv4096_bh128_reckless"); },
                   Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("policy"));
}

// A paged bucket's key (kv8: over FP8 pages) is the runtime's bucket key of the same call:
// the dense fields, then _kv8, then _paged; a dense key's string is unchanged.
TEST(StoreKeys, ProblemKey_PagedBucketsRoundTripAsTheRuntimeKeysThem) {
  ProblemKey p = problem(1, true, "balanced");
  p.layout = "NHD";
  p.seq_kv_bucket = 8192;
  p.paged = true;
  EXPECT_EQ(p.str(), "d128_causal_fp16_NHD_q1_kv8192_bh128_balanced_paged");
  EXPECT_EQ(ProblemKey::parse(p.str()), p);
  p.kv8 = true;
  p.seq_q_bucket = 2;  // a paged bucket's queries: powers of two up to 128
  EXPECT_EQ(p.str(), "d128_causal_fp16_NHD_q2_kv8192_bh128_balanced_kv8_paged");
  const ProblemKey back = ProblemKey::parse(p.str());
  EXPECT_EQ(back, p);
  EXPECT_TRUE(back.paged && back.kv8);
  EXPECT_NE(back, problem(2, true, "balanced"));
  Error e = expect_error([] { ProblemKey::parse("d128_causal_fp16_NHD_q1_kv8192_bh128_balanced_kv8"); },
                         Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("kv8 (FP8 pages) is a paged bucket's"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_NHD_q3_kv8192_bh128_balanced_paged"); },
                   Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("power of two"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_NHD_q1_kv8192_bh128_balanced_paged_kv8"); },
                   Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("optionally varlen, window, kv8 and paged"));
  // The winner keys of the two page types differ in that field.
  WinnerKey a = winner_key(), b = a;
  a.problem = back;
  b.problem = back;
  b.problem.kv8 = false;
  const auto d = diff_keys(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].field, "problem.kv8");
  EXPECT_EQ(d[0].wanted, "FP8 pages");
}

// Variable-length and window buckets' keys: the dense fields, then _varlen, then _window (the
// runtime's order); the checks of their fields name them.
TEST(StoreKeys, ProblemKey_VarlenAndWindowBucketsRoundTrip) {
  ProblemKey p = problem(16384, true, "balanced");
  p.layout = "NHD";
  p.seq_kv_bucket = 4096;
  p.window = true;
  EXPECT_EQ(p.str(), "d128_causal_fp16_NHD_q16384_kv4096_bh128_balanced_window");
  EXPECT_EQ(ProblemKey::parse(p.str()), p);
  p.varlen = true;
  EXPECT_EQ(p.str(), "d128_causal_fp16_NHD_q16384_kv4096_bh128_balanced_varlen_window");
  const ProblemKey back = ProblemKey::parse(p.str());
  EXPECT_EQ(back, p);
  EXPECT_TRUE(back.varlen && back.window && !back.paged);
  Error e = expect_error([] { ProblemKey::parse("d128_noncausal_fp16_NHD_q4096_kv1024_bh128_balanced_window"); },
                         Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("a sliding window's bucket is causal"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_HND_q4096_kv4096_bh128_balanced_varlen"); },
                   Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("layout NHD"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_NHD_q128_kv4096_bh128_balanced_varlen_paged"); },
                   Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("are not tuned"));
  e = expect_error([] { ProblemKey::parse("d128_causal_fp16_NHD_q4096_kv4096_bh128_balanced_window_varlen"); },
                   Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("optionally varlen, window, kv8 and paged"));
  WinnerKey a = winner_key(), b = a;
  a.problem = back;
  b.problem = back;
  b.problem.varlen = false;
  const auto d = diff_keys(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].field, "problem.varlen");
  EXPECT_EQ(d[0].wanted, "varlen");
}

TEST(StoreKeys, DiffKeys_ListsExactlyTheDifferingFields) {
  WinnerKey a = winner_key();
  EXPECT_TRUE(diff_keys(a, a).empty());
  WinnerKey b = a;
  b.device.driver_version = 12080;
  b.problem.seq_kv_bucket = 8192;
  b.nvrtc_version = "12.8";
  auto d = diff_keys(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].field, "device.driver_version");
  EXPECT_EQ(d[0].wanted, "13000");
  EXPECT_EQ(d[0].stored, "12080");
  EXPECT_EQ(d[1].field, "nvrtc_version");
  EXPECT_EQ(d[2].field, "problem.seq_kv_bucket");
}

TEST(StoreKeys, DefaultPaths_HonourEnvironment) {
  TempDir dir;
  std::string old_db = env("SAGE_DB"), old_sys = env("SAGE_SYSTEM_DB"), old_xdg = env("XDG_CACHE_HOME");
  ::setenv("SAGE_DB", dir.file("mine.db").c_str(), 1);
  ::setenv("SAGE_SYSTEM_DB", dir.file("sys.db").c_str(), 1);
  EXPECT_EQ(default_user_db_path(), dir.file("mine.db"));
  EXPECT_EQ(default_system_db_path(), dir.file("sys.db"));
  ::unsetenv("SAGE_DB");
  ::unsetenv("SAGE_SYSTEM_DB");
  ::setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  EXPECT_EQ(default_user_db_path(), dir.path() + "/sage-tune/tune.db");
  EXPECT_THAT(default_system_db_path(), HasSubstr("sage-tune/system.db"));
  auto restore = [](const char* n, const std::string& v) {
    if (v.empty()) ::unsetenv(n);
    else ::setenv(n, v.c_str(), 1);
  };
  restore("SAGE_DB", old_db);
  restore("SAGE_SYSTEM_DB", old_sys);
  restore("XDG_CACHE_HOME", old_xdg);
}

// ---- opening --------------------------------------------------------------------------------

TEST(Store, FreshDb_CreatesCurrentSchemaInWalMode) {
  TempDir dir;
  std::string path = dir.file("sub/dir/tune.db");
  {
    Store s(path);
    EXPECT_TRUE(s.report().created);
    EXPECT_EQ(s.schema_version(), store_schema_version());
    EXPECT_EQ(store_schema_version(), 2);
  }
  RawDb raw(path);
  EXPECT_EQ(raw.scalar("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.scalar("PRAGMA application_id"), std::to_string(kStoreApplicationId));
  EXPECT_EQ(raw.scalar("SELECT value FROM meta WHERE key = 'schema_version'"), "2");
  Store again(path);
  EXPECT_FALSE(again.report().created);
}

TEST(Store, ReadOnly_MissingFileIsNotFoundAndNotCreated) {
  TempDir dir;
  OpenOptions o;
  o.read_only = true;
  expect_error([&] { Store s(dir.file("none.db"), o); }, Errc::not_found);
  OpenOptions w;
  w.create = false;
  expect_error([&] { Store s(dir.file("none.db"), w); }, Errc::not_found);
  EXPECT_FALSE(fs::exists(dir.file("none.db")));
}

TEST(Store, ReadOnly_RefusesWrites) {
  TempDir dir;
  { Store s(dir.file("t.db")); }
  OpenOptions o;
  o.read_only = true;
  Store s(dir.file("t.db"), o);
  Error e = expect_error([&] { s.record_kernel(kernel(1)); }, Errc::unsupported);
  EXPECT_THAT(e.message(), HasSubstr("read-only"));
}

TEST(Store, RefusesSchemaNewerThanThisBuild) {
  TempDir dir;
  std::string path = dir.file("t.db");
  { Store s(path); }
  RawDb(path).exec("UPDATE meta SET value = '3' WHERE key = 'schema_version'");
  Error e = expect_error([&] { Store s(path); }, Errc::unsupported);
  EXPECT_THAT(e.message(), HasSubstr("newer than this build"));
  // Not treated as corruption: the file stays where it is, untouched.
  EXPECT_EQ(RawDb(path).scalar("SELECT value FROM meta WHERE key = 'schema_version'"), "3");
  for (auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().string().find(".corrupt-"), std::string::npos) << entry.path();
}

TEST(Store, RefusesForeignSqliteFile) {
  TempDir dir;
  std::string path = dir.file("other.db");
  RawDb(path).exec("CREATE TABLE songs (title TEXT); INSERT INTO songs VALUES ('x');");
  Error e = expect_error([&] { Store s(path); }, Errc::unsupported);
  EXPECT_THAT(e.message(), HasSubstr("not a sage-tune database"));
  EXPECT_EQ(RawDb(path).count("songs"), 1);
}

// ---- records --------------------------------------------------------------------------------

TEST(Store, RecordsRoundTrip) {
  TempDir dir;
  Store s(dir.file("t.db"));
  s.record_device(h100());
  s.record_variant({variant_name(0), "params-0", R"({"m":128,"n":64})", kGen, 0});
  KernelRecord k = kernel(0);
  s.record_kernel(k);
  Measurement m = measurement(k, 100.0);
  m.detail = "";
  std::int64_t id = s.record_measurement(m);
  EXPECT_GT(id, 0);

  auto devs = s.devices();
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0], h100());
  auto vars = s.variants(variant_name(0));
  ASSERT_EQ(vars.size(), 1u);
  EXPECT_EQ(vars[0].params_json, R"({"m":128,"n":64})");

  auto kr = s.kernel(k.hash);
  ASSERT_TRUE(kr);
  EXPECT_EQ(kr->cubin, k.cubin);
  EXPECT_EQ(kr->cubin_sha256, sha256_hex(k.cubin));
  EXPECT_EQ(kr->stats.registers, 168);
  EXPECT_EQ(kr->stats.smem_bytes, 98304);
  EXPECT_DOUBLE_EQ(kr->stats.compile_ms, 1234.5);
  EXPECT_FALSE(s.kernel(sha256_hex("absent")));
  ASSERT_EQ(s.kernels().size(), 1u);
  EXPECT_EQ(s.kernels()[0].cubin_bytes, 4096);

  auto ms = s.measurements();
  ASSERT_EQ(ms.size(), 1u);
  const Measurement& r = ms[0];
  EXPECT_EQ(r.id, id);
  EXPECT_EQ(r.uid.size(), 32u);
  EXPECT_EQ(r.device, m.device);
  EXPECT_EQ(r.problem, m.problem);
  EXPECT_EQ(r.variant, m.variant);
  EXPECT_EQ(r.kernel_hash, k.hash);
  EXPECT_EQ(r.status, MeasurementStatus::passed);
  ASSERT_TRUE(r.gaussian && r.outlier);
  EXPECT_DOUBLE_EQ(r.gaussian->cos, 0.99995);
  EXPECT_DOUBLE_EQ(r.outlier->rmse, 0.0087);
  EXPECT_DOUBLE_EQ(*r.median_us, 100.0);
  EXPECT_DOUBLE_EQ(*r.p10_us, 99.0);
  EXPECT_DOUBLE_EQ(*r.p90_us, 101.0);
  EXPECT_EQ(r.samples, 50);
  EXPECT_EQ(*r.seed, 7);
  EXPECT_EQ(*r.seed_outlier, 8);
  EXPECT_EQ(r.tool_version, store_tool_version());
  EXPECT_GT(r.created_at, 0);

  Winner w = winner(k, 100.0);
  w.runner_up = variant_name(1);
  w.runner_up_median_us = 110.0;
  w.margin = 0.1;
  s.set_winner(w);
  auto got = s.winner(winner_key());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->key, winner_key());
  EXPECT_EQ(got->variant, k.variant);
  EXPECT_EQ(got->kernel_hash, k.hash);
  EXPECT_DOUBLE_EQ(got->median_us, 100.0);
  EXPECT_EQ(got->runner_up, variant_name(1));
  EXPECT_DOUBLE_EQ(*got->margin, 0.1);
  EXPECT_EQ(got->source, "tune");
  EXPECT_FALSE(s.winner(winner_key(h100(), problem(8192))));

  StoreCounts c = s.counts();
  EXPECT_EQ(c.devices, 1);
  EXPECT_EQ(c.variants, 1);
  EXPECT_EQ(c.kernels, 1);
  EXPECT_EQ(c.measurements, 1);
  EXPECT_EQ(c.winners, 1);
}

TEST(Store, FailedMeasurementNeedsNoTimingOrKernel) {
  TempDir dir;
  Store s(dir.file("t.db"));
  Measurement m;
  m.device = h100();
  m.problem = problem();
  m.variant = variant_name(3);
  m.generator_hash = kGen;
  m.nvrtc_version = kNvrtc;
  m.status = MeasurementStatus::failed;
  m.detail = "ptxas: too many resources requested for launch";
  s.record_measurement(m);
  auto ms = s.measurements(with_status(MeasurementStatus::failed));
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].detail, m.detail);
  EXPECT_FALSE(ms[0].median_us);
  EXPECT_FALSE(ms[0].gaussian);
  EXPECT_TRUE(ms[0].kernel_hash.empty());
}

TEST(Store, MeasurementWithKnownUidIsRecordedOnce) {
  TempDir dir;
  Store s(dir.file("t.db"));
  Measurement m = measurement(kernel(0), 100.0);
  m.uid = "0123456789abcdef0123456789abcdef";
  std::int64_t a = s.record_measurement(m);
  std::int64_t b = s.record_measurement(m);
  EXPECT_EQ(a, b);
  EXPECT_EQ(s.counts().measurements, 1);
}

TEST(Store, BadRecordsAreRejectedAndWriteNothing) {
  TempDir dir;
  Store s(dir.file("t.db"));
  KernelRecord k = kernel(0);
  k.hash = "not-a-hash";
  Error e = expect_error([&] { s.record_kernel(k); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("64 lowercase hex"));
  k = kernel(0);
  k.arch = "hopper";
  expect_error([&] { s.record_kernel(k); }, Errc::invalid_argument);
  Measurement m = measurement(kernel(0), 100.0);
  m.median_us.reset();
  e = expect_error([&] { s.record_measurement(m); }, Errc::invalid_argument);
  EXPECT_THAT(e.message(), HasSubstr("median_us"));
  m = measurement(kernel(0), 100.0);
  m.problem.layout = "XYZ";
  expect_error([&] { s.record_measurement(m); }, Errc::invalid_argument);
  Winner w = winner(kernel(0), 0.0);
  expect_error([&] { s.set_winner(w); }, Errc::invalid_argument);
  StoreCounts c = s.counts();
  EXPECT_EQ(c.kernels + c.measurements + c.winners + c.devices, 0);
}

TEST(Store, DecideWinner_LowestPassedMedianWinsWithMarginAndTie) {
  TempDir dir;
  Store s(dir.file("t.db"));
  KernelRecord k0 = kernel(0), k1 = kernel(1), k2 = kernel(2), k3 = kernel(3);
  for (auto* k : {&k0, &k1, &k2, &k3}) s.record_kernel(*k);
  s.record_measurement(measurement(k0, 100.0));
  s.record_measurement(measurement(k0, 101.0));  // the same variant again: not a runner-up
  s.record_measurement(measurement(k1, 104.0));
  s.record_measurement(measurement(k2, 130.0));
  Measurement wrong = measurement(k3, 50.0);     // faster but incorrect: must not win
  wrong.status = MeasurementStatus::incorrect;
  s.record_measurement(wrong);
  s.record_measurement(measurement(k1, 90.0, h100(), problem(8192)));  // another problem

  auto w = s.decide_winner(winner_key());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->variant, k0.variant);
  EXPECT_EQ(w->kernel_hash, k0.hash);
  EXPECT_DOUBLE_EQ(w->median_us, 100.0);
  EXPECT_EQ(w->runner_up, k1.variant);
  EXPECT_NEAR(*w->margin, 0.04, 1e-12);
  EXPECT_NEAR(w->noise, 0.02, 1e-12);  // (p90 - p10) / median of the winning row
  EXPECT_FALSE(w->tie);
  EXPECT_EQ(s.winner(winner_key())->variant, k0.variant);

  // A runner-up within the winner's spread makes it a tie.
  s.record_measurement(measurement(k2, 101.5));
  w = s.decide_winner(winner_key());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->runner_up, k2.variant);
  EXPECT_TRUE(w->tie);

  EXPECT_FALSE(s.decide_winner(winner_key(a100())));
}

TEST(Store, Filters_SelectWinnersAndMeasurements) {
  TempDir dir;
  Store s(dir.file("t.db"));
  KernelRecord k0 = kernel(0), k1 = kernel(1);
  s.record_kernel(k0);
  s.record_kernel(k1);
  s.record_measurement(measurement(k0, 100.0));
  s.record_measurement(measurement(k1, 120.0));
  s.record_measurement(measurement(k1, 80.0, a100(), problem(1024)));
  s.set_winner(winner(k0, 100.0));
  s.set_winner(winner(k1, 80.0, winner_key(a100(), problem(1024))));

  EXPECT_EQ(s.winners().size(), 2u);
  auto h = s.winners({"H100", ""});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].variant, k0.variant);
  EXPECT_EQ(s.winners({"", "q1024"}).size(), 1u);
  EXPECT_TRUE(s.winners({"H100", "q1024"}).empty());

  EXPECT_EQ(s.measurements(of_variant(k1.variant)).size(), 2u);
  EXPECT_EQ(s.measurements(of_problem(problem())).size(), 2u);
  EXPECT_EQ(s.measurements(on_device(a100().key())).size(), 1u);
  EXPECT_EQ(s.measurements(of_variant(k1.variant, problem())).size(), 1u);
  MeasurementFilter exact{k1.variant, problem(), h100().key(), MeasurementStatus::passed, kGen, kNvrtc};
  EXPECT_EQ(s.measurements(exact).size(), 1u);
  exact.nvrtc_version = "12.8";
  EXPECT_TRUE(s.measurements(exact).empty());
  exact.nvrtc_version.clear();
  exact.generator_hash = "other-generator";
  EXPECT_TRUE(s.measurements(exact).empty());
}

TEST(Store, ConcurrentThreadsOnOneHandle_LoseNothing) {
  TempDir dir;
  Store s(dir.file("t.db"));
  KernelRecord k = kernel(0);
  s.record_kernel(k);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) s.record_measurement(measurement(k, 100.0 + t * 100 + i));
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(s.counts().measurements, 100);
}

TEST(Store, MakeKernelRecord_AggregatesCompileStats) {
  CompileResult r;
  r.name = "v";
  r.key = sha256_hex("v");
  r.ok = true;
  r.cubin = "cubin-bytes";
  r.compile_ms = 812.0;
  KernelResources quant;
  quant.kernel = "quant_q";
  quant.registers = 40;
  quant.smem_static = 1024;
  KernelResources attn;
  attn.kernel = "attn_main";
  attn.registers = 168;
  attn.spill_stores = 16;
  attn.spill_loads = 8;
  attn.smem_static = 98304;
  r.kernels = {quant, attn};
  KernelRecord k = make_kernel_record(r, "v", "sm_90a", "13.0", kGen);
  EXPECT_EQ(k.hash, r.key);
  EXPECT_EQ(k.stats.registers, 168);
  EXPECT_EQ(k.stats.spill_stores, 16);
  EXPECT_EQ(k.stats.spill_loads, 8);
  EXPECT_EQ(k.stats.smem_bytes, 98304);
  auto report = nlohmann::json::parse(k.stats.report_json);
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[1]["kernel"], "attn_main");
  r.ok = false;
  expect_error([&] { make_kernel_record(r, "v", "sm_90a", "13.0", kGen); }, Errc::invalid_argument);
}

// ---- gc ------------------------------------------------------------------------------------

TEST(Store, Gc_DropsKernelsNoWinnerUsesAndShrinksTheFile) {
  TempDir dir;
  std::string path = dir.file("t.db");
  Store s(path);
  KernelRecord keep = kernel(0, 64 * 1024);
  s.record_kernel(keep);
  for (int i = 1; i <= 20; ++i) s.record_kernel(kernel(i, 64 * 1024));
  s.record_measurement(measurement(keep, 100.0));
  s.set_winner(winner(keep, 100.0));

  GcReport dry = s.gc(true);
  EXPECT_TRUE(dry.dry_run);
  EXPECT_EQ(dry.kernels_removed, 20);
  EXPECT_EQ(s.counts().kernels, 21);

  GcReport r = s.gc();
  EXPECT_EQ(r.kernels_removed, 20);
  EXPECT_EQ(r.kernel_bytes_removed, 20 * 64 * 1024);
  EXPECT_GT(r.file_bytes_before - r.file_bytes_after, 20 * 60 * 1024);
  EXPECT_EQ(s.counts().kernels, 1);
  EXPECT_TRUE(s.kernel(keep.hash));
  EXPECT_EQ(s.counts().measurements, 1);  // measurements are history: gc keeps them
}

// ---- lookup ----------------------------------------------------------------------------------

namespace {
// A system DB as shipped: written, then closed (WAL folded in).
void make_system_db(const std::string& path, const KernelRecord& k, double median, const WinnerKey& key) {
  Store s(path);
  s.record_kernel(k);
  s.set_winner(winner(k, median, key));
}
LookupOptions lookup_options(const TempDir& dir, std::vector<std::string>* warnings = nullptr) {
  LookupOptions o;
  o.user_db = dir.file("user.db");
  o.system_db = dir.file("system.db");
  o.warn = [warnings](const std::string& m) {
    if (warnings) warnings->push_back(m);
  };
  return o;
}
}  // namespace

TEST(StoreLookup, UserDbWinsOverSystemDb) {
  TempDir dir;
  KernelRecord ks = kernel(1), ku = kernel(0);
  make_system_db(dir.file("system.db"), ks, 90.0, winner_key());
  std::string sys_before = file_bytes(dir.file("system.db"));
  {
    Store u(dir.file("user.db"));
    u.record_kernel(ku);
    u.set_winner(winner(ku, 95.0));
  }
  LookupResult r = find_winner(winner_key(), lookup_options(dir));
  ASSERT_EQ(r.status, LookupResult::Status::found) << r.message;
  EXPECT_EQ(r.winner->variant, ku.variant);
  EXPECT_EQ(r.kernel->cubin, ku.cubin);
  EXPECT_EQ(r.db, dir.file("user.db"));
  // The read-only system DB is opened immutable and never written.
  EXPECT_EQ(file_bytes(dir.file("system.db")), sys_before);
  EXPECT_FALSE(fs::exists(dir.file("system.db-wal")));
}

TEST(StoreLookup, SystemDbServesWhenUserDbHasNoWinner) {
  TempDir dir;
  KernelRecord ks = kernel(1);
  make_system_db(dir.file("system.db"), ks, 90.0, winner_key());
  LookupResult r = find_winner(winner_key(), lookup_options(dir));
  ASSERT_EQ(r.status, LookupResult::Status::found) << r.message;
  EXPECT_EQ(r.winner->variant, ks.variant);
  EXPECT_EQ(r.db, dir.file("system.db"));
  EXPECT_FALSE(fs::exists(dir.file("user.db")));  // a lookup never creates the user DB
}

TEST(StoreLookup, KernelIsTakenFromWhicheverDbHoldsIt) {
  TempDir dir;
  KernelRecord k = kernel(4);
  make_system_db(dir.file("system.db"), k, 90.0, winner_key(a100()));
  {
    Store u(dir.file("user.db"));
    u.set_winner(winner(k, 88.0));  // user winner, cubin only in the system DB
  }
  LookupResult r = find_winner(winner_key(), lookup_options(dir));
  ASSERT_EQ(r.status, LookupResult::Status::found) << r.message;
  EXPECT_EQ(r.db, dir.file("user.db"));
  EXPECT_EQ(r.kernel->cubin, k.cubin);
}

TEST(StoreLookup, WinnerWithoutKernelNeedsRebuild) {
  TempDir dir;
  KernelRecord k = kernel(4);
  {
    Store u(dir.file("user.db"));
    u.set_winner(winner(k, 88.0));
  }
  LookupResult r = find_winner(winner_key(), lookup_options(dir));
  EXPECT_EQ(r.status, LookupResult::Status::needs_rebuild);
  ASSERT_TRUE(r.winner);
  EXPECT_EQ(r.winner->variant, k.variant);
  EXPECT_THAT(r.message, HasSubstr(k.hash));
}

TEST(StoreLookup, MissReportsNearestKeyAndDifferingFields) {
  TempDir dir;
  KernelRecord k = kernel(0);
  {
    Store u(dir.file("user.db"));
    u.record_kernel(k);
    u.set_winner(winner(k, 100.0));
    u.set_winner(winner(k, 100.0, winner_key(a100(), problem(1024, false, "fast"))));
  }
  WinnerKey want = winner_key(h100(13010));
  LookupResult r = find_winner(want, lookup_options(dir), /*explain_miss=*/true);
  EXPECT_EQ(r.status, LookupResult::Status::miss);
  ASSERT_TRUE(r.nearest);
  EXPECT_EQ(r.nearest->device, h100());
  ASSERT_EQ(r.nearest_diff.size(), 1u);
  EXPECT_EQ(r.nearest_diff[0].field, "device.driver_version");
  EXPECT_THAT(r.message, HasSubstr("device.driver_version (wanted 13010, stored 13000)"));
  EXPECT_THAT(describe_miss(r), HasSubstr(dir.file("user.db")));

  LookupResult quiet = find_winner(want, lookup_options(dir));
  EXPECT_EQ(quiet.status, LookupResult::Status::miss);
  EXPECT_FALSE(quiet.nearest);
}

TEST(StoreLookup, NoDatabasesIsAPlainMiss) {
  TempDir dir;
  std::vector<std::string> warnings;
  LookupResult r = find_winner(winner_key(), lookup_options(dir, &warnings), true);
  EXPECT_EQ(r.status, LookupResult::Status::miss);
  EXPECT_THAT(r.message, HasSubstr("no stored winner to compare with"));
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(fs::exists(dir.file("user.db")));
  EXPECT_FALSE(fs::exists(dir.file("system.db")));
}

TEST(StoreLookup, JsonFormHasStatusAndDiff) {
  TempDir dir;
  LookupResult r = find_winner(winner_key(), lookup_options(dir), true);
  nlohmann::json j = r;
  EXPECT_EQ(j["status"], "miss");
  EXPECT_TRUE(j["winner"].is_null());
}
