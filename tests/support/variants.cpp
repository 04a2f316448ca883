#include "support/variants.h"

#include <mutex>

#include "sage/common/strings.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/variants.h"
#include "support/gpu.h"

namespace sage::test {
namespace {
std::vector<gen::Variant> enumerate(const std::string& pipeline) {
  const int cc = device_cc();
  if (cc == 0) return {};
  std::string arch;
  try {
    arch = tuner::arch_for_cc(cc);
  } catch (const Error&) {
    return {};
  }
  gen::EnumerateOptions eo;
  eo.archs = {arch};
  eo.pipelines = {pipeline};
  return gen::SearchSpace::builtin().enumerate(eo).variants;
}
}  // namespace

std::vector<std::string> gpu_variant_names(const std::string& pipeline) {
  std::vector<std::string> names;
  for (const auto& v : enumerate(pipeline)) names.push_back(v.name);
  if (names.empty()) names.push_back("NoGpu");
  return names;
}

std::string test_name(const std::string& variant) {
  std::string s = variant;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

const CompiledVariant& compiled_variant(const std::string& pipeline, const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::map<std::string, CompiledVariant>> all;
  std::lock_guard<std::mutex> lock(mu);
  auto& set = all[pipeline];
  if (set.empty()) {
    std::vector<gen::Variant> vs = enumerate(pipeline);
    if (vs.empty()) throw Error(Errc::no_device, "no GPU of a supported architecture");
    tuner::CompileOptions co;
    co.arch = vs.front().arch;
    tuner::VariantBuilder b(co);
    std::vector<tuner::CompileResult> rs = b.compile_all(vs);
    for (std::size_t i = 0; i < vs.size(); ++i) set[vs[i].name] = CompiledVariant{vs[i], std::move(rs[i])};
  }
  auto it = set.find(name);
  if (it == set.end()) throw Error(Errc::not_found, "variant " + name + " is not in the default search space");
  return it->second;
}

}  // namespace sage::test
