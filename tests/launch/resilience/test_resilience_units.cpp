// Unit tests of launch/resilience's host-side pieces, in one process: the
// stop-signal handler (a second signal aborts, even when two land together)
// and the text collectives on edge cases (an empty string). Built with
// UBSan, the sources under test compiled into this binary, so undefined
// behaviour (memcpy from or to a null pointer) fails the test in any build.
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "launch/resilience/rank_agreement.h"
#include "launch/resilience/stop_request.h"
#include "parallel/mpi_communicator.h"

namespace {

// Waits at most `seconds` for `pid`; SIGKILLs it past that. The exit code,
// 128 + N for a death by signal N, or -1 on a timeout.
int wait_bounded(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(StopRequest, FirstSignalIsRecordedSecondAborts) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    launch::install_stop_handlers();
    ::raise(SIGTERM);
    if (launch::stop_requested() != SIGTERM) ::_exit(3);
    ::raise(SIGUSR1);  // the second request: aborts with 128 + SIGUSR1
    ::_exit(4);
  }
  EXPECT_EQ(wait_bounded(pid, 10), 128 + SIGUSR1);
}

// Two signals landing together on two threads: exactly one of them may be
// taken as the first, so the process must abort. With a load then a store
// both could see "no request yet" and the second would be lost; with one
// atomic read-modify-write it cannot. Many forks to give the race its chance.
TEST(StopRequest, TwoSignalsAtOnceOnTwoThreadsAbort) {
  for (int trial = 0; trial < 200; ++trial) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      launch::install_stop_handlers();
      std::atomic<int> ready{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
          ready.fetch_add(1);
          while (ready.load() < 4) {
          }
          ::pthread_kill(::pthread_self(), SIGTERM);
        });
      for (std::thread& t : threads) t.join();
      ::_exit(5);  // no signal was taken as a second one
    }
    const int code = wait_bounded(pid, 10);
    ASSERT_EQ(code, 128 + SIGTERM) << "trial " << trial;
  }
}

TEST(RankAgreement, EmptyStringsTravel) {
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  EXPECT_EQ(launch::broadcast_string(self, "", 0), "");
  EXPECT_EQ(launch::broadcast_string(self, "abcde", 0), "abcde");
  EXPECT_EQ(launch::first_error(self, ""), "");
  EXPECT_EQ(launch::all_gather_strings(self, ""), std::vector<std::string>{""});
}

}  // namespace
