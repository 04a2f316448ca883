// sage::tmpl::Value: construction, typed access, truthiness, printing, equality.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "test_template_util.h"

using namespace sage;
using namespace sage::tmpl;

TEST(TemplateValue, TypesAndNames) {
  EXPECT_EQ(Value().type(), Value::Type::none);
  EXPECT_EQ(Value(nullptr).type(), Value::Type::none);
  EXPECT_EQ(Value(true).type(), Value::Type::boolean);
  EXPECT_EQ(Value(3).type(), Value::Type::integer);
  EXPECT_EQ(Value(std::int64_t(3)).type(), Value::Type::integer);
  EXPECT_EQ(Value(std::size_t(3)).type(), Value::Type::integer);
  EXPECT_EQ(Value(3u).type(), Value::Type::integer);
  EXPECT_EQ(Value(2.5).type(), Value::Type::real);
  EXPECT_EQ(Value(2.5f).type(), Value::Type::real);
  EXPECT_EQ(Value("s").type(), Value::Type::string);
  EXPECT_EQ(Value(std::string("s")).type(), Value::Type::string);
  EXPECT_EQ(Value(std::string_view("s")).type(), Value::Type::string);
  EXPECT_EQ(Value(List{1, 2}).type(), Value::Type::list);
  EXPECT_EQ(Value(Map{{"a", 1}}).type(), Value::Type::map);
  EXPECT_STREQ(Value().type_name(), "none");
  EXPECT_STREQ(Value(false).type_name(), "bool");
  EXPECT_STREQ(Value(1).type_name(), "int");
  EXPECT_STREQ(Value(1.0).type_name(), "float");
  EXPECT_STREQ(Value("").type_name(), "string");
  EXPECT_STREQ(Value(List{}).type_name(), "list");
  EXPECT_STREQ(Value(Map{}).type_name(), "map");
  EXPECT_TRUE(Value().is_none());
  EXPECT_FALSE(Value(0).is_none());
}

TEST(TemplateValue, UnsignedAboveInt64MaxThrows) {
  std::uint64_t big = std::uint64_t(std::numeric_limits<std::int64_t>::max()) + 1;
  EXPECT_THROW(Value{big}, Error);
  EXPECT_EQ(Value(std::uint64_t(std::numeric_limits<std::int64_t>::max())).as_int(),
            std::numeric_limits<std::int64_t>::max());
}

TEST(TemplateValue, TypedAccess) {
  EXPECT_TRUE(Value(true).as_bool());
  EXPECT_EQ(Value(-7).as_int(), -7);
  EXPECT_DOUBLE_EQ(Value(7).as_number(), 7.0);
  EXPECT_DOUBLE_EQ(Value(0.25).as_number(), 0.25);
  EXPECT_EQ(Value("x").as_string(), "x");
  EXPECT_EQ(Value(List{1, 2}).as_list().size(), 2u);
  EXPECT_EQ(Value(Map{{"k", 1}}).as_map().at("k").as_int(), 1);

  auto msg = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument);
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(msg([] { Value("x").as_int(); }), "expected int, got string");
  EXPECT_EQ(msg([] { Value(1).as_bool(); }), "expected bool, got int");
  EXPECT_EQ(msg([] { Value(true).as_number(); }), "expected a number, got bool");
  EXPECT_EQ(msg([] { Value(1.5).as_string(); }), "expected string, got float");
  EXPECT_EQ(msg([] { Value(Map{}).as_list(); }), "expected list, got map");
  EXPECT_EQ(msg([] { Value(List{}).as_map(); }), "expected map, got list");
  EXPECT_EQ(msg([] { Value().as_int(); }), "expected int, got none");
}

TEST(TemplateValue, MutableAccessAndFind) {
  Value l{List{}};
  l.list().push_back(1);
  l.list().push_back("two");
  EXPECT_EQ(l.str(), "[1, 'two']");
  Value m{Map{}};
  m.map()["a"] = 1;
  ASSERT_NE(m.find("a"), nullptr);
  EXPECT_EQ(m.find("a")->as_int(), 1);
  EXPECT_EQ(m.find("b"), nullptr);
  EXPECT_EQ(Value(1).find("a"), nullptr);
  EXPECT_THROW(Value(1).list(), Error);
}

TEST(TemplateValue, Truthiness) {
  EXPECT_FALSE(Value().truthy());
  EXPECT_FALSE(Value(false).truthy());
  EXPECT_FALSE(Value(0).truthy());
  EXPECT_FALSE(Value(0.0).truthy());
  EXPECT_FALSE(Value("").truthy());
  EXPECT_FALSE(Value(List{}).truthy());
  EXPECT_FALSE(Value(Map{}).truthy());
  EXPECT_TRUE(Value(true).truthy());
  EXPECT_TRUE(Value(-1).truthy());
  EXPECT_TRUE(Value(0.1).truthy());
  EXPECT_TRUE(Value("0").truthy());
  EXPECT_TRUE(Value(List{Value()}).truthy());
  EXPECT_TRUE(Value(Map{{"", Value()}}).truthy());
}

TEST(TemplateValue, PrintsScalarsForCpp) {
  EXPECT_EQ(Value(42).str(), "42");
  EXPECT_EQ(Value(-9223372036854775807LL - 1).str(), "-9223372036854775808");
  EXPECT_EQ(Value(true).str(), "true");
  EXPECT_EQ(Value(false).str(), "false");
  EXPECT_EQ(Value("as is\n").str(), "as is\n");
}

TEST(TemplateValue, PrintsFloatsShortestWithPointOrExponent) {
  EXPECT_EQ(Value(1.0).str(), "1.0");
  EXPECT_EQ(Value(-2.0).str(), "-2.0");
  EXPECT_EQ(Value(0.5).str(), "0.5");
  EXPECT_EQ(Value(0.1).str(), "0.1");
  EXPECT_EQ(Value(1.0 / 3.0).str(), "0.3333333333333333");
  EXPECT_EQ(Value(1e-05).str(), "1e-05");
  EXPECT_EQ(Value(1e16).str(), "1e+16");
  EXPECT_EQ(Value(1.5e300).str(), "1.5e+300");
  EXPECT_EQ(Value(123456.0).str(), "123456.0");
  EXPECT_EQ(Value(0.0).str(), "0.0");
  EXPECT_EQ(Value(-0.0).str(), "-0.0");
  // Shortest form still reads back as the same double.
  double d = 0.1 + 0.2;
  EXPECT_EQ(Value(d).str(), "0.30000000000000004");
}

TEST(TemplateValue, PrintsListsAndMapsWithQuotedStrings) {
  EXPECT_EQ(Value(List{1, 2}).str(), "[1, 2]");
  EXPECT_EQ(Value(List{}).str(), "[]");
  EXPECT_EQ(Value(List{"a", 1.5, true, Value(), List{3}}).str(), "['a', 1.5, true, none, [3]]");
  EXPECT_EQ(Value(List{"it's\n"}).str(), "['it\\'s\\n']");
  EXPECT_EQ(Value(Map{{"b", 2}, {"a", "x"}}).str(), "{'a': 'x', 'b': 2}");
  EXPECT_EQ(Value(Map{}).str(), "{}");
}

TEST(TemplateValue, PrintingNoneIsAnError) {
  try {
    Value().str();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_EQ(e.message(), "cannot print none");
  }
}

TEST(TemplateValue, Equality) {
  EXPECT_EQ(Value(1), Value(1));
  EXPECT_EQ(Value(1), Value(1.0));
  EXPECT_EQ(Value(1.0), Value(1));
  EXPECT_NE(Value(1), Value(1.5));
  EXPECT_NE(Value(true), Value(1));  // a bool is not a number
  EXPECT_NE(Value(0), Value(false));
  EXPECT_NE(Value(1), Value("1"));
  EXPECT_EQ(Value(), Value());
  EXPECT_NE(Value(), Value(0));
  EXPECT_EQ(Value(List{1, "a"}), Value(List{1.0, "a"}));
  EXPECT_NE(Value(List{1, 2}), Value(List{1}));
  EXPECT_EQ(Value(Map{{"a", List{1}}}), Value(Map{{"a", List{1}}}));
  EXPECT_NE(Value(Map{{"a", 1}}), Value(Map{{"b", 1}}));
  // Exact comparison: 2^53 + 1 is not the double 2^53.
  EXPECT_NE(Value(std::int64_t(9007199254740993LL)), Value(9007199254740992.0));
  EXPECT_NE(Value(std::numeric_limits<std::int64_t>::max()), Value(9223372036854775808.0));
}

TEST(TemplateValue, CopiesShareListsCheaply) {
  Value a{List{1, 2, 3}};
  Value b = a;
  EXPECT_EQ(&a.as_list(), &b.as_list());
}

namespace {
enum Plain { kZero, kOne };
}  // namespace

TEST(TemplateValue, UnscopedEnumsAndCharsAreInts) {
  EXPECT_EQ(Value(kOne).as_int(), 1);
  EXPECT_EQ(Value(short(-3)).as_int(), -3);
  EXPECT_EQ(Value(static_cast<unsigned char>(200)).as_int(), 200);
  EXPECT_EQ(Value(7L).as_int(), 7);
  EXPECT_EQ(Value(7LL).as_int(), 7);
}
