#include "optim/optimizer.h"

#include <algorithm>

namespace optim {

std::vector<ParamSegment> shard_segments(const std::vector<ParamSegment>& whole, const parallel::Sharding& sharding) {
  if (sharding.owned.empty()) return whole;
  std::vector<ParamSegment> segments;
  for (const ParamSegment& d : whole)
    for (const parallel::ShardChunk& c : sharding.owned) {
      const std::int64_t begin = std::max(d.offset, c.full_offset);
      const std::int64_t end = std::min(d.offset + d.count, c.full_offset + c.count);
      if (begin >= end) continue;
      const std::int64_t in_shard = c.shard_offset + (begin - c.full_offset);
      ParamSegment seg{begin, end - begin, d.decay, begin, sharding.state ? in_shard : begin};
      if (sharding.grads) seg.grad_offset = in_shard;
      if (sharding.master) seg.master_offset = in_shard;
      if (sharding.weights) seg.offset = in_shard;
      segments.push_back(seg);
    }
  return segments;
}

std::int64_t state_elements(const parallel::Sharding& sharding) {
  return sharding.state ? parallel::shard_elements(sharding.owned) : -1;
}

}  // namespace optim
