// The launch grid of causal calls (launch.h: causal_group): groups of (batch, head) pairs that
// divide the pairs, keep GQA groups whole, fit their K and V into the L2 share, and keep the
// grid within its z limit. Whether the kernels then cover every query tile of every head once
// is checked on the GPU (kernels/gpu_test_mma_attention.cpp, causal shapes with B > 1).
#include <gtest/gtest.h>

#include <tuple>

#include "sage/internal/launch.h"

namespace sage {
namespace {

AttnProblem problem(int b, int hq, int hkv, int n, int d) {
  AttnProblem p;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = p.seq_kv = n;
  p.head_dim = d;
  p.causal = true;
  return p;
}

KernelConfig config(const std::string& qk, const std::string& pv, int d) {
  KernelConfig c;
  c.pipeline = "wgmma";
  c.head_dim = d;
  c.qk = qk;
  c.pv = pv;
  return c;
}

// K and V bytes per key as the kernel reads them: FP16 K and V (native), INT8 K and FP8 V.
std::int64_t key_bytes(const KernelConfig& c) { return c.qk == "native" ? 4 * c.head_dim : 2 * c.head_dim; }

TEST(CausalGrid, GroupsDivideThePairsKeepGqaWholeAndFitTheL2Share) {
  for (const KernelConfig& c : {config("native", "native", 64), config("native", "native", 128),
                                config("int8", "fp8", 64), config("int8", "fp8", 128)})
    for (auto [b, hq, hkv] : {std::tuple{4, 32, 32}, {1, 8, 2}, {3, 28, 4}, {2, 12, 12}, {1, 1, 1}, {5, 7, 1}})
      for (int n : {1, 17, 1024, 4096, 32768, 1 << 20}) {
        const AttnProblem p = problem(b, hq, hkv, n, c.head_dim);
        const int g = causal_group(p, c), pairs = b * hq, per_kv = hq / hkv;
        SCOPED_TRACE(p.str() + " " + c.qk);
        ASSERT_GE(g, 1);
        EXPECT_EQ(pairs % g, 0);
        if (n > kCausalLptMaxKeys) {
          EXPECT_EQ(g, 1) << "long sequences: each head in turn";
          continue;
        }
        EXPECT_EQ(g % per_kv, 0);
        // More than one kv head per group only where their K and V fit the L2 share.
        if (g > per_kv) {
          EXPECT_LE(std::int64_t(g / per_kv) * n * key_bytes(c), kCausalGroupBytes);
        }
        // The largest such divisor: the next multiple of per_kv that divides the pairs does not fit.
        for (int h = g + per_kv; h <= pairs; h += per_kv)
          if (pairs % h == 0) {
            EXPECT_GT(std::int64_t(h / per_kv) * n * key_bytes(c), kCausalGroupBytes) << "group " << h;
            break;
          }
      }
}

TEST(CausalGrid, TheIssuesShapes) {
  // B=4, H=32 (128 pairs): D=64 native at 1K reads 256 KiB of K and V per head, so 64 heads fit
  // 16 MiB; at 4K, 1 MiB per head: 16; INT8 K and FP8 V at D=128, 8K: 2 MiB per head, 8.
  EXPECT_EQ(causal_group(problem(4, 32, 32, 1024, 64), config("native", "native", 64)), 64);
  EXPECT_EQ(causal_group(problem(4, 32, 32, 4096, 64), config("native", "native", 64)), 16);
  EXPECT_EQ(causal_group(problem(4, 32, 32, 8192, 128), config("int8", "fp8", 128)), 8);
  // Past kCausalLptMaxKeys: each head in turn.
  EXPECT_EQ(causal_group(problem(4, 32, 32, 16384, 128), config("int8", "fp8", 128)), 1);
  // GQA: native D=128 at 8K reads 4 MiB per kv head, so four kv heads (eight query heads each)
  // fit; all of them where there are no more.
  EXPECT_EQ(causal_group(problem(1, 64, 8, 8192, 128), config("native", "native", 128)), 32);
  EXPECT_EQ(causal_group(problem(1, 8, 2, 8192, 128), config("native", "native", 128)), 8);
}

TEST(CausalGrid, StaysWithinTheGridsZLimit) {
  // 80000 pairs of long sequences: one pair per group would make 80000 groups (z <= 65535).
  const AttnProblem p = problem(2500, 32, 32, 1 << 20, 128);
  const int g = causal_group(p, config("native", "native", 128));
  EXPECT_LE(p.batch * p.heads_q / g, 65535);
  EXPECT_EQ(p.batch * p.heads_q % g, 0);
}

}  // namespace
}  // namespace sage
