// Built-in filters and tests, and the "did you mean" helper for misspelt names.
// Filters throw sage::Error without a place; the evaluator adds the place and the filter name.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "sage/common/strings.h"
#include "template_internal.h"

namespace sage::tmpl::detail {

std::string closest(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = 3;  // suggest only names within two edits
  for (const std::string& c : candidates) {
    // Levenshtein distance, one row at a time.
    std::vector<std::size_t> row(c.size() + 1);
    for (std::size_t j = 0; j <= c.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= name.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= c.size(); ++j) {
        std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (name[i - 1] == c[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    std::size_t d = row[c.size()];
    if (d > 0 && d < best_d && d < name.size()) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error(Errc::invalid_argument, msg); }

void check_size(std::size_t n, std::size_t max_bytes) {
  if (n > max_bytes) fail(cat("result would be larger than ", max_bytes, " bytes"));
}

bool is_num(const Value& v) {
  return v.type() == Value::Type::integer || v.type() == Value::Type::real;
}

std::string quote(const std::string& s) {
  return s.size() > 40 ? "'" + s.substr(0, 37) + "...'" : "'" + s + "'";
}

// ---- conversions

Value f_int(const Value& in, const List&, std::size_t) {
  switch (in.type()) {
    case Value::Type::integer: return in;
    case Value::Type::boolean: return Value(std::int64_t(in.as_bool() ? 1 : 0));
    case Value::Type::real: {
      double d = std::trunc(in.as_number());
      if (d < -9223372036854775808.0 || d >= 9223372036854775808.0)
        fail(cat("cannot convert ", in.str(), " to int: out of range"));
      return Value(std::int64_t(d));
    }
    case Value::Type::string: {
      const std::string& s = in.as_string();
      std::int64_t i = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), i);
      if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
        fail(cat("cannot convert ", quote(s), " to int"));
      return Value(i);
    }
    default: fail(cat("cannot convert ", in.type_name(), " to int"));
  }
}

Value f_float(const Value& in, const List&, std::size_t) {
  switch (in.type()) {
    case Value::Type::integer:
    case Value::Type::real: return Value(in.as_number());
    case Value::Type::boolean: return Value(in.as_bool() ? 1.0 : 0.0);
    case Value::Type::string: {
      const std::string& s = in.as_string();
      double d = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), d);
      if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(d))
        fail(cat("cannot convert ", quote(s), " to float"));
      return Value(d);
    }
    default: fail(cat("cannot convert ", in.type_name(), " to float"));
  }
}

Value f_string(const Value& in, const List&, std::size_t max_bytes) {
  if (in.is_none()) fail("cannot convert none to string");
  std::string s = in.str();
  check_size(s.size(), max_bytes);
  return Value(std::move(s));
}

Value f_list(const Value& in, const List&, std::size_t) {
  switch (in.type()) {
    case Value::Type::list: return in;
    case Value::Type::string: {
      List out;
      for (char c : in.as_string()) out.emplace_back(std::string(1, c));
      return Value(std::move(out));
    }
    case Value::Type::map: {
      List out;
      for (const auto& kv : in.as_map()) out.emplace_back(kv.first);
      return Value(std::move(out));
    }
    default: fail(cat("cannot convert ", in.type_name(), " to list"));
  }
}

// ---- strings

Value f_upper(const Value& in, const List&, std::size_t) {
  std::string s = in.as_string();
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return Value(std::move(s));
}

Value f_lower(const Value& in, const List&, std::size_t) {
  std::string s = in.as_string();
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return Value(std::move(s));
}

Value f_trim(const Value& in, const List&, std::size_t) { return Value(trim(in.as_string())); }

Value f_replace(const Value& in, const List& args, std::size_t max_bytes) {
  const std::string& s = in.as_string();
  const std::string& from = args[0].as_string();
  const std::string& to = args[1].as_string();
  if (from.empty()) fail("the text to replace must not be empty");
  std::int64_t limit = args.size() > 2 ? args[2].as_int() : -1;
  // Count first, so that a huge result is refused before it is built.
  std::size_t count = 0;
  for (std::size_t p = s.find(from); p != std::string::npos && (limit < 0 || std::int64_t(count) < limit);
       p = s.find(from, p + from.size()))
    ++count;
  if (to.size() > from.size()) check_size(s.size() + count * (to.size() - from.size()), max_bytes);
  std::string out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t p = s.find(from, start);
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
  }
  out.append(s, start, std::string::npos);
  return Value(std::move(out));
}

// ---- sequences

Value f_length(const Value& in, const List&, std::size_t) {
  switch (in.type()) {
    case Value::Type::string: return Value(in.as_string().size());
    case Value::Type::list: return Value(in.as_list().size());
    case Value::Type::map: return Value(in.as_map().size());
    default: fail(cat(in.is_none() ? "none" : in.type() == Value::Type::integer ? "an int" : cat("a ", in.type_name()),
                      " has no length"));
  }
}

Value f_first(const Value& in, const List&, std::size_t) {
  if (in.type() == Value::Type::string) {
    if (in.as_string().empty()) fail("the string is empty");
    return Value(in.as_string().substr(0, 1));
  }
  const List& l = in.as_list();
  if (l.empty()) fail("the list is empty");
  return l.front();
}

Value f_last(const Value& in, const List&, std::size_t) {
  if (in.type() == Value::Type::string) {
    if (in.as_string().empty()) fail("the string is empty");
    return Value(in.as_string().substr(in.as_string().size() - 1));
  }
  const List& l = in.as_list();
  if (l.empty()) fail("the list is empty");
  return l.back();
}

Value f_join(const Value& in, const List& args, std::size_t max_bytes) {
  const List& l = in.as_list();
  std::string sep = args.empty() ? std::string() : args[0].as_string();
  std::vector<std::string> parts;
  parts.reserve(l.size());
  std::size_t total = l.empty() ? 0 : sep.size() * (l.size() - 1);
  check_size(total, max_bytes);
  for (const Value& v : l) {
    if (v.is_none()) fail("cannot join none");
    parts.push_back(v.str());
    total += parts.back().size();
    check_size(total, max_bytes);
  }
  return Value(join(parts, sep));
}

Value f_reverse(const Value& in, const List&, std::size_t) {
  if (in.type() == Value::Type::string) {
    std::string s = in.as_string();
    std::reverse(s.begin(), s.end());
    return Value(std::move(s));
  }
  List l = in.as_list();
  std::reverse(l.begin(), l.end());
  return Value(std::move(l));
}

// All numbers or all strings: the lists that sort, min and max can order.
void check_orderable(const List& l) {
  bool nums = std::all_of(l.begin(), l.end(), is_num);
  bool strs = std::all_of(l.begin(), l.end(), [](const Value& v) { return v.type() == Value::Type::string; });
  if (!nums && !strs) fail("the list must hold only numbers or only strings");
}

bool value_less(const Value& a, const Value& b) {
  if (a.type() == Value::Type::string) return a.as_string() < b.as_string();
  if (a.type() == Value::Type::integer && b.type() == Value::Type::integer) return a.as_int() < b.as_int();
  return a.as_number() < b.as_number();
}

Value f_sort(const Value& in, const List&, std::size_t) {
  List l = in.as_list();
  check_orderable(l);
  std::stable_sort(l.begin(), l.end(), value_less);
  return Value(std::move(l));
}

Value f_min(const Value& in, const List&, std::size_t) {
  const List& l = in.as_list();
  if (l.empty()) fail("the list is empty");
  check_orderable(l);
  return *std::min_element(l.begin(), l.end(), value_less);
}

Value f_max(const Value& in, const List&, std::size_t) {
  const List& l = in.as_list();
  if (l.empty()) fail("the list is empty");
  check_orderable(l);
  return *std::max_element(l.begin(), l.end(), value_less);
}

Value f_sum(const Value& in, const List&, std::size_t) {
  std::int64_t isum = 0;
  double dsum = 0;
  bool real = false;
  for (const Value& v : in.as_list()) {
    if (!is_num(v)) fail(cat("cannot add ", v.type_name(), " to a sum"));
    if (v.type() == Value::Type::real) real = true;
    if (!real && __builtin_add_overflow(isum, v.as_int(), &isum)) fail("integer overflow");
    dsum += v.as_number();
  }
  if (real) {
    if (!std::isfinite(dsum)) fail("float overflow");
    return Value(dsum);
  }
  return Value(isum);
}

// ---- maps

Value f_items(const Value& in, const List&, std::size_t) {
  List out;
  for (const auto& [k, v] : in.as_map()) out.emplace_back(List{Value(k), v});
  return Value(std::move(out));
}

Value f_keys(const Value& in, const List&, std::size_t) {
  List out;
  for (const auto& kv : in.as_map()) out.emplace_back(kv.first);
  return Value(std::move(out));
}

Value f_values(const Value& in, const List&, std::size_t) {
  List out;
  for (const auto& kv : in.as_map()) out.push_back(kv.second);
  return Value(std::move(out));
}

// ---- numbers

Value f_abs(const Value& in, const List&, std::size_t) {
  if (in.type() == Value::Type::integer) {
    std::int64_t i = in.as_int();
    if (i == std::numeric_limits<std::int64_t>::min()) fail("integer overflow");
    return Value(i < 0 ? -i : i);
  }
  if (in.type() == Value::Type::real) return Value(std::fabs(in.as_number()));
  fail(cat("expected a number, got ", in.type_name()));
}

// round(precision=0, method='common'): always a float, as in Jinja. 'common' rounds halves
// away from zero.
Value f_round(const Value& in, const List& args, std::size_t) {
  if (!is_num(in)) fail(cat("expected a number, got ", in.type_name()));
  std::int64_t prec = args.size() > 0 ? args[0].as_int() : 0;
  if (prec < 0 || prec > 15) fail(cat("precision must be 0 to 15, got ", prec));
  std::string method = args.size() > 1 ? args[1].as_string() : "common";
  double scale = std::pow(10.0, double(prec));
  double x = in.as_number() * scale;
  if (!std::isfinite(x)) return Value(in.as_number());  // too large to have decimals left
  if (method == "common") x = std::round(x);
  else if (method == "floor") x = std::floor(x);
  else if (method == "ceil") x = std::ceil(x);
  else fail(cat("method must be 'common', 'floor' or 'ceil', got ", quote(method)));
  return Value(x / scale);
}

struct BuiltinDef {
  const char* name;
  BuiltinFilter fn;
  int min_args, max_args;
};

const BuiltinDef kFilters[] = {
    {"abs", f_abs, 0, 0},          {"count", f_length, 0, 0},   {"first", f_first, 0, 0},
    {"float", f_float, 0, 0},      {"int", f_int, 0, 0},        {"items", f_items, 0, 0},
    {"join", f_join, 0, 1},        {"keys", f_keys, 0, 0},      {"last", f_last, 0, 0},
    {"length", f_length, 0, 0},    {"list", f_list, 0, 0},      {"lower", f_lower, 0, 0},
    {"max", f_max, 0, 0},          {"min", f_min, 0, 0},        {"replace", f_replace, 2, 3},
    {"reverse", f_reverse, 0, 0},  {"round", f_round, 0, 2},    {"sort", f_sort, 0, 0},
    {"string", f_string, 0, 0},    {"sum", f_sum, 0, 0},        {"trim", f_trim, 0, 0},
    {"upper", f_upper, 0, 0},      {"values", f_values, 0, 0},
};

struct TestDef {
  const char* name;
  TestKind kind;
  int args;
};

const TestDef kTests[] = {
    {"boolean", TestKind::boolean, 0},   {"defined", TestKind::defined, 0},
    {"divisibleby", TestKind::divisibleby, 1}, {"even", TestKind::even, 0},
    {"float", TestKind::real, 0},        {"integer", TestKind::integer, 0},
    {"mapping", TestKind::mapping, 0},   {"none", TestKind::none, 0},
    {"number", TestKind::number, 0},     {"odd", TestKind::odd, 0},
    {"sequence", TestKind::sequence, 0}, {"string", TestKind::string, 0},
    {"undefined", TestKind::undefined, 0},
};

}  // namespace

void add_builtin_filters(FilterTable& table) {
  for (const BuiltinDef& d : kFilters) {
    FilterEntry e;
    e.builtin = d.fn;
    e.min_args = d.min_args;
    e.max_args = d.max_args;
    table[d.name] = std::move(e);
  }
}

bool find_test(std::string_view name, TestKind* kind, int* min_args, int* max_args) {
  for (const TestDef& d : kTests) {
    if (name == d.name) {
      *kind = d.kind;
      *min_args = *max_args = d.args;
      return true;
    }
  }
  return false;
}

const std::vector<std::string>& test_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const TestDef& d : kTests) out.push_back(d.name);
    return out;
  }();
  return names;
}

}  // namespace sage::tmpl::detail
