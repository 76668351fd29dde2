// Plain data parallel: every rank keeps everything and the gradients are
// all-reduced in buckets that start during the last micro-batch's backward as
// layers finish (Li et al. 2020, "PyTorch Distributed", section 3.2.3;
// parallel/grad_buckets.h). After the reduction every replica holds the same
// gradients, so the global norm counts them on dp rank 0 only.
#pragma once

#include <memory>

#include "parallel/data_parallel.h"
#include "parallel/tied_embedding.h"

namespace parallel {

struct DataParallelOptions {
  bool overlap = true;            // start buckets during backward (--overlap-grad-reduce)
  std::int64_t bucket_elements;   // smallest bucket (--bucket-mb)
};

class BucketedAllReduce : public DataParallel {
 public:
  // `grads`: the store's whole gradient buffer; `master`: its master weights.
  BucketedAllReduce(Communicator& dp, const FlatLayout& layout, const engine::Tensor& master,
                    const engine::Tensor& grads, const TiedEmbedding& tied, DataParallelOptions options);

  void begin_step() override;
  void layer_done(std::int64_t layer) override;
  void finish_gradients() override;
  const std::vector<FlatRange>& norm_ranges() const override { return norm_ranges_; }
  const Sharding& sharding() const override { return sharding_; }
  void download_master(float* host) override;
  void download_state(const engine::Tensor& state, float* host) override;
  std::string name() const override { return "data parallel"; }

 private:
  engine::Tensor master_, grads_;
  const TiedEmbedding& tied_;
  bool overlap_;
  std::unique_ptr<GradBuckets> buckets_;  // null with one replica
  std::vector<FlatRange> norm_ranges_;
  Sharding sharding_;  // nothing sharded
};

}  // namespace parallel
