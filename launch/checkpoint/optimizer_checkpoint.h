// What an optimizer adds to a checkpoint beyond the weights and its two
// moments (which every optimizer has, and the trainer saves through the
// data-parallel strategy). AdamW adds nothing: this base class is its. 1-bit
// Adam (launch/checkpoint/onebit_checkpoint.cpp) records its freeze step and stage and,
// once compression has run, every rank's error-feedback buffers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "launch/checkpoint/checkpoint.h"

namespace launch {

class OptimizerCheckpoint {
 public:
  virtual ~OptimizerCheckpoint() = default;
  // state.json's "optimizer" entry after `steps_done` steps (null: AdamW).
  virtual nlohmann::json describe(std::int64_t /*steps_done*/) const { return nullptr; }
  // This rank's own state, when it differs across ranks (then every rank has one).
  virtual std::optional<RankExtra> rank_extra(std::int64_t /*steps_done*/) const { return std::nullopt; }
  // After the weights and moments of checkpoint `dir` are loaded: checks
  // and restores the rest. Returns a line for the log, or "".
  virtual std::string resume(const std::string& /*dir*/, const TrainingState& /*state*/) { return ""; }
};

}  // namespace launch
