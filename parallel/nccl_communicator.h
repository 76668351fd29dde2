// NcclCommunicator: the Communicator over NCCL, for device tensors.
//
// Built only when the engine has CUDA and NCCL was found (ENGINE_WITH_NCCL);
// include this header under `#ifdef ENGINE_WITH_NCCL`.
//
// - One GPU per rank: select it (engine::cuda_set_device) before creating
//   any communicator.
// - Bootstrap over MPI: rank 0 of the group creates the ncclUniqueId and
//   broadcasts it over the group's MPI communicator (NCCL's documented
//   "MPI + NCCL" pattern); then every member calls ncclCommInitRank.
// - Streams. Each communicator has its own stream, created non-blocking so
//   it never synchronises implicitly with the legacy default stream, and is
//   ordered against the engine's compute stream (engine::cuda::
//   current_stream(), read at each call, so a stream set for graph capture
//   is honoured) with events:
//     start: record `ready` on the compute stream; the comm stream waits on
//            it, so the collective reads what the kernels before it wrote;
//     then:  enqueue the NCCL call on the comm stream, record `done`;
//     wait(): the compute stream waits on `done` (cudaStreamWaitEvent). The
//            host does not block; later kernels see the result.
//   A bucketed gradient all-reduce thus overlaps the rest of the backward
//   pass, and wait() before the optimizer step costs nothing on the host.
//   To read a result on the host, copy it with engine::copy_bytes (ordered
//   on the compute stream, synchronous for host memory), or call
//   synchronize() to drain the comm stream.
// - Tensors passed to an asynchronous call must not be freed or overwritten
//   before the compute stream has passed wait()'s point (engine arenas are
//   reused only in stream order, which guarantees it).
// - bf16 reduces natively (ncclBfloat16, fp32 accumulation inside NCCL's
//   kernels); point-to-point batches use ncclGroupStart/End so the ops of a
//   batch progress together (no send/send deadlock); all_to_all is a group
//   of sends and receives (NCCL has no all-to-all primitive).
// - barrier() drains the comm stream and calls MPI_Barrier on the group.
// - Failures. A dead peer does not make an NCCL call fail: its kernels wait
//   for it, and the host would wait for them forever in a device
//   synchronisation. With the first communicator, the host's waits for the
//   device (engine::device_synchronize, copies into host memory) become polls
//   under the collective watchdog (parallel/watchdog.h: wait_until), which
//   also check every live communicator's ncclCommGetAsyncError and fail on an
//   error; on a timeout the watchdog's roll call names the ranks that did not
//   arrive, the communicators are aborted (ncclCommAbort) and the job ends
//   with the watchdog's one line, as for the MPI transport.
// - Transport. CommBackend::kNccl moves the bytes with NCCL's kernels;
//   kNcclHostDouble is the test double (parallel/nccl_host_double.h): everything
//   above stays (streams, events, watchdog waits, asynchronous errors,
//   abort) but the bytes go through pinned host memory and MPI on a worker
//   thread, with random delays on both streams, so several ranks can share
//   one GPU and the CUDA parity suites run these paths
//   (ENGINE_TEST_COMM=nccl-double; MPI_THREAD_MULTIPLE).
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <initializer_list>
#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace parallel {

class NcclHostDouble;

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `group` (every member calls it, in the same order as any
  // other communicator creation).
  // `backend`: kNccl or kNcclHostDouble.
  NcclCommunicator(MPI_Comm group, std::string name, CommBackend backend = CommBackend::kNccl);
  ~NcclCommunicator() override;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "nccl"; }

  cudaStream_t stream() const { return stream_; }  // the comm stream
  // Blocks the host until every operation issued so far has completed.
  void synchronize();

 protected:
  CommHandle start_all_reduce(const Tensor& inout, ReduceOp op) override;
  CommHandle start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  CommHandle start_all_gather(const Tensor& in, const Tensor& out) override;
  CommHandle start_broadcast(const Tensor& t, int root) override;
  CommHandle start_all_to_all(const Tensor& in, const Tensor& out) override;
  CommHandle start_p2p(std::span<const P2POp> ops) override;
  void do_barrier() override;

 private:
  void check_device(const char* call, const Tensor& t) const;
  // Checks the tensors' device and orders the comm stream after the compute stream.
  void begin(const char* call, std::initializer_list<const Tensor*> tensors);
  CommHandle end();  // records `done` and returns the handle

  MPI_Comm mpi_comm_ = MPI_COMM_NULL;  // owned duplicate: id broadcast and barrier
  ncclComm_t comm_ = nullptr;                  // kNccl with more than one rank
  std::unique_ptr<NcclHostDouble> double_;    // kNcclHostDouble with more than one rank
  cudaStream_t stream_ = nullptr;          // owned, non-blocking
  cudaEvent_t ready_ = nullptr;            // owned, reused by every call
  int size_ = 1;
  int rank_ = 0;
};

// NCCL communicators for the three axes of `grid`, each
// bootstrapped over the matching MPI_Comm_split of `world`. Collective.
GridComms make_nccl_comms(const ProcessGrid& grid, MPI_Comm world = MPI_COMM_WORLD,
                          CommBackend backend = CommBackend::kNccl);

}  // namespace parallel
