// sage::tmpl::Value: typed access, truthiness, printing and equality.
#include <charconv>
#include <cmath>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/gen/template.h"

namespace sage::tmpl {
namespace {

const char* kTypeNames[] = {"none", "bool", "int", "float", "string", "list", "map"};

[[noreturn]] void type_error(const char* expected, const Value& v) {
  throw Error(Errc::invalid_argument, cat("expected ", expected, ", got ", v.type_name()));
}

// Shortest text that reads back as the same double, always with a '.' or an exponent so
// that the C++ it lands in sees a floating-point literal.
std::string format_real(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos && std::isfinite(d)) s += ".0";
  return s;
}

void append_repr(std::string& out, const Value& v);

void append_quoted(std::string& out, const std::string& s) {
  out += '\'';
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  out += '\'';
}

// Lists and maps print their items the way they are written in a template: strings quoted.
void append_repr(std::string& out, const Value& v) {
  switch (v.type()) {
    case Value::Type::none: out += "none"; break;
    case Value::Type::string: append_quoted(out, v.as_string()); break;
    default: out += v.str();
  }
}

bool int_equals_real(std::int64_t i, double d) {
  // Compare exactly: converting i to double would make 2^53 + 1 equal 2^53.
  if (std::trunc(d) != d) return false;
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return false;
  return std::int64_t(d) == i;
}

}  // namespace

void Value::throw_too_large() {
  throw Error(Errc::invalid_argument, "integer value does not fit in a signed 64-bit int");
}

const char* Value::type_name() const { return kTypeNames[v_.index()]; }

bool Value::as_bool() const {
  if (auto* b = std::get_if<bool>(&v_)) return *b;
  type_error("bool", *this);
}

std::int64_t Value::as_int() const {
  if (auto* i = std::get_if<std::int64_t>(&v_)) return *i;
  type_error("int", *this);
}

double Value::as_number() const {
  if (auto* i = std::get_if<std::int64_t>(&v_)) return double(*i);
  if (auto* d = std::get_if<double>(&v_)) return *d;
  type_error("a number", *this);
}

const std::string& Value::as_string() const {
  if (auto* s = std::get_if<std::string>(&v_)) return *s;
  type_error("string", *this);
}

const List& Value::as_list() const {
  if (auto* l = std::get_if<std::shared_ptr<List>>(&v_)) return **l;
  type_error("list", *this);
}

const Map& Value::as_map() const {
  if (auto* m = std::get_if<std::shared_ptr<Map>>(&v_)) return **m;
  type_error("map", *this);
}

List& Value::list() { return const_cast<List&>(as_list()); }
Map& Value::map() { return const_cast<Map&>(as_map()); }

const Value* Value::find(std::string_view key) const {
  auto* m = std::get_if<std::shared_ptr<Map>>(&v_);
  if (!m) return nullptr;
  auto it = (*m)->find(std::string(key));
  return it == (*m)->end() ? nullptr : &it->second;
}

bool Value::truthy() const {
  switch (type()) {
    case Type::none: return false;
    case Type::boolean: return std::get<bool>(v_);
    case Type::integer: return std::get<std::int64_t>(v_) != 0;
    case Type::real: return std::get<double>(v_) != 0.0;
    case Type::string: return !std::get<std::string>(v_).empty();
    case Type::list: return !as_list().empty();
    case Type::map: return !as_map().empty();
  }
  return false;
}

std::string Value::str() const {
  switch (type()) {
    case Type::none: throw Error(Errc::invalid_argument, "cannot print none");
    case Type::boolean: return std::get<bool>(v_) ? "true" : "false";
    case Type::integer: {
      char buf[32];
      auto r = std::to_chars(buf, buf + sizeof buf, std::get<std::int64_t>(v_));
      return std::string(buf, r.ptr);
    }
    case Type::real: return format_real(std::get<double>(v_));
    case Type::string: return std::get<std::string>(v_);
    case Type::list: {
      std::string out = "[";
      bool first = true;
      for (const Value& item : as_list()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, item);
      }
      return out + "]";
    }
    case Type::map: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : as_map()) {
        if (!first) out += ", ";
        first = false;
        append_quoted(out, k);
        out += ": ";
        append_repr(out, item);
      }
      return out + "}";
    }
  }
  return {};
}

bool Value::operator==(const Value& o) const {
  Type a = type(), b = o.type();
  if (a == Type::integer && b == Type::real)
    return int_equals_real(std::get<std::int64_t>(v_), std::get<double>(o.v_));
  if (a == Type::real && b == Type::integer)
    return int_equals_real(std::get<std::int64_t>(o.v_), std::get<double>(v_));
  if (a != b) return false;
  switch (a) {
    case Type::none: return true;
    case Type::boolean: return std::get<bool>(v_) == std::get<bool>(o.v_);
    case Type::integer: return std::get<std::int64_t>(v_) == std::get<std::int64_t>(o.v_);
    case Type::real: return std::get<double>(v_) == std::get<double>(o.v_);
    case Type::string: return std::get<std::string>(v_) == std::get<std::string>(o.v_);
    case Type::list: return as_list() == o.as_list();
    case Type::map: return as_map() == o.as_map();
  }
  return false;
}

}  // namespace sage::tmpl
