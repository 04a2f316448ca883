// Enumeration and pruning: every combination of a pipeline's sets (tiles x axis values) on
// each of its architectures, with derived values evaluated and constraints applied in the
// order filter -> requires -> derived -> constraints -> regs_estimate. Every dropped
// combination keeps the rule and a readable reason.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "sage/common/embedded.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "search_space_impl.h"

namespace sage::gen {

using tmpl::Value;

const detail::Axis* SearchSpace::Impl::find_axis(const std::string& name) const {
  for (auto& a : axes)
    if (a.name == name) return &a;
  return nullptr;
}

const ArchInfo* SearchSpace::Impl::find_arch(const std::string& name) const {
  for (auto& a : archs)
    if (a.name == name) return &a;
  return nullptr;
}

namespace {

using detail::Expr;
using detail::Pipeline;

// Calls fn(params) for every combination of `p`'s sets, in order: sets, tiles, then the
// axes with the last one varying fastest. Duplicates across sets are the caller's business.
void for_each_combination(const Pipeline& p, const std::function<void(const tmpl::Map&)>& fn) {
  for (auto& set : p.sets) {
    std::vector<std::vector<Value>> rows = set.tiles;
    if (rows.empty()) rows.emplace_back();  // a pipeline without tiles: one empty row
    for (auto& row : rows) {
      std::vector<std::size_t> idx(set.axes.size(), 0);
      while (true) {
        tmpl::Map params;
        for (std::size_t c = 0; c < row.size(); ++c) params[p.tile_columns[c]] = row[c];
        for (std::size_t i = 0; i < set.axes.size(); ++i)
          params[set.axes[i].first] = set.axes[i].second[idx[i]];
        fn(params);
        bool advanced = false;
        for (std::size_t i = idx.size(); i-- > 0;) {
          if (++idx[i] < set.axes[i].second.size()) {
            advanced = true;
            break;
          }
          idx[i] = 0;
        }
        if (!advanced) break;
      }
    }
  }
}

// "name:3:14" -> "3:14"-style suffix of an engine error's place, for quoting inside ours.
std::string expression_place(const Error& err) {
  const std::string& w = err.where();
  std::size_t c = w.rfind(':');
  if (c == std::string::npos || c == 0) return w;
  std::size_t l = w.rfind(':', c - 1);
  if (l == std::string::npos) return w;
  std::string line = w.substr(l + 1, c - l - 1), col = w.substr(c + 1);
  if (line.empty() || col.empty() ||
      line.find_first_not_of("0123456789") != std::string::npos ||
      col.find_first_not_of("0123456789") != std::string::npos)
    return w;
  return line == "1" ? "column " + col : "line " + line + " column " + col;
}

[[noreturn]] void expression_error(const Expr& e, const Error& err, const std::string& variant) {
  std::string place = expression_place(err);
  throw Error(Errc::parse_error,
              cat("key '", e.key, "': ", err.message(), " (in '", e.text, "'",
                  place.empty() ? "" : ", at " + place,
                  variant.empty() ? "" : ", variant " + variant, ")"),
              e.where);
}

struct Outcome {
  bool kept = true;
  std::string rule;
  std::string reason;
};

class Evaluator {
 public:
  explicit Evaluator(const SearchSpace::Impl& impl) : impl_(impl) {}

  // Builds `v`'s derived values and decides whether it is kept. With `check_all` (load-time
  // validation) every derived value, constraint and reason is evaluated even when an
  // earlier rule already prunes the variant, and requirements are not applied.
  Outcome evaluate(const Pipeline& p, const ArchInfo& a, Variant& v, bool check_all) const {
    if (!check_all) {
      for (auto& r : p.requires_) {
        if (!(v.params.at(r.axis) == r.value)) continue;
        for (auto& f : r.features)
          if (!a.has(f))
            return {false, cat("requires ", r.axis, "=", r.value.str(), ": ", f),
                    cat(r.axis, "=", r.value.str(), " needs ", f, " (",
                        detail::archs_with(impl_, f), "), ", a.name, " lacks it")};
      }
    }
    tmpl::Map ctx = detail::base_context(v);
    for (auto& [name, expr] : p.derived) {
      Value val = eval(expr, ctx, v.name);
      v.derived[name] = val;
      ctx[name] = val;
      ctx["derived"] = Value(v.derived);
    }
    Outcome out;
    for (auto& c : p.constraints) {
      Value w = eval(c.when, ctx, v.name);
      if (w.type() != Value::Type::boolean)
        throw Error(Errc::parse_error,
                    cat("key '", c.when.key, "': a constraint must give true or false, got ",
                        w.type_name(), " ", w.str(), " (in '", c.when.text, "', variant ", v.name, ")"),
                    c.when.where);
      if (w.as_bool() || check_all) {
        std::string reason = render(c.reason, ctx, v.name);
        if (w.as_bool() && out.kept) out = {false, c.name, trim(reason)};
      }
      if (!out.kept && !check_all) return out;
    }
    if (auto it = v.derived.find("regs_estimate"); it != v.derived.end()) {
      const Value& regs = it->second;
      if (regs.type() != Value::Type::integer && regs.type() != Value::Type::real) {
        const Expr* e = nullptr;
        for (auto& d : p.derived)
          if (d.first == "regs_estimate") e = &d.second;
        throw Error(Errc::parse_error,
                    cat("key '", e->key, "': regs_estimate must be a number, got ",
                        regs.type_name(), " ", regs.str(), " (variant ", v.name, ")"),
                    e->where);
      }
      if (out.kept && regs.as_number() > a.regs_max)
        out = {false, "regs_estimate",
               cat("estimated ", regs.str(), " registers/thread > ", a.regs_max, " on ", a.name)};
    }
    return out;
  }

 private:
  const SearchSpace::Impl& impl_;

  Value eval(const Expr& e, const tmpl::Map& ctx, const std::string& variant) const {
    try {
      return impl_.env.eval(e.key, e.text, Value(ctx));
    } catch (const Error& err) {
      expression_error(e, err, variant);
    }
  }
  std::string render(const Expr& e, const tmpl::Map& ctx, const std::string& variant) const {
    try {
      return impl_.env.render_string(e.key, e.text, Value(ctx));
    } catch (const Error& err) {
      expression_error(e, err, variant);
    }
  }
};

Variant make_variant(const SearchSpace::Impl& impl, const Pipeline& p, const ArchInfo& a,
                     const tmpl::Map& params) {
  Variant v;
  v.pipeline = p.name;
  v.template_name = p.template_name;
  v.arch = a.name;
  v.params = params;
  v.arch_info = a.to_value();
  v.name = detail::variant_name(impl, p, a, params);
  v.params_hash = detail::params_hash(p.name, p.template_name, a.name, params);
  return v;
}

// Load-time checks that need the whole model: every expression and reason evaluates on a
// sample variant of each set (so a typo is reported with its place before anything is
// enumerated), and no two combinations of the space share a name.
void check_space(const SearchSpace::Impl& impl) {
  Evaluator ev(impl);
  for (auto& p : impl.pipelines) {
    const ArchInfo& a = *impl.find_arch(p.archs.front());
    for (auto& set : p.sets) {
      Pipeline one = p;
      one.sets = {set};
      bool first = true;
      for_each_combination(one, [&](const tmpl::Map& params) {
        if (!first) return;
        first = false;
        Variant v = make_variant(impl, p, a, params);
        ev.evaluate(p, a, v, /*check_all=*/true);
      });
    }
  }
  std::map<std::string, std::pair<std::string, std::string>> names;  // name -> (hash, pipeline)
  for (auto& p : impl.pipelines) {
    for (auto& arch : p.archs) {
      const ArchInfo& a = *impl.find_arch(arch);
      for_each_combination(p, [&](const tmpl::Map& params) {
        std::string name = detail::variant_name(impl, p, a, params);
        std::string hash = detail::params_hash(p.name, p.template_name, a.name, params);
        auto [it, fresh] = names.emplace(name, std::make_pair(hash, p.name));
        if (!fresh && it->second.first != hash)
          throw Error(Errc::parse_error,
                      cat("two different variants are both named '", name, "' (pipelines '",
                          it->second.second, "' and '", p.name,
                          "'): give the pipelines distinct name_stem values"),
                      p.where);
      });
    }
  }
}

}  // namespace

// ---- SearchSpace ------------------------------------------------------------------------

SearchSpace::SearchSpace() : impl_(std::make_unique<Impl>()) {}
SearchSpace::SearchSpace(SearchSpace&&) noexcept = default;
SearchSpace& SearchSpace::operator=(SearchSpace&&) noexcept = default;
SearchSpace::~SearchSpace() = default;

SearchSpace SearchSpace::from_string(const std::string& yaml, const std::string& display_name) {
  SearchSpace s;
  s.impl_->display_name = display_name;
  detail::load(*s.impl_, yaml);
  check_space(*s.impl_);
  return s;
}

SearchSpace SearchSpace::from_file(const std::string& path) {
  return from_string(read_file(path), path);
}

SearchSpace SearchSpace::builtin() {
  const EmbeddedFile* f = embedded_configs::find("search_space.yaml");
  if (!f)
    throw Error(Errc::not_found, "search_space.yaml is not embedded in this build",
                "configs/search_space.yaml");
  return from_string(std::string(f->view()), "configs/search_space.yaml");
}

const std::string& SearchSpace::display_name() const { return impl_->display_name; }

std::vector<std::string> SearchSpace::pipelines() const {
  std::vector<std::string> out;
  for (auto& p : impl_->pipelines) out.push_back(p.name);
  return out;
}

std::vector<std::string> SearchSpace::archs() const {
  std::vector<std::string> out;
  for (auto& a : impl_->archs) out.push_back(a.name);
  return out;
}

const ArchInfo& SearchSpace::arch(const std::string& name) const {
  if (const ArchInfo* a = impl_->find_arch(name)) return *a;
  throw Error(Errc::invalid_argument,
              "unknown architecture '" + name + "' (declared: " + join(archs(), ", ") + ")");
}

Enumeration SearchSpace::enumerate(const EnumerateOptions& opts) const {
  for (auto& a : opts.archs) arch(a);  // throws for an unknown one
  auto all_pipelines = pipelines();
  for (auto& p : opts.pipelines)
    if (std::find(all_pipelines.begin(), all_pipelines.end(), p) == all_pipelines.end())
      throw Error(Errc::invalid_argument,
                  "unknown pipeline '" + p + "' (declared: " + join(all_pipelines, ", ") + ")");
  std::optional<std::regex> filter;
  if (!opts.filter.empty()) {
    try {
      filter.emplace(opts.filter, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(Errc::invalid_argument,
                  "invalid filter regex '" + opts.filter + "': " + e.what());
    }
  }
  auto selected = [](const std::vector<std::string>& chosen, const std::string& x) {
    return chosen.empty() || std::find(chosen.begin(), chosen.end(), x) != chosen.end();
  };

  Enumeration out;
  Evaluator ev(*impl_);
  for (auto& p : impl_->pipelines) {
    if (!selected(opts.pipelines, p.name)) continue;
    for (auto& arch_name : p.archs) {
      if (!selected(opts.archs, arch_name)) continue;
      const ArchInfo& a = *impl_->find_arch(arch_name);
      std::set<std::string> seen;  // params hashes: sets may overlap, variants are a union
      for_each_combination(p, [&](const tmpl::Map& params) {
        Variant v = make_variant(*impl_, p, a, params);
        if (!seen.insert(v.params_hash).second) return;
        if (filter && !std::regex_search(v.name, *filter)) {
          out.pruned.push_back({std::move(v), "filter", "excluded by filter"});
          return;
        }
        Outcome o = ev.evaluate(p, a, v, /*check_all=*/false);
        if (o.kept) out.variants.push_back(std::move(v));
        else out.pruned.push_back({std::move(v), o.rule, o.reason});
      });
    }
  }
  return out;
}

std::optional<Variant> SearchSpace::find(const std::string& name) const {
  std::call_once(impl_->by_name_once, [&] {
    for (auto& v : enumerate().variants) {
      const std::string key = v.name;
      impl_->by_name.emplace(key, std::move(v));
    }
  });
  const auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) return std::nullopt;
  return it->second;
}

}  // namespace sage::gen
