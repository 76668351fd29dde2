// Data-parallel gradient reduction in buckets over a flat gradient buffer,
// overlapped with the backward pass (Li et al. 2020, "PyTorch Distributed:
// Experiences on Accelerating Data Parallel Training", section 3.2.3), and the
// bucket-wise sharding of ZeRO (Rajbhandari et al. 2020, section 5).
//
// The buffer is cut into buckets of consecutive ranges. Each range carries the
// "readiness key" of the layer that produces it; backward visits layers from
// the highest key to the lowest, so once layer k is done every range with key
// >= k is final. The caller reports progress with layer_done(k) during the last
// micro-batch's backward; each bucket whose keys are all >= k starts its
// asynchronous reduction at once, while backward goes on. finish() starts
// whatever is left and waits for everything.
//
// Two reductions:
//   kAllReduce      every rank ends with the whole reduced buffer (plain data parallel)
//   kReduceScatter  ZeRO: rank r ends with the reduced r-th chunk of every bucket,
//                   the part of the parameters whose optimizer state it owns;
//                   gather() later rebuilds a whole buffer from the owned chunks.
// Sharding by bucket (not by one contiguous range) is what lets each bucket's
// reduce-scatter start as soon as that bucket is final (Megatron-LM's
// distributed optimizer does the same). It needs every range length to be a
// multiple of the group size; the parameter registry pads to guarantee it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "parallel/communicator.h"
#include "parallel/shard_layout.h"

namespace parallel {

struct GradRange {
  std::int64_t offset;  // elements into the flat buffer
  std::int64_t count;
  std::int64_t key;     // readiness key: final once layer_done(k) with k <= key
};

// The buckets GradBuckets cuts `ranges` into: consecutive ranges merged until
// a bucket holds at least bucket_elements (the last may be smaller). The
// ZeRO-1 shards are chunks of these, so the parameter store can be laid out
// before the buckets exist (parallel/dp_zero1.h, store_sharding).
std::vector<FlatRange> bucket_ranges(const std::vector<GradRange>& ranges, std::int64_t bucket_elements);

class GradBuckets {
 public:
  enum class Mode { kAllReduce, kReduceScatter };

  // `ranges` in buffer order; consecutive ranges are merged into buckets of
  // at least bucket_elements (the last bucket may be smaller).
  GradBuckets(Communicator& comm, const engine::Tensor& flat_grads, const std::vector<GradRange>& ranges,
              std::int64_t bucket_elements, Mode mode = Mode::kAllReduce);

  void start_step();               // at the start of every step
  void layer_done(std::int64_t k);  // starts every bucket that is now final
  void finish();                   // starts the rest and waits for all

  // kReduceScatter: the chunks this rank owns, in buffer order, and their
  // total size (the size of its shard buffers).
  const std::vector<ShardChunk>& owned_chunks() const { return owned_; }
  std::int64_t shard_elements() const { return shard_elements_; }
  // Rebuilds `full` (a flat buffer laid out like the gradients, any dtype)
  // from the owned chunks of every rank: each rank contributes
  // shard.flat_slice(chunk.shard_offset, count), or, when `shard` is empty,
  // its own chunks of `full` in place (parallel/shard_layout.h).
  void gather(const engine::Tensor& full, const engine::Tensor& shard = {});

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
  Mode mode_;
  std::vector<Bucket> buckets_;
  std::vector<FlatRange> bucket_ranges_;  // the buckets as sharding groups
  std::vector<ShardChunk> owned_;
  std::int64_t shard_elements_ = 0;
  int started_early_ = 0;
};

}  // namespace parallel
