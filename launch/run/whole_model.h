// The whole model on one rank, put together from the slices every (tp, pp)
// position holds: what --save-model writes and the sampler runs under any
// layout. Each position's data-parallel rank 0 sends its slices, described
// by name, global shape and split, to world rank 0, which cuts every tensor
// of the whole model out of them (launch/checkpoint/tensor_slices.h), as a checkpoint
// resumed under tp = pp = 1 would.
#pragma once

#include <vector>

#include "model/param_registry.h"
#include "parallel/communicator.h"

namespace launch {

// Collective over `world`. `mine` is this rank's master weights laid out by
// `registry`, or null on ranks that do not contribute (the other
// data-parallel replicas hold the same values). Returns, on world rank 0,
// the whole model laid out by `whole`; elsewhere an empty vector.
std::vector<float> gather_whole_model(parallel::Communicator& world, const model::ParamRegistry& registry,
                                      const float* mine, const model::ParamRegistry& whole);

}  // namespace launch
