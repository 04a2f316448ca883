// Helpers shared by the template engine tests.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "sage/common/error.h"
#include "sage/gen/template.h"

namespace sage::tmpl::testing {

// Renders `src` (named "t.j2") with `ctx` and the in-memory templates `files`.
inline std::string render(const std::string& src, const Value& ctx = Value(),
                          std::map<std::string, std::string> files = {}, Options opt = {}) {
  Environment env(map_loader(std::move(files)), opt);
  return env.render_string("t.j2", src, ctx);
}

// Evaluates one expression (named "e").
inline Value eval(const std::string& expr, const Value& ctx = Value()) {
  Environment env(map_loader({}));
  return env.eval("e", expr, ctx);
}

// What a failed render or eval threw.
struct Failure {
  bool threw = false;
  Errc code = Errc::internal;
  std::string where;
  std::string message;
};

template <class F>
Failure failure_of(F&& f) {
  Failure out;
  try {
    f();
  } catch (const Error& e) {
    out.threw = true;
    out.code = e.code();
    out.where = e.where();
    out.message = e.message();
  }
  return out;
}

inline Failure render_failure(const std::string& src, const Value& ctx = Value(),
                              std::map<std::string, std::string> files = {}, Options opt = {}) {
  return failure_of([&] { render(src, ctx, std::move(files), opt); });
}

inline Failure eval_failure(const std::string& expr, const Value& ctx = Value()) {
  return failure_of([&] { eval(expr, ctx); });
}

}  // namespace sage::tmpl::testing

// Asserts that a Failure has the given category, place and message.
#define EXPECT_FAILURE(failure, errc, where_, message_)               \
  do {                                                                 \
    const ::sage::tmpl::testing::Failure f_ = (failure);               \
    EXPECT_TRUE(f_.threw) << "no error thrown";                        \
    EXPECT_EQ(f_.code, errc) << ::sage::errc_name(f_.code);            \
    EXPECT_EQ(f_.where, where_);                                       \
    EXPECT_EQ(f_.message, message_);                                   \
  } while (0)
