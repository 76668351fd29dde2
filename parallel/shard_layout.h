// How ZeRO cuts a flat buffer over the data-parallel group (Rajbhandari et
// al. 2020, section 5): the buffer is a sequence of groups (gradient buckets
// under stage 1, the parameter units of model/param_registry.h under stages
// 2 and 3); each group of `count` elements, a multiple of the group size n,
// is split into n equal chunks and rank r owns chunk r of every group.
// A rank's shard buffers hold its owned chunks back to back.
//
// Sharding every group (rather than the buffer as one range) lets each
// group's reduce-scatter or all-gather run on its own, as soon as that group
// is ready (Megatron-LM's distributed optimizer and DeepSpeed do the same).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "parallel/communicator.h"

namespace parallel {

// A range of a flat buffer, in elements.
struct FlatRange {
  std::int64_t offset;
  std::int64_t count;
};

// Where one owned chunk lives: at full_offset in the flat (whole) buffers and
// at shard_offset in the rank's compact shard buffers.
struct ShardChunk {
  std::int64_t full_offset;
  std::int64_t shard_offset;
  std::int64_t count;
  bool operator==(const ShardChunk&) const = default;
};

// Rank `rank`'s chunk of each group, in group order; fails naming the group
// when a count does not split into `size` equal chunks.
std::vector<ShardChunk> owned_chunks(const std::vector<FlatRange>& groups, int rank, int size);
std::int64_t shard_elements(const std::vector<ShardChunk>& chunks);

// Rebuilds `full` (laid out like the groups, any dtype) from every rank's
// owned chunks: rank r contributes shard.flat_slice(chunk.shard_offset,
// count) for each of its chunks, or, when `shard` is empty, its chunks of
// `full` in place. Collective over `comm`; the groups' all-gathers run
// concurrently.
void all_gather_chunks(Communicator& comm, const std::vector<FlatRange>& groups, const std::vector<ShardChunk>& owned,
                       const engine::Tensor& full, const engine::Tensor& shard = {});

}  // namespace parallel
