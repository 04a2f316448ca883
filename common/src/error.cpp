#include "sage/common/error.h"

namespace sage {
const char* errc_name(Errc c) {
  switch (c) {
    case Errc::invalid_argument: return "invalid argument";
    case Errc::unsupported: return "unsupported";
    case Errc::not_found: return "not found";
    case Errc::parse_error: return "parse error";
    case Errc::compile_failed: return "compile failed";
    case Errc::cuda_error: return "CUDA error";
    case Errc::no_device: return "no device";
    case Errc::io_error: return "I/O error";
    case Errc::corrupt: return "corrupt data";
    case Errc::not_in_build: return "not in this build";
    case Errc::jit_disabled: return "JIT disabled";
    case Errc::internal: return "internal error";
  }
  return "unknown error";
}
}  // namespace sage
