// 1-bit Adam's compression stage as a data-parallel strategy (Tang et al.
// 2021, Algorithm 1; optim/onebit_adam.h has the optimizer's side).
//
// Before the freeze step the replicas are kept in step exactly as by the
// strategy this one wraps (plain data parallel or ZeRO-1), so the run is
// AdamW's. From the freeze step on no gradient is reduced over dp: that
// all-reduce is the saving. Each rank keeps its local gradient g_r (scaled by
// 1/global tokens, so the true gradient is sum_r g_r); the optimizer uses
// dp * g_r, rank r's estimate of the whole batch's gradient, and averages
// the momenta with the compressed all-reduce instead. The tied embedding's
// copies are still summed, on the local gradients.
//
// The global norm in the compression stage: every rank must clip by the same
// factor, so it is the root of the MEAN over dp ranks of ||dp g_r||^2 =
// dp * sum_r ||g_r||^2 (one scalar all-reduce). It exceeds the norm of the
// mean gradient by the gradient noise, so clipping engages somewhat earlier
// than under AdamW.
//
// Under ZeRO-1 the momentum is whole (every element's sign travels) but the
// warm-up updated only the owned chunks of it: they are gathered once, before
// the first exchange (or before a checkpoint reads the momentum).
#pragma once

#include <memory>

#include "optim/onebit_adam.h"
#include "parallel/data_parallel.h"
#include "parallel/tied_embedding.h"

namespace optim {

class OneBitCompression : public parallel::DataParallel {
 public:
  // warm_up: the strategy before the freeze step. grads: the store's whole
  // gradient buffer. dp_size: the data-parallel group's size.
  OneBitCompression(std::unique_ptr<parallel::DataParallel> warm_up, const OneBitAdam& optimizer,
                    const parallel::FlatLayout& layout, const engine::Tensor& grads,
                    const parallel::TiedEmbedding& tied, int dp_size);

  void begin_step() override { warm_up_->begin_step(); }
  void layer_done(std::int64_t layer) override;
  void finish_gradients() override;
  const std::vector<parallel::FlatRange>& norm_ranges() const override;
  double norm_scale() const override { return compressing() ? dp_size_ : warm_up_->norm_scale(); }
  double update_scale() const override { return compressing() ? dp_size_ : warm_up_->update_scale(); }
  void before_update() override;
  void after_update() override { warm_up_->after_update(); }
  const parallel::Sharding& sharding() const override { return warm_up_->sharding(); }
  void download_master(float* host) override { warm_up_->download_master(host); }
  void download_state(const engine::Tensor& state, float* host) override;
  void upload_state(const engine::Tensor& state, const float* host) override;
  void gather_owned(const engine::Tensor& full) override { warm_up_->gather_owned(full); }
  std::string name() const override { return "1-bit Adam after " + warm_up_->name(); }

 private:
  bool compressing() const { return optimizer_.compressing(); }
  bool is_momentum(const engine::Tensor& t) const { return t.data() == optimizer_.m().data(); }
  void complete_momentum();

  std::unique_ptr<parallel::DataParallel> warm_up_;
  const OneBitAdam& optimizer_;
  std::vector<parallel::FlatRange> local_norm_ranges_;
  engine::Tensor grads_;
  const parallel::TiedEmbedding& tied_;
  double dp_size_;
  bool momentum_partial_ = false;  // ZeRO warm-up: only the owned chunks of the whole momentum are current
};

}  // namespace optim
