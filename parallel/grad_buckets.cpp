#include "parallel/grad_buckets.h"

#include <algorithm>

#include "engine/check.h"

namespace parallel {

namespace {
// Consecutive ranges merged until a bucket holds at least bucket_elements;
// `key` is the smallest readiness key of a bucket's ranges.
std::vector<GradRange> merge_into_buckets(const std::vector<GradRange>& ranges, std::int64_t bucket_elements) {
  ENGINE_CHECK(bucket_elements >= 1, "gradient buckets need a positive size, got ", bucket_elements);
  std::vector<GradRange> buckets;
  for (const GradRange& r : ranges) {
    if (!buckets.empty() && buckets.back().count < bucket_elements &&
        buckets.back().offset + buckets.back().count == r.offset) {
      buckets.back().count += r.count;
      buckets.back().key = std::min(buckets.back().key, r.key);
    } else {
      buckets.push_back(r);
    }
  }
  return buckets;
}
}  // namespace

std::vector<FlatRange> bucket_ranges(const std::vector<GradRange>& ranges, std::int64_t bucket_elements) {
  std::vector<FlatRange> out;
  for (const GradRange& b : merge_into_buckets(ranges, bucket_elements)) out.push_back({b.offset, b.count});
  return out;
}

GradBuckets::GradBuckets(Communicator& comm, const engine::Tensor& flat_grads, const std::vector<GradRange>& ranges,
                         std::int64_t bucket_elements, Mode mode)
    : comm_(comm), grads_(flat_grads), mode_(mode) {
  for (const GradRange& r : ranges)
    ENGINE_CHECK(r.offset >= 0 && r.count >= 0 && r.offset + r.count <= flat_grads.numel(), "gradient range [",
                 r.offset, ", ", r.offset + r.count, ") is outside the ", flat_grads.numel(), "-element buffer");
  for (const GradRange& b : merge_into_buckets(ranges, bucket_elements)) {
    buckets_.push_back(Bucket{b.offset, b.count, b.key, nullptr, false});
    bucket_ranges_.push_back({b.offset, b.count});
  }
  if (mode_ == Mode::kReduceScatter) {
    owned_ = parallel::owned_chunks(bucket_ranges_, comm_.rank(), comm_.size());
    shard_elements_ = parallel::shard_elements(owned_);
  }
}

void GradBuckets::start(Bucket& b) {
  b.started = true;
  if (b.count == 0) return;
  const engine::Tensor bucket = grads_.flat_slice(b.offset, b.count);
  if (mode_ == Mode::kAllReduce) {
    b.pending = comm_.all_reduce_async(bucket);
  } else {
    const std::int64_t chunk = b.count / comm_.size();
    b.pending = comm_.reduce_scatter_async(bucket, bucket.flat_slice(comm_.rank() * chunk, chunk));
  }
}

void GradBuckets::gather(const engine::Tensor& full, const engine::Tensor& shard) {
  ENGINE_CHECK(mode_ == Mode::kReduceScatter, "GradBuckets::gather is for ZeRO (reduce-scatter) buckets");
  ENGINE_CHECK(full.numel() == grads_.numel(), "gather: the full buffer has ", full.numel(),
               " elements, the gradient layout ", grads_.numel());
  all_gather_chunks(comm_, bucket_ranges_, owned_, full, shard);
}

void GradBuckets::start_step() {
  for (Bucket& b : buckets_) {
    b.started = false;
    b.pending.reset();
  }
  started_early_ = 0;
}

void GradBuckets::layer_done(std::int64_t k) {
  // Buckets are visited from the end of the buffer, where backward starts.
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    if (!it->started && it->min_key >= k) {
      start(*it);
      ++started_early_;
    } else if (it->pending) {
      it->pending->progress();  // earlier buckets move on while this layer's backward ran
    }
  }
}

void GradBuckets::finish() {
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it)
    if (!it->started) start(*it);
  for (Bucket& b : buckets_)
    if (b.pending) b.pending->wait();
}

}  // namespace parallel
