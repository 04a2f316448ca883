// Runs the real sage-tune binary (SAGE_TUNE_EXE) in a temporary directory with its own
// database and cubin cache, capturing exit code, stdout and stderr.
#pragma once
#include <string>

namespace sage::test {

struct CliRun {
  int rc = -1;
  std::string out, err;
};

class CliSandbox {
 public:
  CliSandbox();   // creates the directory; SAGE_DB=<dir>/tune.db, SAGE_CACHE_DIR=<dir>/cache
  ~CliSandbox();  // removes it
  CliSandbox(const CliSandbox&) = delete;
  CliSandbox& operator=(const CliSandbox&) = delete;
  // `args` are passed to the shell as written (quote what needs quoting).
  CliRun run(const std::string& args) const;
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace sage::test
