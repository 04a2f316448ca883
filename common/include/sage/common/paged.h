// Selection facts of paged KV caches shared by the runtime (rt::Buckets::key_of, also in a static
// build) and the tuner's tools (`sage-tune select`, configs/defaults.yaml's checks).
#pragma once

namespace sage {

// A paged KV cache's call (rt::BucketKey::paged) has a finer seq_q bucket than the others: the
// next power of two up to 128 queries, where configs/defaults.yaml's paged entries move from the
// mma.sync kernels to the wgmma ones; past 128 `bucket`, the call's seq_bucket.
inline int paged_seq_q_bucket(int seq_q, int bucket) {
  if (seq_q > 128) return bucket;
  int pow2 = 1;
  while (pow2 < seq_q) pow2 *= 2;
  return pow2;
}

}  // namespace sage
