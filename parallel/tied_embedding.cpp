#include "parallel/tied_embedding.h"

#include "engine/check.h"
#include "parallel/mpi_communicator.h"
#ifdef ENGINE_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace parallel {

TiedEmbedding::TiedEmbedding(MPI_Comm world, const ProcessGrid& grid, FlatRange wte, int wte_unit,
                             CommBackend backend, bool tied, bool ends_on_one_rank)
    : wte_(wte), wte_unit_(wte_unit) {
  // One rank holds both uses of the one copy, or the head has its own weight
  // (every rank sees the same model, so all return here together).
  if (grid.pp_size() == 1 || !tied || ends_on_one_rank) return;
  const bool holds_wte = grid.is_first_stage() || grid.is_last_stage();
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(world, holds_wte ? grid.tp_rank() + grid.tp_size() * grid.dp_rank() : MPI_UNDEFINED, grid.pp_rank(),
                 &group);
  if (!holds_wte) return;
#ifdef ENGINE_WITH_NCCL
  if (backend != CommBackend::kMpi) comm_ = std::make_unique<NcclCommunicator>(group, "embedding", backend);
#else
  ENGINE_CHECK(backend == CommBackend::kMpi, "the tied embedding's group over NCCL: this engine was built without NCCL");
#endif
  if (!comm_) comm_ = std::make_unique<MpiCommunicator>(group, "embedding");
  MPI_Comm_free(&group);
}

TiedEmbedding::~TiedEmbedding() = default;

void TiedEmbedding::sum_whole(const engine::Tensor& grads) const {
  if (comm_) comm_->all_reduce(grads.flat_slice(wte_.offset, wte_.count));
}

void TiedEmbedding::sum_owned(const engine::Tensor& grad_shard, const std::vector<ShardChunk>& owned) const {
  if (!comm_) return;
  const ShardChunk& c = owned.at(static_cast<std::size_t>(wte_unit_));
  comm_->all_reduce(grad_shard.flat_slice(c.shard_offset, c.count));
}

}  // namespace parallel
