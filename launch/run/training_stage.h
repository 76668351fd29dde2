// Adapts this rank's model::GptStage to the pipeline runner's
// parallel::Stage for training steps: micro-batch i uses activation slot
// i % slots (1F1B retires micro-batches in order, so at most `slots` are
// alive; with a split backward, its stash and weight-input sets likewise), reads its tokens where the stage needs them (the first stage's
// inputs, the last stage's targets), accumulates the loss on the last stage,
// and during the last micro-batch's backward (its weight pass, when the
// schedule splits the backward) reports finished layers to the data-parallel
// strategy, whose reductions then overlap the rest of backward.
#pragma once

#include <cstdint>
#include <vector>

#include "launch/data/data_loader.h"
#include "model/gpt_stage.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_runner.h"

namespace launch {

class TrainingStage : public parallel::Stage {
 public:
  TrainingStage(model::GptStage& stage, DataLoader& data, const BatchLayout& layout, std::int64_t seq_len,
                parallel::DataParallel& data_parallel);

  // Between steps, before the ranks agree to take the step: reads every
  // micro-batch's tokens of `step` (where this stage needs them) into host
  // buffers, so a shard that cannot be read (it shrank under the run) throws
  // here, where the trainer turns it into a stop with a checkpoint, and not
  // in the middle of the schedule.
  void load_step(std::int64_t step);
  // Before the step's schedule runs: which global batch (load_step's), and
  // d(objective)/d(loss of each token).
  void begin_step(std::int64_t step, double grad_scale);
  double loss_sum() const { return loss_sum_; }  // this rank's summed token losses (last stage), this step

  void forward(int micro) override;
  // With a stage that splits its backward (model::GptStage::weight_stash_sets
  // > 0, zero-bubble schedules) backward is the input-gradient pass and
  // backward_weight the weight-gradient pass; otherwise backward is whole.
  void backward(int micro) override;
  void backward_weight(int micro) override;
  engine::Tensor forward_input(int micro) override { return stage_.input(slot(micro)); }
  engine::Tensor forward_output(int micro) override { return stage_.output(slot(micro)); }
  engine::Tensor backward_input_grad(int micro) override { return stage_.output_grad(slot(micro)); }
  engine::Tensor backward_output_grad(int) override { return stage_.input_grad(); }

 private:
  int slot(int micro) const { return micro % stage_.slots(); }
  // Weight passes retire in order too, so the micro-batches between input
  // and weight pass, or between forward and weight pass, take their sets
  // round-robin as the slots do.
  int stash(int micro) const { return micro % stage_.weight_stash_sets(); }
  int weight_inputs(int micro) const { return splits_backward() ? micro % stage_.weight_input_sets() : -1; }
  bool splits_backward() const { return stage_.weight_stash_sets() > 0; }

  model::GptStage& stage_;
  DataLoader& data_;
  BatchLayout layout_;
  std::int64_t seq_len_;
  std::vector<std::int32_t> inputs_, targets_;  // (micro-batches, B, T) host staging of one step
  std::int64_t loaded_step_ = -1;
  std::int64_t step_ = 0;
  double grad_scale_ = 0;
  double loss_sum_ = 0;
  bool last_micro_batch_ = false;  // the step's last micro-batch's (weight) backward is running
};

}  // namespace launch
