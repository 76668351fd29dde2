#include "parallel/dp_all_reduce.h"

#include "engine/ops.h"

namespace parallel {

BucketedAllReduce::BucketedAllReduce(Communicator& dp, const FlatLayout& layout, const engine::Tensor& master,
                                     const engine::Tensor& grads, const TiedEmbedding& tied,
                                     DataParallelOptions options)
    : master_(master), grads_(grads), tied_(tied), overlap_(options.overlap) {
  if (dp.size() > 1)
    buckets_ = std::make_unique<GradBuckets>(dp, grads, layout.ranges, options.bucket_elements,
                                             GradBuckets::Mode::kAllReduce);
  // After the reduction the replicas hold the same gradients: count them once.
  if (dp.rank() == 0) norm_ranges_ = layout.norm_ranges;
}

void BucketedAllReduce::begin_step() {
  if (buckets_) buckets_->start_step();
}

void BucketedAllReduce::layer_done(std::int64_t layer) {
  if (buckets_ && overlap_) buckets_->layer_done(layer);
}

void BucketedAllReduce::finish_gradients() {
  if (buckets_) buckets_->finish();  // starts what backward did not, waits for all
  tied_.sum_whole(grads_);
}

void BucketedAllReduce::download_master(float* host) {
  if (host) engine::ops::copy(engine::host_f32(host, master_.numel()), master_);
}

void BucketedAllReduce::download_state(const engine::Tensor& state, float* host) {
  if (host) engine::ops::copy(engine::host_f32(host, state.numel()), state);
}

}  // namespace parallel
