// From the generator's variants to loaded kernels: the launcher's KernelConfig, rendering
// and compiling through the cubin cache, and the generator hash that keys tuning results.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sage/gen/search_space.h"
#include "sage/gen/template.h"
#include "sage/internal/launch.h"
#include "sage/tuner/compiler.h"

namespace sage::tuner {

// The launcher's view of a variant (pipeline, tiles, precisions, smem, threads).
KernelConfig kernel_config(const gen::Variant& v);

// sha256 over the embedded templates and configs: results tuned with other templates or
// another search space are not reused.
std::string generator_hash();

// Renders and compiles variants for one architecture, through the cubin cache.
class VariantBuilder {
 public:
  explicit VariantBuilder(CompileOptions opts);
  const CompileOptions& options() const { return opts_; }
  std::string render(const gen::Variant& v) const;
  CompileResult compile(const gen::Variant& v) const;
  std::vector<CompileResult> compile_all(const std::vector<gen::Variant>& vs, unsigned threads = 0,
                                         const std::function<void(const Progress&)>& on_progress = {}) const;

 private:
  CompileOptions opts_;
  std::shared_ptr<tmpl::Environment> env_;
};

// The FP32 reference module of an architecture, compiled once per process.
std::shared_ptr<Module> reference_module(const std::string& arch);

// Loads a compiled attention variant on the current device.
std::shared_ptr<AttnKernel> load_attention(const gen::Variant& v, const CompileResult& compiled);

}  // namespace sage::tuner
