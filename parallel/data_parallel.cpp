#include "parallel/data_parallel.h"

#include "engine/ops.h"

namespace parallel {

void DataParallel::upload_state(const engine::Tensor& state, const float* host) {
  const Sharding& s = sharding();
  float* source = const_cast<float*>(host);  // only read: host_tensor views take a mutable pointer
  if (!s.state) {
    engine::ops::copy(state, engine::host_f32(source, state.numel()));
    return;
  }
  for (const ShardChunk& c : s.owned)
    engine::ops::copy(state.flat_slice(c.shard_offset, c.count), engine::host_f32(source + c.full_offset, c.count));
}

}  // namespace parallel
