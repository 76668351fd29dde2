// NcclHostDouble: the NCCL communicator's test double. It keeps NcclCommunicator's
// stream-and-event protocol (parallel/nccl_communicator.h) exactly and moves
// the bytes another way, so the multi-rank device paths (bucketed gradient
// all-reduces overlapping the backward, ZeRO's gathers and reduce-scatters,
// pipeline hand-offs, tensor-parallel collectives) run with several ranks on
// ONE GPU, which NCCL itself refuses, and a missing stream dependency shows
// up as a parity failure against one process.
//
// One operation, queued on the communicator's stream where NCCL's kernel
// would be:
//   1. device-to-host copies of its inputs into pinned staging;
//   2. a host function marks the job ready for the group's worker thread
//      (parallel/host_collective_worker.h), which runs it over MPI on the
//      staged bytes after a random delay;
//   3. the stream waits until the worker's completion counter (mapped host
//      memory) reaches the job, as NCCL's kernels wait for their peers
//      (engine/cuda/host_signal.h: cuStreamWaitValue64, or a polling kernel);
//   4. a random delay kernel, so that a reader that forgot to wait for the
//      communicator's `done` event reads stale bytes;
//   5. host-to-device copies of its outputs;
//   6. a host function hands the staging bytes back to the ring.
// Staging is one pinned ring per communicator, allocated at construction
// (ENGINE_NCCL_DOUBLE_STAGING_MB, default 64): a pinned allocation later
// would synchronise the device implicitly. More bytes in flight at once
// fail with a message naming the variable.
// delay() puts a random delay on the compute stream before NcclCommunicator
// records its `ready` event, so a transfer that forgot to wait for the
// kernels producing its input copies stale bytes.
//
// Delays are uniform in [0, max_delay_us] (ENGINE_NCCL_DOUBLE_DELAY_US,
// default 200; 0 turns them off), drawn from a generator seeded with
// ENGINE_NCCL_DOUBLE_SEED (default 1) and the world rank, so a failing
// interleaving can be rerun.
//
// Failures keep NCCL's shape: a job that fails is an asynchronous error
// (async_error(), what ncclCommGetAsyncError reports), and abort() lets every
// waiting kernel go, as ncclCommAbort does.
//
// It needs MPI_THREAD_MULTIPLE (the worker calls MPI beside the main thread);
// the test main asks for it under ENGINE_TEST_COMM=nccl-double.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/host_collective_worker.h"

namespace parallel {

struct NcclDoubleOptions {
  std::int64_t max_delay_us = 200;
  std::uint64_t seed = 1;
  std::int64_t staging_mb = 64;  // pinned staging of the operations in flight at once
  // ENGINE_NCCL_DOUBLE_DELAY_US, _SEED and _STAGING_MB, else the defaults.
  static NcclDoubleOptions from_environment();
};

class NcclHostDouble {
 public:
  // Collective over `group`.
  NcclHostDouble(MPI_Comm group, std::string name, const NcclDoubleOptions& options);
  // The caller has drained `stream` of this double's work, unless aborted.
  ~NcclHostDouble();
  NcclHostDouble(const NcclHostDouble&) = delete;
  NcclHostDouble& operator=(const NcclHostDouble&) = delete;

  // Each queues one operation on `stream`, with NCCL's meaning (the
  // arguments are the base Communicator's, already checked).
  void all_reduce(const Tensor& inout, ReduceOp op, cudaStream_t stream);
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, cudaStream_t stream);
  void all_gather(const Tensor& in, const Tensor& out, cudaStream_t stream);
  void broadcast(const Tensor& t, int root, cudaStream_t stream);
  void all_to_all(const Tensor& in, const Tensor& out, cudaStream_t stream);
  void p2p(std::span<const P2POp> ops, cudaStream_t stream);

  // A random delay queued on `stream` (the compute stream, before `ready`).
  void delay(cudaStream_t stream);

  std::optional<std::string> async_error() const;
  void abort();  // every waiting kernel returns; nothing more is moved

 private:
  struct State;  // the worker, its mapped counter and the staging pool
  // One device tensor of an operation: copied to host before the job, back after it.
  struct Staged {
    Tensor device;
    bool copy_in = false;
    bool copy_out = false;
  };
  using HostWork = std::function<void(Communicator&, const std::vector<Tensor>& host)>;
  void run(const std::vector<Staged>& tensors, HostWork work, cudaStream_t stream);
  std::int64_t random_delay_ns();

  std::string name_;
  std::unique_ptr<State> state_;
  std::mt19937_64 random_;
  std::int64_t max_delay_us_ = 0;
  bool aborted_ = false;
};

}  // namespace parallel
