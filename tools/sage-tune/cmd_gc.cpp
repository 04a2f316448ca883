// sage-tune gc: drop kernels no winner uses (and quarantined cubins), then compact the file.
#include "sage/tuner/store_json.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct GcOptions {
  store::DbOption db;
  bool dry_run = false;
  bool json = false;
};

int run_gc(const GcOptions& o) {
  std::string path = o.db.resolve();
  tuner::Store s = o.dry_run ? store::open_for_read(path) : store::open_existing_for_write(path);
  tuner::GcReport r = s.gc(o.dry_run);
  if (o.json) {
    nlohmann::json j = r;
    j["db"] = path;
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::cout << (o.dry_run ? "would remove " : "removed ") << r.kernels_removed << " unused kernel(s) ("
            << store::bytes(r.kernel_bytes_removed) << " of cubins) and " << r.quarantine_removed
            << " quarantined entr" << (r.quarantine_removed == 1 ? "y" : "ies");
  if (!o.dry_run)
    std::cout << "; " << path << ": " << store::bytes(r.file_bytes_before) << " -> " << store::bytes(r.file_bytes_after)
              << " (" << store::bytes(r.file_bytes_before - r.file_bytes_after) << " freed)";
  std::cout << "\n";
  return kOk;
}

Registrar reg(
    "gc", "Drop kernels that no winner uses and quarantined cubins, then VACUUM",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<GcOptions>();
      sub.add_option("--db", o->db.path, "tune database (default: $SAGE_DB or ~/.cache/sage-tune/tune.db)");
      sub.add_flag("--dry-run", o->dry_run, "only report what would be removed");
      sub.add_flag("--json", o->json, "print the report as JSON");
      return [o] { return run_gc(*o); };
    },
    61);

}  // namespace
}  // namespace sage::cli
