// Files embedded into the binary at build time (cmake/SageEmbed.cmake), so that JIT
// compilation never depends on the source tree.
#pragma once
#include <cstddef>
#include <string_view>

namespace sage {
struct EmbeddedFile {
  const char* name;   // path relative to the embedded folder, '/'-separated
  const char* data;   // bytes, NUL-terminated for convenience
  std::size_t size;   // without the NUL
  std::string_view view() const { return {data, size}; }
};
}  // namespace sage

// The templates/ folder: *.j2 templates and the *.cuh device headers they include.
namespace sage::embedded_templates {
const sage::EmbeddedFile* files(std::size_t* count);
const sage::EmbeddedFile* find(std::string_view name);
const char* bundle_hash();  // SHA-256 over every embedded file's name and content
}  // namespace sage::embedded_templates

// The configs/ folder: default search space, problems, per-architecture defaults.
namespace sage::embedded_configs {
const sage::EmbeddedFile* files(std::size_t* count);
const sage::EmbeddedFile* find(std::string_view name);
const char* bundle_hash();
}  // namespace sage::embedded_configs
