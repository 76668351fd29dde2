#include "parallel/dp_zero1.h"

#include <algorithm>
#include <limits>

#include "engine/buffer.h"
#include "engine/ops.h"

namespace parallel {

std::vector<FlatRange> owned_norm_ranges(const std::vector<FlatRange>& norm_ranges,
                                         const std::vector<ShardChunk>& owned, bool grads_sharded) {
  std::vector<FlatRange> mine;
  for (const FlatRange& r : norm_ranges)
    for (const ShardChunk& c : owned) {
      const std::int64_t begin = std::max(r.offset, c.full_offset);
      const std::int64_t end = std::min(r.offset + r.count, c.full_offset + c.count);
      if (begin < end) mine.push_back({grads_sharded ? c.shard_offset + (begin - c.full_offset) : begin, end - begin});
    }
  return mine;
}

namespace {
// The tied embedding's copies must be summed before the reduce-scatter
// (their chunks sit at different offsets on the first and last stage), so
// its bucket waits for finish_gradients().
std::vector<GradRange> tied_waits_for_finish(std::vector<GradRange> ranges, const TiedEmbedding& tied) {
  if (tied.active())
    for (GradRange& r : ranges)
      if (r.offset == tied.range().offset) r.key = std::numeric_limits<std::int64_t>::min();
  return ranges;
}
}  // namespace

Sharding ZeroOptimizerShards::store_sharding(const FlatLayout& layout, std::int64_t bucket_elements,
                                             const Communicator& dp) {
  Sharding s;
  s.owned = owned_chunks(bucket_ranges(layout.ranges, bucket_elements), dp.rank(), dp.size());
  s.state = s.master = true;
  return s;
}

ZeroOptimizerShards::ZeroOptimizerShards(Communicator& dp, const FlatLayout& layout, const engine::Tensor& master,
                                         const engine::Tensor& working, const engine::Tensor& grads,
                                         const TiedEmbedding& tied, DataParallelOptions options)
    : master_(master), working_(working), grads_(grads), tied_(tied), overlap_(options.overlap) {
  buckets_ = std::make_unique<GradBuckets>(dp, grads, tied_waits_for_finish(layout.ranges, tied),
                                           options.bucket_elements, GradBuckets::Mode::kReduceScatter);
  sharding_.owned = buckets_->owned_chunks();
  sharding_.state = sharding_.master = true;
  norm_ranges_ = owned_norm_ranges(layout.norm_ranges, sharding_.owned, false);
}

void ZeroOptimizerShards::layer_done(std::int64_t layer) {
  if (overlap_) buckets_->layer_done(layer);
}

void ZeroOptimizerShards::finish_gradients() {
  tied_.sum_whole(grads_);
  buckets_->finish();
}

void ZeroOptimizerShards::download_master(float* host) { download_state(master_, host); }

void ZeroOptimizerShards::download_state(const engine::Tensor& state, float* host) {
  // A shard (moments, master) gathered through one whole-sized buffer.
  const std::int64_t n = grads_.numel();
  engine::Buffer full(state.device(), static_cast<std::size_t>(n) * engine::dtype_size(state.dtype()));
  const engine::Tensor whole = full.as_tensor(engine::Shape{n}, state.dtype());
  buckets_->gather(whole, state);
  if (host) engine::ops::copy(engine::host_f32(host, n), whole);
}

}  // namespace parallel
