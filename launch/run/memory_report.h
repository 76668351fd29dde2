// The start-up memory line: the bytes each rank holds by kind, as the memory
// plan predicts them (model/memory_plan.h, the planner's own model), checked
// against what this run really allocated.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <ostream>

#include "model/memory_plan.h"
#include "model/recompute.h"
#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"

namespace launch {

// What the memory line says besides the numbers.
struct MemoryNotes {
  bool separate_working = false;  // a working copy beside the fp32 master (bf16, or whole beside a ZeRO-1/2 shard)
  int slots = 1;                  // activation slots (micro-batches alive at once), over all chunks
  int chunks = 1;                 // chunks of layers per rank (interleaved pipeline); a slot holds one chunk's
  model::Recompute recompute = model::Recompute::kNone;
};

// Largest over all ranks, of each kind and of the ranks' totals.
struct MemoryFigures {
  model::RankMemory planned, allocated;
  std::size_t planned_total = 0, allocated_total = 0;
  bool matches() const;  // the plan was exact
  // {"event": "memory", "planned": {weights, grads, optimizer, activations,
  // staging, communication, total}, "allocated": {...}} for the metrics file.
  nlohmann::json event() const;
};

// Collective over `world`. `planned`: this rank's figures from the memory
// plan; `allocated`: the same kinds as this run allocated them (staging at
// the strategy's bound; communication, NCCL's, as planned: the engine does not
// allocate it). Prints the "memory" line to `out` when it is
// non-null, and a warning naming each kind where the two differ (a bug in
// the plan: the planner would mispredict too).
MemoryFigures report_memory(std::ostream* out, parallel::Communicator& world, const model::RankMemory& planned,
                            const model::RankMemory& allocated, const parallel::DataParallel& data_parallel,
                            const optim::Optimizer& optimizer, const MemoryNotes& notes);

}  // namespace launch
