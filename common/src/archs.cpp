#include "sage/common/archs.h"

#include "sage/common/strings.h"

namespace sage {

const std::vector<std::string>& target_archs() {
  static const std::vector<std::string> archs{"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100", "sm_120"};
  return archs;
}

std::string target_archs_text() { return join(target_archs(), ", "); }

bool is_target_arch(const std::string& arch) {
  for (const auto& a : target_archs())
    if (a == arch) return true;
  return false;
}

std::string target_arch_for_cc(int cc) {
  const int major = cc / 10;
  if (major == 8) return cc == 89 ? "sm_89" : cc >= 86 ? "sm_86" : "sm_80";
  if (cc == 90) return "sm_90a";
  if (major == 10) return "sm_100";
  if (major == 12) return "sm_120";
  return {};
}

}  // namespace sage
