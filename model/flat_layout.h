// The flat parameter layout of one pipeline stage's (tp) slice as the
// data-parallel strategies see it (parallel/data_parallel.h): every tensor's
// range with the readiness key that tells the gradient buckets when it is
// final, the units ZeRO-2/3 shard by, what the global norm counts, and the
// tied embedding's copy.
#pragma once

#include "model/param_registry.h"
#include "model/partition.h"
#include "parallel/data_parallel.h"

namespace model {

// Readiness keys: backward visits layers from the last to the first, so a
// block's tensors are keyed by its layer index, the head's (final before any
// block's backward) by n_layer, the embedding's by -1.
// The norm counts split tensors on every tensor-parallel rank, replicated
// ones on tp rank 0 only, and the tied embedding on the first stage only
// (the last stage's copy holds the same gradient once summed).
parallel::FlatLayout flat_layout(const ParamRegistry& registry, const StageRange& range, const TensorParallel& tp,
                                 std::int64_t n_layer);

}  // namespace model
