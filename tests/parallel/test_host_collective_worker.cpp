// HostCollectiveWorker (parallel/host_collective_worker.h), the NCCL test
// double's transport, under mpirun (np 4, MPI_THREAD_MULTIPLE): jobs run in
// submission order whatever order they become ready in; two groups' workers
// progress independently, so ranks that issue them in different orders do not
// deadlock (what NCCL's separate streams guarantee); results match references
// under random delays; a failed job stops its worker and says why; cancel()
// lets waiters go and ends a job stuck waiting for a peer.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "engine/check.h"
#include "engine/tensor.h"
#include "parallel/host_collective_worker.h"
#include "parallel/watchdog.h"
#include "tests/support/mpi_world.h"

using engine::DType;
using engine::Shape;
using engine::Tensor;
using parallel::Communicator;
using parallel::HostCollectiveWorker;
using parallel::P2POp;
using parallel::WorkerDelays;

using test_support::world_rank;
using test_support::world_size;

namespace {



Tensor host_f32(std::vector<float>& v) {
  return engine::host_tensor(v.data(), Shape{static_cast<std::int64_t>(v.size())}, DType::kF32);
}

// Polls the word until it reaches `value`; false after `seconds` (a bounded wait).
bool wait_for(const HostCollectiveWorker& worker, std::uint64_t value, double seconds = 30) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (worker.completed() < value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A group's collectives and point-to-point exchanges on host vectors, with
// what each must produce on this rank.
struct Exercise {
  std::vector<float> sum, gather_in, gather_out, scatter_in, scatter_out, bcast, send, recv;
  int rank = 0, n = 1, salt = 0;

  Exercise(int rank_, int n_, int salt_) : rank(rank_), n(n_), salt(salt_) {
    sum.assign(5, 0.0f);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = value(rank, static_cast<int>(i));
    gather_in = {value(rank, 0), value(rank, 1)};
    gather_out.assign(2 * n, -1.0f);
    scatter_in.resize(3 * n);
    for (int i = 0; i < 3 * n; ++i) scatter_in[i] = value(rank, i);
    scatter_out.assign(3, -1.0f);
    bcast.assign(4, rank == 1 % n ? 7.5f + salt : -1.0f);
    send = {value(rank, 11), value(rank, 12)};
    recv.assign(2, -1.0f);
  }
  float value(int r, int i) const { return static_cast<float>(r + 1) + 0.125f * i + 0.25f * salt; }

  // Queues one job per operation on `worker`; returns the job numbers.
  std::vector<std::uint64_t> submit(HostCollectiveWorker& worker) {
    std::vector<std::uint64_t> jobs;
    jobs.push_back(worker.submit([this](Communicator& c) { c.all_reduce(host_f32(sum)); }));
    jobs.push_back(worker.submit([this](Communicator& c) { c.all_gather(host_f32(gather_in), host_f32(gather_out)); }));
    jobs.push_back(worker.submit([this](Communicator& c) { c.reduce_scatter(host_f32(scatter_in), host_f32(scatter_out)); }));
    jobs.push_back(worker.submit([this](Communicator& c) { c.broadcast(host_f32(bcast), 1 % n); }));
    jobs.push_back(worker.submit([this](Communicator& c) {
      const P2POp ops[] = {P2POp::send(host_f32(send), (rank + 1) % n), P2POp::recv(host_f32(recv), (rank + n - 1) % n)};
      c.batch_p2p(ops);
    }));
    return jobs;
  }

  void expect_results() const {
    for (std::size_t i = 0; i < sum.size(); ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += value(r, static_cast<int>(i));
      EXPECT_FLOAT_EQ(sum[i], expected) << "all_reduce element " << i;
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(gather_out[2 * r], value(r, 0));
      EXPECT_EQ(gather_out[2 * r + 1], value(r, 1));
    }
    for (int i = 0; i < 3; ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += value(r, 3 * rank + i);
      EXPECT_FLOAT_EQ(scatter_out[i], expected) << "reduce_scatter element " << i;
    }
    for (float v : bcast) EXPECT_EQ(v, 7.5f + salt);
    const int from = (rank + n - 1) % n;
    EXPECT_EQ(recv[0], value(from, 11));
    EXPECT_EQ(recv[1], value(from, 12));
  }
};

}  // namespace

TEST(HostCollectiveWorker, RunsJobsInSubmissionOrderWhateverOrderTheyBecomeReady) {
  // Declared before the worker, so a failed assertion's return joins the
  // worker before what its jobs touch is freed.
  std::vector<std::uint64_t> ran;  // written by the worker, read after the word says so
  std::vector<std::vector<float>> data(3, std::vector<float>(4, static_cast<float>(world_rank() + 1)));
  alignas(8) std::uint64_t word = 99;
  HostCollectiveWorker worker(MPI_COMM_WORLD, "world", &word, WorkerDelays{});
  EXPECT_EQ(worker.completed(), 0u) << "the constructor starts the word at 0";
  std::vector<std::uint64_t> jobs;
  for (int k = 0; k < 3; ++k)
    jobs.push_back(worker.submit([&, k](Communicator& c) {
      ran.push_back(static_cast<std::uint64_t>(k + 1));
      c.all_reduce(host_f32(data[k]));
    }));
  EXPECT_EQ(jobs, (std::vector<std::uint64_t>{1, 2, 3}));
  worker.mark_ready(3);
  worker.mark_ready(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(worker.completed(), 0u) << "jobs 2 and 3 ran before job 1 was ready";
  worker.mark_ready(1);
  ASSERT_TRUE(wait_for(worker, 3)) << "the worker did not finish three ready jobs";
  EXPECT_EQ(ran, (std::vector<std::uint64_t>{1, 2, 3}));
  const float total = static_cast<float>(world_size() * (world_size() + 1) / 2);
  for (const auto& d : data)
    for (float v : d) EXPECT_EQ(v, total);
  EXPECT_FALSE(worker.error().has_value());
  worker.mark_ready(77);  // unknown numbers are ignored
}

TEST(HostCollectiveWorker, TwoGroupsIssuedInOppositeOrdersOnAlternateRanksBothFinishWithTheRightResults) {
  const int n = world_size(), rank = world_rank();
  std::deque<Exercise> exercises;  // before the workers: they are joined first on any return
  alignas(8) std::uint64_t word_a = 0, word_b = 0;
  const WorkerDelays delays{/*max_delay_us=*/800, /*seed=*/static_cast<std::uint64_t>(rank + 1)};
  HostCollectiveWorker a(MPI_COMM_WORLD, "a", &word_a, delays);
  HostCollectiveWorker b(MPI_COMM_WORLD, "b", &word_b, WorkerDelays{800, static_cast<std::uint64_t>(100 + rank)});
  for (int round = 0; round < 4; ++round) {
    Exercise& ea = exercises.emplace_back(rank, n, 2 * round);
    Exercise& eb = exercises.emplace_back(rank, n, 2 * round + 1);
    const std::uint64_t base_a = a.completed(), base_b = b.completed();
    // Even ranks hand `a` its inputs first, odd ranks `b`: one worker serving
    // both groups in arrival order would deadlock here.
    HostCollectiveWorker& first = rank % 2 == 0 ? a : b;
    HostCollectiveWorker& second = rank % 2 == 0 ? b : a;
    Exercise& e_first = rank % 2 == 0 ? ea : eb;
    Exercise& e_second = rank % 2 == 0 ? eb : ea;
    for (std::uint64_t job : e_first.submit(first)) first.mark_ready(job);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (std::uint64_t job : e_second.submit(second)) second.mark_ready(job);
    ASSERT_TRUE(wait_for(a, base_a + 5)) << "group a stuck in round " << round;
    ASSERT_TRUE(wait_for(b, base_b + 5)) << "group b stuck in round " << round;
    ea.expect_results();
    eb.expect_results();
  }
  EXPECT_FALSE(a.error().has_value());
  EXPECT_FALSE(b.error().has_value());
}

TEST(HostCollectiveWorker, AFailedJobStopsTheWorkerAndSaysWhy) {
  bool later_ran = false;
  alignas(8) std::uint64_t word = 0;
  HostCollectiveWorker worker(MPI_COMM_WORLD, "tp", &word, WorkerDelays{});
  worker.mark_ready(worker.submit([](Communicator&) { ENGINE_FAIL("the staged bytes were short"); }));
  worker.mark_ready(worker.submit([&](Communicator&) { later_ran = true; }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!worker.error() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(worker.error().has_value());
  EXPECT_NE(worker.error()->find("tp communication job 1 failed"), std::string::npos) << *worker.error();
  EXPECT_NE(worker.error()->find("the staged bytes were short"), std::string::npos) << *worker.error();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(worker.completed(), 0u);
  EXPECT_FALSE(later_ran);
  worker.cancel();
  EXPECT_EQ(worker.completed(), HostCollectiveWorker::kCancelled) << "cancel() lets every waiter go";
}

TEST(HostCollectiveWorker, CancelEndsAJobWaitingForAPeerThatNeverArrives) {
  std::atomic<bool> waiting{false};
  alignas(8) std::uint64_t word = 0;
  auto worker = std::make_unique<HostCollectiveWorker>(MPI_COMM_WORLD, "pp", &word, WorkerDelays{});
  // The job waits the way a transfer waits for its peer: in the watchdog's
  // wait, which a background thread's cancel flag ends.
  worker->mark_ready(worker->submit([&](Communicator&) {
    waiting = true;
    parallel::wait_until([] { return false; }, [] { return std::string("a peer that is gone"); });
  }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!waiting && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(waiting.load());
  std::promise<void> gone;
  std::future<void> destroyed = gone.get_future();
  std::thread destroyer([&] {
    worker.reset();  // cancels and joins
    gone.set_value();
  });
  const bool joined = destroyed.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!joined) {
    destroyer.detach();
    FAIL() << "destroying a worker stuck waiting for a peer did not return within 20 s";
  }
  destroyer.join();
  EXPECT_EQ(word, HostCollectiveWorker::kCancelled);
}

TEST(HostCollectiveWorker, RefusesAMisalignedCompletionWord) {
  alignas(8) unsigned char bytes[16] = {};
  try {
    HostCollectiveWorker worker(MPI_COMM_WORLD, "dp", reinterpret_cast<std::uint64_t*>(bytes + 4), WorkerDelays{});
    FAIL() << "a misaligned completion word was accepted";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("aligned 64-bit word"), std::string::npos) << e.what();
  }
}
