#include "launch/run/gpu_assignment.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/check.h"

namespace launch {

namespace {

int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

}  // namespace

int node_local_rank(MPI_Comm world) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return std::atoi(v);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank_of(world), MPI_INFO_NULL, &node);
  const int local = rank_of(node);
  MPI_Comm_free(&node);
  return local;
}

void check_one_gpu_per_rank(MPI_Comm world, const std::string& gpu_id) {
  constexpr int kIdBytes = 64;
  char mine[kIdBytes] = {};
  gpu_id.copy(mine, kIdBytes - 1);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank_of(world), MPI_INFO_NULL, &node);
  const int local_ranks = size_of(node);
  std::vector<char> all(static_cast<std::size_t>(local_ranks) * kIdBytes);
  MPI_Allgather(mine, kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, node);
  MPI_Comm_free(&node);
  int sharing = 0;  // ranks of this node on my GPU, me included
  for (int r = 0; r < local_ranks; ++r)
    if (std::strncmp(all.data() + static_cast<std::size_t>(r) * kIdBytes, mine, kIdBytes) == 0) ++sharing;
  int worst = sharing;
  MPI_Allreduce(&sharing, &worst, 1, MPI_INT, MPI_MAX, world);
  ENGINE_CHECK(worst <= 1, "NCCL (--comm nccl, and --comm auto on CUDA) needs a GPU per rank, but ", worst,
               " ranks of one node share a GPU", sharing > 1 ? " (this rank's, " + gpu_id + ")" : std::string(),
               ": start at most one rank per GPU, or use --comm mpi to let ranks share a GPU (host-staged, "
               "for correctness runs)");
}

}  // namespace launch
