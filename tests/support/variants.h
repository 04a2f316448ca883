// The default search space's variants for the GPU in this machine, compiled once per test
// process (through the cubin cache), for parameterized GPU tests.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sage/gen/search_space.h"
#include "sage/internal/launch.h"
#include "sage/tuner/compiler.h"

namespace sage::test {

// Names of the variants of `pipeline` for this GPU's architecture; {"NoGpu"} without a GPU
// (the tests then skip with the reason) so that test discovery always has a name.
std::vector<std::string> gpu_variant_names(const std::string& pipeline);
// A gtest-safe version of a variant name.
std::string test_name(const std::string& variant);

struct CompiledVariant {
  gen::Variant variant;
  tuner::CompileResult compiled;
};
// Compiles every variant of `pipeline` for this GPU once (in parallel) and returns one.
const CompiledVariant& compiled_variant(const std::string& pipeline, const std::string& name);

}  // namespace sage::test
