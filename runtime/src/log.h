// SAGE_LOG=1: one block on stderr per selection. Private to the runtime's sources.
#pragma once
#include <string>

#include "sage/internal/runtime.h"

namespace sage::rt {

// SAGE_LOG is set to 1/true/yes/on (read at each selection, so tests can switch it).
bool log_enabled();
// Prints "[sage] <line>" to stderr in one write (lines of concurrent selections do not mix).
void log_lines(const std::string& text);
// The block for a selection: bucket and device, the call (p, as the caller gave it; below the
// variant's head dim also how the variant serves it), where the variant came from and why (the
// differing key fields on a miss), where the cubin came from, timings, notes, and the command
// that reproduces the call. first_call_ms < 0: the selection was made without a launch
// (sage_workspace_size, sage_variant_name).
// `launch`: launch_text's line for the call (launch.h; empty: none).
void log_selection(const Selection& s, const AttnProblem& p, Policy policy, double first_call_ms,
                   const std::string& launch = {});


}  // namespace sage::rt
