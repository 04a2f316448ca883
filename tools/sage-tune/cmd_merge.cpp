// sage-tune merge A.db B.db ... -o C.db: the union of tune databases (e.g. shards of a sweep).
#include "sage/tuner/store_json.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct MergeCliOptions {
  std::vector<std::string> inputs;
  std::string output;
  bool force = false;
  bool json = false;
};

int run_merge(const MergeCliOptions& o) {
  tuner::MergeOptions mo;
  mo.overwrite = o.force;
  mo.warn = store::warn_stderr;
  tuner::MergeReport r = tuner::merge_stores(o.inputs, o.output, mo);
  if (o.json) {
    std::cout << nlohmann::json(r).dump(2) << "\n";
    return kOk;
  }
  std::cout << "merged " << r.inputs.size() << " database(s) into " << r.output << ": " << r.winners
            << " winners (" << r.winner_conflicts << " conflicts, " << r.winners_replaced << " replaced by a faster one), "
            << r.measurements << " measurements (" << r.duplicate_measurements << " duplicates skipped), " << r.kernels
            << " kernels, " << r.variants << " variants, " << r.devices << " devices\n";
  if (r.corrupt_kernels_skipped)
    std::cout << r.corrupt_kernels_skipped << " damaged kernel(s) skipped: the winners using them will be rebuilt\n";
  return kOk;
}

Registrar reg(
    "merge", "Merge tune databases into a new one (inputs are never modified)",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<MergeCliOptions>();
      sub.add_option("inputs", o->inputs, "input databases")->required();
      sub.add_option("-o,--output", o->output, "output database (must not exist unless --force)")->required();
      sub.add_flag("--force", o->force, "replace an existing output");
      sub.add_flag("--json", o->json, "print the report as JSON");
      return [o] { return run_merge(*o); };
    },
    60);

}  // namespace
}  // namespace sage::cli
