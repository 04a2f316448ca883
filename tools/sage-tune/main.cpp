// sage-tune: generate, compile, tune and inspect SageAttention-style kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <unistd.h>

#include "commands.h"
#include "sage/common/strings.h"

namespace sage::cli {

std::vector<CommandInfo>& registry() {
  static std::vector<CommandInfo> r;
  return r;
}

int exit_code_for(Errc e) {
  switch (e) {
    case Errc::invalid_argument: return kUsage;
    case Errc::parse_error: return kParseError;
    case Errc::compile_failed: return kCompileError;
    case Errc::no_device: return kNoDevice;
    case Errc::cuda_error: return kCudaError;
    case Errc::io_error:
    case Errc::corrupt: return kIoError;
    case Errc::not_found: return kNotFound;
    case Errc::unsupported:
    case Errc::not_in_build:
    case Errc::jit_disabled: return kUnsupported;
    case Errc::internal: return kInternal;
  }
  return kFailure;
}

bool stdout_is_tty() { return ::isatty(1) == 1; }

static double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

ProgressBar::ProgressBar(std::string label, std::size_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(::isatty(2) == 1),
      start_(now_s()) {}

void ProgressBar::update(std::size_t done, const std::string& detail) {
  if (!enabled_ || total_ == 0) return;
  double t = now_s();
  // On a terminal redraw at most 10 times a second; in a log print a line every 10%.
  if (tty_) {
    if (done != total_ && t - last_print_ < 0.1) return;
  } else {
    std::size_t step = std::max<std::size_t>(1, total_ / 10);
    if (done != total_ && done % step != 0) return;
  }
  last_print_ = t;
  const int width = 30;
  int filled = int(double(done) / double(total_) * width);
  std::string bar(std::size_t(filled), '#');
  bar.resize(width, ' ');
  double elapsed = t - start_;
  std::string eta = done > 0 && done < total_
                        ? ", ETA " + human_duration(elapsed / double(done) * double(total_ - done))
                        : "";
  std::string d = detail.size() > 60 ? detail.substr(0, 57) + "..." : detail;
  std::fprintf(stderr, "%s%s [%s] %zu/%zu%s %s%s", tty_ ? "\r\033[K" : "", label_.c_str(),
               bar.c_str(), done, total_, eta.c_str(), d.c_str(), tty_ ? "" : "\n");
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!enabled_ || total_ == 0) return;
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace sage::cli

int main(int argc, char** argv) {
  using namespace sage::cli;
  CLI::App app{"sage-tune: generate, compile, tune and serve SageAttention-style quantized "
               "attention kernels.\nWith no command: tune the default problems on the GPU, or "
               "where there is none, generate and compile the default variant set."};
  app.set_version_flag("--version", std::string("sage-tune 0.1.0"));
  app.require_subcommand(0, 1);
  auto& reg = registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  std::map<CLI::App*, Action> actions;
  Action default_action;
  for (auto& c : reg) {
    if (c.name.empty()) {  // the main job: runs when no subcommand is given
      default_action = c.setup(app);
      continue;
    }
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    actions[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kUsage;
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
    if (default_action) return default_action();
    std::cerr << app.help();
    return kUsage;
  } catch (const sage::Error& e) {
    std::cerr << "sage-tune: error: " << e.what() << "\n";
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::cerr << "sage-tune: internal error: " << e.what() << "\n";
    return kInternal;
  }
}
