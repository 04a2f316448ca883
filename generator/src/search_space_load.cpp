// Loading and validating configs/search_space.yaml. Every check names the place
// (file:line:col from yaml-cpp's marks) and the key path, so a typo in a 200-line file is a
// one-glance fix. Unknown keys are errors: a misspelt optional key would otherwise be
// silently ignored.
#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <yaml-cpp/yaml.h>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "search_space_impl.h"

namespace sage::gen::detail {
namespace {

using tmpl::Value;

// Names an expression may not use for an axis or derived value: the context's own keys and
// the expression language's words.
const std::set<std::string>& reserved_names() {
  static const std::set<std::string> r = {
      "arch", "pipeline", "template", "name", "params", "derived", "params_hash", "loop",
      "true", "false", "none", "and", "or", "not", "in", "if", "else", "is",
      "True", "False", "None"};
  return r;
}

bool all_of(const std::string& s, bool (*ok)(char)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), ok);
}
bool lower_or_digit(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool lower(char c) { return c >= 'a' && c <= 'z'; }
bool ident_char(char c) { return lower_or_digit(c) || c == '_'; }

// [a-z_][a-z0-9_]*: usable as a variable in expressions and templates.
bool is_identifier(const std::string& s) {
  return all_of(s, ident_char) && !(s[0] >= '0' && s[0] <= '9');
}
// sm_80, sm_90a
bool is_arch_name(const std::string& s) {
  if (!starts_with(s, "sm_") || s.size() < 5) return false;
  std::size_t i = 3;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i < 5) return false;
  return i == s.size() || (i + 1 == s.size() && lower(s[i]));
}

std::string kind_of(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

class Parser {
 public:
  explicit Parser(SearchSpace::Impl& impl) : impl_(impl), file_(impl.display_name) {}

  void run(const std::string& yaml) {
    YAML::Node root;
    try {
      root = YAML::Load(yaml);
    } catch (const YAML::Exception& e) {
      throw Error(Errc::parse_error, "malformed YAML: " + e.msg, place(e.mark));
    }
    if (!root.IsDefined() || root.IsNull())
      throw Error(Errc::parse_error, "the search space is empty", file_ + ":1:1");
    auto top = entries(root, "", {"version", "archs", "axes", "pipelines"});
    require_keys(root, "", top, {"version", "archs", "axes", "pipelines"});
    for (auto& e : top) {
      if (e.key == "version") {
        if (integer(e.value, "version") != 1)
          fail(e.value, "version", "unsupported version " + e.value.Scalar() + " (this build reads 1)");
      }
    }
    for (auto& e : top) if (e.key == "archs") parse_archs(e.value);
    for (auto& e : top) if (e.key == "axes") parse_axes(e.value);
    for (auto& e : top) if (e.key == "pipelines") parse_pipelines(e.value);
  }

 private:
  SearchSpace::Impl& impl_;
  const std::string& file_;
  std::set<std::string> features_;  // every feature some arch has

  // ---- places and errors ------------------------------------------------------------
  std::string place(const YAML::Mark& m) const {
    if (m.is_null()) return file_;
    return cat(file_, ":", m.line + 1, ":", m.column + 1);
  }
  std::string at(const YAML::Node& n) const { return place(n.Mark()); }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& msg) const {
    throw Error(Errc::parse_error, key.empty() ? msg : "key '" + key + "': " + msg, at(n));
  }
  static std::string sub(const std::string& key, const std::string& k) {
    return key.empty() ? k : key + "." + k;
  }

  // ---- structure ----------------------------------------------------------------------
  // The entries of a map in document order. Rejects non-maps, duplicate keys (yaml-cpp
  // keeps both silently) and, when `allowed` is not empty, keys outside it.
  std::vector<Entry> entries(const YAML::Node& n, const std::string& key,
                             const std::vector<std::string>& allowed) const {
    if (!n.IsMap())
      fail(n, key, "expected a map, got " + kind_of(n));
    std::vector<Entry> out;
    std::map<std::string, YAML::Node> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      YAML::Node k = it->first;
      if (!k.IsScalar()) fail(k, key, "map keys must be plain names, got " + kind_of(k));
      std::string ks = k.Scalar();
      if (auto s = seen.find(ks); s != seen.end())
        fail(k, sub(key, ks), "duplicate key (first at " + at(s->second) + ")");
      seen.emplace(ks, k);
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), ks) == allowed.end())
        fail(k, sub(key, ks), "unknown key (allowed: " + join(allowed, ", ") + ")");
      out.push_back({ks, k, it->second});
    }
    return out;
  }
  void require_keys(const YAML::Node& n, const std::string& key, const std::vector<Entry>& es,
                    std::initializer_list<const char*> required) const {
    for (const char* r : required) {
      bool found = std::any_of(es.begin(), es.end(), [&](const Entry& e) { return e.key == r; });
      if (!found) fail(n, key, std::string("missing required key '") + r + "'");
    }
  }
  static const Entry* get(const std::vector<Entry>& es, const std::string& k) {
    for (auto& e : es) if (e.key == k) return &e;
    return nullptr;
  }
  std::vector<YAML::Node> items(const YAML::Node& n, const std::string& key) const {
    if (!n.IsSequence()) fail(n, key, "expected a list, got " + kind_of(n));
    std::vector<YAML::Node> out;
    for (auto it = n.begin(); it != n.end(); ++it) out.push_back(*it);
    return out;
  }

  // ---- scalars ------------------------------------------------------------------------
  std::string str(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "expected a string, got " + kind_of(n));
    return n.Scalar();
  }
  std::int64_t integer(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "expected an integer, got " + kind_of(n));
    const std::string& s = n.Scalar();
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty())
      fail(n, key, "expected an integer, got '" + s + "'");
    return v;
  }
  bool boolean(const YAML::Node& n, const std::string& key) const {
    if (n.IsScalar()) {
      std::string s = n.Scalar();
      for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
      if (s == "true") return true;
      if (s == "false") return false;
    }
    fail(n, key, "expected true or false, got " + kind_of(n));
  }
  std::vector<std::string> string_list(const YAML::Node& n, const std::string& key) const {
    std::vector<std::string> out;
    std::size_t i = 0;
    for (auto& item : items(n, key)) {
      std::string s = str(item, cat(key, "[", i++, "]"));
      if (std::find(out.begin(), out.end(), s) != out.end())
        fail(item, key, "'" + s + "' is listed twice");
      out.push_back(s);
    }
    return out;
  }

  // A value of `ax`, typed by the axis and checked against its vocabulary.
  Value axis_value(const Axis& ax, const YAML::Node& n, const std::string& key) const {
    Value v;
    switch (ax.type) {
      case AxisType::integer: v = Value(integer(n, key)); break;
      case AxisType::boolean: v = Value(boolean(n, key)); break;
      case AxisType::enumeration: v = Value(str(n, key)); break;
    }
    if (!ax.allows(v))
      fail(n, key, "unknown value '" + (n.IsScalar() ? n.Scalar() : v.str()) +
                       "' (allowed: " + ax.allowed_list() + ")");
    return v;
  }
  // A list of values (or one scalar as shorthand for a list of one).
  std::vector<Value> axis_values(const Axis& ax, const YAML::Node& n, const std::string& key) const {
    std::vector<YAML::Node> nodes = n.IsSequence() ? items(n, key) : std::vector<YAML::Node>{n};
    if (nodes.empty()) fail(n, key, "empty list: give at least one value");
    std::vector<Value> out;
    for (auto& item : nodes) {
      Value v = axis_value(ax, item, key);
      if (std::find(out.begin(), out.end(), v) != out.end())
        fail(item, key, "value '" + v.str() + "' is listed twice");
      out.push_back(v);
    }
    return out;
  }
  const Axis& axis_named(const YAML::Node& n, const std::string& key, const std::string& name) const {
    const Axis* ax = impl_.find_axis(name);
    if (!ax) {
      std::vector<std::string> names;
      for (auto& a : impl_.axes) names.push_back(a.name);
      fail(n, key, "unknown axis '" + name + "' (declared axes: " + join(names, ", ") + ")");
    }
    return *ax;
  }

  // ---- archs --------------------------------------------------------------------------
  void parse_archs(const YAML::Node& n) {
    auto es = entries(n, "archs", {});
    if (es.empty()) fail(n, "archs", "declare at least one architecture");
    for (auto& e : es) {
      std::string key = "archs." + e.key;
      if (!is_arch_name(e.key))
        fail(e.key_node, key, "architecture names look like sm_80 or sm_90a");
      auto fs = entries(e.value, key, {"cc", "smem_max", "regs_max", "features", "description"});
      require_keys(e.value, key, fs, {"cc", "smem_max", "features"});
      ArchInfo a;
      a.name = e.key;
      for (auto& f : fs) {
        std::string k = sub(key, f.key);
        if (f.key == "cc") a.cc = int(positive(f.value, k, 1000));
        else if (f.key == "smem_max") a.smem_max = int(positive(f.value, k, 1 << 30));
        else if (f.key == "regs_max") a.regs_max = int(positive(f.value, k, 255));
        else if (f.key == "description") a.description = str(f.value, k);
        else if (f.key == "features") {
          a.features = string_list(f.value, k);
          std::size_t i = 0;
          for (auto& item : items(f.value, k)) {
            if (!is_identifier(a.features[i]))
              fail(item, k, "feature names are lower-case identifiers, got '" + a.features[i] + "'");
            features_.insert(a.features[i++]);
          }
        }
      }
      impl_.archs.push_back(std::move(a));
    }
  }
  std::int64_t positive(const YAML::Node& n, const std::string& key, std::int64_t max) const {
    std::int64_t v = integer(n, key);
    if (v <= 0 || v > max) fail(n, key, cat("expected an integer in 1..", max, ", got ", v));
    return v;
  }

  // ---- axes ---------------------------------------------------------------------------
  void parse_axes(const YAML::Node& n) {
    auto es = entries(n, "axes", {});
    for (auto& e : es) {
      std::string key = "axes." + e.key;
      if (!is_identifier(e.key) || reserved_names().count(e.key))
        fail(e.key_node, key, "axis names are lower-case identifiers and not one of the reserved "
                              "context names (arch, pipeline, name, params, derived, ...)");
      auto fs = entries(e.value, key, {"type", "values", "label", "abbrev", "join", "description"});
      require_keys(e.value, key, fs, {"type", "label"});
      Axis ax;
      ax.name = e.key;
      ax.where = at(e.key_node);
      const Entry* type = get(fs, "type");
      std::string t = str(type->value, key + ".type");
      if (t == "int") ax.type = AxisType::integer;
      else if (t == "enum") ax.type = AxisType::enumeration;
      else if (t == "bool") ax.type = AxisType::boolean;
      else fail(type->value, key + ".type", "unknown value '" + t + "' (allowed: int, enum, bool)");

      const Entry* values = get(fs, "values");
      if (!values && ax.type != AxisType::boolean)
        fail(e.value, key, "missing required key 'values' (the axis' legal vocabulary)");
      if (values) {
        std::string k = key + ".values";
        auto nodes = items(values->value, k);
        if (nodes.empty()) fail(values->value, k, "empty list: give at least one value");
        for (auto& item : nodes) {
          Value v;
          if (ax.type == AxisType::integer) {
            std::int64_t i = integer(item, k);
            if (i < 0) fail(item, k, "axis values are non-negative integers");
            v = Value(i);
          } else if (ax.type == AxisType::boolean) {
            v = Value(boolean(item, k));
          } else {
            v = Value(str(item, k));
          }
          if (ax.allows(v)) fail(item, k, "value '" + v.str() + "' is listed twice");
          ax.values.push_back(v);
        }
      } else {
        ax.values = {Value(false), Value(true)};
      }

      for (auto& f : fs) {
        std::string k = sub(key, f.key);
        if (f.key == "label") {
          ax.label = str(f.value, k);
          if (!all_of(ax.label, lower))
            fail(f.value, k, "labels are lower-case letters only (a digit would make 's' + '24' "
                             "read like 's2' + '4' in a name), got '" + ax.label + "'");
          for (auto& other : impl_.axes)
            if (other.label == ax.label)
              fail(f.value, k, "label '" + ax.label + "' is already used by axis '" + other.name + "'");
        } else if (f.key == "description") {
          ax.description = str(f.value, k);
        } else if (f.key == "abbrev") {
          if (ax.type != AxisType::enumeration) fail(f.key_node, k, "only enum axes take abbrev");
          for (auto& a : entries(f.value, k, {})) {
            if (!ax.allows(Value(a.key)))
              fail(a.key_node, sub(k, a.key), "unknown value '" + a.key + "' (allowed: " +
                                                  ax.allowed_list() + ")");
            ax.abbrev.emplace_back(a.key, str(a.value, sub(k, a.key)));
          }
        } else if (f.key == "join") {
          std::string target = str(f.value, k);
          const Axis* t = impl_.find_axis(target);
          if (!t)
            fail(f.value, k, "'" + target + "' is not an axis declared before '" + ax.name + "'");
          if (t->type == AxisType::boolean || !t->join.empty())
            fail(f.value, k, "an axis can only join an int or enum axis that does not itself join another");
          ax.join = target;
        }
      }
      // Every value must spell a name part that cannot be confused with another: '_'
      // separates parts and '-' separates a label from its value. A joined axis may spell one
      // value as nothing (its target's part then stands alone: "qk-native").
      if (ax.type == AxisType::enumeration) {
        std::set<std::string> texts;
        for (auto& v : ax.values) {
          std::string text = ax.value_text(v);
          if (!(text.empty() && !ax.join.empty()) && !all_of(text, lower_or_digit))
            fail(values->value, key + ".values",
                 "value '" + v.as_string() + "' cannot appear in variant names as it is "
                 "(only a-z and 0-9): give it an abbrev");
          if (!texts.insert(text).second)
            fail(values->value, key + ".values", "two values are both spelt '" + text + "' in names");
        }
      }
      impl_.axes.push_back(std::move(ax));
    }
  }

  // ---- pipelines ----------------------------------------------------------------------
  void parse_pipelines(const YAML::Node& n) {
    auto es = entries(n, "pipelines", {});
    if (es.empty()) fail(n, "pipelines", "declare at least one pipeline");
    for (auto& e : es) parse_pipeline(e);
  }

  void parse_pipeline(const Entry& e) {
    std::string key = "pipelines." + e.key;
    if (!is_identifier(e.key)) fail(e.key_node, key, "pipeline names are lower-case identifiers");
    auto fs = entries(e.value, key,
                      {"template", "archs", "description", "name_stem", "tile_columns", "sets",
                       "tiles", "axes", "requires", "derived", "constraints"});
    require_keys(e.value, key, fs, {"template", "archs"});
    Pipeline p;
    p.name = e.key;
    p.where = at(e.key_node);
    p.name_stem = "attn_{arch}_" + p.name;

    for (auto& f : fs) {
      std::string k = sub(key, f.key);
      if (f.key == "template") {
        p.template_name = str(f.value, k);
        if (p.template_name.empty()) fail(f.value, k, "empty template name");
      } else if (f.key == "description") {
        p.description = str(f.value, k);
      } else if (f.key == "archs") {
        p.archs = string_list(f.value, k);
        if (p.archs.empty()) fail(f.value, k, "empty list: give at least one architecture");
        auto nodes = items(f.value, k);
        for (std::size_t i = 0; i < p.archs.size(); ++i)
          if (!impl_.find_arch(p.archs[i]))
            fail(nodes[i], k, "unknown architecture '" + p.archs[i] + "' (declared in archs: " +
                                  join(arch_names(), ", ") + ")");
      } else if (f.key == "name_stem") {
        p.name_stem = str(f.value, k);
        std::string rest = p.name_stem;
        std::size_t pos = rest.find("{arch}");
        if (pos == std::string::npos || rest.find("{arch}", pos + 1) != std::string::npos)
          fail(f.value, k, "the stem must contain '{arch}' exactly once, got '" + p.name_stem + "'");
        rest.replace(pos, 6, "sm90a");
        if (!all_of(rest, ident_char) || rest.back() == '_')
          fail(f.value, k, "the stem may use a-z, 0-9 and '_' around '{arch}', got '" + p.name_stem + "'");
      } else if (f.key == "tile_columns") {
        p.tile_columns = string_list(f.value, k);
        auto nodes = items(f.value, k);
        for (std::size_t i = 0; i < nodes.size(); ++i) axis_named(nodes[i], k, p.tile_columns[i]);
        if (p.tile_columns.empty()) fail(f.value, k, "empty list");
      }
    }

    // Sets: an explicit `sets:` list, or `tiles:`/`axes:` directly on the pipeline as the
    // one-set shorthand, or neither (one variant per arch, no parameters).
    const Entry* sets = get(fs, "sets");
    const Entry* tiles = get(fs, "tiles");
    const Entry* axes = get(fs, "axes");
    if (sets && (tiles || axes))
      fail((tiles ? tiles : axes)->key_node, sub(key, tiles ? "tiles" : "axes"),
           "give either 'sets' or 'tiles'/'axes' directly on the pipeline, not both");
    if (sets) {
      auto nodes = items(sets->value, key + ".sets");
      if (nodes.empty()) fail(sets->value, key + ".sets", "empty list: give at least one set");
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        std::string sk = cat(key, ".sets[", i, "]");
        auto ss = entries(nodes[i], sk, {"name", "tiles", "axes"});
        const Entry* name = get(ss, "name");
        std::string set_name = name ? str(name->value, sk + ".name") : cat("set", i);
        for (auto& prev : p.sets)
          if (prev.name == set_name) fail(name ? name->value : nodes[i], sk + ".name",
                                          "set name '" + set_name + "' is used twice");
        p.sets.push_back(parse_set(p, set_name, sk, nodes[i], get(ss, "tiles"), get(ss, "axes")));
      }
    } else {
      p.sets.push_back(parse_set(p, "default", key, e.value, tiles, axes));
    }

    // Every set gives the same axes: a variant's name and template context must not depend
    // on which set produced it.
    const Set& first = p.sets.front();
    for (std::size_t i = 1; i < p.sets.size(); ++i) {
      auto names = [](const Set& s) {
        std::vector<std::string> v;
        for (auto& [a, vals] : s.axes) v.push_back(a);
        return v;
      };
      if (names(p.sets[i]) != names(first))
        fail(sets->value, cat(key, ".sets[", i, "].axes"),
             "set '" + p.sets[i].name + "' gives axes [" + join(names(p.sets[i]), ", ") +
                 "] but set '" + first.name + "' gives [" + join(names(first), ", ") +
                 "]; every set of a pipeline must give the same axes");
    }
    for (auto& ax : impl_.axes) {
      bool in_tiles = std::find(p.tile_columns.begin(), p.tile_columns.end(), ax.name) != p.tile_columns.end();
      bool in_axes = std::any_of(first.axes.begin(), first.axes.end(),
                                 [&](auto& a) { return a.first == ax.name; });
      if (in_tiles || in_axes) p.axes.push_back(ax.name);
    }
    for (auto& a : p.axes) {
      const Axis& ax = *impl_.find_axis(a);
      if (!ax.join.empty() && std::find(p.axes.begin(), p.axes.end(), ax.join) == p.axes.end())
        fail(e.value, key, "axis '" + a + "' is spelt as part of axis '" + ax.join +
                               "' in names, so the pipeline must give '" + ax.join + "' too");
    }

    for (auto& f : fs) {
      std::string k = sub(key, f.key);
      if (f.key == "requires") parse_requires(p, f.value, k);
      else if (f.key == "derived") parse_derived(p, f.value, k);
      else if (f.key == "constraints") parse_constraints(p, f.value, k);
    }
    impl_.pipelines.push_back(std::move(p));
  }

  std::vector<std::string> arch_names() const {
    std::vector<std::string> v;
    for (auto& a : impl_.archs) v.push_back(a.name);
    return v;
  }

  Set parse_set(const Pipeline& p, const std::string& name, const std::string& key,
                const YAML::Node& node, const Entry* tiles, const Entry* axes) const {
    Set s;
    s.name = name;
    if (tiles) {
      std::string tk = key + ".tiles";
      if (p.tile_columns.empty())
        fail(tiles->key_node, tk, "tiles need the pipeline's 'tile_columns' (e.g. [block_m, "
                                  "block_n, warps, stages])");
      auto rows = items(tiles->value, tk);
      if (rows.empty()) fail(tiles->value, tk, "empty list: give at least one tile");
      for (std::size_t r = 0; r < rows.size(); ++r) {
        std::string rk = cat(tk, "[", r, "]");
        std::vector<Value> row;
        if (rows[r].IsSequence()) {
          auto cells = items(rows[r], rk);
          if (cells.size() != p.tile_columns.size())
            fail(rows[r], rk, cat("a tile has ", p.tile_columns.size(), " values (",
                                  join(p.tile_columns, ", "), "), got ", cells.size()));
          for (std::size_t c = 0; c < cells.size(); ++c)
            row.push_back(axis_value(*impl_.find_axis(p.tile_columns[c]), cells[c],
                                     rk + "." + p.tile_columns[c]));
        } else {
          auto cells = entries(rows[r], rk, p.tile_columns);
          for (auto& col : p.tile_columns) {
            const Entry* c = get(cells, col);
            if (!c) fail(rows[r], rk, "missing tile column '" + col + "'");
            row.push_back(axis_value(*impl_.find_axis(col), c->value, rk + "." + col));
          }
        }
        if (std::find(s.tiles.begin(), s.tiles.end(), row) != s.tiles.end())
          fail(rows[r], rk, "this tile is listed twice");
        s.tiles.push_back(std::move(row));
      }
    } else if (!p.tile_columns.empty()) {
      fail(node, key, "missing required key 'tiles' (the pipeline has tile_columns)");
    }
    if (axes) {
      std::string ak = key + ".axes";
      std::vector<std::pair<std::string, std::vector<Value>>> given;
      for (auto& a : entries(axes->value, ak, {})) {
        const Axis& ax = axis_named(a.key_node, sub(ak, a.key), a.key);
        if (std::find(p.tile_columns.begin(), p.tile_columns.end(), a.key) != p.tile_columns.end())
          fail(a.key_node, sub(ak, a.key), "'" + a.key + "' is a tile column; give it in tiles");
        given.emplace_back(a.key, axis_values(ax, a.value, sub(ak, a.key)));
      }
      // canonical order: the order of the `axes:` declarations
      for (auto& ax : impl_.axes)
        for (auto& g : given)
          if (g.first == ax.name) s.axes.push_back(std::move(g));
    }
    return s;
  }

  void parse_requires(Pipeline& p, const YAML::Node& n, const std::string& key) const {
    for (auto& a : entries(n, key, {})) {
      std::string ak = sub(key, a.key);
      const Axis& ax = axis_named(a.key_node, ak, a.key);
      if (std::find(p.axes.begin(), p.axes.end(), a.key) == p.axes.end())
        fail(a.key_node, ak, "the pipeline does not use axis '" + a.key + "'");
      for (auto& v : entries(a.value, ak, {})) {
        std::string vk = sub(ak, v.key);
        Requirement r;
        r.axis = a.key;
        r.value = axis_value(ax, v.key_node, vk);
        std::vector<YAML::Node> fnodes =
            v.value.IsSequence() ? items(v.value, vk) : std::vector<YAML::Node>{v.value};
        for (auto& fn : fnodes) {
          std::string f = str(fn, vk);
          if (!features_.count(f))
            fail(fn, vk, "feature '" + f + "' is not provided by any architecture (known: " +
                             join(std::vector<std::string>(features_.begin(), features_.end()), ", ") + ")");
          r.features.push_back(f);
        }
        if (r.features.empty()) fail(v.value, vk, "empty list: name at least one feature");
        p.requires_.push_back(std::move(r));
      }
    }
  }

  void parse_derived(Pipeline& p, const YAML::Node& n, const std::string& key) const {
    for (auto& d : entries(n, key, {})) {
      std::string dk = sub(key, d.key);
      if (!is_identifier(d.key) || reserved_names().count(d.key))
        fail(d.key_node, dk, "derived names are lower-case identifiers and not reserved context names");
      if (impl_.find_axis(d.key))
        fail(d.key_node, dk, "'" + d.key + "' is an axis; a derived value needs its own name");
      std::string text = str(d.value, dk);
      if (trim(text).empty()) fail(d.value, dk, "empty expression");
      p.derived.emplace_back(d.key, Expr{dk, text, at(d.value)});
    }
  }

  void parse_constraints(Pipeline& p, const YAML::Node& n, const std::string& key) const {
    auto nodes = items(n, key);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      std::string ck = cat(key, "[", i, "]");
      auto cs = entries(nodes[i], ck, {"name", "when", "reason"});
      require_keys(nodes[i], ck, cs, {"when", "reason"});
      Constraint c;
      for (auto& f : cs) {
        std::string k = sub(ck, f.key);
        if (f.key == "name") c.name = str(f.value, k);
        else if (f.key == "when") c.when = Expr{k, str(f.value, k), at(f.value)};
        else if (f.key == "reason") c.reason = Expr{k, str(f.value, k), at(f.value)};
      }
      if (trim(c.when.text).empty()) fail(get(cs, "when")->value, ck + ".when", "empty expression");
      if (c.name.empty()) c.name = c.when.text;
      p.constraints.push_back(std::move(c));
    }
  }
};

}  // namespace

void load(SearchSpace::Impl& impl, const std::string& yaml) {
  Parser(impl).run(yaml);
}

}  // namespace sage::gen::detail
