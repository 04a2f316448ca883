// sage::Error — the one exception type internals throw. It carries a category (mapped to a
// C status code by the runtime and to an exit code by the CLI), what failed, and where.
#pragma once
#include <stdexcept>
#include <string>

namespace sage {

enum class Errc {
  invalid_argument = 1,  // bad input from the caller (shape, pointer, option)
  unsupported,           // valid request this build/device/variant cannot serve
  not_found,             // missing file, variant, database entry
  parse_error,           // malformed YAML, template syntax error
  compile_failed,        // NVRTC / ptxas rejected a kernel
  cuda_error,            // a CUDA driver call failed
  no_device,             // no usable GPU (or no driver)
  io_error,              // filesystem or SQLite I/O failure
  corrupt,               // integrity check or checksum mismatch
  not_in_build,          // a static build was asked for a problem it does not contain
  jit_disabled,          // SAGE_DISABLE_JIT=1 and the kernel is not cached
  internal,              // a bug
};

const char* errc_name(Errc c);

class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string what, std::string where = {})
      : std::runtime_error(where.empty() ? what : where + ": " + what),
        code_(code), message_(std::move(what)), where_(std::move(where)) {}
  Errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }  // without the place
  const std::string& where() const noexcept { return where_; }

 private:
  Errc code_;
  std::string message_;
  std::string where_;
};

// Throws Error(code, what) when !cond. For checks whose failure is the caller's fault.
inline void require(bool cond, Errc code, const std::string& what) {
  if (!cond) throw Error(code, what);
}

}  // namespace sage
