// The variant record the tuner stores carries the launcher's config, so that the runtime can
// serve a stored winner without the search space: it must round-trip exactly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/internal/launch.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"

namespace sage {
namespace {

// The launcher encodes tensor maps only for configs that say `tma`: every variant of the tma
// axis must say so (and keep saying so through a stored record), and no other may.
TEST(VariantRecord, TheTmaAxisReachesTheLauncherConfig) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  int with = 0, without = 0;
  for (const gen::Variant& v : space.enumerate().variants) {
    if (v.pipeline == "reference") continue;
    const bool tma = v.params.count("tma") && v.get_bool("tma");
    const KernelConfig c = tuner::kernel_config(v);
    EXPECT_EQ(c.tma, tma) << v.name;
    EXPECT_EQ(v.name.find("_tma_") != std::string::npos, tma) << v.name;
    EXPECT_EQ(KernelConfig::parse(c.str()).tma, tma) << c.str();
    (tma ? with : without)++;
  }
  EXPECT_GT(with, 0);
  EXPECT_GT(without, 0);
}

TEST(VariantRecord, KernelConfigRoundTripsForEveryAttentionVariant) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  int n = 0;
  for (const gen::Variant& v : space.enumerate().variants) {
    if (v.pipeline == "reference") continue;
    tuner::VariantRecord r;
    r.name = v.name;
    r.params_json = tuner::variant_record_json(v);
    std::optional<KernelConfig> cfg = tuner::stored_kernel_config(r);
    ASSERT_TRUE(cfg.has_value()) << v.name;
    EXPECT_EQ(cfg->str(), tuner::kernel_config(v).str()) << v.name;
    const nlohmann::json j = nlohmann::json::parse(r.params_json);
    EXPECT_EQ(j["pipeline"], v.pipeline);
    EXPECT_EQ(j["params"]["head_dim"].get<int>(), v.get_int("head_dim"));
    ++n;
  }
  EXPECT_GT(n, 100);
}

TEST(VariantRecord, OtherRecordsHaveNoStoredConfig) {
  tuner::VariantRecord r;
  for (const char* text : {"{}", "not json", "{\"kernel_config\": 3}", "{\"kernel_config\": \"pipeline=mma;bogus=1\"}"}) {
    r.params_json = text;
    EXPECT_FALSE(tuner::stored_kernel_config(r).has_value()) << text;
  }
}

// The launcher looks its entries up by name when it loads a module (AttnKernel: sage_prep for
// the quantized variants, sage_prep_v for their FP8 P.V, sage_attn_lse for INT8 P.V, sage_attn_q3 where
// has_q3_entry says so; the varlen, window, paged and FP8 pages' entries by has_varlen_entry,
// has_window_entry, has_paged_entry, has_paged_window_entry and has_paged_fp8_entry), and a
// missing one fails the call on the GPU. So every rendered module defines exactly the entries the
// launcher's rules name for its config, and the wgmma FP8 entries' shared memory is the
// launcher's paged_fp8_smem_bytes (the template's static_assert holds it to the kernel's).
TEST(VariantRecord, EveryModuleDefinesTheEntriesTheLauncherLoads) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const tuner::VariantBuilder builder(tuner::CompileOptions{});
  auto defines = [](const std::string& src, const char* entry) {
    return src.find(std::string("\n") + entry + "(const __grid_constant__") != std::string::npos;
  };
  int n = 0, q3 = 0, lse = 0, prep_v = 0, paged = 0, fp8_wgmma = 0;
  for (const gen::Variant& v : space.enumerate().variants) {
    if (v.pipeline == "reference") continue;
    const KernelConfig c = tuner::kernel_config(v);
    const std::string src = builder.render(v);
    const bool native = c.qk == "native";
    EXPECT_TRUE(defines(src, "sage_attn")) << v.name;
    EXPECT_EQ(defines(src, "sage_prep"), !native) << v.name;
    // FP8 V again exactly: the quantized FP8 P.V variants' (native Q.K^T with FP8 P.V converts V
    // in the attention kernel).
    EXPECT_EQ(defines(src, "sage_prep_v"), c.pv == "fp8" && !native) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_lse"), c.pv == "int8") << v.name;
    EXPECT_EQ(defines(src, "sage_attn_q3"), has_q3_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_varlen"), has_varlen_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_window"), has_window_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_paged"), has_paged_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_varlen_paged"), has_paged_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_paged_window"), has_paged_window_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_varlen_paged_window"), has_paged_window_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_paged_fp8"), has_paged_fp8_entry(c)) << v.name;
    EXPECT_EQ(defines(src, "sage_attn_varlen_paged_fp8"), has_paged_fp8_entry(c)) << v.name;
    if (has_paged_fp8_entry(c) && c.pipeline == "wgmma") {
      EXPECT_NE(src.find(cat("Fp8PagesLayout<Cfg>::SMEM_BYTES == ", paged_fp8_smem_bytes(c), ",")), std::string::npos)
          << v.name;
      EXPECT_NE(src.find(cat("Fp8PagesLayout<Cfg>::THREADS == ", paged_fp8_threads(c), ",")), std::string::npos)
          << v.name;
      ++fp8_wgmma;
    }
    paged += has_paged_entry(c);
    ++n;
    q3 += has_q3_entry(c);
    lse += c.pv == "int8";
    prep_v += c.pv == "fp8" && !native;
  }
  EXPECT_GT(n, 400);
  EXPECT_GT(q3, 0);
  EXPECT_GT(lse, 0);
  EXPECT_GT(prep_v, 0);
  EXPECT_GT(paged, 0);
  EXPECT_GT(fp8_wgmma, 0);
}

}  // namespace
}  // namespace sage
