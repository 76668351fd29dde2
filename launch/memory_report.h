// Bytes a rank holds, by kind, and the start-up line that reports the
// largest over all ranks (what must fit on one device).
#pragma once

#include <cstddef>
#include <ostream>

#include "model/recompute.h"
#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"

namespace launch {

// Bytes this rank holds, by kind (the ZeRO memory test compares them across dp).
struct MemoryAccount {
  std::size_t weights = 0;       // master + working copy (this rank's chunks under ZeRO-3)
  std::size_t grads = 0;         // gradient buffer (this rank's chunks under ZeRO-2/3)
  std::size_t optimizer = 0;     // moments (+ 1-bit Adam's error buffers)
  std::size_t activations = 0;   // the activation arena
  std::size_t zero_staging = 0;  // ZeRO-2/3 gather and reduce buffers allocated so far (parallel/zero_units.h)
};

// What the memory line says besides the numbers.
struct MemoryNotes {
  bool separate_working = false;  // a bf16 working copy beside the fp32 master
  int slots = 1;                  // activation slots (micro-batches alive at once)
  model::Recompute recompute = model::Recompute::kNone;
};

// Collective over `world`: the largest over ranks of each kind, as laid out
// before step 1 (the strategy's staging buffers at their bound), printed as
// one "memory" line to `out` when it is non-null.
void report_memory(std::ostream* out, parallel::Communicator& world, const MemoryAccount& mine,
                   const parallel::DataParallel& data_parallel, const optim::Optimizer& optimizer,
                   const MemoryNotes& notes);

}  // namespace launch
