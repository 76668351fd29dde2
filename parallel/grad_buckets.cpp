#include "parallel/grad_buckets.h"

#include <algorithm>

#include "engine/check.h"

namespace parallel {

GradBuckets::GradBuckets(Communicator& comm, const engine::Tensor& flat_grads, const std::vector<GradRange>& ranges,
                         std::int64_t bucket_elements)
    : comm_(comm), grads_(flat_grads) {
  ENGINE_CHECK(bucket_elements >= 1, "gradient buckets need a positive size, got ", bucket_elements);
  for (const GradRange& r : ranges) {
    ENGINE_CHECK(r.offset >= 0 && r.count >= 0 && r.offset + r.count <= flat_grads.numel(), "gradient range [",
                 r.offset, ", ", r.offset + r.count, ") is outside the ", flat_grads.numel(), "-element buffer");
    if (!buckets_.empty() && buckets_.back().count < bucket_elements &&
        buckets_.back().offset + buckets_.back().count == r.offset) {
      Bucket& b = buckets_.back();
      b.count += r.count;
      b.min_key = std::min(b.min_key, r.key);
    } else {
      buckets_.push_back(Bucket{r.offset, r.count, r.key, nullptr, false});
    }
  }
}

void GradBuckets::start(Bucket& b) {
  b.started = true;
  if (b.count > 0) b.pending = comm_.all_reduce_async(grads_.flat_slice(b.offset, b.count));
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
