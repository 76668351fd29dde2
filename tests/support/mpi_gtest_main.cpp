// main() for GoogleTest suites that need MPI: one process (MPI singleton) or
// under mpirun. Rank 0 prints the usual report; other ranks print only their
// failures, tagged with the rank; the process exits non-zero on every rank if
// any rank failed, so mpirun (and CTest) see the failure.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "tests/support/rank_failure_printer.h"


int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
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
