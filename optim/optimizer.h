// What the trainer asks of an optimizer, whichever it is (AdamW, 1-bit Adam):
// one update, its step count, its two moments (checkpoints) and the bytes it
// holds. Which chunks it updates and how its gradients are scaled come from
// the data-parallel strategy (parallel/data_parallel.h); shard_segments turns
// the strategy's sharding into the optimizer's segments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "parallel/data_parallel.h"

namespace optim {

// A contiguous range of parameters and whether it takes weight decay.
// Without ZeRO the master weights, gradients, working copy and moments share
// one layout. Under ZeRO a rank updates only the chunks it owns, and each
// buffer is either whole or this rank's compact shard: the moments and the
// master weights are sharded from stage 1, the gradients from stage 2, the
// working weights at stage 3; so a segment may sit at different offsets in each.
struct ParamSegment {
  std::int64_t offset;              // into working (unused when working aliases master)
  std::int64_t count;
  bool decay;
  std::int64_t master_offset = -1;  // into master; -1 = offset
  std::int64_t state_offset = -1;   // into m and v; -1 = offset
  std::int64_t grad_offset = -1;    // into grads; -1 = offset
};

// The segments of `whole` (laid out whole, default offsets) that this rank
// updates under `sharding`: each cut to the owned chunks, at its offset in
// every buffer (Rajbhandari et al. 2020: moments and master weights in a
// shard from stage 1, gradients from stage 2, working weights at stage 3). `whole` itself without ZeRO.
std::vector<ParamSegment> shard_segments(const std::vector<ParamSegment>& whole, const parallel::Sharding& sharding);
// Elements of each moment buffer under `sharding` (-1: the master's size).
std::int64_t state_elements(const parallel::Sharding& sharding);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate `lr`; gradients are multiplied by
  // grad_scale first (clipping, and the strategy's update_scale()).
  // Increments the step count.
  virtual void step(double lr, double grad_scale) = 0;
  virtual std::int64_t steps_taken() const = 0;
  virtual void set_steps_taken(std::int64_t steps) = 0;  // resume
  virtual const engine::Tensor& m() const = 0;
  virtual const engine::Tensor& v() const = 0;
  // Everything it allocated: the moments and any state beyond them.
  virtual std::size_t state_bytes() const = 0;
  // What state_bytes() holds, for the start-up memory line; `sharded`: the
  // moments are ZeRO-sharded.
  virtual std::string describe_state(bool sharded) const { return sharded ? "ZeRO shard" : ""; }
};

}  // namespace optim
