#include "launch/run/training_stage.h"

namespace launch {

TrainingStage::TrainingStage(model::GptStage& stage, DataLoader& data, const BatchLayout& layout,
                             std::int64_t seq_len, parallel::DataParallel& data_parallel)
    : stage_(stage), data_(data), layout_(layout) {
  const auto n = static_cast<std::size_t>(layout.micro_batch * seq_len);
  inputs_.assign(n, 0);
  targets_.assign(n, 0);
  stage_.set_backward_hook([this, &data_parallel](std::int64_t layer) {
    if (last_micro_batch_) data_parallel.layer_done(layer);
  });
}

void TrainingStage::begin_step(std::int64_t step, double grad_scale) {
  step_ = step;
  grad_scale_ = grad_scale;
  loss_sum_ = 0;
}

void TrainingStage::forward(int micro) {
  const model::StageRange& r = stage_.range();
  if (r.has_embedding || r.has_head)
    data_.read_sequences(layout_.first_sequence(step_, micro), layout_.micro_batch, inputs_.data(), targets_.data());
  stage_.forward(slot(micro), r.has_embedding ? inputs_.data() : nullptr, r.has_head ? targets_.data() : nullptr,
                 grad_scale_);
  if (r.has_head) loss_sum_ += stage_.loss_sum(slot(micro));
}

void TrainingStage::backward(int micro) {
  last_micro_batch_ = micro == layout_.micro_batches() - 1;
  stage_.backward(slot(micro));
  last_micro_batch_ = false;
}

}  // namespace launch
