#include "launch/run/optimizer_setup.h"

#include <algorithm>

#include "launch/checkpoint/onebit_checkpoint.h"
#include "optim/adamw.h"
#include "optim/dp_onebit.h"
#include "optim/onebit_adam.h"
#include "parallel/dp_all_reduce.h"
#include "parallel/dp_zero1.h"
#include "parallel/dp_zero_units.h"

namespace launch {

namespace {

// 1-bit Adam's compression groups (optim/onebit_adam.h, "Composition"): one
// group when this rank holds the whole model. Otherwise tensors whose copies
// live outside this dp group must compress alone so that those copies stay
// bit-identical: the tensors replicated over tp, and the tied wte of the
// first/last stage.
std::vector<optim::CompressionGroup> compression_groups(const model::ParamRegistry& registry,
                                                        const parallel::ProcessGrid& grid) {
  const std::int64_t n = registry.total_numel();
  if (grid.tp_size() == 1 && grid.pp_size() == 1) return {{"all", {{0, n}}}};
  optim::CompressionGroup split{"split", {}}, replicated{"replicated", {}}, wte{"wte", {}};
  const auto& entries = registry.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const model::ParamInfo& p = entries[i];
    const std::int64_t begin = i == 0 ? 0 : p.offset;  // padding goes with the entry it follows
    const std::int64_t end = i + 1 < entries.size() ? entries[i + 1].offset : n;
    optim::CompressionGroup& g =
        p.name == "wte" && grid.pp_size() > 1 ? wte : p.split.is_split() ? split : replicated;
    if (!g.ranges.empty() && g.ranges.back().first + g.ranges.back().second == begin)
      g.ranges.back().second += end - begin;
    else
      g.ranges.push_back({begin, end - begin});
  }
  return {split, replicated, wte};
}

// --bucket-mb in gradient elements.
std::int64_t bucket_elements(const TrainConfig& config, engine::DType grads) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(config.bucket_mb * 1024 * 1024 / engine::dtype_size(grads)));
}

// The flat ranges between (and after) the tensors, which hold no parameter.
std::vector<std::pair<std::int64_t, std::int64_t>> padding_ranges(const model::ParamRegistry& registry) {
  std::vector<std::pair<std::int64_t, std::int64_t>> padding;
  std::int64_t at = 0;
  for (const model::ParamInfo& p : registry.entries()) {
    if (p.offset > at) padding.push_back({at, p.offset - at});
    at = p.offset + p.numel();
  }
  if (registry.total_numel() > at) padding.push_back({at, registry.total_numel() - at});
  return padding;
}

std::unique_ptr<parallel::DataParallel> make_data_parallel(const TrainConfig& config,
                                                           const parallel::ProcessGrid& grid,
                                                           parallel::Communicator& dp,
                                                           const parallel::FlatLayout& layout,
                                                           const model::ParamStore& store,
                                                           const parallel::TiedEmbedding& tied) {
  const int stage = zero_stage(config, grid);
  if (stage >= 2)
    return std::make_unique<parallel::ZeroUnitShards>(stage, dp, layout, store.master(), store.working(),
                                                      store.grads(), tied);
  const parallel::DataParallelOptions options{config.overlap_grad_reduce,
                                              bucket_elements(config, store.grads().dtype())};
  if (stage == 1)
    return std::make_unique<parallel::ZeroOptimizerShards>(dp, layout, store.master(), store.working(),
                                                           store.grads(), tied, options);
  return std::make_unique<parallel::BucketedAllReduce>(dp, layout, store.master(), store.grads(), tied, options);
}

}  // namespace

int zero_stage(const TrainConfig& config, const parallel::ProcessGrid& grid) {
  return grid.dp_size() > 1 ? config.zero : 0;
}

int shard_ways(const TrainConfig& config, const parallel::ProcessGrid& grid) {
  return zero_stage(config, grid) >= 1 ? grid.dp_size() : 1;
}

model::StoreSharding store_sharding(const TrainConfig& config, const parallel::ProcessGrid& grid,
                                    const parallel::FlatLayout& layout, const parallel::Communicator& dp) {
  const int stage = zero_stage(config, grid);
  if (stage >= 2) return parallel::ZeroUnitShards::store_sharding(stage, layout.units, dp);
  if (stage == 1)
    return parallel::ZeroOptimizerShards::store_sharding(
        layout, bucket_elements(config, model::master_dtype(config.precision_mode)), dp);
  return model::StoreSharding{};
}

Optimization make_optimization(const TrainConfig& config, const parallel::ProcessGrid& grid,
                               parallel::Communicator& dp, const model::ParamRegistry& registry,
                               const parallel::FlatLayout& layout, const model::ParamStore& store,
                               const parallel::TiedEmbedding& tied) {
  Optimization o;
  o.data_parallel = make_data_parallel(config, grid, dp, layout, store, tied);
  // The store was laid out by store_sharding() before the strategy existed:
  // the chunks it holds must be the ones the strategy updates and gathers.
  const std::vector<parallel::ShardChunk>& held = store.sharding().owned;
  const std::vector<parallel::ShardChunk>& owned = o.data_parallel->sharding().owned;
  const bool store_sharded = store.sharding().master || store.sharding().grads || store.sharding().weights;
  ENGINE_CHECK(!store_sharded || held == owned, o.data_parallel->name(), ": the parameter store holds other chunks (",
               held.size(), ") than the strategy updates (", owned.size(),
               "); store_sharding() and the strategy disagree");
  // The optimizer updates the chunks the strategy gives this rank.
  std::vector<optim::ParamSegment> whole;
  for (const model::DecaySegment& d : registry.decay_segments()) whole.push_back({d.offset, d.count, d.decay});
  const parallel::Sharding& sharding = o.data_parallel->sharding();
  std::vector<optim::ParamSegment> segments = optim::shard_segments(whole, sharding);
  const optim::FlatParams flat{store.master(), store.grads(), store.working()};
  if (!config.onebit) {
    o.optimizer = std::make_unique<optim::AdamW>(flat, std::move(segments), config.adamw,
                                                 optim::state_elements(sharding));
    o.checkpoint = std::make_unique<OptimizerCheckpoint>();
    return o;
  }
  // 1-bit Adam: the same segments and variance layout; the momentum is whole
  // even under ZeRO (optim/onebit_adam.h, "Composition"). Its strategy wraps
  // the one just made, which keeps the replicas in step until the freeze.
  auto onebit = std::make_unique<optim::OneBitAdam>(flat, std::move(segments), config.onebit_adam, dp,
                                                    compression_groups(registry, grid),
                                                    optim::state_elements(sharding), padding_ranges(registry));
  o.checkpoint = std::make_unique<OneBitCheckpoint>(*onebit, grid, sharding.state);
  o.data_parallel = std::make_unique<optim::OneBitCompression>(std::move(o.data_parallel), *onebit, layout,
                                                               store.grads(), tied, grid.dp_size());
  o.optimizer = std::move(onebit);
  return o;
}

}  // namespace launch
