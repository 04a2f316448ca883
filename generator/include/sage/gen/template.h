// A strict Jinja subset for kernel templates.
//
// Supported: {{ expr }} with filters (upper, lower, join, default, int, length, ...),
// {% if %}/{% elif %}/{% else %}/{% endif %}, {% for x in seq %}...{% endfor %} (also
// "for k, v in map|items"), loop.index/index0/first/last/length, {% set x = expr %},
// {% include "name" %}, {# comments #}, whitespace control with {%- -%} {{- -}} {#- -#}.
// Expressions: literals (int, float, 'str', "str", true/false, none, [lists], {maps}),
// variables, attribute (a.b) and index (a[i]) access, comparisons, and/or/not, in / not in,
// arithmetic (+ - * / // % and unary -), parentheses, ternary "a if c else b".
// Undefined variables, attributes and keys are errors (use |default or "is defined").
// Every error is a sage::Error(Errc::parse_error or invalid_argument) whose where() is
// "template:line:col".
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sage::tmpl {

class Value;
using List = std::vector<Value>;
using Map = std::map<std::string, Value>;  // ordered: iteration is deterministic

// A dynamically typed template value.
class Value {
 public:
  enum class Type { none, boolean, integer, real, string, list, map };
  Value() = default;  // none
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(std::int64_t(i)) {}
  Value(std::int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Map m) : v_(std::make_shared<Map>(std::move(m))) {}

  Type type() const;
  const char* type_name() const;  // "none", "bool", "int", "float", "string", "list", "map"
  bool is_none() const { return type() == Type::none; }
  bool as_bool() const;                // throws unless boolean
  std::int64_t as_int() const;         // throws unless integer
  double as_number() const;            // integer or real
  const std::string& as_string() const;
  const List& as_list() const;
  const Map& as_map() const;
  List& list();  // mutable access (copy-on-write is not needed: values are built once)
  Map& map();
  bool truthy() const;                 // Jinja truthiness
  std::string str() const;             // how {{ }} prints it (true -> "true", 1.5 -> "1.5")
  bool operator==(const Value& o) const;

 private:
  std::variant<std::monostate, bool, std::int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Map>>
      v_;
};

// Where templates come from, by name (e.g. "attn_mma.cu.j2", "common/prelude.j2").
class Loader {
 public:
  virtual ~Loader() = default;
  virtual std::optional<std::string> load(const std::string& name) const = 0;
};

// Templates embedded in the binary (templates/ folder, see common/embedded.h).
std::shared_ptr<Loader> embedded_loader();
// Templates read from a directory at render time.
std::shared_ptr<Loader> directory_loader(std::string root);
// Templates held in memory (tests).
std::shared_ptr<Loader> map_loader(std::map<std::string, std::string> files);

using Filter = std::function<Value(const Value& input, const List& args)>;

class Environment {
 public:
  explicit Environment(std::shared_ptr<Loader> loader);
  ~Environment();
  Environment(Environment&&) noexcept;
  Environment& operator=(Environment&&) noexcept;

  // Renders the named template with `context` (a map). Parsed templates are cached.
  std::string render(const std::string& name, const Value& context) const;
  // Renders source text given directly; `name` is used in error messages.
  std::string render_string(const std::string& name, const std::string& source,
                            const Value& context) const;
  // Evaluates one expression (the inside of {{ }}), e.g. for derived values in the
  // search space: eval("block_m * head_dim + stages * block_n * head_dim", ctx).
  Value eval(const std::string& name, const std::string& expr, const Value& context) const;
  // Adds or replaces a filter.
  void add_filter(const std::string& name, Filter f);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sage::tmpl
