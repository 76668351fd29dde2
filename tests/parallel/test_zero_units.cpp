// ZeroUnits (parallel/zero_units.h) and the shard layout under mpirun (np 2
// and 4), against references every rank computes itself: which chunks a rank
// owns; gradients acquired, accumulated and released in any interleaving
// land as the sum over ranks in the owner's shard; gathered weights are the
// whole units; the staging pool is reused, not grown, by later units.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "engine/buffer.h"
#include "engine/ops.h"
#include "parallel/mpi_communicator.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_units.h"
#include "tests/support/mpi_world.h"

using engine::DType;
using engine::Shape;
using engine::Tensor;
using parallel::FlatRange;
using parallel::ShardChunk;

using test_support::world_rank;
using test_support::world_size;

namespace {



// Three units of unequal sizes (each a multiple of the group size), with a
// gap of padding after the second, as the registry lays them out.
std::vector<FlatRange> units_for(int n) { return {{0, 8 * n}, {8 * n, 4 * n}, {16 * n, 2 * n}}; }

Tensor host_f32(std::vector<float>& v) {
  return engine::host_tensor(v.data(), Shape{static_cast<std::int64_t>(v.size())}, DType::kF32);
}

// What rank r adds to element i of unit u in use k.
float contribution(int r, int u, int k, std::int64_t i) { return static_cast<float>(r + 1) * 0.5f + u + 0.25f * k + 0.001f * i; }

}  // namespace

TEST(ShardLayout, RankOwnsChunkRankOfEveryGroupPacked) {
  const std::vector<FlatRange> groups{{0, 12}, {16, 8}};
  const std::vector<ShardChunk> owned = parallel::owned_chunks(groups, 1, 4);
  ASSERT_EQ(owned.size(), 2u);
  EXPECT_EQ(owned[0].full_offset, 3);
  EXPECT_EQ(owned[0].shard_offset, 0);
  EXPECT_EQ(owned[0].count, 3);
  EXPECT_EQ(owned[1].full_offset, 18);
  EXPECT_EQ(owned[1].shard_offset, 3);
  EXPECT_EQ(owned[1].count, 2);
  EXPECT_EQ(parallel::shard_elements(owned), 5);
  try {
    parallel::owned_chunks({{0, 10}}, 0, 4);
    FAIL() << "a 10-element range cannot split into 4 chunks";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("does not split into 4 equal chunks"), std::string::npos) << e.what();
  }
}

TEST(ZeroUnits, ReleasedGradientsLandSummedInTheOwnersShard) {
  parallel::MpiCommunicator comm(MPI_COMM_WORLD, "dp");
  const int n = world_size(), me = world_rank();
  const std::vector<FlatRange> units = units_for(n);
  const std::vector<ShardChunk> owned = parallel::owned_chunks(units, me, n);
  std::vector<float> shard(static_cast<std::size_t>(parallel::shard_elements(owned)), 0.0f);
  parallel::ZeroUnits zero(comm, units, Tensor{}, host_f32(shard), /*max_reductions_in_flight=*/1);
  // Unit 0 is used twice while held (like the tied embedding), units 1 and 2
  // are released and then used again: two reductions of one unit.
  auto fill = [&](const Tensor& g, int u, int k) {
    float* p = g.data_as<float>();
    for (std::int64_t i = 0; i < g.numel(); ++i) p[i] += contribution(me, u, k, i);
  };
  Tensor g0 = zero.acquire_grads(0);
  fill(g0, 0, 0);
  for (int u : {2, 1}) {
    fill(zero.acquire_grads(u), u, 0);
    zero.release_grads(u);
  }
  fill(zero.acquire_grads(0), 0, 1);  // the same buffer while held
  zero.release_grads(0);
  zero.release_grads(0);
  fill(zero.acquire_grads(1), 1, 1);
  zero.release_grads(1);
  zero.finish_grads();
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int uses = u == 2 ? 1 : 2;
    for (std::int64_t j = 0; j < owned[u].count; ++j) {
      const std::int64_t i = owned[u].full_offset - units[u].offset + j;  // index within the unit
      double expected = 0;
      for (int r = 0; r < n; ++r)
        for (int k = 0; k < uses; ++k) expected += contribution(r, static_cast<int>(u), k, i);
      EXPECT_NEAR(shard[static_cast<std::size_t>(owned[u].shard_offset + j)], expected, 1e-4 * expected)
          << "unit " << u << " element " << i;
    }
  }
  // The pool holds at most the in-flight reduction and two held units'
  // buffers, each at most the largest unit.
  EXPECT_LE(zero.staging_bytes(), 3u * 8u * static_cast<std::size_t>(n) * 4u);
}

TEST(ZeroUnits, GatheredWeightsAreTheWholeUnits) {
  parallel::MpiCommunicator comm(MPI_COMM_WORLD, "dp");
  const int n = world_size(), me = world_rank();
  const std::vector<FlatRange> units = units_for(n);
  const std::vector<ShardChunk> owned = parallel::owned_chunks(units, me, n);
  const std::int64_t total = units.back().offset + units.back().count;
  auto whole_value = [](std::int64_t full_index) { return 0.5f + 0.01f * static_cast<float>(full_index); };
  std::vector<float> weights(static_cast<std::size_t>(parallel::shard_elements(owned)));
  for (const ShardChunk& c : owned)
    for (std::int64_t j = 0; j < c.count; ++j) weights[static_cast<std::size_t>(c.shard_offset + j)] = whole_value(c.full_offset + j);
  std::vector<float> grads(weights.size(), 0.0f);
  parallel::ZeroUnits zero(comm, units, host_f32(weights), host_f32(grads));
  auto expect_whole = [&](const Tensor& t, int u) {
    ASSERT_EQ(t.numel(), units[u].count);
    for (std::int64_t i = 0; i < t.numel(); ++i)
      ASSERT_EQ(t.data_as<float>()[i], whole_value(units[u].offset + i)) << "unit " << u << " element " << i;
  };
  // Forward order with prefetch, then backward order, then a stale drop.
  for (int u = 0; u < 3; ++u) {
    const Tensor w = zero.acquire_weights(u);
    if (u + 1 < 3) zero.prefetch_weights(u + 1);
    expect_whole(w, u);
    zero.release_weights(u);
  }
  for (int u = 2; u >= 0; --u) {
    const Tensor w = zero.acquire_weights(u);
    if (u > 0) zero.prefetch_weights(u - 1);
    expect_whole(w, u);
    zero.release_weights(u);
  }
  // Two units at a time (the one in use, the prefetched one): the pool
  // holds two buffers, grown to the largest unit at most.
  EXPECT_LE(zero.staging_bytes(), 2u * 8u * static_cast<std::size_t>(n) * 4u);
  zero.prefetch_weights(1);
  zero.drop_weights();  // waits for the prefetch; nothing stays gathered
  // gather_unit: a shard-laid-out buffer made whole, one unit at a time.
  std::vector<float> out(static_cast<std::size_t>(units[0].count));
  zero.gather_unit(host_f32(weights), 0, host_f32(out));
  for (std::int64_t i = 0; i < units[0].count; ++i) EXPECT_EQ(out[static_cast<std::size_t>(i)], whole_value(i));
  // The in-place all-gather of a full buffer from each rank's chunks.
  std::vector<float> full(static_cast<std::size_t>(total), -1.0f);
  for (const ShardChunk& c : owned)
    for (std::int64_t j = 0; j < c.count; ++j) full[static_cast<std::size_t>(c.full_offset + j)] = whole_value(c.full_offset + j);
  parallel::all_gather_chunks(comm, units, owned, host_f32(full));
  for (const FlatRange& u : units)
    for (std::int64_t i = u.offset; i < u.offset + u.count; ++i) EXPECT_EQ(full[static_cast<std::size_t>(i)], whole_value(i));
}

TEST(ZeroUnits, MisuseIsReported) {
  parallel::MpiCommunicator comm(MPI_COMM_WORLD, "dp");
  const int n = world_size();
  const std::vector<FlatRange> units = units_for(n);
  std::vector<float> grads(
      static_cast<std::size_t>(parallel::shard_elements(parallel::owned_chunks(units, world_rank(), n))), 0.0f);
  parallel::ZeroUnits zero(comm, units, Tensor{}, host_f32(grads));
  EXPECT_THROW(zero.release_grads(0), std::exception);      // never acquired
  EXPECT_THROW(zero.acquire_weights(0), std::exception);    // stage 2: weights are not sharded
  EXPECT_THROW(zero.acquire_grads(7), std::exception);      // no such unit
  (void)zero.acquire_grads(1);
  EXPECT_THROW(zero.finish_grads(), std::exception);        // still held
  zero.release_grads(1);
  zero.finish_grads();
}
