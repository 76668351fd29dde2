// The rule that a step with a non-finite loss or gradient norm is never
// applied (ARCHITECTURE.md, "Every wait is bounded"). The loss and the norm are
// reduced over every rank before they are judged, so every rank reaches the
// same verdict without further communication.
#pragma once

#include <cstdint>
#include <string>

#include "launch/run/train_config.h"

namespace launch {

class NonFiniteGuard {
 public:
  enum class Verdict {
    kApply,      // finite: update
    kSkip,       // --on-nonfinite skip: leave weights and optimizer state untouched
    kSkipLimit,  // the (max_skipped_steps + 1)th skip in a row: checkpoint the untouched state, then stop
  };
  explicit NonFiniteGuard(const TrainConfig& config);
  // Throws under --on-nonfinite stop (nothing is applied or saved).
  Verdict judge(std::int64_t step, double loss, double norm);
  const std::string& last_problem() const { return problem_; }  // what kSkipLimit stops for
  // Tests only: ENGINE_TEST_POISON_STEPS=k or k-m asks for the gradients of
  // steps k..m (1-based) to be made NaN, as an overflow would.
  bool poisoned(std::int64_t step) const { return step + 1 >= poison_first_ && step + 1 <= poison_last_; }

 private:
  bool skip_;
  std::int64_t max_skipped_;
  std::int64_t skipped_in_a_row_ = 0;
  std::int64_t poison_first_ = 0, poison_last_ = -1;
  std::string problem_;
};

}  // namespace launch
