// Subcommand registration for the sage-tune CLI. Each cmd_*.cpp defines one
// `static Registrar r("name", "help", setup)`; main() builds the CLI11 app from the
// registry. The entry with an empty name is the main job, run when no subcommand is given
// (its setup receives the top-level app).
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "sage/common/error.h"

namespace sage::cli {

// Exit codes (documented in docs/cli.md):
enum ExitCode : int {
  kOk = 0,
  kFailure = 1,        // the command ran and reports failures (e.g. some variants failed)
  kUsage = 2,          // bad command line or invalid argument
  kParseError = 3,     // malformed configuration or template
  kCompileError = 4,   // a kernel failed to compile where that is fatal
  kNoDevice = 5,       // a GPU was required and none is usable
  kCudaError = 6,      // a CUDA call failed
  kIoError = 7,        // file or database I/O failure, corrupt data
  kNotFound = 8,       // named variant/problem/file does not exist
  kUnsupported = 9,    // the request is valid but unsupported here
  kInternal = 70,      // a bug
};
int exit_code_for(Errc e);

// A subcommand: `setup` adds options to `sub` and returns the action run when it is chosen.
using Action = std::function<int()>;
using Setup = std::function<Action(CLI::App& sub)>;
struct CommandInfo {
  std::string name;
  std::string help;
  Setup setup;
  int order;  // position in --help
};
std::vector<CommandInfo>& registry();
struct Registrar {
  Registrar(std::string name, std::string help, Setup setup, int order = 100) {
    registry().push_back({std::move(name), std::move(help), std::move(setup), order});
  }
};

// The main job's two halves (cmd_default.cpp): `compile` over the whole default search
// space with default options, and `tune` of the default problems with default options.
int run_default_compile();
int run_default_tune();

// Shared helpers for commands.
bool stdout_is_tty();
// A one-line progress bar on stderr ("[#####     ] 12/40 name, ETA 1m05s"); no-op when quiet.
class ProgressBar {
 public:
  ProgressBar(std::string label, std::size_t total, bool enabled = true);
  void update(std::size_t done, const std::string& detail = {});
  void finish();

 private:
  std::string label_;
  std::size_t total_;
  bool enabled_;
  bool tty_;
  double start_;
  double last_print_ = -1;
};

}  // namespace sage::cli
