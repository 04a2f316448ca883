#include "support/cli.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "sage/common/error.h"
#include "sage/common/strings.h"

namespace sage::test {
namespace fs = std::filesystem;

CliSandbox::CliSandbox() {
  std::string tmpl = (fs::temp_directory_path() / "sage-cli-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw Error(Errc::io_error, "mkdtemp failed");
  dir_ = tmpl;
}

CliSandbox::~CliSandbox() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void CliSandbox::write(const std::string& name, const std::string& text) const { write_file_atomic(path(name), text); }

CliRun CliSandbox::run(const std::string& args) const {
  const std::string out = path("stdout"), err = path("stderr");
  const std::string cmd = cat("cd '", dir_, "' && SAGE_DB='", path("tune.db"), "' SAGE_CACHE_DIR='", path("cache"),
                              "' SAGE_SYSTEM_DB='", path("system.db"), "' XDG_CACHE_HOME='", path("xdg"), "' '",
                              SAGE_TUNE_EXE, "' ", args, " >'", out, "' 2>'", err, "'");
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace sage::test
