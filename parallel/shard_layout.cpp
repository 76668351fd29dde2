#include "parallel/shard_layout.h"

#include "engine/check.h"

namespace parallel {

std::vector<ShardChunk> owned_chunks(const std::vector<FlatRange>& groups, int rank, int size) {
  ENGINE_CHECK(size >= 1 && rank >= 0 && rank < size, "owned_chunks: rank ", rank, " of ", size);
  std::vector<ShardChunk> owned;
  std::int64_t at = 0;
  for (const FlatRange& g : groups) {
    ENGINE_CHECK(g.count % size == 0, "ZeRO: the range [", g.offset, ", ", g.offset + g.count, ") of ", g.count,
                 " elements does not split into ", size, " equal chunks (the registry must pad every tensor to a "
                 "multiple of the data-parallel size)");
    const std::int64_t chunk = g.count / size;
    owned.push_back({g.offset + rank * chunk, at, chunk});
    at += chunk;
  }
  return owned;
}

std::int64_t shard_elements(const std::vector<ShardChunk>& chunks) {
  return chunks.empty() ? 0 : chunks.back().shard_offset + chunks.back().count;
}

void all_gather_chunks(Communicator& comm, const std::vector<FlatRange>& groups, const std::vector<ShardChunk>& owned,
                       const engine::Tensor& full, const engine::Tensor& shard) {
  ENGINE_CHECK(groups.size() == owned.size(), "all_gather_chunks: ", groups.size(), " groups but ", owned.size(),
               " owned chunks");
  ENGINE_CHECK(shard.empty() || shard.numel() == shard_elements(owned), "all_gather_chunks: the shard has ",
               shard.numel(), " elements, this rank owns ", shard_elements(owned));
  std::vector<CommHandle> pending;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const FlatRange& g = groups[i];
    const ShardChunk& c = owned[i];
    if (g.count == 0) continue;
    ENGINE_CHECK(g.offset + g.count <= full.numel(), "all_gather_chunks: range [", g.offset, ", ", g.offset + g.count,
                 ") is outside the ", full.numel(), "-element buffer");
    const engine::Tensor in = shard.empty() ? full.flat_slice(c.full_offset, c.count)
                                            : shard.flat_slice(c.shard_offset, c.count);
    pending.push_back(comm.all_gather_async(in, full.flat_slice(g.offset, g.count)));
  }
  for (CommHandle& h : pending) h->wait();
}

}  // namespace parallel
