#include "log.h"

#include <unistd.h>

#include <cstdio>

#include "sage/common/strings.h"
#include "sage/internal/launch.h"

namespace sage::rt {

bool log_enabled() { return env_flag("SAGE_LOG"); }

void log_lines(const std::string& text) {
  std::string out;
  for (const std::string& line : split(text, '\n'))
    if (!line.empty()) out += "[sage] " + line + "\n";
  // One write(2): blocks of selections on several threads stay whole.
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(2, out.data() + done, out.size() - done);
    if (n <= 0) break;
    done += std::size_t(n);
  }
}

void log_selection(const Selection& s, const AttnProblem& p, Policy policy, double first_call_ms,
                   const std::string& launch) {
  std::string t = cat(s.bucket, " on ", s.device, " (", s.arch, ")\n");
  t += cat("  call: ", p.str(), ", policy ", to_string(policy), "\n");
  const int kd = s.config.head_dim;
  if (kd > 0 && p.head_dim != kd) {
    if (p.head_dim % 8 != 0)
      t += cat("  head dim: ", p.head_dim, " on the D=", kd, " variant, through zero-padded copies of Q, K, V and O\n");
    else if (runs_q3_entry(s.config, p.head_dim))
      t += cat("  head dim: ", p.head_dim, " on the D=", kd, " variant's entry sage_attn_q3 (three quarters of its row: ",
               3 * kd / 4, " columns), the rows read in place\n");
    else
      t += cat("  head dim: ", p.head_dim, " on the D=", kd, " variant's entry sage_attn, the rows read in place as zero-padded\n");
  }
  switch (s.source) {
    case Source::user_db:
    case Source::system_db:
      t += cat("  variant: ", s.variant, " (tuned winner from the ", to_string(s.source), " ", s.db, ")\n");
      break;
    case Source::default_variant:
      t += cat("  variant: ", s.variant, " (the ", s.arch, " default of configs/defaults.yaml: no tuned winner)\n");
      if (!s.miss.empty()) t += cat("  winner lookup: ", s.miss, "\n");
      break;
    case Source::static_table:
      t += cat("  variant: ", s.variant, " (exported into this static build)\n");
      break;
  }
  t += cat("  kernel: ", s.kernel_from);
  if (!s.kernel_hash.empty()) t += cat(" ", s.kernel_hash.substr(0, 16));
  if (s.compile_ms > 0) t += cat(", compiled in ", human_duration(s.compile_ms / 1e3));
  t += cat(", module loaded in ", human_duration(s.load_ms / 1e3), "\n");
  if (!launch.empty()) t += cat("  launch: ", launch, "\n");
  if (first_call_ms >= 0)
    t += cat("  first call: ", human_duration(first_call_ms / 1e3), " (selection ", human_duration(s.select_ms / 1e3),
             ")\n");
  else
    t += cat("  selected in ", human_duration(s.select_ms / 1e3), "\n");
  for (const std::string& n : s.notes) t += cat("  note: ", n, "\n");
  t += cat("  reproduce: ", reproduce_command(p, policy, s.variant), "\n");
  log_lines(t);
}

}  // namespace sage::rt
