#include "parallel/host_collective_worker.h"

#include <chrono>
#include <exception>
#include <random>

#include "engine/check.h"
#include "parallel/mpi_communicator.h"
#include "parallel/watchdog.h"

namespace parallel {

HostCollectiveWorker::HostCollectiveWorker(MPI_Comm group, std::string name, std::uint64_t* completion_word,
                                           const WorkerDelays& delays)
    : name_(std::move(name)), word_(completion_word), delays_(delays) {
  ENGINE_CHECK(word_ != nullptr && reinterpret_cast<std::uintptr_t>(word_) % alignof(std::uint64_t) == 0,
               "the ", name_, " worker's completion word must be an aligned 64-bit word");
  ENGINE_CHECK(delays_.max_delay_us >= 0, "the ", name_, " worker's delay must not be negative, got ",
               delays_.max_delay_us);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  ENGINE_CHECK(level == MPI_THREAD_MULTIPLE, "the ", name_,
               " communicator's worker thread calls MPI beside the main thread, which needs MPI initialised "
               "with MPI_THREAD_MULTIPLE (the test main does so under ENGINE_TEST_COMM=nccl-double)");
  // Pageable staging: the worker makes no CUDA call (nccl_host_double.h).
  comm_ = std::make_unique<MpiCommunicator>(group, name_, MpiCommunicator::HostStaging::kPageable);
  std::atomic_ref<std::uint64_t>(*word_).store(0, std::memory_order_release);
  thread_ = std::thread([this] { run(); });
}

HostCollectiveWorker::~HostCollectiveWorker() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t HostCollectiveWorker::submit(Job job) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(Pending{++submitted_, std::move(job), false});
  return submitted_;
}

void HostCollectiveWorker::mark_ready(std::uint64_t job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Pending& p : queue_)
      if (p.number == job) p.ready = true;
  }
  wake_.notify_one();
}

std::uint64_t HostCollectiveWorker::completed() const {
  return std::atomic_ref<std::uint64_t>(*word_).load(std::memory_order_acquire);
}

std::optional<std::string> HostCollectiveWorker::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void HostCollectiveWorker::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  publish(kCancelled);
  wake_.notify_one();
}

void HostCollectiveWorker::publish(std::uint64_t value) {
  std::atomic_ref<std::uint64_t>(*word_).store(value, std::memory_order_release);
}

void HostCollectiveWorker::run() {
  // Its MPI waits end when stop_ is raised and never take part in roll calls.
  WatchdogBackgroundThread background(&stop_);
  std::mt19937_64 random(delays_.seed);
  std::uniform_int_distribution<std::int64_t> delay_us(0, delays_.max_delay_us);
  for (;;) {
    Pending next;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_.load() || (!queue_.empty() && queue_.front().ready); });
      if (stop_.load()) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    if (delays_.max_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    try {
      next.job(*comm_);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!stop_.load()) error_ = name_ + " communication job " + std::to_string(next.number) + " failed: " + e.what();
      return;
    }
    // A cancel that came while the job ran keeps the word at kCancelled.
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_.load()) return;
    publish(next.number);
  }
}

}  // namespace parallel
