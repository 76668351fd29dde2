// Learning-rate schedules: linear warm-up, then cosine decay to a floor
// (Loshchilov & Hutter 2017, as GPT-2/3 reproductions use), or constant.
#pragma once

#include <cstdint>
#include <string>

namespace optim {

struct LrSchedule {
  enum class Kind { kCosine, kConstant };
  Kind kind = Kind::kCosine;
  double max_lr = 6e-4;
  double min_lr = 6e-5;            // floor reached at total_steps
  std::int64_t warmup_steps = 0;   // linear from max_lr/warmup to max_lr
  std::int64_t total_steps = 1;

  // Learning rate of optimizer step `step` (0-based).
  double at(std::int64_t step) const;
  void validate() const;
  std::string describe() const;
};

LrSchedule::Kind parse_lr_kind(const std::string& text);  // "cosine" | "constant"

}  // namespace optim
