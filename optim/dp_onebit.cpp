#include "optim/dp_onebit.h"

#include "engine/ops.h"

namespace optim {

OneBitCompression::OneBitCompression(std::unique_ptr<parallel::DataParallel> warm_up, const OneBitAdam& optimizer,
                                     const parallel::FlatLayout& layout, const engine::Tensor& grads,
                                     const parallel::TiedEmbedding& tied, int dp_size)
    : warm_up_(std::move(warm_up)),
      optimizer_(optimizer),
      local_norm_ranges_(layout.norm_ranges),
      grads_(grads),
      tied_(tied),
      dp_size_(dp_size) {}

void OneBitCompression::layer_done(std::int64_t layer) {
  if (!compressing()) warm_up_->layer_done(layer);
}

void OneBitCompression::finish_gradients() {
  if (compressing())
    tied_.sum_whole(grads_);
  else
    warm_up_->finish_gradients();
}

const std::vector<parallel::FlatRange>& OneBitCompression::norm_ranges() const {
  return compressing() ? local_norm_ranges_ : warm_up_->norm_ranges();
}

void OneBitCompression::complete_momentum() {
  if (!momentum_partial_) return;
  warm_up_->gather_owned(optimizer_.m());
  momentum_partial_ = false;
}

void OneBitCompression::before_update() {
  warm_up_->before_update();
  if (compressing())
    complete_momentum();  // the exchange needs the whole momentum
  else
    momentum_partial_ = warm_up_->sharding().state;  // this warm-up step updates the owned chunks only
}

void OneBitCompression::download_state(const engine::Tensor& state, float* host) {
  if (!is_momentum(state)) {
    warm_up_->download_state(state, host);
    return;
  }
  complete_momentum();  // whole on every rank, even under ZeRO-1
  if (host) engine::ops::copy(engine::host_f32(host, state.numel()), state);
}

void OneBitCompression::upload_state(const engine::Tensor& state, const float* host) {
  if (!is_momentum(state)) {
    warm_up_->upload_state(state, host);
    return;
  }
  engine::ops::copy(state, engine::host_f32(const_cast<float*>(host), state.numel()));
  momentum_partial_ = false;
}

}  // namespace optim
