// sage-tune compile: enumerate the search space, render every variant and compile it with
// NVRTC (cubin cache on), then report per architecture what compiled, what came from the
// cache, what failed (with the first error lines) and what was pruned for spilling.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "commands.h"
#include "sage/common/archs.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/variants.h"

namespace sage::cli {
namespace {

struct CompileArgs {
  std::vector<std::string> archs;
  std::vector<std::string> pipelines;
  std::string filter;
  unsigned jobs = 0;
  bool no_cache = false;
  std::string cache_dir;
  bool json = false;
  bool verbose = false;
  std::string keep;
  bool fail_on_spill = false;
  std::vector<std::string> nvrtc_extra;
};

struct Summary {
  std::string arch;
  std::size_t variants = 0, compiled = 0, cache_hits = 0, failed = 0, spilled = 0;
  std::vector<double> build_ms;  // of every cubin (from the cache's metadata on a hit)
  double wall_s = 0;

  void add(const tuner::CompileResult& r) {
    ++variants;
    if (!r.ok) {
      ++failed;
      return;
    }
    ++compiled;
    cache_hits += r.cache_hit;
    spilled += r.spills();
    build_ms.push_back(r.build_ms);
  }
  void add(const Summary& o) {
    variants += o.variants, compiled += o.compiled, cache_hits += o.cache_hits;
    failed += o.failed, spilled += o.spilled, wall_s += o.wall_s;
    build_ms.insert(build_ms.end(), o.build_ms.begin(), o.build_ms.end());
  }
  double median_build_ms() const {
    if (build_ms.empty()) return 0;
    std::vector<double> v = build_ms;
    std::sort(v.begin(), v.end());
    std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> unique_in_order(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in)
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  return out;
}

void check_known(const std::vector<std::string>& asked, const std::vector<std::string>& known,
                 const char* option, const char* what) {
  for (const auto& a : asked)
    if (std::find(known.begin(), known.end(), a) == known.end())
      throw Error(Errc::invalid_argument,
                  cat("unknown ", what, " '", a, "' (the search space has: ", join(known, ", "), ")"),
                  option);
}

std::string fmt_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.2f ms" : "%.0f ms", ms);
  return buf;
}

void print_table(const std::vector<Summary>& rows, const Summary& total) {
  std::printf("%-8s %9s %9s %11s %7s %8s %15s %10s\n", "arch", "variants", "compiled", "cache hits",
              "failed", "spilled", "median compile", "wall time");
  auto row = [](const Summary& s) {
    std::string median = s.build_ms.empty() ? "-" : fmt_ms(s.median_build_ms());
    std::printf("%-8s %9zu %9zu %11zu %7zu %8zu %15s %10s\n", s.arch.c_str(), s.variants,
                s.compiled, s.cache_hits, s.failed, s.spilled, median.c_str(),
                human_duration(s.wall_s).c_str());
  };
  for (const auto& s : rows) row(s);
  if (rows.size() > 1) row(total);
}

nlohmann::json result_json(const tuner::CompileResult& r) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : r.kernels)
    kernels.push_back({{"kernel", k.kernel},
                       {"entry", k.entry},
                       {"registers", k.registers},
                       {"spill_stores", k.spill_stores},
                       {"spill_loads", k.spill_loads},
                       {"stack_frame", k.stack_frame},
                       {"smem_static", k.smem_static},
                       {"cmem0", k.cmem0},
                       {"barriers", k.barriers},
                       {"wgmma_serialized", k.wgmma_serialized()},
                       {"notes", k.notes}});
  nlohmann::json j{{"name", r.name},
                   {"arch", r.arch},
                   {"key", r.key},
                   {"ok", r.ok},
                   {"cache_hit", r.cache_hit},
                   {"compile_ms", r.compile_ms},
                   {"build_ms", r.build_ms},
                   {"spills", r.spills()},
                   {"kernels", kernels}};
  if (!r.ok) j["errors"] = tuner::error_lines(r.log);
  if (r.spills()) j["pruned"] = r.spill_summary();
  if (!r.cache_note.empty()) j["cache_note"] = r.cache_note;
  return j;
}

nlohmann::json summary_json(const Summary& s) {
  return {{"arch", s.arch},         {"variants", s.variants}, {"compiled", s.compiled},
          {"cache_hits", s.cache_hits}, {"failed", s.failed}, {"spilled", s.spilled},
          {"median_compile_ms", s.median_build_ms()}, {"wall_s", s.wall_s}};
}

int run_compile(const CompileArgs& a) {
  const auto t_start = std::chrono::steady_clock::now();
  gen::SearchSpace space = gen::SearchSpace::builtin();
  std::vector<std::string> archs = unique_in_order(a.archs.empty() ? space.archs() : a.archs);
  for (const auto& arch : archs)
    if (!tuner::is_supported_arch(arch))
      throw Error(Errc::invalid_argument,
                  cat("unknown architecture '", arch, "' (expected one of ",
                      join(tuner::supported_archs(), ", "), ")"),
                  "--arch");
  check_known(archs, space.archs(), "--arch", "architecture");
  check_known(a.pipelines, space.pipelines(), "--pipeline", "pipeline");
  if (!a.filter.empty()) {
    try {
      std::regex check(a.filter, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(Errc::invalid_argument, cat("invalid regular expression '", a.filter, "': ", e.what()),
                  "--filter");
    }
  }

  gen::EnumerateOptions eo;
  eo.archs = archs;
  eo.filter = a.filter;
  eo.pipelines = a.pipelines;
  gen::Enumeration en = space.enumerate(eo);
  // Combinations the search space's rules dropped (not those the filter excluded).
  const std::size_t pruned_by_rules = std::size_t(std::count_if(
      en.pruned.begin(), en.pruned.end(), [](const gen::PrunedVariant& p) { return p.rule != "filter"; }));
  if (en.variants.empty()) {
    std::cerr << "sage-tune compile: no variant of the search space matches"
              << (a.filter.empty() ? "" : " --filter '" + a.filter + "'") << " for "
              << join(archs, ", ") << (a.pipelines.empty() ? "" : " (pipelines " + join(a.pipelines, ", ") + ")")
              << "\n";
    return kNotFound;
  }

  tuner::CompileOptions base;
  base.use_cache = !a.no_cache;
  base.cache_dir = a.cache_dir;
  base.extra = a.nvrtc_extra;
  // Render everything first: a template error stops the command before any compile.
  const tuner::VariantBuilder renderer(base);
  std::map<std::string, std::vector<tuner::CompileJob>> jobs;
  for (const auto& v : en.variants) {
    try {
      jobs[v.arch].push_back({v.name, renderer.render(v)});
    } catch (const Error& e) {
      throw Error(e.code(), cat("rendering variant ", v.name, ": ", e.message()), e.where());
    }
  }
  ProgressBar bar("compile", en.variants.size());
  std::size_t done_before = 0;
  std::vector<Summary> summaries;
  std::vector<tuner::CompileResult> all;
  for (const auto& arch : archs) {
    auto it = jobs.find(arch);
    if (it == jobs.end()) continue;  // no variant of this arch passed the filter
    tuner::CompileOptions o = base;
    o.arch = arch;
    auto t0 = std::chrono::steady_clock::now();
    auto results = tuner::compile_all(it->second, o, a.jobs, [&](const tuner::Progress& p) {
      bar.update(done_before + p.done, p.last);
    });
    Summary s;
    s.arch = arch;
    s.wall_s = seconds_since(t0);
    for (auto& r : results) {
      s.add(r);
      all.push_back(std::move(r));
    }
    done_before += results.size();
    summaries.push_back(std::move(s));
  }
  bar.finish();
  Summary total;
  total.arch = "total";
  for (const auto& s : summaries) total.add(s);

  if (!a.keep.empty()) {
    for (const auto& r : all) {
      std::string stem = cat(a.keep, "/", r.arch, "/", r.name);
      write_file_atomic(stem + ".log", r.log);
      if (r.ok) write_file_atomic(stem + ".cubin", r.cubin);
    }
  }

  if (a.verbose) {
    for (const auto& r : all) {
      std::string state = !r.ok ? "FAILED" : r.spills() ? "spills" : "ok";
      std::fprintf(stderr, "== %s (%s): %s%s, %s\n%s", r.name.c_str(), r.arch.c_str(),
                   state.c_str(), r.cache_hit ? ", cache hit" : "", fmt_ms(r.compile_ms).c_str(),
                   r.log.c_str());
    }
  }

  // Failures go to stderr (they are errors), in every output mode.
  for (const auto& r : all) {
    if (r.ok) continue;
    std::fprintf(stderr, "sage-tune: error: variant %s (%s) failed to compile:\n", r.name.c_str(),
                 r.arch.c_str());
    auto lines = tuner::error_lines(r.log, 5);
    if (lines.empty()) lines.push_back(trim(r.log.substr(0, 400)));
    for (const auto& l : lines) std::fprintf(stderr, "  %s\n", l.c_str());
  }

  if (a.json) {
    nlohmann::json j;
    j["nvrtc"] = tuner::nvrtc_build();
    j["cache"] = a.no_cache ? std::string("off")
                            : (a.cache_dir.empty() ? tuner::default_cache_dir() : a.cache_dir);
    j["archs"] = nlohmann::json::array();
    for (const auto& s : summaries) j["archs"].push_back(summary_json(s));
    j["total"] = summary_json(total);
    j["wall_s"] = seconds_since(t_start);  // the whole command: enumerate, render, compile
    j["pruned_by_search_space"] = pruned_by_rules;
    j["variants"] = nlohmann::json::array();
    for (const auto& r : all) j["variants"].push_back(result_json(r));
    std::cout << j.dump(2) << "\n";
  } else {
    print_table(summaries, total);
    bool header = false;
    for (const auto& r : all) {
      if (!r.ok || !r.spills()) continue;
      if (!header) std::printf("\npruned for spilling:\n");
      header = true;
      std::printf("  %s (%s): pruned: %s\n", r.name.c_str(), r.arch.c_str(), r.spill_summary().c_str());
    }
    if (pruned_by_rules > 0)
      std::printf("\n(%zu more combinations were pruned by the search space's rules before "
                  "compiling: sage-tune generate --explain)\n",
                  pruned_by_rules);
    for (const auto& r : all)
      if (!r.cache_note.empty())
        std::printf("note: %s (%s): %s\n", r.name.c_str(), r.arch.c_str(), r.cache_note.c_str());
    std::printf("\n%zu variants for %zu architecture%s in %s: %zu built, %zu cache hits, %zu failed, "
                "%zu pruned for spilling\n",
                total.variants, summaries.size(), summaries.size() == 1 ? "" : "s",
                human_duration(seconds_since(t_start)).c_str(), total.compiled - total.cache_hits,
                total.cache_hits, total.failed, total.spilled);
  }
  std::fflush(stdout);

  if (total.failed > 0) {
    std::fprintf(stderr, "sage-tune compile: %zu of %zu variants failed to compile\n", total.failed,
                 total.variants);
    return kCompileError;
  }
  if (a.fail_on_spill && total.spilled > 0) {
    std::fprintf(stderr, "sage-tune compile: %zu variants spill registers (--fail-on-spill)\n",
                 total.spilled);
    return kFailure;
  }
  return kOk;
}

Registrar reg(
    "compile", "Render and compile every variant of the search space with NVRTC (cubin cache on)",
    [](CLI::App& sub) -> Action {
      auto a = std::make_shared<CompileArgs>();
      sub.add_option("--arch", a->archs,
                     cat("Architecture to compile for (", target_archs_text(),
                         "); repeatable. Default: every architecture of the search space"))
          ->delimiter(',');
      sub.add_option("--filter", a->filter, "Only variants whose name matches this regex");
      sub.add_option("--pipeline", a->pipelines, "Only this pipeline (e.g. mma, reference); repeatable")
          ->delimiter(',');
      sub.add_option("--jobs,-j", a->jobs, "Parallel compiles (default: one per CPU)")
          ->check(CLI::NonNegativeNumber);
      sub.add_flag("--no-cache", a->no_cache, "Neither read nor write the cubin cache");
      sub.add_option("--cache-dir", a->cache_dir,
                     "Cubin cache folder (default: $SAGE_CACHE_DIR/cubins or ~/.cache/sage-tune/cubins)");
      sub.add_flag("--json", a->json, "Print the summary and every result as JSON on stdout");
      sub.add_flag("--verbose,-v", a->verbose, "Print every compile log (stderr)");
      sub.add_option("--keep", a->keep, "Write <DIR>/<arch>/<variant>.cubin and .log");
      sub.add_option("--nvrtc-option", a->nvrtc_extra,
                     "Extra NVRTC option, e.g. --nvrtc-option=-maxrregcount=128 (repeatable; "
                     "part of the cache key)");
      sub.add_flag("--fail-on-spill", a->fail_on_spill,
                   "Exit 1 when a variant spills registers (default: prune it and exit 0)");
      return [a] { return run_compile(*a); };
    },
    30);

}  // namespace
int run_default_compile() { return run_compile(CompileArgs{}); }

}  // namespace sage::cli
