// The parser: tokens to a syntax tree. Precedence, loosest first (as in Jinja):
//   x if c else y  <  or  <  and  <  not  <  == != < <= > >= in, not in (chained)
//   <  ~  <  + -  <  * / // %  <  **  <  unary - +  <  . [] | is (postfix)
// Unlike Jinja, ~ binds looser than + and -, so that 'n' ~ a + 1 means 'n' ~ (a + 1).
// Filter, test and function names are resolved here, so that a misspelt name is an error
// even in a branch that is never taken.
#include "sage/common/strings.h"
#include "template_internal.h"

namespace sage::tmpl::detail {

const char* op_spelling(Op op) {
  switch (op) {
    case Op::add: return "+";
    case Op::sub: return "-";
    case Op::mul: return "*";
    case Op::div: return "/";
    case Op::floordiv: return "//";
    case Op::mod: return "%";
    case Op::pow: return "**";
    case Op::concat: return "~";
    case Op::eq: return "==";
    case Op::ne: return "!=";
    case Op::lt: return "<";
    case Op::le: return "<=";
    case Op::gt: return ">";
    case Op::ge: return ">=";
    case Op::in: return "in";
    case Op::not_in: return "not in";
  }
  return "?";
}

namespace {

// Deeper nesting than this is surely not a kernel template, and would risk the stack.
constexpr int kMaxExprDepth = 200;
constexpr int kMaxParseDepth = 100;
constexpr int kMaxBlockDepth = 100;

bool is_keyword(const std::string& s) {
  static const char* kWords[] = {"and", "or", "not", "in", "is", "if", "else",
                                 "true", "false", "none", "True", "False", "None"};
  for (const char* w : kWords)
    if (s == w) return true;
  return false;
}

// Tags that end or continue an open block: parse_body stops at them.
bool is_continuation(const std::string& s) {
  return s == "elif" || s == "else" || s == "endif" || s == "endfor";
}

std::string tag_str(const std::string& tag) { return "'{% " + tag + " %}'"; }

class Parser {
 public:
  Parser(const std::string& name, std::vector<Token> tokens, const FilterTable& filters)
      : name_(name), t_(std::move(tokens)), filters_(filters) {}

  Body parse_template();
  ExprPtr parse_whole_expression();

 private:
  // ---- token helpers
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool at_op(const char* op) const { return cur().kind == Tok::op && cur().text == op; }
  bool at_name(const char* n) const { return cur().kind == Tok::name && cur().text == n; }
  const Token& advance() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  [[noreturn]] void fail(Pos p, const std::string& msg) const { parse_fail(name_, p, msg); }
  [[noreturn]] void unexpected(const char* expected) const {
    fail(cur().pos, cat("expected ", expected, " but found ", describe(cur())));
  }
  void expect_op(const char* op) {
    if (!at_op(op)) unexpected(cat("'", op, "'").c_str());
    advance();
  }
  void expect_block_end() {
    if (cur().kind != Tok::block_end) unexpected("'%}'");
    advance();
  }
  std::string expect_var_name() {
    if (cur().kind != Tok::name || is_keyword(cur().text)) unexpected("a variable name");
    return advance().text;
  }

  // ---- statements
  Body parse_body();
  void parse_statement(Body& out);
  Node parse_if(Pos open);
  Node parse_for(Pos open);
  std::vector<std::string> parse_targets();
  [[noreturn]] void misplaced(const std::string& tag, Pos at, const char* open_tag, Pos open_pos) const;

  // ---- expressions
  ExprPtr make(ExprKind k, Pos p, std::vector<ExprPtr> kids = {});
  ExprPtr parse_expr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_add();
  ExprPtr parse_concat();
  ExprPtr parse_mul();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_postfix_ops);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filters_and_tests(ExprPtr e);
  std::vector<ExprPtr> parse_call_args();  // after '(' up to and including ')'

  // Bounds the parser's recursion (each level is several stack frames).
  struct DepthGuard {
    DepthGuard(Parser& p, int& depth, int limit, const char* what) : depth_(depth) {
      if (++depth_ > limit) p.fail(p.cur().pos, cat(what, " nested too deeply (more than ", limit, " levels)"));
    }
    ~DepthGuard() { --depth_; }
    int& depth_;
  };

  const std::string& name_;
  std::vector<Token> t_;
  std::size_t i_ = 0;
  const FilterTable& filters_;
  int depth_ = 0;        // expression recursion
  int block_depth_ = 0;  // open blocks
};

// ---- statements ----------------------------------------------------------------------

Body Parser::parse_template() {
  Body body = parse_body();
  if (cur().kind == Tok::eof) return body;
  // parse_body stopped at a continuation tag that no open block accepts.
  const std::string& tag = peek().text;
  Pos at = cur().pos;
  if (tag == "endif" || tag == "endfor")
    fail(at, cat(tag_str(tag), " without a matching ", tag_str(tag.substr(3))));
  fail(at, cat(tag_str(tag), " outside of '{% if %}'"));
}

Body Parser::parse_body() {
  Body out;
  while (true) {
    switch (cur().kind) {
      case Tok::eof: return out;
      case Tok::text: {
        Node n;
        n.kind = NodeKind::text;
        n.pos = cur().pos;
        n.text = advance().text;
        out.push_back(std::move(n));
        break;
      }
      case Tok::var_begin: {
        Node n;
        n.kind = NodeKind::output;
        n.pos = advance().pos;
        n.expr = parse_expr();
        if (cur().kind != Tok::var_end) unexpected("'}}'");
        advance();
        out.push_back(std::move(n));
        break;
      }
      case Tok::block_begin:
        if (peek().kind == Tok::name && is_continuation(peek().text)) return out;
        parse_statement(out);
        break;
      default: unexpected("text or a tag");  // the lexer never produces this
    }
  }
}

void Parser::misplaced(const std::string& tag, Pos at, const char* open_tag, Pos open_pos) const {
  if (tag.rfind("end", 0) == 0)
    fail(at, cat(tag_str(tag), " does not close ", tag_str(open_tag), " opened at ", pos_str(open_pos)));
  fail(at, cat(tag_str(tag), " is not allowed in ", tag_str(open_tag), " opened at ", pos_str(open_pos)));
}

void Parser::parse_statement(Body& out) {
  Pos open = advance().pos;  // {%
  if (cur().kind != Tok::name) unexpected("a tag name");
  std::string tag = cur().text;
  Pos tag_pos = cur().pos;
  if (tag == "if" || tag == "for") {
    DepthGuard guard(*this, block_depth_, kMaxBlockDepth, "blocks are");
    advance();
    out.push_back(tag == "if" ? parse_if(open) : parse_for(open));
    return;
  }
  if (tag == "set") {
    advance();
    Node n;
    n.kind = NodeKind::set;
    n.pos = open;
    n.names = parse_targets();
    expect_op("=");
    n.expr = parse_expr();
    expect_block_end();
    out.push_back(std::move(n));
    return;
  }
  if (tag == "include") {
    advance();
    Node n;
    n.kind = NodeKind::include;
    n.pos = open;
    n.expr = parse_expr();
    expect_block_end();
    out.push_back(std::move(n));
    return;
  }
  if (tag == "endraw") fail(open, "'{% endraw %}' without a matching '{% raw %}'");
  if (tag == "raw") fail(tag_pos, "'{% raw %}' takes no arguments");
  static const std::vector<std::string> kTags = {"if", "elif", "else", "endif", "for", "endfor",
                                                 "set", "include", "raw", "endraw"};
  std::string near = closest(tag, kTags);
  fail(tag_pos, cat("unknown tag '", tag, "'", near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

Node Parser::parse_if(Pos open) {
  Node n;
  n.kind = NodeKind::if_;
  n.pos = open;
  Branch first;
  first.cond = parse_expr();
  expect_block_end();
  first.body = parse_body();
  n.branches.push_back(std::move(first));
  while (true) {
    if (cur().kind == Tok::eof) fail(cur().pos, cat("unclosed '{% if %}' opened at ", pos_str(open)));
    Pos at = advance().pos;  // {%
    std::string tag = advance().text;
    if (tag == "endif") {
      expect_block_end();
      return n;
    }
    if (n.has_else && (tag == "elif" || tag == "else"))
      fail(at, cat(tag_str(tag), " after '{% else %}' in '{% if %}' opened at ", pos_str(open)));
    if (tag == "elif") {
      Branch b;
      b.cond = parse_expr();
      expect_block_end();
      b.body = parse_body();
      n.branches.push_back(std::move(b));
    } else if (tag == "else") {
      expect_block_end();
      n.has_else = true;
      n.body = parse_body();
    } else {
      misplaced(tag, at, "if", open);
    }
  }
}

std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names{expect_var_name()};
  while (at_op(",")) {
    advance();
    names.push_back(expect_var_name());
  }
  return names;
}

Node Parser::parse_for(Pos open) {
  Node n;
  n.kind = NodeKind::for_;
  n.pos = open;
  n.names = parse_targets();
  if (!at_name("in")) unexpected("'in'");
  advance();
  n.expr = parse_expr();
  expect_block_end();
  n.body = parse_body();
  if (cur().kind == Tok::eof) fail(cur().pos, cat("unclosed '{% for %}' opened at ", pos_str(open)));
  Pos at = advance().pos;
  std::string tag = advance().text;
  if (tag != "endfor") misplaced(tag, at, "for", open);
  expect_block_end();
  return n;
}

// ---- expressions ---------------------------------------------------------------------

ExprPtr Parser::make(ExprKind k, Pos p, std::vector<ExprPtr> kids) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->pos = p;
  for (const auto& kid : kids) e->depth = std::max(e->depth, kid->depth + 1);
  if (e->depth > kMaxExprDepth)
    fail(p, cat("expression nested too deeply (more than ", kMaxExprDepth, " levels)"));
  e->kids = std::move(kids);
  return e;
}

ExprPtr Parser::parse_whole_expression() {
  ExprPtr e = parse_expr();
  if (cur().kind != Tok::eof) unexpected("end of expression");
  return e;
}

ExprPtr Parser::parse_expr() {
  DepthGuard guard(*this, depth_, kMaxParseDepth, "expression");
  ExprPtr e = parse_or();
  if (!at_name("if")) return e;
  Pos p = advance().pos;
  ExprPtr cond = parse_or();
  if (!at_name("else")) unexpected("'else'");
  advance();
  ExprPtr other = parse_expr();
  std::vector<ExprPtr> kids;
  kids.push_back(std::move(cond));
  kids.push_back(std::move(e));
  kids.push_back(std::move(other));
  return make(ExprKind::cond, p, std::move(kids));
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (at_name("or")) {
    Pos p = advance().pos;
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(e));
    kids.push_back(parse_and());
    e = make(ExprKind::or_, p, std::move(kids));
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (at_name("and")) {
    Pos p = advance().pos;
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(e));
    kids.push_back(parse_not());
    e = make(ExprKind::and_, p, std::move(kids));
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (!at_name("not")) return parse_compare();
  DepthGuard guard(*this, depth_, kMaxParseDepth, "expression");
  Pos p = advance().pos;
  std::vector<ExprPtr> kids;
  kids.push_back(parse_not());
  return make(ExprKind::not_, p, std::move(kids));
}

ExprPtr Parser::parse_compare() {
  ExprPtr first = parse_concat();
  ExprPtr chain;
  while (true) {
    Op op;
    Pos p = cur().pos;
    if (cur().kind == Tok::op && cur().text == "==") op = Op::eq;
    else if (at_op("!=")) op = Op::ne;
    else if (at_op("<")) op = Op::lt;
    else if (at_op("<=")) op = Op::le;
    else if (at_op(">")) op = Op::gt;
    else if (at_op(">=")) op = Op::ge;
    else if (at_name("in")) op = Op::in;
    else if (at_name("not") && peek().kind == Tok::name && peek().text == "in") {
      op = Op::not_in;
      advance();
    } else break;
    advance();
    if (!chain) {
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(first));
      chain = make(ExprKind::compare, p, std::move(kids));
    }
    ExprPtr rhs = parse_concat();
    chain->depth = std::max(chain->depth, rhs->depth + 1);
    if (chain->depth > kMaxExprDepth)
      fail(p, cat("expression nested too deeply (more than ", kMaxExprDepth, " levels)"));
    chain->kids.push_back(std::move(rhs));
    chain->ops.push_back(op);
    chain->op_pos.push_back(p);
  }
  return chain ? std::move(chain) : std::move(first);
}

ExprPtr Parser::parse_add() {
  ExprPtr e = parse_mul();
  while (at_op("+") || at_op("-")) {
    Op op = cur().text == "+" ? Op::add : Op::sub;
    Pos p = advance().pos;
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(e));
    kids.push_back(parse_mul());
    e = make(ExprKind::binary, p, std::move(kids));
    e->op = op;
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  ExprPtr e = parse_add();
  while (at_op("~")) {
    Pos p = advance().pos;
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(e));
    kids.push_back(parse_add());
    e = make(ExprKind::binary, p, std::move(kids));
    e->op = Op::concat;
  }
  return e;
}

ExprPtr Parser::parse_mul() {
  ExprPtr e = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const std::string& s = cur().text;
    Op op = s == "*" ? Op::mul : s == "/" ? Op::div : s == "//" ? Op::floordiv : Op::mod;
    Pos p = advance().pos;
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(e));
    kids.push_back(parse_pow());
    e = make(ExprKind::binary, p, std::move(kids));
    e->op = op;
  }
  return e;
}

ExprPtr Parser::parse_pow() {
  ExprPtr e = parse_unary(true);
  while (at_op("**")) {
    Pos p = advance().pos;
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(e));
    kids.push_back(parse_unary(true));
    e = make(ExprKind::binary, p, std::move(kids));
    e->op = Op::pow;
  }
  return e;
}

// As in Jinja, "-x|abs" is "(-x)|abs" and "-a.b" is "-(a.b)".
ExprPtr Parser::parse_unary(bool with_filters) {
  ExprPtr e;
  if (at_op("-") || at_op("+")) {
    DepthGuard guard(*this, depth_, kMaxParseDepth, "expression");
    ExprKind k = cur().text == "-" ? ExprKind::neg : ExprKind::pos;
    Pos p = advance().pos;
    std::vector<ExprPtr> kids;
    kids.push_back(parse_unary(false));
    e = make(k, p, std::move(kids));
  } else {
    e = parse_postfix(parse_primary());
  }
  return with_filters ? parse_filters_and_tests(std::move(e)) : std::move(e);
}

std::vector<ExprPtr> Parser::parse_call_args() {
  std::vector<ExprPtr> args;
  while (!at_op(")")) {
    args.push_back(parse_expr());
    if (at_op(",")) {
      advance();
      continue;
    }
    if (!at_op(")")) unexpected("',' or ')'");
  }
  advance();
  return args;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  switch (t.kind) {
    case Tok::integer: {
      auto e = make(ExprKind::literal, t.pos);
      e->value = Value(t.ival);
      advance();
      return e;
    }
    case Tok::real: {
      auto e = make(ExprKind::literal, t.pos);
      e->value = Value(t.fval);
      advance();
      return e;
    }
    case Tok::string: {
      auto e = make(ExprKind::literal, t.pos);
      e->value = Value(t.text);
      advance();
      return e;
    }
    case Tok::name: {
      const std::string& s = t.text;
      if (s == "true" || s == "True" || s == "false" || s == "False") {
        auto e = make(ExprKind::literal, t.pos);
        e->value = Value(s == "true" || s == "True");
        advance();
        return e;
      }
      if (s == "none" || s == "None") {
        auto e = make(ExprKind::literal, t.pos);
        advance();
        return e;
      }
      if (is_keyword(s)) unexpected("an expression");
      if (peek().kind == Tok::op && peek().text == "(") {
        if (s != "range") fail(t.pos, cat("unknown function '", s, "' (the only function is range())"));
        Pos p = advance().pos;
        advance();  // (
        std::vector<ExprPtr> args = parse_call_args();
        if (args.empty() || args.size() > 3)
          fail(p, cat("range() takes 1 to 3 arguments, got ", args.size()));
        return make(ExprKind::range, p, std::move(args));
      }
      auto e = make(ExprKind::var, t.pos);
      e->name = s;
      advance();
      return e;
    }
    case Tok::op:
      if (t.text == "(") {
        advance();
        ExprPtr e = parse_expr();
        expect_op(")");
        return e;
      }
      if (t.text == "[") {
        Pos p = advance().pos;
        std::vector<ExprPtr> items;
        while (!at_op("]")) {
          items.push_back(parse_expr());
          if (at_op(",")) {
            advance();
            continue;
          }
          if (!at_op("]")) unexpected("',' or ']'");
        }
        advance();
        return make(ExprKind::list, p, std::move(items));
      }
      if (t.text == "{") {
        Pos p = advance().pos;
        std::vector<ExprPtr> items;
        while (!at_op("}")) {
          items.push_back(parse_expr());
          expect_op(":");
          items.push_back(parse_expr());
          if (at_op(",")) {
            advance();
            continue;
          }
          if (!at_op("}")) unexpected("',' or '}'");
        }
        advance();
        return make(ExprKind::map, p, std::move(items));
      }
      break;
    default: break;
  }
  unexpected("an expression");
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (at_op(".")) {
      advance();
      if (cur().kind != Tok::name) unexpected("an attribute name after '.'");
      Pos p = cur().pos;
      std::string attr = advance().text;
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(e));
      e = make(ExprKind::attr, p, std::move(kids));
      e->name = std::move(attr);
    } else if (at_op("[")) {
      advance();
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(e));
      kids.push_back(parse_expr());
      expect_op("]");
      Pos p = kids[1]->pos;
      e = make(ExprKind::index, p, std::move(kids));
    } else if (at_op("(")) {
      fail(cur().pos, "only functions can be called, and the only function is range()");
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_filters_and_tests(ExprPtr e) {
  while (true) {
    if (at_op("|")) {
      advance();
      if (cur().kind != Tok::name) unexpected("a filter name after '|'");
      Pos p = cur().pos;
      std::string fname = advance().text;
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(e));
      if (at_op("(")) {
        advance();
        for (auto& a : parse_call_args()) kids.push_back(std::move(a));
      }
      int nargs = int(kids.size()) - 1;
      const FilterEntry* entry = nullptr;
      if (fname == "default" || fname == "d") {
        if (nargs > 2) fail(p, cat("filter '", fname, "' takes 0 to 2 arguments, got ", nargs));
      } else {
        auto it = filters_.find(fname);
        if (it == filters_.end()) {
          std::vector<std::string> names{"default"};
          for (const auto& f : filters_) names.push_back(f.first);
          std::string near = closest(fname, names);
          fail(p, cat("unknown filter '", fname, "'", near.empty() ? "" : " (did you mean '" + near + "'?)"));
        }
        entry = &it->second;
        if (nargs < entry->min_args || (entry->max_args >= 0 && nargs > entry->max_args)) {
          std::string range = entry->min_args == entry->max_args
                                  ? cat(entry->min_args)
                                  : cat(entry->min_args, " to ", entry->max_args);
          bool one = entry->min_args == 1 && entry->max_args == 1;
          fail(p, cat("filter '", fname, "' takes ", range, " argument", one ? "" : "s", ", got ", nargs));
        }
      }
      e = make(ExprKind::filter, p, std::move(kids));
      e->name = std::move(fname);
      e->filter = entry;
    } else if (at_name("is")) {
      advance();
      bool negated = false;
      if (at_name("not")) {
        advance();
        negated = true;
      }
      if (cur().kind != Tok::name) unexpected("a test name after 'is'");
      Pos p = cur().pos;
      // "none", "true" and "false" lex as names too; accept them here as test names.
      std::string tname = advance().text;
      TestKind kind;
      int min_args = 0, max_args = 0;
      if (!find_test(tname, &kind, &min_args, &max_args)) {
        std::string near = closest(tname, test_names());
        fail(p, cat("unknown test '", tname, "'", near.empty() ? "" : " (did you mean '" + near + "'?)"));
      }
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(e));
      if (at_op("(")) {
        advance();
        for (auto& a : parse_call_args()) kids.push_back(std::move(a));
      }
      int nargs = int(kids.size()) - 1;
      if (nargs < min_args || nargs > max_args)
        fail(p, cat("test '", tname, "' takes ", max_args, " argument", max_args == 1 ? "" : "s",
                    ", got ", nargs));
      e = make(ExprKind::test, p, std::move(kids));
      e->name = std::move(tname);
      e->test = kind;
      e->negated = negated;
    } else {
      return e;
    }
  }
}

}  // namespace

std::shared_ptr<const Template> parse_template(const std::string& name, std::string_view src,
                                               const Options& opt, const FilterTable& filters) {
  Parser p(name, lex_template(src, name, opt), filters);
  auto t = std::make_shared<Template>();
  t->name = name;
  t->body = p.parse_template();
  return t;
}

ExprPtr parse_expression(const std::string& name, std::string_view src, const FilterTable& filters) {
  Parser p(name, lex_expression(src, name), filters);
  return p.parse_whole_expression();
}

}  // namespace sage::tmpl::detail
