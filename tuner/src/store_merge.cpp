// merge_stores: the union of several tune databases (e.g. the shards of a cluster sweep)
// into a new one; docs/store.md describes the rules.
#include <unistd.h>

#include <filesystem>
#include <map>

#include "sage/common/sha256.h"
#include "sage/common/strings.h"
#include "store_impl.h"

namespace fs = std::filesystem;

namespace sage::tuner {

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

void remove_db_files(const std::string& p) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(p + suffix, ec);
}

// Resolves two winners for one key. The lower median wins (the earlier one on equal
// medians); the runner-up is the fastest other variant among both winners and both
// runners-up; noise is the larger of the two, and tie is re-judged against it.
Winner resolve(const Winner& a, const Winner& b, bool& b_won) {
  b_won = b.median_us < a.median_us;
  Winner w = b_won ? b : a;
  std::map<std::string, double> best;
  auto offer = [&](const std::string& variant, std::optional<double> median) {
    if (variant.empty() || !median) return;
    auto it = best.find(variant);
    if (it == best.end() || *median < it->second) best[variant] = *median;
  };
  offer(a.variant, a.median_us);
  offer(b.variant, b.median_us);
  offer(a.runner_up, a.runner_up_median_us);
  offer(b.runner_up, b.runner_up_median_us);
  w.runner_up.clear();
  w.runner_up_median_us.reset();
  w.margin.reset();
  for (const auto& [variant, median] : best) {
    if (variant == w.variant) continue;
    if (!w.runner_up_median_us || median < *w.runner_up_median_us) {
      w.runner_up = variant;
      w.runner_up_median_us = median;
    }
  }
  w.noise = std::max(a.noise, b.noise);
  if (w.runner_up_median_us) {
    w.margin = *w.runner_up_median_us / w.median_us - 1.0;
    w.tie = *w.margin <= w.noise;
  } else {
    w.tie = false;
  }
  return w;
}

struct InputCounts {
  std::int64_t devices = 0, variants = 0, kernels = 0, measurements = 0, winners = 0, replaced = 0;
};

// Copies every row of `in` into `out` (one transaction), updating the report.
InputCounts merge_one(Store::Impl& out, Store& in_store, const std::string& input, int input_version,
                      MergeReport& rep, const MergeOptions& opts) {
  Store::Impl& in = StoreAccess::impl(in_store);
  InputCounts c;
  sql::Transaction t(out.db);

  {
    auto sel = in.db.prepare(
        "SELECT key, name, cc, sm_count, memory_bytes, driver_version, first_seen FROM devices");
    auto ins = out.db.prepare(
        "INSERT OR IGNORE INTO devices (key, name, cc, sm_count, memory_bytes, driver_version, first_seen) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)");
    while (sel.step()) {
      ins.reset();
      for (int i = 0; i < 7; ++i) ins.bind(i + 1, sqlite3_column_value(sel.get(), i));
      c.devices += ins.run();
    }
  }
  {
    auto sel = in.db.prepare("SELECT name, params_hash, params_json, generator_hash, created_at FROM variants");
    auto ins = out.db.prepare(
        "INSERT OR IGNORE INTO variants (name, params_hash, params_json, generator_hash, created_at) "
        "VALUES (?, ?, ?, ?, ?)");
    while (sel.step()) {
      ins.reset();
      for (int i = 0; i < 5; ++i) ins.bind(i + 1, sqlite3_column_value(sel.get(), i));
      c.variants += ins.run();
    }
  }
  {
    std::vector<std::string> hashes;
    {
      auto sel = in.db.prepare("SELECT hash FROM kernels ORDER BY hash");
      while (sel.step()) hashes.push_back(sel.text(0));
    }
    auto have = out.db.prepare("SELECT 1 FROM kernels WHERE hash = ?");
    for (const auto& h : hashes) {
      have.reset();
      have.bind(1, h);
      if (have.step()) continue;  // content-addressed: the copy we have is the same kernel
      try {
        auto k = in_store.kernel(h);  // verifies the checksum
        if (!k) continue;
        out.insert_kernel(*k, k->cubin_sha256);
        ++c.kernels;
      } catch (const Error& e) {
        if (e.code() != Errc::corrupt) throw;
        ++rep.corrupt_kernels_skipped;
        emit_warning(opts.warn, "merge: skipped a damaged kernel: " + std::string(e.what()));
      }
    }
  }
  {
    auto sel = in.db.prepare(cat("SELECT ", kMeasurementColumns, " FROM measurements ORDER BY id"));
    while (sel.step()) {
      Measurement m = measurement_from_row(sel, input);
      auto [id, inserted] = out.insert_measurement(m);
      if (inserted) ++c.measurements;
      else ++rep.duplicate_measurements;
    }
  }
  {
    auto sel = in.db.prepare(cat("SELECT ", kWinnerColumns, " FROM winners ORDER BY device, problem"));
    while (sel.step()) {
      Winner w = winner_from_row(sel, input);
      // Provenance: a winner tuned locally is attributed to the input it came from; one that
      // an earlier merge already attributed keeps its origin.
      if (w.source.empty() || w.source == "tune") w.source = input;
      auto existing = out.read_winner(w.key);
      if (!existing) {
        out.write_winner(w);
        ++c.winners;
        continue;
      }
      ++rep.winner_conflicts;
      bool b_won = false;
      Winner r = resolve(*existing, w, b_won);
      if (b_won) ++c.replaced;
      out.write_winner(r);
    }
  }
  auto prov = out.db.prepare(
      "INSERT INTO provenance (merged_at, input_path, input_schema_version, tool_version, devices, kernels, "
      "measurements, winners, winners_replaced) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  std::error_code ec;
  std::string abs = fs::absolute(input, ec).lexically_normal().string();
  prov.bind_all(now_unix(), abs.empty() ? input : abs, input_version, store_tool_version(), c.devices, c.kernels,
                c.measurements, c.winners, c.replaced);
  prov.run();
  t.commit();
  return c;
}

}  // namespace

MergeReport merge_stores(const std::vector<std::string>& inputs, const std::string& output,
                         const MergeOptions& opts) {
  if (inputs.empty()) throw Error(Errc::invalid_argument, "merge: no input databases");
  if (output.empty()) throw Error(Errc::invalid_argument, "merge: no output path");
  for (const auto& in : inputs) {
    if (!fs::exists(in)) throw Error(Errc::not_found, "merge input does not exist", in);
    if (same_file(in, output))
      throw Error(Errc::invalid_argument, "merge output is also an input (inputs are never modified)", output);
  }
  if (fs::exists(output) && !opts.overwrite)
    throw Error(Errc::invalid_argument, "merge output exists (pass --force to replace it)", output);

  MergeReport rep;
  rep.output = output;
  rep.inputs = inputs;
  // Built under a temporary name and renamed at the end: a failed merge leaves no half output.
  std::string tmp = cat(output, ".merge-", ::getpid());
  remove_db_files(tmp);
  try {
    {
      OpenOptions oo;
      oo.quick_check = false;
      oo.on_corrupt = OnCorrupt::fail;
      oo.warn = opts.warn;
      Store out(tmp, oo);
      Store::Impl& o = StoreAccess::impl(out);
      for (const auto& input : inputs) {
        OpenOptions io;
        io.read_only = true;
        io.on_corrupt = OnCorrupt::fail;
        io.warn = opts.warn;
        Store in(input, io);
        int version = in.report().migrated_from ? in.report().migrated_from : in.schema_version();
        InputCounts c = merge_one(o, in, input, version, rep, opts);
        rep.devices += c.devices;
        rep.variants += c.variants;
        rep.kernels += c.kernels;
        rep.measurements += c.measurements;
        rep.winners += c.winners;
        rep.winners_replaced += c.replaced;
      }
      // Leave WAL mode: the output is then one self-contained file that opens read-only even
      // where no -shm file can be created (an installed system DB). The first writable open
      // switches it back to WAL.
      int rc = sql::retry_busy([&] {
        return sqlite3_exec(o.db.get(), "PRAGMA journal_mode = DELETE", nullptr, nullptr, nullptr);
      });
      if (rc != SQLITE_OK) o.db.fail(rc, "PRAGMA journal_mode = DELETE");
    }  // closing the last connection removes the -wal and -shm files
    if (opts.overwrite) {
      std::error_code ec;
      for (const char* suffix : {"-wal", "-shm"}) fs::remove(output + suffix, ec);
    }
    std::error_code ec;
    fs::rename(tmp, output, ec);
    if (ec) throw Error(Errc::io_error, "cannot move the merged database into place: " + ec.message(), output);
  } catch (...) {
    remove_db_files(tmp);
    throw;
  }
  return rep;
}

}  // namespace sage::tuner
