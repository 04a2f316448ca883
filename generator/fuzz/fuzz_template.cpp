// libFuzzer target for the template engine: parses and renders arbitrary input as a
// template, and evaluates it as an expression, against a small fixed context. A sage::Error
// is the expected answer to bad input; any other exception, a crash, a sanitizer report or
// a nondeterministic result is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sage/common/error.h"
#include "sage/gen/template.h"

namespace {

using namespace sage::tmpl;

const Environment& env() {
  static const Environment* e = [] {
    Options o;
    // Small limits keep every input fast: the fuzzer looks for crashes, not big outputs.
    o.max_steps = 20000;
    o.max_output_bytes = 1 << 16;
    auto* env = new Environment(map_loader({
        {"a.j2", "[{{ n }}{% include 'b.j2' %}]"},
        {"b.j2", "{% for x in l %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}"},
        {"ctx.j2", "{{ x|default('no x') }}"},
        {"self.j2", "{% include 'self.j2' %}"},
        {"bad.j2", "{% if %}"},
        {"fuzz.j2", "{% include 'a.j2' %}"},
    }), o);
    env->add_filter("twice", [](const Value& in, const List& args) {
      return Value(in.str() + (args.empty() ? in.str() : args[0].str()));
    });
    return env;
  }();
  return *e;
}

const Value& context() {
  static const Value ctx(Map{
      {"n", 3},
      {"f", 2.5},
      {"s", "str"},
      {"b", true},
      {"z", Value()},
      {"big", std::int64_t(9223372036854775807LL)},
      {"l", List{1, 2, "x", List{3, 4}}},
      {"m", Map{{"a", 1}, {"b", List{1, 2}}, {"c", Map{{"d", "e"}}}}},
  });
  return ctx;
}

[[noreturn]] void bug(const char* what, const std::string& detail) {
  std::fprintf(stderr, "BUG: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string src(reinterpret_cast<const char*>(data), size);
  try {
    std::string first = env().render_string("fuzz.j2", src, context());
    std::string second = env().render_string("fuzz.j2", src, context());
    if (first != second) bug("render is not deterministic", src);
  } catch (const sage::Error& e) {
    if (e.where().empty()) bug("error without a place", e.what());
  } catch (const std::exception& e) {
    bug("render threw a non-sage exception", e.what());
  }
  try {
    Value v = env().eval("fuzz", src, context());
    if (!v.is_none()) (void)v.str();
  } catch (const sage::Error& e) {
    if (e.where().empty()) bug("error without a place", e.what());
  } catch (const std::exception& e) {
    bug("eval threw a non-sage exception", e.what());
  }
  return 0;
}
