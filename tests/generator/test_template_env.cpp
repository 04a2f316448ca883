// Environment: loaders, the parsed-template cache, thread safety, speed, eval.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

#include "sage/common/embedded.h"
#include "test_template_util.h"

using namespace sage;
using namespace sage::tmpl;
using sage::tmpl::testing::failure_of;

namespace {

// A loader that counts its calls, to observe the cache.
class CountingLoader : public Loader {
 public:
  explicit CountingLoader(std::map<std::string, std::string> files) : files_(std::move(files)) {}
  std::optional<std::string> load(const std::string& name) const override {
    ++calls;
    auto it = files_.find(name);
    if (it == files_.end()) return std::nullopt;
    return it->second;
  }
  mutable std::atomic<int> calls{0};

 private:
  std::map<std::string, std::string> files_;
};

// A fresh directory under the build tree, removed at the end.
struct TempDir {
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("sage_tmpl_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::create_directories((path / rel).parent_path());
    std::ofstream(path / rel) << text;
  }
  std::filesystem::path path;
};

// A kernel-template-like source of about `lines` lines: loops, conditionals, filters.
std::string big_template(int lines) {
  std::string t = "// generated\n{% set names = [] %}\n";
  int n = 2;
  while (n < lines) {
    t += "{% for s in stages %}\n"
         "constexpr int kStage{{ loop.index0 }}_{{ name|upper }} = {{ block_m * s + loop.index }};\n"
         "{% if s is even and s > 1 %}\n"
         "static_assert({{ block_m }} % {{ s }} == 0, \"{{ [name, s]|join('_') }}\");\n"
         "{% else %}\n"
         "// {{ 'odd' if s is odd else 'small' }} {{ (block_m / s)|round(2) }}\n"
         "{% endif %}\n"
         "{% endfor %}\n";
    n += 8;
  }
  return t;
}

Value big_context() {
  return Value(Map{{"stages", List{1, 2, 3, 4}}, {"name", "attn_mma"}, {"block_m", 128}});
}

}  // namespace

TEST(TemplateEnv, MapLoaderServesTemplatesByName) {
  Environment env(map_loader({{"a.j2", "A{{ x }}"}, {"dir/b.j2", "B"}}));
  EXPECT_EQ(env.render("a.j2", Value(Map{{"x", 1}})), "A1");
  EXPECT_EQ(env.render("dir/b.j2", Value()), "B");
  auto loader = map_loader({{"a", "x"}});
  EXPECT_EQ(loader->load("a"), std::optional<std::string>("x"));
  EXPECT_EQ(loader->load("b"), std::nullopt);
}

TEST(TemplateEnv, DirectoryLoaderReadsFilesUnderItsRoot) {
  TempDir dir;
  dir.write("main.j2", "{% include 'parts/inc.j2' %}!");
  dir.write("parts/inc.j2", "inc {{ v }}");
  Environment env(directory_loader(dir.path.string()));
  EXPECT_EQ(env.render("main.j2", Value(Map{{"v", 2}})), "inc 2!");
  auto loader = directory_loader(dir.path.string());
  EXPECT_EQ(loader->load("missing.j2"), std::nullopt);
  EXPECT_EQ(loader->load("parts"), std::nullopt);  // a directory is not a template
}

TEST(TemplateEnv, DirectoryLoaderRefusesNamesOutsideItsRoot) {
  TempDir dir;
  dir.write("sub/x.j2", "{% include '../../secret' %}");
  auto loader = directory_loader((dir.path / "sub").string());
  EXPECT_THROW(loader->load("../x.j2"), Error);
  EXPECT_THROW(loader->load("/etc/passwd"), Error);
  EXPECT_THROW(loader->load(""), Error);
  Environment env(loader);
  EXPECT_FAILURE(failure_of([&] { env.render("x.j2", Value()); }), Errc::invalid_argument, "x.j2:1:12",
                 "template name '../../secret' must be a relative path inside " + (dir.path / "sub").string());
}

TEST(TemplateEnv, EmbeddedLoaderMissingNameIsNullopt) {
  EXPECT_EQ(embedded_loader()->load("no/such/template.j2"), std::nullopt);
}

TEST(TemplateEnv, EmbeddedLoaderServesEveryEmbeddedFile) {
  std::size_t count = 0;
  const EmbeddedFile* files = embedded_templates::files(&count);
  if (count == 0) GTEST_SKIP() << "no templates are embedded in this build yet";
  auto loader = embedded_loader();
  for (std::size_t i = 0; i < count; ++i) {
    auto text = loader->load(files[i].name);
    ASSERT_TRUE(text.has_value()) << files[i].name;
    EXPECT_EQ(*text, std::string(files[i].view())) << files[i].name;
  }
}

TEST(TemplateEnv, ParsedTemplatesAreCachedByName) {
  auto loader = std::make_shared<CountingLoader>(std::map<std::string, std::string>{
      {"a.j2", "{{ x }}{% include 'b.j2' %}"}, {"b.j2", "b"}});
  Environment env(loader);
  EXPECT_EQ(env.render("a.j2", Value(Map{{"x", 1}})), "1b");
  EXPECT_EQ(loader->calls, 2);
  EXPECT_EQ(env.render("a.j2", Value(Map{{"x", 2}})), "2b");
  EXPECT_EQ(env.render("b.j2", Value()), "b");
  EXPECT_EQ(loader->calls, 2);
}

TEST(TemplateEnv, FailedLoadsAndParsesAreNotCached) {
  auto loader = std::make_shared<CountingLoader>(std::map<std::string, std::string>{{"bad.j2", "{% if %}"}});
  Environment env(loader);
  EXPECT_THROW(env.render("bad.j2", Value()), Error);
  EXPECT_THROW(env.render("bad.j2", Value()), Error);
  EXPECT_THROW(env.render("none.j2", Value()), Error);
  EXPECT_EQ(loader->calls, 3);
}

TEST(TemplateEnv, RenderStringIsNotCachedAndMayShareANameWithTheLoader) {
  Environment env(map_loader({{"t.j2", "loader"}}));
  EXPECT_EQ(env.render_string("t.j2", "one", Value()), "one");
  EXPECT_EQ(env.render_string("t.j2", "two", Value()), "two");
  EXPECT_EQ(env.render("t.j2", Value()), "loader");
}

TEST(TemplateEnv, NoneContextIsEmpty) {
  Environment env(map_loader({}));
  EXPECT_EQ(env.render_string("t", "{{ x is defined }}", Value()), "false");
  EXPECT_EQ(env.eval("e", "1 + 1", Value()).as_int(), 2);
}

TEST(TemplateEnv, EvalUsesTheEnvironmentsFilters) {
  Environment env(map_loader({}));
  env.add_filter("kib", [](const Value& in, const List&) { return Value(in.as_int() / 1024); });
  EXPECT_EQ(env.eval("smem", "(block_m * 128 * 2)|kib", Value(Map{{"block_m", 64}})).as_int(), 16);
}

TEST(TemplateEnv, MovedEnvironmentKeepsItsCacheAndFilters) {
  Environment a(map_loader({{"t.j2", "{{ 'x'|twice }}"}}));
  a.add_filter("twice", [](const Value& in, const List&) { return Value(in.as_string() + in.as_string()); });
  EXPECT_EQ(a.render("t.j2", Value()), "xx");
  Environment b(std::move(a));
  EXPECT_EQ(b.render("t.j2", Value()), "xx");
  Environment c(map_loader({}));
  c = std::move(b);
  EXPECT_EQ(c.render("t.j2", Value()), "xx");
}

TEST(TemplateEnv, OptionsAreKept) {
  Options o;
  o.trim_blocks = false;
  o.max_steps = 7;
  Environment env(map_loader({}), o);
  EXPECT_FALSE(env.options().trim_blocks);
  EXPECT_TRUE(env.options().lstrip_blocks);
  EXPECT_EQ(env.options().max_steps, 7u);
}

TEST(TemplateEnv, NullLoaderIsRejected) {
  EXPECT_THROW(Environment(nullptr), Error);
}

TEST(TemplateEnv, ConcurrentRendersOfOneEnvironment) {
  // The compile pool renders from several threads: the cache must hold up, and every
  // thread must see the same output as a single-threaded render.
  std::map<std::string, std::string> files;
  for (int i = 0; i < 16; ++i) {
    files["part" + std::to_string(i) + ".j2"] =
        "{% for s in stages %}p" + std::to_string(i) + "_{{ s }}_{{ tid }};{% endfor %}\n";
  }
  std::string main = "{{ name|upper }}\n";
  for (int i = 0; i < 16; ++i) main += "{% include 'part" + std::to_string(i) + ".j2' %}";
  files["main.j2"] = main;
  files["big.j2"] = big_template(400);
  Environment env(map_loader(files));
  Environment reference_env(map_loader(files));

  constexpr int kThreads = 8;
  constexpr int kRounds = 50;
  std::vector<std::string> expected(kThreads), expected_big(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    Value ctx(Map{{"name", "k"}, {"stages", List{1, 2, 3}}, {"tid", t}, {"block_m", 64}});
    expected[t] = reference_env.render("main.j2", ctx);
    expected_big[t] = reference_env.render("big.j2", big_context());
  }
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Value ctx(Map{{"name", "k"}, {"stages", List{1, 2, 3}}, {"tid", t}, {"block_m", 64}});
      for (int r = 0; r < kRounds; ++r) {
        try {
          if (env.render("main.j2", ctx) != expected[t]) ++mismatches;
          if (env.render("big.j2", big_context()) != expected_big[t]) ++mismatches;
          if (env.eval("e", "tid * 2", ctx).as_int() != t * 2) ++mismatches;
        } catch (const Error&) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(errors, 0);
}

TEST(TemplateEnv, Renders2000LinesWellUnder10ms) {
  std::string src = big_template(2000);
  ASSERT_GE(std::count(src.begin(), src.end(), '\n'), 2000);
  Environment env(map_loader({{"big.j2", src}}));
  Value ctx = big_context();
  std::string out = env.render("big.j2", ctx);  // parses and caches
  EXPECT_NE(out.find("constexpr int kStage3_ATTN_MMA = 516;"), std::string::npos);
  double best_ms = 1e9;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::string again = env.render("big.j2", ctx);
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_EQ(again, out);
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  // Measured 1 to 2 ms (and 3 ms more to parse) on a busy 2-core build machine, RelWithDebInfo.
  EXPECT_LT(best_ms, 10.0);
  // Parsing the same source from scratch (render_string does not cache) is fast too.
  double best_parse_ms = 1e9;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    env.render_string("big2.j2", src, ctx);
    auto t1 = std::chrono::steady_clock::now();
    best_parse_ms = std::min(best_parse_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  EXPECT_LT(best_parse_ms, 25.0);
  RecordProperty("render_ms", std::to_string(best_ms));
  RecordProperty("parse_and_render_ms", std::to_string(best_parse_ms));
}
