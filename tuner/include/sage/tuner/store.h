// The tune store: a SQLite database of devices, variants, compiled kernels (cubins with a
// checksum), measurements and winners, plus the lookup the runtime uses to pick a kernel.
// Schema, keys, WAL use, corruption handling, merge and gc are described in docs/store.md.
//
// Two databases take part in a lookup: a writable user DB ($SAGE_DB, default
// <cache_dir()>/tune.db) and a read-only system DB shipped with the project ($SAGE_SYSTEM_DB,
// default <prefix>/share/sage-tune/system.db). The user DB wins; a missing system DB is normal.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sage/common/error.h"

namespace sage::tuner {

struct CompileResult;  // compiler.h

// ---- keys -------------------------------------------------------------------------------

// What identifies a GPU for tuning purposes. Two devices with equal fingerprints are assumed
// to time kernels alike, so a winner tuned on one is served on the other.
struct DeviceFingerprint {
  std::string name;                // "NVIDIA H100 80GB HBM3"
  int cc = 0;                      // compute capability as 80, 86, 89, 90...
  int sm_count = 0;
  std::int64_t memory_bytes = 0;   // total device memory
  int driver_version = 0;          // cuDriverGetVersion(): 13000 for 13.0

  // Canonical key "NVIDIA H100 80GB HBM3|cc90|sm132|mem85029158912|drv13000".
  std::string key() const;
  // Inverse of key(); throws Error(invalid_argument) naming the bad field.
  static DeviceFingerprint parse(std::string_view key);
  // Throws Error(invalid_argument) for an empty name, a name containing '|', or values <= 0.
  void validate() const;
  bool operator==(const DeviceFingerprint&) const = default;
};

// The problem bucket a winner serves, including the accuracy policy.
struct ProblemKey {
  int head_dim = 128;
  bool causal = false;
  std::string dtype = "fp16";      // fp16 | bf16
  std::string layout = "HND";      // HND | NHD
  int seq_q_bucket = 0;
  int seq_kv_bucket = 0;
  int bh_bucket = 0;               // batch * heads bucket
  std::string policy = "balanced"; // accurate | balanced | fast
  // A paged KV cache's bucket (sage_attention_paged without a window): queries bucketed to the
  // next power of two up to 128 (paged_seq_q_bucket), timed over a paged cache
  // (ProblemsConfig::paged). kv8: over FP8 e4m3 pages (sage_paged_kv::kv_dtype); paged only.
  bool paged = false;
  bool kv8 = false;
  // A variable-length batch's bucket (sage_attention_varlen; NHD): seq_q / seq_kv the longest
  // sequence's, timed on sequences of ProblemsConfig::varlen's lengths. A sliding window's
  // (causal): seq_kv_bucket the keys a query sees (the window), timed with every query seeing
  // them. Neither with paged (those calls take the defaults).
  bool varlen = false;
  bool window = false;

  // Canonical form "d128_causal_fp16_HND_q4096_kv4096_bh128_balanced" ("noncausal" when not),
  // then "_varlen", "_window", "_kv8" for FP8 pages and "_paged" for a paged bucket: the
  // runtime's bucket key (rt::BucketKey::str) of the same call.
  std::string str() const;
  // Inverse of str(); throws Error(invalid_argument) naming the key and the bad field.
  static ProblemKey parse(std::string_view s);
  void validate() const;
  bool operator==(const ProblemKey&) const = default;
};

// The key of a winner: everything the choice depends on.
struct WinnerKey {
  DeviceFingerprint device;
  ProblemKey problem;
  std::string generator_hash;  // hash of templates + generator: a new generator re-tunes
  std::string nvrtc_version;   // "13.0"
  bool operator==(const WinnerKey&) const = default;
};

// One field in which a stored key differs from the requested one.
struct FieldDiff {
  std::string field;   // "device.driver_version", "problem.seq_kv_bucket", "nvrtc_version"...
  std::string wanted;
  std::string stored;
};
// Field-by-field comparison of two winner keys (empty when equal).
std::vector<FieldDiff> diff_keys(const WinnerKey& wanted, const WinnerKey& stored);

// ---- records ----------------------------------------------------------------------------

// A generated variant: readable name plus the hash of its parameters.
struct VariantRecord {
  std::string name;
  std::string params_hash;
  std::string params_json = "{}";  // the parameters, as JSON text
  std::string generator_hash;
  std::int64_t created_at = 0;     // unix seconds; 0: now
};

// Compile statistics of a kernel module (all entries of the cubin together).
struct CompileStats {
  int registers = 0;       // max over the module's kernels
  int spill_stores = 0;    // bytes, summed
  int spill_loads = 0;     // bytes, summed
  int smem_bytes = 0;      // static shared memory, max
  double compile_ms = 0;
  std::string report_json = "[]";  // per-kernel resource report
};

// A compiled kernel module, keyed by the compiler's content hash.
struct KernelRecord {
  std::string hash;           // 64 lowercase hex: CompileResult::key
  std::string variant;        // variant name
  std::string arch;           // "sm_90a"
  std::string nvrtc_version;
  std::string generator_hash;
  std::string cubin;          // bytes
  std::string cubin_sha256;   // filled in by the store on write; checked on every read
  CompileStats stats;
  std::int64_t created_at = 0;
};
// Builds a KernelRecord from a successful compile (stats aggregated over its kernels).
KernelRecord make_kernel_record(const CompileResult& r, const std::string& variant,
                                const std::string& arch, const std::string& nvrtc_version,
                                const std::string& generator_hash);

// A kernel's metadata without the cubin (what listings and gc work with).
struct KernelInfo {
  std::string hash, variant, arch, nvrtc_version, generator_hash, cubin_sha256;
  std::int64_t cubin_bytes = 0;
  CompileStats stats;
  std::int64_t created_at = 0;
};

enum class MeasurementStatus { passed, incorrect, failed, unsupported };
const char* to_string(MeasurementStatus s);
// Throws Error(invalid_argument) for anything but the four names.
MeasurementStatus parse_measurement_status(std::string_view s);

// Accuracy of one run against the FP32 reference.
struct Accuracy {
  double cos = 0;     // cosine similarity
  double rel_l1 = 0;  // sum|o - ref| / sum|ref|
  double rmse = 0;
};

// One verify-and-time result of a kernel on a problem bucket on a device.
struct Measurement {
  std::int64_t id = 0;        // row id (set by the store)
  std::string uid;            // globally unique id (set by the store when empty); merge dedups on it
  DeviceFingerprint device;
  ProblemKey problem;
  std::string variant;
  std::string kernel_hash;    // may be empty for a variant that failed to compile
  std::string generator_hash;
  std::string nvrtc_version;
  MeasurementStatus status = MeasurementStatus::passed;
  std::string detail;         // why incorrect/failed/unsupported
  std::optional<Accuracy> gaussian;  // on Gaussian inputs
  std::optional<Accuracy> outlier;   // on inputs with channel outliers
  std::optional<double> median_us, p10_us, p90_us, mad_us;
  std::int64_t samples = 0;
  std::optional<double> tops;
  std::string tool_version;   // empty: this build's
  std::optional<std::int64_t> seed, seed_outlier;
  std::int64_t created_at = 0;  // unix seconds; 0: now
};

// The chosen variant for a key, with how sure the choice is.
struct Winner {
  WinnerKey key;
  std::string variant;
  std::string kernel_hash;
  double median_us = 0;
  std::optional<double> tops;
  std::string runner_up;                     // empty when there was no other passing variant
  std::optional<double> runner_up_median_us;
  std::optional<double> margin;              // runner_up_median / median - 1
  double noise = 0;                          // relative timing spread of the winner, (p90-p10)/median
  bool tie = false;                          // runner-up within the noise
  std::string source = "tune";               // "tune", or the database a merge took it from
  std::int64_t decided_at = 0;               // unix seconds; 0: now
};

// A kernel found damaged and moved out of the kernels table.
struct QuarantineEntry {
  std::string hash, variant, arch, reason;
  std::string stored_sha256, actual_sha256;
  std::int64_t cubin_bytes = 0;
  std::int64_t detected_at = 0;
};

// Which measurements to return; every field left empty matches everything. With all of
// them set, a tuner resuming a sweep learns whether a (variant, problem, device) was measured.
struct MeasurementFilter {
  std::string variant;          // exact name
  std::optional<ProblemKey> problem;
  std::string device_key;       // exact DeviceFingerprint::key()
  std::optional<MeasurementStatus> status;
  std::string generator_hash;   // exact
  std::string nvrtc_version;    // exact
};

struct WinnerFilter {
  std::string device_contains;   // substring of the device key
  std::string problem_contains;  // substring of the canonical problem key
};

// ---- opening ----------------------------------------------------------------------------

// The schema version this build writes (older databases are migrated on open).
int store_schema_version();
// $SAGE_DB, else <cache_dir()>/tune.db.
std::string default_user_db_path();
// $SAGE_SYSTEM_DB, else the path compiled in (SAGE_SYSTEM_DB_PATH).
std::string default_system_db_path();
// "sage-tune <version>": the tool_version recorded when a measurement leaves it empty.
std::string store_tool_version();

enum class OnCorrupt {
  rebuild,  // move the file aside to <path>.corrupt-<time>, start fresh, salvage readable rows
  fail,     // throw Error(corrupt)
};

struct OpenOptions {
  bool read_only = false;   // never write (SQLITE_OPEN_READONLY); corruption always fails
  bool immutable = false;   // read-only file nobody writes (system DB): no locking at all
  bool create = true;       // writable opens create a missing file; read-only never does
  bool quick_check = true;  // PRAGMA quick_check on open (reads the whole file once)
  OnCorrupt on_corrupt = OnCorrupt::rebuild;
  // Where reports of repairs go (corrupt file moved aside, rows salvaged, blobs quarantined).
  // Empty: one line each on stderr, prefixed "sage-tune: warning: ".
  std::function<void(const std::string&)> warn;
};

// What happened while opening.
struct OpenReport {
  bool created = false;        // a new database file was made
  int migrated_from = 0;       // schema version found, when it was migrated (0: none)
  bool migrated_in_memory = false;  // read-only old schema: migrated a private in-memory copy
  bool rebuilt = false;        // the file was corrupt and was replaced
  std::string moved_to;        // where the corrupt file went
  std::string corruption;      // what the check reported
  std::int64_t salvaged_rows = 0;   // rows copied from the corrupt file into the new one
  std::int64_t dropped_rows = 0;    // rows that could not be read (or failed their checksum)
};

struct GcReport {
  std::int64_t kernels_removed = 0;
  std::int64_t kernel_bytes_removed = 0;   // cubin bytes
  std::int64_t quarantine_removed = 0;
  std::int64_t file_bytes_before = 0;      // database + WAL
  std::int64_t file_bytes_after = 0;
  bool dry_run = false;
};

struct StoreCounts {
  std::int64_t devices = 0, variants = 0, kernels = 0, measurements = 0, winners = 0,
               quarantined = 0, merges = 0;
};

// A writable (or read-only) handle on one tune database. Thread-safe: calls are serialized.
// Several processes may write one database at once (WAL, busy timeout, retried locks).
class Store {
 public:
  // Opens (creating, migrating or rebuilding as the options allow). Throws Error:
  // not_found (missing file and !create or read_only), corrupt (damaged and not rebuilt),
  // unsupported (schema newer than this build, or not a sage-tune database), io_error.
  explicit Store(const std::string& path, OpenOptions opts = {});
  ~Store();
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;

  const std::string& path() const;
  bool read_only() const;
  const OpenReport& report() const;
  int schema_version() const;  // of the open database (after migration)

  // -- writers (each call is one short transaction) --
  void record_device(const DeviceFingerprint& d);
  void record_variant(const VariantRecord& v);
  // Stores (or replaces) a kernel; computes cubin_sha256. Re-recording a quarantined hash
  // is how a damaged kernel is rebuilt.
  void record_kernel(const KernelRecord& k);
  // Records one measurement (and its device) in one transaction; returns its row id.
  std::int64_t record_measurement(const Measurement& m);
  // Inserts or replaces the winner for w.key.
  void set_winner(const Winner& w);
  // Chooses the winner for `key` from the passed measurements: the variant with the lowest
  // median wins; margin is over the best other variant; noise is the winner's
  // (p90 - p10) / median; tie when the margin is within the noise. Stores and returns it, or
  // nullopt when no passed measurement with a kernel exists.
  std::optional<Winner> decide_winner(const WinnerKey& key);

  // -- readers --
  std::optional<Winner> winner(const WinnerKey& key);
  std::vector<Winner> winners(const WinnerFilter& f = {});
  std::vector<Measurement> measurements(const MeasurementFilter& f = {});
  std::vector<DeviceFingerprint> devices();
  std::vector<VariantRecord> variants(const std::string& name = {});
  std::vector<KernelInfo> kernels();
  bool has_kernel(const std::string& hash);
  // The kernel with its cubin, checksum verified; nullopt when absent. On a checksum mismatch
  // the entry is moved to the quarantine table (when writable) and Error(corrupt) is thrown
  // naming the hash, both checksums and the path: the caller recompiles and record_kernel()s.
  std::optional<KernelRecord> kernel(const std::string& hash);
  std::vector<QuarantineEntry> quarantined();
  StoreCounts counts();

  // Verifies every cubin's checksum, quarantining bad ones (when writable); returns the
  // hashes found damaged.
  std::vector<std::string> verify_kernels();
  // Drops kernels that no winner uses and empties the quarantine, then VACUUMs.
  GcReport gc(bool dry_run = false);

  struct Impl;

 private:
  friend struct StoreAccess;
  std::unique_ptr<Impl> impl_;
};

// ---- merge ------------------------------------------------------------------------------

struct MergeReport {
  std::string output;
  std::vector<std::string> inputs;
  std::int64_t devices = 0, variants = 0, kernels = 0, measurements = 0, winners = 0;
  std::int64_t winner_conflicts = 0;        // keys present in more than one input
  std::int64_t winners_replaced = 0;        // conflicts won by a later input (lower median)
  std::int64_t corrupt_kernels_skipped = 0; // input cubins failing their checksum
  std::int64_t duplicate_measurements = 0;  // same uid seen again
};
struct MergeOptions {
  bool overwrite = false;  // replace an existing output file
  std::function<void(const std::string&)> warn;
};
// Writes the union of `inputs` into a new database `output` (never modifying the inputs):
// rows are deduplicated by key (measurements by uid); for a winner key in several inputs the
// lower median wins and margin/tie are recomputed over both candidates. Each input is
// recorded in the output's provenance table and winners carry the input they came from.
// Throws Error(invalid_argument) when output is an input or exists (without overwrite),
// not_found for a missing input, corrupt for a damaged input.
MergeReport merge_stores(const std::vector<std::string>& inputs, const std::string& output,
                         const MergeOptions& opts = {});

// ---- health -----------------------------------------------------------------------------

struct StoreHealth {
  enum class State { ok, missing, corrupt, too_new, foreign, unreadable };
  std::string path;
  State state = State::missing;
  std::string message;          // empty when ok; otherwise what is wrong, readable
  int schema_version = 0;       // of the file
  bool needs_migration = false; // older schema: a writable open will migrate it
  std::string journal_mode;
  std::int64_t file_bytes = 0;
  StoreCounts counts;
  std::int64_t corrupt_kernels = 0;  // with full: cubins failing their checksum
  bool full = false;                 // integrity_check + every checksum, not quick_check
  bool ok() const { return state == State::ok; }
};
const char* to_string(StoreHealth::State s);
// Inspects a database without modifying it (read-only; never creates, migrates or repairs).
// Never throws for a damaged or missing file: the state says what was found.
StoreHealth check_health(const std::string& path, bool full = false);

// ---- lookup (runtime) -------------------------------------------------------------------

struct LookupOptions {
  std::string user_db;    // empty: default_user_db_path()
  std::string system_db;  // empty: default_system_db_path()
  bool use_system = true;
  bool quick_check = true;
  std::function<void(const std::string&)> warn;  // as OpenOptions::warn
};

struct LookupResult {
  enum class Status {
    found,          // winner and verified cubin
    miss,           // no winner for this key (see nearest)
    needs_rebuild,  // winner known but its kernel is missing or was damaged: recompile it
  };
  Status status = Status::miss;
  std::optional<Winner> winner;
  std::optional<KernelRecord> kernel;  // when found
  std::string db;                      // path of the database the winner came from
  std::string message;                 // readable: why missing / what to rebuild
  // On a miss, when asked: the stored key closest to the requested one (fewest differing
  // fields) and how it differs.
  std::optional<WinnerKey> nearest;
  std::string nearest_db;
  std::vector<FieldDiff> nearest_diff;
};
const char* to_string(LookupResult::Status s);

// The user + system pair the runtime and the tuner consult. Never throws for damaged or
// missing databases: they are reported through warn and left out. find() may be called from
// several threads at once.
class WinnerLookup {
 public:
  explicit WinnerLookup(LookupOptions opts = {});
  ~WinnerLookup();
  // The user DB's winner if it has one, else the system DB's. The cubin is taken by hash from
  // whichever database holds an intact copy (user first).
  LookupResult find(const WinnerKey& key, bool explain_miss = false);
  Store* user();    // nullptr when absent or unusable
  Store* system();  // nullptr when absent or unusable
  // Everything reported so far (also passed to LookupOptions::warn as it happens). Read it
  // when no find() is running.
  const std::vector<std::string>& warnings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot form of WinnerLookup::find.
LookupResult find_winner(const WinnerKey& key, const LookupOptions& opts = {},
                         bool explain_miss = false);
// For a miss: "nearest stored key (<db>) differs in device.driver_version (wanted 13000,
// stored 12080), ..." (or that nothing is stored); for other results, r.message.
std::string describe_miss(const LookupResult& r);

}  // namespace sage::tuner
