// main() of the MPI test program: builds a grid that fits the world size,
// registers its communicators with the shared suites, and runs Google Test on
// every rank. Only rank 0 prints the usual report; other ranks print their
// failures prefixed with the rank. The exit code is the maximum over ranks,
// so a failure on any rank fails the test.
//
// On a GPU, device tensors go through the MPI communicator (staged through the
// host); with ENGINE_TEST_COMM=nccl-double (and NCCL built in) the suites also
// run over NcclCommunicator with the test double's transport
// (parallel/nccl_host_double.h): NCCL's stream-and-event protocol with every
// rank on the one GPU, random delays on both streams.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/device.h"
#include "parallel/mpi_communicator.h"
#ifdef ENGINE_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif
#include "parallel/process_grid.h"
#include "tests/parallel/communicator_suite.h"
#include "tests/support/rank_failure_printer.h"


int main(int argc, char** argv) {
  const char* test_comm = std::getenv("ENGINE_TEST_COMM");
  const bool nccl_double = test_comm != nullptr && std::string(test_comm) == "nccl-double";
  int provided = 0;  // the double's worker threads call MPI beside this one (as the shared test main decides it)
  const bool multiple = test_comm != nullptr && *test_comm != '\0';
  MPI_Init_thread(&argc, &argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
  int world_size = 1, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);

  int failed = 0;
  {
    // np 8: tp 2 x dp 2 x pp 2; np 4: tp 2 x pp 2; np 2: tp 2 (dp and pp are
    // groups of one, which exercises the size-1 shortcuts).
    const int tp = world_size % 2 == 0 ? 2 : 1;
    const int pp = world_size % 4 == 0 ? 2 : 1;
    parallel::ProcessGrid grid(world_size, world_rank, tp, pp);
    parallel::GridComms comms = parallel::make_mpi_comms(grid, MPI_COMM_WORLD);
    parallel::MpiCommunicator world(MPI_COMM_WORLD, "world");
    // A second world communicator used as one pipeline of world_size stages.
    parallel::MpiCommunicator all_stages(MPI_COMM_WORLD, "pp_world");

    using parallel_test::CommUnderTest;
    std::vector<engine::DeviceType> devices = {engine::DeviceType::kCpu};
    if (engine::cuda_device_count() > 0) devices.push_back(engine::DeviceType::kCuda);  // staged through host
    for (engine::DeviceType device : devices)
      for (parallel::Communicator* c : {static_cast<parallel::Communicator*>(&world), comms.tp.get(), comms.dp.get(), comms.pp.get()})
        parallel_test::comms_under_test().push_back(
            {c->name() + "_size" + std::to_string(c->size()) + "_" + engine::device_name(device), c, device});
    parallel_test::pipeline_comms() = {&all_stages, comms.pp.get()};
#ifdef ENGINE_WITH_NCCL
    parallel::GridComms double_comms;
    std::unique_ptr<parallel::NcclCommunicator> double_world;
    if (nccl_double && engine::cuda_device_count() > 0) {
      engine::cuda_set_device(0);  // every rank on the one GPU: what the double is for
      double_comms = parallel::make_nccl_comms(grid, MPI_COMM_WORLD, parallel::CommBackend::kNcclHostDouble);
      double_world = std::make_unique<parallel::NcclCommunicator>(MPI_COMM_WORLD, "world",
                                                                 parallel::CommBackend::kNcclHostDouble);
      for (parallel::Communicator* c : {static_cast<parallel::Communicator*>(double_world.get()), double_comms.tp.get(),
                                        double_comms.dp.get(), double_comms.pp.get()})
        parallel_test::comms_under_test().push_back(
            {"ncclDouble_" + c->name() + "_size" + std::to_string(c->size()), c, engine::DeviceType::kCuda});
    }
#endif

    ::testing::InitGoogleTest(&argc, argv);
    if (world_rank != 0) {
      ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new test_support::RankFailurePrinter(world_rank));
    }
    if (world_rank == 0) std::printf("MPI test world: %s\n", grid.describe().c_str());
    failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    parallel_test::comms_under_test().clear();
    parallel_test::pipeline_comms().clear();
  }  // communicators are freed before MPI_Finalize

  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (world_rank == 0 && any_failed && !failed) std::fprintf(stderr, "tests failed on another rank\n");
  MPI_Finalize();
  return any_failed;
}
