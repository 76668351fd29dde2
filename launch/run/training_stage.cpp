#include "launch/run/training_stage.h"

#include "engine/check.h"

namespace launch {

TrainingStage::TrainingStage(model::GptStage& stage, DataLoader& data, const BatchLayout& layout,
                             std::int64_t seq_len, parallel::DataParallel& data_parallel)
    : stage_(stage), data_(data), layout_(layout), seq_len_(seq_len) {
  const auto n = static_cast<std::size_t>(layout.micro_batches() * layout.micro_batch * seq_len);
  inputs_.assign(n, 0);
  targets_.assign(n, 0);
  stage_.set_backward_hook([this, &data_parallel](std::int64_t layer) {
    if (last_micro_batch_) data_parallel.layer_done(layer);
  });
}

void TrainingStage::load_step(std::int64_t step) {
  const model::StageRange& r = stage_.range();
  if (r.has_embedding || r.has_head) {
    loaded_step_ = -1;  // until every micro-batch is in
    const std::size_t rows = static_cast<std::size_t>(layout_.micro_batch * seq_len_);
    for (int micro = 0; micro < layout_.micro_batches(); ++micro)
      data_.read_sequences(layout_.first_sequence(step, micro), layout_.micro_batch, inputs_.data() + micro * rows,
                           targets_.data() + micro * rows);
  }
  loaded_step_ = step;
}

void TrainingStage::begin_step(std::int64_t step, double grad_scale) {
  ENGINE_CHECK(loaded_step_ == step, "training stage: step ", step, " begins, but the data of step ", loaded_step_,
               " is loaded");
  step_ = step;
  grad_scale_ = grad_scale;
  loss_sum_ = 0;
}

void TrainingStage::forward(int micro) {
  const model::StageRange& r = stage_.range();
  const std::size_t offset = static_cast<std::size_t>(micro * layout_.micro_batch * seq_len_);
  stage_.forward(slot(micro), r.has_embedding ? inputs_.data() + offset : nullptr,
                 r.has_head ? targets_.data() + offset : nullptr, grad_scale_, weight_inputs(micro));
  if (r.has_head) loss_sum_ += stage_.loss_sum(slot(micro));
}

void TrainingStage::backward(int micro) {
  if (splits_backward()) {  // the layers are done only after their weight pass
    stage_.backward_input(slot(micro), stash(micro), weight_inputs(micro));
    return;
  }
  last_micro_batch_ = micro == layout_.micro_batches() - 1;
  stage_.backward(slot(micro));
  last_micro_batch_ = false;
}

void TrainingStage::backward_weight(int micro) {
  ENGINE_CHECK(splits_backward(), "training stage: the schedule asks for a weight pass, but the stage was built "
               "with a whole backward");
  last_micro_batch_ = micro == layout_.micro_batches() - 1;
  stage_.backward_weight(stash(micro), weight_inputs(micro));
  last_micro_batch_ = false;
}

}  // namespace launch
