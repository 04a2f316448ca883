// Helpers shared by the store commands (list, show, merge, gc, db): database path options,
// read-only opening, aligned tables and number formatting.
#pragma once
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "sage/common/strings.h"
#include "sage/tuner/store.h"

namespace sage::cli::store {

// --db PATH and --system, shared by the commands that read one database.
struct DbOption {
  std::string path;
  bool system = false;

  void add(CLI::App& sub) {
    sub.add_option("--db", path, "tune database (default: $SAGE_DB or ~/.cache/sage-tune/tune.db)");
    sub.add_flag("--system", system, "use the read-only system database instead of the user one");
  }
  std::string resolve() const {
    if (!path.empty()) return path;
    return system ? tuner::default_system_db_path() : tuner::default_user_db_path();
  }
  // True when the resolved database is the system one (opened immutable).
  bool is_system() const { return path.empty() && system; }
};

inline void warn_stderr(const std::string& msg) { std::cerr << "sage-tune: warning: " << msg << "\n"; }

// Opens for reading: never creates, migrates the file or repairs it. A missing file is
// Error(not_found), a damaged one Error(corrupt). The system DB is opened like the runtime
// opens it (immutable: no lock or index files, so it works in a read-only directory).
inline tuner::Store open_for_read(const std::string& path, bool system = false) {
  tuner::OpenOptions o;
  o.read_only = true;
  o.immutable = system;
  o.create = false;
  o.on_corrupt = tuner::OnCorrupt::fail;
  o.warn = warn_stderr;
  return tuner::Store(path, o);
}

// Opens for maintenance (gc, migrate): writable, but never created and never rebuilt.
inline tuner::Store open_existing_for_write(const std::string& path) {
  tuner::OpenOptions o;
  o.create = false;
  o.on_corrupt = tuner::OnCorrupt::fail;
  o.warn = warn_stderr;
  return tuner::Store(path, o);
}

// Prints rows under a header, columns padded to their widest cell.
inline void print_table(std::ostream& os, const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t i = 0; i < r.size(); ++i) {
      s += r[i];
      if (i + 1 < r.size()) s += std::string(w[i] - r[i].size() + 2, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();  // no trailing blanks; leading ones align
    os << s << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

inline std::string fixed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}
inline std::string fixed(const std::optional<double>& v, int prec) { return v ? fixed(*v, prec) : "-"; }

inline std::string percent(const std::optional<double>& v) {
  if (!v) return "-";
  return (*v >= 0 ? "+" : "") + fixed(*v * 100.0, 1) + "%";
}

inline std::string when(std::int64_t unix_s) {
  std::time_t t = std::time_t(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

inline std::string bytes(std::int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? std::to_string(n) + " B" : fixed(v, 1) + " " + units[u];
}

// "NVIDIA H100 80GB HBM3 (cc90, 132 SMs, drv 13000)"
inline std::string device_label(const tuner::DeviceFingerprint& d) {
  return cat(d.name, " (cc", d.cc, ", ", d.sm_count, " SMs, drv ", d.driver_version, ")");
}

}  // namespace sage::cli::store
