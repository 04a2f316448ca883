#include "sage/common/strings.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "sage/common/error.h"

namespace sage {
std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t p = s.find(sep, start);
    if (p == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, p - start));
    start = p + 1;
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string trim(std::string_view s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string human_duration(double s) {
  char buf[64];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1.0) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else if (s < 60.0) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  return buf;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path)) throw Error(Errc::not_found, "no such file", path);
    throw Error(Errc::io_error, std::string("cannot open: ") + std::strerror(errno), path);
  }
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) throw Error(Errc::io_error, "read failed", path);
  return os.str();
}

void write_file_atomic(const std::string& path, std::string_view data) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
  }
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(Errc::io_error, std::string("cannot write: ") + std::strerror(errno), tmp);
    out.write(data.data(), std::streamsize(data.size()));
    out.flush();
    if (!out) throw Error(Errc::io_error, "write failed", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(Errc::io_error, "rename failed: " + ec.message(), path);
  }
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_flag(const char* name) {
  std::string v = env(name);
  for (auto& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string cache_dir() {
  std::string base = env("XDG_CACHE_HOME");
  if (base.empty()) {
    std::string home = env("HOME");
    base = home.empty() ? std::string("/tmp") : home + "/.cache";
  }
  std::string dir = base + "/sage-tune";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return dir;
}
}  // namespace sage
