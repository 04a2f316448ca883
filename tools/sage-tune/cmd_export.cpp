// sage-tune export: the winners of a tune database, and the defaults of configs/defaults.yaml
// for their architectures (or --arch), as C++ for a static runtime build. Writes into DIR:
//   sage_tuned_kernels.cpp  every kernel's cubin as a byte array, the winners' table and the
//                           defaults' entries (sage::rt::static_table(),
//                           runtime/include/sage/internal/static_table.h)
//   sage_tuned.cmake        what the runtime's CMake includes for -DSAGE_TUNED_KERNELS=DIR
//   manifest.json           what was exported and what was skipped, and why
// A runtime built with -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=DIR serves the winners'
// buckets, and with the defaults every call a JIT build serves at the exported architectures and
// head dims (variable-length batches, windows, paged caches, untuned buckets), choosing as a JIT
// build does; with no NVRTC and no database.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>

#include "sage/common/archs.h"
#include "sage/common/embedded.h"
#include "sage/common/paged.h"
#include "sage/common/sha256.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/compiler.h"
#include "sage/internal/static_table.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct ExportOptions {
  store::DbOption db;
  std::string out;
  std::vector<std::string> archs;
  std::vector<int> head_dims;  // empty: every head dim
  bool no_defaults = false;
  bool defaults_only = false;
  bool lineinfo = false;  // the defaults' cubins with -lineinfo (profilers' source lines)
  unsigned jobs = 0;
  bool json = false;
};

// A defaults.yaml entry of an exported architecture with its compiled kernel.
struct DefaultItem {
  std::string arch;
  const tuner::DefaultEntry* entry;
  std::string variant;
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

// The head dims the kernels have (every architecture's defaults name them).
std::set<int> kernel_head_dims() {
  std::set<int> dims;
  for (const std::string& a : tuner::supported_archs())
    for (const tuner::DefaultEntry& e : tuner::default_entries(a)) dims.insert(e.rule.head_dim);
  return dims;
}

std::string rule_text(const DefaultRule& r) {
  return cat("{", r.head_dim, ", ", r.paged, ", ", r.window, ", ", r.varlen, ", ", r.kv8, ", ", r.dense, ", ", r.max_seq_kv, ", ", r.max_seq_q, ", ",
             r.min_seq_q, ", ", r.max_bh, ", ", r.causal, ", ", r.rows16, ", ", c_string(std::string(r.policies)), "}");
}

int run_export(const ExportOptions& o) {
  for (const auto& a : o.archs)
    if (!tuner::is_supported_arch(a))
      throw Error(Errc::invalid_argument,
                  cat("--arch ", a, " is not a target (expected one of ", join(tuner::supported_archs(), ", "), ")"));
  if (o.defaults_only && o.no_defaults)
    throw Error(Errc::invalid_argument, "--defaults-only and --no-defaults exclude each other");
  if (o.defaults_only && o.archs.empty())
    throw Error(Errc::invalid_argument, cat("--defaults-only needs --arch: the architectures whose defaults to export (",
                                            target_archs_text(), ")"));
  if (!o.head_dims.empty()) {
    const std::set<int> dims = kernel_head_dims();
    std::string list;
    for (int d : dims) list += (list.empty() ? "" : ", ") + std::to_string(d);
    for (int d : o.head_dims)
      if (!dims.count(d))
        throw Error(Errc::invalid_argument, cat("--head-dim ", d, " is not a kernels' head dim (", list,
                                                "): a call of a smaller head dim runs the next one's kernels"));
  }
  auto wanted_dim = [&](int d) {
    return o.head_dims.empty() || std::find(o.head_dims.begin(), o.head_dims.end(), d) != o.head_dims.end();
  };
  const std::string path = o.defaults_only ? std::string() : o.db.resolve();
  std::optional<tuner::Store> s;
  if (!o.defaults_only) s.emplace(store::open_for_read(path, o.db.is_system()));
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
  for (const tuner::Winner& w : s ? s->winners() : std::vector<tuner::Winner>{}) {
    std::string arch;
    try {
      arch = tuner::arch_for_cc(w.key.device.cc);
    } catch (const Error& e) {
      skip(w, e.message());
      continue;
    }
    if (!o.archs.empty() && std::find(o.archs.begin(), o.archs.end(), arch) == o.archs.end()) continue;
    if (!wanted_dim(w.key.problem.head_dim)) continue;
    if (w.key.generator_hash != gen_hash) {
      skip(w, cat("tuned with another generator (", w.key.generator_hash.substr(0, 12), ", this build ", gen_hash.substr(0, 12),
                  "): its kernels may not match this tree's launcher; tune again"));
      continue;
    }
    const tuner::ProblemKey& pk = w.key.problem;
    const int q_bucket = pk.paged ? paged_seq_q_bucket(pk.seq_q_bucket, problems.seq_bucket(pk.seq_q_bucket))
                                  : problems.seq_bucket(pk.seq_q_bucket);
    if (q_bucket != pk.seq_q_bucket || problems.seq_bucket(pk.seq_kv_bucket) != pk.seq_kv_bucket ||
        problems.bh_bucket(pk.bh_bucket) != pk.bh_bucket) {
      skip(w, "its buckets are not boundaries of configs/problems.yaml: no call would map to it");
      continue;
    }
    const gen::Variant* v = variant(arch, w.variant);
    if (!v) {
      skip(w, cat("not a variant of this build's search space for ", arch));
      continue;
    }
    if (!tuner::serves(tuner::kernel_config(*v), pk)) {
      skip(w, "its kernel " + tuner::not_served_why(tuner::kernel_config(*v), pk));
      continue;
    }
    if (!cubins.count(w.kernel_hash)) {
      std::optional<tuner::KernelRecord> k;
      try {
        k = s->kernel(w.kernel_hash);
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
  const std::string dims_text = o.head_dims.empty() ? std::string() : cat(" at head dim ", ints(o.head_dims));
  if (chosen.empty() && !o.defaults_only && (o.no_defaults || o.archs.empty()))
    throw Error(Errc::not_found,
                cat("no winner to export", o.archs.empty() ? "" : " for " + join(o.archs, ", "), dims_text,
                    skipped.empty() ? std::string(" (the database has none)")
                                    : cat(" (", skipped.size(), " skipped; see --json)"),
                    o.no_defaults ? "" : "; name --arch to export the architecture's defaults without winners"),
                path);

  // The defaults: every entry of each architecture's list (its continuation's too) at the
  // exported head dims, in order, so that the static runtime walks them as the JIT build does.
  std::vector<std::string> default_archs;
  if (!o.no_defaults) {
    default_archs = o.archs;
    for (const auto& [k, it] : chosen)
      if (std::find(default_archs.begin(), default_archs.end(), it.arch) == default_archs.end())
        default_archs.push_back(it.arch);
  }
  std::vector<DefaultItem> defaults;
  std::map<std::string, std::map<std::string, std::string>> default_cubins;  // arch -> variant -> cubin
  nlohmann::json missing_dims = nlohmann::json::array();
  for (const std::string& arch : default_archs) {
    std::set<int> dims_here;
    for (const tuner::DefaultEntry& e : tuner::default_entries(arch)) {
      if (!wanted_dim(e.rule.head_dim)) continue;
      std::optional<std::string> v = tuner::entry_variant(arch, e);
      if (!v)
        throw Error(Errc::internal, cat("configs/defaults.yaml line ", e.line, " (", e.list, ": ", e.conditions,
                                        ") names no variant of the search space for ", arch));
      defaults.push_back({arch, &e, *v});
      default_cubins[arch][*v];
      dims_here.insert(e.rule.head_dim);
    }
    for (int d : o.head_dims)
      if (!dims_here.count(d)) missing_dims.push_back({{"arch", arch}, {"head_dim", d}});
  }
  // Compile them (the cubin cache answers the ones compiled before). Without -lineinfo unless
  // asked: the same machine code, about half the bytes (the line tables and the PTX text that
  // profilers map it to).
  std::size_t to_compile = 0;
  for (const auto& [arch, vs] : default_cubins) to_compile += vs.size();
  if (to_compile) {
    tuner::CompileOptions base;
    base.lineinfo = o.lineinfo;
    const tuner::VariantBuilder renderer(base);
    ProgressBar bar("compile defaults", to_compile, !o.json);
    std::size_t before = 0;
    for (auto& [arch, vs] : default_cubins) {
      std::vector<tuner::CompileJob> jobs;
      for (const auto& [name, cubin] : vs) {
        const gen::Variant* v = variant(arch, name);
        if (!v) throw Error(Errc::internal, cat("default variant ", name, " is not in the search space for ", arch));
        jobs.push_back({name, renderer.render(*v)});
      }
      tuner::CompileOptions co = base;
      co.arch = arch;
      const std::vector<tuner::CompileResult> rs =
          tuner::compile_all(jobs, co, o.jobs, [&](const tuner::Progress& p) { bar.update(before + p.done, p.last); });
      before += rs.size();
      for (const tuner::CompileResult& r : rs) {
        if (!r.ok)
          throw Error(Errc::compile_failed, cat("default variant ", r.name, " failed to compile for ", arch, ":\n",
                                                join(tuner::error_lines(r.log), "\n")),
                      r.name);
        vs[r.name] = r.cubin;
      }
    }
    bar.finish();
  }

  // Every distinct cubin once, by content.
  std::map<std::string, std::string> used;     // sha256 -> cubin
  std::map<std::string, std::string> sha_of;   // kernel hash -> sha256 of its cubin
  for (const auto& [k, it] : chosen)
    if (!sha_of.count(it.kernel_hash)) {
      const std::string sha = sha256_hex(cubins[it.kernel_hash]);
      sha_of[it.kernel_hash] = sha;
      used[sha] = std::move(cubins[it.kernel_hash]);
    }
  std::map<std::string, std::string> default_sha;  // "arch|variant" -> sha256
  for (auto& [arch, vs] : default_cubins)
    for (auto& [name, cubin] : vs) {
      const std::string sha = sha256_hex(cubin);
      default_sha[cat(arch, "|", name)] = sha;
      if (!used.count(sha)) used[sha] = std::move(cubin);
    }

  // ---- sage_tuned_kernels.cpp ----
  std::size_t cubin_bytes = 0;
  for (const auto& [h, c] : used) cubin_bytes += c.size();
  std::string src;
  src.reserve(cubin_bytes * 4 + 65536);
  src += "// generated by `sage-tune export` -- do not edit.\n";
  src += cat("// Source database: ", o.defaults_only ? std::string("(none: defaults only)") : path, "\n// Generator: ", gen_hash,
             "\n// ", chosen.size(), " winners and ", defaults.size(), " defaults.yaml entries for static builds: ",
             "cmake -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=<this folder>\n");
  src += "#include \"sage/internal/static_table.h\"\n\nnamespace {\n\n";
  std::map<std::string, std::string> array_of;  // sha256 -> array name
  int n = 0;
  for (const auto& [sha, c] : used) {
    const std::string name = cat("kCubin", n++);
    array_of[sha] = name;
    src += cat("// cubin ", sha, " (", c.size(), " bytes)\n");
    // cuModuleLoadData reads the image in place: keep it aligned like a heap copy would be.
    src += cat("alignas(64) const unsigned char ", name, "[] =\n");
    append_bytes(src, c);
    src += "    ;\n\n";
  }
  src += cat("const int kSeqBuckets[] = {", ints(problems.seq_buckets), "};\n");
  src += cat("const int kBhBuckets[] = {", ints(problems.bh_buckets), "};\n\n");
  if (!chosen.empty()) {
    src += "const sage::rt::StaticKernel kKernels[] = {\n";
    for (const auto& [k, it] : chosen) {
      const std::string& sha = sha_of[it.kernel_hash];
      const std::string& arr = array_of[sha];
      src += cat("    {", c_string(it.winner.key.problem.str()), ", ", c_string(it.arch), ", ",
                 c_string(it.winner.key.device.name), ",\n     ", c_string(it.variant), ",\n     ", c_string(it.config),
                 ",\n     ", arr, ", sizeof(", arr, ") - 1, ", c_string(sha), "},\n");
    }
    src += "};\n\n";
  }
  std::map<std::string, int> default_kernel_index;  // "arch|variant" -> kDefaultKernels index
  if (!defaults.empty()) {
    src += "const sage::rt::StaticCubin kDefaultKernels[] = {\n";
    int i = 0;
    for (const auto& [arch, vs] : default_cubins)
      for (const auto& [name, cubin] : vs) {
        const std::string key = cat(arch, "|", name);
        const std::string& sha = default_sha[key];
        const std::string& arr = array_of[sha];
        default_kernel_index[key] = i++;
        src += cat("    {", c_string(name), ",\n     ", c_string(tuner::kernel_config(*variant(arch, name)).str()), ",\n     ",
                   arr, ", sizeof(", arr, ") - 1, ", c_string(sha), "},\n");
      }
    src += "};\n\n// configs/defaults.yaml's entries, each architecture's in its order.\n";
    src += "const sage::rt::StaticDefault kDefaults[] = {\n";
    for (const DefaultItem& d : defaults)
      src += cat("    {", c_string(d.arch), ", ", rule_text(d.entry->rule), ",\n     ", c_string(d.entry->conditions), ", ",
                 d.entry->line, ", &kDefaultKernels[", default_kernel_index[cat(d.arch, "|", d.variant)], "]},\n");
    src += "};\n\n";
  }
  std::vector<std::pair<std::string, int>> measured;
  for (const std::string& arch : default_archs)
    if (const int m = tuner::measured_sms(arch)) measured.emplace_back(arch, m);
  if (!measured.empty()) {
    src += "const sage::rt::StaticMeasuredSms kMeasuredSms[] = {\n";
    for (const auto& [arch, m] : measured) src += cat("    {", c_string(arch), ", ", m, "},\n");
    src += "};\n\n";
  }
  src += "}  // namespace\n\nnamespace sage::rt {\n\n";
  src += cat("static_assert(kStaticTableFormat == ", rt::kStaticTableFormat,
             ", \"exported by another sage-tune: export again with this tree\");\n\n");
  src += "const StaticTable& static_table() {\n";
  src += cat("  static const StaticTable t{kSeqBuckets, ", problems.seq_buckets.size(), ", kBhBuckets, ", problems.bh_buckets.size(),
             ", ", chosen.empty() ? "nullptr" : "kKernels", ", ", chosen.size(), ",\n                              ",
             c_string(path), ", ", c_string(gen_hash), ",\n                              ",
             defaults.empty() ? "nullptr" : "kDefaults", ", ", defaults.size(), ", ",
             measured.empty() ? "nullptr" : "kMeasuredSms", ", ", measured.size(), "};\n");
  src += "  return t;\n}\n\n}  // namespace sage::rt\n";

  std::vector<std::string> arch_list;
  for (const auto& [k, it] : chosen)
    if (std::find(arch_list.begin(), arch_list.end(), it.arch) == arch_list.end()) arch_list.push_back(it.arch);
  for (const std::string& a : default_archs)
    if (std::find(arch_list.begin(), arch_list.end(), a) == arch_list.end()) arch_list.push_back(a);
  std::size_t default_kernels = 0;
  for (const auto& [arch, vs] : default_cubins) default_kernels += vs.size();
  const std::string cmake =
      cat("# generated by `sage-tune export` -- do not edit. Included by runtime/CMakeLists.txt for\n",
          "# -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=<this folder>.\n",
          "set(SAGE_TUNED_SOURCES \"${CMAKE_CURRENT_LIST_DIR}/sage_tuned_kernels.cpp\")\n",
          "set(SAGE_TUNED_FORMAT ", rt::kStaticTableFormat, ")\n",
          "set(SAGE_TUNED_KERNEL_COUNT ", chosen.size(), ")\n",
          "set(SAGE_TUNED_DEFAULT_COUNT ", defaults.size(), ")\n",
          "set(SAGE_TUNED_DEFAULT_KERNEL_COUNT ", default_kernels, ")\n",
          "set(SAGE_TUNED_ARCHS \"", join(arch_list, ";"), "\")\n",
          "set(SAGE_TUNED_ABI_SHA256 \"", abi_sha256(), "\")\n");

  nlohmann::json kernels = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (const auto& [k, it] : chosen) {
    const std::size_t bytes = used[sha_of[it.kernel_hash]].size();
    kernels.push_back({{"bucket", it.winner.key.problem.str()}, {"arch", it.arch}, {"device", it.winner.key.device.name},
                       {"variant", it.variant}, {"kernel_hash", it.kernel_hash}, {"cubin_bytes", bytes}});
    rows.push_back({it.arch, it.winner.key.device.name, it.winner.key.problem.str(), it.variant,
                    store::bytes(std::int64_t(bytes))});
  }
  nlohmann::json dj = nlohmann::json::array();
  std::map<std::string, std::pair<std::set<int>, std::size_t>> per_arch;  // arch -> head dims, entries
  for (const DefaultItem& d : defaults) {
    dj.push_back({{"arch", d.arch}, {"line", d.entry->line}, {"list", d.entry->list}, {"conditions", d.entry->conditions},
                  {"variant", d.variant}, {"cubin_bytes", used[default_sha[cat(d.arch, "|", d.variant)]].size()}});
    per_arch[d.arch].first.insert(d.entry->rule.head_dim);
    ++per_arch[d.arch].second;
  }
  nlohmann::json manifest = {{"db", path},
                             {"generator_hash", gen_hash},
                             {"abi_sha256", abi_sha256()},
                             {"format", rt::kStaticTableFormat},
                             {"defaults_lineinfo", o.lineinfo},
                             {"kernels", kernels},
                             {"skipped", skipped},
                             {"defaults", dj},
                             {"default_kernels", default_kernels},
                             {"head_dims_without_defaults", missing_dims},
                             {"cubin_bytes", cubin_bytes},
                             {"seq_buckets", problems.seq_buckets},
                             {"bh_buckets", problems.bh_buckets}};

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
  if (!rows.empty()) store::print_table(std::cout, {"ARCH", "DEVICE", "PROBLEM", "VARIANT", "CUBIN"}, rows);
  if (!per_arch.empty()) {
    std::vector<std::vector<std::string>> drows;
    for (const auto& [arch, x] : per_arch) {
      std::vector<int> dims(x.first.begin(), x.first.end());
      drows.push_back({arch, ints(dims), std::to_string(x.second), std::to_string(default_cubins[arch].size())});
    }
    if (!rows.empty()) std::cout << "\n";
    store::print_table(std::cout, {"DEFAULTS", "HEAD DIMS", "ENTRIES", "KERNELS"}, drows);
  }
  std::cout << "\nexported " << chosen.size() << " winners";
  if (!o.no_defaults) std::cout << " and " << defaults.size() << " defaults (" << default_kernels << " kernels)";
  std::cout << ", " << used.size() << " distinct cubins, " << store::bytes(std::int64_t(cubin_bytes));
  if (!o.defaults_only) std::cout << ", from " << path;
  std::cout << " to " << o.out << "\n";
  for (const auto& m : missing_dims)
    std::cout << "note: " << m["arch"].get<std::string>() << " has no defaults at head dim " << m["head_dim"].get<int>()
              << " (no kernel of that head dim runs there)\n";
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
    "export", "Write a database's winners and their architectures' defaults as C++ (embedded cubins + dispatch tables) for a static runtime build",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<ExportOptions>();
      o->db.add(sub);
      sub.add_option("--out,-o", o->out, "output folder (created if missing; its three files are replaced)")->required();
      sub.add_option("--arch", o->archs,
                     cat("only winners of this architecture (", target_archs_text(),
                         "), and its defaults even where it has no winner; repeatable"));
      sub.add_option("--head-dim", o->head_dims, "only winners and defaults of this kernels' head dim (64, 128, 256); repeatable");
      sub.add_flag("--no-defaults", o->no_defaults,
                   "the winners alone: calls of other buckets (and variable-length, window and paged calls) answer "
                   "SAGE_ERR_NOT_IN_BUILD");
      sub.add_flag("--defaults-only", o->defaults_only, "no database: the defaults of --arch alone");
      sub.add_option("-j,--jobs", o->jobs, "parallel compiles of the defaults (default: one per CPU)");
      sub.add_flag("--lineinfo", o->lineinfo,
                   "compile the defaults with -lineinfo (source lines for Nsight Compute; about 3.7x the bytes, the same machine code)");
      sub.add_flag("--json", o->json, "print the manifest as JSON");
      return [o] { return run_export(*o); };
    },
    55);

}  // namespace
}  // namespace sage::cli
