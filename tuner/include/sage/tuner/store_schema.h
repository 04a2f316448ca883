// The tune store's schema history. A database records its version in meta.schema_version;
// opening it writable applies the missing steps in order, each in its own transaction.
// Steps are never edited once released: a change to the schema is a new step.
#pragma once
#include <vector>

namespace sage::tuner {

struct Migration {
  int to_version;           // version after this step (the step from to_version - 1)
  const char* description;
  const char* sql;          // constant DDL/DML, run as one script inside the step's transaction
};

// Every step from an empty file to store_schema_version(), in order.
const std::vector<Migration>& store_migrations();

// PRAGMA application_id of a tune database ("SAGE"), so that foreign SQLite files are refused.
inline constexpr int kStoreApplicationId = 0x53414745;

}  // namespace sage::tuner
