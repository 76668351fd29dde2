// The tied token embedding's two copies (Press & Wolf 2017; GPT-2 ties the
// LM head to wte). With pipeline parallelism the first stage holds wte for
// the embedding and the last stage holds a copy for the head; each copy gets
// its own part of the gradient, and the true gradient is their sum, taken over
// the "embedding group" of those two ranks (Narayanan et al. 2021, section
// 4.1). Every data-parallel strategy calls this one owner at the point of its
// reduction that suits it: on the whole copy (plain data parallel; ZeRO-1,
// before the reduce-scatter moves the copies' chunks to different offsets;
// 1-bit Adam's compression stage), or on the owned chunk of wte's unit after
// the reduction (ZeRO-2/3: wte is a unit of its own on both stages, so the
// chunks cover the same elements and their sum is the sum of the reduced
// copies).
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "engine/tensor.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"
#include "parallel/shard_layout.h"

namespace parallel {

class TiedEmbedding {
 public:
  // Collective over `world` (it splits the embedding groups). `wte`: the
  // copy's range in the whole flat layout and its unit index (only read on a
  // rank that holds a copy). `backend`: the communicator the group gets.
  // `tied` false (a model with its own LM head): there is one copy, nothing
  // to sum, and no group is made. `ends_on_one_rank`: the pipeline's first
  // and last stages are chunks of one rank (ZB-V's V puts both on rank 0),
  // which holds one copy for both uses: nothing to sum either.
  TiedEmbedding(MPI_Comm world, const ProcessGrid& grid, FlatRange wte, int wte_unit, CommBackend backend,
                bool tied = true, bool ends_on_one_rank = false);
  ~TiedEmbedding();

  // True on the first and last pipeline stage when they are different ranks.
  bool active() const { return comm_ != nullptr; }
  const FlatRange& range() const { return wte_; }
  // Sums the copies in a whole-layout gradient buffer. No-op when inactive.
  void sum_whole(const engine::Tensor& grads) const;
  // Sums this rank's owned chunk of wte's unit in a packed gradient shard.
  void sum_owned(const engine::Tensor& grad_shard, const std::vector<ShardChunk>& owned) const;
  Communicator* comm() const { return comm_.get(); }  // null when inactive

 private:
  std::unique_ptr<Communicator> comm_;
  FlatRange wte_;
  int wte_unit_;
};

}  // namespace parallel
