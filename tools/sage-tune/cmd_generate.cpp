// sage-tune generate: enumerate the search space's variants; list them, explain what was
// pruned and why, or write their rendered sources.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "commands.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/gen/template.h"

namespace sage::cli {
namespace {

using gen::Enumeration;
using gen::PrunedVariant;
using gen::Variant;
using tmpl::Value;

struct GenerateOptions {
  std::vector<std::string> archs;
  std::vector<std::string> pipelines;
  std::string filter;
  std::string config;
  std::string emit_dir;
  std::string templates_dir;
  bool list = false;
  bool explain = false;
  bool json = false;
};

// ---- JSON (flat, written by hand: the output is small and fixed in shape) ---------------

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

std::string json_value(const Value& v) {
  switch (v.type()) {
    case Value::Type::none: return "null";
    case Value::Type::boolean: return v.as_bool() ? "true" : "false";
    case Value::Type::integer: return std::to_string(v.as_int());
    case Value::Type::real: {
      std::ostringstream os;
      os << std::setprecision(17) << v.as_number();
      return os.str();
    }
    case Value::Type::string: return json_string(v.as_string());
    case Value::Type::list: {
      std::vector<std::string> items;
      for (auto& x : v.as_list()) items.push_back(json_value(x));
      return "[" + join(items, ", ") + "]";
    }
    case Value::Type::map: {
      std::vector<std::string> items;
      for (auto& [k, x] : v.as_map()) items.push_back(json_string(k) + ": " + json_value(x));
      return "{" + join(items, ", ") + "}";
    }
  }
  return "null";
}

std::string json_variant(const Variant& v) {
  return cat("{\"name\": ", json_string(v.name), ", \"arch\": ", json_string(v.arch),
             ", \"pipeline\": ", json_string(v.pipeline), ", \"template\": ",
             json_string(v.template_name), ", \"params_hash\": ", json_string(v.params_hash),
             ", \"params\": ", json_value(Value(v.params)), ", \"derived\": ",
             json_value(Value(v.derived)));
}

// ---- summaries ----------------------------------------------------------------------------

// Rules in first-seen order with their counts.
std::vector<std::pair<std::string, std::size_t>> count_rules(const Enumeration& en) {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (auto& p : en.pruned) {
    auto it = std::find_if(out.begin(), out.end(), [&](auto& r) { return r.first == p.rule; });
    if (it == out.end()) out.emplace_back(p.rule, 1);
    else ++it->second;
  }
  std::stable_sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second > b.second; });
  return out;
}

std::string rule_label(const std::string& rule) {
  return rule == "filter" ? "excluded by filter" : rule;
}

std::string param_or_dash(const Variant& v, const std::string& key) {
  if (auto it = v.params.find(key); it != v.params.end()) return it->second.str();
  return "-";
}

std::string smem_kib(const Variant& v) {
  auto it = v.derived.find("smem_bytes");
  if (it == v.derived.end() || it->second.type() != Value::Type::integer) return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << double(it->second.as_int()) / 1024.0;
  return os.str();
}

// A table with columns padded to their widest cell; the last column is not padded.
void print_table(std::ostream& os, const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return;
  std::vector<std::size_t> w(rows.front().size(), 0);
  for (auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  for (auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
    }
    os << line << "\n";
  }
}

void print_list(const Enumeration& en) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "ARCH", "PIPELINE", "D", "TILE", "WARPS", "STAGES", "SMEM_KIB"}};
  for (auto& v : en.variants) {
    std::string tile = v.params.count("block_m") && v.params.count("block_n")
                           ? v.params.at("block_m").str() + "x" + v.params.at("block_n").str()
                           : "-";
    rows.push_back({v.name, v.arch, v.pipeline, param_or_dash(v, "head_dim"), tile,
                    param_or_dash(v, "warps"), param_or_dash(v, "stages"), smem_kib(v)});
  }
  print_table(std::cout, rows);
  std::map<std::string, std::size_t> per_arch;
  for (auto& v : en.variants) ++per_arch[v.arch];
  std::vector<std::string> parts;
  for (auto& [a, n] : per_arch) parts.push_back(cat(a, ": ", n));
  std::cout << en.variants.size() << " variants"
            << (parts.empty() ? "" : " (" + join(parts, ", ") + ")") << "\n";
}

void print_explain(const Enumeration& en) {
  std::size_t total = en.variants.size() + en.pruned.size();
  std::cout << "pruned " << en.pruned.size() << " of " << total << " combinations ("
            << en.variants.size() << " kept)\n";
  for (auto& [rule, n] : count_rules(en))
    std::cout << "  " << std::setw(5) << n << "  " << rule_label(rule) << "\n";
  if (en.pruned.empty()) return;
  std::cout << "\n";
  std::vector<std::vector<std::string>> rows = {{"NAME", "ARCH", "REASON"}};
  for (auto& p : en.pruned) rows.push_back({p.variant.name, p.variant.arch, p.reason});
  print_table(std::cout, rows);
}

void print_summary(const gen::SearchSpace& space, const Enumeration& en) {
  std::cout << "search space: " << space.display_name() << "\n\n";
  // pipeline -> arch -> (kept, pruned), in the space's declaration order
  std::vector<std::vector<std::string>> rows = {{"PIPELINE", "ARCH", "KEPT", "PRUNED"}};
  for (auto& p : space.pipelines()) {
    for (auto& a : space.archs()) {
      std::size_t kept = 0, pruned = 0;
      for (auto& v : en.variants) kept += v.pipeline == p && v.arch == a;
      for (auto& x : en.pruned) pruned += x.variant.pipeline == p && x.variant.arch == a;
      if (kept + pruned == 0) continue;
      rows.push_back({p, a, std::to_string(kept), std::to_string(pruned)});
    }
  }
  rows.push_back({"total", "", std::to_string(en.variants.size()), std::to_string(en.pruned.size())});
  print_table(std::cout, rows);
  auto rules = count_rules(en);
  if (!rules.empty()) {
    std::cout << "\npruned by rule:\n";
    for (auto& [rule, n] : rules) std::cout << "  " << std::setw(5) << n << "  " << rule_label(rule) << "\n";
  }
  std::cout << "\n--list shows the variants, --explain the pruned ones with reasons, --emit DIR "
               "writes their sources.\n";
}

void print_json(const gen::SearchSpace& space, const Enumeration& en,
                const std::vector<std::string>& emitted) {
  std::ostringstream os;
  os << "{\n  \"config\": " << json_string(space.display_name()) << ",\n  \"variants\": [";
  for (std::size_t i = 0; i < en.variants.size(); ++i)
    os << (i ? ",\n    " : "\n    ") << json_variant(en.variants[i]) << "}";
  os << (en.variants.empty() ? "" : "\n  ") << "],\n  \"pruned\": [";
  for (std::size_t i = 0; i < en.pruned.size(); ++i) {
    const PrunedVariant& p = en.pruned[i];
    os << (i ? ",\n    " : "\n    ") << json_variant(p.variant) << ", \"rule\": "
       << json_string(p.rule) << ", \"reason\": " << json_string(p.reason) << "}";
  }
  os << (en.pruned.empty() ? "" : "\n  ") << "],\n  \"pruned_by_rule\": {";
  auto rules = count_rules(en);
  for (std::size_t i = 0; i < rules.size(); ++i)
    os << (i ? ", " : "") << json_string(rules[i].first) << ": " << rules[i].second;
  os << "},\n  \"emitted\": [";
  for (std::size_t i = 0; i < emitted.size(); ++i) os << (i ? ", " : "") << json_string(emitted[i]);
  os << "]\n}\n";
  std::cout << os.str();
}

// Renders every kept variant into <dir>/<name>.cu. All sources are rendered before the first
// file is written, so a template error leaves the directory as it was.
std::vector<std::string> emit_sources(const Enumeration& en, const GenerateOptions& o) {
  namespace fs = std::filesystem;
  std::shared_ptr<tmpl::Loader> loader;
  if (o.templates_dir.empty()) {
    loader = tmpl::embedded_loader();
  } else {
    if (!fs::is_directory(o.templates_dir))
      throw Error(Errc::not_found, "templates directory does not exist", o.templates_dir);
    loader = tmpl::directory_loader(o.templates_dir);
  }
  tmpl::Environment env(loader);
  std::vector<std::pair<std::string, std::string>> files;
  for (auto& v : en.variants)
    files.emplace_back((fs::path(o.emit_dir) / (v.name + ".cu")).string(),
                       gen::render_variant(env, v, /*emit_header=*/true));
  std::error_code ec;
  fs::create_directories(o.emit_dir, ec);
  if (ec || !fs::is_directory(o.emit_dir))
    throw Error(Errc::io_error, "cannot create directory: " + ec.message(), o.emit_dir);
  std::vector<std::string> written;
  for (auto& [path, text] : files) {
    write_file_atomic(path, text);
    written.push_back(path);
  }
  return written;
}

int run_generate(const GenerateOptions& o) {
  gen::SearchSpace space =
      o.config.empty() ? gen::SearchSpace::builtin() : gen::SearchSpace::from_file(o.config);
  Enumeration en = space.enumerate({o.archs, o.filter, o.pipelines});
  std::vector<std::string> emitted;
  if (!o.emit_dir.empty()) emitted = emit_sources(en, o);
  if (o.json) {
    print_json(space, en, emitted);
    return kOk;
  }
  if (o.list) print_list(en);
  if (o.explain) {
    if (o.list) std::cout << "\n";
    print_explain(en);
  }
  if (!o.list && !o.explain && o.emit_dir.empty()) print_summary(space, en);
  if (!o.emit_dir.empty())
    std::cout << "wrote " << emitted.size() << " source" << (emitted.size() == 1 ? "" : "s")
              << " to " << o.emit_dir << "\n";
  return kOk;
}

Registrar reg(
    "generate",
    "Enumerate the kernel variants of the search space: list them, explain the pruned ones, "
    "or write their rendered sources",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<GenerateOptions>();
      sub.add_option("--arch", o->archs, "Architecture(s) to enumerate (repeatable or comma-"
                                         "separated; default: every arch of every pipeline)")
          ->delimiter(',');
      sub.add_option("--pipeline", o->pipelines, "Pipeline(s) to enumerate (default: all)")
          ->delimiter(',');
      sub.add_option("--filter", o->filter,
                     "Keep only variants whose name matches this ECMAScript regex (searched, "
                     "not anchored); the rest are pruned as 'excluded by filter'");
      sub.add_option("--config", o->config,
                     "Search-space YAML (default: the built-in configs/search_space.yaml)");
      sub.add_flag("--list", o->list, "List the kept variants (name, arch, pipeline, key params, smem)");
      sub.add_flag("--explain", o->explain, "List the pruned combinations with their reasons, "
                                            "grouped by rule with counts");
      sub.add_option("--emit", o->emit_dir, "Write <name>.cu for each kept variant into DIR")
          ->type_name("DIR");
      sub.add_option("--templates", o->templates_dir,
                     "Render from this templates directory instead of the embedded bundle")
          ->type_name("DIR");
      sub.add_flag("--json", o->json, "Print the enumeration (variants, pruned, counts) as JSON");
      return [o] {
        if (!o->templates_dir.empty() && o->emit_dir.empty())
          throw Error(Errc::invalid_argument, "--templates is only used with --emit DIR");
        return run_generate(*o);
      };
    },
    20);

}  // namespace
}  // namespace sage::cli
