// The MPI program test_watchdog_wait runs under mpirun: the collective
// watchdog (parallel/watchdog.h) over a wait that is not an MPI request.
//
//   watchdog_child DIR stuck   rank 0 waits in wait_until for something that
//                              never happens (as a device stuck in an NCCL
//                              collective whose peer died), the others in a
//                              barrier for rank 0: the watchdog (timeout 1 s)
//                              must end the job with its one line and exit 42,
//                              after running this rank's abort cleanup, which
//                              writes DIR/cleanup_RANK.
//   watchdog_child DIR done    the same, but rank 0's wait ends after 0.3 s:
//                              every rank passes the barrier and exits 0.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "parallel/watchdog.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: watchdog_child DIR stuck|done\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const std::string dir = argv[1], mode = argv[2];
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  parallel::install_watchdog(MPI_COMM_WORLD, {/*timeout_seconds=*/1.0, /*exit_code=*/42});
  parallel::watchdog_on_abort([&] { std::ofstream(dir + "/cleanup_" + std::to_string(rank)) << "aborted\n"; });
  parallel::watchdog_set_step(7);
  parallel::watchdog_set_phase("forward");

  if (rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    parallel::wait_until(
        [&] { return mode == "done" && std::chrono::steady_clock::now() - start > std::chrono::milliseconds(300); },
        [] { return std::string("device synchronisation (test)"); });
  }
  MPI_Request barrier = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
  parallel::wait_for_requests(1, &barrier, [] { return std::string("barrier (test)"); });

  parallel::uninstall_watchdog();
  MPI_Finalize();
  return 0;
}
