// The lexer: splits a template into text and tag tokens, applying whitespace control
// ({%- -%}, trim_blocks, lstrip_blocks) and {% raw %} on the way, so that the parser sees
// only final text.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "sage/common/strings.h"
#include "template_internal.h"

namespace sage::tmpl::detail {

std::string pos_str(Pos p) { return cat(p.line, ':', p.col); }

std::string where_str(const std::string& name, Pos p) { return cat(name, ':', p.line, ':', p.col); }

void parse_fail(const std::string& name, Pos p, const std::string& msg) {
  throw Error(Errc::parse_error, msg, where_str(name, p));
}

static std::string shorten(std::string_view s) {
  return s.size() > 24 ? std::string(s.substr(0, 21)) + "..." : std::string(s);
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::eof: return t.text.empty() ? "end of template" : t.text;
    case Tok::var_end: return "'}}'";
    case Tok::block_end: return "'%}'";
    case Tok::string: return "string " + shorten(t.spelling);
    default: return "'" + shorten(t.spelling) + "'";
  }
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// How the text after a tag is trimmed.
enum class Lead { none, newline, all };

class Lexer {
 public:
  Lexer(std::string_view src, const std::string& name, const Options* opt)
      : src_(src), name_(name), opt_(opt) {
    out_.reserve(src.size() / 4 + 16);  // about one token per 4-8 source bytes
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run_template();
  std::vector<Token> run_expression();

 private:
  Pos pos_at(std::size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    std::size_t line = std::size_t(it - line_starts_.begin());
    return Pos{std::uint32_t(line), std::uint32_t(off - line_starts_[line - 1] + 1)};
  }
  [[noreturn]] void fail(std::size_t off, const std::string& msg) const {
    parse_fail(name_, pos_at(off), msg);
  }
  void push(Tok kind, std::size_t begin, std::size_t end, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.pos = pos_at(begin);
    t.spelling = src_.substr(begin, end - begin);
    t.text = std::move(text);
    out_.push_back(std::move(t));
  }

  std::size_t find_tag(std::size_t from) const;
  std::size_t find_endraw(std::size_t from, std::size_t* tag_end, char* start_mod,
                          char* end_mod) const;
  void emit_text(std::size_t begin, std::size_t end, Lead lead, std::size_t tag, char tag_kind,
                 char tag_mod);
  // Lexes expression tokens from p; in a tag, stops at its closer. Returns the offset after
  // the closer and its modifier ('-', '+' or 0).
  std::size_t lex_tokens(std::size_t p, char tag_kind, std::size_t tag_start, char* end_mod);
  std::size_t lex_string(std::size_t p);
  std::size_t lex_number(std::size_t p);

  std::string_view src_;
  const std::string& name_;
  const Options* opt_;  // null for expressions
  std::vector<std::size_t> line_starts_;
  std::vector<Token> out_;
};

std::size_t Lexer::find_tag(std::size_t from) const {
  for (std::size_t p = src_.find('{', from); p != std::string_view::npos; p = src_.find('{', p + 1)) {
    if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
      return p;
  }
  return std::string_view::npos;
}

// Finds "{%[-+] endraw [-+]%}" at or after `from`.
std::size_t Lexer::find_endraw(std::size_t from, std::size_t* tag_end, char* start_mod,
                               char* end_mod) const {
  for (std::size_t p = src_.find("{%", from); p != std::string_view::npos; p = src_.find("{%", p + 1)) {
    std::size_t q = p + 2;
    char sm = 0, em = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sm = src_[q++];
    while (q < src_.size() && is_space(src_[q])) ++q;
    if (src_.substr(q, 6) != "endraw") continue;
    q += 6;
    while (q < src_.size() && is_space(src_[q])) ++q;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) em = src_[q++];
    if (src_.substr(q, 2) != "%}") continue;
    *tag_end = q + 2;
    *start_mod = sm;
    *end_mod = em;
    return p;
  }
  return std::string_view::npos;
}

// Emits the text [begin, end) trimmed by the previous tag's `lead` and by the next tag (at
// `tag`, of kind '{', '%' or '#', with start modifier `tag_mod`; tag == npos at the end).
void Lexer::emit_text(std::size_t begin, std::size_t end, Lead lead, std::size_t tag,
                      char tag_kind, char tag_mod) {
  std::size_t b = begin, e = end;
  if (lead == Lead::all) {
    while (b < e && is_space(src_[b])) ++b;
  } else if (lead == Lead::newline) {
    if (b < e && src_[b] == '\n') ++b;
    else if (b + 1 < e && src_[b] == '\r' && src_[b + 1] == '\n') b += 2;
  }
  if (tag != std::string_view::npos) {
    if (tag_mod == '-') {
      while (e > b && is_space(src_[e - 1])) --e;
    } else if (tag_kind != '{' && tag_mod != '+' && opt_->lstrip_blocks) {
      // Only blanks between the start of the line and the tag: drop them.
      std::size_t k = tag;
      while (k > begin && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
      if (k == 0 || src_[k - 1] == '\n') e = std::max(b, std::min(e, k));
    }
  }
  if (b < e) push(Tok::text, b, e, std::string(src_.substr(b, e - b)));
}

std::vector<Token> Lexer::run_template() {
  std::size_t p = 0;
  Lead lead = Lead::none;
  while (true) {
    std::size_t tag = find_tag(p);
    if (tag == std::string_view::npos) {
      emit_text(p, src_.size(), lead, tag, 0, 0);
      break;
    }
    char kind = src_[tag + 1];
    char mod = tag + 2 < src_.size() ? src_[tag + 2] : 0;
    if (mod != '-' && (mod != '+' || kind == '{')) mod = 0;
    emit_text(p, tag, lead, tag, kind, mod);
    std::size_t body = tag + 2 + (mod ? 1 : 0);

    char end_mod = 0;
    if (kind == '#') {
      std::size_t close = src_.find("#}", body);
      if (close == std::string_view::npos) fail(tag, "unclosed comment: '{#' without '#}'");
      if (close > body && (src_[close - 1] == '-' || src_[close - 1] == '+')) end_mod = src_[close - 1];
      p = close + 2;
    } else {
      std::size_t first = out_.size();
      push(kind == '{' ? Tok::var_begin : Tok::block_begin, tag, tag + 2);
      p = lex_tokens(body, kind, tag, &end_mod);
      // {% raw %}: everything up to {% endraw %} is text.
      if (kind == '%' && out_.size() == first + 3 && out_[first + 1].kind == Tok::name &&
          out_[first + 1].text == "raw") {
        out_.resize(first);
        lead = end_mod == '-' ? Lead::all
               : (end_mod == '+' || !opt_->trim_blocks) ? Lead::none
                                                        : Lead::newline;
        std::size_t raw_end = 0;
        char sm = 0, em = 0;
        std::size_t endraw = find_endraw(p, &raw_end, &sm, &em);
        if (endraw == std::string_view::npos)
          fail(src_.size(), "unclosed '{% raw %}' opened at " + pos_str(pos_at(tag)));
        emit_text(p, endraw, lead, endraw, '%', sm);
        p = raw_end;
        end_mod = em;
      }
    }
    if (kind == '{') lead = end_mod == '-' ? Lead::all : Lead::none;
    else lead = end_mod == '-' ? Lead::all
                : (end_mod == '+' || !opt_->trim_blocks) ? Lead::none
                                                         : Lead::newline;
  }
  Token eof;
  eof.kind = Tok::eof;
  eof.pos = pos_at(src_.size());
  out_.push_back(std::move(eof));
  return std::move(out_);
}

std::vector<Token> Lexer::run_expression() {
  char end_mod = 0;
  lex_tokens(0, 0, 0, &end_mod);
  Token eof;
  eof.kind = Tok::eof;
  eof.pos = pos_at(src_.size());
  eof.text = "end of expression";
  out_.push_back(std::move(eof));
  return std::move(out_);
}

std::size_t Lexer::lex_tokens(std::size_t p, char tag_kind, std::size_t tag_start, char* end_mod) {
  std::vector<char> brackets;  // open ( [ {, innermost last
  const std::size_t n = src_.size();
  while (true) {
    while (p < n && is_space(src_[p])) ++p;
    if (p >= n) {
      if (tag_kind == 0) return p;
      fail(tag_start, tag_kind == '{' ? "unclosed tag: '{{' without '}}'"
                                      : "unclosed tag: '{%' without '%}'");
    }
    char c = src_[p];
    // The tag's closer. "}}" inside an open '{' closes map literals instead (as in Jinja).
    if (tag_kind == '%') {
      std::size_t q = p + ((c == '-' || c == '+') ? 1 : 0);
      if (src_.substr(q, 2) == "%}") {
        *end_mod = q > p ? c : 0;
        push(Tok::block_end, p, q + 2);
        return q + 2;
      }
    } else if (tag_kind == '{' && (brackets.empty() || brackets.back() != '{')) {
      std::size_t q = p + (c == '-' ? 1 : 0);
      if (src_.substr(q, 2) == "}}") {
        *end_mod = q > p ? c : 0;
        push(Tok::var_end, p, q + 2);
        return q + 2;
      }
    }
    if (c == '\'' || c == '"') {
      p = lex_string(p);
    } else if (is_digit(c)) {
      p = lex_number(p);
    } else if (is_name_start(c)) {
      std::size_t q = p;
      while (q < n && is_name_char(src_[q])) ++q;
      push(Tok::name, p, q, std::string(src_.substr(p, q - p)));
      p = q;
    } else {
      static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      std::size_t len = 0;
      for (const char* two : kTwo)
        if (src_.substr(p, 2) == two) len = 2;
      if (!len && std::string_view("+-*/%<>=()[]{},:.|~").find(c) != std::string_view::npos) len = 1;
      if (!len) {
        char buf[8];
        if (c >= 0x20 && c < 0x7f) std::snprintf(buf, sizeof buf, "%c", c);
        else std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(static_cast<unsigned char>(c)));
        fail(p, cat("unexpected character '", buf, "'"));
      }
      if (len == 1) {
        if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
        else if ((c == ')' || c == ']' || c == '}') && !brackets.empty()) brackets.pop_back();
      }
      push(Tok::op, p, p + len, std::string(src_.substr(p, len)));
      p += len;
    }
  }
}

std::size_t Lexer::lex_string(std::size_t p) {
  char quote = src_[p];
  std::string value;
  std::size_t q = p + 1;
  while (true) {
    if (q >= src_.size()) fail(p, "unclosed string literal");
    char c = src_[q];
    if (c == quote) break;
    if (c == '\\') {
      if (q + 1 >= src_.size()) fail(p, "unclosed string literal");
      char e = src_[q + 1];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '0': value += '\0'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        default: {
          char buf[8];
          if (e >= 0x20 && e < 0x7f) std::snprintf(buf, sizeof buf, "%c", e);
          else std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(static_cast<unsigned char>(e)));
          fail(q, cat("unknown escape '\\", buf, "' in string literal"));
        }
      }
      q += 2;
      continue;
    }
    value += c;
    ++q;
  }
  push(Tok::string, p, q + 1, std::move(value));
  return q + 1;
}

std::size_t Lexer::lex_number(std::size_t p) {
  const std::size_t n = src_.size();
  std::size_t q = p;
  bool real = false;
  while (q < n && is_digit(src_[q])) ++q;
  if (q + 1 < n && src_[q] == '.' && is_digit(src_[q + 1])) {
    real = true;
    q += 1;
    while (q < n && is_digit(src_[q])) ++q;
  }
  if (q < n && (src_[q] == 'e' || src_[q] == 'E')) {
    std::size_t r = q + 1;
    if (r < n && (src_[r] == '+' || src_[r] == '-')) ++r;
    if (r < n && is_digit(src_[r])) {
      real = true;
      q = r;
      while (q < n && is_digit(src_[q])) ++q;
    }
  }
  std::string_view text = src_.substr(p, q - p);
  if (real) {
    double d = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), d);
    if (r.ec != std::errc() || !std::isfinite(d))
      fail(p, cat("float literal ", text, " is out of range"));
    push(Tok::real, p, q);
    out_.back().fval = d;
  } else {
    std::int64_t i = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), i);
    if (r.ec != std::errc()) fail(p, cat("integer literal ", text, " is too large"));
    push(Tok::integer, p, q);
    out_.back().ival = i;
  }
  return q;
}

}  // namespace

std::vector<Token> lex_template(std::string_view src, const std::string& name, const Options& opt) {
  return Lexer(src, name, &opt).run_template();
}

std::vector<Token> lex_expression(std::string_view src, const std::string& name) {
  return Lexer(src, name, nullptr).run_expression();
}

}  // namespace sage::tmpl::detail
