// Opening a tune database: identification, integrity check, WAL setup, migrations, and the
// rebuild of a corrupt file (move aside, start fresh, salvage readable rows).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "sage/common/sha256.h"
#include "sage/common/strings.h"
#include "sage/tuner/store_schema.h"
#include "store_impl.h"

namespace fs = std::filesystem;

namespace sage::tuner {

std::int64_t now_unix() { return std::int64_t(std::time(nullptr)); }

void emit_warning(const std::function<void(const std::string&)>& warn, const std::string& msg) {
  if (warn) warn(msg);
  else std::fprintf(stderr, "sage-tune: warning: %s\n", msg.c_str());
}

int store_schema_version() { return store_migrations().back().to_version; }

// ---- identification and checks --------------------------------------------------------------

static int read_meta_version(sql::Db& db) {
  auto st = db.prepare("SELECT value FROM meta WHERE key = ?");
  st.bind(1, "schema_version");
  if (!st.step()) return 0;
  std::string v = st.text(0);
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    throw Error(Errc::corrupt, "meta.schema_version is not a number: '" + v + "'", db.path());
  }
}

Identity identify(sql::Db& db) {
  Identity id;
  id.application_id = int(db.query_int("PRAGMA application_id"));
  auto st = db.prepare(
      "SELECT count(*), coalesce(sum(name = 'meta'), 0) FROM sqlite_master "
      "WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'");
  st.step();
  id.user_tables = st.i32(0);
  id.has_meta = st.i32(1) > 0;
  if (id.has_meta) id.schema_version = read_meta_version(db);
  return id;
}

void require_known(const Identity& id, const std::string& path) {
  if (id.application_id != 0 && id.application_id != kStoreApplicationId) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", unsigned(id.application_id));
    throw Error(Errc::unsupported,
                std::string("not a sage-tune database (SQLite application_id ") + buf + ")", path);
  }
  if (!id.has_meta && id.user_tables > 0)
    throw Error(Errc::unsupported, "not a sage-tune database (SQLite file without a meta table)", path);
  if (id.schema_version > store_schema_version())
    throw Error(Errc::unsupported,
                cat("schema version ", id.schema_version, " is newer than this build understands (",
                    store_schema_version(), "); use a newer sage-tune"),
                path);
}

std::string integrity_problems(sql::Db& db, bool full) {
  // Up to 10 messages: enough to say what is wrong without flooding a log.
  auto st = db.prepare(full ? "PRAGMA integrity_check(10)" : "PRAGMA quick_check(10)");
  std::vector<std::string> msgs;
  while (st.step()) msgs.push_back(st.text(0));
  if (msgs.size() == 1 && msgs[0] == "ok") return {};
  return msgs.empty() ? std::string("integrity check returned nothing") : join(msgs, "; ");
}

int migrate(sql::Db& db, const std::string& path) {
  int found = -1;
  for (const Migration& m : store_migrations()) {
    sql::Transaction t(db);
    // Re-read inside the write transaction: another process may have migrated meanwhile.
    Identity id = identify(db);
    require_known(id, path);
    if (found < 0) found = id.schema_version;
    if (id.schema_version >= m.to_version) {
      t.commit();
      continue;
    }
    if (id.schema_version != m.to_version - 1)
      throw Error(Errc::internal, cat("migration to v", m.to_version, " found v", id.schema_version), path);
    db.exec(m.sql);
    if (m.to_version == 1) {
      db.exec(cat("PRAGMA application_id = ", kStoreApplicationId));
      auto ins = db.prepare("INSERT INTO meta (key, value) VALUES (?, ?), (?, ?)");
      ins.bind_all("created_by", store_tool_version(), "created_at", std::to_string(now_unix()));
      ins.run();
    }
    auto up = db.prepare(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    up.bind(1, std::to_string(m.to_version)).run();
    t.commit();
  }
  return found < 0 ? store_schema_version() : found;
}

std::string immutable_uri(const std::string& path) {
  std::string abs = fs::absolute(path).lexically_normal().string();
  std::string out = "file:";
  for (unsigned char c : abs) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += char(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", unsigned(c));
      out += buf;
    }
  }
  return out + "?immutable=1";
}

// ---- opening ----------------------------------------------------------------------------------

static const char* const kRepairHint =
    "; the database is damaged: 'sage-tune db repair --db PATH' moves it aside and rebuilds it";

void Store::Impl::require_writable(const char* what) const {
  if (read_only)
    throw Error(Errc::unsupported, std::string(what) + ": the database is open read-only", path);
}

void Store::Impl::open() {
  read_only = opts.read_only || opts.immutable;
  if (read_only) open_read_only();
  else open_read_write();
}

void Store::Impl::open_read_only() {
  if (!fs::exists(path))
    throw Error(Errc::not_found, "no tune database here (set SAGE_DB or pass --db)", path);
  int flags = SQLITE_OPEN_READONLY;
  std::string target = path;
  if (opts.immutable) {
    flags |= SQLITE_OPEN_URI;
    target = immutable_uri(path);
  }
  db = sql::Db(target, flags, path);
  sqlite3_busy_timeout(db.get(), int(sql::kBusyTimeout.count()));
  Identity id;
  try {
    id = identify(db);
    require_known(id, path);
    if (opts.quick_check) {
      std::string bad = integrity_problems(db, false);
      if (!bad.empty()) throw Error(Errc::corrupt, "integrity check failed: " + bad, path);
    }
  } catch (const Error& e) {
    db.close();
    if (e.code() == Errc::corrupt) throw Error(Errc::corrupt, e.message() + kRepairHint, path);
    throw;
  }
  version = id.schema_version;
  if (version < store_schema_version()) {
    // A file we may not write but whose schema is older: migrate a private in-memory copy so
    // that readers see the current layout. The file itself is left exactly as it was.
    sql::Db mem(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, path);
    sqlite3_backup* b = sqlite3_backup_init(mem.get(), "main", db.get(), "main");
    if (!b) mem.fail(sqlite3_errcode(mem.get()), "copy for in-memory migration");
    int rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) db.fail(rc, "copy for in-memory migration");
    db = std::move(mem);
    report.migrated_from = migrate(db, path);
    report.migrated_in_memory = true;
    version = store_schema_version();
  }
}

// Inode of `path`, or 0 when it cannot be stat'ed.
static ino_t inode_of(const std::string& path) {
  struct stat sb;
  return ::stat(path.c_str(), &sb) == 0 ? sb.st_ino : 0;
}

void Store::Impl::open_read_write() {
  bool existed = fs::exists(path);
  if (!existed && !opts.create)
    throw Error(Errc::not_found, "no tune database here (set SAGE_DB or pass --db)", path);
  if (!existed) {
    fs::path parent = fs::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec) throw Error(Errc::io_error, "cannot create directory: " + ec.message(), parent.string());
  }
  try {
    db = sql::Db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, path);
    ino_t ino = inode_of(path);
    sqlite3_busy_timeout(db.get(), int(sql::kBusyTimeout.count()));
    Identity id = identify(db);
    require_known(id, path);
    if (opts.quick_check && id.user_tables > 0) {
      std::string bad = integrity_problems(db, false);
      if (!bad.empty()) throw Error(Errc::corrupt, "integrity check failed: " + bad, path);
    }
    // WAL: readers never block the writer and a killed writer leaves only an uncommitted
    // WAL tail, which the next open discards. The mode is stored in the file, so only the
    // first open of a new file changes it (and may have to wait for other openers).
    int rc = sql::retry_busy([&] {
      return sqlite3_exec(db.get(), "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
    });
    if (rc != SQLITE_OK) db.fail(rc, "PRAGMA journal_mode = WAL");
    // NORMAL in WAL mode: a commit survives a process crash; only an OS crash or power loss
    // may lose the last transactions, never corrupt the file.
    db.exec("PRAGMA synchronous = NORMAL");
    db.exec("PRAGMA foreign_keys = ON");
    int found = migrate(db, path);
    report.created = !existed || found == 0;
    if (found > 0 && found < store_schema_version()) report.migrated_from = found;
    version = store_schema_version();
    if (inode_of(path) != ino) {
      // Another process rebuilt the file between our open and now: reopen the new one.
      db.close();
      open_read_write();
    }
  } catch (const Error& e) {
    if (e.code() != Errc::corrupt || opts.on_corrupt != OnCorrupt::rebuild) {
      db.close();
      if (e.code() == Errc::corrupt) throw Error(Errc::corrupt, e.message() + kRepairHint, path);
      throw;
    }
    rebuild(e.message());
  }
}

// A name for the corrupt copy that does not exist yet: <path>.corrupt-20250101T120000Z[-N].
static std::string aside_name(const std::string& path) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::string base = path + ".corrupt-" + stamp;
  std::string name = base;
  for (int i = 1; fs::exists(name) || fs::exists(name + "-wal"); ++i) name = cat(base, "-", i);
  return name;
}

// Serializes rebuilds of one file across processes (flock on <path>.rebuild-lock), so that
// two processes finding the same corruption do not move each other's fresh database aside.
class RebuildLock {
 public:
  explicit RebuildLock(const std::string& path) {
    fd_ = ::open((path + ".rebuild-lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~RebuildLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }

 private:
  int fd_ = -1;
};

void Store::Impl::rebuild(const std::string& why) {
  ino_t bad_ino = inode_of(path);
  db.close();
  RebuildLock lock(path);
  if (inode_of(path) != bad_ino) {
    // Someone else already replaced the file while we waited for the lock.
    open_read_write();
    return;
  }
  std::string moved = aside_name(path);
  std::error_code ec;
  fs::rename(path, moved, ec);
  if (ec) throw Error(Errc::io_error, "corrupt database (" + why + ") could not be moved aside: " + ec.message(), path);
  // The WAL belongs to the corrupt file: left in place it would be replayed into the new one.
  if (fs::exists(path + "-wal")) fs::rename(path + "-wal", moved + "-wal", ec);
  fs::remove(path + "-shm", ec);

  OpenOptions fresh = opts;
  fresh.on_corrupt = OnCorrupt::fail;
  fresh.create = true;
  OpenOptions saved = opts;
  opts = fresh;
  try {
    open_read_write();
  } catch (...) {
    opts = saved;
    throw;
  }
  opts = saved;
  report.rebuilt = true;
  report.created = true;
  report.moved_to = moved;
  report.corruption = why;
  warn(cat("database ", path, " is corrupt (", why, "); moved it to ", moved, " and started a new one"));
  if (salvage_from(moved))
    warn(cat("salvaged ", report.salvaged_rows, " rows from ", moved, " into ", path, "; ", report.dropped_rows,
             " unreadable or damaged rows dropped"));
}

bool Store::Impl::salvage_from(const std::string& moved) {
  sql::Db old;
  try {
    old = sql::Db(moved, SQLITE_OPEN_READONLY, moved);
    // writable_schema makes SQLite read a file shorter than its header says (truncated)
    // up to where it ends, instead of refusing it; the connection stays read-only.
    old.exec("PRAGMA writable_schema = ON");
    Identity id = identify(old);
    if (id.schema_version != store_schema_version()) {
      warn(cat("salvage skipped: ", moved, " has schema version ", id.schema_version, ", not ",
               store_schema_version()));
      return false;
    }
  } catch (const Error& e) {
    // Typical for a file that is not a database at all: nothing can be read from it.
    warn("nothing salvaged from " + moved + ": " + e.message());
    return false;
  }

  // Parents before children, so that foreign keys (measurements/winners -> devices) hold.
  static const char* const kTables[] = {"devices", "variants", "kernels", "measurements",
                                        "winners", "quarantine", "provenance"};
  sql::Transaction t(db);
  for (const char* table : kTables) {
    std::vector<std::string> cols;
    {
      auto st = db.prepare("SELECT name FROM pragma_table_info(?)");
      st.bind(1, table);
      while (st.step()) cols.push_back(st.text(0));
    }
    std::vector<std::string> quoted;
    for (auto& c : cols) quoted.push_back("\"" + c + "\"");
    std::string collist = join(quoted, ", ");
    std::vector<std::string> marks(cols.size(), "?");
    // Identifiers come from our own schema (never from data); values are bound.
    auto ins = db.prepare(cat("INSERT OR IGNORE INTO \"", table, "\" (", collist, ") VALUES (", join(marks, ", "), ")"));
    int cubin_col = -1, sha_col = -1;
    if (std::string(table) == "kernels")
      for (std::size_t i = 0; i < cols.size(); ++i) {
        if (cols[i] == "cubin") cubin_col = int(i);
        if (cols[i] == "cubin_sha256") sha_col = int(i);
      }

    // Row ids, scanning forward until a damaged page stops the scan, then backward to reach
    // the rows after the damage.
    std::vector<std::int64_t> ids;
    bool scan_failed = false;
    for (const char* order : {"ASC", "DESC"}) {
      try {
        auto scan = old.prepare(cat("SELECT rowid FROM \"", table, "\" ORDER BY rowid ", order));
        while (scan.step()) ids.push_back(scan.i64(0));
      } catch (const Error&) {
        scan_failed = true;
      }
    }
    // Rows on a damaged page cannot be counted; count the damaged place once.
    if (scan_failed) ++report.dropped_rows;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

    for (std::int64_t rowid : ids) {
      try {
        auto sel = old.prepare(cat("SELECT ", collist, " FROM \"", table, "\" WHERE rowid = ?"));
        sel.bind(1, rowid);
        if (!sel.step()) continue;
        if (cubin_col >= 0 && sha_col >= 0 && sha256_hex(sel.blob(cubin_col)) != sel.text(sha_col)) {
          ++report.dropped_rows;
          continue;
        }
        ins.reset();
        for (int i = 0; i < int(cols.size()); ++i) ins.bind(i + 1, sqlite3_column_value(sel.get(), i));
        ins.run();
        report.salvaged_rows += db.changes();
      } catch (const Error&) {
        ++report.dropped_rows;
      }
    }
  }
  t.commit();
  return true;
}

}  // namespace sage::tuner
