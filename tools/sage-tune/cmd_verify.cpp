// sage-tune verify: re-check every winner of this GPU against what the database stored:
// correctness on fresh inputs (the winner's policy thresholds) and timing (drift).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/gate.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/timing.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"
#include "store_cli.h"

namespace sage::cli {

static Registrar reg_verify(
    "verify", "re-check the winners' correctness and timing on this GPU; flag drift",
    [](CLI::App& sub) -> Action {
      auto db = std::make_shared<std::string>();
      auto json = std::make_shared<bool>(false);
      auto tol = std::make_shared<double>(0.10);
      sub.add_option("--db", *db, "tune database (default: $SAGE_DB or ~/.cache/sage-tune/tune.db)");
      sub.add_option("--tolerance", *tol, "allowed relative timing drift beyond the measured spread")->capture_default_str();
      sub.add_flag("--json", *json, "print JSON");
      return [=]() {
        std::string why;
        if (!cu::have_device(&why)) throw Error(Errc::no_device, "verify needs a GPU: " + why);
        use_device(0);
        const std::string path = db->empty() ? tuner::default_user_db_path() : *db;
        tuner::Store store = store::open_for_read(path);
        const tuner::DeviceFingerprint fp = tuner::fingerprint_device(0);
        const std::string arch = tuner::arch_for_cc(fp.cc);
        const std::string gh = tuner::generator_hash(), nv = tuner::nvrtc_version();
        const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
        const gen::SearchSpace space = gen::SearchSpace::builtin();
        auto refmod = tuner::reference_module(arch);
        CUstream stream;
        SAGE_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
        tuner::Timer timer(stream);
        std::vector<std::vector<std::string>> rows;
        nlohmann::json out = nlohmann::json::array();
        int bad = 0, checked = 0, stale = 0;
        for (const tuner::Winner& w : store.winners()) {
          if (!(w.key.device == fp)) continue;
          if (w.key.generator_hash != gh || w.key.nvrtc_version != nv) {
            ++stale;
            continue;
          }
          ++checked;
          std::string verdict = "ok", detail;
          double now_us = 0, drift = 0;
          tuner::Metrics g, o;
          try {
            std::optional<gen::Variant> v = space.find(w.variant);
            if (!v) throw Error(Errc::not_found, "variant no longer in the search space");
            std::optional<tuner::KernelRecord> kr = store.kernel(w.kernel_hash);
            if (!kr) throw Error(Errc::not_found, "its kernel is missing from the database");
            auto k = std::make_shared<AttnKernel>(tuner::kernel_config(*v), Module::load(kr->cubin));
            tuner::GateMetrics gm = tuner::run_gate(*k, refmod, tuner::gate_shape(cfg, w.key.problem), stream, std::nullopt,
                                                      tuner::gate_sequences(cfg, w.key.problem));
            g = gm.gaussian;
            o = gm.outliers;
            std::string jwhy;
            if (tuner::judge(gm, cfg.policy(w.key.problem.policy), k->config(), &jwhy) != tuner::MeasurementStatus::passed) {
              verdict = "INCORRECT";
              detail = jwhy;
            }
            const AttnProblem p = cfg.representative(w.key.problem);
            // a paged bucket's over pages, a variable-length one's over its packed sequences
            const tuner::TimingInputs in(p, *refmod, 2, 500, stream, cfg.sequences(w.key.problem));
            DeviceBuffer ws(k->workspace_size(p));
            tuner::TimingOptions to;
            to.min_samples = cfg.timing.min_samples;
            to.max_samples = cfg.timing.max_samples;
            to.max_seconds = cfg.timing.max_seconds;
            tuner::TimingResult tr = timer.time([&](int i) { k->run(p, in.args(std::size_t(i)), ws.get(), stream); }, to);
            now_us = tr.median_ms * 1e3;
            drift = now_us / w.median_us - 1;
            const double allowed = *tol + w.noise + tr.spread();
            if (verdict == "ok" && std::fabs(drift) > allowed) {
              verdict = "DRIFT";
              detail = cat("timing moved ", int(drift * 100), "% (allowed ", int(allowed * 100), "%)");
            }
          } catch (const Error& e) {
            verdict = "FAILED";
            detail = e.what();
          }
          if (verdict != "ok") ++bad;
          char a[64], b[64], c[64];
          std::snprintf(a, sizeof a, "%.3f", w.median_us / 1e3);
          std::snprintf(b, sizeof b, "%.3f", now_us / 1e3);
          std::snprintf(c, sizeof c, "%+.1f%%", drift * 100);
          rows.push_back({w.key.problem.str(), w.variant, a, b, c, cat(g.cos).substr(0, 8), verdict + (detail.empty() ? "" : ": " + detail)});
          out.push_back({{"problem", w.key.problem.str()}, {"variant", w.variant}, {"stored_us", w.median_us},
                         {"now_us", now_us}, {"drift", drift}, {"gaussian_cos", g.cos}, {"gaussian_rel_l1", g.rel_l1},
                         {"outliers_rel_l1", o.rel_l1}, {"verdict", verdict}, {"detail", detail}});
        }
        cu::api().cuStreamDestroy(stream);
        if (*json) {
          std::cout << nlohmann::json{{"device", fp.key()}, {"checked", checked}, {"stale", stale}, {"bad", bad}, {"winners", out}}.dump(2) << "\n";
        } else {
          store::print_table(std::cout, {"problem", "winner", "stored ms", "now ms", "drift", "cos", "verdict"}, rows);
          std::printf("\n%d winners checked on %s, %d bad%s\n", checked, fp.name.c_str(), bad,
                      stale ? cat(", ", stale, " from another generator or NVRTC version skipped (re-tune)").c_str() : "");
          if (checked == 0) std::printf("no winner for this GPU in %s: run sage-tune tune first\n", path.c_str());
        }
        return bad ? int(kFailure) : checked == 0 ? int(kNotFound) : int(kOk);
      };
    },
    35);

}  // namespace sage::cli
