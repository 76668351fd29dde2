// 1-bit Adam's part of a checkpoint (optim/onebit_adam.h): its freeze step,
// whether it was compressing, and once compression has run, every rank's
// error-feedback buffers (RankExtra "onebit"). Those differ on every rank and
// only fit the layout that wrote them: a resume under the same world size,
// tp, pp, dp and ZeRO stage restores them and continues bit for bit; under
// any other layout they restart from zero (see resume() for why that is
// sound). Before the freeze step they are still zero and any layout will do.
#pragma once

#include "launch/checkpoint/optimizer_checkpoint.h"
#include "optim/onebit_adam.h"
#include "parallel/process_grid.h"

namespace launch {

class OneBitCheckpoint : public OptimizerCheckpoint {
 public:
  // `sharded`: the variance is ZeRO-sharded (part of the layout the buffers fit).
  OneBitCheckpoint(optim::OneBitAdam& optimizer, const parallel::ProcessGrid& grid, bool sharded);

  nlohmann::json describe(std::int64_t steps_done) const override;
  std::optional<RankExtra> rank_extra(std::int64_t steps_done) const override;
  std::string resume(const std::string& dir, const TrainingState& state) override;

 private:
  void reset_error_buffers();
  optim::OneBitAdam& optimizer_;
  std::int64_t freeze_step_;
  int world_rank_, dp_rank_;
  nlohmann::json layout_;  // what the per-rank buffers depend on
};

}  // namespace launch
