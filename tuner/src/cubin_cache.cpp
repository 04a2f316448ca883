#include "cubin_cache.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "sage/common/error.h"
#include "sage/common/sha256.h"
#include "sage/common/strings.h"

namespace sage::tuner::detail {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Bumped when the metadata's meaning changes; other versions read as a miss.
constexpr int kFormat = 1;

json to_json(const KernelResources& k) {
  return json{{"kernel", k.kernel},           {"entry", k.entry},
              {"registers", k.registers},     {"spill_stores", k.spill_stores},
              {"spill_loads", k.spill_loads}, {"stack_frame", k.stack_frame},
              {"smem_static", k.smem_static}, {"cmem0", k.cmem0},
              {"barriers", k.barriers},       {"ptxas_ms", k.ptxas_ms},
              {"notes", k.notes}};
}

KernelResources kernel_from_json(const json& j) {
  KernelResources k;
  k.kernel = j.at("kernel").get<std::string>();
  k.entry = j.at("entry").get<bool>();
  k.registers = j.at("registers").get<int>();
  k.spill_stores = j.at("spill_stores").get<int>();
  k.spill_loads = j.at("spill_loads").get<int>();
  k.stack_frame = j.at("stack_frame").get<int>();
  k.smem_static = j.at("smem_static").get<int>();
  k.cmem0 = j.at("cmem0").get<int>();
  k.barriers = j.at("barriers").get<int>();
  k.ptxas_ms = j.at("ptxas_ms").get<double>();
  k.notes = j.at("notes").get<std::vector<std::string>>();
  return k;
}

}  // namespace

std::string CubinCache::path(const std::string& key, const char* ext) const {
  return cat(dir_, "/", key.substr(0, 2), "/", key, ext);
}

std::optional<CacheEntry> CubinCache::load(const std::string& key, bool want_ptx,
                                           std::string* note) const {
  const std::string meta_path = path(key, ".json");
  std::error_code ec;
  if (!fs::exists(meta_path, ec)) return std::nullopt;
  auto miss = [&](const std::string& why) -> std::optional<CacheEntry> {
    if (note) *note = why;
    return std::nullopt;
  };
  CacheEntry e;
  std::string cubin_sha, ptx_sha;
  try {
    json j = json::parse(read_file(meta_path));
    if (j.at("format").get<int>() != kFormat) return std::nullopt;  // another version's entry
    e.key = j.at("key").get<std::string>();
    if (e.key != key) return miss(cat("cache entry ", meta_path, " is for key ", e.key, ": ignored"));
    e.name = j.at("name").get<std::string>();
    e.arch = j.at("arch").get<std::string>();
    e.options = j.at("options").get<std::vector<std::string>>();
    e.nvrtc_version = j.at("nvrtc_version").get<std::string>();
    e.nvrtc_build = j.at("nvrtc_build").get<std::string>();
    e.log = j.at("log").get<std::string>();
    e.build_ms = j.at("build_ms").get<double>();
    for (const auto& k : j.at("kernels")) e.kernels.push_back(kernel_from_json(k));
    cubin_sha = j.at("cubin_sha256").get<std::string>();
    if (j.contains("ptx_sha256")) ptx_sha = j.at("ptx_sha256").get<std::string>();
  } catch (const json::exception& ex) {
    return miss(cat("cache metadata ", meta_path, " is unreadable (", ex.what(), ")"));
  } catch (const Error& ex) {
    return miss(cat("cache metadata ", meta_path, " is unreadable (", ex.what(), ")"));
  }
  try {
    e.cubin = read_file(path(key, ".cubin"));
  } catch (const Error& ex) {
    return miss(cat("cache entry ", meta_path, " has no readable cubin (", ex.what(), ")"));
  }
  if (sha256_hex(e.cubin) != cubin_sha)
    return miss(cat("cached cubin ", path(key, ".cubin"), " does not match the sha256 in its metadata"));
  if (want_ptx) {
    if (ptx_sha.empty()) return std::nullopt;  // compiled without keep_ptx: not damaged
    try {
      e.ptx = read_file(path(key, ".ptx"));
    } catch (const Error& ex) {
      return miss(cat("cache entry ", meta_path, " has no readable PTX (", ex.what(), ")"));
    }
    if (sha256_hex(e.ptx) != ptx_sha)
      return miss(cat("cached PTX ", path(key, ".ptx"), " does not match the sha256 in its metadata"));
  }
  return e;
}

void CubinCache::store(const CacheEntry& e) const {
  std::error_code ec;
  const std::string sub = cat(dir_, "/", e.key.substr(0, 2));
  fs::create_directories(sub, ec);
  if (ec) throw Error(Errc::io_error, "cannot create the cubin cache folder: " + ec.message(), sub);
  json kernels = json::array();
  for (const auto& k : e.kernels) kernels.push_back(to_json(k));
  json j{{"format", kFormat},
         {"key", e.key},
         {"name", e.name},
         {"arch", e.arch},
         {"options", e.options},
         {"nvrtc_version", e.nvrtc_version},
         {"nvrtc_build", e.nvrtc_build},
         {"log", e.log},
         {"kernels", kernels},
         {"build_ms", e.build_ms},
         {"cubin_bytes", e.cubin.size()},
         {"cubin_sha256", sha256_hex(e.cubin)}};
  // Data files first, metadata last: the metadata is what makes an entry visible.
  write_file_atomic(path(e.key, ".cubin"), e.cubin);
  if (!e.ptx.empty()) {
    write_file_atomic(path(e.key, ".ptx"), e.ptx);
    j["ptx_sha256"] = sha256_hex(e.ptx);
  }
  write_file_atomic(path(e.key, ".json"), j.dump(2) + "\n");
}

}  // namespace sage::tuner::detail
