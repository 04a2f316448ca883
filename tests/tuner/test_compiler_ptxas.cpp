// ptxas report and NVRTC error-line parsing, on logs captured from NVRTC 13.0.
#include <gtest/gtest.h>

#include "sage/tuner/compiler.h"

namespace sage::tuner {
namespace {

// sm_80 with -maxrregcount=32: several entries (extern "C" and mangled), a spilling kernel,
// shared memory, barriers, cmem[0], and the "Overriding maximum register limit" remarks.
const char* kSm80MultiKernel = R"(ptxas info    : Overriding maximum register limit 256 for 'cm' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'plain' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'cm' for 'sm_80'
ptxas info    : Function properties for cm
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 616 bytes cmem[0]
ptxas info    : Compile time = 2.474 ms
ptxas info    : Compiling entry function '_Z5spillILi200EEvPfPKi' for 'sm_80'
ptxas info    : Function properties for _Z5spillILi200EEvPfPKi
ptxas         .     5568 bytes stack frame, 5060 bytes spill stores, 5620 bytes spill loads
ptxas info    : Used 64 registers, used 0 barriers, 5568 bytes cumulative stack size, 368 bytes cmem[0]
ptxas info    : Compile time = 626.572 ms
ptxas info    : Compiling entry function '_Z8withsmemPfi' for 'sm_80'
ptxas info    : Function properties for _Z8withsmemPfi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 13 registers, used 1 barriers, 4096 bytes smem, 364 bytes cmem[0]
ptxas info    : Compile time = 2.128 ms
ptxas info    : Compiling entry function 'plain' for 'sm_80'
ptxas info    : Function properties for plain
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 1.514 ms
)";

// sm_90a reports no cmem[0].
const char* kSm90aSmem = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z8withsmemPfi' for 'sm_90a'
ptxas info    : Function properties for _Z8withsmemPfi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 3.622 ms
)";

// sm_86: a __device__ global (gmem, cmem[4]) and a __noinline__ device function, which ptxas
// reports after the entries without a "Compiling entry function" line.
const char* kSm86DeviceFunction = R"(ptxas info    : 1024 bytes gmem, 8 bytes cmem[4]
ptxas info    : Compiling entry function 'dyn' for 'sm_86'
ptxas info    : Function properties for dyn
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 2.475 ms
ptxas info    : Compiling entry function 'usesg' for 'sm_86'
ptxas info    : Function properties for usesg
ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 128 bytes cumulative stack size, 360 bytes cmem[0]
ptxas info    : Compile time = 5.268 ms
ptxas info    : Function properties for _Z6helperPfi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
)";

// sm_90a wgmma kernel whose accumulator is touched inside the pipeline stage: remarks come
// before the entry they name.
const char* kSm90aWgmmaSerialized = R"(ptxas info    : (C7519) warpgroup.arrive is injected in around line 77 by compiler to allow use of registers in GMMA in function 'wgk'
ptxas info    : (C7517) warpgroup.wait is injected in around line 69 by compiler to allow use of registers defined by GMMA in function 'wgk'
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the wgmma pipeline in the function 'wgk'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'wgk' for 'sm_90a'
ptxas info    : Function properties for wgk
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
ptxas info    : Compile time = 10.977 ms
)";

// sm_80, an mma.sync attention variant (templates/attn_mma.cu.j2): three entries, cmem[2]
// after cmem[0], and a module line with gmem and cmem[4].
const char* kSm80AttnVariant = R"(ptxas info    : 193 bytes gmem, 416 bytes cmem[4]
ptxas info    : Compiling entry function 'sage_attn' for 'sm_80'
ptxas info    : Function properties for sage_attn
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 186 registers, used 1 barriers, 632 bytes cmem[0]
ptxas info    : Compile time = 373.437 ms
ptxas info    : Compiling entry function 'sage_prep_quant' for 'sm_80'
ptxas info    : Function properties for sage_prep_quant
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 74 registers, used 1 barriers, 256 bytes smem, 632 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 521.972 ms
ptxas info    : Compiling entry function 'sage_prep_stats' for 'sm_80'
ptxas info    : Function properties for sage_prep_stats
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 8320 bytes smem, 632 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 33.812 ms
)";

TEST(PtxasReport, Sm80_AttentionVariant_ThreeEntries) {
  auto ks = parse_ptxas_report(kSm80AttnVariant);
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[0].kernel, "sage_attn");
  EXPECT_EQ(ks[0].registers, 186);
  EXPECT_EQ(ks[0].smem_static, 0);  // the attention kernel uses dynamic shared memory only
  EXPECT_EQ(ks[0].cmem0, 632);
  EXPECT_EQ(ks[1].kernel, "sage_prep_quant");
  EXPECT_EQ(ks[1].registers, 74);
  EXPECT_EQ(ks[1].smem_static, 256);
  EXPECT_EQ(ks[1].cmem0, 632);  // not the cmem[2] that follows it
  EXPECT_EQ(ks[2].kernel, "sage_prep_stats");
  EXPECT_EQ(ks[2].smem_static, 8320);
  EXPECT_DOUBLE_EQ(ks[2].ptxas_ms, 33.812);
  for (const auto& k : ks) EXPECT_FALSE(k.spills());
}

TEST(PtxasReport, Sm80_MultipleKernels_SpillsSmemCmem) {
  auto ks = parse_ptxas_report(kSm80MultiKernel);
  ASSERT_EQ(ks.size(), 4u);
  EXPECT_EQ(ks[0].kernel, "cm");
  EXPECT_EQ(ks[0].registers, 8);
  EXPECT_EQ(ks[0].cmem0, 616);
  EXPECT_FALSE(ks[0].spills());
  EXPECT_DOUBLE_EQ(ks[0].ptxas_ms, 2.474);

  EXPECT_EQ(ks[1].kernel, "_Z5spillILi200EEvPfPKi");
  EXPECT_TRUE(ks[1].entry);
  EXPECT_EQ(ks[1].registers, 64);
  EXPECT_EQ(ks[1].stack_frame, 5568);
  EXPECT_EQ(ks[1].spill_stores, 5060);
  EXPECT_EQ(ks[1].spill_loads, 5620);
  EXPECT_EQ(ks[1].cmem0, 368);
  EXPECT_TRUE(ks[1].spills());

  EXPECT_EQ(ks[2].kernel, "_Z8withsmemPfi");
  EXPECT_EQ(ks[2].registers, 13);
  EXPECT_EQ(ks[2].barriers, 1);
  EXPECT_EQ(ks[2].smem_static, 4096);
  EXPECT_EQ(ks[2].cmem0, 364);

  EXPECT_EQ(ks[3].kernel, "plain");
  EXPECT_EQ(ks[3].smem_static, 0);
  EXPECT_EQ(ks[3].barriers, 0);
  // "Overriding maximum register limit ... for 'cm'" is not a remark about a function.
  EXPECT_TRUE(ks[0].notes.empty());
}

TEST(PtxasReport, Sm90a_NoCmemReported) {
  auto ks = parse_ptxas_report(kSm90aSmem);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].registers, 12);
  EXPECT_EQ(ks[0].barriers, 1);
  EXPECT_EQ(ks[0].smem_static, 4096);
  EXPECT_EQ(ks[0].cmem0, 0);
}

TEST(PtxasReport, Sm86_DeviceFunctionIsNotAnEntry) {
  auto ks = parse_ptxas_report(kSm86DeviceFunction);
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[0].kernel, "dyn");
  EXPECT_EQ(ks[1].kernel, "usesg");
  EXPECT_EQ(ks[1].stack_frame, 128);
  EXPECT_EQ(ks[1].registers, 40);
  EXPECT_TRUE(ks[1].entry);
  EXPECT_EQ(ks[2].kernel, "_Z6helperPfi");
  EXPECT_FALSE(ks[2].entry);
  EXPECT_EQ(ks[2].registers, 0);  // ptxas gives device functions no "Used" line
}

TEST(PtxasReport, Sm90a_WgmmaSerializationRemarkAttachedToKernel) {
  auto ks = parse_ptxas_report(kSm90aWgmmaSerialized);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].kernel, "wgk");
  EXPECT_EQ(ks[0].registers, 30);
  ASSERT_EQ(ks[0].notes.size(), 3u);
  EXPECT_EQ(ks[0].notes[2].rfind("(C7511) Potential Performance Loss", 0), 0u);
  EXPECT_TRUE(ks[0].wgmma_serialized());
}

TEST(PtxasReport, CrlfAndForeignLinesAreTolerated) {
  std::string log =
      "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced\r\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_89'\r\n"
      "ptxas info    : Function properties for k\r\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\r\n"
      "ptxas info    : Used 255 registers, used 2 barriers, 1 textures, 49152 bytes smem, 400 bytes cmem[0], 8 bytes cmem[2]\r\n";
  auto ks = parse_ptxas_report(log);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].registers, 255);
  EXPECT_EQ(ks[0].barriers, 2);
  EXPECT_EQ(ks[0].smem_static, 49152);
  EXPECT_EQ(ks[0].cmem0, 400);
  EXPECT_EQ(ks[0].spill_stores, 8);
  EXPECT_EQ(ks[0].spill_loads, 4);
  EXPECT_EQ(ks[0].stack_frame, 16);
}

TEST(PtxasReport, EmptyAndFrontEndOnlyLogsHaveNoKernels) {
  EXPECT_TRUE(parse_ptxas_report("").empty());
  EXPECT_TRUE(parse_ptxas_report("k.cu(3): error: identifier \"y\" is undefined\n").empty());
}

TEST(ErrorLines, FrontEndErrorsBecomeFileColonLine) {
  std::string log =
      "attn_v1.cu(3): warning #177-D: variable \"x\" was declared but never referenced\n"
      "attn_v1.cu(3): error: identifier \"y\" is undefined\n"
      "    a[0] = y;\n"
      "           ^\n"
      "\n"
      "sage/b.cuh(2): error: identifier \"undefined_thing\" is undefined\n"
      "sage/a.cuh(2): catastrophic error: cannot open source file \"b.cuh\"\n"
      "\n"
      "3 errors detected in the compilation of \"attn_v1.cu\".\n";
  auto e = error_lines(log);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], "attn_v1.cu:3: error: identifier \"y\" is undefined");
  EXPECT_EQ(e[1], "sage/b.cuh:2: error: identifier \"undefined_thing\" is undefined");
  EXPECT_EQ(e[2], "sage/a.cuh:2: catastrophic error: cannot open source file \"b.cuh\"");
  EXPECT_EQ(error_lines(log, 1).size(), 1u);
}

TEST(ErrorLines, PtxasErrorsNameThePtxLine) {
  std::string log =
      "ptxas application ptx input, line 26; error   : Instruction 'wgmma.fence' not supported on .target 'sm_80'\n"
      "ptxas application ptx input, line 30; error   : Instruction 'wgmma.commit_group' not supported on .target 'sm_80'\n"
      "ptxas fatal   : Ptx assembly aborted due to errors\n";
  auto e = error_lines(log);
  ASSERT_EQ(e.size(), 2u);  // the "aborted" line only repeats them
  EXPECT_EQ(e[0], "<ptx>:26: error: Instruction 'wgmma.fence' not supported on .target 'sm_80'");
}

TEST(ErrorLines, MessagesAfterANulByteAreRead) {
  // NVRTC 13.0's log of a variant whose wgmma accumulators did not fit its register cap
  // (sm_90a, 128x64 tiles of two warpgroups at three CTAs per SM): ptxas' remark and its
  // errors come as separate strings joined with a NUL byte.
  std::string log =
      "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
      "insufficient register resources for the function 'sage_attn'\n";
  log += '\0';
  log +=
      "ptxas fatal   : (C7600) Register allocation failed with register count of '80'. Compile the program with a "
      "higher register target\n"
      "ptxas fatal   : Ptx assembly aborted due to errors\n";
  auto e = error_lines(log);
  ASSERT_EQ(e.size(), 1u) << "the cause, not only the closing 'aborted' line";
  EXPECT_EQ(e[0].rfind("ptxas fatal   : (C7600) Register allocation failed with register count of '80'", 0), 0u) << e[0];
}

TEST(ErrorLines, OptionAndFatalErrorsAreKept) {
  auto e = error_lines("nvrtc: error: unrecognized option --bogus found\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "nvrtc: error: unrecognized option --bogus found");
  e = error_lines("ptxas fatal   : Unresolved extern function 'foo'\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "ptxas fatal   : Unresolved extern function 'foo'");
  // An entry named like an error is not an error.
  EXPECT_TRUE(error_lines("ptxas info    : Compiling entry function 'error_k' for 'sm_80'\n").empty());
}

}  // namespace
}  // namespace sage::tuner
