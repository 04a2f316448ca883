// sage-tune export: the winners of a tune database as C++ for a static runtime build. Writes
// into DIR:
//   sage_tuned_kernels.cpp  every winner's cubin as a byte array and the dispatch table
//                           (sage::rt::static_table(), runtime/include/sage/internal/static_table.h)
//   sage_tuned.cmake        what the runtime's CMake includes for -DSAGE_TUNED_KERNELS=DIR
//   manifest.json           what was exported and what was skipped, and why
// A runtime built with -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=DIR serves exactly these
// buckets, with no NVRTC and no database.
#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "sage/common/archs.h"
#include "sage/common/embedded.h"
#include "sage/common/sha256.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/variants.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct ExportOptions {
  store::DbOption db;
  std::string out;
  std::vector<std::string> archs;
  bool json = false;
};

struct Item {
  tuner::Winner winner;
  std::string arch;
  std::string variant;
  std::string config;       // KernelConfig::str()
  std::string kernel_hash;
};

// A C++ string literal for arbitrary text (names, paths).
std::string c_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);  // octal: at most 3 digits, never greedy
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// Bytes as a string literal split over lines, each byte a \xHH escape. GCC and Clang read a
// multi-megabyte string literal far faster than a brace list of as many integers.
void append_bytes(std::string& out, const std::string& bytes) {
  static const char* hex = "0123456789abcdef";
  for (std::size_t i = 0; i < bytes.size(); i += 32) {
    out += "    \"";
    for (std::size_t j = i; j < std::min(bytes.size(), i + 32); ++j) {
      const unsigned char c = static_cast<unsigned char>(bytes[j]);
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
    out += "\"\n";
  }
  if (bytes.empty()) out += "    \"\"\n";
}

std::string ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

// sha256 of the kernel ABI header as embedded in this build; the runtime's CMake compares it
// with the file in the tree that builds the static runtime.
std::string abi_sha256() {
  const EmbeddedFile* f = embedded_templates::find("include/sage/params.h");
  if (!f) throw Error(Errc::internal, "templates/include/sage/params.h is not embedded in this build");
  return sha256_hex(f->view());
}

int run_export(const ExportOptions& o) {
  for (const auto& a : o.archs)
    if (!tuner::is_supported_arch(a))
      throw Error(Errc::invalid_argument,
                  cat("--arch ", a, " is not a target (expected one of ", join(tuner::supported_archs(), ", "), ")"));
  const std::string path = o.db.resolve();
  tuner::Store s = store::open_for_read(path, o.db.is_system());
  const std::string gen_hash = tuner::generator_hash();
  const tuner::ProblemsConfig problems = tuner::ProblemsConfig::builtin();
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  std::map<std::string, std::vector<gen::Variant>> variants;  // per arch
  auto variant = [&](const std::string& arch, const std::string& name) -> const gen::Variant* {
    auto it = variants.find(arch);
    if (it == variants.end()) {
      gen::EnumerateOptions eo;
      eo.archs = {arch};
      it = variants.emplace(arch, space.enumerate(eo).variants).first;
    }
    for (const auto& v : it->second)
      if (v.name == name) return &v;
    return nullptr;
  };

  std::map<std::string, Item> chosen;         // "arch|device|bucket" -> winner
  std::map<std::string, std::string> cubins;  // kernel hash -> cubin (shared by buckets)
  nlohmann::json skipped = nlohmann::json::array();
  auto skip = [&](const tuner::Winner& w, const std::string& why) {
    skipped.push_back({{"device", w.key.device.key()}, {"bucket", w.key.problem.str()}, {"variant", w.variant}, {"why", why}});
  };
  for (const tuner::Winner& w : s.winners()) {
    std::string arch;
    try {
      arch = tuner::arch_for_cc(w.key.device.cc);
    } catch (const Error& e) {
      skip(w, e.message());
      continue;
    }
    if (!o.archs.empty() && std::find(o.archs.begin(), o.archs.end(), arch) == o.archs.end()) continue;
    if (w.key.generator_hash != gen_hash) {
      skip(w, cat("tuned with another generator (", w.key.generator_hash.substr(0, 12), ", this build ", gen_hash.substr(0, 12),
                  "): its kernels may not match this tree's launcher; tune again"));
      continue;
    }
    const tuner::ProblemKey& pk = w.key.problem;
    if (problems.seq_bucket(pk.seq_q_bucket) != pk.seq_q_bucket || problems.seq_bucket(pk.seq_kv_bucket) != pk.seq_kv_bucket ||
        problems.bh_bucket(pk.bh_bucket) != pk.bh_bucket) {
      skip(w, "its buckets are not boundaries of configs/problems.yaml: no call would map to it");
      continue;
    }
    const gen::Variant* v = variant(arch, w.variant);
    if (!v) {
      skip(w, cat("not a variant of this build's search space for ", arch));
      continue;
    }
    if (!cubins.count(w.kernel_hash)) {
      std::optional<tuner::KernelRecord> k;
      try {
        k = s.kernel(w.kernel_hash);
      } catch (const Error& e) {
        skip(w, cat("its kernel is damaged: ", e.message()));
        continue;
      }
      if (!k) {
        skip(w, "its kernel " + w.kernel_hash.substr(0, 16) + " is not in the database");
        continue;
      }
      if (k->arch != arch) {
        skip(w, cat("its kernel is for ", k->arch, ", the device needs ", arch));
        continue;
      }
      cubins[w.kernel_hash] = std::move(k->cubin);
    }
    Item it{w, arch, v->name, tuner::kernel_config(*v).str(), w.kernel_hash};
    // One winner per GPU model and bucket: the latest decision (several driver or NVRTC
    // versions may each have tuned it).
    const std::string key = cat(arch, "|", w.key.device.name, "|", pk.str());
    auto [pos, fresh] = chosen.emplace(key, it);
    if (!fresh) {
      const bool newer = w.decided_at > pos->second.winner.decided_at;
      skip(newer ? pos->second.winner : w, "an older winner of the same GPU model and bucket");
      if (newer) pos->second = it;
    }
  }
  if (chosen.empty())
    throw Error(Errc::not_found, cat("no winner to export", o.archs.empty() ? "" : " for " + join(o.archs, ", "),
                                     skipped.empty() ? std::string(" (the database has none)")
                                                     : cat(" (", skipped.size(), " skipped; see --json)")),
                path);
  // Drop cubins whose only winners were replaced by newer ones.
  std::map<std::string, std::string> used;
  std::map<std::string, std::string> sha_of;  // kernel hash -> sha256 of its cubin
  for (const auto& [k, it] : chosen)
    if (!used.count(it.kernel_hash)) {
      used[it.kernel_hash] = std::move(cubins[it.kernel_hash]);
      sha_of[it.kernel_hash] = sha256_hex(used[it.kernel_hash]);
    }

  // ---- sage_tuned_kernels.cpp ----
  std::size_t cubin_bytes = 0;
  for (const auto& [h, c] : used) cubin_bytes += c.size();
  std::string src;
  src.reserve(cubin_bytes * 4 + 65536);
  src += "// generated by `sage-tune export` -- do not edit.\n";
  src += cat("// Source database: ", path, "\n// Generator: ", gen_hash, "\n// ", chosen.size(), " kernels for static builds: ",
             "cmake -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=<this folder>\n");
  src += "#include \"sage/internal/static_table.h\"\n\nnamespace {\n\n";
  std::map<std::string, std::string> array_of;  // kernel hash -> array name
  int n = 0;
  for (const auto& [h, c] : used) {
    const std::string name = cat("kCubin", n++);
    array_of[h] = name;
    src += cat("// kernel ", h, " (", c.size(), " bytes)\n");
    // cuModuleLoadData reads the image in place: keep it aligned like a heap copy would be.
    src += cat("alignas(64) const unsigned char ", name, "[] =\n");
    append_bytes(src, c);
    src += "    ;\n\n";
  }
  src += cat("const int kSeqBuckets[] = {", ints(problems.seq_buckets), "};\n");
  src += cat("const int kBhBuckets[] = {", ints(problems.bh_buckets), "};\n\n");
  src += "const sage::rt::StaticKernel kKernels[] = {\n";
  for (const auto& [k, it] : chosen) {
    const std::string& arr = array_of[it.kernel_hash];
    src += cat("    {", c_string(it.winner.key.problem.str()), ", ", c_string(it.arch), ", ", c_string(it.winner.key.device.name),
               ",\n     ", c_string(it.variant), ",\n     ", c_string(it.config), ",\n     ", arr, ", sizeof(", arr,
               ") - 1, ", c_string(sha_of[it.kernel_hash]), "},\n");
  }
  src += "};\n\n}  // namespace\n\nnamespace sage::rt {\n\n";
  src += "const StaticTable& static_table() {\n";
  src += cat("  static const StaticTable t{kSeqBuckets, ", problems.seq_buckets.size(), ", kBhBuckets, ", problems.bh_buckets.size(),
             ", kKernels, ", chosen.size(), ",\n                              ", c_string(path), ", ", c_string(gen_hash), "};\n");
  src += "  return t;\n}\n\n}  // namespace sage::rt\n";

  std::string archs;
  for (const auto& [k, it] : chosen)
    if (archs.find(it.arch) == std::string::npos) archs += (archs.empty() ? "" : ";") + it.arch;
  const std::string cmake =
      cat("# generated by `sage-tune export` -- do not edit. Included by runtime/CMakeLists.txt for\n",
          "# -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=<this folder>.\n",
          "set(SAGE_TUNED_SOURCES \"${CMAKE_CURRENT_LIST_DIR}/sage_tuned_kernels.cpp\")\n",
          "set(SAGE_TUNED_KERNEL_COUNT ", chosen.size(), ")\n", "set(SAGE_TUNED_ARCHS \"", archs, "\")\n",
          "set(SAGE_TUNED_ABI_SHA256 \"", abi_sha256(), "\")\n");

  nlohmann::json kernels = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (const auto& [k, it] : chosen) {
    kernels.push_back({{"bucket", it.winner.key.problem.str()}, {"arch", it.arch}, {"device", it.winner.key.device.name},
                       {"variant", it.variant}, {"kernel_hash", it.kernel_hash},
                       {"cubin_bytes", used[it.kernel_hash].size()}});
    rows.push_back({it.arch, it.winner.key.device.name, it.winner.key.problem.str(), it.variant,
                    store::bytes(std::int64_t(used[it.kernel_hash].size()))});
  }
  nlohmann::json manifest = {{"db", path},           {"generator_hash", gen_hash}, {"abi_sha256", abi_sha256()},
                             {"kernels", kernels},   {"skipped", skipped},         {"cubin_bytes", cubin_bytes},
                             {"seq_buckets", problems.seq_buckets}, {"bh_buckets", problems.bh_buckets}};

  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw Error(Errc::io_error, "cannot create the output folder: " + ec.message(), o.out);
  write_file_atomic(o.out + "/sage_tuned_kernels.cpp", src);
  write_file_atomic(o.out + "/sage_tuned.cmake", cmake);
  write_file_atomic(o.out + "/manifest.json", manifest.dump(2) + "\n");

  if (o.json) {
    std::cout << manifest.dump(2) << "\n";
    return kOk;
  }
  store::print_table(std::cout, {"ARCH", "DEVICE", "PROBLEM", "VARIANT", "CUBIN"}, rows);
  std::cout << "\nexported " << chosen.size() << " kernels (" << used.size() << " distinct cubins, "
            << store::bytes(std::int64_t(cubin_bytes)) << ") from " << path << " to " << o.out << "\n";
  if (!skipped.empty()) {
    std::cout << skipped.size() << " winners skipped:\n";
    for (const auto& x : skipped)
      std::cout << "  " << x["bucket"].get<std::string>() << " " << x["variant"].get<std::string>() << ": "
                << x["why"].get<std::string>() << "\n";
  }
  std::cout << "build a runtime serving them (no NVRTC, no database):\n"
            << "  cmake -S <sage-tune source> -B build-static -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS="
            << std::filesystem::absolute(o.out).string() << "\n  cmake --build build-static --target sage_runtime_shared\n";
  return kOk;
}

Registrar reg(
    "export", "Write a database's winners as C++ (embedded cubins + dispatch table) for a static runtime build",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<ExportOptions>();
      o->db.add(sub);
      sub.add_option("--out,-o", o->out, "output folder (created if missing; its three files are replaced)")->required();
      sub.add_option("--arch", o->archs, cat("only winners of this architecture (", target_archs_text(), "); repeatable"));
      sub.add_flag("--json", o->json, "print the manifest as JSON");
      return [o] { return run_export(*o); };
    },
    55);

}  // namespace
}  // namespace sage::cli
