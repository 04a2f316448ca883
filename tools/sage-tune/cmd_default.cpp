// `sage-tune` with no subcommand: the main job. With a GPU, tune the default problems for it
// (the result lands in the user database, which the runtime reads). Without one, generate
// and JIT-compile the default variant set for every architecture (filling the cubin cache),
// and say that no GPU was found.
#include <iostream>

#include "commands.h"
#include "sage/common/cuda_driver.h"

namespace sage::cli {

static Registrar reg_default(
    "", "",
    [](CLI::App&) -> Action {
      return []() {
        std::string why;
        if (cu::have_device(&why)) {
          std::cerr << "sage-tune: tuning the default problems on this GPU (sage-tune tune --help for options)\n";
          return run_default_tune();
        }
        std::cerr << "sage-tune: no GPU found (" << why << ").\n"
                  << "sage-tune: generating and compiling the default variant set for every architecture instead;\n"
                  << "sage-tune: run sage-tune again on a machine with an NVIDIA GPU (sm_80 or newer) to tune.\n";
        return run_default_compile();
      };
    },
    0);

}  // namespace sage::cli
