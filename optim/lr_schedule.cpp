#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>
#include <sstream>

#include "engine/check.h"

namespace optim {

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps)  // warm-up applies to the constant schedule too
    return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == Kind::kConstant) return max_lr;
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));  // 1 -> 0
  return min_lr + cosine * (max_lr - min_lr);
}

void LrSchedule::validate() const {
  ENGINE_CHECK(max_lr > 0, "learning rate must be > 0, got ", max_lr);
  ENGINE_CHECK(min_lr >= 0 && min_lr <= max_lr, "minimum learning rate ", min_lr, " must be in [0, ", max_lr, "]");
  ENGINE_CHECK(warmup_steps >= 0, "warm-up steps must be >= 0, got ", warmup_steps);
  ENGINE_CHECK(total_steps >= 1, "total steps must be >= 1, got ", total_steps);
}

std::string LrSchedule::describe() const {
  std::ostringstream out;
  if (kind == Kind::kConstant)
    out << "constant " << max_lr;
  else
    out << "cosine " << max_lr << " -> " << min_lr << " over " << total_steps << (total_steps == 1 ? " step" : " steps");
  if (warmup_steps > 0) out << ", linear warm-up " << warmup_steps << (warmup_steps == 1 ? " step" : " steps");
  return out.str();
}

LrSchedule::Kind parse_lr_kind(const std::string& text) {
  if (text == "cosine") return LrSchedule::Kind::kCosine;
  if (text == "constant") return LrSchedule::Kind::kConstant;
  ENGINE_FAIL("unknown learning-rate schedule '", text, "'; expected cosine or constant");
}

}  // namespace optim
