// Internals shared by the store's source files (store.cpp, store_open.cpp, store_merge.cpp,
// store_health.cpp, store_lookup.cpp). Not installed.
#pragma once
#include <mutex>
#include <string>

#include "sage/tuner/store.h"
#include "sqlite.h"

namespace sage::tuner {

std::int64_t now_unix();
// Calls opts.warn, or prints "sage-tune: warning: <msg>" on stderr when it is empty.
void emit_warning(const std::function<void(const std::string&)>& warn, const std::string& msg);

// What a database file says about itself, read without modifying it.
struct Identity {
  int application_id = 0;
  bool has_meta = false;
  int user_tables = 0;     // tables other than sqlite_*
  int schema_version = 0;  // meta.schema_version; 0 for an empty file
};
// Throws Error(corrupt) when SQLite cannot read the schema (not a database, damaged header).
Identity identify(sql::Db& db);
// Throws Error(unsupported) for a foreign file or a schema newer than this build.
void require_known(const Identity& id, const std::string& path);
// Runs PRAGMA quick_check (or integrity_check when full); returns "" when the file is sound,
// otherwise the first problems SQLite reported joined by "; ".
std::string integrity_problems(sql::Db& db, bool full);
// Applies the missing migration steps, each in its own transaction; returns the version found.
int migrate(sql::Db& db, const std::string& path);
// "file:<absolute path, percent-escaped>?immutable=1" for SQLITE_OPEN_URI.
std::string immutable_uri(const std::string& path);

struct Store::Impl {
  sql::Db db;
  std::string path;
  bool read_only = false;
  int version = 0;
  OpenReport report;
  OpenOptions opts;
  std::recursive_mutex mu;  // recursive: decide_winner and merge call other members

  void warn(const std::string& msg) const { emit_warning(opts.warn, msg); }
  void require_writable(const char* what) const;

  // Opening (store_open.cpp).
  void open();
  void open_read_only();
  void open_read_write();
  void rebuild(const std::string& why);
  // Copies the readable, intact rows of the moved-aside file into the new one; false when
  // nothing could be read at all.
  bool salvage_from(const std::string& moved);

  // Row access (store.cpp), without locking or transactions of their own unless stated.
  void upsert_device(const DeviceFingerprint& d);
  // Inserts unless a row with the same uid exists; returns {row id, inserted}.
  std::pair<std::int64_t, bool> insert_measurement(const Measurement& m);
  void write_winner(const Winner& w);
  std::optional<Winner> read_winner(const WinnerKey& key);
  void insert_kernel(const KernelRecord& k, const std::string& sha);
  // Moves a kernel row into the quarantine table (own transaction).
  void quarantine(const std::string& hash, const std::string& stored, const std::string& actual,
                  const std::string& reason);
};

// Access to a Store's internals for merge and lookup (same library only).
struct StoreAccess {
  static Store::Impl& impl(Store& s);
};

// Row readers shared by store.cpp and store_merge.cpp; the column lists they expect.
extern const char* const kWinnerColumns;
Winner winner_from_row(const sql::Statement& st, const std::string& path);
extern const char* const kMeasurementColumns;
Measurement measurement_from_row(const sql::Statement& st, const std::string& path);

}  // namespace sage::tuner
