// The on-disk cubin cache (private to the compile service).
//
// Layout: <dir>/<key[0:2]>/<key>.cubin, <key>.json (metadata) and, when PTX was kept,
// <key>.ptx. Every file is written atomically (temp file + rename), the cubin before the
// metadata, so a reader sees either no entry or whole files. The metadata holds the sha256
// of the cubin (and PTX): a file replaced or damaged behind the metadata's back, or two
// processes' writes interleaving, reads as a miss with a note, never as a wrong cubin.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sage/tuner/compiler.h"

namespace sage::tuner::detail {

struct CacheEntry {
  std::string key;
  std::string name;                  // the variant that first produced it
  std::string arch;
  std::vector<std::string> options;  // NVRTC options
  std::string nvrtc_version;         // "13.0"
  std::string nvrtc_build;           // "13.0.88 CL-36424714"
  std::string log;
  std::vector<KernelResources> kernels;
  double build_ms = 0;               // the original NVRTC compile
  std::string cubin;
  std::string ptx;                   // may be empty
};

class CubinCache {
 public:
  explicit CubinCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // The entry stored under `key` (with its PTX when want_ptx), or nullopt. An entry that is
  // present but unusable (unreadable metadata, missing or mismatching cubin) is a miss, and
  // *note says what was wrong with which file.
  std::optional<CacheEntry> load(const std::string& key, bool want_ptx, std::string* note) const;
  // Writes the entry; throws Error(io_error) naming the path when the folder is not writable.
  void store(const CacheEntry& e) const;

  std::string path(const std::string& key, const char* ext) const;

 private:
  std::string dir_;
};

}  // namespace sage::tuner::detail
