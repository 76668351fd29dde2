// Start-up choice of how this run keeps its data-parallel replicas in step
// (parallel/data_parallel.h) and of its optimizer: the one place that reads
// --zero and --optimizer. The trainer builds what this returns and never asks
// which strategy or optimizer it got.
#pragma once

#include <memory>

#include "launch/checkpoint/optimizer_checkpoint.h"
#include "launch/run/train_config.h"
#include "model/param_registry.h"
#include "model/param_store.h"
#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/process_grid.h"
#include "parallel/tied_embedding.h"

namespace launch {

// ZeRO (Rajbhandari et al. 2020) shards over the data-parallel group; with one
// replica there is nothing to shard and every stage is stage 0.
int zero_stage(const TrainConfig& config, const parallel::ProcessGrid& grid);
// What every registry entry's padded size must divide by: the data-parallel
// size under ZeRO, so that every group splits into equal chunks.
int shard_ways(const TrainConfig& config, const parallel::ProcessGrid& grid);
// Which of the store's buffers the chosen strategy shards (ZeRO-1: the master
// weights; ZeRO-2: and the gradients; ZeRO-3: and the working weights).
model::StoreSharding store_sharding(const TrainConfig& config, const parallel::ProcessGrid& grid,
                                    const parallel::FlatLayout& layout, const parallel::Communicator& dp);

struct Optimization {
  std::unique_ptr<parallel::DataParallel> data_parallel;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<OptimizerCheckpoint> checkpoint;
};

// `store`, built with store_sharding(); `tied` outlives the result.
Optimization make_optimization(const TrainConfig& config, const parallel::ProcessGrid& grid,
                               parallel::Communicator& dp, const model::ParamRegistry& registry,
                               const parallel::FlatLayout& layout, const model::ParamStore& store,
                               const parallel::TiedEmbedding& tied);

}  // namespace launch
