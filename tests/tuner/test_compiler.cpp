// NVRTC compile service: one source -> cubin per architecture, errors, spills, headers,
// options and keys. Host tests: NVRTC needs no GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "sage/common/embedded.h"
#include "sage/common/error.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"
#include "sage/internal/launch.h"

namespace sage::tuner {
namespace {

const char* kSmemKernel = R"(
#include "sage/params.h"
static_assert(SAGE_KERNEL_ABI_VERSION >= 1, "embedded header reached");
extern "C" __global__ void __launch_bounds__(256) scale(float* a, float s) {
  __shared__ float tile[256];
  tile[threadIdx.x] = a[blockIdx.x * 256 + threadIdx.x] * s;
  __syncthreads();
  a[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x];
}
)";

// 64 values live across a loop; with -maxrregcount=32 ptxas must spill them.
const char* kSpillKernel = R"(
extern "C" __global__ void spills(float* out, const float* in, int n) {
  float v[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) v[i] = in[i * 128 + threadIdx.x];
  for (int it = 0; it < n; ++it) {
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = v[i] * v[(i + 1) & 63] + v[(i * 7) & 63];
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) out[i * 128 + threadIdx.x] = v[i];
}
)";

// Hopper-only instructions: accepted for sm_90a, rejected by ptxas elsewhere.
const char* kWgmmaKernel = R"(
extern "C" __global__ void wg(float* a) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  a[threadIdx.x] = 1.f;
}
)";

CompileOptions no_cache(const std::string& arch) {
  CompileOptions o;
  o.arch = arch;
  o.use_cache = false;
  return o;
}

// A variant compiled for `arch`, its PTX kept (the PTX-counting tests). Through a cubin cache of
// the tests' own in the build tree, which the defaults' CLI sweeps (test_cli_compile.cpp) fill with
// their PTX too (SAGE_CACHE_PTX): several tests check the same default variants (the decode kernels
// of every architecture, say), and the cache's key is the content hash of the source and options,
// so a hit is the very compile a miss would run (its cubin, PTX and ptxas report).
CompileResult compile_with_ptx(const gen::Variant& v, const std::string& arch) {
  CompileOptions o;
  o.arch = arch;
  o.cache_dir = std::string(SAGE_BINARY_DIR) + "/test-cache/shared/cubins";
  o.keep_ptx = true;
  return VariantBuilder(o).compile(v);
}

// How often `what` occurs in the body of the PTX entry `entry` (up to the next .entry).
std::size_t count_in_entry(const std::string& ptx, const std::string& entry, const std::string& what) {
  const std::size_t begin = ptx.find(".entry " + entry + "(");
  if (begin == std::string::npos) return 0;
  const std::size_t end = ptx.find(".entry ", begin + 1);
  std::size_t n = 0;
  for (std::size_t at = ptx.find(what, begin); at < end; at = ptx.find(what, at + 1)) ++n;
  return n;
}

// Each kernel of `names` is in the compile result and does not spill (nor, `wgmma`, serialize
// its wgmma).
void expect_kernels_without_spills(const CompileResult& r, std::initializer_list<const char*> names, bool wgmma,
                                   const std::string& variant) {
  for (const char* k : names) {
    bool found = false;
    for (const auto& kr : r.kernels)
      if (kr.kernel == k) {
        found = true;
        EXPECT_FALSE(kr.spills()) << variant << " " << k;
        if (wgmma) {
          EXPECT_FALSE(kr.wgmma_serialized()) << variant << " " << k;
        }
      }
    EXPECT_TRUE(found) << variant << ": " << k << " in " << r.log;
  }
}

bool is_elf(const std::string& bytes) { return bytes.size() > 4 && bytes.compare(0, 4, "\x7f" "ELF") == 0; }

class CompileForArch : public ::testing::TestWithParam<const char*> {};

TEST_P(CompileForArch, SmemKernel_CubinAndResources) {
  CompileResult r = compile("scale_kernel", kSmemKernel, no_cache(GetParam()));
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_FALSE(r.cache_hit);
  EXPECT_EQ(r.arch, GetParam());
  EXPECT_TRUE(is_elf(r.cubin));
  ASSERT_EQ(r.kernels.size(), 1u) << r.log;
  const KernelResources& k = r.kernels[0];
  EXPECT_EQ(k.kernel, "scale");
  EXPECT_TRUE(k.entry);
  EXPECT_GT(k.registers, 0);
  EXPECT_LE(k.registers, 255);
  EXPECT_EQ(k.smem_static, 256 * 4);
  EXPECT_EQ(k.barriers, 1);
  EXPECT_FALSE(r.spills());
  EXPECT_EQ(r.spill_summary(), "");
  EXPECT_GT(r.build_ms, 0);
  EXPECT_GE(r.compile_ms, r.build_ms);
}

INSTANTIATE_TEST_SUITE_P(Archs, CompileForArch, ::testing::Values("sm_80", "sm_86", "sm_89", "sm_90a", "sm_100", "sm_120"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Compiler, SyntaxError_NotOkWithFileAndLine) {
  const char* src = "extern \"C\" __global__ void bad(float* a) {\n  int x = 1;\n  a[0] = y;\n}\n";
  CompileResult r = compile("attn_broken", src, no_cache("sm_80"));
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.cubin.empty());
  EXPECT_NE(r.log.find("attn_broken.cu(3): error"), std::string::npos) << r.log;
  auto errors = error_lines(r.log);
  ASSERT_FALSE(errors.empty()) << r.log;
  EXPECT_EQ(errors[0], "attn_broken.cu:3: error: identifier \"y\" is undefined");
}

TEST(Compiler, MissingHeaderNamesTheIncludeLine) {
  // A missing embedded header is reported at the include line of the variant's source.
  CompileResult r = compile("attn_x", "#include \"sage/no_such_header.cuh\"\n", no_cache("sm_89"));
  EXPECT_FALSE(r.ok);
  auto errors = error_lines(r.log);
  ASSERT_FALSE(errors.empty()) << r.log;
  EXPECT_EQ(errors[0].rfind("attn_x.cu:1: catastrophic error: cannot open source file", 0), 0u) << errors[0];
}

TEST(Compiler, EmbeddedHeadersAreIncludedWithoutTheIncludePrefix) {
  // templates/include/sage/params.h is embedded as "include/sage/params.h" and included as
  // "sage/params.h"; sage/device/common.cuh includes it in turn by that name.
  ASSERT_NE(embedded_templates::find("include/sage/params.h"), nullptr);
  ASSERT_NE(embedded_templates::find("include/sage/device/common.cuh"), nullptr);
  const char* src =
      "#include \"sage/device/common.cuh\"\n"
      "#include \"sage/params.h\"\n"
      "extern \"C\" __global__ void abi(SageTensor t, int* o) {\n"
      "  o[0] = SAGE_KERNEL_ABI_VERSION + int(t.stride_n);\n"
      "}\n";
  CompileResult r = compile("abi", src, no_cache("sm_80"));
  EXPECT_TRUE(r.ok) << r.log;
}

TEST(Compiler, Sm80_SpillingKernelIsDetected) {
  CompileOptions o = no_cache("sm_80");
  o.extra = {"-maxrregcount=32"};
  CompileResult r = compile("spiller", kSpillKernel, o);
  ASSERT_TRUE(r.ok) << r.log;
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].registers, 32);
  EXPECT_GT(r.kernels[0].spill_stores, 0) << r.log;
  EXPECT_GT(r.kernels[0].spill_loads, 0) << r.log;
  EXPECT_TRUE(r.spills());
  std::string s = r.spill_summary();
  EXPECT_EQ(s.rfind("spills ", 0), 0u) << s;
  EXPECT_NE(s.find(" B stores / "), std::string::npos) << s;
  EXPECT_NE(s.find(" B loads in spills"), std::string::npos) << s;

  // Without the register cap the same kernel fits.
  CompileResult free = compile("spiller", kSpillKernel, no_cache("sm_80"));
  ASSERT_TRUE(free.ok) << free.log;
  EXPECT_FALSE(free.spills()) << free.log;
}

TEST(Compiler, Sm90a_WgmmaAccepted) {
  CompileResult r = compile("wg", kWgmmaKernel, no_cache("sm_90a"));
  EXPECT_TRUE(r.ok) << r.log;
  EXPECT_TRUE(is_elf(r.cubin));
}

TEST(Compiler, Sm80_WgmmaRejectedWithClearError) {
  CompileResult r = compile("wg", kWgmmaKernel, no_cache("sm_80"));
  EXPECT_FALSE(r.ok);
  auto errors = error_lines(r.log);
  ASSERT_FALSE(errors.empty()) << r.log;
  EXPECT_NE(errors[0].find("Instruction 'wgmma.fence' not supported on .target 'sm_80'"),
            std::string::npos) << errors[0];
}

// A wgmma accumulator of 128 registers under a 64-register cap (eight CTAs of 128 threads):
// ptxas cannot compile the instruction (C7602) and says how many registers it needs.
const char* kWgmmaCapKernel = R"(
extern "C" __global__ void __launch_bounds__(128, 8) capped(float* out, unsigned long long da,
                                                          unsigned long long db) {
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#define R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
      "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,"
      "%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,"
      "%126,%127}, %128, %129, 1, 1, 1, 0, 0;\n"
      : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56), R8(64), R8(72), R8(80), R8(88), R8(96),
        R8(104), R8(112), R8(120)
      : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int i = 0; i < 128; ++i) out[i * 128 + threadIdx.x] = d[i];
}
)";

TEST(Compiler, Sm90a_RegisterAllocationFailureNamesTheCause) {
  CompileResult r = compile("capped", kWgmmaCapKernel, no_cache("sm_90a"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.log.find('\0'), std::string::npos) << "the log keeps no NUL bytes";
  auto errors = error_lines(r.log);
  ASSERT_FALSE(errors.empty()) << r.log;
  EXPECT_NE(errors[0].find("Insufficient registers (64)"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[0].find("aborted due to errors"), std::string::npos) << errors[0];
}

TEST(Compiler, InvalidExtraOptionIsACompileFailureNotAThrow) {
  CompileOptions o = no_cache("sm_86");
  o.extra = {"--no-such-option"};
  CompileResult r = compile("k", kSmemKernel, o);
  EXPECT_FALSE(r.ok);
  auto errors = error_lines(r.log);
  ASSERT_FALSE(errors.empty()) << r.log;
  EXPECT_NE(errors[0].find("--no-such-option"), std::string::npos) << errors[0];
}

TEST(Compiler, KeepPtxReturnsPtxForTheArch) {
  CompileOptions o = no_cache("sm_89");
  o.keep_ptx = true;
  CompileResult r = compile("k", kSmemKernel, o);
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_NE(r.ptx.find(".target sm_89"), std::string::npos);
  EXPECT_EQ(r.ptx.find('\0'), std::string::npos);
}

// The head-dim-256 quantized default on sm_90a (past 2K keys) is the kernel its design says:
// Q.K^T as INT8 wgmma over 128-key tiles, P.V as FP8 wgmma a quarter of O's 256 columns at a
// time (no 128- or 256-column FP8 accumulator beside O), Q/K by 2-D TMA boxes and the caller's
// Q by the 4-D map (fuse_q), and the preparation kernels beside it. Calls of up to 192 columns
// run an entry of their own, sage_attn_q3, over three quarters of the row: sage_attn issues
// Q.K^T as one straight sequence of 8 k-steps, sage_attn_q3 as one of 6.
TEST(Compiler, Sm90a_QuantizedHeadDim256DefaultMultipliesPVAQuarterAtATime) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const std::string name = default_variant("sm_90a", 256, "balanced", 4096, 0, 4096);
  const std::optional<gen::Variant> v = space.find(name);
  ASSERT_TRUE(v.has_value()) << name;
  ASSERT_EQ(v->get_string("qk"), "int8") << name;
  const CompileResult r = compile_with_ptx(*v, "sm_90a");
  ASSERT_TRUE(r.ok) << r.log;
  const std::string& ptx = r.ptx;
  EXPECT_NE(ptx.find("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8"), std::string::npos);
  EXPECT_NE(ptx.find("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"), std::string::npos);
  EXPECT_EQ(ptx.find("m64n128k32.f32.e4m3.e4m3"), std::string::npos);
  EXPECT_EQ(ptx.find("m64n256k32"), std::string::npos);
  EXPECT_NE(ptx.find("cp.async.bulk.tensor.2d"), std::string::npos);
  EXPECT_NE(ptx.find("cp.async.bulk.tensor.4d"), std::string::npos);
  EXPECT_EQ(count_in_entry(ptx, "sage_attn", "m64n128k32.s32.s8.s8"), 8u) << "Q.K^T k-steps of the whole row";
  EXPECT_EQ(count_in_entry(ptx, "sage_attn_q3", "m64n128k32.s32.s8.s8"), 6u)
      << "Q.K^T k-steps of three quarters of the row";
  expect_kernels_without_spills(r, {"sage_attn", "sage_attn_q3", "sage_prep", "sage_prep_v"}, false, name);
}

// The head-dim-256 unquantized default on sm_90a (up to 2K keys) has an entry of its own for
// calls of up to 192 columns, sage_attn_q3: three of the four 64-column boxes, so per dtype Q.K^T
// is 12 k-steps of m64n64k16 and P.V, per 16 keys, one m64n128k16 and one m64n64k16 over O's
// first three quarters (4 k-steps of 64-key tiles). sage_attn keeps every box count's path.
TEST(Compiler, Sm90a_NativeHeadDim256HasAThreeQuarterEntry) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const std::string name = default_variant("sm_90a", 256, "balanced", 1024, 0, 1024);
  const std::optional<gen::Variant> v = space.find(name);
  ASSERT_TRUE(v.has_value()) << name;
  ASSERT_EQ(v->get_string("qk"), "native") << name;
  ASSERT_NE(name.find("_wgmma_"), std::string::npos) << name;
  const CompileResult r = compile_with_ptx(*v, "sm_90a");
  ASSERT_TRUE(r.ok) << r.log;
  const std::string& ptx = r.ptx;
  for (const char* t : {"f16.f16", "bf16.bf16"}) {
    EXPECT_EQ(count_in_entry(ptx, "sage_attn_q3", std::string("m64n64k16.f32.") + t), 12u + 4u) << t;
    EXPECT_EQ(count_in_entry(ptx, "sage_attn_q3", std::string("m64n128k16.f32.") + t), 4u) << t;
    // sage_attn: Q.K^T of 4, 8, 12 and 16 k-steps, P.V over 1 to 4 quarters
    EXPECT_EQ(count_in_entry(ptx, "sage_attn", std::string("m64n64k16.f32.") + t), 40u + 8u) << t;
  }
  expect_kernels_without_spills(r, {"sage_attn", "sage_attn_q3"}, true, name);
}

// The tensor-core work of an entry: the N of each wgmma it issues, added up (the row sums'
// m64n8 of sum_mma left out), k-steps of one precision counting alike.
std::size_t wgmma_columns(const std::string& ptx, const std::string& entry) {
  const std::size_t begin = ptx.find(".entry " + entry + "(");
  if (begin == std::string::npos) return 0;
  const std::size_t end = ptx.find(".entry ", begin + 1);
  const std::string what = "wgmma.mma_async.sync.aligned.m64n";
  std::size_t n = 0;
  for (std::size_t at = ptx.find(what, begin); at < end; at = ptx.find(what, at + 1)) {
    const int cols = std::atoi(ptx.c_str() + at + what.size());
    if (cols > 8) n += std::size_t(cols);
  }
  return n;
}

// The head-dim-128 defaults on sm_90a (the native persistent kernel up to 3K keys and for
// 5-128 queries, the quantized one- and three-warpgroup kernels past it) have an entry of their own
// for calls of up to 96 columns, sage_attn_q3: Q.K^T over its first three quarters of k-steps,
// P.V into O's first 96 columns. So its wgmma work is three quarters of sage_attn's, and P.V
// is the N = 96 form.
TEST(Compiler, Sm90a_HeadDim128DefaultsHaveAThreeQuarterEntry) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  struct Case {
    int seq_kv, seq_q;
    const char* pv_n96;  // P.V's instruction in sage_attn_q3
  };
  const std::vector<Case> cases = {{1024, 1024, "m64n96k16.f32.f16.f16"},
                                   {8192, 8, "m64n96k16.f32.bf16.bf16"},
                                   {4096, 4096, "m64n96k32.f32.e4m3.e4m3"},
                                   {16384, 16384, "m64n96k32.f32.e4m3.e4m3"}};
  std::set<std::string> seen;
  for (const Case& c : cases) {
    const std::string name = default_variant("sm_90a", 128, "balanced", c.seq_kv, 0, c.seq_q);
    seen.insert(name);
    const std::optional<gen::Variant> v = space.find(name);
    ASSERT_TRUE(v.has_value()) << name;
    const CompileResult r = compile_with_ptx(*v, "sm_90a");
    ASSERT_TRUE(r.ok) << r.log;
    const std::size_t whole = wgmma_columns(r.ptx, "sage_attn"), q3 = wgmma_columns(r.ptx, "sage_attn_q3");
    EXPECT_GT(whole, 0u) << name;
    EXPECT_EQ(q3 * 4, whole * 3) << name << ": " << q3 << " of " << whole << " wgmma columns";
    EXPECT_GT(count_in_entry(r.ptx, "sage_attn_q3", c.pv_n96), 0u) << name;
    EXPECT_EQ(count_in_entry(r.ptx, "sage_attn", "m64n96k"), 0u) << name;
    if (v->get_string("qk") == "native")
      expect_kernels_without_spills(r, {"sage_attn", "sage_attn_q3"}, true, name);
    else
      expect_kernels_without_spills(r, {"sage_attn", "sage_attn_q3", "sage_prep", "sage_prep_v"}, true, name);
  }
  EXPECT_EQ(seen.size(), cases.size()) << "four different defaults";
}

// The varlen defaults on sm_90a (sage_attention_varlen) and its sliding windows' (the `window`
// entries, then the varlen ones): every one has the entries its rule (has_varlen_entry,
// has_window_entry) promises, without spills or serialized wgmma; sage_attn_varlen issues the
// same tensor-core work as sage_attn (it runs the dense kernel's code on its sequence's view),
// sage_attn_window some (the dense and the packed code, each starting at its window's first
// tile); the quantized ones (balanced, past 512-1K keys) also have their preparation's entries,
// sage_prep_varlen and sage_prep_v_varlen, without spills. A quantized variant without the rule's
// conditions (its Q quantized by the preparation) has none of them.
TEST(Compiler, Sm90a_VarlenAndWindowDefaultsHaveTheirEntriesWithoutSpills) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  std::set<std::string> seen;
  int quantized = 0;
  for (int d : {64, 128, 256})
    for (const char* policy : {"balanced", "accurate"})
      for (int n : {128, 512, 4096, 16384}) {
        for (int causal : {0, 1}) seen.insert(default_variant("sm_90a", d, policy, n, causal, n, false, 64, 0, true));
        for (bool packed : {false, true})  // window n, of a dense call or a packed batch
          seen.insert(default_variant("sm_90a", d, policy, n, 0, 32768, false, 64, 0, packed, true));
      }
  for (const std::string& name : seen) {
    const std::optional<gen::Variant> v = space.find(name);
    ASSERT_TRUE(v.has_value()) << name;
    ASSERT_TRUE(has_varlen_entry(kernel_config(*v))) << name;
    ASSERT_TRUE(has_window_entry(kernel_config(*v))) << name;
    const CompileResult r = compile_with_ptx(*v, "sm_90a");
    ASSERT_TRUE(r.ok) << r.log;
    EXPECT_GT(wgmma_columns(r.ptx, "sage_attn"), 0u) << name;
    EXPECT_EQ(wgmma_columns(r.ptx, "sage_attn_varlen"), wgmma_columns(r.ptx, "sage_attn")) << name;
    EXPECT_GE(wgmma_columns(r.ptx, "sage_attn_window"), wgmma_columns(r.ptx, "sage_attn")) << name;
    if (v->get_string("qk") == "native") {
      expect_kernels_without_spills(r, {"sage_attn", "sage_attn_varlen", "sage_attn_window"}, true, name);
    } else {
      ++quantized;
      expect_kernels_without_spills(r,
                                    {"sage_attn", "sage_attn_varlen", "sage_attn_window", "sage_prep",
                                     "sage_prep_varlen", "sage_prep_v", "sage_prep_v_varlen"},
                                    true, name);
    }
  }
  EXPECT_EQ(quantized, 4) << "D=64 64x128; D=128 64x128 and 192x128; D=256 128x128";
  // Q quantized by the preparation (no fuse_q): no varlen entries.
  const std::vector<gen::Variant> no_fuse =
      space.enumerate({{"sm_90a"}, "d128_m64_n128_wg1_s2_qk-int8-thread_pv-fp8_smk_rsum_tma_sch-plain", {"wgmma"}})
          .variants;
  ASSERT_FALSE(no_fuse.empty());
  for (const gen::Variant& v : no_fuse) {
    EXPECT_FALSE(has_varlen_entry(kernel_config(v))) << v.name;
    const CompileResult r = compile_with_ptx(v, "sm_90a");
    ASSERT_TRUE(r.ok) << r.log;
    for (const char* entry : {"sage_attn_varlen", "sage_attn_window", "sage_prep_varlen", "sage_prep_v_varlen"})
      EXPECT_EQ(r.ptx.find(std::string(".entry ") + entry + "("), std::string::npos) << v.name << " " << entry;
  }
}

// Every paged default (the lists with kernels of their own: sm_90a, sm_89's, which sm_86 and
// sm_120 share, sm_80's, and sm_100's, which mixes sm_80's decode kernels and sm_89's plain ones)
// has the entries sage_attn_paged and sage_attn_varlen_paged (variable-length queries over a
// paged cache) without spills, and the dense entries beside it keep theirs.
class PagedDefaults : public ::testing::TestWithParam<const char*> {};
TEST_P(PagedDefaults, HaveTheirEntryWithoutSpills) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  {
    const char* arch = GetParam();
    std::set<std::string> seen;
    for (int d : {64, 128, 256})
      for (int q : {1, 8, 32, 64, 1024})
        for (int bh : {64, 512}) {
          try {
            seen.insert(default_variant(arch, d, "balanced", 4096, 0, q, false, bh, 0, false, false, true));
            // FP8 pages' defaults (the same, or a `kv8` entry's)
            seen.insert(default_variant(arch, d, "balanced", 4096, 0, q, false, bh, 0, false, false, true, true));
          } catch (const Error&) {
            EXPECT_EQ(d, 256) << arch;  // sm_89's GPUs lack the decode kernel's shared memory at 256
          }
        }
    // sm_90a: at D=64 and 128 the mma.sync decode, 64x64 and 128x128 kernels and wgmma (D=64:
    // 64x64 and 128x128), at 256 the decode kernel and wgmma (FP8 pages at D=128: wgmma 128x128).
    EXPECT_EQ(seen.size(), std::string(arch) == "sm_90a" ? 12u : std::string(arch) == "sm_89" ? 4u : 5u) << arch;
    for (const std::string& name : seen) {
      const std::optional<gen::Variant> v = space.find(name);
      ASSERT_TRUE(v.has_value()) << name;
      ASSERT_TRUE(has_paged_entry(kernel_config(*v))) << name;
      const CompileResult r = compile_with_ptx(*v, arch);
      ASSERT_TRUE(r.ok) << r.log;
      expect_kernels_without_spills(r, {"sage_attn", "sage_attn_paged", "sage_attn_varlen_paged"}, false, name);
      // The mma.sync ones also take sliding windows (sage_attn_paged_window, ..._varlen_paged_window).
      if (has_paged_window_entry(kernel_config(*v)))
        expect_kernels_without_spills(r, {"sage_attn_paged_window", "sage_attn_varlen_paged_window"}, false, name);
      // ... and FP8 pages (sage_attn_paged_fp8, ..._varlen_paged_fp8): cp.async into the FP8 ring, each
      // tile's bytes read back as 16-byte vectors and widened to FP16 (sm_89+: cvt.rn.f16x2.e4m3x2;
      // sm_80: byte permutes and a rebiasing f16x2 product) and to BF16 (byte permutes and a bf16x2
      // FMA), the MMAs those of FP16/BF16 (no FP8 MMA). The decode schedule's widen the bytes
      // straight into their MMA fragments (V's keys paired by byte permutes) and multiply in FP16
      // whatever the queries' type: no FP16 tile stored, no ldmatrix of V, no BF16 MMA or widening.
      // The wgmma ones' FP8 entries (attn_native_fp8.cuh): TMA boxes of FP8 rows, read back as
      // 16-byte vectors, widened to FP16 into the tile wgmma reads (its generic stores fenced for
      // the async proxy), FP16 wgmma for FP16 and BF16 queries alike.
      if (has_paged_fp8_entry(kernel_config(*v)) && v->pipeline == "wgmma") {
        expect_kernels_without_spills(r, {"sage_attn_paged_fp8", "sage_attn_varlen_paged_fp8"}, false, name);
        for (const char* entry : {"sage_attn_paged_fp8", "sage_attn_varlen_paged_fp8"}) {
          const std::size_t at = r.ptx.find(std::string(".entry ") + entry + "(");
          ASSERT_NE(at, std::string::npos) << name << " " << entry;
          const std::string body = r.ptx.substr(at, r.ptx.find(".entry ", at + 1) - at);
          for (const char* want : {"cp.async.bulk.tensor.4d", "ld.shared.v4.u32", "cvt.rn.f16x2.e4m3x2",
                                   "st.shared.v4.u32", "fence.proxy.async.shared::cta", "wgmma.mma_async.sync.aligned"})
            EXPECT_NE(body.find(want), std::string::npos) << name << " " << entry << ": " << want;
          EXPECT_EQ(body.find(".e4m3.e4m3"), std::string::npos) << name << " " << entry << ": an FP8 MMA";
          // BF16 queries too run FP16 wgmma on tiles widened by cvt (their Q rows rewritten as FP16):
          // no BF16 widening, no BF16 wgmma.
          for (const char* absent : {"fma.rn.bf16x2", ".bf16.bf16"})
            EXPECT_EQ(body.find(absent), std::string::npos) << name << " " << entry << ": " << absent;
          // Two warpgroups of one CTA an SM (paged_fp8_threads 512: D=128's kv8 default): two
          // converting warpgroups hand their registers to the consumers (56 and 200 a thread) and
          // pass the FP16 slots through mbarriers of plain arrivals; else the consumers convert,
          // one CTA barrier a tile, no register handoff.
          const bool ws = paged_fp8_threads(kernel_config(*v)) == kernel_config(*v).threads + 256;
          if (kernel_config(*v).head_dim == 128 && kernel_config(*v).warps == 8) EXPECT_TRUE(ws) << name;
          for (const char* want : {"setmaxnreg.dec.sync.aligned.u32 56", "setmaxnreg.inc.sync.aligned.u32 200",
                                   "mbarrier.arrive.shared::cta.b64"})
            EXPECT_EQ(body.find(want) != std::string::npos, ws) << name << " " << entry << ": " << want;
          EXPECT_NE(body.find(".maxntid " + std::to_string(paged_fp8_threads(kernel_config(*v))) + ", 1, 1"),
                    std::string::npos) << name << " " << entry;
        }
      } else if (has_paged_fp8_entry(kernel_config(*v))) {
        expect_kernels_without_spills(r, {"sage_attn_paged_fp8", "sage_attn_varlen_paged_fp8"}, false, name);
        const bool fp8_hw = std::string(arch) != "sm_80";
        for (const char* entry : {"sage_attn_paged_fp8", "sage_attn_varlen_paged_fp8"}) {
          const std::size_t at = r.ptx.find(std::string(".entry ") + entry + "(");
          ASSERT_NE(at, std::string::npos) << name << " " << entry;
          const std::string body = r.ptx.substr(at, r.ptx.find(".entry ", at + 1) - at);
          for (const char* want : {"cp.async.cg.shared.global", "ld.shared.v4.u32", "prmt.b32",
                                   fp8_hw ? "cvt.rn.f16x2.e4m3x2" : "mul.rn.f16x2"})
            EXPECT_NE(body.find(want), std::string::npos) << name << " " << entry << ": " << want;
          const bool decode = v->get_string("schedule") == "decode";
          for (const char* want : {"fma.rn.bf16x2", "st.shared.v4.u32", "ldmatrix.sync.aligned.m8n8.x4.trans", ".bf16.bf16"})
            EXPECT_EQ(body.find(want) == std::string::npos, decode) << name << " " << entry << ": " << want;
          EXPECT_EQ(body.find(".e4m3.e4m3"), std::string::npos) << name << " " << entry << ": an FP8 MMA";
        }
      }
      // The block table's entries are read through the read-only path.
      for (const char* entry : {"sage_attn_paged", "sage_attn_varlen_paged"}) {
        const std::size_t at = r.ptx.find(std::string(".entry ") + entry + "(");
        ASSERT_NE(at, std::string::npos) << name << " " << entry;
        const std::string body = r.ptx.substr(at, r.ptx.find(".entry ", at + 1) - at);
        EXPECT_NE(body.find("ld.global.nc"), std::string::npos) << name << " " << entry;
      }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Compiler, PagedDefaults, ::testing::Values("sm_90a", "sm_89", "sm_80", "sm_100"));

// INT8 P.V on wgmma (the search space's pv_int8 sets): P.V is u8 P x INT8 V (s32.u8.s8, P from
// registers) with no FP8 MMA left in either attention entry; P's row sums are an m64n8 of the
// same type against the ones block, one per P.V k-step; the tile's int32 sums become floats by
// cvt.rn.f32.s32, one per accumulator element; calls with an LSE have
// their own entry (sums of P before rounding), which replaces the three-quarter one; and the
// preparation has no exact FP8 V pass (INT8 V takes statistics over every row).
TEST(Compiler, Sm90a_Int8PVMultipliesU8PByInt8V) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  std::size_t n = 0;
  for (const gen::Variant& v : space.enumerate({{"sm_90a"}, "pv-int8", {"wgmma"}}).variants) {
    if (v.get_string("pv") != "int8") continue;
    ++n;
    const CompileResult r = compile_with_ptx(v, "sm_90a");
    ASSERT_TRUE(r.ok) << v.name << r.log;
    const int d = int(v.get_int("head_dim"));
    for (const char* entry : {"sage_attn", "sage_attn_lse"}) {
      const std::string pv = "m64n" + std::to_string(d) + "k32.s32.u8.s8";
      const std::size_t pv_steps = count_in_entry(r.ptx, entry, pv);
      EXPECT_GT(pv_steps, 0u) << v.name << " " << entry;
      EXPECT_EQ(pv_steps % 4, 0u) << v.name << " " << entry << ": 128-key tiles are 4 k-steps of 32";
      EXPECT_EQ(count_in_entry(r.ptx, entry, "m64n8k32.s32.u8.s8"), pv_steps) << v.name << " " << entry;
      EXPECT_EQ(count_in_entry(r.ptx, entry, "e4m3"), 0u) << v.name << " " << entry;
      // one conversion per P.V accumulator element (d / 2 a thread) and tile path at least
      EXPECT_GE(count_in_entry(r.ptx, entry, "cvt.rn.f32.s32"), std::size_t(d / 2)) << v.name << " " << entry;
      EXPECT_GT(count_in_entry(r.ptx, entry, "m64n128k32.s32.s8.s8"), 0u) << v.name << " " << entry << ": Q.K^T";
    }
    EXPECT_EQ(r.ptx.find(".entry sage_attn_q3("), std::string::npos) << v.name;
    EXPECT_EQ(r.ptx.find(".entry sage_prep_v("), std::string::npos) << v.name;
    expect_kernels_without_spills(r, {"sage_attn", "sage_attn_lse", "sage_prep"}, true, v.name);
  }
  EXPECT_GE(n, 4u) << "the pv_int8 sets: D=64 and D=128 one warpgroup, D=128 three, D=64 four CTAs an SM";
}

// Off Hopper the head-dim-256 defaults are mma.sync kernels; the unquantized one and INT8
// Q.K^T with FP16 P.V (sm_80's) have an entry of their own for calls of up to 192 columns,
// sage_attn_q3, which issues three quarters of every MMA of a tile: Q.K^T's k-steps (INT8 or
// FP16/BF16) and P.V's 8-column tiles of O.
TEST(Compiler, Sm80_HeadDim256DefaultsHaveAThreeQuarterEntry) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  struct Case {
    int seq_kv;
    const char* qk;
    std::vector<std::string> mmas;  // the MMA instructions whose counts the entries compare
  };
  const std::vector<Case> cases = {
      {1024, "native", {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"}},
      {4096, "int8", {"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"}},
  };
  for (const Case& c : cases) {
    const std::string name = default_variant("sm_80", 256, "balanced", c.seq_kv, 0, c.seq_kv);
    const std::optional<gen::Variant> v = space.find(name);
    ASSERT_TRUE(v.has_value()) << name;
    ASSERT_EQ(v->get_string("qk"), c.qk) << name;
    const CompileResult r = compile_with_ptx(*v, "sm_80");
    ASSERT_TRUE(r.ok) << r.log;
    const std::string& ptx = r.ptx;
    for (const std::string& m : c.mmas) {
      const std::size_t whole = count_in_entry(ptx, "sage_attn", m), q3 = count_in_entry(ptx, "sage_attn_q3", m);
      EXPECT_GT(whole, 0u) << name << " " << m;
      EXPECT_EQ(q3 * 4, whole * 3) << name << " " << m << ": " << q3 << " of " << whole;
    }
    expect_kernels_without_spills(r, {"sage_attn", "sage_attn_q3"}, false, name);
  }
}

// Off Hopper the head-dim-128 defaults (the native mma.sync kernel for decoding, INT8 Q.K^T with
// FP16-accumulator or FP8 P.V past it) have an entry of their own for calls of up to 96
// columns, sage_attn_q3: every kind of MMA it issues, three quarters as many as sage_attn's
// (Q.K^T's k-steps, and O's 8-column tiles, the last accumulator group half as wide).
TEST(Compiler, Sm80To89_HeadDim128DefaultsHaveAThreeQuarterEntry) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  struct Case {
    const char* arch;
    int seq_kv, seq_q;
  };
  const std::vector<Case> cases = {{"sm_80", 4096, 4096}, {"sm_80", 8192, 1},  {"sm_80", 8192, 16},
                                   {"sm_86", 4096, 4096}, {"sm_89", 4096, 4096}};
  std::set<std::string> pvs;
  for (const Case& c : cases) {
    const std::string name = default_variant(c.arch, 128, "balanced", c.seq_kv, 0, c.seq_q);
    const std::optional<gen::Variant> v = space.find(name);
    ASSERT_TRUE(v.has_value()) << name;
    pvs.insert(v->get_string("pv"));
    const CompileResult r = compile_with_ptx(*v, c.arch);
    ASSERT_TRUE(r.ok) << r.log;
    const std::string& ptx = r.ptx;
    // Every kind of mma.sync in sage_attn (shape and types, up to the operands).
    std::set<std::string> kinds;
    const std::size_t begin = ptx.find(".entry sage_attn(");
    ASSERT_NE(begin, std::string::npos) << name;
    const std::size_t end = ptx.find(".entry ", begin + 1);
    for (std::size_t at = ptx.find("mma.sync.aligned.", begin); at < end; at = ptx.find("mma.sync.aligned.", at + 1))
      kinds.insert(ptx.substr(at, ptx.find_first_of(" \t", at) - at));
    EXPECT_GE(kinds.size(), 2u) << name;
    for (const std::string& m : kinds) {
      const std::size_t whole = count_in_entry(ptx, "sage_attn", m), q3 = count_in_entry(ptx, "sage_attn_q3", m);
      EXPECT_GT(whole, 0u) << name << " " << m;
      EXPECT_EQ(q3 * 4, whole * 3) << name << " " << m << ": " << q3 << " of " << whole;
    }
    expect_kernels_without_spills(r, {"sage_attn", "sage_attn_q3"}, false, name);
  }
  EXPECT_EQ(pvs, (std::set<std::string>{"native", "fp16acc", "fp8"})) << "the P.V kinds the defaults cover";
}

// Single-query decoding runs the decode schedule (attn_decode.cuh) on every architecture: the
// tile's rows of queries are the MMAs' N and each warp's 16 keys their M, so a key tile costs
// each warp D/16 MMAs of S^T and D/16 of O^T per 8 rows of queries (one m16n8k16 of each input
// type), and P reaches O^T's MMAs transposed by movmatrix, two per 8 rows of queries. Its
// three-quarter entry (D=128 and 256) issues three quarters of those MMAs.
TEST(Compiler, SingleQueryDecodingTakesTheQueriesAsTheMmaN) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a"})
    for (int d : {64, 128, 256}) {
      const std::string name = default_variant(arch, d, "balanced", 8192, 0, 1);
      const std::optional<gen::Variant> v = space.find(name);
      ASSERT_TRUE(v.has_value()) << name;
      if (d == 256 && std::string(arch) != "sm_90a" && std::string(arch) != "sm_80") {
        EXPECT_NE(v->get_string("schedule"), "decode") << name << ": no decode tile fits 99 KiB at d=256";
        continue;
      }
      ASSERT_EQ(v->get_string("schedule"), "decode") << name;
      const CompileResult r = compile_with_ptx(*v, arch);
      ASSERT_TRUE(r.ok) << r.log;
      const std::size_t nb = std::size_t(v->get_int("block_m")) / 8, ks = std::size_t(d) / 16;
      for (const char* mma : {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                              "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"}) {
        EXPECT_EQ(count_in_entry(r.ptx, "sage_attn", mma), 2 * ks * nb) << name << " " << mma;
        if (d != 64) EXPECT_EQ(4 * count_in_entry(r.ptx, "sage_attn_q3", mma), 3 * 2 * ks * nb) << name << " " << mma;
      }
      EXPECT_EQ(count_in_entry(r.ptx, "sage_attn", "movmatrix.sync.aligned.m8n8.trans.b16"), 2 * 2 * nb) << name;
      if (d != 64) expect_kernels_without_spills(r, {"sage_attn", "sage_attn_q3"}, false, name);
      else expect_kernels_without_spills(r, {"sage_attn"}, false, name);
    }
}

TEST(Compiler, UnsupportedArchThrowsInvalidArgument) {
  try {
    compile("k", kSmemKernel, no_cache("sm_75"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("'sm_75'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sm_90a"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(is_supported_arch("sm_90"));  // wgmma needs the arch-specific sm_90a
  EXPECT_TRUE(is_supported_arch("sm_90a"));
}

TEST(Compiler, OptionsNameArchStandardAndPtxasReport) {
  CompileOptions o;
  o.arch = "sm_86";
  o.extra = {"-DFOO=1"};
  auto opts = nvrtc_options(o);
  ASSERT_GE(opts.size(), 4u);
  EXPECT_EQ(opts[0], "-arch=sm_86");
  EXPECT_NE(std::find(opts.begin(), opts.end(), "-std=c++17"), opts.end());
  EXPECT_NE(std::find(opts.begin(), opts.end(), "--ptxas-options=-v"), opts.end());
  EXPECT_NE(std::find(opts.begin(), opts.end(), "-lineinfo"), opts.end());
  EXPECT_EQ(opts.back(), "-DFOO=1");
  o.lineinfo = false;
  opts = nvrtc_options(o);
  EXPECT_EQ(std::find(opts.begin(), opts.end(), "-lineinfo"), opts.end());
}

TEST(Compiler, NvrtcVersionAndBuild) {
  std::string v = nvrtc_version();
  EXPECT_EQ(v.find('.') != std::string::npos, true) << v;
  std::string b = nvrtc_build();
  EXPECT_EQ(b.rfind(v + ".", 0), 0u) << "build '" << b << "' should start with the version " << v;
}

TEST(Compiler, ContentHashDependsOnSourceOptionsAndArch) {
  CompileOptions a;
  a.arch = "sm_80";
  std::string h = content_hash("x", a);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h, content_hash("x", a));
  EXPECT_NE(h, content_hash("y", a));
  CompileOptions b = a;
  b.arch = "sm_86";
  EXPECT_NE(h, content_hash("x", b));
  CompileOptions c = a;
  c.extra = {"-DX=1"};
  EXPECT_NE(h, content_hash("x", c));
  CompileOptions d = a;
  d.use_cache = false;  // where the cubin is kept is not part of what it is
  d.cache_dir = "/elsewhere";
  EXPECT_EQ(h, content_hash("x", d));
  // Field boundaries matter: "-DA" "B" differs from "-DAB".
  CompileOptions e1 = a, e2 = a;
  e1.extra = {"-DA", "B"};
  e2.extra = {"-DAB"};
  EXPECT_NE(content_hash("x", e1), content_hash("x", e2));
}

}  // namespace
}  // namespace sage::tuner
