// Expressions: literals, access, operators with their precedence, int/float semantics,
// comparisons, membership, logic, tests and range(). Mostly through Environment::eval.
#include <gtest/gtest.h>

#include <cmath>

#include "test_template_util.h"

using namespace sage;
using namespace sage::tmpl;
using sage::tmpl::testing::eval;
using sage::tmpl::testing::render;

namespace {
// The value's type and printed form: "int 7", "float 3.5".
std::string typed(const std::string& expr, const Value& ctx = Value()) {
  Value v = eval(expr, ctx);
  return std::string(v.type_name()) + " " + (v.is_none() ? "none" : v.str());
}
}  // namespace

TEST(TemplateExpressions, IntegerAndFloatLiterals) {
  EXPECT_EQ(typed("42"), "int 42");
  EXPECT_EQ(typed("0"), "int 0");
  EXPECT_EQ(typed("9223372036854775807"), "int 9223372036854775807");
  EXPECT_EQ(typed("1.5"), "float 1.5");
  EXPECT_EQ(typed("2e3"), "float 2000.0");
  EXPECT_EQ(typed("2.5E-1"), "float 0.25");
  EXPECT_EQ(typed("1e+2"), "float 100.0");
}

TEST(TemplateExpressions, StringLiteralsWithEscapes) {
  EXPECT_EQ(eval("'single'").as_string(), "single");
  EXPECT_EQ(eval("\"double\"").as_string(), "double");
  EXPECT_EQ(eval(R"('a\nb\tc\\d\'e\"f')").as_string(), "a\nb\tc\\d'e\"f");
  EXPECT_EQ(eval(R"("it's \"x\"")").as_string(), "it's \"x\"");
  EXPECT_EQ(eval(R"('\r\0')").as_string(), std::string("\r\0", 2));
  EXPECT_EQ(eval("''").as_string(), "");
  EXPECT_EQ(eval("'{{ not a tag }}'").as_string(), "{{ not a tag }}");
}

TEST(TemplateExpressions, BoolAndNoneLiterals) {
  EXPECT_EQ(typed("true"), "bool true");
  EXPECT_EQ(typed("True"), "bool true");
  EXPECT_EQ(typed("false"), "bool false");
  EXPECT_EQ(typed("False"), "bool false");
  EXPECT_TRUE(eval("none").is_none());
  EXPECT_TRUE(eval("None").is_none());
}

TEST(TemplateExpressions, ListAndMapLiterals) {
  EXPECT_EQ(eval("[1, 'a', [2.5], none]"), Value(List{1, "a", List{2.5}, Value()}));
  EXPECT_EQ(eval("[]"), Value(List{}));
  EXPECT_EQ(eval("[1, 2,]"), Value(List{1, 2}));
  EXPECT_EQ(eval("{'a': 1, \"b\": [true]}"), Value(Map{{"a", 1}, {"b", List{true}}}));
  EXPECT_EQ(eval("{}"), Value(Map{}));
  EXPECT_EQ(eval("{'k' ~ 1: 2,}"), Value(Map{{"k1", 2}}));
  // Map literals inside {{ }}: "}}" closes the map while a '{' is open.
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
  EXPECT_EQ(render("{{ {'a': {'b': 1}}['a']['b'] }}"), "1");
}

TEST(TemplateExpressions, VariablesAttributesAndIndices) {
  Value ctx(Map{{"p", Map{{"tile", List{64, 128}}, {"name", "mma"}, {"arch", Map{{"cc", 90}}}}},
                {"i", 1}, {"key", "name"}});
  EXPECT_EQ(eval("p.arch.cc", ctx).as_int(), 90);
  EXPECT_EQ(eval("p['arch']['cc']", ctx).as_int(), 90);
  EXPECT_EQ(eval("p[key]", ctx).as_string(), "mma");
  EXPECT_EQ(eval("p.tile[0]", ctx).as_int(), 64);
  EXPECT_EQ(eval("p.tile[i]", ctx).as_int(), 128);
  EXPECT_EQ(eval("p.tile[-1]", ctx).as_int(), 128);
  EXPECT_EQ(eval("p.tile[-2]", ctx).as_int(), 64);
  EXPECT_EQ(eval("p.name[0]", ctx).as_string(), "m");
  EXPECT_EQ(eval("p.name[-1]", ctx).as_string(), "a");
  EXPECT_EQ(eval("[10, 20, 30][1]").as_int(), 20);
  EXPECT_EQ(eval("{'a': 5}.a").as_int(), 5);
}

TEST(TemplateExpressions, ArithmeticIntSemantics) {
  EXPECT_EQ(typed("7 + 3"), "int 10");
  EXPECT_EQ(typed("7 - 10"), "int -3");
  EXPECT_EQ(typed("7 * 3"), "int 21");
  EXPECT_EQ(typed("7 // 2"), "int 3");
  EXPECT_EQ(typed("-7 // 2"), "int -4");  // floor, not truncation
  EXPECT_EQ(typed("7 // -2"), "int -4");
  EXPECT_EQ(typed("7 % 3"), "int 1");
  EXPECT_EQ(typed("-7 % 3"), "int 2");    // the sign of the divisor
  EXPECT_EQ(typed("7 % -3"), "int -2");
  EXPECT_EQ(typed("2 ** 10"), "int 1024");
  EXPECT_EQ(typed("(-3) ** 3"), "int -27");
  EXPECT_EQ(typed("5 ** 0"), "int 1");
  EXPECT_EQ(typed("-9223372036854775807 - 1"), "int -9223372036854775808");
  EXPECT_EQ(typed("(-9223372036854775807 - 1) % -1"), "int 0");
}

TEST(TemplateExpressions, DivisionAlwaysGivesFloat) {
  EXPECT_EQ(typed("6 / 3"), "float 2.0");
  EXPECT_EQ(typed("7 / 2"), "float 3.5");
  EXPECT_EQ(typed("1 / 4"), "float 0.25");
}

TEST(TemplateExpressions, MixedIntFloatGivesFloat) {
  EXPECT_EQ(typed("1 + 0.5"), "float 1.5");
  EXPECT_EQ(typed("2.0 * 3"), "float 6.0");
  EXPECT_EQ(typed("3 - 1.0"), "float 2.0");
  EXPECT_EQ(typed("7.5 // 2"), "float 3.0");
  EXPECT_EQ(typed("-7.5 // 2"), "float -4.0");
  EXPECT_EQ(typed("7.5 % 2"), "float 1.5");
  EXPECT_EQ(typed("-7.5 % 2"), "float 0.5");
  EXPECT_EQ(typed("2 ** -1"), "float 0.5");
  EXPECT_EQ(typed("4 ** 0.5"), "float 2.0");
  EXPECT_EQ(typed("0.1 + 0.2"), "float 0.30000000000000004");
}

TEST(TemplateExpressions, UnaryMinusAndPlus) {
  EXPECT_EQ(typed("-5"), "int -5");
  EXPECT_EQ(typed("--5"), "int 5");
  EXPECT_EQ(typed("-2.5"), "float -2.5");
  EXPECT_EQ(typed("+3"), "int 3");
  EXPECT_EQ(typed("3 - -2"), "int 5");
  Value ctx(Map{{"x", 4}});
  EXPECT_EQ(typed("-x", ctx), "int -4");
}

TEST(TemplateExpressions, StringAndListOperators) {
  EXPECT_EQ(eval("'ab' + 'cd'").as_string(), "abcd");
  EXPECT_EQ(eval("'ab' * 3").as_string(), "ababab");
  EXPECT_EQ(eval("2 * 'x'").as_string(), "xx");
  EXPECT_EQ(eval("'x' * 0").as_string(), "");
  EXPECT_EQ(eval("'x' * -2").as_string(), "");
  EXPECT_EQ(eval("[1] + [2, 3]"), Value(List{1, 2, 3}));
  EXPECT_EQ(eval("[0] * 3"), Value(List{0, 0, 0}));
  // Repeating nothing is instant, however large the count.
  EXPECT_EQ(eval("'' * 9223372036854775807").as_string(), "");
  EXPECT_EQ(eval("[] * 9223372036854775807"), Value(List{}));
  EXPECT_EQ(eval("'n' ~ 128 ~ '_' ~ 1.5 ~ true"), Value("n128_1.5true"));
}

TEST(TemplateExpressions, ArithmeticPrecedence) {
  EXPECT_EQ(eval("2 + 3 * 4").as_int(), 14);
  EXPECT_EQ(eval("(2 + 3) * 4").as_int(), 20);
  EXPECT_EQ(eval("10 - 4 - 3").as_int(), 3);      // left-associative
  EXPECT_EQ(eval("100 // 10 // 5").as_int(), 2);
  EXPECT_EQ(eval("2 * 3 ** 2").as_int(), 18);     // ** binds tighter than *
  EXPECT_EQ(eval("2 ** 3 ** 2").as_int(), 64);    // left-associative, as in Jinja
  EXPECT_EQ(eval("-2 ** 2").as_int(), 4);         // unary minus binds tighter than **, as in Jinja
  EXPECT_EQ(eval("'n' ~ 1 + 2").as_string(), "n3");  // ~ binds looser than + (unlike Jinja)
  EXPECT_EQ(eval("'n' ~ 2 * 3 ~ 'x'").as_string(), "n6x");
  EXPECT_EQ(eval("1 + 2 == 3").as_bool(), true);     // arithmetic before comparison
  EXPECT_EQ(eval("'a' ~ 'b' == 'ab'").as_bool(), true);
}


TEST(TemplateExpressions, Comparisons) {
  EXPECT_TRUE(eval("1 == 1").as_bool());
  EXPECT_TRUE(eval("1 == 1.0").as_bool());
  EXPECT_FALSE(eval("1 == '1'").as_bool());
  EXPECT_FALSE(eval("true == 1").as_bool());
  EXPECT_TRUE(eval("1 != 2").as_bool());
  EXPECT_TRUE(eval("none == none").as_bool());
  EXPECT_TRUE(eval("[1, [2]] == [1, [2]]").as_bool());
  EXPECT_TRUE(eval("{'a': 1} == {'a': 1.0}").as_bool());
  EXPECT_TRUE(eval("1 < 2").as_bool());
  EXPECT_FALSE(eval("2 < 2").as_bool());
  EXPECT_TRUE(eval("2 <= 2").as_bool());
  EXPECT_TRUE(eval("3 > 2.5").as_bool());
  EXPECT_TRUE(eval("2 >= 2.0").as_bool());
  EXPECT_TRUE(eval("'abc' < 'abd'").as_bool());
  EXPECT_TRUE(eval("'b' > 'abc'").as_bool());
  EXPECT_TRUE(eval("9223372036854775807 > 9223372036854775806").as_bool());
}

TEST(TemplateExpressions, ComparisonsChainAsInPython) {
  EXPECT_TRUE(eval("1 < 2 < 3").as_bool());
  EXPECT_FALSE(eval("1 < 3 < 2").as_bool());
  EXPECT_TRUE(eval("1 < 2 == 2").as_bool());
  Value ctx(Map{{"m", 64}});
  EXPECT_TRUE(eval("16 <= m <= 128", ctx).as_bool());
  // A false link stops the chain: the rest is not evaluated.
  EXPECT_FALSE(eval("2 < 1 < undefined_name").as_bool());
}

TEST(TemplateExpressions, Membership) {
  EXPECT_TRUE(eval("2 in [1, 2, 3]").as_bool());
  EXPECT_TRUE(eval("2.0 in [1, 2, 3]").as_bool());
  EXPECT_FALSE(eval("4 in [1, 2, 3]").as_bool());
  EXPECT_TRUE(eval("4 not in [1, 2, 3]").as_bool());
  EXPECT_TRUE(eval("'ell' in 'hello'").as_bool());
  EXPECT_TRUE(eval("'' in 'hello'").as_bool());
  EXPECT_FALSE(eval("'x' in 'hello'").as_bool());
  EXPECT_TRUE(eval("'a' in {'a': 1}").as_bool());
  EXPECT_TRUE(eval("'b' not in {'a': 1}").as_bool());
  Value ctx(Map{{"arch", Map{{"features", List{"wgmma", "tma"}}}}});
  EXPECT_TRUE(eval("'tma' in arch.features", ctx).as_bool());
  EXPECT_TRUE(eval("not 'fp8' in arch.features", ctx).as_bool());  // not binds looser than in
}

TEST(TemplateExpressions, LogicReturnsOperandsAndShortCircuits) {
  EXPECT_TRUE(eval("true and true").as_bool());
  EXPECT_FALSE(eval("true and false").as_bool());
  EXPECT_TRUE(eval("false or true").as_bool());
  EXPECT_TRUE(eval("not false").as_bool());
  EXPECT_FALSE(eval("not 1").as_bool());
  EXPECT_TRUE(eval("not not 1").as_bool());
  EXPECT_EQ(eval("0 or 5").as_int(), 5);       // the operand, as in Python
  EXPECT_EQ(eval("3 and 'x'").as_string(), "x");
  EXPECT_EQ(eval("'' and 1").as_string(), "");
  EXPECT_FALSE(eval("false and undefined_name").as_bool());
  EXPECT_TRUE(eval("true or undefined_name").as_bool());
}

TEST(TemplateExpressions, LogicPrecedence) {
  EXPECT_TRUE(eval("true or false and false").as_bool());    // and before or
  EXPECT_FALSE(eval("(true or false) and false").as_bool());
  EXPECT_TRUE(eval("not false and true").as_bool());         // not before and
  EXPECT_FALSE(eval("not (false or true)").as_bool());
  EXPECT_TRUE(eval("1 < 2 and 3 > 2").as_bool());            // comparison before and
}

TEST(TemplateExpressions, ConditionalExpression) {
  EXPECT_EQ(eval("'yes' if 1 < 2 else 'no'").as_string(), "yes");
  EXPECT_EQ(eval("'yes' if 1 > 2 else 'no'").as_string(), "no");
  EXPECT_EQ(eval("1 if false else 2 if false else 3").as_int(), 3);  // right-nested
  EXPECT_EQ(eval("1 + 1 if true else 0").as_int(), 2);               // loosest of all
  EXPECT_EQ(eval("(1 if false else 2) * 10").as_int(), 20);
  EXPECT_EQ(eval("'a' if true else undefined_name").as_string(), "a");
}

TEST(TemplateExpressions, Tests) {
  Value ctx(Map{{"x", 1}, {"n", Value()}, {"m", Map{{"k", 1}}}, {"l", List{1}}});
  EXPECT_TRUE(eval("x is defined", ctx).as_bool());
  EXPECT_FALSE(eval("y is defined", ctx).as_bool());
  EXPECT_TRUE(eval("y is not defined", ctx).as_bool());
  EXPECT_TRUE(eval("y is undefined", ctx).as_bool());
  EXPECT_FALSE(eval("x is undefined", ctx).as_bool());
  EXPECT_TRUE(eval("m.k is defined", ctx).as_bool());
  EXPECT_FALSE(eval("m.z is defined", ctx).as_bool());
  EXPECT_FALSE(eval("m['z'] is defined", ctx).as_bool());
  EXPECT_FALSE(eval("y.z.w is defined", ctx).as_bool());  // undefined all the way down
  EXPECT_FALSE(eval("l[5] is defined", ctx).as_bool());
  EXPECT_TRUE(eval("l[-1] is defined", ctx).as_bool());
  EXPECT_FALSE(eval("x.attr is defined", ctx).as_bool());
  EXPECT_TRUE(eval("(1 + 1) is defined").as_bool());
  EXPECT_TRUE(eval("n is none", ctx).as_bool());
  EXPECT_TRUE(eval("n is defined", ctx).as_bool());   // none is a value
  EXPECT_TRUE(eval("x is not none", ctx).as_bool());
  EXPECT_TRUE(eval("4 is even").as_bool());
  EXPECT_TRUE(eval("-3 is odd").as_bool());
  EXPECT_FALSE(eval("4 is odd").as_bool());
  EXPECT_TRUE(eval("3 is not even").as_bool());
  EXPECT_TRUE(eval("12 is divisibleby(4)").as_bool());
  EXPECT_FALSE(eval("12 is divisibleby(5)").as_bool());
  EXPECT_TRUE(eval("true is boolean").as_bool());
  EXPECT_TRUE(eval("1 is integer").as_bool());
  EXPECT_FALSE(eval("1.0 is integer").as_bool());
  EXPECT_TRUE(eval("1.0 is float").as_bool());
  EXPECT_TRUE(eval("1 is number").as_bool());
  EXPECT_FALSE(eval("true is number").as_bool());
  EXPECT_TRUE(eval("'s' is string").as_bool());
  EXPECT_TRUE(eval("{} is mapping").as_bool());
  EXPECT_TRUE(eval("[] is sequence").as_bool());
  EXPECT_TRUE(eval("'s' is sequence").as_bool());
  EXPECT_FALSE(eval("{} is sequence").as_bool());
}

TEST(TemplateExpressions, TestsBindTighterThanOperators) {
  // As in Jinja: "a + b is even" tests b only; parenthesize to test the sum.
  EXPECT_TRUE(eval("(1 + 3) is even").as_bool());
  EXPECT_TRUE(eval("not 3 is even").as_bool());
  EXPECT_TRUE(eval("[1, 2]|length is even").as_bool());
}

TEST(TemplateExpressions, Range) {
  EXPECT_EQ(eval("range(4)"), Value(List{0, 1, 2, 3}));
  EXPECT_EQ(eval("range(0)"), Value(List{}));
  EXPECT_EQ(eval("range(-2)"), Value(List{}));
  EXPECT_EQ(eval("range(2, 5)"), Value(List{2, 3, 4}));
  EXPECT_EQ(eval("range(5, 2)"), Value(List{}));
  EXPECT_EQ(eval("range(0, 10, 3)"), Value(List{0, 3, 6, 9}));
  EXPECT_EQ(eval("range(5, 0, -2)"), Value(List{5, 3, 1}));
  EXPECT_EQ(eval("range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807)"),
            Value(List{std::numeric_limits<std::int64_t>::min(), -1, std::numeric_limits<std::int64_t>::max() - 1}));
  EXPECT_EQ(render("{% for i in range(1, 4) %}{{ i }}{% endfor %}"), "123");
}

TEST(TemplateExpressions, FiltersBindTighterThanArithmetic) {
  Value ctx(Map{{"xs", List{1, 2, 3}}});
  EXPECT_EQ(eval("1 + xs|length", ctx).as_int(), 4);
  EXPECT_EQ(eval("-3|abs").as_int(), 3);         // (-3)|abs, as in Jinja
  EXPECT_EQ(eval("-(3|abs)").as_int(), -3);
  EXPECT_EQ(eval("xs|join(',')|upper", ctx).as_string(), "1,2,3");
  EXPECT_EQ(eval("'a,b'|replace(',', ';')|upper|length").as_int(), 3);
}

TEST(TemplateExpressions, EvalSeesTheContextAndComputesDerivedValues) {
  Value ctx(Map{{"block_m", 128}, {"block_n", 64}, {"head_dim", 128}, {"stages", 2}});
  EXPECT_EQ(eval("block_m * head_dim + stages * block_n * head_dim", ctx).as_int(), 32768);
  EXPECT_EQ(eval("(block_m * head_dim) * 1 // 1024", ctx).as_int(), 16);
  EXPECT_DOUBLE_EQ(eval("block_m / block_n", ctx).as_number(), 2.0);
}

TEST(TemplateExpressions, EvalAcceptsNewlinesAndNoneContext) {
  EXPECT_EQ(eval("1 +\n  2").as_int(), 3);
  EXPECT_EQ(eval("  7  ").as_int(), 7);
}
