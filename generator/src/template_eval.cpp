// The evaluator: expressions and statements over a parsed template. Every error it raises
// names the template, line and column of the token to blame and, inside an included
// template, the chain of include sites.
#include <algorithm>
#include <cmath>
#include <limits>

#include "sage/common/strings.h"
#include "template_internal.h"

namespace sage::tmpl::detail {
namespace {

constexpr std::int64_t kIntMin = std::numeric_limits<std::int64_t>::min();

// Variables bound by set and for in one scope. Scopes are small: a linear scan is fastest.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(const std::string& name) const {
    for (const auto& kv : vars)
      if (kv.first == name) return &kv.second;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& kv : vars) {
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

struct State {
  explicit State(const Environment::Impl& e) : env(e) {}
  const Environment::Impl& env;
  const Map* context = nullptr;
  std::vector<Frame> frames;                  // innermost last
  std::vector<const std::string*> templates;  // active template names, outermost first
  std::vector<std::string> sites;             // include sites "a.j2:3:1", outermost first
  std::string out;
  std::size_t steps = 0;
};

// " (included from b.j2:1:1, from a.j2:3:1)" for an error inside an included template.
std::string include_suffix(const std::vector<std::string>& sites) {
  if (sites.empty()) return {};
  std::string s = " (included from ";
  for (std::size_t i = sites.size(); i-- > 0;) {
    s += sites[i];
    if (i) s += ", from ";
  }
  return s + ")";
}

[[noreturn]] void fail(const State& st, Pos p, const std::string& msg,
                       Errc code = Errc::invalid_argument) {
  throw Error(code, msg + include_suffix(st.sites), where_str(*st.templates.back(), p));
}

void charge(State& st, std::size_t n, Pos p) {
  st.steps += n;
  if (st.steps > st.env.options.max_steps)
    fail(st, p, cat("the template takes more than ", st.env.options.max_steps,
                    " steps; see Options::max_steps"));
}

// Strings are copied whenever they are evaluated, so their size is the work: 64 bytes of
// string count as one step.
void charge_string(State& st, const Value& v, Pos p) {
  if (v.type() == Value::Type::string && v.as_string().size() >= 64) charge(st, v.as_string().size() / 64, p);
}

void check_bytes(const State& st, std::size_t n, Pos p, const char* what) {
  if (n > st.env.options.max_output_bytes)
    fail(st, p, cat(what, " would be larger than ", st.env.options.max_output_bytes,
                    " bytes; see Options::max_output_bytes"));
}

bool is_num(const Value& v) {
  return v.type() == Value::Type::integer || v.type() == Value::Type::real;
}

bool is_ref(const Expr& e) {
  return e.kind == ExprKind::var || e.kind == ExprKind::attr || e.kind == ExprKind::index;
}

// "an int", "a string", "none".
std::string a_type(const Value& v) {
  switch (v.type()) {
    case Value::Type::none: return "none";
    case Value::Type::integer: return "an int";
    default: return cat("a ", v.type_name());
  }
}

// The source form of a variable/attribute/index chain, for messages: "params.tile[0]".
std::string ref_text(const Expr& e) {
  switch (e.kind) {
    case ExprKind::var: return e.name;
    case ExprKind::attr: {
      std::string base = ref_text(*e.kids[0]);
      return base.empty() ? "" : base + "." + e.name;
    }
    case ExprKind::index: {
      std::string base = ref_text(*e.kids[0]);
      if (base.empty()) return "";
      const Expr& i = *e.kids[1];
      if (i.kind == ExprKind::literal && i.value.type() == Value::Type::integer)
        return cat(base, "[", i.value.as_int(), "]");
      if (i.kind == ExprKind::literal && i.value.type() == Value::Type::string)
        return cat(base, "['", i.value.as_string(), "']");
      if (i.kind == ExprKind::var) return cat(base, "[", i.name, "]");
      return base + "[...]";
    }
    default: return "";
  }
}

// The leftmost token of an expression: where a reader looks for "this value".
Pos start_pos(const Expr& e) {
  switch (e.kind) {
    case ExprKind::attr:
    case ExprKind::index:
    case ExprKind::binary:
    case ExprKind::compare:
    case ExprKind::and_:
    case ExprKind::or_:
    case ExprKind::filter:
    case ExprKind::test: return start_pos(*e.kids[0]);
    case ExprKind::cond: return start_pos(*e.kids[1]);
    default: return e.pos;
  }
}

std::string named(const Expr& e, const Value& v) {
  std::string t = ref_text(e);
  return t.empty() ? a_type(v) : cat("'", t, "' (", a_type(v), ")");
}

// ---- expressions -----------------------------------------------------------------------

Value eval(const Expr& e, State& st);

const Value* lookup(const State& st, const std::string& name) {
  for (auto it = st.frames.rbegin(); it != st.frames.rend(); ++it)
    if (const Value* v = it->find(name)) return v;
  auto it = st.context->find(name);
  return it == st.context->end() ? nullptr : &it->second;
}

[[noreturn]] void undefined_variable(const State& st, const Expr& e) {
  std::vector<std::string> names;
  for (const Frame& f : st.frames)
    for (const auto& kv : f.vars) names.push_back(kv.first);
  for (const auto& kv : *st.context) names.push_back(kv.first);
  std::string near = closest(e.name, names);
  fail(st, e.pos, cat("undefined variable '", e.name, "'",
                      near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

// Evaluates a variable, attribute or index expression. With soft = true (the operand of
// `default` and `is defined`) a missing variable, attribute, key or index gives nullopt;
// otherwise it is an error.
std::optional<Value> eval_ref(const Expr& e, State& st, bool soft) {
  if (e.kind == ExprKind::var) {
    if (const Value* v = lookup(st, e.name)) return *v;
    if (soft) return std::nullopt;
    undefined_variable(st, e);
  }
  const Expr& base_e = *e.kids[0];
  std::optional<Value> base = is_ref(base_e) ? eval_ref(base_e, st, soft) : eval(base_e, st);
  if (!base) return std::nullopt;
  if (is_ref(base_e)) charge_string(st, *base, e.pos);
  if (e.kind == ExprKind::attr) {
    if (base->type() != Value::Type::map) {
      if (soft) return std::nullopt;
      fail(st, e.pos, cat(named(base_e, *base), " has no attribute '", e.name, "'"));
    }
    const Map& m = base->as_map();
    auto it = m.find(e.name);
    if (it != m.end()) return it->second;
    if (soft) return std::nullopt;
    std::vector<std::string> keys;
    for (const auto& kv : m) keys.push_back(kv.first);
    std::string near = closest(e.name, keys);
    std::string what = ref_text(base_e);
    fail(st, e.pos, cat(what.empty() ? std::string("the map") : "'" + what + "'", " has no attribute '",
                        e.name, "'", near.empty() ? "" : " (did you mean '" + near + "'?)"));
  }
  // index
  Value idx = eval(*e.kids[1], st);
  switch (base->type()) {
    case Value::Type::list:
    case Value::Type::string: {
      if (idx.type() != Value::Type::integer)
        fail(st, e.pos, cat(base->type_name(), " index must be an int, got ", idx.type_name()));
      bool is_list = base->type() == Value::Type::list;
      std::int64_t n = std::int64_t(is_list ? base->as_list().size() : base->as_string().size());
      std::int64_t i = idx.as_int();
      std::int64_t k = i < 0 ? i + n : i;
      if (k < 0 || k >= n) {
        if (soft) return std::nullopt;
        std::string desc = cat(a_type(*base), " of ", n, is_list ? " item" : " character", n == 1 ? "" : "s");
        std::string what = ref_text(base_e);
        fail(st, e.pos, cat("index ", i, " is out of range for ", what.empty() ? desc : cat("'", what, "' (", desc, ")")));
      }
      if (is_list) return base->as_list()[std::size_t(k)];
      return Value(std::string(1, base->as_string()[std::size_t(k)]));
    }
    case Value::Type::map: {
      if (idx.type() != Value::Type::string)
        fail(st, e.pos, cat("map keys are strings, got ", a_type(idx)));
      const Map& m = base->as_map();
      auto it = m.find(idx.as_string());
      if (it != m.end()) return it->second;
      if (soft) return std::nullopt;
      std::string what = ref_text(base_e);
      fail(st, e.pos, cat(what.empty() ? std::string("the map") : "'" + what + "'", " has no key '",
                          idx.as_string(), "'"));
    }
    default: fail(st, e.pos, cat(named(base_e, *base), " cannot be indexed"));
  }
}

[[noreturn]] void operand_error(const State& st, Pos p, Op op, const Value& a, const Value& b) {
  fail(st, p, cat("unsupported operand types for '", op_spelling(op), "': ", a.type_name(), " and ",
                  b.type_name()));
}

Value real_result(const State& st, Pos p, Op op, double r) {
  if (!std::isfinite(r)) fail(st, p, cat("float overflow in '", op_spelling(op), "'"));
  return Value(r);
}

std::int64_t int_pow(const State& st, Pos p, std::int64_t base, std::int64_t exp) {
  std::int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(result, base, &result))
      fail(st, p, "integer overflow in '**'");
    exp >>= 1;
    if (exp && __builtin_mul_overflow(base, base, &base)) fail(st, p, "integer overflow in '**'");
  }
  return result;
}

Value repeat(State& st, Pos p, const Value& seq, std::int64_t n) {
  if (n < 0) n = 0;
  if (seq.type() == Value::Type::string) {
    const std::string& s = seq.as_string();
    if (s.empty()) return Value("");  // and do not loop n times for nothing
    if (std::uint64_t(n) > st.env.options.max_output_bytes / s.size())
      check_bytes(st, st.env.options.max_output_bytes + 1, p, "the string");
    std::string out;
    out.reserve(s.size() * std::size_t(n));
    for (std::int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const List& l = seq.as_list();
  if (l.empty()) return Value(List{});
  if (std::uint64_t(n) > st.env.options.max_steps / l.size())
    charge(st, st.env.options.max_steps + 1, p);
  charge(st, l.size() * std::size_t(n), p);
  List out;
  out.reserve(l.size() * std::size_t(n));
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), l.begin(), l.end());
  return Value(std::move(out));
}

Value arith(State& st, Pos p, Op op, const Value& a, const Value& b) {
  using T = Value::Type;
  const bool ints = a.type() == T::integer && b.type() == T::integer;
  const bool nums = is_num(a) && is_num(b);
  switch (op) {
    case Op::concat: {
      if (a.is_none() || b.is_none()) fail(st, p, "cannot use none with '~'");
      std::string s = a.str();
      std::string t = b.str();
      check_bytes(st, s.size() + t.size(), p, "the string");
      return Value(s + t);
    }
    case Op::add:
      if (ints) {
        std::int64_t r;
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) fail(st, p, "integer overflow in '+'");
        return Value(r);
      }
      if (nums) return real_result(st, p, op, a.as_number() + b.as_number());
      if (a.type() == T::string && b.type() == T::string) {
        check_bytes(st, a.as_string().size() + b.as_string().size(), p, "the string");
        return Value(a.as_string() + b.as_string());
      }
      if (a.type() == T::list && b.type() == T::list) {
        charge(st, a.as_list().size() + b.as_list().size(), p);
        List l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value(std::move(l));
      }
      operand_error(st, p, op, a, b);
    case Op::sub:
      if (ints) {
        std::int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) fail(st, p, "integer overflow in '-'");
        return Value(r);
      }
      if (nums) return real_result(st, p, op, a.as_number() - b.as_number());
      operand_error(st, p, op, a, b);
    case Op::mul:
      if (ints) {
        std::int64_t r;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) fail(st, p, "integer overflow in '*'");
        return Value(r);
      }
      if (nums) return real_result(st, p, op, a.as_number() * b.as_number());
      if ((a.type() == T::string || a.type() == T::list) && b.type() == T::integer)
        return repeat(st, p, a, b.as_int());
      if (a.type() == T::integer && (b.type() == T::string || b.type() == T::list))
        return repeat(st, p, b, a.as_int());
      operand_error(st, p, op, a, b);
    case Op::div:
      if (!nums) operand_error(st, p, op, a, b);
      if (b.as_number() == 0.0) fail(st, p, "division by zero");
      return real_result(st, p, op, a.as_number() / b.as_number());
    case Op::floordiv:
      if (!nums) operand_error(st, p, op, a, b);
      if (b.as_number() == 0.0) fail(st, p, "division by zero");
      if (ints) {
        std::int64_t x = a.as_int(), y = b.as_int();
        if (x == kIntMin && y == -1) fail(st, p, "integer overflow in '//'");
        std::int64_t q = x / y;
        if (x % y != 0 && ((x < 0) != (y < 0))) --q;  // floor, as in Python
        return Value(q);
      }
      return real_result(st, p, op, std::floor(a.as_number() / b.as_number()));
    case Op::mod:
      if (!nums) operand_error(st, p, op, a, b);
      if (b.as_number() == 0.0) fail(st, p, "division by zero in '%'");
      if (ints) {
        std::int64_t x = a.as_int(), y = b.as_int();
        if (y == -1) return Value(std::int64_t(0));  // also avoids kIntMin % -1
        std::int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;  // the sign of the divisor, as in Python
        return Value(r);
      } else {
        double x = a.as_number(), y = b.as_number();
        double r = std::fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return real_result(st, p, op, r);
      }
    case Op::pow:
      if (!nums) operand_error(st, p, op, a, b);
      if (ints && b.as_int() >= 0) return Value(int_pow(st, p, a.as_int(), b.as_int()));
      if (a.as_number() == 0.0 && b.as_number() < 0) fail(st, p, "division by zero in '**'");
      {
        double r = std::pow(a.as_number(), b.as_number());
        if (std::isnan(r)) fail(st, p, "the result of '**' is not a real number");
        return real_result(st, p, op, r);
      }
    default: break;
  }
  fail(st, p, "internal error: unknown operator");
}

bool compare(State& st, Pos p, Op op, const Value& a, const Value& b) {
  using T = Value::Type;
  switch (op) {
    case Op::eq: return a == b;
    case Op::ne: return !(a == b);
    case Op::in:
    case Op::not_in: {
      bool found = false;
      if (b.type() == T::list) {
        charge(st, b.as_list().size(), p);
        found = std::find(b.as_list().begin(), b.as_list().end(), a) != b.as_list().end();
      } else if (b.type() == T::string) {
        if (a.type() != T::string)
          fail(st, p, cat("'", op_spelling(op), "' with a string on the right needs a string on the left, got ",
                          a_type(a)));
        found = b.as_string().find(a.as_string()) != std::string::npos;
      } else if (b.type() == T::map) {
        if (a.type() != T::string)
          fail(st, p, cat("'", op_spelling(op), "' with a map on the right needs a string key on the left, got ",
                          a_type(a)));
        found = b.as_map().count(a.as_string()) > 0;
      } else {
        fail(st, p, cat("'", op_spelling(op), "' needs a list, string or map on the right, got ", a_type(b)));
      }
      return op == Op::in ? found : !found;
    }
    default: break;
  }
  int c;  // <0, 0, >0
  if (a.type() == T::integer && b.type() == T::integer) {
    c = a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  } else if (is_num(a) && is_num(b)) {
    double x = a.as_number(), y = b.as_number();
    c = x < y ? -1 : x > y ? 1 : 0;
  } else if (a.type() == T::string && b.type() == T::string) {
    c = a.as_string().compare(b.as_string());
  } else {
    fail(st, p, cat("cannot compare ", a.type_name(), " and ", b.type_name(), " with '", op_spelling(op), "'"));
  }
  switch (op) {
    case Op::lt: return c < 0;
    case Op::le: return c <= 0;
    case Op::gt: return c > 0;
    default: return c >= 0;
  }
}

bool run_test(State& st, const Expr& e) {
  const Expr& arg = *e.kids[0];
  if (e.test == TestKind::defined || e.test == TestKind::undefined) {
    bool defined = is_ref(arg) ? eval_ref(arg, st, true).has_value() : (eval(arg, st), true);
    return (e.test == TestKind::defined) == defined;
  }
  Value v = eval(arg, st);
  using T = Value::Type;
  switch (e.test) {
    case TestKind::none: return v.is_none();
    case TestKind::boolean: return v.type() == T::boolean;
    case TestKind::integer: return v.type() == T::integer;
    case TestKind::real: return v.type() == T::real;
    case TestKind::number: return is_num(v);
    case TestKind::string: return v.type() == T::string;
    case TestKind::mapping: return v.type() == T::map;
    case TestKind::sequence: return v.type() == T::list || v.type() == T::string;
    case TestKind::even:
    case TestKind::odd:
      if (v.type() != T::integer)
        fail(st, e.pos, cat("test '", e.name, "' needs an int, got ", a_type(v)));
      return (v.as_int() % 2 == 0) == (e.test == TestKind::even);
    case TestKind::divisibleby: {
      Value d = eval(*e.kids[1], st);
      if (v.type() != T::integer || d.type() != T::integer)
        fail(st, e.pos, cat("test 'divisibleby' needs ints, got ", a_type(v), " and ", a_type(d)));
      if (d.as_int() == 0) fail(st, e.pos, "division by zero in 'divisibleby'");
      if (d.as_int() == -1) return true;
      return v.as_int() % d.as_int() == 0;
    }
    default: return false;
  }
}

Value call_filter(const Expr& e, State& st) {
  const Expr& input_e = *e.kids[0];
  if (!e.filter) {  // default(value='', boolean=false): the one filter that sees undefined input
    std::optional<Value> in = is_ref(input_e) ? eval_ref(input_e, st, true) : eval(input_e, st);
    bool boolean = e.kids.size() > 2 && eval(*e.kids[2], st).truthy();
    if (in && !(boolean && !in->truthy())) return *in;
    return e.kids.size() > 1 ? eval(*e.kids[1], st) : Value("");
  }
  Value in = eval(input_e, st);
  List args;
  args.reserve(e.kids.size() - 1);
  for (std::size_t i = 1; i < e.kids.size(); ++i) args.push_back(eval(*e.kids[i], st));
  if (in.type() == Value::Type::list) charge(st, in.as_list().size(), e.pos);
  Value out;
  try {
    out = e.filter->builtin ? e.filter->builtin(in, args, st.env.options.max_output_bytes)
                            : e.filter->fn(in, args);
  } catch (const Error& err) {
    if (!err.where().empty()) throw;
    fail(st, e.pos, cat("filter '", e.name, "': ", err.message()), err.code());
  }
  if (out.type() == Value::Type::list) charge(st, out.as_list().size(), e.pos);
  return out;
}

Value eval_node(const Expr& e, State& st);

Value eval(const Expr& e, State& st) {
  Value v = eval_node(e, st);
  charge_string(st, v, e.pos);
  return v;
}

Value eval_node(const Expr& e, State& st) {
  switch (e.kind) {
    case ExprKind::literal: return e.value;
    case ExprKind::var:
    case ExprKind::attr:
    case ExprKind::index: return *eval_ref(e, st, false);
    case ExprKind::neg: {
      Value v = eval(*e.kids[0], st);
      if (v.type() == Value::Type::integer) {
        if (v.as_int() == kIntMin) fail(st, e.pos, "integer overflow in unary '-'");
        return Value(-v.as_int());
      }
      if (v.type() == Value::Type::real) return Value(-v.as_number());
      fail(st, e.pos, cat("unary '-' needs a number, got ", a_type(v)));
    }
    case ExprKind::pos: {
      Value v = eval(*e.kids[0], st);
      if (!is_num(v)) fail(st, e.pos, cat("unary '+' needs a number, got ", a_type(v)));
      return v;
    }
    case ExprKind::not_: return Value(!eval(*e.kids[0], st).truthy());
    case ExprKind::and_: {
      Value a = eval(*e.kids[0], st);
      return a.truthy() ? eval(*e.kids[1], st) : a;
    }
    case ExprKind::or_: {
      Value a = eval(*e.kids[0], st);
      return a.truthy() ? a : eval(*e.kids[1], st);
    }
    case ExprKind::cond:
      return eval(*e.kids[0], st).truthy() ? eval(*e.kids[1], st) : eval(*e.kids[2], st);
    case ExprKind::binary: {
      Value a = eval(*e.kids[0], st);
      Value b = eval(*e.kids[1], st);
      return arith(st, e.pos, e.op, a, b);
    }
    case ExprKind::compare: {
      Value a = eval(*e.kids[0], st);
      for (std::size_t i = 0; i < e.ops.size(); ++i) {
        Value b = eval(*e.kids[i + 1], st);
        if (!compare(st, e.op_pos[i], e.ops[i], a, b)) return Value(false);
        a = std::move(b);
      }
      return Value(true);
    }
    case ExprKind::filter: return call_filter(e, st);
    case ExprKind::test: {
      bool r = run_test(st, e);
      return Value(e.negated ? !r : r);
    }
    case ExprKind::range: {
      std::int64_t a[3] = {0, 0, 1};
      for (std::size_t i = 0; i < e.kids.size(); ++i) {
        Value v = eval(*e.kids[i], st);
        if (v.type() != Value::Type::integer)
          fail(st, e.kids[i]->pos, cat("range() needs int arguments, got ", a_type(v)));
        a[e.kids.size() == 1 ? 1 : i] = v.as_int();
      }
      std::int64_t start = a[0], stop = a[1], step = a[2];
      if (step == 0) fail(st, e.kids[2]->pos, "range() step must not be zero");
      // Count in unsigned arithmetic: stop - start may not fit in int64.
      std::uint64_t count = 0;
      if (step > 0 && start < stop)
        count = (std::uint64_t(stop) - std::uint64_t(start) - 1) / std::uint64_t(step) + 1;
      else if (step < 0 && start > stop)
        count = (std::uint64_t(start) - std::uint64_t(stop) - 1) / (std::uint64_t(0) - std::uint64_t(step)) + 1;
      if (count > st.env.options.max_steps) charge(st, st.env.options.max_steps + 1, e.pos);
      charge(st, std::size_t(count), e.pos);
      List out;
      out.reserve(std::size_t(count));
      std::uint64_t v = std::uint64_t(start);
      for (std::uint64_t i = 0; i < count; ++i, v += std::uint64_t(step)) out.emplace_back(std::int64_t(v));
      return Value(std::move(out));
    }
    case ExprKind::list: {
      charge(st, e.kids.size(), e.pos);
      List out;
      out.reserve(e.kids.size());
      for (const auto& k : e.kids) out.push_back(eval(*k, st));
      return Value(std::move(out));
    }
    case ExprKind::map: {
      charge(st, e.kids.size() / 2, e.pos);
      Map out;
      for (std::size_t i = 0; i < e.kids.size(); i += 2) {
        Value k = eval(*e.kids[i], st);
        if (k.type() != Value::Type::string)
          fail(st, e.kids[i]->pos, cat("map keys must be strings, got ", a_type(k)));
        out[k.as_string()] = eval(*e.kids[i + 1], st);
      }
      return Value(std::move(out));
    }
  }
  fail(st, e.pos, "internal error: unknown expression");
}

// ---- statements ------------------------------------------------------------------------

void render_body(const Body& body, State& st);

// Binds `names` to `v`: one name takes the value, several unpack a list of that length.
void bind_names(State& st, const std::vector<std::string>& names, const Value& v, Pos p, const char* hint) {
  Frame& f = st.frames.back();
  if (names.size() == 1) {
    f.set(names[0], v);
    return;
  }
  if (v.type() != Value::Type::list)
    fail(st, p, cat("cannot unpack ", a_type(v), " into ", names.size(), " names", hint));
  const List& l = v.as_list();
  if (l.size() != names.size())
    fail(st, p, cat("cannot unpack a list of ", l.size(), " items into ", names.size(), " names", hint));
  for (std::size_t i = 0; i < names.size(); ++i) f.set(names[i], l[i]);
}

void render_for(const Node& n, State& st) {
  Value seq = eval(*n.expr, st);
  Pos at = start_pos(*n.expr);
  List keys;
  const List* items = nullptr;
  const char* hint = "";
  if (seq.type() == Value::Type::list) {
    items = &seq.as_list();
  } else if (seq.type() == Value::Type::map) {
    for (const auto& kv : seq.as_map()) keys.emplace_back(kv.first);
    items = &keys;
    hint = " (loop over 'map|items' for key, value pairs)";
  } else {
    fail(st, at, cat("cannot loop over ", named(*n.expr, seq), ": only lists and maps"));
  }
  const std::int64_t len = std::int64_t(items->size());
  st.frames.emplace_back();
  for (std::int64_t i = 0; i < len; ++i) {
    charge(st, 1, n.pos);
    st.frames.back().vars.clear();
    Map loop;
    loop["index"] = Value(i + 1);
    loop["index0"] = Value(i);
    loop["first"] = Value(i == 0);
    loop["last"] = Value(i == len - 1);
    loop["length"] = Value(len);
    loop["revindex"] = Value(len - i);
    loop["revindex0"] = Value(len - i - 1);
    st.frames.back().vars.emplace_back("loop", Value(std::move(loop)));
    bind_names(st, n.names, (*items)[std::size_t(i)], at, hint);
    render_body(n.body, st);
  }
  st.frames.pop_back();
}

void render_include(const Node& n, State& st) {
  Value name_v = eval(*n.expr, st);
  Pos at = start_pos(*n.expr);
  if (name_v.type() != Value::Type::string)
    fail(st, at, cat("include needs a template name (a string), got ", a_type(name_v)));
  const std::string& name = name_v.as_string();
  for (const std::string* t : st.templates) {
    if (*t == name) {
      std::vector<std::string> chain;
      for (const std::string* u : st.templates) chain.push_back(*u);
      chain.push_back(name);
      fail(st, at, "include cycle: " + join(chain, " -> "));
    }
  }
  std::string site = where_str(*st.templates.back(), n.pos);
  std::shared_ptr<const Template> t;
  try {
    t = st.env.get(name);
  } catch (const Error& e) {
    if (e.where().empty()) fail(st, at, e.message(), e.code());
    // A syntax error in the included template: keep its place, say where it was included.
    std::vector<std::string> sites = st.sites;
    sites.push_back(site);
    throw Error(e.code(), e.message() + include_suffix(sites), e.where());
  }
  if (!t) fail(st, at, cat("template '", name, "' not found"), Errc::not_found);
  st.sites.push_back(std::move(site));
  st.templates.push_back(&t->name);
  st.frames.emplace_back();  // sets in the included template stay in it
  render_body(t->body, st);
  st.frames.pop_back();
  st.templates.pop_back();
  st.sites.pop_back();
}

void render_body(const Body& body, State& st) {
  for (const Node& n : body) {
    switch (n.kind) {
      case NodeKind::text:
        check_bytes(st, st.out.size() + n.text.size(), n.pos, "the output");
        st.out += n.text;
        break;
      case NodeKind::output: {
        Value v = eval(*n.expr, st);
        if (v.is_none()) fail(st, start_pos(*n.expr), "cannot print none");
        std::string s = v.str();
        check_bytes(st, st.out.size() + s.size(), n.pos, "the output");
        st.out += s;
        break;
      }
      case NodeKind::if_: {
        bool done = false;
        for (const Branch& b : n.branches) {
          if (eval(*b.cond, st).truthy()) {
            render_body(b.body, st);
            done = true;
            break;
          }
        }
        if (!done && n.has_else) render_body(n.body, st);
        break;
      }
      case NodeKind::for_: render_for(n, st); break;
      case NodeKind::set: bind_names(st, n.names, eval(*n.expr, st), start_pos(*n.expr), ""); break;
      case NodeKind::include: render_include(n, st); break;
    }
  }
}

const Map& context_map(const std::string& name, const Value& context) {
  static const Map empty;
  if (context.is_none()) return empty;
  if (context.type() != Value::Type::map)
    throw Error(Errc::invalid_argument, cat("the context must be a map, got ", a_type(context)), name);
  return context.as_map();
}

}  // namespace

std::string render(const Environment::Impl& env, const Template& t, const Value& context) {
  State st(env);
  st.context = &context_map(t.name, context);
  st.templates.push_back(&t.name);
  st.frames.emplace_back();  // top-level sets
  render_body(t.body, st);
  return std::move(st.out);
}

Value evaluate(const Environment::Impl& env, const std::string& name, const Expr& e,
               const Value& context) {
  State st(env);
  st.context = &context_map(name, context);
  st.templates.push_back(&name);
  st.frames.emplace_back();
  return eval(e, st);
}

}  // namespace sage::tmpl::detail
