// Internals of the template engine: tokens, the syntax tree, the lexer, the parser, the
// evaluator and the built-in filters/tests. Not part of the public API.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sage/common/error.h"
#include "sage/gen/template.h"

namespace sage::tmpl::detail {

// 1-based line and column (columns count bytes).
struct Pos {
  std::uint32_t line = 1;
  std::uint32_t col = 1;
};
std::string pos_str(Pos p);                                 // "3:7"
std::string where_str(const std::string& name, Pos p);      // "a.j2:3:7"
[[noreturn]] void parse_fail(const std::string& name, Pos p, const std::string& msg);

// ---- Lexer ---------------------------------------------------------------------------

enum class Tok : std::uint8_t {
  text,         // literal template text (whitespace control already applied)
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,         // identifiers and keywords
  integer,
  real,
  string,       // text holds the unescaped value
  op,           // text holds the operator: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , : . |
  eof,
};

struct Token {
  Tok kind = Tok::eof;
  Pos pos;
  std::string text;           // text / name / op / string value
  std::string_view spelling;  // the source characters (for messages; valid while parsing)
  std::int64_t ival = 0;
  double fval = 0.0;
};

// Splits a template into text and tag tokens. Ends with an eof token.
std::vector<Token> lex_template(std::string_view src, const std::string& name, const Options& opt);
// Splits one expression (the inside of {{ }}). Ends with an eof token.
std::vector<Token> lex_expression(std::string_view src, const std::string& name);
// How a token is named in "expected X but found Y" messages.
std::string describe(const Token& t);

// ---- Syntax tree ---------------------------------------------------------------------

// A filter: the built-ins and those added with Environment::add_filter.
// Built-ins get the size limit for the strings and lists they build.
using BuiltinFilter = Value (*)(const Value& input, const List& args, std::size_t max_bytes);
struct FilterEntry {
  Filter fn;                      // added with add_filter
  BuiltinFilter builtin = nullptr;
  int min_args = 0;
  int max_args = -1;  // -1: any number
};
using FilterTable = std::map<std::string, FilterEntry, std::less<>>;

enum class TestKind : std::uint8_t {
  defined, undefined, none, boolean, integer, real, number, string, mapping, sequence,
  even, odd, divisibleby,
};

enum class Op : std::uint8_t {
  add, sub, mul, div, floordiv, mod, pow, concat,         // arithmetic and ~
  eq, ne, lt, le, gt, ge, in, not_in,                      // comparisons
};
const char* op_spelling(Op op);

enum class ExprKind : std::uint8_t {
  literal,  // value
  var,      // name
  attr,     // kids[0].name
  index,    // kids[0][kids[1]]
  neg,      // -kids[0]
  pos,      // +kids[0]
  not_,     // not kids[0]
  binary,   // kids[0] op kids[1]
  compare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ... (chained, as in Python)
  and_,
  or_,
  cond,     // kids[1] if kids[0] else kids[2]
  filter,   // kids[0]|name(kids[1..]); filter == nullptr for `default`
  test,     // kids[0] is [not] name(kids[1..])
  range,    // range(kids...)
  list,     // [kids...]
  map,      // {kids[0]: kids[1], kids[2]: kids[3], ...}
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::literal;
  Pos pos;             // the token to blame in error messages
  Op op = Op::add;
  bool negated = false;  // test: "is not"
  TestKind test = TestKind::defined;
  int depth = 1;       // nesting depth of this subtree (bounded by the parser)
  Value value;         // literal
  std::string name;    // variable / attribute / filter / test name
  const FilterEntry* filter = nullptr;
  std::vector<ExprPtr> kids;
  std::vector<Op> ops;  // compare
  std::vector<Pos> op_pos;  // compare: where each operator is
};

enum class NodeKind : std::uint8_t { text, output, if_, for_, set, include };

struct Node;
using Body = std::vector<Node>;
struct Branch;

struct Node {
  NodeKind kind = NodeKind::text;
  Pos pos;                         // the tag's '{%' / '{{'
  std::string text;                // text
  ExprPtr expr;                    // output value / for sequence / set value / include name
  std::vector<std::string> names;  // for / set targets
  std::vector<Branch> branches;    // if / elif
  Body body;                       // for body / else body of an if
  bool has_else = false;
};

struct Branch {
  ExprPtr cond;
  Body body;
};

struct Template {
  std::string name;
  Body body;
};

// Parses a whole template. Filter names are resolved against `filters` (kept by pointer).
std::shared_ptr<const Template> parse_template(const std::string& name, std::string_view src,
                                               const Options& opt, const FilterTable& filters);
// Parses one expression; the whole input must be consumed.
ExprPtr parse_expression(const std::string& name, std::string_view src, const FilterTable& filters);

// ---- Evaluation ----------------------------------------------------------------------

void add_builtin_filters(FilterTable& table);
// Looks a test up by name; false when unknown. Sets its argument count range.
bool find_test(std::string_view name, TestKind* kind, int* min_args, int* max_args);
const std::vector<std::string>& test_names();
// The closest of `candidates` to `name` by edit distance, or "" when none is close.
std::string closest(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace sage::tmpl::detail

namespace sage::tmpl {

struct Environment::Impl {
  std::shared_ptr<Loader> loader;
  Options options;
  detail::FilterTable filters;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::shared_ptr<const detail::Template>> cache;

  // The parsed template `name` from the cache or the loader; nullptr when the loader has no
  // such template. Safe to call from several threads.
  std::shared_ptr<const detail::Template> get(const std::string& name) const;
};

namespace detail {
// Renders `t` with `context` into a string.
std::string render(const Environment::Impl& env, const Template& t, const Value& context);
// Evaluates a parsed expression against `context`.
Value evaluate(const Environment::Impl& env, const std::string& name, const Expr& e,
               const Value& context);
}  // namespace detail

}  // namespace sage::tmpl
