// sage-tune select: the variant that serves a call and why (docs/cli.md). With --arch it needs no
// GPU: the call's bucket as the runtime keys it, the architecture's default for that bucket
// (batch x query heads included) and the configs/defaults.yaml entry that matched, which is
// where the file says.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sage/tuner/tune.h"
#include "support/cli.h"
#include "support/gpu.h"

namespace sage {
namespace {
using test::CliRun;
using test::CliSandbox;

std::vector<std::string> defaults_lines() {
  std::ifstream in(std::string(SAGE_SOURCE_DIR) + "/configs/defaults.yaml");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

nlohmann::json select_json(const CliSandbox& s, const std::string& args) {
  CliRun r = s.run("select --arch sm_90a --json " + args);
  EXPECT_EQ(r.rc, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(CliSelect, NamesTheDefaultOfTheCallsBucketAndTheEntryThatGaveIt) {
  CliSandbox s;
  const std::vector<std::string> lines = defaults_lines();
  ASSERT_GT(lines.size(), 100u);
  struct Case {
    std::string args;
    int d, n, n_kv, causal, pairs;  // pairs: the call's batch x query heads, which max_bh matches
    std::string bucket;
    std::string source = "default";
  };
  const Case cases[] = {
      // Few (sequence, head) pairs: the entries by batch x query heads (2026-11-28).
      {"-d 128 -n 4096 --batch 1 --heads 8 --heads-kv 1", 128, 4096, 4096, 0, 8,
       "d128_noncausal_fp16_HND_q4096_kv4096_bh8_balanced"},
      {"-d 64 -n 1000 --batch 1 --heads 12 --causal yes", 64, 1024, 1024, 1, 12,
       "d64_causal_fp16_HND_q1024_kv1024_bh16_balanced"},
      // B=1 H=24 in the bucket of up to 32 pairs: its own 24 pairs pick the entry (2026-11-28 (ae)).
      // Its default differs from the one at the bucket's boundary: a "pairs default".
      {"-d 64 -n 1024 --batch 1 --heads 24", 64, 1024, 1024, 0, 24, "d64_noncausal_fp16_HND_q1024_kv1024_bh32_balanced",
       "pairs default"},
      // The grid shape, and decoding.
      {"-d 128 -n 16384", 128, 16384, 16384, 0, 128, "d128_noncausal_fp16_HND_q16384_kv16384_bh128_balanced"},
      {"-d 128 -n 1 --seq-kv 32768 --batch 1 --heads 32 --heads-kv 8", 128, 1, 32768, 0, 32,
       "d128_noncausal_fp16_HND_q1_kv32768_bh32_balanced"},
  };
  for (const Case& c : cases) {
    const nlohmann::json j = select_json(s, c.args);
    EXPECT_EQ(j["bucket"], c.bucket) << c.args;
    EXPECT_EQ(j["source"], c.source) << c.args;
    EXPECT_EQ(j["variant"], tuner::default_variant("sm_90a", c.d, "balanced", c.n_kv, c.causal, c.n, false, c.pairs))
        << c.args;
    // The entry: a line of configs/defaults.yaml that opens an entry of the call's head dim, and
    // conditions that name it.
    const int line = j["defaults_entry"]["line"].get<int>();
    ASSERT_GT(line, 0) << c.args;
    ASSERT_LE(line, int(lines.size())) << c.args;
    EXPECT_NE(lines[line - 1].find("- head_dim: " + std::to_string(c.d)), std::string::npos)
        << c.args << ": line " << line << ": " << lines[line - 1];
    const std::string cond = j["defaults_entry"]["conditions"].get<std::string>();
    EXPECT_EQ(cond.rfind("head_dim " + std::to_string(c.d), 0), 0u) << cond;
  }
  // The entry by batch x heads named as such: B=1 with 8 heads over 4K keys, and B=1 H=24 over
  // 1K, whose bucket's 32 pairs would take the 128-row kernel.
  EXPECT_EQ(select_json(s, cases[0].args)["defaults_entry"]["conditions"], "head_dim 128, max_seq_kv 4096, max_bh 8");
  const nlohmann::json h24 = select_json(s, cases[2].args);
  EXPECT_EQ(h24["defaults_entry"]["conditions"], "head_dim 64, max_seq_kv 1024, max_bh 24");
  EXPECT_NE(h24["variant"], tuner::default_variant("sm_90a", 64, "balanced", 1024, 0, 1024, false, 32));
}

// sm_120's list continues with sm_89's (`- continue: sm_89`): an entry found there is named in
// the list that holds it, at its line, with the list that continued into it; an arch's own
// entries (sm_100's, whose list is its own) in its own list.
TEST(CliSelect, BlackwellEntriesNameTheListThatHoldsThem) {
  CliSandbox s;
  const std::vector<std::string> lines = defaults_lines();
  {
    const char* arch = "sm_120";
    CliRun r = s.run(std::string("select --arch ") + arch + " --json -d 128 -n 4096");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["variant"], tuner::default_variant(arch, 128, "balanced", 4096, 0, 4096, false, 128));
    EXPECT_EQ(j["defaults_entry"]["list"], "sm_89") << j.dump();
    const int line = j["defaults_entry"]["line"].get<int>();
    ASSERT_GT(line, 0);
    ASSERT_LE(line, int(lines.size()));
    EXPECT_NE(lines[line - 1].find("- head_dim: 128"), std::string::npos) << line << ": " << lines[line - 1];
    // sm_89's own select names the same entry.
    CliRun ada = s.run("select --arch sm_89 --json -d 128 -n 4096");
    ASSERT_EQ(ada.rc, 0) << ada.err;
    const nlohmann::json a = nlohmann::json::parse(ada.out);
    EXPECT_EQ(a["defaults_entry"]["list"], "sm_89");
    EXPECT_EQ(a["defaults_entry"]["index"], j["defaults_entry"]["index"]);
    EXPECT_EQ(a["defaults_entry"]["line"], line);
    CliRun text = s.run(std::string("select --arch ") + arch + " -d 128 -n 4096");
    ASSERT_EQ(text.rc, 0) << text.err;
    EXPECT_NE(text.out.find(std::string("(the ") + arch + " list continues with sm_89's)"), std::string::npos) << text.out;
  }
  CliRun own = s.run("select --arch sm_100 --json -d 256 -n 4096");
  ASSERT_EQ(own.rc, 0) << own.err;
  const nlohmann::json o = nlohmann::json::parse(own.out);
  EXPECT_EQ(o["defaults_entry"]["list"], "sm_100") << o.dump();
  EXPECT_EQ(o["defaults_entry"]["index"], 2);  // past the native kernel's (up to 128 queries, up to 1K keys)
  EXPECT_NE(o["variant"].get<std::string>().find("_qk-int8-thread_pv-fp16_"), std::string::npos) << o.dump();
  CliRun quant = s.run("select --arch sm_100 -d 128 -n 4096");
  ASSERT_EQ(quant.rc, 0) << quant.err;
  EXPECT_NE(quant.out.find("the sm_100 list's entry 8: head_dim 128"), std::string::npos) << quant.out;
  EXPECT_EQ(quant.out.find("continues"), std::string::npos) << quant.out;
}

// --varlen: a variable-length batch's varlen default, its own bucket, the entry that gave it and
// the bench command that times it; head dim 256 off Hopper has none, which it says.
TEST(CliSelect, VariableLengthBatchesNameTheirVarlenEntry) {
  CliSandbox s;
  const nlohmann::json j = select_json(s, "--varlen -d 128 -n 2048 -b 8 --heads 32 --heads-kv 8 --causal yes");
  EXPECT_EQ(j["variant"], tuner::default_variant("sm_90a", 128, "balanced", 2048, 1, 2048, false, 256, 0, true));
  EXPECT_EQ(j["source"], "varlen default");
  EXPECT_EQ(j["layout"], "NHD");
  EXPECT_EQ(j["varlen"], true);
  EXPECT_EQ(j["bucket"], "d128_causal_fp16_NHD_q2048_kv2048_bh512_balanced_varlen");
  EXPECT_NE(j["defaults_entry"]["conditions"].get<std::string>().find("varlen true"), std::string::npos) << j.dump();
  // The dense call of the same shape takes another entry.
  const nlohmann::json dense = select_json(s, "-d 128 -n 2048 -b 8 --heads 32 --heads-kv 8 --causal yes --layout NHD");
  EXPECT_NE(dense["variant"], j["variant"]);
  CliRun text = s.run("select --arch sm_89 --varlen -d 64 -n 512 -b 16");
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("varlen:  16 sequences packed"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" --varlen 512x16 "), std::string::npos) << text.out;
  // Under the default policy past 1K keys, sm_90a's varlen default is a quantized kernel's
  // entry, named by its entry's policies; the accurate policy keeps the native kernel.
  const nlohmann::json q = select_json(s, "--varlen -d 128 -n 4096 -b 4");
  EXPECT_NE(q["variant"].get<std::string>().find("qk-int8-thread_pv-fp8"), std::string::npos) << q.dump();
  EXPECT_NE(q["defaults_entry"]["conditions"].get<std::string>().find("policies balanced,fast"), std::string::npos)
      << q.dump();
  const nlohmann::json acc = select_json(s, "--varlen -d 128 -n 4096 -b 4 --policy accurate");
  EXPECT_NE(acc["variant"].get<std::string>().find("qk-native_pv-native"), std::string::npos) << acc.dump();
  CliRun none = s.run("select --arch sm_80 --varlen -d 256 -n 2048");
  EXPECT_NE(none.rc, 0);
  EXPECT_NE(none.err.find("for variable-length batches"), std::string::npos) << none.err;
  // With a window too: a packed batch's window at head dim 256 has no kernel off sm_90a, while a
  // dense call's window there takes the quantized mma.sync kernel.
  CliRun packed = s.run("select --arch sm_80 --varlen -d 256 -n 4096 --causal yes --window 1024");
  EXPECT_NE(packed.rc, 0);
  EXPECT_NE(packed.err.find("for variable-length batches with a sliding window"), std::string::npos) << packed.err;
  CliRun d256 = s.run("select --arch sm_80 --json -d 256 -n 4096 --causal yes --window 1024");
  ASSERT_EQ(d256.rc, 0) << d256.err;
  const nlohmann::json w256 = nlohmann::json::parse(d256.out);
  EXPECT_NE(w256["variant"].get<std::string>().find("attn_sm80_mma_d256_m64_n32_w4_s2_qk-int8-thread_pv-fp16_"),
            std::string::npos)
      << w256.dump();
}

// --sms: the defaults of a call on another SM count (a GPU of the architecture with fewer SMs, a
// green context's partition), whose max_bh edges move with one wave's places.
TEST(CliSelect, SmsReadTheWaveEdgesForThatManySms) {
  CliSandbox s;
  // B=1 H=22 over 1K keys: one wave of the 64-row CTAs on 132 SMs (352 of 396 places), not on
  // 112 (336): there it fills the waves as 25 pairs do on 132, and takes the 128-row kernel.
  const nlohmann::json full = select_json(s, "-d 64 -n 1024 --batch 1 --heads 22");
  EXPECT_EQ(full["sms"], 0);
  EXPECT_EQ(full["pairs_as_measured"], 22);
  EXPECT_EQ(full["variant"], tuner::default_variant("sm_90a", 64, "balanced", 1024, 0, 1024, false, 22));
  const nlohmann::json part = select_json(s, "-d 64 -n 1024 --batch 1 --heads 22 --sms 112");
  EXPECT_EQ(part["sms"], 112);
  EXPECT_EQ(part["measured_sms"], 132);
  EXPECT_EQ(part["pairs"], 22);
  EXPECT_EQ(part["pairs_as_measured"], 25);
  EXPECT_EQ(part["variant"], tuner::default_variant("sm_90a", 64, "balanced", 1024, 0, 1024, false, 25));
  EXPECT_NE(part["variant"], full["variant"]);
  EXPECT_EQ(part["source"], "pairs default");
  EXPECT_NE(part["why"].get<std::string>().find("22 (sequence, query head) pairs on 112 SMs (as 25 on 132)"),
            std::string::npos)
      << part.dump();
  CliRun r = s.run("select --arch sm_90a -d 64 -n 1024 --batch 1 --heads 22 --sms 112");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("SMs:     112: 22 (sequence, query head) pairs fill the waves as 25 do on the 132 SMs"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--causal no --sms 112"), std::string::npos) << r.out;
  CliRun bad = s.run("select --arch sm_90a -d 64 -n 1024 --sms -4");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--sms must be >= 1, got -4"), std::string::npos) << bad.err;
}

TEST(CliSelect, RowsOffTheSectorsTakeTheirOwnEntry) {
  CliSandbox s;
  // d=72 (144-byte rows) over 3K keys and queries: the head dim 128 kernels, and the rows16
  // entry ahead of any winner.
  const nlohmann::json j = select_json(s, "-d 72 -n 3072 --batch 1 --heads 8 --heads-kv 2");
  EXPECT_EQ(j["kernel_head_dim"], 128);
  EXPECT_EQ(j["rows16"], true);
  EXPECT_EQ(j["source"], "rows16 default");
  EXPECT_EQ(j["variant"], *tuner::rows16_default("sm_90a", 128, "balanced", 3072, 0, 3072, 8));
  EXPECT_NE(j["defaults_entry"]["conditions"].get<std::string>().find("rows16 true"), std::string::npos) << j.dump();
  // d=80 (160-byte rows) is aligned: the bucket's ordinary default.
  const nlohmann::json k = select_json(s, "-d 80 -n 3072 --batch 1 --heads 8 --heads-kv 2");
  EXPECT_EQ(k["rows16"], false);
  EXPECT_EQ(k["source"], "default");
  EXPECT_EQ(k["variant"], tuner::default_variant("sm_90a", 128, "balanced", 3072, 0, 3072, false, 8));
}

TEST(CliSelect, TextNamesTheBucketTheEntryAndHowToTimeIt) {
  CliSandbox s;
  CliRun r = s.run("select --arch sm_90a -d 128 -n 4096 --batch 1 --heads 8 --heads-kv 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("bucket:  d128_noncausal_fp16_HND_q4096_kv4096_bh8_balanced"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("entry:   configs/defaults.yaml line "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("time it: sage-tune bench --variant attn_sm90a_"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--batch 1 --heads 8 --heads-kv 1 --causal no"), std::string::npos) << r.out;
}

// A call over FP8 pages: its bucket, the entry that serves it (sm_90a, a 2048-query chunk at
// D=128: the `kv8` entry's 128x128 wgmma kernel) and a bench command that times FP8 pages.
TEST(CliSelect, Fp8PagesNameTheirBucketEntryAndBench) {
  CliSandbox s;
  CliRun r = s.run("select --arch sm_90a -d 128 -n 2048 --seq-kv 8192 --batch 4 --heads 32 --heads-kv 8 --causal yes "
                   "--paged 16 --kv-fp8");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("_kv8_paged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kv8 true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attn_sm90a_wgmma_d128_m128_n128_wg2_s2_qk-native_pv-native_tma_sch-plain_occ1"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--paged 16 --kv-fp8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("those that name kv8, which serve FP8 calls only"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("sliding window"), std::string::npos) << r.out;  // no window: not matched as one
  // with a window: an mma.sync kernel, and the window in the bench command
  CliRun w = s.run("select --arch sm_90a -d 128 -n 2048 --seq-kv 8192 --batch 4 --heads 32 --heads-kv 8 --causal yes "
                   "--paged 16 --kv-fp8 --window 512");
  ASSERT_EQ(w.rc, 0) << w.err;
  EXPECT_NE(w.out.find("attn_sm90a_mma_"), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("--window 512 --paged 16 --kv-fp8"), std::string::npos) << w.out;
}

TEST(CliSelect, BadInputIsAClearError) {
  CliSandbox s;
  CliRun r = s.run("select --arch sm_75 -d 64 -n 1024");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("unknown --arch 'sm_75'"), std::string::npos) << r.err;
  r = s.run("select --arch sm_90a -d 300 -n 1024");
  EXPECT_EQ(r.rc, 9) << r.err;
  r = s.run("select --arch sm_90a -d 64 -n 2000 --seq-kv 1000 --causal yes");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("causal needs -n <= --seq-kv"), std::string::npos) << r.err;
  r = s.run("select --arch sm_90a -d 64 -n 1024 --policy reckless");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("unknown policy 'reckless'"), std::string::npos) << r.err;
  r = s.run("select --arch sm_90a -d 64");
  EXPECT_EQ(r.rc, 2) << r.err;  // -n is required
}

TEST(CliSelect, WithoutAGpuItAsksForTheArchitecture) {
  if (test::gpu_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is present: select consults its databases";
  CliSandbox s;
  CliRun r = s.run("select -d 64 -n 1024");
  EXPECT_EQ(r.rc, 5) << r.err;
  EXPECT_NE(r.err.find("name the architecture with --arch"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sage
