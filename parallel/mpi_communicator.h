// MpiCommunicator: the Communicator over an MPI communicator.
//
// It is the CPU backend's transport (the parity tests run eight ranks on a
// laptop with `mpirun --oversubscribe`) and the fallback for GPUs without NCCL.
//
// - Host tensors are handed to MPI directly.
// - Device tensors are copied (engine::copy_bytes) into host staging buffers,
//   communicated, and copied back when the operation completes. Staging
//   buffers come from a pool owned by the communicator: one buffer per
//   operation in flight, each grown only when a larger message needs it, so
//   a training loop stops allocating after its first step. When built with
//   CUDA and a GPU is visible they are pinned (cudaMallocHost) so the copies
//   run at full PCIe speed; otherwise plain host memory.
// - bf16 has no MPI datatype. Data movement sends it as 16-bit words;
//   reductions (sum, max) convert to f32 in a staging buffer, reduce in f32
//   and round back to bf16 once (round to nearest even). One rounding instead
//   of one per ring hop: more accurate than a custom MPI_Op on bf16, and no
//   MPI_Op to create and free. It sends twice the bytes on the wire, which is
//   irrelevant for a fallback path (bytes_sent() still counts bf16 bytes).
// - Asynchronous calls use MPI's nonblocking collectives (MPI_Iallreduce,
//   MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, MPI_Isend/Irecv);
//   wait() calls MPI_Waitall, which also drives progress, then unstages.
//   Open MPI progresses nonblocking collectives only inside MPI calls, so
//   overlap with computation is partial on the CPU backend; correctness does
//   not depend on it.
// - Threading: call a communicator from one thread at a time (MPI_Init is
//   enough; MPI_THREAD_FUNNELED if other threads exist).
// - Counts are MPI ints: one message holds at most 2^31 - 1 elements; larger
//   calls throw (split the buffer into buckets, as gradient sync does anyway).
// - Errors: the communicator sets MPI_ERRORS_RETURN on its own MPI_Comm and
//   turns failures into engine::Error naming the call.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace parallel {

class StagingPool;  // host staging buffers (mpi_communicator.cpp)

class MpiCommunicator final : public Communicator {
 public:
  // Where staging buffers live (device tensors, bf16 sums): pinned memory
  // when a GPU is visible, or always pageable, which the NCCL test double's
  // worker thread needs (it must make no CUDA call: cudaMallocHost and
  // cudaFreeHost there would wait for the kernel that waits for the worker).
  enum class HostStaging { kPinnedWithGpu, kPageable };
  // Communicates over a duplicate of `comm` (MPI_Comm_dup), so its messages
  // can never match anyone else's traffic on `comm`. Collective over `comm`.
  MpiCommunicator(MPI_Comm comm, std::string name, HostStaging staging = HostStaging::kPinnedWithGpu);
  // The members of `parent` that pass the same `color`, ranked by `key`
  // (MPI_Comm_split). Collective over `parent`.
  static std::unique_ptr<MpiCommunicator> split(MPI_Comm parent, int color, int key, std::string name);
  ~MpiCommunicator() override;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }

 protected:
  CommHandle start_all_reduce(const Tensor& inout, ReduceOp op) override;
  CommHandle start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  CommHandle start_all_gather(const Tensor& in, const Tensor& out) override;
  CommHandle start_broadcast(const Tensor& t, int root) override;
  CommHandle start_all_to_all(const Tensor& in, const Tensor& out) override;
  CommHandle start_p2p(std::span<const P2POp> ops) override;
  void do_barrier() override;

 private:
  struct Adopt {};
  MpiCommunicator(Adopt, MPI_Comm owned, std::string name);

  MPI_Comm comm_ = MPI_COMM_NULL;  // owned: freed in the destructor
  int size_ = 1;
  int rank_ = 0;
  std::shared_ptr<StagingPool> staging_;  // shared with operations in flight
};

// Communicators for the three axes of `grid`, all over `world`
// (which must be the communicator the grid's ranks come from). Collective over
// `world`: every rank calls it once, in the same place.
GridComms make_mpi_comms(const ProcessGrid& grid, MPI_Comm world = MPI_COMM_WORLD);

// Throws unless `grid` was built for this rank of `world` (both factories
// check it before any collective).
void check_grid_matches(const ProcessGrid& grid, MPI_Comm world);

}  // namespace parallel
