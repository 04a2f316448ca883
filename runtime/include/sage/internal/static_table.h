// The table of kernels built into an exported static runtime. `sage-tune export` writes a C++
// source defining sage::rt::static_table() (cubins as byte arrays, one entry per winner, the
// defaults of configs/defaults.yaml for the exported architectures and head dims, the bucket
// boundaries); a build with -DSAGE_TUNED_KERNELS=DIR compiles it into the runtime. A build
// without exported kernels links an empty table. Internal header, included by the generated
// source: changing these structs changes what `sage-tune export` must write, and
// kStaticTableFormat, which the runtime's CMake checks against the exported folder's.
#pragma once
#include <cstddef>

#include "sage/common/default_rules.h"

namespace sage::rt {

// The layout of these structs; sage_tuned.cmake records the one it was written for (3: the
// defaults' rules carry DefaultRule::dense, 2026-11-30 (bc)).
inline constexpr int kStaticTableFormat = 3;

// One exported winner.
struct StaticKernel {
  const char* bucket;        // canonical bucket key, "d128_causal_fp16_HND_q4096_kv4096_bh128_balanced"
  const char* arch;          // the cubin's architecture, "sm_90a"
  const char* device;        // name of the GPU it was tuned on ("NVIDIA H100 80GB HBM3")
  const char* variant;       // readable variant name
  const char* config;        // KernelConfig::str()
  const unsigned char* cubin;
  std::size_t cubin_size;
  const char* cubin_sha256;
};

// A compiled kernel with what the launcher needs to run it.
struct StaticCubin {
  const char* variant;       // readable variant name
  const char* config;        // KernelConfig::str()
  const unsigned char* cubin;
  std::size_t cubin_size;
  const char* cubin_sha256;
};

// One entry of an architecture's list in configs/defaults.yaml, in the list's order (the
// continuation's entries after it), with its kernel. A call that no exported winner serves
// takes the first entry of its architecture whose rule matches, as a JIT build would.
struct StaticDefault {
  const char* arch;          // the list it serves, "sm_90a"
  DefaultRule rule;
  const char* conditions;    // the entry's conditions in words, for messages
  int line;                  // its line in configs/defaults.yaml at export time
  const StaticCubin* kernel;
};

// configs/defaults.yaml's measured_sms: the SMs an architecture's max_bh edges were measured on.
struct StaticMeasuredSms {
  const char* arch;
  int sms;
};

struct StaticTable {
  const int* seq_buckets;    // ascending boundaries of configs/problems.yaml at export time
  int seq_bucket_count;
  const int* bh_buckets;
  int bh_bucket_count;
  const StaticKernel* kernels;
  int kernel_count;
  const char* source_db;     // the database exported (for messages; "" where only defaults were)
  const char* generator_hash;
  const StaticDefault* defaults;  // every exported architecture's list for the exported head dims
  int default_count;
  const StaticMeasuredSms* measured_sms;
  int measured_sms_count;
};

// The table of this build (defined by the exported source, or empty).
const StaticTable& static_table();

}  // namespace sage::rt
