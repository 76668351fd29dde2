// ZeRO stages 2 and 3 (Rajbhandari et al. 2020, sections 5.2 and 5.3): rank
// r keeps only chunk r of every parameter unit of the gradients (P_os+g) and
// at stage 3 of the weights too (P_os+g+p). The layers acquire and release
// each unit through parallel::ZeroUnits, whose releases start the units'
// reduce-scatters during backward; this strategy lands them, tells the
// optimizer which chunks are its own, and rebuilds what the next step needs:
// stage 2 all-gathers the whole working copy after the update, stage 3
// gathers unit by unit as the next passes acquire them.
#pragma once

#include <memory>

#include "parallel/data_parallel.h"
#include "parallel/tied_embedding.h"
#include "parallel/zero_units.h"

namespace parallel {

class ZeroUnitShards : public DataParallel {
 public:
  // What the store must shard before this strategy can be built on it.
  static Sharding store_sharding(int stage, const std::vector<FlatRange>& units, const Communicator& dp);
  // The most its gather and reduce buffers may take (staging_bound()), from
  // the layout alone: the memory plan (model/memory_plan.h) counts the same.
  static std::size_t staging_bound(int stage, const std::vector<FlatRange>& units, engine::DType working,
                                   engine::DType grads);

  // master, working, grads: the store's buffers, sharded as store_sharding() said.
  ZeroUnitShards(int stage, Communicator& dp, const FlatLayout& layout, const engine::Tensor& master,
                 const engine::Tensor& working, const engine::Tensor& grads, const TiedEmbedding& tied);

  void finish_gradients() override;
  const std::vector<FlatRange>& norm_ranges() const override { return norm_ranges_; }
  void before_update() override;
  void after_update() override;
  const Sharding& sharding() const override { return sharding_; }
  ZeroUnits* staged_units() override { return units_.get(); }
  void download_master(float* host) override;
  void download_state(const engine::Tensor& state, float* host) override;
  void gather_owned(const engine::Tensor& full) override;
  std::size_t staging_bytes() const override { return units_->staging_bytes(); }
  std::size_t staging_bound() const override;
  std::string name() const override { return "ZeRO-" + std::to_string(stage_); }

 private:
  // A sharded buffer (weights or moments), gathered unit by unit through one
  // unit-sized buffer so the whole tensor never exists on the device.
  void download_sharded(const engine::Tensor& shard, float* host) const;

  int stage_;
  Communicator& dp_;
  engine::Tensor master_, working_, grads_;
  const TiedEmbedding& tied_;
  std::int64_t total_;
  Sharding sharding_;
  std::unique_ptr<ZeroUnits> units_;
  std::vector<FlatRange> norm_ranges_;
};

}  // namespace parallel
