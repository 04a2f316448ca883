// sage-tune list: the winners of a tune database.
#include "sage/tuner/store_json.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct ListOptions {
  store::DbOption db;
  std::string device, problem;
  bool json = false;
};

int run_list(const ListOptions& o) {
  std::string path = o.db.resolve();
  tuner::Store s = store::open_for_read(path, o.db.is_system());
  auto winners = s.winners({o.device, o.problem});
  if (o.json) {
    nlohmann::json j = {{"db", path}, {"winners", winners}};
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  if (winners.empty()) {
    std::cout << "no winners in " << path
              << (o.device.empty() && o.problem.empty() ? "" : " matching the filters") << "\n";
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : winners) {
    std::string margin = store::percent(w.margin);
    if (w.tie) margin += " (tie)";
    rows.push_back({store::device_label(w.key.device), w.key.problem.str(), w.variant, store::fixed(w.tops, 1),
                    store::fixed(w.median_us, 1), margin, w.key.nvrtc_version});
  }
  store::print_table(std::cout, {"DEVICE", "PROBLEM", "VARIANT", "TOPS", "MEDIAN_US", "MARGIN", "NVRTC"}, rows);
  return kOk;
}

Registrar reg(
    "list", "List the winners of a tune database (device, problem, variant, TOPS, median, margin)",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<ListOptions>();
      o->db.add(sub);
      sub.add_option("--device", o->device, "only devices whose key contains this text");
      sub.add_option("--problem", o->problem, "only problem keys containing this text");
      sub.add_flag("--json", o->json, "print JSON");
      return [o] { return run_list(*o); };
    },
    50);

}  // namespace
}  // namespace sage::cli
