// The FP32 reference kernel against a double-precision CPU attention on the same inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sage/common/cuda_driver.h"
#include "sage/tuner/accuracy.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/variants.h"
#include "support/cpu_reference.h"
#include "support/gpu.h"

namespace sage {
namespace {

struct Case {
  int b, hq, hkv, nq, nkv, d;
  bool causal;
  Layout layout;
  DType dtype;
};

class ReferenceVsCpu : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceVsCpu, AgreesWithDoublePrecision) {
  SAGE_REQUIRE_GPU();
  const Case c = GetParam();
  use_device(0);
  auto refmod = tuner::reference_module(tuner::arch_for_cc(test::device_cc()));
  ReferenceKernel ref(refmod);
  AttnProblem p;
  p.batch = c.b;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.seq_q = c.nq;
  p.seq_kv = c.nkv;
  p.head_dim = c.d;
  p.causal = c.causal;
  p.layout = c.layout;
  p.dtype = c.dtype;
  tuner::AttnBuffers buf(p);
  CUstream st;
  SAGE_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  buf.fill(*refmod, tuner::InputKind::outliers, 4242, st);
  tuner::ReferenceResult gpu = tuner::run_reference(ref, buf, st);
  cu::api().cuStreamDestroy(st);
  test::CpuAttention cpu = test::cpu_attention(p, buf.q.to_host<std::uint16_t>(p.q_elems()),
                                               buf.k.to_host<std::uint16_t>(p.kv_elems()),
                                               buf.v.to_host<std::uint16_t>(p.kv_elems()));
  ASSERT_EQ(gpu.o.size(), cpu.o.size());
  double max_err = 0, max_ref = 0;
  for (std::size_t i = 0; i < cpu.o.size(); ++i) {
    max_err = std::max(max_err, double(std::fabs(gpu.o[i] - cpu.o[i])));
    max_ref = std::max(max_ref, double(std::fabs(cpu.o[i])));
  }
  // FP32 accumulation over <= 300 keys: relative error far below 1e-4.
  EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_ref)) << p.str();
  for (std::size_t i = 0; i < cpu.lse.size(); ++i) {
    if (std::isinf(cpu.lse[i])) {
      EXPECT_TRUE(std::isinf(gpu.lse[i]) && gpu.lse[i] < 0) << "row " << i << " sees no key: LSE must be -inf";
      continue;
    }
    ASSERT_NEAR(gpu.lse[i], cpu.lse[i], 1e-4 * std::max(1.0, double(std::fabs(cpu.lse[i])))) << p.str() << " row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceVsCpu,
    ::testing::Values(Case{1, 2, 2, 1, 1, 64, false, Layout::HND, DType::fp16},
                      Case{2, 4, 2, 33, 33, 128, true, Layout::NHD, DType::bf16},
                      Case{1, 3, 1, 17, 300, 64, true, Layout::HND, DType::fp16},
                      Case{1, 2, 2, 50, 20, 128, true, Layout::HND, DType::fp16},  // first 30 rows see nothing
                      Case{1, 2, 1, 129, 257, 256, false, Layout::NHD, DType::bf16}),
    [](const ::testing::TestParamInfo<Case>& i) {
      const Case& c = i.param;
      return "B" + std::to_string(c.b) + "_Hq" + std::to_string(c.hq) + "_Hkv" + std::to_string(c.hkv) + "_Nq" +
             std::to_string(c.nq) + "_Nkv" + std::to_string(c.nkv) + "_D" + std::to_string(c.d) +
             (c.causal ? "_Causal" : "") + (c.layout == Layout::NHD ? "_NHD" : "_HND") +
             (c.dtype == DType::bf16 ? "_Bf16" : "_Fp16");
    });

}  // namespace
}  // namespace sage
