// Selection in a JIT build (SAGE_WITH_NVRTC=ON): which variant serves a bucket (user DB
// winner, else system DB winner, else the architecture's default) and where its cubin comes
// from (the database, else the cubin cache, else an NVRTC compile). Split from the device so
// that it can be tested without a GPU. Internal header; not part of static builds.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "sage/gen/search_space.h"
#include "sage/internal/runtime.h"
#include "sage/tuner/store.h"

namespace sage::rt::jit {

// The variant chosen for a winner key.
struct Choice {
  Source source = Source::default_variant;
  std::string variant;
  std::string db;                    // database of the winner
  std::string kernel_hash;           // the winner's kernel
  std::optional<std::string> cubin;  // the stored, checksum-verified cubin (when found)
  std::string miss;                  // no winner: how the nearest stored key differs
  std::string rebuild;               // winner whose kernel is missing or damaged: why
};
// The launcher config the tuner recorded with `variant` (tuner::variant_record_json) in the
// lookup's database at path `db` (the one a winner came from); nullopt where it holds none.
std::optional<KernelConfig> recorded_config(tuner::WinnerLookup& lookup, const std::string& db,
                                            const std::string& variant);

// The user DB's winner for `key`, else the system DB's, else
// tuner::default_variant(arch, head_dim, policy, seq_kv bucket, causal, seq_q bucket, rows16,
// pairs). `explain` asks for the nearest stored key on a miss. Throws Error(unsupported) when
// there is no winner and no default for `arch`.
// rows16 calls (rows 16 but not 32 bytes long a multiple of) whose bucket has a default of its
// own for them (one that differs from the bucket's) take that default first: the tuner measures
// aligned rows only.
// `pairs`: the call's batch x query heads, which configs/defaults.yaml's max_bh matches (0: the
// bucket's, key.problem.bh_bucket). A tuned winner was timed at the bucket's boundary: where
// the call's own count has another default than the boundary's (tuner::pairs_default), that
// default serves it ahead of the winner; elsewhere the winner serves the whole bucket.
// `sms`: the SMs the call runs on (the device's, or its green context's partition; 0: as
// configs/defaults.yaml's max_bh edges were measured), which scale those edges
// (tuner::pairs_at_measured_sms).
// A paged key (key.problem.paged: a paged call without a window or variable-length queries) asks
// the paged entries (kv8: those for FP8 pages too) for its defaults, and no rows16 entry; a
// variable-length or window key the varlen / window entries (tuner::key_default). Such a key's
// winner whose kernel does not serve it (tuner::serves: a database edited by hand) is not served:
// the default is, and `miss` says why.
Choice choose(tuner::WinnerLookup& lookup, const tuner::WinnerKey& key, const std::string& arch, bool explain,
              bool rows16 = false, int pairs = 0, int sms = 0);

struct ObtainOptions {
  std::string arch;        // compile target
  std::string cache_dir;   // cubin cache; empty: tuner::default_cache_dir()
  bool jit_disabled = false;
  std::string what;        // "<bucket> on <device>", for messages
};
struct Obtained {
  std::string cubin;
  std::string from;        // "cubin cache" or "JIT compile"
  std::string hash;        // compiler content hash
  bool compiled = false;   // NVRTC ran in this call
  double compile_ms = 0;
  std::string note;        // a degraded path taken (cache not writable...), or empty
};
// The cubin of `v` from the cubin cache, else compiled by NVRTC (unless opts.jit_disabled:
// then Error(jit_disabled) naming the variant and the sage-tune command that compiles it).
// Across processes the compile is guarded by a lock file <cache>/locks/<hash>.lock and the
// cache is checked again once the lock is held, so that processes starting together on a cold
// cache compile once. Throws Error(compile_failed) with the compiler's error lines.
Obtained obtain(const gen::Variant& v, const ObtainOptions& opts);

// NVRTC compiles run by obtain() in this process.
std::uint64_t compile_count();
void reset_compile_count();

}  // namespace sage::rt::jit
