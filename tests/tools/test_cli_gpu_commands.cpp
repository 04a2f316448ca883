// The GPU commands (tune, bench, verify, devices) and doctor, on their error paths and on a
// machine without a GPU: clear messages and the documented exit codes (docs/cli.md).
#include <gtest/gtest.h>

#include <utility>

#include <nlohmann/json.hpp>

#include "support/cli.h"
#include "support/gpu.h"

namespace sage {
namespace {
using test::CliRun;
using test::CliSandbox;

bool has_gpu() { return test::gpu_unavailable_reason().empty(); }

TEST(CliTune, BadShardIsAUsageError) {
  CliSandbox s;
  CliRun r = s.run("tune --shard 3/2");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("bad shard 3/2"), std::string::npos) << r.err;
  r = s.run("tune --shard x");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("expected i/n"), std::string::npos) << r.err;
}

TEST(CliTune, BadBudgetIsAUsageError) {
  CliSandbox s;
  CliRun r = s.run("tune --budget 5parsecs");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("bad --budget '5parsecs'"), std::string::npos) << r.err;
}

TEST(CliTune, UnknownPolicyIsAUsageError) {
  CliSandbox s;
  CliRun r = s.run("tune --policy reckless");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown policy 'reckless' (defined: accurate, balanced, fast)"), std::string::npos) << r.err;
}

TEST(CliTune, MissingProblemsFileIsNotFound) {
  CliSandbox s;
  CliRun r = s.run("tune --problems nowhere.yaml");
  EXPECT_EQ(r.rc, 8);
  EXPECT_NE(r.err.find("nowhere.yaml"), std::string::npos) << r.err;
}

TEST(CliTune, MalformedProblemsFileNamesFileLineAndKey) {
  CliSandbox s;
  s.write("p.yaml",
          "version: 1\n"
          "buckets: {seq: [1024], bh: [32]}\n"
          "policies:\n"
          "  balanced: {pv: [fp16, fp9], gaussian: {cos_min: 0.9, rel_l1_max: 0.1}, outliers: {cos_min: 0.9, rel_l1_max: 0.1}}\n"
          "problems: [{head_dim: [128], causal: [false], dtype: [fp16], layout: [HND], seq: [1024], bh: [32]}]\n");
  CliRun r = s.run("tune --problems p.yaml");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("p.yaml:4:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("policies.balanced.pv[1]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown pv 'fp9'"), std::string::npos) << r.err;
}

TEST(CliBench, BadArgumentsAreUsageErrors) {
  CliSandbox s;
  EXPECT_EQ(s.run("bench --causal maybe").rc, has_gpu() ? 2 : 5);
  // Each bad option is a usage error (exit 2) whose message names it.
  const std::pair<const char*, const char*> bad[] = {
      {"bench --seq 1024,lots", "bad --seq '1024,lots'"},
      {"bench --order sideways", "--order must be short-first or as-given, got 'sideways'"},
      {"bench --cooldown -1", "--cooldown must be 0 to 600 seconds"},
      {"bench --warmup-ms -5", "--warmup-ms must be 0 to 10000"},
      {"bench --varlen 2048y8", "--varlen: bad item '2048y8' (a length, or length x count: 2048x8)"},
      {"bench --varlen 64,,32", "--varlen: bad item ''"},
      {"bench --varlen 2048x0", "--varlen: '2048x0' needs a length >= 0 and a count of 1 to 65535"},
  };
  for (const auto& [args, message] : bad) {
    CliRun r = s.run(args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
  }
}

TEST(CliNoGpu, GpuCommandsSayWhyAndExit5) {
  if (has_gpu()) GTEST_SKIP() << "this machine has a GPU: the no-GPU paths are not reachable";
  CliSandbox s;
  for (const char* cmd : {"tune", "bench", "verify"}) {
    CliRun r = s.run(cmd);
    EXPECT_EQ(r.rc, 5) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("needs a GPU"), std::string::npos) << cmd << ": " << r.err;
  }
  CliRun d = s.run("devices");
  EXPECT_EQ(d.rc, 5);
  EXPECT_NE(d.err.find("no GPU"), std::string::npos) << d.err;
  CliRun j = s.run("devices --json");
  EXPECT_EQ(j.rc, 5);
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_TRUE(doc["devices"].empty());
  EXPECT_FALSE(doc["error"].get<std::string>().empty());
}

TEST(CliDoctor, ChecksNvrtcWithARealCompileAndReportsDatabases) {
  CliSandbox s;
  CliRun r = s.run("doctor");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ok    NVRTC"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compiled the FP32 reference"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(s.path("tune.db") + ": missing"), std::string::npos) << r.out;
  CliRun j = s.run("doctor --json");
  EXPECT_EQ(j.rc, 0);
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_TRUE(doc["ok"].get<bool>());
  bool saw_nvrtc = false;
  for (const auto& c : doc["checks"]) saw_nvrtc |= c["check"] == "NVRTC" && c["status"] == "ok";
  EXPECT_TRUE(saw_nvrtc) << j.out;
}

TEST(CliDoctor, CorruptUserDatabaseFailsTheCheck) {
  CliSandbox s;
  s.write("tune.db", std::string(4096, 'x'));
  CliRun r = s.run("doctor");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL  user DB"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sage
