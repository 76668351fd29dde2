// Data-parallel gradient reduction in buckets over a flat gradient buffer,
// overlapped with the backward pass (Li et al. 2020, "PyTorch Distributed:
// Experiences on Accelerating Data Parallel Training", section 3.2.3).
//
// The buffer is cut into buckets of consecutive ranges. Each range carries the
// "readiness key" of the layer that produces it; backward visits layers from
// the highest key to the lowest, so once layer k is done every range with key
// >= k is final. The caller reports progress with layer_done(k) during the last
// micro-batch's backward; each bucket whose keys are all >= k starts its
// asynchronous all-reduce on the communicator at once, while backward goes on.
// finish() starts whatever is left and waits for everything.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "parallel/communicator.h"

namespace parallel {

struct GradRange {
  std::int64_t offset;  // elements into the flat buffer
  std::int64_t count;
  std::int64_t key;     // readiness key: final once layer_done(k) with k <= key
};

class GradBuckets {
 public:
  // `ranges` in buffer order; consecutive ranges are merged into buckets of
  // at least bucket_elements (the last bucket may be smaller).
  GradBuckets(Communicator& comm, const engine::Tensor& flat_grads, const std::vector<GradRange>& ranges,
              std::int64_t bucket_elements);

  void start_step();               // at the start of every step
  void layer_done(std::int64_t k);  // starts every bucket that is now final
  void finish();                   // starts the rest and waits for all

  int buckets() const { return static_cast<int>(buckets_.size()); }
  int started_early() const { return started_early_; }  // buckets started before finish(), last step

 private:
  struct Bucket {
    std::int64_t offset, count, min_key;
    CommHandle pending;
    bool started = false;
  };
  void start(Bucket& b);

  Communicator& comm_;
  engine::Tensor grads_;
  std::vector<Bucket> buckets_;
  int started_early_ = 0;
};

}  // namespace parallel
