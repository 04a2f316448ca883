// Every error the engine raises: its category, its place (template:line:col of the token to
// blame) and its message.
#include <gtest/gtest.h>

#include "test_template_util.h"

using namespace sage;
using namespace sage::tmpl;
using sage::tmpl::testing::eval_failure;
using sage::tmpl::testing::failure_of;
using sage::tmpl::testing::render_failure;

namespace {
constexpr Errc kParse = Errc::parse_error;
constexpr Errc kEval = Errc::invalid_argument;
}  // namespace

// ---- syntax: the lexer -------------------------------------------------------------------

TEST(TemplateErrors, UnclosedComment) {
  EXPECT_FAILURE(render_failure("ab\n  {# never closed }}"), kParse, "t.j2:2:3", "unclosed comment: '{#' without '#}'");
}

TEST(TemplateErrors, UnclosedTags) {
  EXPECT_FAILURE(render_failure("x {{ a + b"), kParse, "t.j2:1:3", "unclosed tag: '{{' without '}}'");
  EXPECT_FAILURE(render_failure("\n\n{% if a \n"), kParse, "t.j2:3:1", "unclosed tag: '{%' without '%}'");
  // A '}}' that closes a map literal does not close the tag.
  EXPECT_FAILURE(render_failure("{{ {'a': 1}"), kParse, "t.j2:1:1", "unclosed tag: '{{' without '}}'");
}

TEST(TemplateErrors, UnclosedRaw) {
  EXPECT_FAILURE(render_failure("a\n{% raw %}\n{{ x }}"), kParse, "t.j2:3:8", "unclosed '{% raw %}' opened at 2:1");
}

TEST(TemplateErrors, UnclosedString) {
  EXPECT_FAILURE(render_failure("{{ 'abc }}"), kParse, "t.j2:1:4", "unclosed string literal");
  EXPECT_FAILURE(render_failure("{{ \"abc\\"), kParse, "t.j2:1:4", "unclosed string literal");
  EXPECT_FAILURE(eval_failure("1 + 'x"), kParse, "e:1:5", "unclosed string literal");
}

TEST(TemplateErrors, UnknownEscape) {
  EXPECT_FAILURE(render_failure("{{ 'a\\qb' }}"), kParse, "t.j2:1:6", "unknown escape '\\q' in string literal");
}

TEST(TemplateErrors, UnexpectedCharacter) {
  EXPECT_FAILURE(render_failure("{{ a @ b }}"), kParse, "t.j2:1:6", "unexpected character '@'");
  EXPECT_FAILURE(eval_failure("a\x01"), kParse, "e:1:2", "unexpected character '\\x01'");
  EXPECT_FAILURE(eval_failure("a;"), kParse, "e:1:2", "unexpected character ';'");
}

TEST(TemplateErrors, NumberLiteralsOutOfRange) {
  EXPECT_FAILURE(eval_failure("1 + 99999999999999999999"), kParse, "e:1:5",
                 "integer literal 99999999999999999999 is too large");
  EXPECT_FAILURE(eval_failure("1e999"), kParse, "e:1:1", "float literal 1e999 is out of range");
}

// ---- syntax: blocks ----------------------------------------------------------------------

TEST(TemplateErrors, EndTagWithoutOpening) {
  EXPECT_FAILURE(render_failure("a\n  {% endfor %}"), kParse, "t.j2:2:3", "'{% endfor %}' without a matching '{% for %}'");
  EXPECT_FAILURE(render_failure("{% endif %}"), kParse, "t.j2:1:1", "'{% endif %}' without a matching '{% if %}'");
  EXPECT_FAILURE(render_failure("{% endraw %}"), kParse, "t.j2:1:1", "'{% endraw %}' without a matching '{% raw %}'");
}

TEST(TemplateErrors, ElseOutsideIf) {
  EXPECT_FAILURE(render_failure("x{% else %}"), kParse, "t.j2:1:2", "'{% else %}' outside of '{% if %}'");
  EXPECT_FAILURE(render_failure("{% elif a %}"), kParse, "t.j2:1:1", "'{% elif %}' outside of '{% if %}'");
}

TEST(TemplateErrors, UnclosedBlocks) {
  EXPECT_FAILURE(render_failure("\n\n\n{% for x in xs %}\nbody\n"), kParse, "t.j2:6:1", "unclosed '{% for %}' opened at 4:1");
  EXPECT_FAILURE(render_failure("{% if a %}x{% else %}y"), kParse, "t.j2:1:23", "unclosed '{% if %}' opened at 1:1");
  EXPECT_FAILURE(render_failure("{% if a %}{% for x in y %}{% endif %}"), kParse, "t.j2:1:27",
                 "'{% endif %}' does not close '{% for %}' opened at 1:11");
}

TEST(TemplateErrors, MismatchedEndTags) {
  EXPECT_FAILURE(render_failure("{% for x in y %}\n{% endif %}"), kParse, "t.j2:2:1",
                 "'{% endif %}' does not close '{% for %}' opened at 1:1");
  EXPECT_FAILURE(render_failure("{% if a %}{% endfor %}"), kParse, "t.j2:1:11",
                 "'{% endfor %}' does not close '{% if %}' opened at 1:1");
  EXPECT_FAILURE(render_failure("{% for x in y %}{% else %}{% endfor %}"), kParse, "t.j2:1:17",
                 "'{% else %}' is not allowed in '{% for %}' opened at 1:1");
  EXPECT_FAILURE(render_failure("{% for x in y %}{% elif z %}{% endfor %}"), kParse, "t.j2:1:17",
                 "'{% elif %}' is not allowed in '{% for %}' opened at 1:1");
  EXPECT_FAILURE(render_failure("{% if a %}{% else %}{% else %}{% endif %}"), kParse, "t.j2:1:21",
                 "'{% else %}' after '{% else %}' in '{% if %}' opened at 1:1");
  EXPECT_FAILURE(render_failure("{% if a %}{% else %}{% elif b %}{% endif %}"), kParse, "t.j2:1:21",
                 "'{% elif %}' after '{% else %}' in '{% if %}' opened at 1:1");
}

TEST(TemplateErrors, UnknownAndMalformedTags) {
  EXPECT_FAILURE(render_failure("{% macro m() %}"), kParse, "t.j2:1:4", "unknown tag 'macro'");
  EXPECT_FAILURE(render_failure("{% for x in y %}{% endfro %}"), kParse, "t.j2:1:20",
                 "unknown tag 'endfro' (did you mean 'endfor'?)");
  EXPECT_FAILURE(render_failure("{% %}"), kParse, "t.j2:1:4", "expected a tag name but found '%}'");
  EXPECT_FAILURE(render_failure("{% 'if' %}"), kParse, "t.j2:1:4", "expected a tag name but found string 'if'");
  EXPECT_FAILURE(render_failure("{% raw x %}{% endraw %}"), kParse, "t.j2:1:4", "'{% raw %}' takes no arguments");
  EXPECT_FAILURE(render_failure("{% if a %}{% endif x %}"), kParse, "t.j2:1:20", "expected '%}' but found 'x'");
  EXPECT_FAILURE(render_failure("{% if a %}{% else if %}{% endif %}"), kParse, "t.j2:1:19", "expected '%}' but found 'if'");
  EXPECT_FAILURE(render_failure("{% if %}{% endif %}"), kParse, "t.j2:1:7", "expected an expression but found '%}'");
}

TEST(TemplateErrors, MalformedForAndSet) {
  EXPECT_FAILURE(render_failure("{% for in xs %}{% endfor %}"), kParse, "t.j2:1:8", "expected a variable name but found 'in'");
  EXPECT_FAILURE(render_failure("{% for x xs %}{% endfor %}"), kParse, "t.j2:1:10", "expected 'in' but found 'xs'");
  EXPECT_FAILURE(render_failure("{% for x, in xs %}{% endfor %}"), kParse, "t.j2:1:11", "expected a variable name but found 'in'");
  EXPECT_FAILURE(render_failure("{% set x 1 %}"), kParse, "t.j2:1:10", "expected '=' but found '1'");
  EXPECT_FAILURE(render_failure("{% set 1 = 2 %}"), kParse, "t.j2:1:8", "expected a variable name but found '1'");
  EXPECT_FAILURE(render_failure("{% set x = %}"), kParse, "t.j2:1:12", "expected an expression but found '%}'");
  EXPECT_FAILURE(render_failure("{% include %}"), kParse, "t.j2:1:12", "expected an expression but found '%}'");
}

TEST(TemplateErrors, TooDeeplyNestedBlocks) {
  std::string t;
  for (int i = 0; i < 101; ++i) t += "{% if true %}";
  EXPECT_FAILURE(render_failure(t), kParse, "t.j2:1:1304", "blocks are nested too deeply (more than 100 levels)");
}

// ---- syntax: expressions -----------------------------------------------------------------

TEST(TemplateErrors, UnexpectedTokens) {
  EXPECT_FAILURE(render_failure("{{ }}"), kParse, "t.j2:1:4", "expected an expression but found '}}'");
  EXPECT_FAILURE(render_failure("{{ a b }}"), kParse, "t.j2:1:6", "expected '}}' but found 'b'");
  EXPECT_FAILURE(render_failure("{{ and }}"), kParse, "t.j2:1:4", "expected an expression but found 'and'");
  EXPECT_FAILURE(render_failure("{{ 1 + }}"), kParse, "t.j2:1:8", "expected an expression but found '}}'");
  EXPECT_FAILURE(render_failure("{{ (1 + 2 }}"), kParse, "t.j2:1:11", "expected ')' but found '}}'");
  EXPECT_FAILURE(eval_failure("(1 + 2"), kParse, "e:1:7", "expected ')' but found end of expression");
  EXPECT_FAILURE(eval_failure("1 2"), kParse, "e:1:3", "expected end of expression but found '2'");
  EXPECT_FAILURE(eval_failure(""), kParse, "e:1:1", "expected an expression but found end of expression");
  EXPECT_FAILURE(eval_failure("a if b"), kParse, "e:1:7", "expected 'else' but found end of expression");
  EXPECT_FAILURE(eval_failure("[1, 2"), kParse, "e:1:6", "expected ',' or ']' but found end of expression");
  EXPECT_FAILURE(eval_failure("{'a' 1}"), kParse, "e:1:6", "expected ':' but found '1'");
  EXPECT_FAILURE(eval_failure("{'a': 1 'b': 2}"), kParse, "e:1:9", "expected ',' or '}' but found string 'b'");
  EXPECT_FAILURE(eval_failure("range(1 2)"), kParse, "e:1:9", "expected ',' or ')' but found '2'");
  EXPECT_FAILURE(eval_failure("xs[1:2]"), kParse, "e:1:5", "expected ']' but found ':'");
  EXPECT_FAILURE(eval_failure("a.1"), kParse, "e:1:3", "expected an attribute name after '.' but found '1'");
  EXPECT_FAILURE(eval_failure("a|'x'"), kParse, "e:1:3", "expected a filter name after '|' but found string 'x'");
  EXPECT_FAILURE(eval_failure("a is 1"), kParse, "e:1:6", "expected a test name after 'is' but found '1'");
  EXPECT_FAILURE(eval_failure("a = 1"), kParse, "e:1:3", "expected end of expression but found '='");
  EXPECT_FAILURE(eval_failure(")"), kParse, "e:1:1", "expected an expression but found ')'");
}

TEST(TemplateErrors, LongTokensAreShortenedInMessages) {
  EXPECT_FAILURE(eval_failure("1 'a very long string literal indeed'"), kParse, "e:1:3",
                 "expected end of expression but found string 'a very long string l...");
}

TEST(TemplateErrors, UnknownFunctionsFiltersAndTests) {
  EXPECT_FAILURE(eval_failure("foo(1)"), kParse, "e:1:1", "unknown function 'foo' (the only function is range())");
  EXPECT_FAILURE(eval_failure("x.upper()"), kParse, "e:1:8", "only functions can be called, and the only function is range()");
  EXPECT_FAILURE(eval_failure("range()"), kParse, "e:1:1", "range() takes 1 to 3 arguments, got 0");
  EXPECT_FAILURE(eval_failure("range(1, 2, 3, 4)"), kParse, "e:1:1", "range() takes 1 to 3 arguments, got 4");
  EXPECT_FAILURE(render_failure("{{ name|uper }}"), kParse, "t.j2:1:9", "unknown filter 'uper' (did you mean 'upper'?)");
  EXPECT_FAILURE(eval_failure("x|frobnicate"), kParse, "e:1:3", "unknown filter 'frobnicate'");
  EXPECT_FAILURE(eval_failure("x|defualt(1)"), kParse, "e:1:3", "unknown filter 'defualt' (did you mean 'default'?)");
  EXPECT_FAILURE(eval_failure("x is evn"), kParse, "e:1:6", "unknown test 'evn' (did you mean 'even'?)");
  EXPECT_FAILURE(eval_failure("x is not blue"), kParse, "e:1:10", "unknown test 'blue'");
  EXPECT_FAILURE(eval_failure("x is divisibleby"), kParse, "e:1:6", "test 'divisibleby' takes 1 argument, got 0");
  EXPECT_FAILURE(eval_failure("x is even(2)"), kParse, "e:1:6", "test 'even' takes 0 arguments, got 1");
}

TEST(TemplateErrors, UnknownNamesAreFoundEvenInDeadBranches) {
  EXPECT_FAILURE(render_failure("{% if false %}\n  {{ x|uper }}\n{% endif %}"), kParse, "t.j2:2:8",
                 "unknown filter 'uper' (did you mean 'upper'?)");
}

TEST(TemplateErrors, TooDeeplyNestedExpressions) {
  EXPECT_FAILURE(eval_failure(std::string(101, '(') + "1" + std::string(101, ')')), kParse, "e:1:101",
                 "expression nested too deeply (more than 100 levels)");
  std::string chain = "1";
  for (int i = 0; i < 200; ++i) chain += "+1";
  EXPECT_FAILURE(eval_failure(chain), kParse, "e:1:400", "expression nested too deeply (more than 200 levels)");
}

// ---- evaluation: names and access --------------------------------------------------------

TEST(TemplateErrors, UndefinedVariable) {
  Value ctx(Map{{"block_m", 64}});
  EXPECT_FAILURE(render_failure("int m = {{ blok_m }};", ctx), kEval, "t.j2:1:12",
                 "undefined variable 'blok_m' (did you mean 'block_m'?)");
  EXPECT_FAILURE(render_failure("\n  {{ 1 + zzz }}", ctx), kEval, "t.j2:2:10", "undefined variable 'zzz'");
  EXPECT_FAILURE(render_failure("{% set abc = 1 %}{{ abd }}"), kEval, "t.j2:1:21",
                 "undefined variable 'abd' (did you mean 'abc'?)");
  EXPECT_FAILURE(eval_failure("q"), kEval, "e:1:1", "undefined variable 'q'");
}

TEST(TemplateErrors, MissingAttributeOrKey) {
  Value ctx(Map{{"params", Map{{"block_m", 64}}}, {"n", 3}});
  EXPECT_FAILURE(render_failure("{{ params.blok_m }}", ctx), kEval, "t.j2:1:11",
                 "'params' has no attribute 'blok_m' (did you mean 'block_m'?)");
  EXPECT_FAILURE(render_failure("{{ params['zz'] }}", ctx), kEval, "t.j2:1:11", "'params' has no key 'zz'");
  EXPECT_FAILURE(eval_failure("{}.x"), kEval, "e:1:4", "the map has no attribute 'x'");
  EXPECT_FAILURE(eval_failure("{}['x']"), kEval, "e:1:4", "the map has no key 'x'");
  EXPECT_FAILURE(eval_failure("n.x", ctx), kEval, "e:1:3", "'n' (an int) has no attribute 'x'");
  EXPECT_FAILURE(eval_failure("(1.5).x"), kEval, "e:1:7", "a float has no attribute 'x'");
  EXPECT_FAILURE(eval_failure("params.block_m.x", ctx), kEval, "e:1:16", "'params.block_m' (an int) has no attribute 'x'");
}

TEST(TemplateErrors, BadIndex) {
  Value ctx(Map{{"l", List{1, 2, 3}}, {"s", "ab"}, {"m", Map{}}, {"n", 1}});
  EXPECT_FAILURE(eval_failure("l[3]", ctx), kEval, "e:1:3", "index 3 is out of range for 'l' (a list of 3 items)");
  EXPECT_FAILURE(eval_failure("l[-4]", ctx), kEval, "e:1:3", "index -4 is out of range for 'l' (a list of 3 items)");
  EXPECT_FAILURE(eval_failure("s[2]", ctx), kEval, "e:1:3", "index 2 is out of range for 's' (a string of 2 characters)");
  EXPECT_FAILURE(eval_failure("[7][1]"), kEval, "e:1:5", "index 1 is out of range for a list of 1 item");
  EXPECT_FAILURE(eval_failure("l['a']", ctx), kEval, "e:1:3", "list index must be an int, got string");
  EXPECT_FAILURE(eval_failure("s[1.0]", ctx), kEval, "e:1:3", "string index must be an int, got float");
  EXPECT_FAILURE(eval_failure("m[1]", ctx), kEval, "e:1:3", "map keys are strings, got an int");
  EXPECT_FAILURE(eval_failure("n[0]", ctx), kEval, "e:1:3", "'n' (an int) cannot be indexed");
  EXPECT_FAILURE(eval_failure("none[0]"), kEval, "e:1:6", "none cannot be indexed");
  // Even under `default`, a wrong index type is an error, not "undefined".
  EXPECT_FAILURE(eval_failure("l['a']|default(1)", ctx), kEval, "e:1:3", "list index must be an int, got string");
}

// ---- evaluation: operators ---------------------------------------------------------------

TEST(TemplateErrors, TypeMismatchInOperators) {
  EXPECT_FAILURE(eval_failure("'a' * 'b'"), kEval, "e:1:5", "unsupported operand types for '*': string and string");
  EXPECT_FAILURE(eval_failure("1 + 'a'"), kEval, "e:1:3", "unsupported operand types for '+': int and string");
  EXPECT_FAILURE(eval_failure("[1] - [1]"), kEval, "e:1:5", "unsupported operand types for '-': list and list");
  EXPECT_FAILURE(eval_failure("true + 1"), kEval, "e:1:6", "unsupported operand types for '+': bool and int");
  EXPECT_FAILURE(eval_failure("none + 1"), kEval, "e:1:6", "unsupported operand types for '+': none and int");
  EXPECT_FAILURE(eval_failure("'a' / 2"), kEval, "e:1:5", "unsupported operand types for '/': string and int");
  EXPECT_FAILURE(eval_failure("'a' // 2"), kEval, "e:1:5", "unsupported operand types for '//': string and int");
  EXPECT_FAILURE(eval_failure("'a' % 2"), kEval, "e:1:5", "unsupported operand types for '%': string and int");
  EXPECT_FAILURE(eval_failure("'a' ** 2"), kEval, "e:1:5", "unsupported operand types for '**': string and int");
  EXPECT_FAILURE(eval_failure("'a' * 1.5"), kEval, "e:1:5", "unsupported operand types for '*': string and float");
  EXPECT_FAILURE(eval_failure("-'a'"), kEval, "e:1:1", "unary '-' needs a number, got a string");
  EXPECT_FAILURE(eval_failure("+[1]"), kEval, "e:1:1", "unary '+' needs a number, got a list");
  EXPECT_FAILURE(eval_failure("1 ~ none"), kEval, "e:1:3", "cannot use none with '~'");
}

TEST(TemplateErrors, DivisionByZero) {
  EXPECT_FAILURE(eval_failure("1 / 0"), kEval, "e:1:3", "division by zero");
  EXPECT_FAILURE(eval_failure("1.5 / 0.0"), kEval, "e:1:5", "division by zero");
  EXPECT_FAILURE(eval_failure("1 // 0"), kEval, "e:1:3", "division by zero");
  EXPECT_FAILURE(eval_failure("1 % 0"), kEval, "e:1:3", "division by zero in '%'");
  EXPECT_FAILURE(eval_failure("1.0 % 0"), kEval, "e:1:5", "division by zero in '%'");
  EXPECT_FAILURE(eval_failure("0 ** -1"), kEval, "e:1:3", "division by zero in '**'");
}

TEST(TemplateErrors, Overflow) {
  EXPECT_FAILURE(eval_failure("9223372036854775807 + 1"), kEval, "e:1:21", "integer overflow in '+'");
  EXPECT_FAILURE(eval_failure("-9223372036854775807 - 2"), kEval, "e:1:22", "integer overflow in '-'");
  EXPECT_FAILURE(eval_failure("4294967296 * 4294967296"), kEval, "e:1:12", "integer overflow in '*'");
  EXPECT_FAILURE(eval_failure("(-9223372036854775807 - 1) // -1"), kEval, "e:1:28", "integer overflow in '//'");
  EXPECT_FAILURE(eval_failure("2 ** 63"), kEval, "e:1:3", "integer overflow in '**'");
  EXPECT_FAILURE(eval_failure("-(-9223372036854775807 - 1)"), kEval, "e:1:1", "integer overflow in unary '-'");
  EXPECT_FAILURE(eval_failure("1e300 * 1e300"), kEval, "e:1:7", "float overflow in '*'");
  EXPECT_FAILURE(eval_failure("10.0 ** 400"), kEval, "e:1:6", "float overflow in '**'");
  EXPECT_FAILURE(eval_failure("-8 ** 0.5"), kEval, "e:1:4", "the result of '**' is not a real number");
}

TEST(TemplateErrors, BadComparisonsAndMembership) {
  EXPECT_FAILURE(eval_failure("1 < 'a'"), kEval, "e:1:3", "cannot compare int and string with '<'");
  EXPECT_FAILURE(eval_failure("[1] >= [1]"), kEval, "e:1:5", "cannot compare list and list with '>='");
  EXPECT_FAILURE(eval_failure("1 < 2 < 'x'"), kEval, "e:1:7", "cannot compare int and string with '<'");
  EXPECT_FAILURE(eval_failure("1 in 'abc'"), kEval, "e:1:3", "'in' with a string on the right needs a string on the left, got an int");
  EXPECT_FAILURE(eval_failure("1 not in {'a': 1}"), kEval, "e:1:3",
                 "'not in' with a map on the right needs a string key on the left, got an int");
  EXPECT_FAILURE(eval_failure("1 in 5"), kEval, "e:1:3", "'in' needs a list, string or map on the right, got an int");
}

TEST(TemplateErrors, BadTestOperands) {
  EXPECT_FAILURE(eval_failure("1.5 is even"), kEval, "e:1:8", "test 'even' needs an int, got a float");
  EXPECT_FAILURE(eval_failure("'a' is odd"), kEval, "e:1:8", "test 'odd' needs an int, got a string");
  EXPECT_FAILURE(eval_failure("4 is divisibleby(0)"), kEval, "e:1:6", "division by zero in 'divisibleby'");
  EXPECT_FAILURE(eval_failure("4 is divisibleby('a')"), kEval, "e:1:6", "test 'divisibleby' needs ints, got an int and a string");
}

TEST(TemplateErrors, BadRange) {
  EXPECT_FAILURE(eval_failure("range(1.5)"), kEval, "e:1:7", "range() needs int arguments, got a float");
  EXPECT_FAILURE(eval_failure("range(0, 'a')"), kEval, "e:1:10", "range() needs int arguments, got a string");
  EXPECT_FAILURE(eval_failure("range(0, 5, 0)"), kEval, "e:1:13", "range() step must not be zero");
}

TEST(TemplateErrors, BadMapLiteralKey) {
  EXPECT_FAILURE(eval_failure("{'a': 1, 2: 3}"), kEval, "e:1:10", "map keys must be strings, got an int");
}

// ---- evaluation: statements --------------------------------------------------------------

TEST(TemplateErrors, PrintingNone) {
  EXPECT_FAILURE(render_failure("a\n{{ none }}"), kEval, "t.j2:2:4", "cannot print none");
  Value ctx(Map{{"p", Map{{"x", Value()}}}});
  EXPECT_FAILURE(render_failure("{{ p.x }}", ctx), kEval, "t.j2:1:4", "cannot print none");
  EXPECT_FAILURE(render_failure("{{ [none]|first }}"), kEval, "t.j2:1:4", "cannot print none");
}

TEST(TemplateErrors, LoopOverNonSequence) {
  Value ctx(Map{{"n", 3}, {"m", Map{{"a", 1}}}});
  EXPECT_FAILURE(render_failure("{% for x in n %}{% endfor %}", ctx), kEval, "t.j2:1:13",
                 "cannot loop over 'n' (an int): only lists and maps");
  EXPECT_FAILURE(render_failure("{% for c in 'abc' %}{% endfor %}"), kEval, "t.j2:1:13",
                 "cannot loop over a string: only lists and maps");
  EXPECT_FAILURE(render_failure("{% for x in none %}{% endfor %}"), kEval, "t.j2:1:13",
                 "cannot loop over none: only lists and maps");
  EXPECT_FAILURE(render_failure("{% for k, v in m %}{% endfor %}", ctx), kEval, "t.j2:1:16",
                 "cannot unpack a string into 2 names (loop over 'map|items' for key, value pairs)");
  EXPECT_FAILURE(render_failure("{% for a, b in [[1, 2, 3]] %}{% endfor %}"), kEval, "t.j2:1:16",
                 "cannot unpack a list of 3 items into 2 names");
  EXPECT_FAILURE(render_failure("{% for a, b in [1] %}{% endfor %}"), kEval, "t.j2:1:16", "cannot unpack an int into 2 names");
  EXPECT_FAILURE(render_failure("{% set a, b = 1 %}"), kEval, "t.j2:1:15", "cannot unpack an int into 2 names");
}

TEST(TemplateErrors, ErrorInsideALoopBodyPointsIntoTheBody) {
  EXPECT_FAILURE(render_failure("{% for x in [1, 0] %}\n  {{ 10 // x }}\n{% endfor %}"), kEval, "t.j2:2:9", "division by zero");
}

TEST(TemplateErrors, ContextMustBeAMap) {
  EXPECT_FAILURE(render_failure("x", Value(List{})), kEval, "t.j2", "the context must be a map, got a list");
  EXPECT_FAILURE(eval_failure("1", Value(3)), kEval, "e", "the context must be a map, got an int");
}

// ---- include -----------------------------------------------------------------------------

TEST(TemplateErrors, MissingInclude) {
  EXPECT_FAILURE(render_failure("a\n{% include 'nope.j2' %}"), Errc::not_found, "t.j2:2:12", "template 'nope.j2' not found");
  std::map<std::string, std::string> files = {{"a.j2", "\n{% include 'gone.j2' %}"}};
  EXPECT_FAILURE(render_failure("{% include 'a.j2' %}", Value(), files), Errc::not_found, "a.j2:2:12",
                 "template 'gone.j2' not found (included from t.j2:1:1)");
  EXPECT_FAILURE(render_failure("{% include 3 %}"), kEval, "t.j2:1:12", "include needs a template name (a string), got an int");
}

TEST(TemplateErrors, IncludeCycle) {
  std::map<std::string, std::string> files = {
      {"a.j2", "A{% include 'b.j2' %}"},
      {"b.j2", "B\n  {% include 'a.j2' %}"},
      {"self.j2", "{% include 'self.j2' %}"},
  };
  EXPECT_FAILURE(render_failure("{% include 'a.j2' %}", Value(), files), kEval, "b.j2:2:14",
                 "include cycle: t.j2 -> a.j2 -> b.j2 -> a.j2 (included from a.j2:1:2, from t.j2:1:1)");
  EXPECT_FAILURE(render_failure("{% include 'self.j2' %}", Value(), files), kEval, "self.j2:1:12",
                 "include cycle: t.j2 -> self.j2 -> self.j2 (included from t.j2:1:1)");
  EXPECT_FAILURE(render_failure("{% include 't.j2' %}", Value(), files), kEval, "t.j2:1:12", "include cycle: t.j2 -> t.j2");
}

TEST(TemplateErrors, ErrorsInsideIncludesNameTheIncludedTemplate) {
  std::map<std::string, std::string> files = {
      {"outer.j2", "x\n{% include 'inner.j2' %}"},
      {"inner.j2", "\n\n  {{ missing }}"},
      {"bad_syntax.j2", "{% if %}"},
  };
  EXPECT_FAILURE(render_failure("1\n2\n{% include 'inner.j2' %}", Value(), files), kEval, "inner.j2:3:6",
                 "undefined variable 'missing' (included from t.j2:3:1)");
  EXPECT_FAILURE(render_failure("{% include 'outer.j2' %}", Value(), files), kEval, "inner.j2:3:6",
                 "undefined variable 'missing' (included from outer.j2:2:1, from t.j2:1:1)");
  EXPECT_FAILURE(render_failure("\n {% include 'bad_syntax.j2' %}", Value(), files), kParse, "bad_syntax.j2:1:7",
                 "expected an expression but found '%}' (included from t.j2:2:2)");
}

// ---- limits ------------------------------------------------------------------------------

TEST(TemplateErrors, StepLimit) {
  Options o;
  o.max_steps = 100;
  // range(50) is 50 steps, then each outer iteration 1 + 3 (inner range) + 3 (inner
  // iterations): the inner range of the 8th iteration crosses 100.
  EXPECT_FAILURE(render_failure("{% for i in range(50) %}{% for j in range(3) %}{% endfor %}{% endfor %}", Value(), {}, o),
                 kEval, "t.j2:1:37", "the template takes more than 100 steps; see Options::max_steps");
  EXPECT_FAILURE(render_failure("{{ range(101)|length }}", Value(), {}, o), kEval, "t.j2:1:4",
                 "the template takes more than 100 steps; see Options::max_steps");
  EXPECT_FAILURE(render_failure("{{ [1, 2] * 60 }}", Value(), {}, o), kEval, "t.j2:1:11",
                 "the template takes more than 100 steps; see Options::max_steps");
  EXPECT_FAILURE(render_failure("{{ range(9223372036854775807)|length }}"), kEval, "t.j2:1:4",
                 "the template takes more than 50000000 steps; see Options::max_steps");
}

TEST(TemplateErrors, StepLimitCountsStringWork) {
  Options o;
  o.max_steps = 100;
  // range(10): 10 steps; first iteration: 1; 'x' * 6400 builds 6400 bytes: 100 steps.
  EXPECT_FAILURE(render_failure("{% for i in range(10) %}{% set s = 'x' * 6400 %}{% endfor %}", Value(), {}, o),
                 kEval, "t.j2:1:40", "the template takes more than 100 steps; see Options::max_steps");
  // Reading a 640-byte string copies it: 10 steps each time. 10 + 20 + 15 * 11 = 195, and
  // the 16th iteration crosses 200 when it reads s.
  o.max_steps = 200;
  EXPECT_FAILURE(render_failure("{% set s = 'x' * 640 %}{% for i in range(20) %}{{ s|length }}{% endfor %}", Value(), {}, o),
                 kEval, "t.j2:1:51", "the template takes more than 200 steps; see Options::max_steps");
  // Lists built by filters count their items (60 here; 'x' * 60 is under 64 bytes: free).
  o.max_steps = 50;
  EXPECT_FAILURE(render_failure("{{ ('x' * 60)|list|length }}", Value(), {}, o), kEval, "t.j2:1:15",
                 "the template takes more than 50 steps; see Options::max_steps");
}

TEST(TemplateErrors, SizeLimit) {
  Options o;
  o.max_output_bytes = 10;
  EXPECT_FAILURE(render_failure("{{ 'abc' * 4 }}", Value(), {}, o), kEval, "t.j2:1:10",
                 "the string would be larger than 10 bytes; see Options::max_output_bytes");
  EXPECT_FAILURE(render_failure("{{ 'abcdef' ~ 'ghijk' }}", Value(), {}, o), kEval, "t.j2:1:13",
                 "the string would be larger than 10 bytes; see Options::max_output_bytes");
  EXPECT_FAILURE(render_failure("{{ 'abcdef' + 'ghijk' }}", Value(), {}, o), kEval, "t.j2:1:13",
                 "the string would be larger than 10 bytes; see Options::max_output_bytes");
  EXPECT_FAILURE(render_failure("0123456789{{ 1 }}", Value(), {}, o), kEval, "t.j2:1:11",
                 "the output would be larger than 10 bytes; see Options::max_output_bytes");
  EXPECT_FAILURE(render_failure("{{ 'abcdefghij' }}x", Value(), {}, o), kEval, "t.j2:1:19",
                 "the output would be larger than 10 bytes; see Options::max_output_bytes");
  EXPECT_FAILURE(render_failure("{{ range(20)|join(',') }}", Value(), {}, o), kEval, "t.j2:1:14",
                 "filter 'join': result would be larger than 10 bytes");
  EXPECT_FAILURE(render_failure("{{ 'aaaa'|replace('a', 'bbb') }}", Value(), {}, o), kEval, "t.j2:1:11",
                 "filter 'replace': result would be larger than 10 bytes");
  EXPECT_FAILURE(render_failure("{{ 'x' * 9223372036854775807 }}", Value(), {}, o), kEval, "t.j2:1:8",
                 "the string would be larger than 10 bytes; see Options::max_output_bytes");
}

// ---- loaders -----------------------------------------------------------------------------

TEST(TemplateErrors, MissingTopLevelTemplate) {
  Environment env(map_loader({}));
  EXPECT_FAILURE(failure_of([&] { env.render("nope.j2", Value()); }), Errc::not_found, "nope.j2",
                 "template 'nope.j2' not found");
}
