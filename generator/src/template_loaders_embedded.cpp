// The loader over the templates/ folder embedded at build time. Kept apart from the engine
// core so that the fuzzer builds without the embedded bundle.
#include "sage/common/embedded.h"
#include "sage/gen/template.h"

namespace sage::tmpl {
namespace {

class EmbeddedLoader : public Loader {
 public:
  std::optional<std::string> load(const std::string& name) const override {
    const EmbeddedFile* f = embedded_templates::find(name);
    if (!f) return std::nullopt;
    return std::string(f->view());
  }
};

}  // namespace

std::shared_ptr<Loader> embedded_loader() { return std::make_shared<EmbeddedLoader>(); }

}  // namespace sage::tmpl
