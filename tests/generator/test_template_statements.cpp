// Template statements: text, output, comments, raw, if/elif/else, for and loop variables,
// set scoping, include.
#include <gtest/gtest.h>

#include "test_template_util.h"

using namespace sage;
using namespace sage::tmpl;
using sage::tmpl::testing::render;

namespace {
Value ctx(Map m) { return Value(std::move(m)); }
}  // namespace

TEST(TemplateStatements, PlainTextPassesThroughUnchanged) {
  EXPECT_EQ(render(""), "");
  EXPECT_EQ(render("int x = {1, 2};\n  // { % } # } {\n"), "int x = {1, 2};\n  // { % } # } {\n");
  EXPECT_EQ(render("{"), "{");
  EXPECT_EQ(render("a }} b %} c #}"), "a }} b %} c #}");
}

TEST(TemplateStatements, OutputPrintsValues) {
  Value c = ctx({{"n", 128}, {"s", "half"}, {"f", 0.5}, {"b", true}, {"l", List{1, 2}}});
  EXPECT_EQ(render("n={{ n }} s={{s}} f={{ f }} b={{ b }} l={{ l }}", c),
            "n=128 s=half f=0.5 b=true l=[1, 2]");
  EXPECT_EQ(render("{{ 'a' }}{{ \"b\" }}{{ 3 }}"), "ab3");
}

TEST(TemplateStatements, CommentsProduceNothing) {
  EXPECT_EQ(render("a{# a comment {{ x }} {% if %} #}b"), "ab");
  EXPECT_EQ(render("a{# multi\nline #}b"), "ab");
}

TEST(TemplateStatements, RawBlockKeepsTagsAsText) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{# c #}{% endraw %}"), "{{ x }}{% if %}{# c #}");
  // trim_blocks/lstrip_blocks apply to raw's own tags.
  EXPECT_EQ(render("int a[2][2] = \n{% raw %}\n{{1, 2}, {3, 4}};\n  {% endraw %}\nend"),
            "int a[2][2] = \n{{1, 2}, {3, 4}};\nend");
  EXPECT_EQ(render("x {%- raw -%}  {{ y }}  {%- endraw -%} z"), "x{{ y }}z");
}

TEST(TemplateStatements, IfElifElse) {
  const std::string t = "{% if n > 2 %}big{% elif n == 2 %}two{% elif n == 1 %}one{% else %}none{% endif %}";
  EXPECT_EQ(render(t, ctx({{"n", 5}})), "big");
  EXPECT_EQ(render(t, ctx({{"n", 2}})), "two");
  EXPECT_EQ(render(t, ctx({{"n", 1}})), "one");
  EXPECT_EQ(render(t, ctx({{"n", 0}})), "none");
  EXPECT_EQ(render("{% if false %}x{% endif %}y"), "y");
  EXPECT_EQ(render("{% if [] %}x{% else %}empty{% endif %}"), "empty");
  EXPECT_EQ(render("{% if 'a' %}x{% endif %}"), "x");
}

TEST(TemplateStatements, UntakenBranchesAreNotEvaluated) {
  // Strictness applies to what runs: an undefined name in a dead branch is fine.
  EXPECT_EQ(render("{% if false %}{{ undefined_name }}{% else %}ok{% endif %}"), "ok");
}

TEST(TemplateStatements, NestedIf) {
  const std::string t = "{% if a %}A{% if b %}B{% else %}b{% endif %}{% else %}-{% endif %}";
  EXPECT_EQ(render(t, ctx({{"a", true}, {"b", true}})), "AB");
  EXPECT_EQ(render(t, ctx({{"a", true}, {"b", false}})), "Ab");
  EXPECT_EQ(render(t, ctx({{"a", false}, {"b", true}})), "-");
}

TEST(TemplateStatements, ForOverList) {
  EXPECT_EQ(render("{% for x in xs %}[{{ x }}]{% endfor %}", ctx({{"xs", List{1, "a", 2.5}}})),
            "[1][a][2.5]");
  EXPECT_EQ(render("{% for x in [] %}never{% endfor %}done"), "done");
}

TEST(TemplateStatements, ForOverMapGivesSortedKeys) {
  Value c = ctx({{"m", Map{{"b", 2}, {"a", 1}}}});
  EXPECT_EQ(render("{% for k in m %}{{ k }};{% endfor %}", c), "a;b;");
  EXPECT_EQ(render("{% for k, v in m|items %}{{ k }}={{ v }};{% endfor %}", c), "a=1;b=2;");
}

TEST(TemplateStatements, ForUnpacksListsOfLists) {
  EXPECT_EQ(render("{% for a, b, c in [[1, 2, 3], [4, 5, 6]] %}{{ a + b + c }} {% endfor %}"), "6 15 ");
}

TEST(TemplateStatements, LoopVariables) {
  const std::string t =
      "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}/"
      "{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }} {% endfor %}";
  EXPECT_EQ(render(t, ctx({{"xs", List{"a", "b", "c"}}})),
            "1/0/3/3/2/true/false 2/1/3/2/1/false/false 3/2/3/1/0/false/true ");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}"),
            "1, 2, 3");
}

TEST(TemplateStatements, NestedLoopsHaveTheirOwnLoopVariable) {
  const std::string t =
      "{% for i in range(2) %}{% set outer = loop.index %}"
      "{% for j in ['a', 'b', 'c'] %}{{ outer }}.{{ loop.index }}{{ j }}{% if loop.last %};{% else %},{% endif %}"
      "{% endfor %}[{{ loop.index }}/{{ loop.length }}]{% endfor %}";
  EXPECT_EQ(render(t), "1.1a,1.2b,1.3c;[1/2]2.1a,2.2b,2.3c;[2/2]");
}

TEST(TemplateStatements, LoopVariableDoesNotLeakOutOfTheLoop) {
  EXPECT_EQ(render("{% for x in [1] %}{% endfor %}{{ x is defined }} {{ loop is defined }}"),
            "false false");
}

TEST(TemplateStatements, SetAtTopLevelIsVisibleAfter) {
  EXPECT_EQ(render("{% set x = 3 %}{{ x }}{% set x = x * 2 %} {{ x }}"), "3 6");
  EXPECT_EQ(render("{% set a, b = [1, 'two'] %}{{ a }} {{ b }}"), "1 two");
}

TEST(TemplateStatements, SetInsideIfAtTopLevelIsVisibleAfter) {
  EXPECT_EQ(render("{% if true %}{% set x = 1 %}{% endif %}{{ x }}"), "1");
}

TEST(TemplateStatements, SetShadowsTheContext) {
  EXPECT_EQ(render("{{ n }} {% set n = 2 %}{{ n }}", ctx({{"n", 1}})), "1 2");
}

TEST(TemplateStatements, SetInsideForIsLocalToTheIteration) {
  // Visible in the iteration, gone after the loop; the outer x is untouched.
  EXPECT_EQ(render("{% set x = 'outer' %}{% for i in [1, 2] %}{% set x = i %}{{ x }} {% endfor %}{{ x }}"),
            "1 2 outer");
  EXPECT_EQ(render("{% for i in [1] %}{% set y = 5 %}{% endfor %}{{ y is defined }}"), "false");
  // Each iteration starts afresh.
  EXPECT_EQ(render("{% for i in [1, 2] %}{{ y is defined }}{% set y = i %} {% endfor %}"), "false false ");
  // Nested: set in the outer body is visible in the inner body.
  EXPECT_EQ(render("{% for i in [1] %}{% set a = 'A' %}{% for j in [2] %}{{ a }}{{ j }}{% endfor %}{% endfor %}"),
            "A2");
}

TEST(TemplateStatements, IncludeSeesTheCurrentContext) {
  std::map<std::string, std::string> files = {
      {"row.j2", "{{ prefix }}{{ x }}:{{ loop.index }};"},
  };
  EXPECT_EQ(render("{% set prefix = '#' %}{% for x in ['a', 'b'] %}{% include 'row.j2' %}{% endfor %}",
                   ctx({}), files),
            "#a:1;#b:2;");
  EXPECT_EQ(render("{% include \"row.j2\" %}", ctx({{"prefix", "p"}, {"x", 1}, {"loop", Map{{"index", 9}}}}), files),
            "p1:9;");
}

TEST(TemplateStatements, IncludeNameMayBeAnExpression) {
  std::map<std::string, std::string> files = {{"part_a.j2", "A"}, {"part_b.j2", "B"}};
  EXPECT_EQ(render("{% for p in ['a', 'b'] %}{% include 'part_' ~ p ~ '.j2' %}{% endfor %}", ctx({}), files),
            "AB");
}

TEST(TemplateStatements, SetInsideAnIncludeStaysThere) {
  std::map<std::string, std::string> files = {{"inc.j2", "{% set x = 'inner' %}{{ x }}"}};
  EXPECT_EQ(render("{% set x = 'outer' %}{% include 'inc.j2' %} {{ x }}", ctx({}), files), "inner outer");
}

TEST(TemplateStatements, NestedIncludes) {
  std::map<std::string, std::string> files = {
      {"a.j2", "a({% include 'b.j2' %})"},
      {"b.j2", "b({% include 'c/d.j2' %})"},
      {"c/d.j2", "{{ v }}"},
  };
  EXPECT_EQ(render("{% include 'a.j2' %}", ctx({{"v", 7}}), files), "a(b(7))");
  // The same template may be included twice in a row (only a cycle is an error).
  EXPECT_EQ(render("{% include 'c/d.j2' %}{% include 'c/d.j2' %}", ctx({{"v", 1}}), files), "11");
}

TEST(TemplateStatements, EmptyBlocks) {
  EXPECT_EQ(render("{% if true %}{% endif %}{% for x in [1] %}{% endfor %}x"), "x");
}
