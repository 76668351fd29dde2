// HostCollectiveWorker: a thread that runs one group's communication over MPI
// on host memory, one job at a time in submission order, and publishes the
// number of the last finished job in a 64-bit completion word.
//
// It is the transport of the NCCL test double (parallel/nccl_communicator.h,
// CommBackend::kNcclHostDouble): there the jobs are a collective's host-staged
// bytes, a CUDA host function marks each ready once its device-to-host copies
// have run, and a kernel on the communicator's stream waits until the
// completion word reaches the job's number, as NCCL's kernels wait for their
// peers. Nothing here knows CUDA, so the threading is tested on the CPU
// (tests/parallel/test_host_collective_worker.cpp).
//
// Semantics
// - submit() numbers jobs 1, 2, 3, ... A job runs once mark_ready(its number)
//   has been called and every earlier job has finished: one communicator's
//   operations run in the order they were issued (NCCL's rule on a stream).
// - Before each job the worker sleeps a random time in [0, max_delay_us]
//   (seeded), so that a missing ordering in its user shows up as a race.
// - The completion word is written with release semantics after the job's
//   bytes; a reader that sees n (acquire, or a device poll of mapped memory)
//   sees every result of jobs 1..n.
// - A job that throws stops the worker: error() says why, no later job runs,
//   the word stays where it was (what waits on it waits until cancel()).
// - cancel() raises the word to kCancelled so every waiter lets go, stops
//   the worker and ends a wait for a peer that never arrives; the NCCL
//   double calls it where NCCL would be aborted (ncclCommAbort).
// - CUDA: the worker makes no CUDA call (its MPI staging is pageable), so it
//   never waits for the device that waits for it.
// - MPI: the worker calls MPI while the main thread does, so MPI must be
//   initialised with MPI_THREAD_MULTIPLE (checked, one line). Its waits are
//   the watchdog's (parallel/watchdog.h) marked as a background thread: no roll
//   calls, no timeout; the main thread's waits for the jobs carry those.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "parallel/communicator.h"

namespace parallel {

struct WorkerDelays {
  std::int64_t max_delay_us = 0;  // each job waits uniformly in [0, max] first
  std::uint64_t seed = 1;
};

class HostCollectiveWorker {
 public:
  // The word's value once cancelled: greater than any job number, and ahead
  // of every one in the cyclic comparison a stream's wait on the word makes
  // (cuStreamWaitValue64: (int64_t)(word - value) >= 0), which ~0 would not be.
  static constexpr std::uint64_t kCancelled = std::uint64_t{1} << 62;
  // The work of one job: the group's host communicator, on the worker thread.
  using Job = std::function<void(Communicator&)>;

  // Collective over `group` (its MpiCommunicator is created here, on the
  // calling thread). `completion_word` (8-byte aligned, owned by the caller,
  // outliving the worker) starts at 0; `name` names the group in messages.
  HostCollectiveWorker(MPI_Comm group, std::string name, std::uint64_t* completion_word,
                       const WorkerDelays& delays);
  ~HostCollectiveWorker();  // cancels what is still pending, joins the thread
  HostCollectiveWorker(const HostCollectiveWorker&) = delete;
  HostCollectiveWorker& operator=(const HostCollectiveWorker&) = delete;

  // Queues `job`; returns its number. Any thread.
  std::uint64_t submit(Job job);
  // The job's inputs are in place. Any thread, including a CUDA host function
  // (it only locks a mutex briefly and notifies). Unknown numbers are ignored.
  void mark_ready(std::uint64_t job);
  // The number of the last finished job (acquire), or kCancelled.
  std::uint64_t completed() const;
  // Set once a job has thrown; the message names the group and the failure.
  std::optional<std::string> error() const;
  // Lets every waiter go (the word becomes kCancelled) and stops the worker.
  void cancel();

 private:
  struct Pending {
    std::uint64_t number = 0;
    Job job;
    bool ready = false;
  };
  void run();  // the thread's body
  void publish(std::uint64_t value);

  std::string name_;
  std::uint64_t* word_;
  WorkerDelays delays_;
  std::unique_ptr<Communicator> comm_;  // used only by the worker thread after construction

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  std::uint64_t submitted_ = 0;
  std::optional<std::string> error_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace parallel
