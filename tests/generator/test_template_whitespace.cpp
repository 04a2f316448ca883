// Whitespace: manual control with '-' and '+', and the default trim_blocks/lstrip_blocks.
#include <gtest/gtest.h>

#include "test_template_util.h"

using namespace sage;
using namespace sage::tmpl;
using sage::tmpl::testing::render;

namespace {
Options plain() {
  Options o;
  o.trim_blocks = false;
  o.lstrip_blocks = false;
  return o;
}
}  // namespace

TEST(TemplateWhitespace, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(render("a  \n {{- 1 }} b"), "a1 b");
  EXPECT_EQ(render("a {{ 1 -}} \n\n b"), "a 1b");
  EXPECT_EQ(render("a \n {{- 1 -}} \n b"), "a1b");
  EXPECT_EQ(render("a \n {%- if true -%} \n b \n {%- endif -%} \n c"), "abc");
  EXPECT_EQ(render("a \n {#- comment -#} \n b"), "ab");
  EXPECT_EQ(render("{% for x in [1, 2, 3] -%}\n  {{ x }}\n{%- endfor %}"), "123");
  EXPECT_EQ(render("[\n  {%- for x in [1, 2, 3] %}\n  {{ x }},\n  {%- endfor %}\n]"), "[  1,  2,  3,]");
}

TEST(TemplateWhitespace, MinusIsNotConfusedWithSubtraction) {
  EXPECT_EQ(render("{{ 5 -1 }}|{{ 5 - 1 -}} |{{- -1 }}"), "4|4|-1");
}

TEST(TemplateWhitespace, BlockTagAloneOnItsLineLeavesNoBlankLine) {
  const std::string t =
      "struct P {\n"
      "  {% for f in fields %}\n"
      "  int {{ f }};\n"
      "  {% endfor %}\n"
      "  {# a comment line #}\n"
      "  {% if extra %}\n"
      "  int extra;\n"
      "  {% endif %}\n"
      "};\n";
  Value c(Map{{"fields", List{"a", "b"}}, {"extra", true}});
  EXPECT_EQ(render(t, c), "struct P {\n  int a;\n  int b;\n  int extra;\n};\n");
}

TEST(TemplateWhitespace, TrimBlocksRemovesOnlyTheFirstNewline) {
  EXPECT_EQ(render("{% if true %}\n\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("{% if true %}\r\nx{% endif %}"), "x");
  EXPECT_EQ(render("{# c #}\nx"), "x");
  // Not after {{ }}: output tags keep their newline.
  EXPECT_EQ(render("{{ 1 }}\nx"), "1\nx");
}

TEST(TemplateWhitespace, LstripBlocksOnlyAtLineStart) {
  // Blanks after other text on the line stay.
  EXPECT_EQ(render("x  {% if true %}y{% endif %}"), "x  y");
  EXPECT_EQ(render("  \t{% if true %}y{% endif %}"), "y");
  // Output tags are not stripped.
  EXPECT_EQ(render("  {{ 1 }}"), "  1");
  // Blanks after a tag on the same line are not at a line start.
  EXPECT_EQ(render("{{ 1 }}  {% if true %}y{% endif %}"), "1  y");
}

TEST(TemplateWhitespace, PlusDisablesTrimAndLstripForOneTag) {
  EXPECT_EQ(render("  {%+ if true +%}\nx{% endif +%}\ny"), "  \nx\ny");
  // '+' acts on its own side only.
  EXPECT_EQ(render("  {%+ if true %}\nx{% endif %}\ny"), "  xy");
  EXPECT_EQ(render("  {#+ c +#}\nx"), "  \nx");
}

TEST(TemplateWhitespace, OptionsCanTurnTrimAndLstripOff) {
  const std::string t = "a\n  {% if true %}\n  b\n  {% endif %}\nc";
  EXPECT_EQ(render(t), "a\n  b\nc");
  EXPECT_EQ(render(t, Value(), {}, plain()), "a\n  \n  b\n  \nc");
  Options trim_only = plain();
  trim_only.trim_blocks = true;
  EXPECT_EQ(render(t, Value(), {}, trim_only), "a\n    b\n  c");
  Options lstrip_only = plain();
  lstrip_only.lstrip_blocks = true;
  EXPECT_EQ(render(t, Value(), {}, lstrip_only), "a\n\n  b\n\nc");
}

TEST(TemplateWhitespace, IncludeTagAloneOnItsLine) {
  std::map<std::string, std::string> files = {{"inc.j2", "  int x;\n"}};
  EXPECT_EQ(render("{\n  {% include 'inc.j2' %}\n}\n", Value(), files), "{\n  int x;\n}\n");
}

TEST(TemplateWhitespace, SetTagAloneOnItsLine) {
  EXPECT_EQ(render("a\n    {% set x = 1 %}\nb{{ x }}\n"), "a\nb1\n");
}
