// sage-tune tune: accuracy-gated tuning of every variant for the problem buckets, on this GPU.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sage/common/archs.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/tuner/tune.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

// "90", "90s", "15m", "1h30m" -> seconds.
double parse_budget(const std::string& s) {
  double total = 0, num = 0;
  bool have = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      std::size_t used = 0;
      num = std::stod(s.substr(i), &used);
      i += used - 1;
      have = true;
    } else if (have && (c == 's' || c == 'm' || c == 'h')) {
      total += num * (c == 's' ? 1 : c == 'm' ? 60 : 3600);
      have = false;
    } else {
      throw Error(Errc::invalid_argument, "bad --budget '" + s + "' (examples: 90s, 15m, 1h30m)");
    }
  }
  if (have) total += num;
  if (total <= 0) throw Error(Errc::invalid_argument, "bad --budget '" + s + "' (must be > 0)");
  return total;
}

std::string fmt(double v, const char* f) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int run_tune(tuner::TuneOptions o, bool json, bool quiet) {
  ProgressBar compile_bar("compile", 0, false), tune_bar("tune   ", 0, false);
  std::string phase;
  auto on_progress = [&](const tuner::TuneProgress& p) {
    if (quiet || json) return;
    ProgressBar& b = p.phase == "compile" ? compile_bar : tune_bar;
    if (phase != p.phase) {
      if (!phase.empty()) compile_bar.finish();
      phase = p.phase;
      b = ProgressBar(p.phase == "compile" ? "compile" : "tune   ", p.total, true);
    }
    b.update(p.done, p.detail);
  };
  tuner::TuneReport r = tuner::tune(o, on_progress);
  if (!phase.empty()) (phase == "compile" ? compile_bar : tune_bar).finish();

  int missing = 0;
  int skipped = 0;
  for (const auto& pr : r.results) {
    missing += pr.winner.empty() && pr.skipped.empty();
    skipped += !pr.skipped.empty();
  }
  if (json) {
    nlohmann::json j;
    j["db"] = r.db_path;
    for (const auto& d : r.devices) j["devices"].push_back(d.key());
    j["variants"] = r.variants;
    j["compiled"] = r.compiled;
    j["compile_failed"] = r.compile_failed;
    j["spilled"] = r.spilled;
    j["cache_hits"] = r.cache_hits;
    j["seconds"] = {{"compile", r.compile_s}, {"gate", r.gate_s}, {"timing", r.timing_s}, {"total", r.total_s}};
    j["budget_exhausted"] = r.budget_exhausted;
    j["results"] = nlohmann::json::array();
    for (const auto& pr : r.results) {
      nlohmann::json x = {{"problem", pr.key.str()}, {"device", pr.device}, {"winner", pr.winner},
                          {"median_us", pr.median_us}, {"tops", pr.tops}, {"spread", pr.spread},
                          {"runner_up", pr.runner_up}, {"margin", pr.margin}, {"tie", pr.tie},
                          {"default", pr.default_variant}, {"default_us", pr.default_us}, {"speedup", pr.speedup},
                          {"gaussian", {{"cos", pr.gaussian.cos}, {"rel_l1", pr.gaussian.rel_l1}}},
                          {"outliers", {{"cos", pr.outliers.cos}, {"rel_l1", pr.outliers.rel_l1}}},
                          {"candidates", pr.candidates}, {"passed", pr.passed}, {"timed", pr.timed},
                          {"resumed", pr.resumed}};
      if (!pr.skipped.empty()) x["skipped"] = pr.skipped;
      j["results"].push_back(x);
    }
    j["warnings"] = r.warnings;
    std::cout << j.dump(2) << "\n";
  } else {
    for (const auto& w : r.warnings) std::cerr << "sage-tune: warning: " << w << "\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& pr : r.results) {
      rows.push_back({pr.key.str(), !pr.skipped.empty() ? "(skipped: " + pr.skipped + ")"
                                    : pr.winner.empty()  ? "(none passed)"
                                                         : pr.winner,
                      pr.winner.empty() ? "-" : fmt(pr.tops, "%.0f"), pr.winner.empty() ? "-" : fmt(pr.median_us / 1e3, "%.3f"),
                      pr.speedup > 0 ? fmt(pr.speedup, "%.2fx") : "-",
                      pr.winner.empty() ? "-" : (pr.tie ? "tie" : fmt(pr.margin * 100, "%.1f%%")),
                      pr.winner.empty() ? "-" : fmt(pr.gaussian.cos, "%.5f") + "/" + fmt(pr.gaussian.rel_l1, "%.4f"),
                      pr.winner.empty() ? "-" : fmt(pr.outliers.rel_l1, "%.4f"),
                      cat(pr.passed, "/", pr.candidates)});
    }
    for (const auto& d : r.devices) std::cout << "device: " << d.key() << "\n";
    std::cout << "database: " << r.db_path << "\n\n";
    store::print_table(std::cout, {"problem", "winner", "TOPS", "ms", "vs default", "margin", "gauss cos/relL1",
                                   "outl relL1", "passed"},
                       rows);
    std::printf("\n%d variants: %d compiled (%d cached), %d failed, %d spill (pruned)\n", r.variants, r.compiled,
                r.cache_hits, r.compile_failed, r.spilled);
    if (skipped)
      std::printf("%d problem%s skipped: no variant of the GPU's architecture serves %s\n", skipped,
                  skipped == 1 ? "" : "s", skipped == 1 ? "it" : "them");
    std::printf("time: compile %s, accuracy gate %s, timing %s, total %s%s\n", human_duration(r.compile_s).c_str(),
                human_duration(r.gate_s).c_str(), human_duration(r.timing_s).c_str(), human_duration(r.total_s).c_str(),
                r.budget_exhausted ? " (budget exhausted: rerun with --resume to continue)" : "");
  }
  return missing ? kFailure : kOk;
}

// --dry-run: the problems, their candidates and defaults, for --arch or this GPU's architecture.
int run_tune_plan(const tuner::TuneOptions& o, std::string arch, bool json) {
  int sms = 0;
  std::string device;
  if (!arch.empty() && !is_target_arch(arch))
    throw Error(Errc::invalid_argument, cat("unknown --arch '", arch, "' (", target_archs_text(), ")"));
  if (arch.empty()) {
    std::string why;
    if (!cu::have_device(&why))
      throw Error(Errc::no_device, cat("no GPU here (", why, "): name the architecture to plan for with --arch (",
                                       target_archs_text(), ")"));
    const int dev = o.devices.empty() ? 0 : o.devices.front();
    use_device(dev);
    const tuner::DeviceFingerprint fp = tuner::fingerprint_device(dev);
    arch = tuner::arch_for_cc(fp.cc);
    sms = fp.sm_count;
    device = fp.name;
  }
  const tuner::TunePlan plan = tuner::plan_tune(o, arch, sms);
  if (json) {
    nlohmann::json j = {{"arch", plan.arch}, {"device", device}, {"variants", plan.variants},
                        {"measurements", plan.measurements}, {"policies", o.policies}};
    j["problems"] = nlohmann::json::array();
    for (const auto& e : plan.problems)
      j["problems"].push_back({{"problem", e.key.str()}, {"paged", e.key.paged}, {"kv8", e.key.kv8},
                                {"varlen", e.key.varlen}, {"window", e.key.window},
                               {"default", e.default_variant}, {"candidates", e.candidates}, {"note", e.note}});
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::cout << "plan for " << plan.arch << (device.empty() ? "" : " (" + device + ")") << ", policies "
            << join(o.policies, ",") << ": nothing is compiled, measured or stored\n\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : plan.problems)
    rows.push_back({e.key.str(), cat(e.candidates.size()), e.default_variant.empty() ? "(none)" : e.default_variant,
                    e.note});
  store::print_table(std::cout, {"problem", "candidates", "default", "note"}, rows);
  std::printf("\n%zu problems, %zu measurements (a gate each, and a timing where it passes); %d variants to compile for %s\n",
              plan.problems.size(), plan.measurements, plan.variants, plan.arch.c_str());
  return kOk;
}

static Registrar reg_tune(
    "tune", "tune the variants of this GPU's architecture on the problem buckets and store the winners",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<tuner::TuneOptions>();
      auto budget = std::make_shared<std::string>();
      auto shard = std::make_shared<std::string>();
      auto devices = std::make_shared<std::string>("0");
      auto policies = std::make_shared<std::vector<std::string>>();
      auto json = std::make_shared<bool>(false);
      auto quiet = std::make_shared<bool>(false);
      auto dry = std::make_shared<bool>(false);
      auto arch = std::make_shared<std::string>();
      sub.add_flag("--dry-run", *dry,
                   "list the problems with their candidates and defaults, then stop: no compile, GPU or database");
      sub.add_option("--arch", *arch, "with --dry-run: the architecture to plan for (default: this GPU's)");
      sub.add_option("--budget", *budget, "stop starting new measurements after this long (e.g. 10m, 90s, 1h)");
      sub.add_flag("--resume", o->resume, "skip variants the database already has measured for a bucket");
      sub.add_option("--shard", *shard, "i/n: take problems i, i+n, ... (for cluster job arrays)");
      sub.add_option("--devices", *devices, "GPUs to use, comma-separated (a worker per GPU)")->capture_default_str();
      sub.add_option("--policy", *policies, "accuracy policy: accurate, balanced (default), fast; repeatable")
          ->delimiter(',');
      sub.add_option("--problems", o->problems_file, "problem set YAML (default: the built-in configs/problems.yaml)");
      sub.add_option("--db", o->db_path, "tune database (default: $SAGE_DB or ~/.cache/sage-tune/tune.db)");
      sub.add_option("--filter", o->filter, "only variants whose name matches this regex");
      sub.add_option("--jobs", o->compile_jobs, "compile threads (default: one per core)");
      sub.add_option("--cache-dir", o->cache_dir, "cubin cache folder");
      sub.add_flag("--json", *json, "print the results as JSON");
      sub.add_flag("-q,--quiet", *quiet, "no progress bars");
      return [=]() {
        tuner::TuneOptions opts = *o;
        if (!budget->empty()) opts.budget_s = parse_budget(*budget);
        if (!shard->empty()) {
          auto parts = split(*shard, '/');
          try {
            if (parts.size() != 2) throw 0;
            opts.shard_index = std::stoi(parts[0]);
            opts.shard_count = std::stoi(parts[1]);
          } catch (...) {
            throw Error(Errc::invalid_argument, "bad --shard '" + *shard + "' (expected i/n, e.g. 0/4)");
          }
        }
        opts.devices.clear();
        for (const auto& d : split(*devices, ',')) {
          try {
            opts.devices.push_back(std::stoi(d));
          } catch (...) {
            throw Error(Errc::invalid_argument, "bad --devices '" + *devices + "' (expected e.g. 0,1)");
          }
        }
        if (!policies->empty()) opts.policies = *policies;
        if (!arch->empty() && !*dry) throw Error(Errc::invalid_argument, "--arch goes with --dry-run (tune runs on this GPU)");
        if (*dry) return run_tune_plan(opts, *arch, *json);
        return run_tune(opts, *json, *quiet);
      };
    },
    30);

int run_default_tune() { return run_tune(tuner::TuneOptions{}, /*json=*/false, /*quiet=*/false); }

}  // namespace sage::cli
