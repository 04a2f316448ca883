// Built-in filters, their arguments and their errors, and filters added with add_filter.
#include <gtest/gtest.h>

#include "test_template_util.h"

using namespace sage;
using namespace sage::tmpl;
using sage::tmpl::testing::eval;
using sage::tmpl::testing::eval_failure;
using sage::tmpl::testing::render;

namespace {
std::string typed(const std::string& expr, const Value& ctx = Value()) {
  Value v = eval(expr, ctx);
  return std::string(v.type_name()) + " " + (v.is_none() ? "none" : v.str());
}
}  // namespace

TEST(TemplateFilters, UpperLowerTrim) {
  EXPECT_EQ(eval("'Sm_90a'|upper").as_string(), "SM_90A");
  EXPECT_EQ(eval("'FP8_E4M3'|lower").as_string(), "fp8_e4m3");
  EXPECT_EQ(eval("'  x y \\n'|trim").as_string(), "x y");
}

TEST(TemplateFilters, JoinWithAndWithoutSeparator) {
  Value ctx(Map{{"xs", List{1, "b", 2.5, true}}});
  EXPECT_EQ(eval("xs|join(', ')", ctx).as_string(), "1, b, 2.5, true");
  EXPECT_EQ(eval("xs|join", ctx).as_string(), "1b2.5true");
  EXPECT_EQ(eval("[]|join(',')").as_string(), "");
  EXPECT_EQ(render("{{ [64, 128]|join(\" x \") }}"), "64 x 128");
}

TEST(TemplateFilters, DefaultReplacesUndefined) {
  Value ctx(Map{{"x", 5}, {"m", Map{{"k", 1}}}, {"l", List{1}}, {"zero", 0}, {"n", Value()}});
  EXPECT_EQ(eval("x|default(3)", ctx).as_int(), 5);
  EXPECT_EQ(eval("y|default(3)", ctx).as_int(), 3);
  EXPECT_EQ(eval("m.k|default(2)", ctx).as_int(), 1);
  EXPECT_EQ(eval("m.missing|default(2)", ctx).as_int(), 2);
  EXPECT_EQ(eval("m['missing']|default(2)", ctx).as_int(), 2);
  EXPECT_EQ(eval("l[3]|default(2)", ctx).as_int(), 2);
  EXPECT_EQ(eval("y.z|default('deep')", ctx).as_string(), "deep");
  EXPECT_EQ(eval("y|default", ctx).as_string(), "");
  EXPECT_EQ(eval("y|d(4)", ctx).as_int(), 4);
  // Defined falsy values stay unless the second argument is true.
  EXPECT_EQ(eval("zero|default(7)", ctx).as_int(), 0);
  EXPECT_EQ(eval("zero|default(7, true)", ctx).as_int(), 7);
  EXPECT_TRUE(eval("n|default(7)", ctx).is_none());
  EXPECT_EQ(eval("n|default(7, true)", ctx).as_int(), 7);
  // The default is only evaluated when needed.
  EXPECT_EQ(eval("x|default(undefined_name)", ctx).as_int(), 5);
  EXPECT_EQ(eval("(1 + 1)|default(9)").as_int(), 2);
}

TEST(TemplateFilters, IntConverts) {
  EXPECT_EQ(typed("7|int"), "int 7");
  EXPECT_EQ(typed("7.9|int"), "int 7");
  EXPECT_EQ(typed("-7.9|int"), "int -7");
  EXPECT_EQ(typed("'42'|int"), "int 42");
  EXPECT_EQ(typed("'-42'|int"), "int -42");
  EXPECT_EQ(typed("true|int"), "int 1");
}

TEST(TemplateFilters, FloatConverts) {
  EXPECT_EQ(typed("7|float"), "float 7.0");
  EXPECT_EQ(typed("'2.5'|float"), "float 2.5");
  EXPECT_EQ(typed("'1e-3'|float"), "float 0.001");
  EXPECT_EQ(typed("false|float"), "float 0.0");
  EXPECT_EQ(typed("0.5|float"), "float 0.5");
}

TEST(TemplateFilters, StringAndList) {
  EXPECT_EQ(typed("12|string"), "string 12");
  EXPECT_EQ(typed("1.0|string"), "string 1.0");
  EXPECT_EQ(typed("[1, 'a']|string"), "string [1, 'a']");
  EXPECT_EQ(eval("'ab'|list"), Value(List{"a", "b"}));
  EXPECT_EQ(eval("{'b': 1, 'a': 2}|list"), Value(List{"a", "b"}));
  EXPECT_EQ(eval("[1]|list"), Value(List{1}));
}

TEST(TemplateFilters, LengthAndCount) {
  EXPECT_EQ(eval("'abc'|length").as_int(), 3);
  EXPECT_EQ(eval("[1, 2]|length").as_int(), 2);
  EXPECT_EQ(eval("{'a': 1}|length").as_int(), 1);
  EXPECT_EQ(eval("[]|count").as_int(), 0);
}

TEST(TemplateFilters, FirstLast) {
  EXPECT_EQ(eval("[3, 4, 5]|first").as_int(), 3);
  EXPECT_EQ(eval("[3, 4, 5]|last").as_int(), 5);
  EXPECT_EQ(eval("'xyz'|first").as_string(), "x");
  EXPECT_EQ(eval("'xyz'|last").as_string(), "z");
}

TEST(TemplateFilters, ItemsKeysValues) {
  Value ctx(Map{{"m", Map{{"b", 2}, {"a", "x"}}}});
  EXPECT_EQ(eval("m|items", ctx), Value(List{List{"a", "x"}, List{"b", 2}}));
  EXPECT_EQ(eval("m|keys", ctx), Value(List{"a", "b"}));
  EXPECT_EQ(eval("m|values", ctx), Value(List{"x", 2}));
}

TEST(TemplateFilters, Replace) {
  EXPECT_EQ(eval("'a.b.c'|replace('.', '::')").as_string(), "a::b::c");
  EXPECT_EQ(eval("'a.b.c'|replace('.', '', 1)").as_string(), "ab.c");
  EXPECT_EQ(eval("'aaa'|replace('a', 'aa')").as_string(), "aaaaaa");
  EXPECT_EQ(eval("'abc'|replace('x', 'y')").as_string(), "abc");
}

TEST(TemplateFilters, AbsRound) {
  EXPECT_EQ(typed("-5|abs"), "int 5");
  EXPECT_EQ(typed("-2.5|abs"), "float 2.5");
  EXPECT_EQ(typed("2.5|round"), "float 3.0");  // halves away from zero
  EXPECT_EQ(typed("-2.5|round"), "float -3.0");
  EXPECT_EQ(typed("2.4|round"), "float 2.0");
  EXPECT_EQ(typed("3|round"), "float 3.0");
  EXPECT_EQ(typed("3.14159|round(2)"), "float 3.14");
  EXPECT_EQ(typed("2.1|round(0, 'ceil')"), "float 3.0");
  EXPECT_EQ(typed("2.9|round(0, 'floor')"), "float 2.0");
  EXPECT_EQ(typed("7.5|round|int"), "int 8");
}

TEST(TemplateFilters, MinMaxSumSortReverse) {
  EXPECT_EQ(typed("[3, 1.5, 2]|min"), "float 1.5");
  EXPECT_EQ(typed("[3, 1.5, 2]|max"), "int 3");
  EXPECT_EQ(typed("['b', 'a']|min"), "string a");
  EXPECT_EQ(typed("[1, 2, 3]|sum"), "int 6");
  EXPECT_EQ(typed("[1, 2.5]|sum"), "float 3.5");
  EXPECT_EQ(typed("[]|sum"), "int 0");
  EXPECT_EQ(eval("[3, 1, 2.5]|sort"), Value(List{1, 2.5, 3}));
  EXPECT_EQ(eval("['b', 'c', 'a']|sort"), Value(List{"a", "b", "c"}));
  EXPECT_EQ(eval("[1, 2, 3]|reverse"), Value(List{3, 2, 1}));
  EXPECT_EQ(eval("'abc'|reverse").as_string(), "cba");
}

TEST(TemplateFilters, ErrorsNameTheFilterAndItsPlace) {
  using sage::Errc;
  EXPECT_FAILURE(eval_failure("'x'|int"), Errc::invalid_argument, "e:1:5", "filter 'int': cannot convert 'x' to int");
  EXPECT_FAILURE(eval_failure("'3.5'|int"), Errc::invalid_argument, "e:1:7", "filter 'int': cannot convert '3.5' to int");
  EXPECT_FAILURE(eval_failure("''|int"), Errc::invalid_argument, "e:1:4", "filter 'int': cannot convert '' to int");
  EXPECT_FAILURE(eval_failure("[1]|int"), Errc::invalid_argument, "e:1:5", "filter 'int': cannot convert list to int");
  EXPECT_FAILURE(eval_failure("1e300|int"), Errc::invalid_argument, "e:1:7",
                 "filter 'int': cannot convert 1e+300 to int: out of range");
  EXPECT_FAILURE(eval_failure("'abc'|float"), Errc::invalid_argument, "e:1:7", "filter 'float': cannot convert 'abc' to float");
  EXPECT_FAILURE(eval_failure("'inf'|float"), Errc::invalid_argument, "e:1:7", "filter 'float': cannot convert 'inf' to float");
  EXPECT_FAILURE(eval_failure("none|float"), Errc::invalid_argument, "e:1:6", "filter 'float': cannot convert none to float");
  EXPECT_FAILURE(eval_failure("none|string"), Errc::invalid_argument, "e:1:6", "filter 'string': cannot convert none to string");
  EXPECT_FAILURE(eval_failure("1|list"), Errc::invalid_argument, "e:1:3", "filter 'list': cannot convert int to list");
  EXPECT_FAILURE(eval_failure("1|upper"), Errc::invalid_argument, "e:1:3", "filter 'upper': expected string, got int");
  EXPECT_FAILURE(eval_failure("none|lower"), Errc::invalid_argument, "e:1:6", "filter 'lower': expected string, got none");
  EXPECT_FAILURE(eval_failure("'a'|join(',')"), Errc::invalid_argument, "e:1:5", "filter 'join': expected list, got string");
  EXPECT_FAILURE(eval_failure("[1]|join(2)"), Errc::invalid_argument, "e:1:5", "filter 'join': expected string, got int");
  EXPECT_FAILURE(eval_failure("[none]|join"), Errc::invalid_argument, "e:1:8", "filter 'join': cannot join none");
  EXPECT_FAILURE(eval_failure("5|length"), Errc::invalid_argument, "e:1:3", "filter 'length': an int has no length");
  EXPECT_FAILURE(eval_failure("[]|first"), Errc::invalid_argument, "e:1:4", "filter 'first': the list is empty");
  EXPECT_FAILURE(eval_failure("''|last"), Errc::invalid_argument, "e:1:4", "filter 'last': the string is empty");
  EXPECT_FAILURE(eval_failure("[]|items"), Errc::invalid_argument, "e:1:4", "filter 'items': expected map, got list");
  EXPECT_FAILURE(eval_failure("'a'|replace('', 'b')"), Errc::invalid_argument, "e:1:5",
                 "filter 'replace': the text to replace must not be empty");
  EXPECT_FAILURE(eval_failure("'a'|abs"), Errc::invalid_argument, "e:1:5", "filter 'abs': expected a number, got string");
  EXPECT_FAILURE(eval_failure("(-9223372036854775807 - 1)|abs"), Errc::invalid_argument, "e:1:28",
                 "filter 'abs': integer overflow");
  EXPECT_FAILURE(eval_failure("1.5|round(1, 'up')"), Errc::invalid_argument, "e:1:5",
                 "filter 'round': method must be 'common', 'floor' or 'ceil', got 'up'");
  EXPECT_FAILURE(eval_failure("1.5|round(16)"), Errc::invalid_argument, "e:1:5",
                 "filter 'round': precision must be 0 to 15, got 16");
  EXPECT_FAILURE(eval_failure("[]|max"), Errc::invalid_argument, "e:1:4", "filter 'max': the list is empty");
  EXPECT_FAILURE(eval_failure("[1, 'a']|sort"), Errc::invalid_argument, "e:1:10",
                 "filter 'sort': the list must hold only numbers or only strings");
  EXPECT_FAILURE(eval_failure("[1, 'a']|sum"), Errc::invalid_argument, "e:1:10", "filter 'sum': cannot add string to a sum");
  EXPECT_FAILURE(eval_failure("[9223372036854775807, 1]|sum"), Errc::invalid_argument, "e:1:26",
                 "filter 'sum': integer overflow");
  EXPECT_FAILURE(eval_failure("[1e308, 1e308]|sum"), Errc::invalid_argument, "e:1:16", "filter 'sum': float overflow");
}

TEST(TemplateFilters, WrongArgumentCountIsAParseError) {
  using sage::Errc;
  EXPECT_FAILURE(eval_failure("'a'|upper(1)"), Errc::parse_error, "e:1:5", "filter 'upper' takes 0 arguments, got 1");
  EXPECT_FAILURE(eval_failure("'a'|replace('a')"), Errc::parse_error, "e:1:5", "filter 'replace' takes 2 to 3 arguments, got 1");
  EXPECT_FAILURE(eval_failure("[1]|join(',', 2)"), Errc::parse_error, "e:1:5", "filter 'join' takes 0 to 1 arguments, got 2");
  EXPECT_FAILURE(eval_failure("x|default(1, 2, 3)"), Errc::parse_error, "e:1:3", "filter 'default' takes 0 to 2 arguments, got 3");
}

TEST(TemplateFilters, AddFilter) {
  Environment env(map_loader({}));
  env.add_filter("cuda_bool", [](const Value& in, const List&) { return Value(in.truthy() ? "true" : "false"); });
  env.add_filter("pad", [](const Value& in, const List& args) {
    std::string s = in.str();
    while (s.size() < std::size_t(args.at(0).as_int())) s = " " + s;
    return Value(s);
  });
  EXPECT_EQ(env.render_string("t", "{{ 0|cuda_bool }} [{{ 42|pad(5) }}]", Value()), "false [   42]");
  // Errors from a filter get the place and the filter's name.
  try {
    env.render_string("t", "\n  {{ 'x'|pad('y') }}", Value());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_EQ(e.where(), "t:2:10");
    EXPECT_EQ(e.message(), "filter 'pad': expected int, got string");
  }
  // Replacing a built-in.
  env.add_filter("upper", [](const Value&, const List&) { return Value("U"); });
  EXPECT_EQ(env.render_string("t", "{{ 'a'|upper }}", Value()), "U");
}

TEST(TemplateFilters, AddFilterRejectsBadNamesAndDefault) {
  Environment env(map_loader({}));
  auto f = [](const Value& in, const List&) { return in; };
  EXPECT_THROW(env.add_filter("default", f), Error);
  EXPECT_THROW(env.add_filter("d", f), Error);
  EXPECT_THROW(env.add_filter("", f), Error);
  EXPECT_THROW(env.add_filter("a-b", f), Error);
  EXPECT_THROW(env.add_filter("1a", f), Error);
  EXPECT_THROW(env.add_filter("ok", Filter()), Error);
  EXPECT_NO_THROW(env.add_filter("ok_2", f));
}

TEST(TemplateFilters, AddFilterAfterATemplateWasCached) {
  Environment env(map_loader({{"t.j2", "{{ 'a'|tag }}"}}));
  env.add_filter("tag", [](const Value&, const List&) { return Value("one"); });
  EXPECT_EQ(env.render("t.j2", Value()), "one");
  env.add_filter("tag", [](const Value&, const List&) { return Value("two"); });
  EXPECT_EQ(env.render("t.j2", Value()), "two");
}
