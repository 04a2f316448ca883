// sage-tune show VARIANT|PROBLEM: every measurement of a variant or of a problem bucket.
#include <set>

#include "sage/tuner/store_json.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct ShowOptions {
  store::DbOption db;
  std::string what;
  std::string status;
  bool json = false;
};

std::string acc_cos(const std::optional<tuner::Accuracy>& a) { return a ? store::fixed(a->cos, 5) : "-"; }

int run_show(const ShowOptions& o) {
  std::optional<tuner::MeasurementStatus> status;
  if (!o.status.empty()) status = tuner::parse_measurement_status(o.status);
  std::string path = o.db.resolve();
  tuner::Store s = store::open_for_read(path, o.db.is_system());

  // A problem key if it parses as one, otherwise a variant name.
  std::optional<tuner::ProblemKey> problem;
  std::string parse_error;
  try {
    problem = tuner::ProblemKey::parse(o.what);
  } catch (const Error& e) {
    parse_error = e.message();
  }
  tuner::MeasurementFilter f;
  f.status = status;
  if (problem) f.problem = problem;
  else f.variant = o.what;
  auto ms = s.measurements(f);
  auto variants = problem ? std::vector<tuner::VariantRecord>{} : s.variants(o.what);
  std::vector<tuner::KernelInfo> kernels;
  if (!problem)
    for (auto& k : s.kernels())
      if (k.variant == o.what) kernels.push_back(k);
  if (ms.empty() && variants.empty() && kernels.empty()) {
    std::string why = problem ? "no measurements of problem '" + o.what + "'"
                              : "'" + o.what + "' is neither a known variant nor a problem key (" + parse_error + ")";
    if (status) why += cat(" with status ", o.status);
    throw Error(Errc::not_found, why, path);
  }

  // Which (device, problem, variant, kernel) rows are the current winners.
  std::set<std::string> winning;
  for (const auto& w : s.winners())
    winning.insert(w.key.device.key() + "\n" + w.key.problem.str() + "\n" + w.kernel_hash);
  auto is_winner = [&](const tuner::Measurement& m) {
    return winning.count(m.device.key() + "\n" + m.problem.str() + "\n" + m.kernel_hash) > 0;
  };

  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& m : ms) {
      nlohmann::json j = m;
      j["winner"] = is_winner(m);
      rows.push_back(j);
    }
    nlohmann::json j = {{"db", path}, {"kind", problem ? "problem" : "variant"}, {"query", o.what},
                        {"measurements", rows}};
    if (!problem) {
      j["variants"] = variants;
      j["kernels"] = kernels;
    }
    std::cout << j.dump(2) << "\n";
    return kOk;
  }

  if (!problem) {
    for (const auto& v : variants)
      std::cout << "variant " << v.name << "  params " << v.params_hash << "  generator " << v.generator_hash
                << "\n  " << v.params_json << "\n";
    for (const auto& k : kernels)
      std::cout << "kernel " << k.hash << "  " << k.arch << "  nvrtc " << k.nvrtc_version << "  "
                << store::bytes(k.cubin_bytes) << "  " << k.stats.registers << " regs, " << k.stats.spill_stores
                << "+" << k.stats.spill_loads << " B spills, " << k.stats.smem_bytes << " B smem, "
                << store::fixed(k.stats.compile_ms, 0) << " ms compile\n";
    if (!variants.empty() || !kernels.empty()) std::cout << "\n";
  } else {
    std::cout << "problem " << problem->str() << "\n\n";
  }
  if (ms.empty()) {
    std::cout << "no measurements\n";
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : ms) {
    std::string spread = m.p10_us && m.p90_us ? store::fixed(m.p10_us, 1) + ".." + store::fixed(m.p90_us, 1) : "-";
    rows.push_back({is_winner(m) ? "*" : "", store::device_label(m.device), problem ? m.variant : m.problem.str(),
                    tuner::to_string(m.status), store::fixed(m.median_us, 1), spread, store::fixed(m.tops, 1),
                    acc_cos(m.gaussian), acc_cos(m.outlier), store::when(m.created_at),
                    m.detail});
  }
  store::print_table(std::cout,
                     {"W", "DEVICE", problem ? "VARIANT" : "PROBLEM", "STATUS", "MEDIAN_US", "P10..P90", "TOPS",
                      "COS", "COS_OUTLIER", "WHEN", "DETAIL"},
                     rows);
  std::cout << "(* = current winner)\n";
  return kOk;
}

Registrar reg(
    "show", "Show every measurement of a variant (by name) or of a problem key",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<ShowOptions>();
      sub.add_option("what", o->what, "variant name or problem key (d128_causal_fp16_HND_q4096_kv4096_bh128_balanced)")
          ->required();
      o->db.add(sub);
      sub.add_option("--status", o->status, "only measurements with this status (passed|incorrect|failed|unsupported)");
      sub.add_flag("--json", o->json, "print JSON");
      return [o] { return run_show(*o); };
    },
    51);

}  // namespace
}  // namespace sage::cli
