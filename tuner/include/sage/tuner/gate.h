// The accuracy gate: a variant's output on fresh random inputs (Gaussian and with channel
// outliers) against the FP32 reference, and the verdict of each accuracy policy.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sage/internal/launch.h"
#include "sage/tuner/accuracy.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/store.h"

namespace sage::tuner {

struct GateMetrics {
  Metrics gaussian, outliers;
  std::uint64_t seed_gaussian = 0, seed_outliers = 0;
  bool ran = false;         // false: the variant could not run (error says why)
  std::string error;
};

// The gate's shape for a problem bucket (config.accuracy_check, the bucket's head_dim,
// causal, dtype and layout; sequence min(bucket, max_seq), odd-sized so tails are tested).
// A sliding window's: window min(bucket, max_seq / 2) less 5, every query seeing that many keys.
// A variable-length bucket's: with_sequences of gate_sequences.
AttnProblem gate_shape(const ProblemsConfig& cfg, const ProblemKey& key);
// A variable-length bucket's gate sequences: varlen.lengths of the gate's lengths (empty for
// other buckets).
SeqLens gate_sequences(const ProblemsConfig& cfg, const ProblemKey& key);

// Runs `k` and the reference on fresh inputs of both kinds (seeds drawn from the OS). A
// variable-length shape's sequences are `lens` (each against its own reference: VarlenBatch).
GateMetrics run_gate(const AttnKernel& k, const std::shared_ptr<Module>& reference_module, const AttnProblem& shape, CUstream stream,
                     std::optional<std::uint64_t> seed = std::nullopt, const SeqLens& lens = {});

// passed | incorrect (thresholds of `policy`) | failed (did not run) | unsupported (the policy
// does not admit the variant's P.V precision). `why` gets the reason for anything but passed.
MeasurementStatus judge(const GateMetrics& m, const Policy& policy, const KernelConfig& cfg, std::string* why);

Accuracy to_accuracy(const Metrics& m);

}  // namespace sage::tuner
