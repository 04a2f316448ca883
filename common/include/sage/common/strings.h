#pragma once
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace sage {
// cat("a", 1, 'b') -> "a1b"
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
std::vector<std::string> split(std::string_view s, char sep);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
std::string trim(std::string_view s);
bool starts_with(std::string_view s, std::string_view prefix);
// "12.5 ms", "3.2 s", "1m05s"
std::string human_duration(double seconds);
// Reads a whole file; throws Error(not_found / io_error) naming the path.
std::string read_file(const std::string& path);
// Writes atomically (temp file + rename); throws Error(io_error).
void write_file_atomic(const std::string& path, std::string_view data);
// Value of an environment variable, or empty.
std::string env(const char* name);
bool env_flag(const char* name);  // "1", "true", "yes", "on"
// ~/.cache/sage-tune (XDG_CACHE_HOME honoured), created on demand.
std::string cache_dir();
}  // namespace sage
