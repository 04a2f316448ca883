// The tune store's rows: devices, variants, kernels (checksummed cubins), measurements,
// winners; quarantine of damaged cubins; gc.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "sage/common/sha256.h"
#include "sage/common/strings.h"
#include "store_impl.h"

namespace fs = std::filesystem;

namespace sage::tuner {

namespace {

bool is_hex64(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

void require_field(bool ok, const std::string& what) {
  if (!ok) throw Error(Errc::invalid_argument, what);
}

// Keys read back from a row: a malformed one means the file was altered behind our back.
DeviceFingerprint device_from_row(const std::string& key, const std::string& path) {
  try {
    return DeviceFingerprint::parse(key);
  } catch (const Error& e) {
    throw Error(Errc::corrupt, "stored device key is malformed: " + e.message(), path);
  }
}
ProblemKey problem_from_row(const std::string& key, const std::string& path) {
  try {
    return ProblemKey::parse(key);
  } catch (const Error& e) {
    throw Error(Errc::corrupt, "stored problem key is malformed: " + e.message(), path);
  }
}

void validate_key(const WinnerKey& k) {
  k.device.validate();
  k.problem.validate();
  require_field(!k.generator_hash.empty(), "winner key: empty generator_hash");
  require_field(!k.nvrtc_version.empty(), "winner key: empty nvrtc_version");
}

std::int64_t file_size_or_zero(const std::string& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : std::int64_t(n);
}

}  // namespace

// ---- row readers ----------------------------------------------------------------------------

const char* const kWinnerColumns =
    "device, problem, generator_hash, nvrtc_version, variant, kernel_hash, median_us, tops, runner_up, "
    "runner_up_median_us, margin, noise, tie, source, decided_at";

Winner winner_from_row(const sql::Statement& st, const std::string& path) {
  Winner w;
  w.key.device = device_from_row(st.text(0), path);
  w.key.problem = problem_from_row(st.text(1), path);
  w.key.generator_hash = st.text(2);
  w.key.nvrtc_version = st.text(3);
  w.variant = st.text(4);
  w.kernel_hash = st.text(5);
  w.median_us = st.dbl(6);
  w.tops = st.opt_dbl(7);
  w.runner_up = st.text(8);
  w.runner_up_median_us = st.opt_dbl(9);
  w.margin = st.opt_dbl(10);
  w.noise = st.dbl(11);
  w.tie = st.i64(12) != 0;
  w.source = st.text(13);
  w.decided_at = st.i64(14);
  return w;
}

const char* const kMeasurementColumns =
    "id, uid, device, problem, variant, kernel_hash, generator_hash, nvrtc_version, status, detail, "
    "cos, rel_l1, rmse, cos_outlier, rel_l1_outlier, rmse_outlier, median_us, p10_us, p90_us, mad_us, "
    "samples, tops, tool_version, seed, seed_outlier, created_at";

Measurement measurement_from_row(const sql::Statement& st, const std::string& path) {
  Measurement m;
  m.id = st.i64(0);
  m.uid = st.text(1);
  m.device = device_from_row(st.text(2), path);
  m.problem = problem_from_row(st.text(3), path);
  m.variant = st.text(4);
  m.kernel_hash = st.text(5);
  m.generator_hash = st.text(6);
  m.nvrtc_version = st.text(7);
  try {
    m.status = parse_measurement_status(st.text(8));
  } catch (const Error& e) {
    throw Error(Errc::corrupt, e.message(), path);
  }
  m.detail = st.text(9);
  if (!st.is_null(10)) m.gaussian = Accuracy{st.dbl(10), st.dbl(11), st.dbl(12)};
  if (!st.is_null(13)) m.outlier = Accuracy{st.dbl(13), st.dbl(14), st.dbl(15)};
  m.median_us = st.opt_dbl(16);
  m.p10_us = st.opt_dbl(17);
  m.p90_us = st.opt_dbl(18);
  m.mad_us = st.opt_dbl(19);
  m.samples = st.i64(20);
  m.tops = st.opt_dbl(21);
  m.tool_version = st.text(22);
  m.seed = st.opt_i64(23);
  m.seed_outlier = st.opt_i64(24);
  m.created_at = st.i64(25);
  return m;
}

// ---- Store ------------------------------------------------------------------------------------

Store::Impl& StoreAccess::impl(Store& s) { return *s.impl_; }

Store::Store(const std::string& path, OpenOptions opts) : impl_(std::make_unique<Impl>()) {
  if (path.empty()) throw Error(Errc::invalid_argument, "empty database path");
  impl_->path = path;
  impl_->opts = std::move(opts);
  impl_->open();
}

Store::~Store() = default;
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

const std::string& Store::path() const { return impl_->path; }
bool Store::read_only() const { return impl_->read_only; }
const OpenReport& Store::report() const { return impl_->report; }
int Store::schema_version() const { return impl_->version; }

// ---- Impl row writers ---------------------------------------------------------------------------

void Store::Impl::upsert_device(const DeviceFingerprint& d) {
  auto st = db.prepare(
      "INSERT OR IGNORE INTO devices (key, name, cc, sm_count, memory_bytes, driver_version, first_seen) "
      "VALUES (?, ?, ?, ?, ?, ?, ?)");
  st.bind_all(d.key(), d.name, d.cc, d.sm_count, d.memory_bytes, d.driver_version, now_unix());
  st.run();
}

std::pair<std::int64_t, bool> Store::Impl::insert_measurement(const Measurement& m) {
  auto st = db.prepare(
      "INSERT INTO measurements (uid, device, problem, variant, kernel_hash, generator_hash, nvrtc_version, "
      "status, detail, cos, rel_l1, rmse, cos_outlier, rel_l1_outlier, rmse_outlier, median_us, p10_us, "
      "p90_us, mad_us, samples, tops, tool_version, seed, seed_outlier, created_at) "
      "VALUES (coalesce(?, lower(hex(randomblob(16)))), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING");
  auto acc = [](const std::optional<Accuracy>& a, double Accuracy::*f) {
    return a ? std::optional<double>((*a).*f) : std::nullopt;
  };
  st.bind_all(m.uid.empty() ? std::optional<std::string>() : std::optional<std::string>(m.uid), m.device.key(),
              m.problem.str(), m.variant,
              m.kernel_hash.empty() ? std::optional<std::string>() : std::optional<std::string>(m.kernel_hash),
              m.generator_hash, m.nvrtc_version, to_string(m.status), m.detail, acc(m.gaussian, &Accuracy::cos),
              acc(m.gaussian, &Accuracy::rel_l1), acc(m.gaussian, &Accuracy::rmse), acc(m.outlier, &Accuracy::cos),
              acc(m.outlier, &Accuracy::rel_l1), acc(m.outlier, &Accuracy::rmse), m.median_us, m.p10_us, m.p90_us,
              m.mad_us, m.samples, m.tops, m.tool_version.empty() ? store_tool_version() : m.tool_version, m.seed,
              m.seed_outlier, m.created_at ? m.created_at : now_unix());
  if (st.run() > 0) return {db.last_insert_rowid(), true};
  auto q = db.prepare("SELECT id FROM measurements WHERE uid = ?");
  q.bind(1, m.uid);
  q.step();
  return {q.i64(0), false};
}

void Store::Impl::write_winner(const Winner& w) {
  auto st = db.prepare(
      "INSERT OR REPLACE INTO winners (device, problem, generator_hash, nvrtc_version, variant, kernel_hash, "
      "median_us, tops, runner_up, runner_up_median_us, margin, noise, tie, source, decided_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  st.bind_all(w.key.device.key(), w.key.problem.str(), w.key.generator_hash, w.key.nvrtc_version, w.variant,
              w.kernel_hash, w.median_us, w.tops, w.runner_up, w.runner_up_median_us, w.margin, w.noise, w.tie,
              w.source.empty() ? std::string("tune") : w.source, w.decided_at ? w.decided_at : now_unix());
  st.run();
}

std::optional<Winner> Store::Impl::read_winner(const WinnerKey& key) {
  auto st = db.prepare(cat("SELECT ", kWinnerColumns,
                           " FROM winners WHERE device = ? AND problem = ? AND generator_hash = ? AND "
                           "nvrtc_version = ?"));
  st.bind_all(key.device.key(), key.problem.str(), key.generator_hash, key.nvrtc_version);
  if (!st.step()) return std::nullopt;
  return winner_from_row(st, path);
}

void Store::Impl::insert_kernel(const KernelRecord& k, const std::string& sha) {
  auto st = db.prepare(
      "INSERT INTO kernels (hash, variant, arch, nvrtc_version, generator_hash, cubin, cubin_sha256, registers, "
      "spill_stores, spill_loads, smem_bytes, compile_ms, report_json, created_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
      "ON CONFLICT (hash) DO UPDATE SET variant = excluded.variant, arch = excluded.arch, "
      "nvrtc_version = excluded.nvrtc_version, generator_hash = excluded.generator_hash, cubin = excluded.cubin, "
      "cubin_sha256 = excluded.cubin_sha256, registers = excluded.registers, spill_stores = excluded.spill_stores, "
      "spill_loads = excluded.spill_loads, smem_bytes = excluded.smem_bytes, compile_ms = excluded.compile_ms, "
      "report_json = excluded.report_json, created_at = excluded.created_at");
  st.bind_all(k.hash, k.variant, k.arch, k.nvrtc_version, k.generator_hash, sql::Blob{k.cubin.data(), k.cubin.size()},
              sha, k.stats.registers, k.stats.spill_stores, k.stats.spill_loads, k.stats.smem_bytes,
              k.stats.compile_ms, k.stats.report_json.empty() ? std::string("[]") : k.stats.report_json,
              k.created_at ? k.created_at : now_unix());
  st.run();
}

void Store::Impl::quarantine(const std::string& hash, const std::string& stored, const std::string& actual,
                             const std::string& reason) {
  sql::Transaction t(db);
  auto ins = db.prepare(
      "INSERT INTO quarantine (hash, variant, arch, nvrtc_version, generator_hash, cubin, stored_sha256, "
      "actual_sha256, reason, detected_at) "
      "SELECT hash, variant, arch, nvrtc_version, generator_hash, cubin, ?, ?, ?, ? FROM kernels WHERE hash = ?");
  ins.bind_all(stored, actual, reason, now_unix(), hash);
  ins.run();
  auto del = db.prepare("DELETE FROM kernels WHERE hash = ?");
  del.bind(1, hash);
  del.run();
  t.commit();
}

// ---- writers -------------------------------------------------------------------------------------

void Store::record_device(const DeviceFingerprint& d) {
  d.validate();
  std::lock_guard lk(impl_->mu);
  impl_->require_writable("record_device");
  sql::Transaction t(impl_->db);
  impl_->upsert_device(d);
  t.commit();
}

void Store::record_variant(const VariantRecord& v) {
  require_field(!v.name.empty(), "variant record: empty name");
  require_field(!v.params_hash.empty(), "variant '" + v.name + "': empty params_hash");
  require_field(!v.generator_hash.empty(), "variant '" + v.name + "': empty generator_hash");
  std::lock_guard lk(impl_->mu);
  impl_->require_writable("record_variant");
  sql::Transaction t(impl_->db);
  auto st = impl_->db.prepare(
      "INSERT INTO variants (name, params_hash, params_json, generator_hash, created_at) VALUES (?, ?, ?, ?, ?) "
      "ON CONFLICT (name, params_hash) DO UPDATE SET params_json = excluded.params_json, "
      "generator_hash = excluded.generator_hash");
  st.bind_all(v.name, v.params_hash, v.params_json.empty() ? std::string("{}") : v.params_json, v.generator_hash,
              v.created_at ? v.created_at : now_unix());
  st.run();
  t.commit();
}

void Store::record_kernel(const KernelRecord& k) {
  require_field(is_hex64(k.hash), "kernel record: hash must be 64 lowercase hex digits, got '" + k.hash + "'");
  require_field(!k.variant.empty(), "kernel " + k.hash + ": empty variant");
  require_field(starts_with(k.arch, "sm_") && k.arch.size() > 3, "kernel " + k.hash + ": arch must look like sm_90a, got '" + k.arch + "'");
  require_field(!k.nvrtc_version.empty(), "kernel " + k.hash + ": empty nvrtc_version");
  require_field(!k.generator_hash.empty(), "kernel " + k.hash + ": empty generator_hash");
  require_field(!k.cubin.empty(), "kernel " + k.hash + ": empty cubin");
  std::string sha = sha256_hex(k.cubin);
  std::lock_guard lk(impl_->mu);
  impl_->require_writable("record_kernel");
  sql::Transaction t(impl_->db);
  impl_->insert_kernel(k, sha);
  t.commit();
}

static void validate_measurement(const Measurement& m) {
  m.device.validate();
  m.problem.validate();
  std::string who = "measurement of '" + m.variant + "' on " + m.problem.str();
  require_field(!m.variant.empty(), "measurement: empty variant");
  require_field(!m.generator_hash.empty(), who + ": empty generator_hash");
  require_field(!m.nvrtc_version.empty(), who + ": empty nvrtc_version");
  require_field(m.kernel_hash.empty() || is_hex64(m.kernel_hash), who + ": kernel_hash must be 64 lowercase hex digits");
  if (m.status == MeasurementStatus::passed) {
    require_field(m.median_us && *m.median_us > 0 && std::isfinite(*m.median_us),
                  who + ": a passed measurement needs median_us > 0");
    require_field(!m.kernel_hash.empty(), who + ": a passed measurement needs its kernel_hash");
  }
}

std::int64_t Store::record_measurement(const Measurement& m) {
  validate_measurement(m);
  std::lock_guard lk(impl_->mu);
  impl_->require_writable("record_measurement");
  sql::Transaction t(impl_->db);
  impl_->upsert_device(m.device);
  auto [id, inserted] = impl_->insert_measurement(m);
  t.commit();
  return id;
}

static void validate_winner(const Winner& w) {
  validate_key(w.key);
  std::string who = "winner for " + w.key.problem.str();
  require_field(!w.variant.empty(), who + ": empty variant");
  require_field(is_hex64(w.kernel_hash), who + ": kernel_hash must be 64 lowercase hex digits");
  require_field(w.median_us > 0 && std::isfinite(w.median_us), who + ": median_us must be > 0");
}

void Store::set_winner(const Winner& w) {
  validate_winner(w);
  std::lock_guard lk(impl_->mu);
  impl_->require_writable("set_winner");
  sql::Transaction t(impl_->db);
  impl_->upsert_device(w.key.device);
  impl_->write_winner(w);
  t.commit();
}

std::optional<Winner> Store::decide_winner(const WinnerKey& key) {
  validate_key(key);
  std::lock_guard lk(impl_->mu);
  impl_->require_writable("decide_winner");
  sql::Transaction t(impl_->db);
  auto st = impl_->db.prepare(
      "SELECT variant, kernel_hash, median_us, p10_us, p90_us, tops FROM measurements "
      "WHERE device = ? AND problem = ? AND generator_hash = ? AND nvrtc_version = ? AND status = 'passed' "
      "AND median_us IS NOT NULL AND kernel_hash IS NOT NULL "
      "ORDER BY median_us ASC, id ASC");
  st.bind_all(key.device.key(), key.problem.str(), key.generator_hash, key.nvrtc_version);
  std::optional<Winner> w;
  while (st.step()) {
    if (!w) {
      w.emplace();
      w->key = key;
      w->variant = st.text(0);
      w->kernel_hash = st.text(1);
      w->median_us = st.dbl(2);
      w->tops = st.opt_dbl(5);
      auto p10 = st.opt_dbl(3), p90 = st.opt_dbl(4);
      if (p10 && p90 && w->median_us > 0) w->noise = std::max(0.0, (*p90 - *p10) / w->median_us);
      continue;
    }
    if (st.text(0) == w->variant) continue;
    w->runner_up = st.text(0);
    w->runner_up_median_us = st.dbl(2);
    w->margin = st.dbl(2) / w->median_us - 1.0;
    w->tie = *w->margin <= w->noise;
    break;
  }
  if (!w) return std::nullopt;
  w->source = "tune";
  w->decided_at = now_unix();
  impl_->upsert_device(key.device);
  impl_->write_winner(*w);
  t.commit();
  return w;
}

// ---- readers --------------------------------------------------------------------------------------

std::optional<Winner> Store::winner(const WinnerKey& key) {
  std::lock_guard lk(impl_->mu);
  return impl_->read_winner(key);
}

std::vector<Winner> Store::winners(const WinnerFilter& f) {
  std::lock_guard lk(impl_->mu);
  auto st = impl_->db.prepare(cat("SELECT ", kWinnerColumns,
                                  " FROM winners WHERE instr(device, ?) > 0 AND instr(problem, ?) > 0 "
                                  "ORDER BY device, problem, generator_hash, nvrtc_version"));
  st.bind_all(f.device_contains, f.problem_contains);
  std::vector<Winner> out;
  while (st.step()) out.push_back(winner_from_row(st, impl_->path));
  return out;
}

std::vector<Measurement> Store::measurements(const MeasurementFilter& f) {
  std::lock_guard lk(impl_->mu);
  // Empty filter fields match everything; the SQL text is constant.
  auto st = impl_->db.prepare(cat("SELECT ", kMeasurementColumns,
                                  " FROM measurements WHERE (? = '' OR variant = ?) AND (? = '' OR problem = ?) "
                                  "AND (? = '' OR device = ?) AND (? = '' OR status = ?) "
                                  "AND (? = '' OR generator_hash = ?) AND (? = '' OR nvrtc_version = ?) ORDER BY id"));
  std::string problem = f.problem ? f.problem->str() : std::string();
  std::string status = f.status ? to_string(*f.status) : "";
  st.bind_all(f.variant, f.variant, problem, problem, f.device_key, f.device_key, status, status, f.generator_hash,
              f.generator_hash, f.nvrtc_version, f.nvrtc_version);
  std::vector<Measurement> out;
  while (st.step()) out.push_back(measurement_from_row(st, impl_->path));
  return out;
}

std::vector<DeviceFingerprint> Store::devices() {
  std::lock_guard lk(impl_->mu);
  auto st = impl_->db.prepare("SELECT name, cc, sm_count, memory_bytes, driver_version FROM devices ORDER BY key");
  std::vector<DeviceFingerprint> out;
  while (st.step()) out.push_back({st.text(0), st.i32(1), st.i32(2), st.i64(3), st.i32(4)});
  return out;
}

std::vector<VariantRecord> Store::variants(const std::string& name) {
  std::lock_guard lk(impl_->mu);
  auto st = impl_->db.prepare(
      "SELECT name, params_hash, params_json, generator_hash, created_at FROM variants "
      "WHERE ? = '' OR name = ? ORDER BY name, created_at");
  st.bind_all(name, name);
  std::vector<VariantRecord> out;
  while (st.step()) out.push_back({st.text(0), st.text(1), st.text(2), st.text(3), st.i64(4)});
  return out;
}

std::vector<KernelInfo> Store::kernels() {
  std::lock_guard lk(impl_->mu);
  auto st = impl_->db.prepare(
      "SELECT hash, variant, arch, nvrtc_version, generator_hash, cubin_sha256, length(cubin), registers, "
      "spill_stores, spill_loads, smem_bytes, compile_ms, report_json, created_at FROM kernels ORDER BY hash");
  std::vector<KernelInfo> out;
  while (st.step()) {
    KernelInfo k;
    k.hash = st.text(0);
    k.variant = st.text(1);
    k.arch = st.text(2);
    k.nvrtc_version = st.text(3);
    k.generator_hash = st.text(4);
    k.cubin_sha256 = st.text(5);
    k.cubin_bytes = st.i64(6);
    k.stats = {st.i32(7), st.i32(8), st.i32(9), st.i32(10), st.dbl(11), st.text(12)};
    k.created_at = st.i64(13);
    out.push_back(std::move(k));
  }
  return out;
}

bool Store::has_kernel(const std::string& hash) {
  std::lock_guard lk(impl_->mu);
  auto st = impl_->db.prepare("SELECT 1 FROM kernels WHERE hash = ?");
  st.bind(1, hash);
  return st.step();
}

std::optional<KernelRecord> Store::kernel(const std::string& hash) {
  std::lock_guard lk(impl_->mu);
  auto st = impl_->db.prepare(
      "SELECT hash, variant, arch, nvrtc_version, generator_hash, cubin, cubin_sha256, registers, spill_stores, "
      "spill_loads, smem_bytes, compile_ms, report_json, created_at FROM kernels WHERE hash = ?");
  st.bind(1, hash);
  if (!st.step()) return std::nullopt;
  KernelRecord k;
  k.hash = st.text(0);
  k.variant = st.text(1);
  k.arch = st.text(2);
  k.nvrtc_version = st.text(3);
  k.generator_hash = st.text(4);
  k.cubin = st.blob(5);
  k.cubin_sha256 = st.text(6);
  k.stats = {st.i32(7), st.i32(8), st.i32(9), st.i32(10), st.dbl(11), st.text(12)};
  k.created_at = st.i64(13);
  st.reset();
  std::string actual = sha256_hex(k.cubin);
  if (actual == k.cubin_sha256) return k;

  std::string what = cat("kernel ", hash, " (variant ", k.variant, "): cubin checksum mismatch (stored ",
                         k.cubin_sha256.substr(0, 16), "..., actual ", actual.substr(0, 16), "...)");
  if (impl_->read_only) {
    throw Error(Errc::corrupt, what + "; read-only database, entry left in place, recompile the kernel",
                impl_->path);
  }
  impl_->quarantine(hash, k.cubin_sha256, actual, "checksum mismatch on read");
  impl_->warn(impl_->path + ": " + what + "; moved to quarantine, recompile the kernel to rebuild it");
  throw Error(Errc::corrupt, what + "; moved to quarantine, recompile the kernel to rebuild it", impl_->path);
}

std::vector<QuarantineEntry> Store::quarantined() {
  std::lock_guard lk(impl_->mu);
  auto st = impl_->db.prepare(
      "SELECT hash, variant, arch, reason, stored_sha256, actual_sha256, coalesce(length(cubin), 0), detected_at "
      "FROM quarantine ORDER BY id");
  std::vector<QuarantineEntry> out;
  while (st.step())
    out.push_back({st.text(0), st.text(1), st.text(2), st.text(3), st.text(4), st.text(5), st.i64(6), st.i64(7)});
  return out;
}

StoreCounts Store::counts() {
  std::lock_guard lk(impl_->mu);
  auto& db = impl_->db;
  StoreCounts c;
  c.devices = db.query_int("SELECT count(*) FROM devices");
  c.variants = db.query_int("SELECT count(*) FROM variants");
  c.kernels = db.query_int("SELECT count(*) FROM kernels");
  c.measurements = db.query_int("SELECT count(*) FROM measurements");
  c.winners = db.query_int("SELECT count(*) FROM winners");
  c.quarantined = db.query_int("SELECT count(*) FROM quarantine");
  c.merges = db.query_int("SELECT count(*) FROM provenance");
  return c;
}

std::vector<std::string> Store::verify_kernels() {
  std::lock_guard lk(impl_->mu);
  std::vector<std::string> hashes;
  {
    auto st = impl_->db.prepare("SELECT hash FROM kernels ORDER BY hash");
    while (st.step()) hashes.push_back(st.text(0));
  }
  std::vector<std::string> bad;
  for (const auto& h : hashes) {
    try {
      kernel(h);
    } catch (const Error& e) {
      if (e.code() != Errc::corrupt) throw;
      bad.push_back(h);
    }
  }
  return bad;
}

GcReport Store::gc(bool dry_run) {
  std::lock_guard lk(impl_->mu);
  if (!dry_run) impl_->require_writable("gc");
  auto& db = impl_->db;
  GcReport r;
  r.dry_run = dry_run;
  r.file_bytes_before = file_size_or_zero(impl_->path) + file_size_or_zero(impl_->path + "-wal");
  {
    auto st = db.prepare(
        "SELECT count(*), coalesce(sum(length(cubin)), 0) FROM kernels "
        "WHERE hash NOT IN (SELECT kernel_hash FROM winners)");
    st.step();
    r.kernels_removed = st.i64(0);
    r.kernel_bytes_removed = st.i64(1);
  }
  r.quarantine_removed = db.query_int("SELECT count(*) FROM quarantine");
  if (dry_run) {
    r.file_bytes_after = r.file_bytes_before;
    return r;
  }
  {
    sql::Transaction t(db);
    db.exec("DELETE FROM kernels WHERE hash NOT IN (SELECT kernel_hash FROM winners)");
    db.exec("DELETE FROM quarantine");
    t.commit();
  }
  // VACUUM rewrites the file without the freed pages; the checkpoints fold the WAL back into
  // the file and truncate it, so that the freed bytes show on disk. Other open connections
  // can keep part of the WAL alive; that is harmless (the next checkpoint finishes it).
  int rc = sql::retry_busy([&] { return sqlite3_exec(db.get(), "VACUUM", nullptr, nullptr, nullptr); });
  if (rc != SQLITE_OK) db.fail(rc, "VACUUM");
  sqlite3_wal_checkpoint_v2(db.get(), nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  r.file_bytes_after = file_size_or_zero(impl_->path) + file_size_or_zero(impl_->path + "-wal");
  return r;
}

}  // namespace sage::tuner
