// sage-tune doctor: is everything sage-tune needs here and healthy? Driver, NVRTC (with a
// real compile), GPUs, the databases and the cubin cache.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/embedded.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/store.h"
#include "sage/tuner/variants.h"

namespace sage::cli {
namespace {

struct Check {
  std::string what, status, detail;  // status: ok | warn | FAIL
};

std::int64_t dir_bytes(const std::string& dir, std::int64_t* files) {
  namespace fs = std::filesystem;
  std::int64_t total = 0;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec)) {
      total += std::int64_t(it->file_size(ec));
      ++*files;
    }
  return total;
}

}  // namespace

static Registrar reg_doctor(
    "doctor", "check the driver, NVRTC, the GPUs, the databases and the cubin cache",
    [](CLI::App& sub) -> Action {
      auto json = std::make_shared<bool>(false);
      auto full = std::make_shared<bool>(false);
      sub.add_flag("--json", *json, "print JSON");
      sub.add_flag("--full", *full, "full database integrity check (reads every cubin)");
      return [=]() {
        std::vector<Check> checks;
        std::string why;
        // Driver and GPUs.
        if (const cu::Api* a = cu::try_api(&why)) {
          int v = 0, n = 0;
          a->cuDriverGetVersion(&v);
          a->cuDeviceGetCount(&n);
          checks.push_back({"CUDA driver", "ok", cat(v / 1000, ".", (v % 1000) / 10)});
          if (n == 0) checks.push_back({"GPU", "warn", "no CUDA device visible: tune, bench and verify need one"});
          for (int i = 0; i < n; ++i) {
            tuner::DeviceFingerprint f = tuner::fingerprint_device(i);
            std::string arch;
            try {
              arch = tuner::arch_for_cc(f.cc);
              checks.push_back({cat("GPU ", i), "ok", f.name + " (" + arch + ", " + cat(f.sm_count) + " SMs)"});
            } catch (const Error& e) {
              checks.push_back({cat("GPU ", i), "FAIL", f.name + ": " + e.message()});
            }
          }
        } else {
          checks.push_back({"CUDA driver", "warn", why + " (generate and compile work; tune, bench and the runtime need a GPU)"});
        }
        // NVRTC: a real compile of the reference kernel.
        try {
          gen::EnumerateOptions eo;
          eo.archs = {"sm_80"};
          eo.pipelines = {"reference"};
          gen::Enumeration e = gen::SearchSpace::builtin().enumerate(eo);
          tuner::CompileOptions co;
          co.arch = "sm_80";
          co.use_cache = false;
          tuner::CompileResult r = tuner::VariantBuilder(co).compile(e.variants.at(0));
          checks.push_back({"NVRTC", r.ok ? "ok" : "FAIL",
                            r.ok ? cat(tuner::nvrtc_version(), " (compiled the FP32 reference in ", int(r.compile_ms), " ms)")
                                 : join(tuner::error_lines(r.log), " | ")});
        } catch (const std::exception& e) {
          checks.push_back({"NVRTC", "FAIL", e.what()});
        }
        std::size_t nfiles = 0;
        embedded_templates::files(&nfiles);
        checks.push_back({"templates", "ok", cat(nfiles, " embedded files, generator hash ", tuner::generator_hash().substr(0, 12))});
        // Databases.
        for (auto [label, path, required] : {std::tuple{"user DB", tuner::default_user_db_path(), false},
                                             std::tuple{"system DB", tuner::default_system_db_path(), false}}) {
          tuner::StoreHealth h = tuner::check_health(path, *full);
          std::string st = h.ok() ? "ok" : h.state == tuner::StoreHealth::State::missing ? "warn" : "FAIL";
          std::string detail = path + ": " + tuner::to_string(h.state);
          if (h.ok()) detail += cat(", schema v", h.schema_version, ", ", h.counts.winners, " winners, ", h.counts.kernels, " kernels");
          if (h.state == tuner::StoreHealth::State::missing)
            detail += required ? "" : " (normal before the first tune)";
          if (!h.message.empty() && !h.ok()) detail += " — " + h.message;
          checks.push_back({label, st, detail});
        }
        std::int64_t files = 0;
        const std::string cache = tuner::default_cache_dir();
        const std::int64_t bytes = dir_bytes(cache, &files);
        checks.push_back({"cubin cache", "ok", cat(cache, ": ", files, " files, ", bytes / (1 << 20), " MiB")});
        checks.push_back({"environment", "ok",
                          cat("SAGE_DB=", env("SAGE_DB").empty() ? "(unset)" : env("SAGE_DB"),
                              " SAGE_DISABLE_JIT=", env("SAGE_DISABLE_JIT").empty() ? "(unset)" : env("SAGE_DISABLE_JIT"),
                              " SAGE_LOG=", env("SAGE_LOG").empty() ? "(unset)" : env("SAGE_LOG"))});
        int fails = 0;
        for (const auto& c : checks) fails += c.status == "FAIL";
        if (*json) {
          nlohmann::json j = nlohmann::json::array();
          for (const auto& c : checks) j.push_back({{"check", c.what}, {"status", c.status}, {"detail", c.detail}});
          std::cout << nlohmann::json{{"checks", j}, {"ok", fails == 0}}.dump(2) << "\n";
        } else {
          for (const auto& c : checks) std::printf("%-5s %-12s %s\n", c.status.c_str(), c.what.c_str(), c.detail.c_str());
          std::printf("\n%s\n", fails ? "problems found (FAIL above)" : "all checks passed");
        }
        return fails ? int(kFailure) : int(kOk);
      };
    },
    90);

}  // namespace sage::cli
