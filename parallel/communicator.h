// Communicator: the collectives and point-to-point messages of one group of
// ranks (one grid axis, or the world), with one implementation per backend:
// MpiCommunicator (host memory, stages device memory through host buffers)
// and NcclCommunicator (device memory, one GPU per rank). Flashlight's
// pattern: callers and tests see only this interface.
//
// Semantics shared by every backend
// ---------------------------------
// - Every member of the group calls the same collectives in the same order
//   (MPI's and NCCL's rule); point-to-point messages between a pair match in
//   the order they were posted (no tags).
// - Tensors are contiguous views (engine::Tensor); all tensors of one call have
//   the same dtype and device. Supported dtypes: f32, f64, bf16, i32.
// - Asynchronous calls return a CommHandle; the tensors must stay alive and
//   untouched until wait(). wait() is idempotent; a handle destroyed without
//   wait() waits in its destructor (so an exception cannot leave a transfer
//   writing into freed memory). The blocking calls are "start, then wait".
// - What "done" means differs by backend: for MPI the host buffers hold the
//   result when wait() returns; for NCCL wait() orders the caller's compute
//   stream after the transfer (see nccl_communicator.h).
// - A group of size 1 communicates with nobody: collectives become copies (or
//   nothing), cost nothing and count no bytes, whatever the backend.
//
// Byte accounting (bytes_sent)
// ----------------------------
// The counter adds, per call on this rank, the bytes a bandwidth-optimal ring
// algorithm would send from this rank (Patarasuk & Yuan 2009; Thakur et al.
// 2005), with n = size() and B = the bytes of the full logical tensor in its
// own dtype:
//     all_reduce      2 (n-1)/n * B        (reduce-scatter + all-gather phases)
//     reduce_scatter    (n-1)/n * B_in     (= (n-1) * B_out)
//     all_gather        (n-1)/n * B_out    (= (n-1) * B_in)
//     broadcast         (n-1)/n * B        (a pipelined chain; mean over ranks)
//     all_to_all        (n-1)/n * B_in     (my block for myself stays home)
//     send                  B              (a receive counts 0)
//     barrier               0
// Fractions round down to whole bytes. This is the algorithmic volume, the
// same on every backend and independent of what the library really does
// (trees, NVLS, eager copies, the MPI backend's f32 staging of bf16 sums), so
// the step log's bytes per axis can be compared across runs and layouts and
// turned into bus bandwidth (NCCL's "busbw" convention).
//
// Time accounting (wait_seconds)
// ------------------------------
// The counter adds the wall-clock seconds this rank spends blocked in this
// group's communication: inside the blocking calls (which are "start, then
// wait") and barrier(), inside wait() of the handles the asynchronous calls
// return, and inside a handle's destructor when it waits there. Starting an
// operation and progress() count nothing: that is the time communication
// overlaps computation. So the counter is the communication this rank could
// not hide, whether spent moving bytes or waiting for a peer that is late (a
// pipeline stage blocked on its neighbour's activations counts its bubble
// here). Size-1 groups and empty tensors count nothing.
// What "blocked" means follows each backend's wait(): on MPI the transfer
// itself; on NCCL only the host's enqueue of a stream dependency (the device
// waits, the host does not), so there the counter stays near zero and device
// time has to be measured with events instead.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/tensor.h"
#include "parallel/process_grid.h"

namespace parallel {

using engine::Tensor;

enum class ReduceOp { kSum, kMax };

// Which Communicator a group of device ranks gets: MPI (host memory, device
// tensors staged through it), NCCL, or NCCL's protocol over the test double
// (parallel/nccl_host_double.h: several ranks on one GPU).
enum class CommBackend { kMpi, kNccl, kNcclHostDouble };
const char* reduce_op_name(ReduceOp op);

// A communication in flight.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Returns once the operation is complete (backend's meaning, see above).
  virtual void wait() = 0;
  // Lets the operation advance without blocking. MPI libraries commonly move
  // a non-blocking collective forward only inside MPI calls (no progress
  // thread), so code that overlaps communication with computation calls this
  // between pieces of work; backends that progress on their own ignore it.
  virtual void progress() {}
};
using CommHandle = std::unique_ptr<PendingOp>;

// A handle that is already complete (size-1 groups, empty tensors).
CommHandle completed_op();

// One send or receive of a batch posted together (PyTorch's P2POp /
// batch_isend_irecv; Megatron's send_forward_recv_backward).
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind;
  Tensor tensor;
  int peer;  // rank inside this communicator's group
  static P2POp send(const Tensor& t, int peer) { return {Kind::kSend, t, peer}; }
  static P2POp recv(const Tensor& t, int peer) { return {Kind::kRecv, t, peer}; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "nccl"
  const std::string& name() const { return name_; }  // "world", "tp", "dp", "pp"
  std::string describe() const;                      // "mpi dp: rank 1 of 4"

  // ---- collectives (blocking) ----------------------------------------------
  // inout := op over the group of every rank's inout.
  void all_reduce(const Tensor& inout, ReduceOp op = ReduceOp::kSum);
  // in (n*c) on every rank; out (c) := op over ranks of in[rank*c, (rank+1)*c).
  // out may be exactly my own slice of in (in place, as ZeRO uses it).
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::kSum);
  // in (c); out (n*c) := concatenation of every rank's in, in rank order.
  // in may be exactly my own slice of out (in place).
  void all_gather(const Tensor& in, const Tensor& out);
  // t := root's t.
  void broadcast(const Tensor& t, int root);
  // in, out (n*c): block j of in goes to rank j; block j of out comes from rank j.
  void all_to_all(const Tensor& in, const Tensor& out);
  void barrier();

  // ---- point to point (blocking) -------------------------------------------
  // Blocking send and recv may be unbuffered (rendezvous): two ranks that both
  // send first deadlock. Post pairs together with batch_p2p instead.
  void send(const Tensor& t, int peer);
  void recv(const Tensor& t, int peer);
  // Every op of the batch progresses concurrently; returns when all are done.
  void batch_p2p(std::span<const P2POp> ops);

  // ---- asynchronous ----------------------------------------------------------
  [[nodiscard]] CommHandle all_reduce_async(const Tensor& inout, ReduceOp op = ReduceOp::kSum);
  [[nodiscard]] CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                ReduceOp op = ReduceOp::kSum);
  [[nodiscard]] CommHandle all_gather_async(const Tensor& in, const Tensor& out);
  [[nodiscard]] CommHandle broadcast_async(const Tensor& t, int root);
  [[nodiscard]] CommHandle send_async(const Tensor& t, int peer);
  [[nodiscard]] CommHandle recv_async(const Tensor& t, int peer);
  [[nodiscard]] CommHandle batch_p2p_async(std::span<const P2POp> ops);

  // ---- accounting -----------------------------------------------------------
  std::uint64_t bytes_sent() const { return bytes_sent_; }  // see the top of this file
  void reset_bytes_sent() { bytes_sent_ = 0; }
  double wait_seconds() const { return *wait_seconds_; }  // see the top of this file
  void reset_wait_seconds() { *wait_seconds_ = 0; }

 protected:
  explicit Communicator(std::string name) : name_(std::move(name)) {}

  // Backends implement these. Arguments are already checked (shapes, dtypes,
  // devices, ranks), size() > 1 and tensors are non-empty.
  virtual CommHandle start_all_reduce(const Tensor& inout, ReduceOp op) = 0;
  virtual CommHandle start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  virtual CommHandle start_all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual CommHandle start_broadcast(const Tensor& t, int root) = 0;
  virtual CommHandle start_all_to_all(const Tensor& in, const Tensor& out) = 0;
  // ops is non-empty; a tensor may have 0 elements (it is still posted, since
  // messages match by order); peers may include this rank itself.
  virtual CommHandle start_p2p(std::span<const P2POp> ops) = 0;  // never for a group of one
  virtual void do_barrier() = 0;

 private:
  void check_tensor(const Tensor& t, const char* op, const char* what) const;
  void count(std::uint64_t bytes) { bytes_sent_ += bytes; }
  // Wraps a backend's handle so that its wait() adds to wait_seconds_.
  CommHandle timed(CommHandle op) const;
  // A group of one's send/recv batch: each send copied into its receive,
  // matched in posting order across calls (self_queue_ holds the unmatched).
  CommHandle exchange_with_self(std::span<const P2POp> ops);
  struct SelfQueue {
    struct Send {
      engine::Buffer buffer;  // a copy of the sent bytes
      Tensor tensor;          // over buffer
    };
    struct Recv {
      Tensor tensor;
      std::shared_ptr<bool> matched;
    };
    std::deque<Send> sends;
    std::deque<Recv> recvs;
  };
  std::unique_ptr<SelfQueue> self_queue_ = std::make_unique<SelfQueue>();

  std::string name_;
  std::uint64_t bytes_sent_ = 0;
  // Shared with the handles in flight, so a handle that outlives its
  // communicator (destroyed later, during unwinding) still writes valid memory.
  std::shared_ptr<double> wait_seconds_ = std::make_shared<double>(0.0);
};

// One communicator per grid axis, as a launcher holds them for device
// traffic. No world communicator: nothing moves device bytes across the whole
// world, and an NCCL one would cost its initialisation and buffers for
// nothing (the host-side world is an MpiCommunicator of the launcher's).
struct GridComms {
  std::unique_ptr<Communicator> tp, dp, pp;
  Communicator& axis(Axis a) const;
  // Bytes sent per axis since the last reset: "tp 1.50 MiB, dp 3.00 MiB, pp 12.0 KiB"
  std::string bytes_summary() const;
  void reset_bytes_sent();
  void reset_wait_seconds();
};

// True when the byte ranges of a and b intersect (same device assumed).
bool overlaps(const Tensor& a, const Tensor& b);

}  // namespace parallel
