// check_health: what `sage-tune doctor` and `sage-tune db check` report about a database,
// found without modifying it.
#include <filesystem>

#include "sage/common/sha256.h"
#include "sage/common/strings.h"
#include "store_impl.h"

namespace fs = std::filesystem;

namespace sage::tuner {

static std::int64_t count_if_table(sql::Db& db, const char* table) {
  auto st = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  st.bind(1, table);
  if (!st.step()) return 0;
  // The table name is one of our own constants, never data.
  return db.query_int(cat("SELECT count(*) FROM \"", table, "\""));
}

StoreHealth check_health(const std::string& path, bool full) {
  StoreHealth h;
  h.path = path;
  h.full = full;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    h.state = StoreHealth::State::missing;
    h.message = "no database file";
    return h;
  }
  h.file_bytes = std::int64_t(fs::file_size(path, ec));
  try {
    sql::Db db(path, SQLITE_OPEN_READONLY, path);
    sqlite3_busy_timeout(db.get(), int(sql::kBusyTimeout.count()));
    Identity id = identify(db);
    h.schema_version = id.schema_version;
    try {
      require_known(id, path);
    } catch (const Error& e) {
      h.state = id.schema_version > store_schema_version() ? StoreHealth::State::too_new
                                                           : StoreHealth::State::foreign;
      h.message = e.message();
      return h;
    }
    h.journal_mode = db.query_text("PRAGMA journal_mode").value_or("");
    std::string bad = integrity_problems(db, full);
    if (!bad.empty()) {
      h.state = StoreHealth::State::corrupt;
      h.message = (full ? "integrity_check: " : "quick_check: ") + bad;
      return h;
    }
    h.needs_migration = id.schema_version < store_schema_version();
    h.counts.devices = count_if_table(db, "devices");
    h.counts.variants = count_if_table(db, "variants");
    h.counts.kernels = count_if_table(db, "kernels");
    h.counts.measurements = count_if_table(db, "measurements");
    h.counts.winners = count_if_table(db, "winners");
    h.counts.quarantined = count_if_table(db, "quarantine");
    h.counts.merges = count_if_table(db, "provenance");
    if (full && id.schema_version >= 1) {
      auto st = db.prepare("SELECT cubin, cubin_sha256 FROM kernels");
      while (st.step())
        if (sha256_hex(st.blob(0)) != st.text(1)) ++h.corrupt_kernels;
    }
    h.state = StoreHealth::State::ok;
    if (h.corrupt_kernels > 0) {
      h.state = StoreHealth::State::corrupt;
      h.message = cat(h.corrupt_kernels, " cubin(s) fail their checksum (sage-tune db repair quarantines them)");
    } else if (id.user_tables == 0) {
      h.message = "empty file (the first writable open creates the schema)";
    } else if (h.needs_migration) {
      h.message = cat("schema version ", id.schema_version, " (the first writable open migrates it to ",
                      store_schema_version(), ")");
    }
  } catch (const Error& e) {
    h.state = e.code() == Errc::corrupt ? StoreHealth::State::corrupt : StoreHealth::State::unreadable;
    h.message = e.message();
  }
  return h;
}

}  // namespace sage::tuner
