// Loaders that read templates from a directory or from memory.
#include <filesystem>

#include "sage/common/strings.h"
#include "template_internal.h"

namespace sage::tmpl {
namespace {

class DirectoryLoader : public Loader {
 public:
  explicit DirectoryLoader(std::string root) : root_(std::move(root)) {}
  std::optional<std::string> load(const std::string& name) const override {
    // Names stay inside root: the loader must not become a way to read arbitrary files.
    std::filesystem::path rel(name);
    bool escapes = name.empty() || rel.is_absolute();
    for (const auto& part : rel)
      if (part == "..") escapes = true;
    if (escapes)
      throw Error(Errc::invalid_argument, cat("template name '", name, "' must be a relative path inside ", root_));
    std::filesystem::path path = std::filesystem::path(root_) / rel;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
    return read_file(path.string());
  }

 private:
  std::string root_;
};

class MapLoader : public Loader {
 public:
  explicit MapLoader(std::map<std::string, std::string> files) : files_(std::move(files)) {}
  std::optional<std::string> load(const std::string& name) const override {
    auto it = files_.find(name);
    if (it == files_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<std::string, std::string> files_;
};

}  // namespace

std::shared_ptr<Loader> directory_loader(std::string root) {
  return std::make_shared<DirectoryLoader>(std::move(root));
}

std::shared_ptr<Loader> map_loader(std::map<std::string, std::string> files) {
  return std::make_shared<MapLoader>(std::move(files));
}

}  // namespace sage::tmpl
