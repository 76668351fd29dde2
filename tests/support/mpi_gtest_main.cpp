// main() for GoogleTest suites that need MPI: one process (MPI singleton) or
// under mpirun. Rank 0 prints the usual report; other ranks print only their
// failures, tagged with the rank; the process exits non-zero on every rank if
// any rank failed, so mpirun (and CTest) see the failure.
//
// MPI's thread level: MPI_THREAD_FUNNELED, as the trainer's; MPI_THREAD_MULTIPLE
// when ENGINE_TEST_COMM is set (the NCCL test double's worker threads call MPI
// beside the main thread: parallel/host_collective_worker.h).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "tests/support/rank_failure_printer.h"


int main(int argc, char** argv) {
  const char* comm = std::getenv("ENGINE_TEST_COMM");
  const int level = comm != nullptr && *comm != '\0' ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, level, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new test_support::RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
