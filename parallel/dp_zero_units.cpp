#include "parallel/dp_zero_units.h"

#include <algorithm>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/ops.h"
#include "parallel/dp_zero1.h"

namespace parallel {

namespace {
std::int64_t largest_unit(const std::vector<FlatRange>& units) {
  std::int64_t largest = 0;
  for (const FlatRange& u : units) largest = std::max(largest, u.count);
  return largest;
}
}  // namespace

Sharding ZeroUnitShards::store_sharding(int stage, const std::vector<FlatRange>& units, const Communicator& dp) {
  ENGINE_CHECK(stage == 2 || stage == 3, "ZeroUnitShards: stage ", stage, " (expected 2 or 3)");
  Sharding s;
  s.owned = owned_chunks(units, dp.rank(), dp.size());
  s.state = s.master = s.grads = true;
  s.weights = stage == 3;
  return s;
}

ZeroUnitShards::ZeroUnitShards(int stage, Communicator& dp, const FlatLayout& layout, const engine::Tensor& master,
                               const engine::Tensor& working, const engine::Tensor& grads, const TiedEmbedding& tied)
    : stage_(stage),
      dp_(dp),
      master_(master),
      working_(working),
      grads_(grads),
      tied_(tied),
      total_(layout.total),
      sharding_(store_sharding(stage, layout.units, dp)) {
  ENGINE_CHECK(master_.numel() == shard_elements(sharding_.owned), "ZeRO-", stage, ": the master weights hold ",
               master_.numel(), " elements, but this rank's shard is ", shard_elements(sharding_.owned),
               " (the store must be built with ZeroUnitShards::store_sharding)");
  units_ = std::make_unique<ZeroUnits>(dp, layout.units, stage == 3 ? working : engine::Tensor{}, grads);
  norm_ranges_ = owned_norm_ranges(layout.norm_ranges, sharding_.owned, true);
}

void ZeroUnitShards::finish_gradients() {
  units_->finish_grads();  // backward started every unit's reduce-scatter; land them
  tied_.sum_owned(grads_, sharding_.owned);
}

void ZeroUnitShards::before_update() {
  // No gather may still be reading the shards the optimizer is about to
  // write, and every gathered copy is stale after it.
  if (stage_ == 3) units_->drop_weights();
}

void ZeroUnitShards::after_update() {
  if (stage_ == 2) gather_owned(working_);
}

void ZeroUnitShards::gather_owned(const engine::Tensor& full) {
  all_gather_chunks(dp_, units_->units(), sharding_.owned, full);
}

void ZeroUnitShards::download_master(float* host) { download_sharded(master_, host); }

void ZeroUnitShards::download_state(const engine::Tensor& state, float* host) { download_sharded(state, host); }

void ZeroUnitShards::download_sharded(const engine::Tensor& shard, float* host) const {
  const std::vector<FlatRange>& units = units_->units();
  const std::int64_t largest = largest_unit(units);
  engine::Buffer unit_buffer(shard.device(), static_cast<std::size_t>(largest) * engine::dtype_size(shard.dtype()));
  if (host) engine::ops::fill(engine::host_f32(host, total_), 0.0);  // padding past the last unit, if any
  for (std::size_t i = 0; i < units.size(); ++i) {
    const FlatRange& u = units[i];
    const engine::Tensor whole = unit_buffer.as_tensor(engine::Shape{largest}, shard.dtype()).flat_slice(0, u.count);
    units_->gather_unit(shard, static_cast<int>(i), whole);
    if (host) engine::ops::copy(engine::host_f32(host + u.offset, u.count), whole);
  }
}

std::size_t ZeroUnitShards::staging_bound(int stage, const std::vector<FlatRange>& units, engine::DType working,
                                          engine::DType grads) {
  // The pool holds at most as many buffers as are in use at once
  // (parallel/zero_units.h): 3 gathered units (ZeRO-3: in use, prefetched,
  // the embedding's pair) and 4 gradient units (in use, the held token
  // embedding, 2 reductions in flight), each at most the largest unit.
  const std::size_t element = std::max(engine::dtype_size(working), engine::dtype_size(grads));
  return static_cast<std::size_t>(largest_unit(units)) * (stage == 3 ? 7 : 4) * element;
}

std::size_t ZeroUnitShards::staging_bound() const {
  return staging_bound(stage_, units_->units(), working_.dtype(), grads_.dtype());
}

}  // namespace parallel
