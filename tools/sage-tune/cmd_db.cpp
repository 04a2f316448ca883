// sage-tune db check|repair|migrate|path: health and maintenance of the tune databases.
#include <filesystem>

#include "sage/tuner/store_json.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct DbCliOptions {
  store::DbOption db;
  bool full = false;
  bool json = false;
};

int exit_code_for_health(const tuner::StoreHealth& h) {
  using S = tuner::StoreHealth::State;
  switch (h.state) {
    case S::ok: return kOk;
    case S::missing: return kNotFound;
    case S::corrupt:
    case S::unreadable: return kIoError;
    case S::too_new:
    case S::foreign: return kUnsupported;
  }
  return kFailure;
}

int run_check(const DbCliOptions& o) {
  std::string path = o.db.resolve();
  tuner::StoreHealth h = tuner::check_health(path, o.full);
  int rc = exit_code_for_health(h);
  if (o.json) {
    std::cout << nlohmann::json(h).dump(2) << "\n";
  } else {
    std::cout << path << ": " << tuner::to_string(h.state);
    if (h.state != tuner::StoreHealth::State::missing)
      std::cout << " (schema v" << h.schema_version << ", journal " << (h.journal_mode.empty() ? "?" : h.journal_mode)
                << ", " << store::bytes(h.file_bytes) << (h.full ? ", full check" : ", quick check") << ")";
    std::cout << "\n";
    if (!h.message.empty()) std::cout << "  " << h.message << "\n";
    if (h.state == tuner::StoreHealth::State::ok)
      std::cout << "  devices " << h.counts.devices << ", variants " << h.counts.variants << ", kernels "
                << h.counts.kernels << ", measurements " << h.counts.measurements << ", winners " << h.counts.winners
                << ", quarantined " << h.counts.quarantined << ", merges " << h.counts.merges << "\n";
  }
  if (rc != kOk) std::cerr << "sage-tune: error: " << path << ": " << tuner::to_string(h.state)
                           << (h.message.empty() ? "" : ": " + h.message) << "\n";
  return rc;
}

int run_repair(const DbCliOptions& o) {
  std::string path = o.db.resolve();
  tuner::OpenOptions opts;
  opts.create = false;
  opts.on_corrupt = tuner::OnCorrupt::rebuild;
  std::vector<std::string> notes;
  opts.warn = [&](const std::string& m) { notes.push_back(m); };
  tuner::Store s(path, opts);
  std::vector<std::string> bad = s.verify_kernels();
  const tuner::OpenReport& r = s.report();
  if (o.json) {
    nlohmann::json j = {{"db", path}, {"open", r}, {"quarantined_now", bad}, {"notes", notes},
                        {"counts", s.counts()}};
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  if (r.rebuilt)
    std::cout << path << ": was corrupt (" << r.corruption << ")\n  moved to " << r.moved_to << "; salvaged "
              << r.salvaged_rows << " rows, dropped " << r.dropped_rows << "\n";
  else
    std::cout << path << ": file intact\n";
  if (bad.empty()) {
    std::cout << "  all cubins match their checksums\n";
  } else {
    std::cout << "  quarantined " << bad.size() << " damaged kernel(s) (recompiled on next use):\n";
    for (const auto& h : bad) std::cout << "    " << h << "\n";
  }
  return kOk;
}

int run_migrate(const DbCliOptions& o) {
  std::string path = o.db.resolve();
  tuner::Store s = store::open_existing_for_write(path);
  const tuner::OpenReport& r = s.report();
  if (o.json) {
    nlohmann::json j = {{"db", path}, {"migrated_from", r.migrated_from}, {"schema_version", s.schema_version()}};
    std::cout << j.dump(2) << "\n";
  } else if (r.migrated_from) {
    std::cout << path << ": migrated schema v" << r.migrated_from << " -> v" << s.schema_version() << "\n";
  } else {
    std::cout << path << ": already at schema v" << s.schema_version() << "\n";
  }
  return kOk;
}

int run_path(const DbCliOptions& o) {
  std::string user = tuner::default_user_db_path(), sys = tuner::default_system_db_path();
  bool ue = std::filesystem::exists(user), se = std::filesystem::exists(sys);
  if (o.json) {
    nlohmann::json j = {{"user", {{"path", user}, {"exists", ue}}}, {"system", {{"path", sys}, {"exists", se}}}};
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::cout << "user    " << user << (ue ? "" : "  (not created yet)") << "\n"
            << "system  " << sys << (se ? "" : "  (none installed)") << "\n";
  return kOk;
}

Registrar reg(
    "db", "Tune database health and maintenance: check, repair, migrate, path",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<DbCliOptions>();
      sub.require_subcommand(1);
      CLI::App* check = sub.add_subcommand("check", "Check a database (read-only); exit code says the state");
      o->db.add(*check);
      check->add_flag("--full", o->full, "full integrity_check and every cubin checksum (slower)");
      check->add_flag("--json", o->json, "print JSON");
      CLI::App* repair =
          sub.add_subcommand("repair", "Rebuild a corrupt database (salvaging readable rows) and quarantine damaged cubins");
      repair->add_option("--db", o->db.path, "tune database (default: $SAGE_DB or ~/.cache/sage-tune/tune.db)");
      repair->add_flag("--json", o->json, "print JSON");
      CLI::App* migrate = sub.add_subcommand("migrate", "Migrate a database to this build's schema");
      migrate->add_option("--db", o->db.path, "tune database (default: $SAGE_DB or ~/.cache/sage-tune/tune.db)");
      migrate->add_flag("--json", o->json, "print JSON");
      CLI::App* path = sub.add_subcommand("path", "Print the user and system database paths");
      path->add_flag("--json", o->json, "print JSON");
      return [o, check, repair, migrate, path]() -> int {
        if (check->parsed()) return run_check(*o);
        if (repair->parsed()) return run_repair(*o);
        if (migrate->parsed()) return run_migrate(*o);
        if (path->parsed()) return run_path(*o);
        return kUsage;
      };
    },
    80);

}  // namespace
}  // namespace sage::cli
