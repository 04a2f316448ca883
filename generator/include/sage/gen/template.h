// A strict Jinja subset for kernel templates (language reference: docs/templates.md).
//
// Supported: {{ expr }} with filters (upper, lower, join, default, int, float, length, ...),
// {% if %}/{% elif %}/{% else %}/{% endif %}, {% for x in seq %}...{% endfor %} (also
// "for k, v in map|items"), loop.index/index0/first/last/length, {% set x = expr %},
// {% include "name" %}, {% raw %}...{% endraw %}, {# comments #}, whitespace control with
// {%- -%} {{- -}} {#- -#}. trim_blocks and lstrip_blocks are on by default: a block tag alone
// on its line leaves no blank line behind.
// Expressions: literals (int, float, 'str', "str", true/false, none, [lists], {maps}),
// variables, attribute (a.b) and index (a[i]) access, comparisons, and/or/not, in / not in,
// arithmetic (+ - * / // % ** and unary -), ~ (string concatenation), parentheses,
// "a if c else b", tests (is defined, is none, is even, ...), range().
//
// Strict: undefined variables, missing attributes/keys, out-of-range indices, type
// mismatches and printing none are errors (use |default or "is defined" on purpose).
// Every error is a sage::Error whose where() is "template:line:col":
//   Errc::parse_error       syntax errors, unknown filters/tests/functions (found when parsing)
//   Errc::invalid_argument  errors while rendering or evaluating
//   Errc::not_found         a template the loader does not have (render() or {% include %})
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace sage::tmpl {

class Value;
using List = std::vector<Value>;
using Map = std::map<std::string, Value>;  // ordered: iteration is deterministic

// A dynamically typed template value. Copies are cheap: lists and maps are shared.
class Value {
 public:
  enum class Type { none, boolean, integer, real, string, list, map };
  Value() = default;  // none
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(std::int64_t(i)) {}  // also takes unscoped enums, by promotion
  // Any other integer type (long, size_t, ...); unsigned values above INT64_MAX throw.
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Value(T i) : v_(checked_int(i)) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Map m) : v_(std::make_shared<Map>(std::move(m))) {}

  Type type() const { return Type(v_.index()); }
  const char* type_name() const;  // "none", "bool", "int", "float", "string", "list", "map"
  bool is_none() const { return type() == Type::none; }
  // Typed access: each throws Error(invalid_argument, "expected int, got string") on a
  // type mismatch. as_number() accepts int and float.
  bool as_bool() const;
  std::int64_t as_int() const;
  double as_number() const;
  const std::string& as_string() const;
  const List& as_list() const;
  const Map& as_map() const;
  // Mutable access while building a value (throws like as_list/as_map). Lists and maps are
  // shared between copies, so change a value only before handing it to anyone else.
  List& list();
  Map& map();
  // The entry `key` of a map, or nullptr when this is not a map or has no such key.
  const Value* find(std::string_view key) const;
  bool truthy() const;  // Jinja truthiness: none, false, 0, 0.0, "", [] and {} are false
  // How {{ }} prints it: 42, 1.5, 1.0, 1e-05, true/false, text as is, [1, 'a'], {'k': 2}.
  // Throws Error(invalid_argument, "cannot print none") for none.
  std::string str() const;
  // Equality as in templates: 1 == 1.0; a bool never equals a number; lists and maps
  // compare element-wise.
  bool operator==(const Value& o) const;
  bool operator!=(const Value& o) const { return !(*this == o); }

 private:
  template <class T>
  static std::int64_t checked_int(T i) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t)) {
      if (i > T(std::numeric_limits<std::int64_t>::max())) throw_too_large();
    }
    return std::int64_t(i);
  }
  [[noreturn]] static void throw_too_large();

  std::variant<std::monostate, bool, std::int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Map>>
      v_;
};

// Where templates come from, by name (e.g. "attn_mma.cu.j2", "common/prelude.j2").
// load() must be safe to call from several threads at once.
class Loader {
 public:
  virtual ~Loader() = default;
  // The template's text, or nullopt when there is no such template.
  virtual std::optional<std::string> load(const std::string& name) const = 0;
};

// Templates embedded in the binary (templates/ folder, see common/embedded.h).
std::shared_ptr<Loader> embedded_loader();
// Templates read from files under `root` when first used. Names are '/'-separated paths
// relative to root; a name that is absolute or contains ".." throws Error(invalid_argument).
std::shared_ptr<Loader> directory_loader(std::string root);
// Templates held in memory (tests).
std::shared_ptr<Loader> map_loader(std::map<std::string, std::string> files);

// A filter: `input|name(args...)`. Throw sage::Error for bad input; the engine adds the
// template position and the filter's name to the message.
using Filter = std::function<Value(const Value& input, const List& args)>;

// Settings fixed for the lifetime of an Environment.
struct Options {
  // Drop the first newline after a block tag or comment ({% ... %}, {# ... #}).
  bool trim_blocks = true;
  // Drop spaces and tabs between the start of a line and a block tag or comment.
  bool lstrip_blocks = true;
  // A render fails instead of growing output or any one string past this many bytes.
  std::size_t max_output_bytes = std::size_t(256) << 20;
  // A render fails after this many steps, so that a runaway template cannot hang a compile
  // worker. A step is one loop iteration; one list item built by range(), +, *, [..] or a
  // filter, or scanned by `in` or a filter; or 64 bytes of a string built or copied.
  std::size_t max_steps = 50'000'000;
};

// Parses and renders templates. render(), render_string() and eval() may be called from
// several threads at once; add_filter() may not run concurrently with them.
class Environment {
 public:
  explicit Environment(std::shared_ptr<Loader> loader, Options options = {});
  ~Environment();
  Environment(Environment&&) noexcept;
  Environment& operator=(Environment&&) noexcept;

  // Renders the named template with `context` (a map, or none for an empty one).
  // Parsed templates are cached by name for the Environment's lifetime.
  std::string render(const std::string& name, const Value& context) const;
  // Renders source text given directly (not cached); `name` is used in error messages and
  // for include-cycle detection.
  std::string render_string(const std::string& name, const std::string& source,
                            const Value& context) const;
  // Evaluates one expression (the inside of {{ }}), e.g. for derived values in the
  // search space: eval("block_m * head_dim + stages * block_n * head_dim", ctx).
  Value eval(const std::string& name, const std::string& expr, const Value& context) const;
  // Adds or replaces a filter. The built-in `default` (alias `d`) cannot be replaced, as it
  // alone may receive an undefined input: throws Error(invalid_argument).
  void add_filter(const std::string& name, Filter f);

  const Options& options() const;

  struct Impl;  // internal (template_internal.h)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sage::tmpl
