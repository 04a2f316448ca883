// The variant record the tuner stores carries the launcher's config, so that the runtime can
// serve a stored winner without the search space: it must round-trip exactly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sage/gen/search_space.h"
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

}  // namespace
}  // namespace sage
