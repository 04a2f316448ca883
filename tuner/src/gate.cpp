#include "sage/tuner/gate.h"

#include <algorithm>
#include <random>

#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"

namespace sage::tuner {

namespace {
// An odd length (bucket - 3) exercises the masked tail tile of every tile size.
int gate_len(const ProblemsConfig& cfg, int bucket) { return std::max(1, std::min(bucket, cfg.gate.max_seq) - 3); }
int gate_window(const ProblemsConfig& cfg, const ProblemKey& key) {
  return std::max(1, std::min(key.seq_kv_bucket, cfg.gate.max_seq / 2) - 5);
}
}  // namespace

SeqLens gate_sequences(const ProblemsConfig& cfg, const ProblemKey& key) {
  if (!key.varlen) return {};
  return fraction_sequences(cfg.varlen.lengths, int(cfg.varlen.lengths.size()), gate_len(cfg, key.seq_q_bucket),
                            gate_len(cfg, key.seq_kv_bucket), key.window ? gate_window(cfg, key) : 0);
}

AttnProblem gate_shape(const ProblemsConfig& cfg, const ProblemKey& key) {
  AttnProblem p;
  p.batch = cfg.gate.batch;
  p.heads_q = cfg.gate.heads_q;
  p.heads_kv = cfg.gate.heads_kv;
  auto len = [&](int bucket) { return gate_len(cfg, bucket); };
  p.seq_q = len(key.seq_q_bucket);
  p.seq_kv = std::max(p.seq_q, len(key.seq_kv_bucket));
  p.head_dim = key.head_dim;
  p.causal = key.causal;
  p.dtype = parse_dtype(key.dtype);
  p.layout = parse_layout(key.layout);
  p.return_lse = false;
  if (key.paged) {  // a paged bucket's queries: at most 128 unless the bucket is a seq boundary beyond
    p.paged = true;
    p.kv_fp8 = key.kv8;
    p.page_size = cfg.paged.page_size;
    if (key.seq_q_bucket <= 128) p.seq_q = std::max(1, std::min(key.seq_q_bucket, p.seq_kv));
  }
  if (key.window) {
    p.window = gate_window(cfg, key);
    p.seq_kv = p.seq_q + p.window - 1;
  }
  if (key.varlen) p = with_sequences(p, gate_sequences(cfg, key));
  return p;
}

GateMetrics run_gate(const AttnKernel& k, const std::shared_ptr<Module>& refmod, const AttnProblem& shape, CUstream stream,
                     std::optional<std::uint64_t> seed, const SeqLens& lens) {
  GateMetrics g;
  std::uint64_t base = seed ? *seed : (std::uint64_t(std::random_device{}()) << 32 | std::random_device{}());
  g.seed_gaussian = base;
  g.seed_outliers = base ^ 0x9e3779b97f4a7c15ull;
  try {
    ReferenceKernel ref(refmod);
    if (shape.varlen) {
      // Each sequence against its own reference (a dense call on views of its rows).
      VarlenBatch vb(shape, lens);
      DeviceBuffer ws(k.workspace_size(shape));
      for (InputKind kind : {InputKind::gaussian, InputKind::outliers}) {
        vb.buffers.fill(*refmod, kind, kind == InputKind::gaussian ? g.seed_gaussian : g.seed_outliers, stream);
        ReferenceResult r = vb.reference(ref, stream);
        vb.buffers.poison_output();
        k.run(shape, vb.args(), ws.get(), stream);
        SAGE_CU(cuStreamSynchronize(stream));
        std::vector<float> o = vb.buffers.output_hnd();
        (kind == InputKind::gaussian ? g.gaussian : g.outliers) = compare(o.data(), r.o.data(), o.size());
      }
      g.ran = true;
      return g;
    }
    // A paged bucket: the reference on the dense K and V, the kernel on pages made of them.
    AttnBuffers buf(shape.paged ? PagedKv::dense_problem(shape) : shape);
    DeviceBuffer ws(k.workspace_size(shape));
    for (InputKind kind : {InputKind::gaussian, InputKind::outliers}) {
      const std::uint64_t s = kind == InputKind::gaussian ? g.seed_gaussian : g.seed_outliers;
      buf.fill(*refmod, kind, s, stream);
      std::optional<PagedKv> pages;
      if (shape.paged) pages.emplace(shape, buf, s, stream);
      ReferenceResult r = run_reference(ref, buf, stream);
      buf.poison_output();
      k.run(shape, pages ? pages->args(buf) : buf.args(), ws.get(), stream);
      SAGE_CU(cuStreamSynchronize(stream));
      std::vector<float> o = buf.output_hnd();
      (kind == InputKind::gaussian ? g.gaussian : g.outliers) = compare(o.data(), r.o.data(), o.size());
    }
    g.ran = true;
  } catch (const Error& e) {
    g.error = e.what();
  }
  return g;
}

MeasurementStatus judge(const GateMetrics& m, const Policy& policy, const KernelConfig& cfg, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
  };
  if (!policy.admits_pv(cfg.pv)) {
    say(cat("policy ", policy.name, " does not admit pv=", cfg.pv));
    return MeasurementStatus::unsupported;
  }
  if (!m.ran) {
    say(m.error.empty() ? "did not run" : m.error);
    return MeasurementStatus::failed;
  }
  auto check = [&](const Metrics& x, const Thresholds& t, const char* kind) -> std::string {
    if (x.nonfinite) return cat(kind, ": ", x.nonfinite, " non-finite outputs");
    if (x.cos < t.cos_min) return cat(kind, ": cos ", x.cos, " < ", t.cos_min);
    if (x.rel_l1 > t.rel_l1_max) return cat(kind, ": rel-L1 ", x.rel_l1, " > ", t.rel_l1_max);
    return {};
  };
  std::string a = check(m.gaussian, policy.gaussian, "gaussian");
  std::string b = check(m.outliers, policy.outliers, "outliers");
  if (!a.empty() || !b.empty()) {
    say(a.empty() ? b : b.empty() ? a : a + "; " + b);
    return MeasurementStatus::incorrect;
  }
  say("");
  return MeasurementStatus::passed;
}

Accuracy to_accuracy(const Metrics& m) {
  Accuracy a;
  a.cos = m.cos;
  a.rel_l1 = m.rel_l1;
  a.rmse = m.rmse;
  return a;
}

}  // namespace sage::tuner
