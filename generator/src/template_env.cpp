// Environment: the filter table, the parsed-template cache and the public entry points.
#include "sage/common/strings.h"
#include "template_internal.h"

namespace sage::tmpl {

std::shared_ptr<const detail::Template> Environment::Impl::get(const std::string& name) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(name);
    if (it != cache.end()) return it->second;
  }
  // Load and parse outside the lock, so that threads asking for different templates do not
  // wait for each other. Two threads may parse the same template once each; the first to
  // finish is kept, and both results are identical.
  std::optional<std::string> src = loader->load(name);
  if (!src) return nullptr;
  std::shared_ptr<const detail::Template> t = detail::parse_template(name, *src, options, filters);
  std::lock_guard<std::mutex> lock(cache_mutex);
  return cache.emplace(name, std::move(t)).first->second;
}

Environment::Environment(std::shared_ptr<Loader> loader, Options options)
    : impl_(std::make_unique<Impl>()) {
  require(loader != nullptr, Errc::invalid_argument, "template Environment needs a loader");
  impl_->loader = std::move(loader);
  impl_->options = options;
  detail::add_builtin_filters(impl_->filters);
}

Environment::~Environment() = default;
Environment::Environment(Environment&&) noexcept = default;
Environment& Environment::operator=(Environment&&) noexcept = default;

const Options& Environment::options() const { return impl_->options; }

std::string Environment::render(const std::string& name, const Value& context) const {
  std::shared_ptr<const detail::Template> t = impl_->get(name);
  if (!t) throw Error(Errc::not_found, cat("template '", name, "' not found"), name);
  return detail::render(*impl_, *t, context);
}

std::string Environment::render_string(const std::string& name, const std::string& source,
                                       const Value& context) const {
  auto t = detail::parse_template(name, source, impl_->options, impl_->filters);
  return detail::render(*impl_, *t, context);
}

Value Environment::eval(const std::string& name, const std::string& expr, const Value& context) const {
  detail::ExprPtr e = detail::parse_expression(name, expr, impl_->filters);
  return detail::evaluate(*impl_, name, *e, context);
}

void Environment::add_filter(const std::string& name, Filter f) {
  if (name == "default" || name == "d")
    throw Error(Errc::invalid_argument, cat("the filter '", name, "' is built in and cannot be replaced"));
  bool valid = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name)
    valid = valid && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
  if (!valid) throw Error(Errc::invalid_argument, cat("'", name, "' is not a valid filter name"));
  if (!f) throw Error(Errc::invalid_argument, cat("filter '", name, "' has no function"));
  // Assign in place: templates already parsed keep a pointer to this entry.
  detail::FilterEntry& e = impl_->filters[name];
  e.fn = std::move(f);
  e.builtin = nullptr;
  e.min_args = 0;
  e.max_args = -1;
}

}  // namespace sage::tmpl
