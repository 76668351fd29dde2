// The backend-independent half of every communicator: argument checks, the
// size-1 shortcuts and byte accounting happen here once, so the MPI and NCCL
// backends only move bytes (the non-virtual interface idiom).
#include "parallel/communicator.h"

#include <chrono>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/device.h"

namespace parallel {

namespace {

class CompletedOp final : public PendingOp {
 public:
  void wait() override {}
};

// A batch of a group of one with receives not yet matched by a send to itself.
class SelfRecvOp final : public PendingOp {
 public:
  SelfRecvOp(std::vector<std::shared_ptr<bool>> matched, std::string comm_name)
      : matched_(std::move(matched)), comm_name_(std::move(comm_name)) {}
  ~SelfRecvOp() override = default;  // never waits: nothing is in flight
  void wait() override {
    for (const auto& m : matched_)
      ENGINE_CHECK(*m, comm_name_, " recv: waited for a message to itself that was never sent (MPI would wait "
                   "forever)");
  }

 private:
  std::vector<std::shared_ptr<bool>> matched_;
  std::string comm_name_;
};

// factor * (n-1)/n * bytes, rounded down: what a ring sends (communicator.h).
std::uint64_t ring_bytes(std::uint64_t bytes, int n, int factor) {
  return bytes * static_cast<std::uint64_t>(factor) * static_cast<std::uint64_t>(n - 1) /
         static_cast<std::uint64_t>(n);
}

// Adds the seconds from construction to destruction to a counter.
class WaitClock {
 public:
  explicit WaitClock(double& seconds) : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  ~WaitClock() { seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  WaitClock(const WaitClock&) = delete;
  WaitClock& operator=(const WaitClock&) = delete;

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_;
};

// A backend's handle whose waits are timed (communicator.h, "Time
// accounting"). A decorator rather than timing inside each backend, so every
// backend counts the same way.
class TimedOp final : public PendingOp {
 public:
  TimedOp(CommHandle inner, std::shared_ptr<double> seconds) : inner_(std::move(inner)), seconds_(std::move(seconds)) {}
  // A handle dropped without wait() still waits, in the inner handle's own
  // destructor (with its rules, e.g. MPI's "not while unwinding"); that
  // blocking time counts like a wait().
  ~TimedOp() override {
    WaitClock clock(*seconds_);
    inner_.reset();
  }
  void wait() override {
    WaitClock clock(*seconds_);
    inner_->wait();
  }
  void progress() override { inner_->progress(); }  // never blocks: not counted

 private:
  CommHandle inner_;
  std::shared_ptr<double> seconds_;
};

void copy_tensor(const Tensor& dst, const Tensor& src) {
  if (dst.data() != src.data())
    engine::copy_bytes(dst.data(), dst.device(), src.data(), src.device(), src.bytes());
}

}  // namespace

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

CommHandle completed_op() { return std::make_unique<CompletedOp>(); }

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.bytes() == 0 || b.bytes() == 0) return false;
  const char* a0 = static_cast<const char*>(a.data());
  const char* b0 = static_cast<const char*>(b.data());
  return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

CommHandle Communicator::timed(CommHandle op) const {
  return std::make_unique<TimedOp>(std::move(op), wait_seconds_);
}

std::string Communicator::describe() const {
  std::ostringstream out;
  out << backend() << " " << name_ << ": rank " << rank() << " of " << size();
  return out.str();
}

void Communicator::check_tensor(const Tensor& t, const char* op, const char* what) const {
  ENGINE_CHECK(!t.empty() || t.numel() == 0, name_, " ", op, ": ", what, " ", t.describe(),
               " has no memory");
  ENGINE_CHECK(t.dtype() == engine::DType::kF32 || t.dtype() == engine::DType::kF64 ||
                   t.dtype() == engine::DType::kBF16 || t.dtype() == engine::DType::kI32,
               name_, " ", op, ": unsupported dtype of ", what, " ", t.describe());
}

// ---- collectives ------------------------------------------------------------

CommHandle Communicator::all_reduce_async(const Tensor& inout, ReduceOp op) {
  check_tensor(inout, "all_reduce", "inout");
  if (size() == 1 || inout.numel() == 0) return completed_op();
  count(ring_bytes(inout.bytes(), size(), 2));
  return timed(start_all_reduce(inout, op));
}

CommHandle Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_tensor(in, "reduce_scatter", "in");
  check_tensor(out, "reduce_scatter", "out");
  ENGINE_CHECK(in.dtype() == out.dtype() && in.device() == out.device(), name_,
               " reduce_scatter: in ", in.describe(), " and out ", out.describe(),
               " must have the same dtype and device");
  ENGINE_CHECK(in.numel() == out.numel() * size(), name_, " reduce_scatter: in ", in.describe(),
               " must hold size ", size(), " x out's ", out.numel(), " elements");
  if (out.numel() == 0) return completed_op();
  if (size() == 1) {
    copy_tensor(out, in);
    return completed_op();
  }
  ENGINE_CHECK(!overlaps(in, out) || out.data() == in.flat_slice(rank() * out.numel(), out.numel()).data(),
               name_, " reduce_scatter: out overlaps in but is not this rank's slice of it");
  count(ring_bytes(in.bytes(), size(), 1));
  return timed(start_reduce_scatter(in, out, op));
}

CommHandle Communicator::all_gather_async(const Tensor& in, const Tensor& out) {
  check_tensor(in, "all_gather", "in");
  check_tensor(out, "all_gather", "out");
  ENGINE_CHECK(in.dtype() == out.dtype() && in.device() == out.device(), name_,
               " all_gather: in ", in.describe(), " and out ", out.describe(),
               " must have the same dtype and device");
  ENGINE_CHECK(out.numel() == in.numel() * size(), name_, " all_gather: out ", out.describe(),
               " must hold size ", size(), " x in's ", in.numel(), " elements");
  if (in.numel() == 0) return completed_op();
  if (size() == 1) {
    copy_tensor(out, in);
    return completed_op();
  }
  ENGINE_CHECK(!overlaps(in, out) || in.data() == out.flat_slice(rank() * in.numel(), in.numel()).data(),
               name_, " all_gather: in overlaps out but is not this rank's slice of it");
  count(ring_bytes(out.bytes(), size(), 1));
  return timed(start_all_gather(in, out));
}

CommHandle Communicator::broadcast_async(const Tensor& t, int root) {
  check_tensor(t, "broadcast", "t");
  ENGINE_CHECK(root >= 0 && root < size(), name_, " broadcast: root ", root,
               " is outside the group of size ", size());
  if (size() == 1 || t.numel() == 0) return completed_op();
  count(ring_bytes(t.bytes(), size(), 1));
  return timed(start_broadcast(t, root));
}

void Communicator::all_to_all(const Tensor& in, const Tensor& out) {
  check_tensor(in, "all_to_all", "in");
  check_tensor(out, "all_to_all", "out");
  ENGINE_CHECK(in.dtype() == out.dtype() && in.device() == out.device() && in.numel() == out.numel() &&
                   in.numel() % size() == 0,
               name_, " all_to_all: in ", in.describe(), " and out ", out.describe(),
               " must have the same dtype, device and element count, a multiple of the group size ",
               size());
  ENGINE_CHECK(!overlaps(in, out), name_, " all_to_all: in and out must not overlap");
  if (in.numel() == 0) return;
  if (size() == 1) return copy_tensor(out, in);
  count(ring_bytes(in.bytes(), size(), 1));
  timed(start_all_to_all(in, out))->wait();
}

void Communicator::barrier() {
  if (size() == 1) return;
  WaitClock clock(*wait_seconds_);
  do_barrier();
}

void Communicator::all_reduce(const Tensor& inout, ReduceOp op) { all_reduce_async(inout, op)->wait(); }
void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  reduce_scatter_async(in, out, op)->wait();
}
void Communicator::all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out)->wait(); }
void Communicator::broadcast(const Tensor& t, int root) { broadcast_async(t, root)->wait(); }

// ---- point to point -----------------------------------------------------------

CommHandle Communicator::batch_p2p_async(std::span<const P2POp> ops) {
  std::uint64_t bytes = 0;
  for (const P2POp& op : ops) {
    const char* what = op.kind == P2POp::Kind::kSend ? "send" : "recv";
    check_tensor(op.tensor, what, "tensor");
    ENGINE_CHECK(op.peer >= 0 && op.peer < size(), name_, " ", what, ": peer ", op.peer,
                 " is outside the group of size ", size());
    if (op.kind == P2POp::Kind::kSend && op.peer != rank()) bytes += op.tensor.bytes();
  }
  // Empty messages are still posted: matching is by order, so every send
  // must meet its receive even when it carries 0 bytes.
  if (ops.empty()) return completed_op();
  // A size-1 group's messages go to itself: a local copy, never the backend
  // (NCCL has no communicator for a group of one), nothing to wait for, and
  // the rule is that such groups count nothing.
  if (size() == 1) return exchange_with_self(ops);
  count(bytes);
  return timed(start_p2p(ops));
}

CommHandle Communicator::exchange_with_self(std::span<const P2POp> ops) {
  // Matched in posting order, across calls, as MPI matches one source's
  // messages: the i-th send to myself lands in the i-th receive from myself,
  // whichever is posted first (a ring posts recv_async, then send_async). A
  // send posted first is copied aside at once, since a completed send's
  // buffer is the caller's again.
  SelfQueue& q = *self_queue_;
  std::vector<std::shared_ptr<bool>> unmatched;  // this batch's receives still waiting for a send
  for (const P2POp& op : ops) {
    if (op.kind == P2POp::Kind::kSend) {
      if (!q.recvs.empty()) {
        SelfQueue::Recv recv = std::move(q.recvs.front());
        q.recvs.pop_front();
        ENGINE_CHECK(recv.tensor.bytes() == op.tensor.bytes() && recv.tensor.dtype() == op.tensor.dtype(), name_,
                     " send/recv to itself: ", op.tensor.describe(), " sent into ", recv.tensor.describe());
        copy_tensor(recv.tensor, op.tensor);
        *recv.matched = true;
      } else {
        SelfQueue::Send copy{engine::Buffer(op.tensor.device(), op.tensor.bytes()), op.tensor};
        copy.tensor = copy.buffer.as_tensor(op.tensor.shape(), op.tensor.dtype());
        copy_tensor(copy.tensor, op.tensor);
        q.sends.push_back(std::move(copy));
      }
    } else if (!q.sends.empty()) {
      const SelfQueue::Send& send = q.sends.front();
      ENGINE_CHECK(send.tensor.bytes() == op.tensor.bytes() && send.tensor.dtype() == op.tensor.dtype(), name_,
                   " send/recv to itself: ", send.tensor.describe(), " sent into ", op.tensor.describe());
      copy_tensor(op.tensor, send.tensor);
      q.sends.pop_front();
    } else {
      q.recvs.push_back({op.tensor, std::make_shared<bool>(false)});
      unmatched.push_back(q.recvs.back().matched);
    }
  }
  if (unmatched.empty()) return completed_op();
  // The handle completes once a later send has matched each of this batch's
  // waiting receives; waiting before that would wait forever in MPI, and is
  // an error here.
  return std::make_unique<SelfRecvOp>(std::move(unmatched), name_);
}

CommHandle Communicator::send_async(const Tensor& t, int peer) {
  const P2POp op = P2POp::send(t, peer);
  return batch_p2p_async(std::span<const P2POp>(&op, 1));
}
CommHandle Communicator::recv_async(const Tensor& t, int peer) {
  const P2POp op = P2POp::recv(t, peer);
  return batch_p2p_async(std::span<const P2POp>(&op, 1));
}
void Communicator::send(const Tensor& t, int peer) { send_async(t, peer)->wait(); }
void Communicator::recv(const Tensor& t, int peer) { recv_async(t, peer)->wait(); }
void Communicator::batch_p2p(std::span<const P2POp> ops) { batch_p2p_async(ops)->wait(); }

// ---- GridComms ------------------------------------------------------------------

Communicator& GridComms::axis(Axis a) const {
  const std::unique_ptr<Communicator>& c = a == Axis::kTp ? tp : a == Axis::kDp ? dp : pp;
  ENGINE_CHECK(c != nullptr, "no ", axis_name(a), " communicator was created");
  return *c;
}

std::string GridComms::bytes_summary() const {
  std::ostringstream out;
  bool first = true;
  for (Axis a : {Axis::kTp, Axis::kDp, Axis::kPp}) {
    out << (first ? "" : ", ") << axis_name(a) << " " << engine::format_bytes(axis(a).bytes_sent());
    first = false;
  }
  return out.str();
}

void GridComms::reset_bytes_sent() {
  for (Communicator* c : {tp.get(), dp.get(), pp.get()})
    if (c) c->reset_bytes_sent();
}

void GridComms::reset_wait_seconds() {
  for (Communicator* c : {tp.get(), dp.get(), pp.get()})
    if (c) c->reset_wait_seconds();
}

}  // namespace parallel
