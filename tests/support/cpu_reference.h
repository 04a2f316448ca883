// Attention on the CPU in double precision: the check of the GPU's FP32 reference kernel.
#pragma once
#include <cstdint>
#include <vector>

#include "sage/internal/problem.h"

namespace sage::test {
struct CpuAttention {
  std::vector<float> o;    // [B, Hq, Nq, D]
  std::vector<float> lse;  // [B, Hq, Nq], natural log; -inf for a row that sees no key
};
// q, k, v: the raw fp16/bf16 bits in the problem's layout.
CpuAttention cpu_attention(const AttnProblem& p, const std::vector<std::uint16_t>& q,
                           const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v);
}  // namespace sage::test
