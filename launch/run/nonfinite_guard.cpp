#include "launch/run/nonfinite_guard.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "engine/check.h"
#include "launch/resilience/exit_codes.h"
#include "launch/resilience/job_error.h"

namespace launch {

NonFiniteGuard::NonFiniteGuard(const TrainConfig& config)
    : skip_(config.on_nonfinite == "skip"), max_skipped_(config.max_skipped_steps) {
  if (const char* poison = std::getenv("ENGINE_TEST_POISON_STEPS")) {
    char* rest = nullptr;
    poison_first_ = poison_last_ = std::strtoll(poison, &rest, 10);
    if (*rest == '-') poison_last_ = std::strtoll(rest + 1, nullptr, 10);
  }
}

NonFiniteGuard::Verdict NonFiniteGuard::judge(std::int64_t step, double loss, double norm) {
  if (std::isfinite(loss) && std::isfinite(norm)) {
    skipped_in_a_row_ = 0;
    return Verdict::kApply;
  }
  std::ostringstream what;
  what << "step " << step + 1 << " has loss " << loss << " and gradient norm " << norm;
  // Every rank judges the same reduced values: a job-wide error, printed once.
  if (!skip_)
    throw JobError(kExitFailed, what.str() + "; stopping without applying or saving it (--on-nonfinite stop; try a "
                                             "lower --lr or --grad-clip, or --on-nonfinite skip)");
  if (++skipped_in_a_row_ <= max_skipped_) return Verdict::kSkip;
  what << ", " << skipped_in_a_row_ << " non-finite steps in a row (--max-skipped-steps " << max_skipped_ << ")";
  problem_ = what.str();
  return Verdict::kSkipLimit;
}

}  // namespace launch
