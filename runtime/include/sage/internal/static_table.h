// The table of kernels built into an exported static runtime. `sage-tune export` writes a C++
// source defining sage::rt::static_table() (cubins as byte arrays, one entry per winner, the
// bucket boundaries); a build with -DSAGE_TUNED_KERNELS=DIR compiles it into the runtime. A
// build without exported kernels links an empty table. Internal header, included by the
// generated source: changing these structs changes what `sage-tune export` must write.
#pragma once
#include <cstddef>

namespace sage::rt {

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

struct StaticTable {
  const int* seq_buckets;    // ascending boundaries of configs/problems.yaml at export time
  int seq_bucket_count;
  const int* bh_buckets;
  int bh_bucket_count;
  const StaticKernel* kernels;
  int kernel_count;
  const char* source_db;     // the database exported (for messages)
  const char* generator_hash;
};

// The table of this build (defined by the exported source, or empty).
const StaticTable& static_table();

}  // namespace sage::rt
