// ZeRO stages 2 and 3 over the parameter units of one pipeline stage
// (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", sections 5.2 and 5.3).
//
// A unit is a contiguous range of the flat parameter layout that is used as
// a whole: a transformer block, the token embedding, the position embedding,
// the final layer norm (model/param_registry.h). Rank r of the data-parallel
// group owns chunk r of every unit (parallel/shard_layout.h) and keeps only
// those chunks of:
//
//   gradients (stage 2 and 3)  A unit's gradient lives in a staging buffer
//       from acquire_grads() (zeroed) to its last release_grads(); then a
//       reduce-scatter starts at once, while backward goes on, and when it
//       completes the owned chunk of the sum is added into this rank's
//       gradient shard and the buffer is reused. So the gradient of the whole
//       model never exists on one rank; with gradient accumulation every
//       micro-batch reduces (as DeepSpeed's stage 2 does). At most
//       max_reductions_in_flight reductions are outstanding: starting
//       another first finishes the oldest.
//   working weights (stage 3)  acquire_weights() all-gathers the unit into a
//       staging buffer (or waits for the prefetch_weights() that started it)
//       and the last release_weights() drops it. The stage prefetches the
//       next unit in its forward or backward order before computing the
//       current one, so the gather overlaps that computation.
//
// Staging buffers come from one pool: a free buffer is reused by any later
// unit that fits it (or grown, when none fits), so the pool holds no more
// buffers than were ever in use at once (the units in use, the prefetched
// one, the reductions in flight), each at most the largest unit, and
// staging_bytes() reports it. Every rank of the data-parallel group must make
// the same calls in the same order (they run the same schedule), which keeps
// the collectives matched.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/buffer.h"
#include "engine/tensor.h"
#include "parallel/communicator.h"
#include "parallel/shard_layout.h"

namespace parallel {

class ZeroUnits {
 public:
  // units: the stage's units in layout order, each count a multiple of
  // dp.size(). working_shard: this rank's chunks of the working weights
  // (stage 3; empty under stage 2, whose weights stay whole). grad_shard:
  // this rank's chunks of the gradients. Both are laid out as owned().
  ZeroUnits(Communicator& dp, std::vector<FlatRange> units, engine::Tensor working_shard, engine::Tensor grad_shard,
            int max_reductions_in_flight = 2);
  ~ZeroUnits();
  ZeroUnits(const ZeroUnits&) = delete;
  ZeroUnits& operator=(const ZeroUnits&) = delete;

  Communicator& comm() const { return comm_; }
  const std::vector<FlatRange>& units() const { return units_; }
  const std::vector<ShardChunk>& owned() const { return owned_; }  // one chunk per unit
  std::int64_t shard_elements() const { return shard_elements_; }
  bool weights_sharded() const { return !working_shard_.empty(); }

  // ---- stage 3: working weights -------------------------------------------------
  // Starts the unit's all-gather unless it is already gathered or in flight.
  void prefetch_weights(int unit);
  // The unit's whole working weights (units()[unit].count elements), valid
  // until the matching release_weights(); references are counted.
  engine::Tensor acquire_weights(int unit);
  void release_weights(int unit);
  // Waits for outstanding prefetches and drops every gathered copy; call it
  // after the optimizer changed the shards (the copies are stale) and at the
  // end of a pass. Fails if a unit is still acquired.
  void drop_weights();

  // ---- stages 2 and 3: gradients -------------------------------------------------
  // The unit's gradient staging buffer, zeroed when first acquired; while it
  // is held (acquired more times than released) the same buffer comes back,
  // so several uses accumulate into it.
  engine::Tensor acquire_grads(int unit);
  // At the last release the unit's reduce-scatter starts.
  void release_grads(int unit);
  // Waits for every reduction and adds each into the gradient shard: the
  // shard then holds the sum of everything released since it was zeroed.
  void finish_grads();

  // Gathers unit `unit` of a shard-laid-out buffer (weights, moments) whole
  // into `out` (units()[unit].count elements). Collective, blocking.
  void gather_unit(const engine::Tensor& shard, int unit, const engine::Tensor& out) const;

  // Bytes of staging buffers allocated (the pool's size; it never shrinks).
  std::size_t staging_bytes() const;

 private:
  struct Slot;
  struct UnitState;
  struct Reduction;
  Slot* take_slot(std::size_t bytes);
  void complete_oldest_reduction();
  void progress_pending();
  const FlatRange& unit_range(int unit) const;

  Communicator& comm_;
  std::vector<FlatRange> units_;
  std::vector<ShardChunk> owned_;
  std::int64_t shard_elements_ = 0;
  engine::Tensor working_shard_, grad_shard_;
  int max_reductions_in_flight_;
  std::vector<std::unique_ptr<Slot>> pool_;
  std::vector<UnitState> state_;
  std::deque<Reduction> in_flight_;
};

}  // namespace parallel
