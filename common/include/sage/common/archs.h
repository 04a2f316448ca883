#pragma once
#include <string>
#include <vector>

namespace sage {
// The cubin architectures sage-tune compiles for, oldest first: sm_80, sm_86, sm_89, sm_90a
// (wgmma: Hopper's own), sm_100 and sm_120 (Blackwell; the mma.sync pipeline). The search
// space (configs/search_space.yaml) declares the same list; tests/generator checks that.
const std::vector<std::string>& target_archs();
// "sm_80, sm_86, sm_89, sm_90a, sm_100, sm_120": for messages and help texts.
std::string target_archs_text();
bool is_target_arch(const std::string& arch);
// The target a device of compute capability `cc` (major x 10 + minor) runs, or "" when none
// does. A cubin runs on its own major architecture at an equal or higher minor version, and
// sm_90a only on 9.0: 8.0-8.5 run sm_80, 8.6-8.8 sm_86 (8.7: Jetson Orin), 8.9 sm_89, 9.0
// sm_90a, 10.x sm_100 (B200, GB200, B300), 12.x sm_120 (RTX 50xx, RTX PRO 6000 Blackwell,
// DGX Spark's GB10); 11.x (Thor) has none.
std::string target_arch_for_cc(int cc);
}  // namespace sage
