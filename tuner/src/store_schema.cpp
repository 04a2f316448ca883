// Schema steps of the tune store. docs/store.md explains every table and column.
#include "sage/tuner/store_schema.h"

namespace sage::tuner {

namespace {

// Version 1: the first released layout (sage-tune 0.1 before accuracy on outlier inputs,
// timing spread and merge support).
const char* kSchemaV1 = R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE devices (
  key            TEXT PRIMARY KEY,
  name           TEXT NOT NULL,
  cc             INTEGER NOT NULL,
  sm_count       INTEGER NOT NULL,
  memory_bytes   INTEGER NOT NULL,
  driver_version INTEGER NOT NULL,
  first_seen     INTEGER NOT NULL
);
CREATE TABLE variants (
  name           TEXT NOT NULL,
  params_hash    TEXT NOT NULL,
  params_json    TEXT NOT NULL,
  generator_hash TEXT NOT NULL,
  created_at     INTEGER NOT NULL,
  PRIMARY KEY (name, params_hash)
);
CREATE TABLE kernels (
  hash           TEXT PRIMARY KEY,
  variant        TEXT NOT NULL,
  arch           TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  generator_hash TEXT NOT NULL,
  cubin          BLOB NOT NULL,
  cubin_sha256   TEXT NOT NULL,
  registers      INTEGER,
  spills         INTEGER,
  smem_bytes     INTEGER,
  compile_ms     REAL,
  created_at     INTEGER NOT NULL
);
CREATE TABLE measurements (
  id             INTEGER PRIMARY KEY,
  device         TEXT NOT NULL REFERENCES devices(key),
  problem        TEXT NOT NULL,
  variant        TEXT NOT NULL,
  kernel_hash    TEXT,
  generator_hash TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  status         TEXT NOT NULL CHECK (status IN ('passed', 'incorrect', 'failed', 'unsupported')),
  cos            REAL,
  rel_l1         REAL,
  rmse           REAL,
  median_us      REAL,
  samples        INTEGER,
  tops           REAL,
  tool_version   TEXT NOT NULL,
  seed           INTEGER,
  created_at     INTEGER NOT NULL
);
CREATE INDEX measurements_by_problem ON measurements (device, problem);
CREATE INDEX measurements_by_variant ON measurements (variant);
CREATE TABLE winners (
  device         TEXT NOT NULL REFERENCES devices(key),
  problem        TEXT NOT NULL,
  generator_hash TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  variant        TEXT NOT NULL,
  kernel_hash    TEXT NOT NULL,
  median_us      REAL NOT NULL,
  tops           REAL,
  decided_at     INTEGER NOT NULL,
  PRIMARY KEY (device, problem, generator_hash, nvrtc_version)
);
)sql";

// Version 2: accuracy on outlier inputs, timing spread, failure details, measurement uids
// (merge deduplicates on them), the winner's runner-up / margin / noise / tie and source,
// full per-kernel resource reports, the quarantine for damaged cubins, merge provenance.
const char* kSchemaV2 = R"sql(
ALTER TABLE kernels RENAME COLUMN spills TO spill_stores;
ALTER TABLE kernels ADD COLUMN spill_loads INTEGER;
ALTER TABLE kernels ADD COLUMN report_json TEXT NOT NULL DEFAULT '[]';

ALTER TABLE measurements ADD COLUMN uid TEXT;
ALTER TABLE measurements ADD COLUMN detail TEXT NOT NULL DEFAULT '';
ALTER TABLE measurements ADD COLUMN cos_outlier REAL;
ALTER TABLE measurements ADD COLUMN rel_l1_outlier REAL;
ALTER TABLE measurements ADD COLUMN rmse_outlier REAL;
ALTER TABLE measurements ADD COLUMN p10_us REAL;
ALTER TABLE measurements ADD COLUMN p90_us REAL;
ALTER TABLE measurements ADD COLUMN mad_us REAL;
ALTER TABLE measurements ADD COLUMN seed_outlier INTEGER;
-- Rows written by version 1 get fresh random uids: they were never merged, so no other
-- database can hold a copy that would have to match.
UPDATE measurements SET uid = lower(hex(randomblob(16))) WHERE uid IS NULL;
CREATE UNIQUE INDEX measurements_by_uid ON measurements (uid);
CREATE INDEX measurements_by_kernel ON measurements (kernel_hash);

ALTER TABLE winners ADD COLUMN runner_up TEXT NOT NULL DEFAULT '';
ALTER TABLE winners ADD COLUMN runner_up_median_us REAL;
ALTER TABLE winners ADD COLUMN margin REAL;
ALTER TABLE winners ADD COLUMN noise REAL NOT NULL DEFAULT 0;
ALTER TABLE winners ADD COLUMN tie INTEGER NOT NULL DEFAULT 0;
ALTER TABLE winners ADD COLUMN source TEXT NOT NULL DEFAULT 'tune';
-- Version 1 did not keep the runner-up: recover it from the measurements that decided the
-- winner (best passed median of any other variant under the same key).
UPDATE winners SET runner_up_median_us = (
  SELECT min(m.median_us) FROM measurements m
  WHERE m.device = winners.device AND m.problem = winners.problem
    AND m.generator_hash = winners.generator_hash AND m.nvrtc_version = winners.nvrtc_version
    AND m.status = 'passed' AND m.median_us IS NOT NULL AND m.variant <> winners.variant);
UPDATE winners SET runner_up = (
  SELECT m.variant FROM measurements m
  WHERE m.device = winners.device AND m.problem = winners.problem
    AND m.generator_hash = winners.generator_hash AND m.nvrtc_version = winners.nvrtc_version
    AND m.status = 'passed' AND m.variant <> winners.variant
    AND m.median_us = winners.runner_up_median_us
  ORDER BY m.id LIMIT 1)
WHERE runner_up_median_us IS NOT NULL;
UPDATE winners SET margin = runner_up_median_us / median_us - 1.0
WHERE runner_up_median_us IS NOT NULL AND median_us > 0;

CREATE TABLE quarantine (
  id             INTEGER PRIMARY KEY,
  hash           TEXT NOT NULL,
  variant        TEXT NOT NULL,
  arch           TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  generator_hash TEXT NOT NULL,
  cubin          BLOB,
  stored_sha256  TEXT NOT NULL,
  actual_sha256  TEXT NOT NULL,
  reason         TEXT NOT NULL,
  detected_at    INTEGER NOT NULL
);
CREATE TABLE provenance (
  id                   INTEGER PRIMARY KEY,
  merged_at            INTEGER NOT NULL,
  input_path           TEXT NOT NULL,
  input_schema_version INTEGER NOT NULL,
  tool_version         TEXT NOT NULL,
  devices              INTEGER NOT NULL,
  kernels              INTEGER NOT NULL,
  measurements         INTEGER NOT NULL,
  winners              INTEGER NOT NULL,
  winners_replaced     INTEGER NOT NULL
);
)sql";

}  // namespace

const std::vector<Migration>& store_migrations() {
  static const std::vector<Migration> steps = {
      {1, "initial layout", kSchemaV1},
      {2, "outlier accuracy, timing spread, uids, runner-up/margin/tie, quarantine, provenance",
       kSchemaV2},
  };
  return steps;
}

}  // namespace sage::tuner
