// ZeRO stage 1 (Rajbhandari et al. 2020, section 5.1, P_os): the gradient
// buckets of plain data parallel are reduce-scattered instead of all-reduced,
// so rank r ends with the reduced r-th chunk of every bucket; it keeps the
// optimizer state of those chunks only (the moments and the fp32 master
// weights: the paper's K = 12 of 4Ψ + KΨ/N), updates them, and the working
// weights are all-gathered after the update (parallel/grad_buckets.h).
// Each rank's reduced chunks differ, so every rank counts its own in the norm.
#pragma once

#include <memory>

#include "parallel/dp_all_reduce.h"

namespace parallel {

class ZeroOptimizerShards : public DataParallel {
 public:
  // What the store must shard before this strategy can be built on it: the
  // master weights and moments as this rank's chunks of every bucket.
  static Sharding store_sharding(const FlatLayout& layout, std::int64_t bucket_elements, const Communicator& dp);

  // master: the store's master shard (store_sharding()); working, grads: whole.
  ZeroOptimizerShards(Communicator& dp, const FlatLayout& layout, const engine::Tensor& master,
                      const engine::Tensor& working, const engine::Tensor& grads, const TiedEmbedding& tied,
                      DataParallelOptions options);

  void begin_step() override { buckets_->start_step(); }
  void layer_done(std::int64_t layer) override;
  void finish_gradients() override;
  const std::vector<FlatRange>& norm_ranges() const override { return norm_ranges_; }
  void after_update() override { buckets_->gather(working_); }
  const Sharding& sharding() const override { return sharding_; }
  void download_master(float* host) override;
  void download_state(const engine::Tensor& state, float* host) override;
  void gather_owned(const engine::Tensor& full) override { buckets_->gather(full); }
  std::string name() const override { return "ZeRO-1"; }

 private:
  engine::Tensor master_, working_, grads_;
  const TiedEmbedding& tied_;
  bool overlap_;
  std::unique_ptr<GradBuckets> buckets_;
  std::vector<FlatRange> norm_ranges_;
  Sharding sharding_;
};

// The norm ranges (whole-layout offsets) that fall in the owned chunks, at
// their offsets in the gradient buffer: whole-layout offsets, or shard
// offsets when the gradients are sharded. Shared by ZeRO-1 and ZeRO-2/3.
std::vector<FlatRange> owned_norm_ranges(const std::vector<FlatRange>& norm_ranges,
                                         const std::vector<ShardChunk>& owned, bool grads_sharded);

}  // namespace parallel
