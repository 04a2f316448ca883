// Thin RAII layer over the SQLite C API used by the tune store: a connection (Db), a prepared
// statement with positional binding (Statement), and a write transaction that rolls back
// unless committed (Transaction). Every failure becomes a sage::Error naming the database
// path; SQLITE_CORRUPT and SQLITE_NOTADB map to Errc::corrupt so callers can tell a damaged
// file from an ordinary I/O problem. SQL text is always a constant: values go through bind().
#pragma once
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "sage/common/error.h"

namespace sage::tuner::sql {

// Bytes bound as a BLOB (a std::string_view binds as TEXT).
struct Blob {
  const void* data;
  std::size_t size;
};

// Errc for an SQLite result code: corrupt for SQLITE_CORRUPT / SQLITE_NOTADB, io_error otherwise.
Errc errc_for(int rc);
// True for the primary codes SQLite returns when another connection holds a lock.
inline bool is_busy(int rc) {
  int p = rc & 0xff;
  return p == SQLITE_BUSY || p == SQLITE_LOCKED;
}

class Statement;

// One connection. Move-only; closes on destruction.
class Db {
 public:
  Db() = default;
  // Opens `target` (a path, or a file: URI when flags include SQLITE_OPEN_URI). `path` is the
  // plain file path used in error messages.
  Db(const std::string& target, int flags, std::string path);
  ~Db();
  Db(Db&& o) noexcept;
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  sqlite3* get() const { return db_; }
  explicit operator bool() const { return db_ != nullptr; }
  const std::string& path() const { return path_; }
  void close();

  // Runs constant SQL (DDL, pragmas; possibly several statements). No values: use prepare().
  void exec(std::string_view sql);
  Statement prepare(std::string_view sql);
  // First column of the first row of constant SQL (e.g. a pragma), or nullopt without rows.
  std::optional<std::string> query_text(std::string_view sql);
  std::int64_t query_int(std::string_view sql);

  std::int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
  int changes() const { return sqlite3_changes(db_); }
  bool in_transaction() const { return db_ && !sqlite3_get_autocommit(db_); }

  // Throws Error(errc_for(rc), "<what>: <sqlite message>", path).
  [[noreturn]] void fail(int rc, std::string_view what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// A prepared statement; bind() indices start at 1 like SQLite's.
class Statement {
 public:
  Statement() = default;
  Statement(const Db& db, sqlite3_stmt* st) : db_(&db), st_(st) {}
  ~Statement();
  Statement(Statement&& o) noexcept;
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, std::int64_t v);
  Statement& bind(int i, int v) { return bind(i, std::int64_t(v)); }
  Statement& bind(int i, bool v) { return bind(i, std::int64_t(v ? 1 : 0)); }
  Statement& bind(int i, double v);
  Statement& bind(int i, std::string_view text);
  Statement& bind(int i, const std::string& text) { return bind(i, std::string_view(text)); }
  Statement& bind(int i, const char* text) { return bind(i, std::string_view(text)); }
  Statement& bind(int i, Blob b);
  Statement& bind(int i, std::nullptr_t);
  // Binds a value read from another statement's column (copying rows between databases).
  Statement& bind(int i, const sqlite3_value* v);
  template <class T>
  Statement& bind(int i, const std::optional<T>& v) {
    return v ? bind(i, *v) : bind(i, nullptr);
  }
  // Binds the arguments to parameters 1..n.
  template <class... A>
  Statement& bind_all(const A&... a) {
    int i = 0;
    (bind(++i, a), ...);
    return *this;
  }

  // Advances: true when a row is available, false when done. Throws on error.
  bool step();
  // Steps to completion (for INSERT/UPDATE/DELETE); returns sqlite3_changes().
  int run();
  void reset();

  bool is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  std::int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
  int i32(int c) const { return sqlite3_column_int(st_, c); }
  double dbl(int c) const { return sqlite3_column_double(st_, c); }
  std::optional<double> opt_dbl(int c) const {
    return is_null(c) ? std::nullopt : std::optional<double>(dbl(c));
  }
  std::optional<std::int64_t> opt_i64(int c) const {
    return is_null(c) ? std::nullopt : std::optional<std::int64_t>(i64(c));
  }
  std::string text(int c) const;
  std::string blob(int c) const;  // the bytes of a BLOB (or TEXT) column
  int column_count() const { return sqlite3_column_count(st_); }
  sqlite3_stmt* get() const { return st_; }

 private:
  void check_bind(int rc, int i);
  const Db* db_ = nullptr;
  sqlite3_stmt* st_ = nullptr;
};

// How long the store keeps retrying a write lock that SQLite's own busy handler gave up on.
inline constexpr std::chrono::milliseconds kBusyTimeout{10'000};
inline constexpr std::chrono::milliseconds kRetryBudget{30'000};

// Runs `f` (returning an SQLite result code) until it returns something other than BUSY or
// LOCKED or kRetryBudget has passed, sleeping with a growing back-off in between.
int retry_busy(const std::function<int()>& f);

// A write transaction (BEGIN IMMEDIATE, so that the write lock is taken up front and two
// writers never deadlock upgrading read locks). Rolls back in the destructor unless commit()
// ran, so an exception between begin and commit leaves the database as it was.
class Transaction {
 public:
  explicit Transaction(Db& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Db& db_;
  bool active_ = false;
};

}  // namespace sage::tuner::sql
