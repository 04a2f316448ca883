// The search space: loading and validation errors (with file:line:col and key), enumeration
// counts, pruning reasons, names, hashes, lookup, rendering, and the built-in configuration.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

#include "sage/common/archs.h"
#include "sage/common/embedded.h"
#include "sage/common/error.h"
#include "sage/common/sha256.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/gen/template.h"

namespace sage::gen {
namespace {

// A small space whose every count below can be checked by hand:
//  mma on sm_80 (40 KiB smem, no fp8) and sm_90a (no int4); set a = 2 tiles x 16 axis
//  combinations, set b repeats one of them; the 64x64 tile with 8 warps has 8 rows per warp.
const char* kSmall = R"(version: 1
archs:
  sm_80: {cc: 80, smem_max: 40960, features: [cp_async, mma_int8, mma_int4, mma_fp16]}
  sm_90a: {cc: 90, smem_max: 232448, regs_max: 255, features: [cp_async, mma_int8, mma_fp16, mma_fp8]}
axes:
  head_dim: {type: int, values: [64, 128], label: d}
  block_m: {type: int, values: [64, 128], label: m}
  block_n: {type: int, values: [64, 128], label: n}
  warps: {type: int, values: [4, 8], label: w}
  stages: {type: int, values: [1, 2, 3], label: s}
  qk: {type: enum, values: [int8, int4], label: qk}
  granularity: {type: enum, values: [per_thread, per_warp], label: g, abbrev: {per_thread: thread, per_warp: warp}, join: qk}
  pv: {type: enum, values: [fp16, fp8], label: pv}
  smooth_k: {type: bool, label: smk}
pipelines:
  mma:
    template: attn.cu.j2
    archs: [sm_80, sm_90a]
    tile_columns: [block_m, block_n, warps, stages]
    sets:
      - name: a
        tiles: [[128, 64, 8, 2], [64, 64, 8, 2]]
        axes: {head_dim: [64, 128], qk: [int8, int4], granularity: per_thread, pv: [fp16, fp8], smooth_k: [true, false]}
      - name: b
        tiles: [{block_m: 128, block_n: 64, warps: 8, stages: 2}]
        axes: {smooth_k: true, pv: fp16, granularity: per_thread, qk: int8, head_dim: 128}
    requires:
      qk: {int4: mma_int4}
      pv: {fp8: mma_fp8}
    derived:
      warp_q: block_m // warps
      smem_bytes: block_m * head_dim + stages * block_n * head_dim * (1 if pv == 'fp8' else 2)
    constraints:
      - name: warp_rows
        when: warp_q != 16
        reason: "{{ warp_q }} rows per warp"
      - name: smem_limit
        when: smem_bytes > arch.smem_max
        reason: "smem {{ smem_bytes // 1024 }} KiB > {{ arch.smem_max // 1024 }} KiB on {{ arch.name }}"
  ref:
    template: ref.cu.j2
    archs: [sm_80, sm_90a]
    name_stem: ref_{arch}
)";

const char* kGolden = "attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp16_smk";

SearchSpace small() { return SearchSpace::from_string(kSmall, "small.yaml"); }

// kSmall with the first occurrence of `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string s = kSmall;
  std::size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

// "t.yaml:LINE:COL" of the first occurrence of `needle` in `text`.
std::string place_of(const std::string& text, const std::string& needle, const std::string& file = "t.yaml") {
  std::size_t p = text.find(needle);
  EXPECT_NE(p, std::string::npos) << needle;
  int line = 1 + int(std::count(text.begin(), text.begin() + std::ptrdiff_t(p), '\n'));
  std::size_t bol = text.rfind('\n', p);
  std::size_t col = p - (bol == std::string::npos ? 0 : bol + 1) + 1;
  return cat(file, ":", line, ":", col);
}

// Loads `yaml` and returns the parse error it must give.
Error load_error(const std::string& yaml) {
  try {
    SearchSpace::from_string(yaml, "t.yaml");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a parse error";
  return Error(Errc::internal, "no error");
}

const PrunedVariant* pruned_named(const Enumeration& en, const std::string& name) {
  for (auto& p : en.pruned)
    if (p.variant.name == name) return &p;
  return nullptr;
}

std::size_t count_rule(const Enumeration& en, const std::string& rule, const std::string& arch) {
  return std::size_t(std::count_if(en.pruned.begin(), en.pruned.end(), [&](const PrunedVariant& p) {
    return p.rule == rule && p.variant.arch == arch;
  }));
}

// ---- loading errors -----------------------------------------------------------------------

TEST(SearchSpaceLoad, MalformedYamlIsParseErrorWithLineAndColumn) {
  std::string yaml = "version: 1\narchs: [sm_80, {cc: 80\naxes: {}\n";
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_TRUE(std::regex_match(e.where(), std::regex(R"(t\.yaml:[0-9]+:[0-9]+)"))) << e.where();
  EXPECT_NE(e.message().find("malformed YAML"), std::string::npos) << e.message();
}

TEST(SearchSpaceLoad, UnknownKeyNamesKeyAndPlace) {
  std::string yaml = edited("    name_stem: ref_{arch}\n", "    name_stem: ref_{arch}\n    colour: red\n");
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_EQ(e.where(), place_of(yaml, "colour"));
  EXPECT_NE(e.message().find("key 'pipelines.ref.colour': unknown key (allowed: template, archs"),
            std::string::npos)
      << e.message();
}

TEST(SearchSpaceLoad, UnknownAxisValueListsTheVocabulary) {
  std::string yaml = edited("pv: [fp16, fp8], smooth_k: [true, false]", "pv: [fp16, fp9], smooth_k: [true, false]");
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_EQ(e.where(), place_of(yaml, "fp9"));
  EXPECT_EQ(e.message(), "key 'pipelines.mma.sets[0].axes.pv': unknown value 'fp9' (allowed: fp16, fp8)");
  // The full text reads file:line:col: key ...
  EXPECT_TRUE(starts_with(e.what(), place_of(yaml, "fp9") + ": key 'pipelines.mma.sets[0].axes.pv'"));
}

TEST(SearchSpaceLoad, UnknownValueInTileNamesTheColumn) {
  std::string yaml = edited("[[128, 64, 8, 2], [64, 64, 8, 2]]", "[[128, 64, 8, 2], [64, 48, 8, 2]]");
  Error e = load_error(yaml);
  EXPECT_EQ(e.where(), place_of(yaml, "48, 8, 2]]"));
  EXPECT_EQ(e.message(),
            "key 'pipelines.mma.sets[0].tiles[1].block_n': unknown value '48' (allowed: 64, 128)");
}

TEST(SearchSpaceLoad, WrongTypeNamesKey) {
  std::string yaml = edited("sm_80: {cc: 80,", "sm_80: {cc: eighty,");
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_EQ(e.where(), place_of(yaml, "eighty"));
  EXPECT_EQ(e.message(), "key 'archs.sm_80.cc': expected an integer, got 'eighty'");
}

TEST(SearchSpaceLoad, BoolAxisRejectsNonBool) {
  std::string yaml = edited("smooth_k: [true, false]}", "smooth_k: [true, maybe]}");
  Error e = load_error(yaml);
  EXPECT_EQ(e.where(), place_of(yaml, "maybe"));
  EXPECT_EQ(e.message(), "key 'pipelines.mma.sets[0].axes.smooth_k': expected true or false, got 'maybe'");
}

TEST(SearchSpaceLoad, MissingTemplate) {
  std::string yaml = edited("    template: ref.cu.j2\n", "");
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_EQ(e.message(), "key 'pipelines.ref': missing required key 'template'");
  EXPECT_EQ(e.where(), place_of(yaml, "archs: [sm_80, sm_90a]\n    name_stem"));
}

TEST(SearchSpaceLoad, DuplicatePipeline) {
  std::string yaml = std::string(kSmall) + "  mma:\n    template: other.cu.j2\n    archs: [sm_80]\n";
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  std::size_t second = yaml.rfind("  mma:");
  int line = 1 + int(std::count(yaml.begin(), yaml.begin() + std::ptrdiff_t(second), '\n'));
  EXPECT_EQ(e.where(), cat("t.yaml:", line, ":3"));
  EXPECT_NE(e.message().find("key 'pipelines.mma': duplicate key (first at " + place_of(yaml, "mma:") + ")"),
            std::string::npos)
      << e.message();
}

TEST(SearchSpaceLoad, BadDerivedExpressionNamesKey) {
  std::string yaml = edited("smem_bytes: block_m * head_dim +", "smem_bytes: block_m * * head_dim +");
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_EQ(e.where(), place_of(yaml, "block_m * * head_dim"));
  EXPECT_TRUE(starts_with(e.message(), "key 'pipelines.mma.derived.smem_bytes': ")) << e.message();
}

TEST(SearchSpaceLoad, UndefinedNameInDerivedIsCaughtAtLoad) {
  std::string yaml = edited("warp_q: block_m // warps", "warp_q: block_m // wraps");
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_EQ(e.where(), place_of(yaml, "block_m // wraps"));
  EXPECT_TRUE(starts_with(e.message(), "key 'pipelines.mma.derived.warp_q': ")) << e.message();
  EXPECT_NE(e.message().find("wraps"), std::string::npos) << e.message();
}

TEST(SearchSpaceLoad, BadReasonTemplateNamesKey) {
  std::string yaml = edited("reason: \"{{ warp_q }} rows per warp\"", "reason: \"{{ warp_q rows per warp\"");
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_TRUE(starts_with(e.message(), "key 'pipelines.mma.constraints[0].reason': ")) << e.message();
}

TEST(SearchSpaceLoad, ConstraintMustGiveBool) {
  std::string yaml = edited("when: warp_q != 16", "when: warp_q - 16");
  Error e = load_error(yaml);
  EXPECT_EQ(e.where(), place_of(yaml, "warp_q - 16"));
  EXPECT_NE(e.message().find("must give true or false, got int"), std::string::npos) << e.message();
}

TEST(SearchSpaceLoad, UnknownAxisInSet) {
  std::string yaml = edited("axes: {head_dim: [64, 128],", "axes: {headdim: [64, 128],");
  Error e = load_error(yaml);
  EXPECT_EQ(e.where(), place_of(yaml, "headdim"));
  EXPECT_NE(e.message().find("unknown axis 'headdim' (declared axes: head_dim, block_m"), std::string::npos)
      << e.message();
}

TEST(SearchSpaceLoad, SetsMustGiveTheSameAxes) {
  std::string yaml = edited("axes: {smooth_k: true, pv: fp16,", "axes: {pv: fp16,");
  Error e = load_error(yaml);
  EXPECT_NE(e.message().find("every set of a pipeline must give the same axes"), std::string::npos)
      << e.message();
  EXPECT_TRUE(starts_with(e.message(), "key 'pipelines.mma.sets[1].axes'")) << e.message();
}

TEST(SearchSpaceLoad, TileWithWrongWidth) {
  std::string yaml = edited("[[128, 64, 8, 2], [64, 64, 8, 2]]", "[[128, 64, 8, 2], [64, 64, 8]]");
  Error e = load_error(yaml);
  EXPECT_EQ(e.message(), "key 'pipelines.mma.sets[0].tiles[1]': a tile has 4 values (block_m, block_n, "
                         "warps, stages), got 3");
}

TEST(SearchSpaceLoad, UnknownArchInPipeline) {
  std::string yaml = edited("archs: [sm_80, sm_90a]\n    tile_columns", "archs: [sm_80, sm_75]\n    tile_columns");
  Error e = load_error(yaml);
  EXPECT_EQ(e.where(), place_of(yaml, "sm_75"));
  EXPECT_EQ(e.message(), "key 'pipelines.mma.archs': unknown architecture 'sm_75' (declared in archs: sm_80, sm_90a)");
}

TEST(SearchSpaceLoad, RequiresUnknownFeature) {
  std::string yaml = edited("pv: {fp8: mma_fp8}", "pv: {fp8: mma_fp9}");
  Error e = load_error(yaml);
  EXPECT_EQ(e.where(), place_of(yaml, "mma_fp9"));
  EXPECT_NE(e.message().find("feature 'mma_fp9' is not provided by any architecture"), std::string::npos);
}

TEST(SearchSpaceLoad, LabelsAreLettersAndUnique) {
  Error digits = load_error(edited("label: s}", "label: s2}"));
  EXPECT_NE(digits.message().find("labels are lower-case letters only"), std::string::npos);
  Error dup = load_error(edited("label: pv}", "label: qk}"));
  EXPECT_NE(dup.message().find("label 'qk' is already used by axis 'qk'"), std::string::npos) << dup.message();
}

TEST(SearchSpaceLoad, EnumValueNeedsAbbrevWhenNotNameSafe) {
  Error e = load_error(edited(", abbrev: {per_thread: thread, per_warp: warp}", ""));
  EXPECT_NE(e.message().find("value 'per_thread' cannot appear in variant names"), std::string::npos)
      << e.message();
}

TEST(SearchSpaceLoad, NameStemNeedsArch) {
  Error e = load_error(edited("name_stem: ref_{arch}", "name_stem: reference"));
  EXPECT_EQ(e.message(), "key 'pipelines.ref.name_stem': the stem must contain '{arch}' exactly once, got 'reference'");
}

TEST(SearchSpaceLoad, CollidingNamesAcrossPipelines) {
  // A second pipeline with mma's stem and axes but another template: same names, other ids.
  std::string yaml = std::string(kSmall) +
                     "  mma2:\n"
                     "    template: attn2.cu.j2\n"
                     "    archs: [sm_80]\n"
                     "    name_stem: attn_{arch}_mma\n"
                     "    tile_columns: [block_m, block_n, warps, stages]\n"
                     "    tiles: [[128, 64, 8, 2]]\n"
                     "    axes: {head_dim: 64, qk: int8, granularity: per_thread, pv: fp16, smooth_k: true}\n";
  Error e = load_error(yaml);
  EXPECT_EQ(e.code(), Errc::parse_error);
  EXPECT_EQ(e.message(),
            "two different variants are both named "
            "'attn_sm80_mma_d64_m128_n64_w8_s2_qk-int8-thread_pv-fp16_smk' (pipelines 'mma' and "
            "'mma2'): give the pipelines distinct name_stem values");
  EXPECT_EQ(e.where(), place_of(yaml, "mma2:"));
}

TEST(SearchSpaceLoad, MissingFileIsNotFound) {
  try {
    SearchSpace::from_file("/nonexistent/space.yaml");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_found);
    EXPECT_EQ(e.where(), "/nonexistent/space.yaml");
  }
}

// ---- enumeration and pruning ------------------------------------------------------------

TEST(SearchSpaceEnumerate, SmallSpaceCounts) {
  Enumeration en = small().enumerate();
  // mma: 32 combinations per arch (set b only repeats one of set a); ref: 1 per arch.
  EXPECT_EQ(en.variants.size() + en.pruned.size(), 66u);
  EXPECT_EQ(en.variants.size(), 14u);
  auto kept = [&](const std::string& pipeline, const std::string& arch) {
    return std::count_if(en.variants.begin(), en.variants.end(),
                         [&](const Variant& v) { return v.pipeline == pipeline && v.arch == arch; });
  };
  EXPECT_EQ(kept("mma", "sm_80"), 4);   // d64, fp16, tile 128x64, qk int8/int4 x smk
  EXPECT_EQ(kept("mma", "sm_90a"), 8);  // qk int8, tile 128x64, d x pv x smk
  EXPECT_EQ(kept("ref", "sm_80"), 1);
  EXPECT_EQ(kept("ref", "sm_90a"), 1);
  EXPECT_EQ(count_rule(en, "requires pv=fp8: mma_fp8", "sm_80"), 16u);
  EXPECT_EQ(count_rule(en, "warp_rows", "sm_80"), 8u);
  EXPECT_EQ(count_rule(en, "smem_limit", "sm_80"), 4u);
  EXPECT_EQ(count_rule(en, "requires qk=int4: mma_int4", "sm_90a"), 16u);
  EXPECT_EQ(count_rule(en, "warp_rows", "sm_90a"), 8u);
  EXPECT_EQ(count_rule(en, "smem_limit", "sm_90a"), 0u);
}

TEST(SearchSpaceEnumerate, SelectsArchsAndPipelines) {
  SearchSpace s = small();
  Enumeration en = s.enumerate({{"sm_90a"}, "", {"mma"}});
  EXPECT_EQ(en.variants.size(), 8u);
  EXPECT_EQ(en.pruned.size(), 24u);
  for (auto& v : en.variants) {
    EXPECT_EQ(v.arch, "sm_90a");
    EXPECT_EQ(v.pipeline, "mma");
  }
}

TEST(SearchSpaceEnumerate, UnknownArchPipelineOrRegexIsInvalidArgument) {
  SearchSpace s = small();
  auto code_of = [&](const EnumerateOptions& o) {
    try {
      s.enumerate(o);
    } catch (const Error& e) {
      return e.code();
    }
    return Errc::internal;
  };
  EXPECT_EQ(code_of({{"sm_75"}, "", {}}), Errc::invalid_argument);
  EXPECT_EQ(code_of({{}, "", {"wgmma"}}), Errc::invalid_argument);
  EXPECT_EQ(code_of({{}, "(unclosed", {}}), Errc::invalid_argument);
}

TEST(SearchSpacePrune, MissingFeatureReasonNamesArchs) {
  Enumeration en = small().enumerate();
  const PrunedVariant* fp8 = pruned_named(en, "attn_sm80_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8_smk");
  ASSERT_NE(fp8, nullptr);
  EXPECT_EQ(fp8->reason, "pv=fp8 needs mma_fp8 (sm_90a+), sm_80 lacks it");
  const PrunedVariant* int4 = pruned_named(en, "attn_sm90a_mma_d64_m128_n64_w8_s2_qk-int4-thread_pv-fp16");
  ASSERT_NE(int4, nullptr);
  EXPECT_EQ(int4->reason, "qk=int4 needs mma_int4 (sm_80), sm_90a lacks it");
  EXPECT_TRUE(int4->variant.derived.empty());  // pruned before derived values are computed
}

TEST(SearchSpacePrune, SmemOverLimitGivesBothNumbers) {
  Enumeration en = small().enumerate();
  const PrunedVariant* p = pruned_named(en, "attn_sm80_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp16_smk");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->rule, "smem_limit");
  EXPECT_EQ(p->reason, "smem 48 KiB > 40 KiB on sm_80");
  EXPECT_EQ(p->variant.derived.at("smem_bytes").as_int(), 128 * 128 + 2 * 64 * 128 * 2);
}

TEST(SearchSpacePrune, WarpRowsConstraint) {
  Enumeration en = small().enumerate();
  const PrunedVariant* p = pruned_named(en, "attn_sm90a_mma_d64_m64_n64_w8_s2_qk-int8-thread_pv-fp8");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->rule, "warp_rows");
  EXPECT_EQ(p->reason, "8 rows per warp");
}

TEST(SearchSpacePrune, FilterExcludesByName) {
  Enumeration en = small().enumerate({{"sm_90a"}, "pv-fp8", {}});
  EXPECT_EQ(en.variants.size(), 4u);  // 8 kept on sm_90a, half of them fp8
  for (auto& v : en.variants) EXPECT_NE(v.name.find("pv-fp8"), std::string::npos);
  const PrunedVariant* p = pruned_named(en, kGolden);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->rule, "filter");
  EXPECT_EQ(p->reason, "excluded by filter");
  EXPECT_NE(pruned_named(en, "ref_sm90a"), nullptr);
  // Variants matching the filter keep their own reason.
  const PrunedVariant* rows = pruned_named(en, "attn_sm90a_mma_d64_m64_n64_w8_s2_qk-int8-thread_pv-fp8");
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->rule, "warp_rows");
}

TEST(SearchSpacePrune, RegsEstimateOverBudget) {
  std::string yaml = edited("      warp_q: block_m // warps\n",
                            "      warp_q: block_m // warps\n      regs_estimate: 2 * head_dim\n");
  Enumeration en = SearchSpace::from_string(yaml, "t.yaml").enumerate({{"sm_90a"}, "", {"mma"}});
  EXPECT_EQ(en.variants.size(), 4u);  // of the 8 kept without the estimate, the d128 half goes
  for (auto& v : en.variants) EXPECT_EQ(v.get_int("regs_estimate"), 128) << v.name;
  const PrunedVariant* p = pruned_named(en, "attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->rule, "regs_estimate");
  EXPECT_EQ(p->reason, "estimated 256 registers/thread > 255 on sm_90a");
}

TEST(SearchSpaceEnumerate, PipelineWithoutAxesHasOneVariantPerArch) {
  Enumeration en = small().enumerate({{}, "", {"ref"}});
  ASSERT_EQ(en.variants.size(), 2u);
  EXPECT_EQ(en.variants[0].name, "ref_sm80");
  EXPECT_EQ(en.variants[1].name, "ref_sm90a");
  EXPECT_TRUE(en.variants[0].params.empty());
  EXPECT_EQ(en.variants[1].template_name, "ref.cu.j2");
  EXPECT_TRUE(en.pruned.empty());
}

// ---- names and hashes -------------------------------------------------------------------

TEST(SearchSpaceNames, GoldenNameEncodesEveryParameter) {
  std::optional<Variant> v = small().find(kGolden);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->get_int("head_dim"), 128);
  EXPECT_EQ(v->get_int("block_m"), 128);
  EXPECT_EQ(v->get_int("block_n"), 64);
  EXPECT_EQ(v->get_int("warps"), 8);
  EXPECT_EQ(v->get_int("stages"), 2);
  EXPECT_EQ(v->get_string("qk"), "int8");
  EXPECT_EQ(v->get_string("granularity"), "per_thread");
  EXPECT_EQ(v->get_string("pv"), "fp16");
  EXPECT_TRUE(v->get_bool("smooth_k"));
  EXPECT_EQ(v->params.size(), 9u);
  // false booleans are absent from the name
  EXPECT_TRUE(small().find("attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp16").has_value());
}

TEST(SearchSpaceNames, UniqueOverTheWholeSpace) {
  std::vector<SearchSpace> spaces;
  spaces.push_back(small());
  spaces.push_back(SearchSpace::builtin());
  for (const SearchSpace& s : spaces) {
    Enumeration en = s.enumerate();
    std::set<std::string> names, hashes;
    for (auto& v : en.variants) {
      EXPECT_TRUE(names.insert(v.name).second) << v.name;
      EXPECT_TRUE(hashes.insert(v.params_hash).second) << v.name;
    }
    for (auto& p : en.pruned) {
      EXPECT_TRUE(names.insert(p.variant.name).second) << p.variant.name;
      EXPECT_TRUE(hashes.insert(p.variant.params_hash).second) << p.variant.name;
    }
    EXPECT_GT(names.size(), 0u);
  }
}

TEST(SearchSpaceNames, StableAcrossLoadsAndOrder) {
  Enumeration a = small().enumerate();
  Enumeration b = small().enumerate();
  ASSERT_EQ(a.variants.size(), b.variants.size());
  for (std::size_t i = 0; i < a.variants.size(); ++i) {
    EXPECT_EQ(a.variants[i].name, b.variants[i].name);
    EXPECT_EQ(a.variants[i].params_hash, b.variants[i].params_hash);
  }
}

TEST(SearchSpaceHash, GoldenAndSensitiveToEveryField) {
  std::optional<Variant> v = small().find(kGolden);
  ASSERT_TRUE(v.has_value());
  // Recorded once: a change here changes every stored variant id, so it must be deliberate.
  EXPECT_EQ(v->params_hash, "c4984c46299aa7f3704a4deb70c6f94a69bd82f978519ef54f453f0d21edb93d");
  // The documented recipe: length-prefixed fields, parameters in sorted name order.
  Sha256 h;
  h.field("sage-tune variant params v1").field("mma").field("attn.cu.j2").field("sm_90a").field("9");
  const char* sorted[][3] = {
      {"block_m", "int", "128"},   {"block_n", "int", "64"},     {"granularity", "string", "per_thread"},
      {"head_dim", "int", "128"},  {"pv", "string", "fp16"},     {"qk", "string", "int8"},
      {"smooth_k", "bool", "true"}, {"stages", "int", "2"},      {"warps", "int", "8"}};
  for (auto& p : sorted) h.field(p[0]).field(p[1]).field(p[2]);
  EXPECT_EQ(v->params_hash, h.hex());
  // The same parameters written in another key order hash the same (set b lists them
  // shuffled and is deduplicated against set a, so the union has one of them).
  Enumeration en = small().enumerate({{"sm_90a"}, kGolden, {"mma"}});
  EXPECT_EQ(en.variants.size(), 1u);
  // Any difference in template, pipeline or arch changes the hash.
  std::string other_template = edited("template: attn.cu.j2", "template: attn2.cu.j2");
  auto w = SearchSpace::from_string(other_template, "t.yaml").find(kGolden);
  ASSERT_TRUE(w.has_value());
  EXPECT_NE(w->params_hash, v->params_hash);
  auto on_80 = small().find("attn_sm80_mma_d64_m128_n64_w8_s2_qk-int8-thread_pv-fp16_smk");
  auto on_90 = small().find("attn_sm90a_mma_d64_m128_n64_w8_s2_qk-int8-thread_pv-fp16_smk");
  ASSERT_TRUE(on_80 && on_90);
  EXPECT_EQ(on_80->params, on_90->params);
  EXPECT_NE(on_80->params_hash, on_90->params_hash);
}

// ---- variants ---------------------------------------------------------------------------

TEST(SearchSpaceVariant, TypedGettersAndErrors) {
  std::optional<Variant> v = small().find(kGolden);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->get_int("warp_q"), 16);  // derived
  EXPECT_EQ(v->get_int("smem_bytes"), 128 * 128 + 2 * 64 * 128 * 2);
  try {
    v->get_int("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_found);
    EXPECT_NE(e.message().find(kGolden), std::string::npos);
    EXPECT_NE(e.message().find("'nope'"), std::string::npos);
  }
  try {
    v->get_int("qk");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(e.message().find("'qk' is string int8, not int"), std::string::npos) << e.message();
  }
  EXPECT_THROW(v->get_bool("head_dim"), Error);
  EXPECT_THROW(v->get_string("smooth_k"), Error);
}

TEST(SearchSpaceVariant, ContextHasParamsDerivedAndArch) {
  std::optional<Variant> v = small().find(kGolden);
  ASSERT_TRUE(v.has_value());
  tmpl::Value ctx = v->context();
  const tmpl::Map& m = ctx.as_map();
  EXPECT_EQ(m.at("head_dim").as_int(), 128);
  EXPECT_EQ(m.at("warp_q").as_int(), 16);
  EXPECT_EQ(m.at("params").as_map().at("qk").as_string(), "int8");
  EXPECT_EQ(m.at("derived").as_map().at("smem_bytes").as_int(), 49152);
  EXPECT_EQ(m.at("arch").as_map().at("smem_max").as_int(), 232448);
  EXPECT_EQ(m.at("arch").as_map().at("tag").as_string(), "sm90a");
  EXPECT_EQ(m.at("arch").as_map().at("features").as_list().size(), 4u);
  EXPECT_EQ(m.at("pipeline").as_string(), "mma");
  EXPECT_EQ(m.at("name").as_string(), kGolden);
  EXPECT_EQ(m.at("params_hash").as_string(), v->params_hash);
}

TEST(SearchSpaceVariant, FindReturnsOnlyKeptVariants) {
  SearchSpace s = small();
  EXPECT_FALSE(s.find("attn_sm80_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8_smk").has_value());  // pruned
  EXPECT_FALSE(s.find("no_such_variant").has_value());
  EXPECT_TRUE(s.find("ref_sm80").has_value());
}

TEST(SearchSpaceVariant, ArchInfo) {
  SearchSpace s = small();
  EXPECT_EQ(s.archs(), (std::vector<std::string>{"sm_80", "sm_90a"}));
  EXPECT_EQ(s.pipelines(), (std::vector<std::string>{"mma", "ref"}));
  const ArchInfo& a = s.arch("sm_80");
  EXPECT_EQ(a.cc, 80);
  EXPECT_EQ(a.smem_max, 40960);
  EXPECT_EQ(a.regs_max, 255);
  EXPECT_TRUE(a.has("mma_int4"));
  EXPECT_FALSE(a.has("mma_fp8"));
  EXPECT_EQ(a.tag(), "sm80");
  EXPECT_THROW(s.arch("sm_75"), Error);
}

// ---- rendering --------------------------------------------------------------------------

TEST(SearchSpaceRender, RendersTemplateWithHeader) {
  std::optional<Variant> v = small().find(kGolden);
  ASSERT_TRUE(v.has_value());
  tmpl::Environment env(tmpl::map_loader(
      {{"attn.cu.j2", "constexpr int kHeadDim = {{ head_dim }};  // {{ arch.name }} {{ qk }}\n"}}));
  std::string plain = render_variant(env, *v);
  EXPECT_EQ(plain, "constexpr int kHeadDim = 128;  // sm_90a int8\n");
  std::string with_header = render_variant(env, *v, true);
  EXPECT_EQ(with_header, cat("// generated by sage-tune — do not edit\n// variant: ", kGolden,
                             "\n// template: attn.cu.j2\n// params_hash: ", v->params_hash, "\n", plain));
}

TEST(SearchSpaceRender, MissingTemplateIsNotFoundNamingIt) {
  std::optional<Variant> v = small().find("ref_sm90a");
  ASSERT_TRUE(v.has_value());
  tmpl::Environment env(tmpl::map_loader({{"attn.cu.j2", "x"}}));
  try {
    render_variant(env, *v, true);
    FAIL() << "expected not_found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_found);
    EXPECT_NE(std::string(e.what()).find("ref.cu.j2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ref_sm90a"), std::string::npos) << e.what();
  }
}

// ---- the built-in configuration ---------------------------------------------------------

TEST(SearchSpaceBuiltin, LoadsAndHasVariantsForEveryArch) {
  SearchSpace s = SearchSpace::builtin();
  EXPECT_EQ(s.archs(), sage::target_archs()) << "configs/search_space.yaml and sage::target_archs() disagree";
  for (auto& arch : s.archs()) {
    Enumeration en = s.enumerate({{arch}, "", {"mma"}});
    EXPECT_GE(en.variants.size(), 20u) << arch;
    EXPECT_LE(en.variants.size(), 90u) << arch;
    EXPECT_TRUE(s.find("reference_" + s.arch(arch).tag()).has_value()) << arch;
    for (auto& v : en.variants) {
      EXPECT_LE(v.get_int("smem_bytes"), s.arch(arch).smem_max) << v.name;
      if (v.get_string("schedule") == "decode")  // the query rows are the MMAs' N; each warp takes 16 keys a tile
        EXPECT_EQ(v.get_int("block_n"), 16 * v.get_int("warps")) << v.name;
      else
        EXPECT_TRUE(v.get_int("warp_q") == 16 || v.get_int("warp_q") == 32) << v.name;
      EXPECT_EQ(v.get_int("threads"), 32 * v.get_int("warps"));
    }
  }
}

TEST(SearchSpaceBuiltin, ArchitectureRules) {
  SearchSpace s = SearchSpace::builtin();
  Enumeration en = s.enumerate({{}, "", {"mma"}});
  for (auto& v : en.variants) {
    if (v.arch == "sm_90a") {
      EXPECT_NE(v.get_string("qk"), "int4") << v.name;
    }
    if (v.arch == "sm_80" || v.arch == "sm_86") {
      EXPECT_NE(v.get_string("pv"), "fp8") << v.name;
    }
  }
  const PrunedVariant* fp8 = pruned_named(en, "attn_sm80_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8_smk_sch-plain_occ1");
  ASSERT_NE(fp8, nullptr);
  EXPECT_EQ(fp8->reason, "pv=fp8 needs mma_fp8 (sm_89+), sm_80 lacks it");
  const PrunedVariant* int4 =
      pruned_named(en, "attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int4-warp_pv-fp16_smk_sch-plain_occ1");
  ASSERT_NE(int4, nullptr);
  EXPECT_EQ(int4->reason, "qk=int4 needs mma_int4 (sm_80, sm_86, sm_89), sm_90a lacks it");
  // 128x128 tiles with FP16 V at d=128 need 112 KiB: over the 99 KiB of sm_86/sm_89.
  const PrunedVariant* smem = pruned_named(en, "attn_sm86_mma_d128_m128_n128_w8_s2_qk-int8-thread_pv-fp16_smk_sch-plain_occ1");
  ASSERT_NE(smem, nullptr);
  EXPECT_EQ(smem->reason, "smem 112 KiB > 99 KiB on sm_86");
  EXPECT_TRUE(s.find("attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8_smk_sch-plain_occ1").has_value());
  EXPECT_TRUE(s.find("attn_sm80_mma_d128_m128_n64_w8_s2_qk-int4-block_pv-fp16_smk_smq_smv_sch-plain_occ1").has_value());
}

// INT8 P·V on wgmma divides O by the row sums of the rounded u8 P, which only the sum_mma
// kernels take (on the tensor cores), and has no head-dim-256 kernel: rule pv_int8_kernel
// prunes the rest with its reason, and the built-in sets keep the four variants they name.
TEST(SearchSpaceBuiltin, WgmmaInt8PVNeedsSumMmaAndHeadDimUpTo128) {
  const EmbeddedFile* f = embedded_configs::find("search_space.yaml");
  ASSERT_NE(f, nullptr);
  std::string yaml(f->view());
  // the wgmma pipeline's set pv_int8 (the one right before pv_int8_shared_kv; mma has one too)
  const std::size_t shared = yaml.find("      - name: pv_int8_shared_kv\n");
  ASSERT_NE(shared, std::string::npos);
  const std::size_t pos = yaml.rfind("      - name: pv_int8\n", shared);
  ASSERT_NE(pos, std::string::npos);
  yaml.insert(pos, R"(      - name: pv_int8_probe
        tiles:
          - [64, 128, 1, 2]
        axes:
          head_dim: [128, 256]
          qk: [int8]
          pv: [int8]
          granularity: [per_thread]
          smooth_k: [true]
          smooth_v: [false]
          half_exp: [false]
          sum_mma: [false, true]
          fuse_q: [false]
          tma: [true]
          schedule: [plain]
          min_ctas: [1]
)");
  const SearchSpace space = SearchSpace::from_string(yaml, "probe");
  const Enumeration en = space.enumerate({{"sm_90a"}, "", {"wgmma"}});
  const PrunedVariant* no_sum =
      pruned_named(en, "attn_sm90a_wgmma_d128_m64_n128_wg1_s2_qk-int8-thread_pv-int8_smk_tma_sch-plain_occ1");
  ASSERT_NE(no_sum, nullptr);
  EXPECT_EQ(no_sum->rule, "pv_int8_kernel");
  EXPECT_NE(no_sum->reason.find("the sum_mma kernels, head dim 64 or 128 (sum_mma false, head dim 128)"),
            std::string::npos)
      << no_sum->reason;
  // (at head dim 256 with sum_mma the rule head_dim_256 comes first)
  const PrunedVariant* d256 =
      pruned_named(en, "attn_sm90a_wgmma_d256_m64_n128_wg1_s2_qk-int8-thread_pv-int8_smk_tma_sch-plain_occ1");
  ASSERT_NE(d256, nullptr);
  EXPECT_EQ(d256->rule, "pv_int8_kernel");
  EXPECT_NE(d256->reason.find("(sum_mma false, head dim 256)"), std::string::npos) << d256->reason;
  bool kept = false;
  for (const Variant& v : en.variants)
    kept |= v.name == "attn_sm90a_wgmma_d128_m64_n128_wg1_s2_qk-int8-thread_pv-int8_smk_rsum_tma_sch-plain_occ1";
  EXPECT_TRUE(kept) << "with sum_mma at head dim 128 the probe's variant is kept";
  const SearchSpace builtin = SearchSpace::builtin();
  for (const char* name : {"attn_sm90a_wgmma_d64_m64_n128_wg1_s2_qk-int8-thread_pv-int8_smk_rsum_fq_tma_sch-plain_occ3",
                           "attn_sm90a_wgmma_d128_m64_n128_wg1_s2_qk-int8-thread_pv-int8_smk_rsum_fq_tma_sch-plain_occ3",
                           "attn_sm90a_wgmma_d128_m192_n128_wg3_s4_qk-int8-thread_pv-int8_smk_rsum_fq_tma_sch-plain_occ1",
                           "attn_sm90a_wgmma_d64_m64_n128_wg1_s3_qk-int8-thread_pv-int8_smk_rsum_fq_tma_sch-plain_occ4"})
    EXPECT_TRUE(builtin.find(name).has_value()) << name;
}

TEST(SearchSpaceBuiltin, EveryVariantRendersWithTheEmbeddedTemplates) {
  // The templates read every parameter and the derived sizes they static_assert against the
  // kernel's own arithmetic; a parameter missing from the space is an undefined variable here.
  tmpl::Environment env(tmpl::embedded_loader());
  Enumeration en = SearchSpace::builtin().enumerate();
  ASSERT_FALSE(en.variants.empty());
  for (auto& v : en.variants) {
    std::string src;
    ASSERT_NO_THROW(src = render_variant(env, v, true)) << v.name;
    EXPECT_TRUE(starts_with(src, "// generated by sage-tune — do not edit\n// variant: " + v.name + "\n"));
    if (v.pipeline == "mma") {
      EXPECT_NE(src.find(cat("static_assert(Cfg::SMEM_BYTES == ", v.get_int("smem_bytes"), ",")),
                std::string::npos)
          << v.name;
      EXPECT_NE(src.find(cat("sage::Schedule::", v.get_string("schedule"))), std::string::npos) << v.name;
    }
  }
}

}  // namespace
}  // namespace sage::gen
