// parallel::wait_until: the collective watchdog's wait for anything that can
// be polled (parallel/watchdog.h), which the NCCL communicators route the
// host's device synchronisations through (parallel/nccl_communicator.h), so
// a device stuck in a collective whose peer died ends the job instead of
// hanging it. In one process: it returns, passes on an error, and sleeps
// rather than spins; under mpirun (watchdog_child, as a child process): a
// wait that never ends is timed out by the roll call, which names it, runs
// the abort cleanups (where NCCL's communicators are aborted) and ends the
// job with the watchdog's exit code.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "parallel/watchdog.h"
#include "tests/launch/process_harness.h"

namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

int count_lines_with(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(WatchdogWait, ReturnsOnceDone) {
  int polls = 0;
  parallel::wait_until([&] { return ++polls == 1000; }, [] { return std::string("test"); });
  EXPECT_EQ(polls, 1000);
}

TEST(WatchdogWait, PassesOnTheTestsError) {
  EXPECT_THROW(parallel::wait_until([]() -> bool { throw std::runtime_error("NCCL error"); },
                                    [] { return std::string("test"); }),
               std::runtime_error);
}

// After its first half second a wait sleeps between polls: a rank waiting
// for a stalled peer must not burn a core.
TEST(WatchdogWait, SleepsRatherThanSpins) {
  const double cpu0 = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  parallel::wait_until([&] { return std::chrono::steady_clock::now() - start > std::chrono::seconds(2); },
                       [] { return std::string("test"); });
  EXPECT_LT(cpu_seconds() - cpu0, 1.2) << "CPU seconds used in a 2 s wait";
}

class WatchdogWaitJob : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("watchdog_wait_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  test_support::Child run(const std::string& mode) {
    return test_support::Child({MPIEXEC, "--oversubscribe", "-np", "2", WATCHDOG_CHILD, dir_.string(), mode},
                               (dir_ / (mode + ".out")).string(), (dir_ / (mode + ".err")).string(),
                               {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMP_NUM_THREADS=1"});
  }
  std::filesystem::path dir_;
};

TEST_F(WatchdogWaitJob, AWaitThatNeverEndsEndsTheJobNamingIt) {
  test_support::Child job = run("stuck");
  ASSERT_EQ(job.wait(60), 42) << job.err();
  const std::string err = job.err();
  EXPECT_EQ(count_lines_with(err, "error: collective timeout"), 1) << err;
  // Every rank answers the roll call (rank 1 waits in its barrier), so the
  // line lists where each waits, the stuck wait by its name.
  EXPECT_NE(err.find("rank 0 in device synchronisation (test) (forward, step 7)"), std::string::npos) << err;
  EXPECT_NE(err.find("barrier (test)"), std::string::npos) << err;
  // The reporter ran its abort cleanups before MPI_Abort.
  EXPECT_TRUE(std::filesystem::exists(dir_ / "cleanup_0")) << err;
}

TEST_F(WatchdogWaitJob, AWaitThatEndsLetsTheJobFinish) {
  test_support::Child job = run("done");
  ASSERT_EQ(job.wait(60), 0) << job.err();
  EXPECT_EQ(job.err().find("error:"), std::string::npos) << job.err();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "cleanup_0"));
}
