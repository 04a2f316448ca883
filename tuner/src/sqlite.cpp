#include "sqlite.h"

#include <thread>

#include "sage/common/strings.h"

namespace sage::tuner::sql {

Errc errc_for(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return Errc::corrupt;
    default: return Errc::io_error;
  }
}

Db::Db(const std::string& target, int flags, std::string path) : path_(std::move(path)) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(target.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    throw Error(errc_for(rc), "cannot open database: " + msg, path_);
  }
  db_ = db;
  // Extended codes tell SQLITE_CORRUPT_* and SQLITE_BUSY_* apart in messages.
  sqlite3_extended_result_codes(db_, 1);
}

Db::~Db() { close(); }

Db::Db(Db&& o) noexcept : db_(o.db_), path_(std::move(o.path_)) { o.db_ = nullptr; }

Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    close();
    db_ = o.db_;
    path_ = std::move(o.path_);
    o.db_ = nullptr;
  }
  return *this;
}

void Db::close() {
  // close_v2 defers the close until outstanding statements are finalized; statements are
  // RAII-owned, so by the time a Db is destroyed none should remain.
  if (db_) sqlite3_close_v2(db_);
  db_ = nullptr;
}

void Db::fail(int rc, std::string_view what) const {
  std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  std::string code = sqlite3_errstr(rc);
  std::string text = std::string(what) + ": " + msg;
  if (code != msg) text += " (" + code + ")";
  throw Error(errc_for(rc), text, path_);
}

void Db::exec(std::string_view sql) {
  std::string s(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (err) sqlite3_free(err);
  if (rc != SQLITE_OK) fail(rc, cat("'", s.substr(0, 60), s.size() > 60 ? "...'" : "'"));
}

Statement Db::prepare(std::string_view sql) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), int(sql.size()), &st, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(st);
    fail(rc, cat("prepare '", sql.substr(0, 60), sql.size() > 60 ? "...'" : "'"));
  }
  return Statement(*this, st);
}

std::optional<std::string> Db::query_text(std::string_view sql) {
  Statement st = prepare(sql);
  if (!st.step()) return std::nullopt;
  return st.text(0);
}

std::int64_t Db::query_int(std::string_view sql) {
  Statement st = prepare(sql);
  if (!st.step()) return 0;
  return st.i64(0);
}

Statement::~Statement() {
  if (st_) sqlite3_finalize(st_);
}

Statement::Statement(Statement&& o) noexcept : db_(o.db_), st_(o.st_) { o.st_ = nullptr; }

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    if (st_) sqlite3_finalize(st_);
    db_ = o.db_;
    st_ = o.st_;
    o.st_ = nullptr;
  }
  return *this;
}

void Statement::check_bind(int rc, int i) {
  if (rc != SQLITE_OK) db_->fail(rc, cat("bind parameter ", i));
}

Statement& Statement::bind(int i, std::int64_t v) {
  check_bind(sqlite3_bind_int64(st_, i, v), i);
  return *this;
}
Statement& Statement::bind(int i, double v) {
  check_bind(sqlite3_bind_double(st_, i, v), i);
  return *this;
}
Statement& Statement::bind(int i, std::string_view text) {
  check_bind(sqlite3_bind_text64(st_, i, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8), i);
  return *this;
}
Statement& Statement::bind(int i, Blob b) {
  // A zero-length blob must still be a BLOB, not NULL: sqlite3_bind_zeroblob does that.
  int rc = b.size == 0 ? sqlite3_bind_zeroblob(st_, i, 0)
                       : sqlite3_bind_blob64(st_, i, b.data, b.size, SQLITE_TRANSIENT);
  check_bind(rc, i);
  return *this;
}
Statement& Statement::bind(int i, std::nullptr_t) {
  check_bind(sqlite3_bind_null(st_, i), i);
  return *this;
}

Statement& Statement::bind(int i, const sqlite3_value* v) {
  check_bind(sqlite3_bind_value(st_, i, v), i);
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // Reset so the statement can be reused, but report the step's own code and message.
  std::string sql = sqlite3_sql(st_) ? sqlite3_sql(st_) : "";
  if (sql.size() > 60) sql = sql.substr(0, 57) + "...";
  sqlite3_reset(st_);
  db_->fail(rc, "'" + sql + "'");
}

int Statement::run() {
  while (step()) {
  }
  return sqlite3_changes(sqlite3_db_handle(st_));
}

void Statement::reset() {
  sqlite3_reset(st_);
  sqlite3_clear_bindings(st_);
}

std::string Statement::text(int c) const {
  const unsigned char* p = sqlite3_column_text(st_, c);
  int n = sqlite3_column_bytes(st_, c);
  return p ? std::string(reinterpret_cast<const char*>(p), std::size_t(n)) : std::string();
}

std::string Statement::blob(int c) const {
  const void* p = sqlite3_column_blob(st_, c);
  int n = sqlite3_column_bytes(st_, c);
  return p ? std::string(static_cast<const char*>(p), std::size_t(n)) : std::string();
}

int retry_busy(const std::function<int()>& f) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + kRetryBudget;
  auto pause = std::chrono::milliseconds(2);
  while (true) {
    int rc = f();
    if (!is_busy(rc) || clock::now() >= deadline) return rc;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

Transaction::Transaction(Db& db) : db_(db) {
  int rc = retry_busy([&] { return sqlite3_exec(db_.get(), "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); });
  if (rc != SQLITE_OK) {
    if (is_busy(rc))
      throw Error(Errc::io_error,
                  cat("database stayed locked by another process for ",
                      (kBusyTimeout + kRetryBudget).count() / 1000, " s"),
                  db_.path());
    db_.fail(rc, "BEGIN IMMEDIATE");
  }
  active_ = true;
}

Transaction::~Transaction() {
  // Rollback cannot usefully report an error from a destructor; if it fails SQLite has
  // already rolled back (the usual reason is that an I/O error aborted the transaction).
  if (active_ && db_.get() && db_.in_transaction())
    sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  int rc = retry_busy([&] { return sqlite3_exec(db_.get(), "COMMIT", nullptr, nullptr, nullptr); });
  if (rc != SQLITE_OK) db_.fail(rc, "COMMIT");
  active_ = false;
}

}  // namespace sage::tuner::sql
