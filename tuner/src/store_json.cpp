#include "sage/tuner/store_json.h"

namespace sage::tuner {

using nlohmann::json;

namespace {
template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
// Stored JSON text (params, resource reports) embedded as JSON, or as a string if it does
// not parse (it was written by someone else).
json embedded(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json(text) : j;
}
}  // namespace

void to_json(json& j, const DeviceFingerprint& d) {
  j = {{"key", d.key()},       {"name", d.name},
       {"cc", d.cc},           {"sm_count", d.sm_count},
       {"memory_bytes", d.memory_bytes}, {"driver_version", d.driver_version}};
}

void to_json(json& j, const ProblemKey& p) {
  j = {{"key", p.str()},       {"head_dim", p.head_dim},          {"causal", p.causal},
       {"dtype", p.dtype},     {"layout", p.layout},              {"seq_q_bucket", p.seq_q_bucket},
       {"seq_kv_bucket", p.seq_kv_bucket}, {"bh_bucket", p.bh_bucket}, {"policy", p.policy},
       {"paged", p.paged},     {"kv8", p.kv8},                    {"varlen", p.varlen},
       {"window", p.window}};
}

void to_json(json& j, const WinnerKey& k) {
  j = {{"device", k.device}, {"problem", k.problem}, {"generator_hash", k.generator_hash},
       {"nvrtc_version", k.nvrtc_version}};
}

void to_json(json& j, const FieldDiff& d) {
  j = {{"field", d.field}, {"wanted", d.wanted}, {"stored", d.stored}};
}

void to_json(json& j, const VariantRecord& v) {
  j = {{"name", v.name}, {"params_hash", v.params_hash}, {"params", embedded(v.params_json)},
       {"generator_hash", v.generator_hash}, {"created_at", v.created_at}};
}

void to_json(json& j, const CompileStats& s) {
  j = {{"registers", s.registers},   {"spill_stores", s.spill_stores}, {"spill_loads", s.spill_loads},
       {"smem_bytes", s.smem_bytes}, {"compile_ms", s.compile_ms},     {"report", embedded(s.report_json)}};
}

void to_json(json& j, const KernelInfo& k) {
  j = {{"hash", k.hash},
       {"variant", k.variant},
       {"arch", k.arch},
       {"nvrtc_version", k.nvrtc_version},
       {"generator_hash", k.generator_hash},
       {"cubin_sha256", k.cubin_sha256},
       {"cubin_bytes", k.cubin_bytes},
       {"stats", k.stats},
       {"created_at", k.created_at}};
}

void to_json(json& j, const Accuracy& a) { j = {{"cos", a.cos}, {"rel_l1", a.rel_l1}, {"rmse", a.rmse}}; }

void to_json(json& j, const Measurement& m) {
  j = {{"id", m.id},
       {"uid", m.uid},
       {"device", m.device},
       {"problem", m.problem},
       {"variant", m.variant},
       {"kernel_hash", m.kernel_hash.empty() ? json(nullptr) : json(m.kernel_hash)},
       {"generator_hash", m.generator_hash},
       {"nvrtc_version", m.nvrtc_version},
       {"status", to_string(m.status)},
       {"detail", m.detail},
       {"accuracy", {{"gaussian", opt(m.gaussian)}, {"outlier", opt(m.outlier)}}},
       {"timing",
        {{"median_us", opt(m.median_us)},
         {"p10_us", opt(m.p10_us)},
         {"p90_us", opt(m.p90_us)},
         {"mad_us", opt(m.mad_us)},
         {"samples", m.samples}}},
       {"tops", opt(m.tops)},
       {"tool_version", m.tool_version},
       {"seed", opt(m.seed)},
       {"seed_outlier", opt(m.seed_outlier)},
       {"created_at", m.created_at}};
}

void to_json(json& j, const Winner& w) {
  j = {{"key", w.key},
       {"variant", w.variant},
       {"kernel_hash", w.kernel_hash},
       {"median_us", w.median_us},
       {"tops", opt(w.tops)},
       {"runner_up", w.runner_up.empty() ? json(nullptr) : json(w.runner_up)},
       {"runner_up_median_us", opt(w.runner_up_median_us)},
       {"margin", opt(w.margin)},
       {"noise", w.noise},
       {"tie", w.tie},
       {"source", w.source},
       {"decided_at", w.decided_at}};
}

void to_json(json& j, const QuarantineEntry& q) {
  j = {{"hash", q.hash},
       {"variant", q.variant},
       {"arch", q.arch},
       {"reason", q.reason},
       {"stored_sha256", q.stored_sha256},
       {"actual_sha256", q.actual_sha256},
       {"cubin_bytes", q.cubin_bytes},
       {"detected_at", q.detected_at}};
}

void to_json(json& j, const StoreCounts& c) {
  j = {{"devices", c.devices}, {"variants", c.variants}, {"kernels", c.kernels},
       {"measurements", c.measurements}, {"winners", c.winners}, {"quarantined", c.quarantined},
       {"merges", c.merges}};
}

void to_json(json& j, const OpenReport& r) {
  j = {{"created", r.created},
       {"migrated_from", r.migrated_from},
       {"migrated_in_memory", r.migrated_in_memory},
       {"rebuilt", r.rebuilt},
       {"moved_to", r.moved_to},
       {"corruption", r.corruption},
       {"salvaged_rows", r.salvaged_rows},
       {"dropped_rows", r.dropped_rows}};
}

void to_json(json& j, const GcReport& r) {
  j = {{"kernels_removed", r.kernels_removed},
       {"kernel_bytes_removed", r.kernel_bytes_removed},
       {"quarantine_removed", r.quarantine_removed},
       {"file_bytes_before", r.file_bytes_before},
       {"file_bytes_after", r.file_bytes_after},
       {"bytes_freed", r.file_bytes_before - r.file_bytes_after},
       {"dry_run", r.dry_run}};
}

void to_json(json& j, const MergeReport& r) {
  j = {{"output", r.output},
       {"inputs", r.inputs},
       {"devices", r.devices},
       {"variants", r.variants},
       {"kernels", r.kernels},
       {"measurements", r.measurements},
       {"winners", r.winners},
       {"winner_conflicts", r.winner_conflicts},
       {"winners_replaced", r.winners_replaced},
       {"corrupt_kernels_skipped", r.corrupt_kernels_skipped},
       {"duplicate_measurements", r.duplicate_measurements}};
}

void to_json(json& j, const StoreHealth& h) {
  j = {{"path", h.path},
       {"state", to_string(h.state)},
       {"ok", h.ok()},
       {"message", h.message},
       {"schema_version", h.schema_version},
       {"code_schema_version", store_schema_version()},
       {"needs_migration", h.needs_migration},
       {"journal_mode", h.journal_mode},
       {"file_bytes", h.file_bytes},
       {"counts", h.counts},
       {"full", h.full},
       {"corrupt_kernels", h.corrupt_kernels}};
}

void to_json(json& j, const LookupResult& r) {
  j = {{"status", to_string(r.status)},
       {"winner", r.winner ? json(*r.winner) : json(nullptr)},
       {"kernel_bytes", r.kernel ? json(r.kernel->cubin.size()) : json(nullptr)},
       {"db", r.db},
       {"message", r.message},
       {"nearest", r.nearest ? json(*r.nearest) : json(nullptr)},
       {"nearest_db", r.nearest_db},
       {"nearest_diff", r.nearest_diff}};
}

}  // namespace sage::tuner
