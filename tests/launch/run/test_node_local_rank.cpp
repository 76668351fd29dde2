// node_local_rank (launch/run/gpu_assignment.h): the launcher's variable when there is
// one, else the rank within the node's shared-memory communicator, which on
// one machine equals what mpirun reports in OMPI_COMM_WORLD_LOCAL_RANK.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "launch/run/gpu_assignment.h"
#include "tests/support/mpi_world.h"

using test_support::world_rank;

namespace {

const char* kVars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};

}  // namespace

TEST(NodeLocalRank, SlurmLocalIdIsRead) {
  const char* ompi = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const std::string saved = ompi ? ompi : "";
  for (const char* var : kVars) unsetenv(var);
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(launch::node_local_rank(MPI_COMM_WORLD), 5);
  unsetenv("SLURM_LOCALID");
  if (!saved.empty()) setenv("OMPI_COMM_WORLD_LOCAL_RANK", saved.c_str(), 1);
}

TEST(NodeLocalRank, WithoutVariablesTheNodesCommunicatorDecides) {
  const char* ompi = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const std::string saved = ompi ? ompi : "";
  for (const char* var : kVars) unsetenv(var);
  // All ranks of this test run on one machine: the node-local rank is the world rank.
  EXPECT_EQ(launch::node_local_rank(MPI_COMM_WORLD), world_rank());
  if (!saved.empty()) {
    EXPECT_EQ(std::atoi(saved.c_str()), world_rank());
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", saved.c_str(), 1);
  }
}

// The ranks of this test share one machine. NCCL's refusal: every rank
// throws alike as soon as two ranks of a node name the same GPU (by PCI bus
// id), and the message says what to do; distinct GPUs pass.
TEST(NodeLocalRank, NcclRefusesRanksSharingAGpu) {
  const int rank = world_rank();
  // Rank 0 and 1 on "GPU A", the others on their own.
  const std::string shared = rank <= 1 ? "0000:1B:00.0" : "0000:" + std::to_string(40 + rank) + ":00.0";
  try {
    launch::check_one_gpu_per_rank(MPI_COMM_WORLD, shared);
    ADD_FAILURE() << "rank " << rank << ": no refusal although ranks 0 and 1 share a GPU";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("needs a GPU per rank, but 2 ranks of one node share a GPU"), std::string::npos) << what;
    EXPECT_NE(what.find("--comm mpi"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(launch::check_one_gpu_per_rank(MPI_COMM_WORLD, "0000:" + std::to_string(10 + rank) + ":00.0"));
}
