#include "support/cpu_reference.h"

#include <cmath>
#include <limits>

#include "sage/tuner/accuracy.h"

namespace sage::test {

CpuAttention cpu_attention(const AttnProblem& p, const std::vector<std::uint16_t>& q,
                           const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v) {
  auto val = [&](std::uint16_t x) {
    return double(p.dtype == DType::bf16 ? tuner::bf16_to_float(x) : tuner::half_to_float(x));
  };
  std::int64_t qb, qh, qn, kb, kh, kn;
  p.strides(p.heads_q, p.seq_q, &qb, &qh, &qn);
  p.strides(p.heads_kv, p.seq_kv, &kb, &kh, &kn);
  const int D = p.head_dim, group = p.heads_q / p.heads_kv;
  const double scale = p.scale();
  CpuAttention out;
  out.o.assign(std::size_t(p.q_elems()), 0.f);
  out.lse.assign(std::size_t(p.batch) * p.heads_q * p.seq_q, 0.f);
  std::vector<double> s(p.seq_kv), acc(D);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const std::int64_t row = (std::int64_t(b) * p.heads_q + h) * p.seq_q + i;
        int n = p.seq_kv;
        if (p.causal) n = std::max(0, std::min(p.seq_kv, i + p.seq_kv - p.seq_q + 1));
        if (n == 0) {
          out.lse[row] = -std::numeric_limits<float>::infinity();
          continue;
        }
        double m = -1e300;
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += val(q[b * qb + h * qh + i * qn + d]) * val(k[b * kb + (h / group) * kh + j * kn + d]);
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < n; ++j) {
          const double e = std::exp(s[j] - m);
          l += e;
          for (int d = 0; d < D; ++d) acc[d] += e * val(v[b * kb + (h / group) * kh + j * kn + d]);
        }
        for (int d = 0; d < D; ++d) out.o[row * D + d] = float(acc[d] / l);
        out.lse[row] = float(m + std::log(l));
      }
  return out;
}

}  // namespace sage::test
