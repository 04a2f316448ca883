// sage-tune devices: the GPUs this machine has, with the compile target each would use.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/tuner/problems.h"
#include "store_cli.h"

namespace sage::cli {

static Registrar reg_devices(
    "devices", "list the GPUs, their compute capability and the architecture sage-tune compiles for",
    [](CLI::App& sub) -> Action {
      auto json = std::make_shared<bool>(false);
      sub.add_flag("--json", *json, "print JSON");
      return [=]() {
        std::string why;
        if (!cu::have_device(&why)) {
          if (*json) std::cout << nlohmann::json{{"devices", nlohmann::json::array()}, {"error", why}}.dump(2) << "\n";
          else std::cerr << "sage-tune: no GPU: " << why << "\n";
          return int(kNoDevice);
        }
        int n = 0;
        SAGE_CU(cuDeviceGetCount(&n));
        nlohmann::json j = nlohmann::json::array();
        std::vector<std::vector<std::string>> rows;
        for (int i = 0; i < n; ++i) {
          tuner::DeviceFingerprint f = tuner::fingerprint_device(i);
          std::string arch;
          try {
            arch = tuner::arch_for_cc(f.cc);
          } catch (const Error& e) {
            arch = "unsupported";
          }
          char mem[32];
          std::snprintf(mem, sizeof mem, "%.1f GiB", double(f.memory_bytes) / (1 << 30));
          rows.push_back({cat(i), f.name, cat(f.cc / 10, ".", f.cc % 10), arch, cat(f.sm_count), mem,
                          cat(f.driver_version / 1000, ".", (f.driver_version % 1000) / 10)});
          j.push_back({{"index", i}, {"name", f.name}, {"cc", f.cc}, {"arch", arch}, {"sm_count", f.sm_count},
                       {"memory_bytes", f.memory_bytes}, {"driver_version", f.driver_version}, {"fingerprint", f.key()}});
        }
        if (*json) std::cout << nlohmann::json{{"devices", j}}.dump(2) << "\n";
        else store::print_table(std::cout, {"#", "name", "cc", "target", "SMs", "memory", "driver"}, rows);
        return int(kOk);
      };
    },
    10);

}  // namespace sage::cli
