#include "parallel/nccl_communicator.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/check.h"
#include "engine/cuda/context.h"
#include "engine/device.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_host_double.h"
#include "parallel/watchdog.h"

namespace parallel {

namespace {

void check_cuda(cudaError_t rc, const char* call, const std::string& comm_name) {
  if (rc == cudaSuccess) [[likely]]
    return;
  ENGINE_FAIL(call, " for the ", comm_name, " communicator failed: ", cudaGetErrorString(rc));
}

void check_nccl(ncclResult_t rc, const char* call, const std::string& comm_name) {
  if (rc == ncclSuccess) [[likely]]
    return;
  // NCCL 2.28's own strings already end in "(run with NCCL_DEBUG=WARN for details)".
  const std::string what = ncclGetErrorString(rc);
  ENGINE_FAIL(call, " on the ", comm_name, " communicator failed: ", what,
              what.find("NCCL_DEBUG") == std::string::npos ? " (set NCCL_DEBUG=WARN for details)" : "");
}

void check_mpi(int rc, const char* call, const std::string& comm_name) {
  ENGINE_CHECK(rc == MPI_SUCCESS, call, " on the ", comm_name, " communicator failed with MPI error ", rc);
}

ncclDataType_t nccl_type(engine::DType dtype) {
  switch (dtype) {
    case engine::DType::kF32: return ncclFloat32;
    case engine::DType::kF64: return ncclFloat64;
    case engine::DType::kBF16: return ncclBfloat16;
    case engine::DType::kI32: return ncclInt32;
  }
  ENGINE_FAIL("unsupported dtype ", static_cast<int>(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

char* bytes_at(const Tensor& t, std::int64_t element) {
  return static_cast<char*>(t.data()) + element * static_cast<std::int64_t>(engine::dtype_size(t.dtype()));
}

// An NCCL operation in flight: an event recorded on the comm stream after it.
class NcclPending final : public PendingOp {
 public:
  NcclPending(cudaEvent_t done, std::string comm_name) : done_(done), comm_name_(std::move(comm_name)) {}
  ~NcclPending() override {
    if (done_) {
      try {
        wait();
      } catch (...) {
        // Destructors must not throw; the job is failing already.
      }
    }
  }
  void wait() override {
    if (!done_) return;
    // Device-side ordering only: kernels queued later on the compute stream
    // start after the transfer; the host carries on.
    cudaEvent_t done = done_;
    done_ = nullptr;
    check_cuda(cudaStreamWaitEvent(engine::cuda::current_stream(), done, 0), "cudaStreamWaitEvent", comm_name_);
    check_cuda(cudaEventDestroy(done), "cudaEventDestroy", comm_name_);  // freed once it completes
  }

 private:
  cudaEvent_t done_;
  std::string comm_name_;
};

// The live NCCL communicators of this process: the device waiter checks
// them for asynchronous errors and waits for their streams too, the watchdog
// aborts them before the job ends.
struct LiveComm {
  ncclComm_t comm;               // NCCL's, or null for the test double
  NcclHostDouble* host_double;   // the test double's, or null
  cudaStream_t stream;
  std::string name;
};
std::mutex g_live_mutex;
std::vector<LiveComm> g_live;

std::vector<LiveComm> live_comms() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  return g_live;
}

// ncclCommAbort stops the communicators' kernels, so nothing keeps spinning
// on a peer that is gone and nothing later waits for them (NCCL docs, "Fault
// tolerance"). Outside the lock: an abort may take a while.
void abort_live_comms() {
  std::vector<LiveComm> comms;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    comms.swap(g_live);
  }
  for (const LiveComm& c : comms) {
    if (c.comm) ncclCommAbort(c.comm);
    if (c.host_double) c.host_double->abort();
  }
}

// The test double's communicators only: while an exception unwinds, one
// communicator's stream may wait (through the compute stream's events) on
// another's operation that its peers will never join; aborting every double
// lets each stream drain in the destructors that follow.
void abort_live_doubles() {
  for (const LiveComm& c : live_comms())
    if (c.host_double) c.host_double->abort();
}

// A peer that died or a network that failed shows up here, not as a return
// code: NCCL's kernels keep waiting for it. On an error every communicator is
// aborted first (its kernels would otherwise hang whatever synchronises
// next: the error path's own clean-up, a destructor), then the error thrown.
void check_async_errors() {
  for (const LiveComm& c : live_comms()) {
    if (c.host_double) {
      if (const auto error = c.host_double->async_error()) {
        abort_live_comms();
        ENGINE_FAIL("the NCCL test double reported an asynchronous error on the ", c.name, " communicator: ", *error);
      }
      continue;
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(c.comm, &state) != ncclSuccess) continue;
    if (state == ncclSuccess || state == ncclInProgress) continue;
    abort_live_comms();
    ENGINE_FAIL("NCCL reported an asynchronous error on the ", c.name, " communicator: ", ncclGetErrorString(state),
                " (a peer or the network failed)");
  }
}

// True once `event` has completed; "not ready" is not left as the last CUDA error.
bool event_done(cudaEvent_t event, const std::string& comm_name) {
  const cudaError_t rc = cudaEventQuery(event);
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check_cuda(rc, "cudaEventQuery", comm_name);
  return true;
}

// Once per process, with the first NCCL communicator: the host's waits for
// the device poll under the collective watchdog (parallel/watchdog.h), which
// then ends a job whose device is stuck in a collective, and whose timeout
// aborts NCCL before MPI_Abort. A wait covers the compute stream (the
// engine's ready()) and every communicator's stream as it stands now, so an
// overlapped collective not yet waited for cannot hang the synchronisation
// that follows either.
void watch_device_waits() {
  static std::once_flag once;
  std::call_once(once, [] {
    engine::set_device_waiter([](const std::function<bool()>& ready, const char* what) {
      struct Pending {
        cudaEvent_t event = nullptr;
        std::string name;
      };
      std::vector<Pending> comm_work;
      for (const LiveComm& c : live_comms()) {
        Pending p{nullptr, c.name};
        check_cuda(cudaEventCreateWithFlags(&p.event, cudaEventDisableTiming), "cudaEventCreateWithFlags", c.name);
        comm_work.push_back(p);
        check_cuda(cudaEventRecord(p.event, c.stream), "cudaEventRecord", c.name);
      }
      struct Destroy {
        std::vector<Pending>& work;
        ~Destroy() {
          for (const Pending& p : work) cudaEventDestroy(p.event);
        }
      } destroy{comm_work};
      wait_until(
          [&] {
            check_async_errors();
            for (const Pending& p : comm_work)
              if (!event_done(p.event, p.name)) return false;
            return ready();
          },
          [what] { return std::string(what) + " behind NCCL collectives"; });
    });
    watchdog_on_abort(abort_live_comms);
  });
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm group, std::string name, CommBackend backend)
    : Communicator(std::move(name)) {
  ENGINE_CHECK(backend != CommBackend::kMpi, "the ", this->name(), " NCCL communicator was asked for MPI's transport");
  check_mpi(MPI_Comm_dup(group, &mpi_comm_), "MPI_Comm_dup", this->name());
  MPI_Comm_size(mpi_comm_, &size_);
  MPI_Comm_rank(mpi_comm_, &rank_);
  // The highest priority the device offers: when a collective and compute
  // kernels are both ready, the collective's blocks are scheduled first, so
  // the transfer that overlaps the backward is not starved by it (PyTorch's
  // NCCL process group offers the same as its is_high_priority_stream option).
  int least = 0, greatest = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange",
             this->name());
  check_cuda(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority",
             this->name());
  check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags",
             this->name());
  // A group of one never reaches NCCL (the base class short-circuits it), so
  // it skips NCCL's initialisation, which costs tens of milliseconds.
  if (size_ == 1) return;
  if (backend == CommBackend::kNcclHostDouble) {
    double_ = std::make_unique<NcclHostDouble>(mpi_comm_, this->name(), NcclDoubleOptions::from_environment());
  } else {
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", this->name());
    check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_comm_), "MPI_Bcast(ncclUniqueId)", this->name());
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank", this->name());
  }
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.push_back({comm_, double_.get(), stream_, this->name()});
  }
  watch_device_waits();
}

NcclCommunicator::~NcclCommunicator() {
  const bool connected = comm_ != nullptr || double_ != nullptr;  // size > 1
  bool live = false;  // false once aborted (an asynchronous error, or the watchdog)
  if (connected) {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    const auto it = std::find_if(g_live.begin(), g_live.end(), [&](const LiveComm& c) {
      return c.stream == stream_;
    });
    live = it != g_live.end();
    if (live) g_live.erase(it);
  }
  ncclResult_t state = ncclSuccess;
  if (live && comm_ && ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
      state != ncclInProgress) {
    ncclCommAbort(comm_);  // its kernels wait for a failed peer: neither synchronise nor destroy
    live = false;
  }
  if (double_ && (!live || double_->async_error() || std::uncaught_exceptions() > 0)) {
    abort_live_doubles();  // their waits let go; the streams then drain
    double_->abort();      // already out of the registry when it was found there
    live = false;
  }
  // An aborted NCCL communicator's stream may hold kernels that never finish:
  // skip it. The double's abort releases its kernels, so its stream drains.
  if (stream_ && (live || !comm_)) cudaStreamSynchronize(stream_);
  if (live && comm_) ncclCommDestroy(comm_);
  double_.reset();
  if (ready_) cudaEventDestroy(ready_);
  if (stream_) cudaStreamDestroy(stream_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_comm_);
}

void NcclCommunicator::synchronize() {
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", name());
}

void NcclCommunicator::check_device(const char* call, const Tensor& t) const {
  ENGINE_CHECK(t.device() == engine::DeviceType::kCuda, name(), " ", call,
               ": the NCCL communicator needs device tensors, got ", t.describe(),
               " (use the MPI communicator for host memory)");
}

void NcclCommunicator::begin(const char* call, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) check_device(call, *t);
  // The double makes the kernels before the collective late, so a transfer
  // that did not wait for them would stage stale bytes.
  if (double_) double_->delay(engine::cuda::current_stream());
  // The comm stream starts after everything already queued on the compute stream.
  check_cuda(cudaEventRecord(ready_, engine::cuda::current_stream()), "cudaEventRecord", name());
  check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent", name());
}

CommHandle NcclCommunicator::end() {
  cudaEvent_t done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags", name());
  check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord", name());
  return std::make_unique<NcclPending>(done, name());
}

CommHandle NcclCommunicator::start_all_reduce(const Tensor& inout, ReduceOp op) {
  begin("all_reduce", {&inout});
  if (double_) {
    double_->all_reduce(inout, op, stream_);
    return end();
  }
  check_nccl(ncclAllReduce(inout.data(), inout.data(), static_cast<size_t>(inout.numel()),
                           nccl_type(inout.dtype()), nccl_op(op), comm_, stream_),
             "ncclAllReduce", name());
  return end();
}

CommHandle NcclCommunicator::start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  // NCCL is in place exactly when out is my slice of in, the aliasing the
  // base class allows.
  begin("reduce_scatter", {&in, &out});
  if (double_) {
    double_->reduce_scatter(in, out, op, stream_);
    return end();
  }
  check_nccl(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()),
                               nccl_type(in.dtype()), nccl_op(op), comm_, stream_),
             "ncclReduceScatter", name());
  return end();
}

CommHandle NcclCommunicator::start_all_gather(const Tensor& in, const Tensor& out) {
  begin("all_gather", {&in, &out});
  if (double_) {
    double_->all_gather(in, out, stream_);
    return end();
  }
  check_nccl(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                           comm_, stream_),
             "ncclAllGather", name());
  return end();
}

CommHandle NcclCommunicator::start_broadcast(const Tensor& t, int root) {
  begin("broadcast", {&t});
  if (double_) {
    double_->broadcast(t, root, stream_);
    return end();
  }
  check_nccl(ncclBroadcast(t.data(), t.data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                           comm_, stream_),
             "ncclBroadcast", name());
  return end();
}

CommHandle NcclCommunicator::start_all_to_all(const Tensor& in, const Tensor& out) {
  begin("all_to_all", {&in, &out});
  if (double_) {
    double_->all_to_all(in, out, stream_);
    return end();
  }
  const std::int64_t block = in.numel() / size_;
  const ncclDataType_t type = nccl_type(in.dtype());
  check_nccl(ncclGroupStart(), "ncclGroupStart", name());
  for (int peer = 0; peer < size_; ++peer) {
    check_nccl(ncclSend(bytes_at(in, peer * block), static_cast<size_t>(block), type, peer, comm_, stream_),
               "ncclSend", name());
    check_nccl(ncclRecv(bytes_at(out, peer * block), static_cast<size_t>(block), type, peer, comm_, stream_),
               "ncclRecv", name());
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd", name());
  return end();
}

CommHandle NcclCommunicator::start_p2p(std::span<const P2POp> ops) {
  for (const P2POp& op : ops) check_device("send/recv", op.tensor);
  begin("send/recv", {});
  if (double_) {
    double_->p2p(ops, stream_);
    return end();
  }
  // One group: the sends and receives of the batch progress together, so two
  // ranks that exchange messages cannot wait on each other's send.
  check_nccl(ncclGroupStart(), "ncclGroupStart", name());
  for (const P2POp& op : ops) {
    const size_t count = static_cast<size_t>(op.tensor.numel());
    const ncclDataType_t type = nccl_type(op.tensor.dtype());
    if (op.kind == P2POp::Kind::kSend)
      check_nccl(ncclSend(op.tensor.data(), count, type, op.peer, comm_, stream_), "ncclSend", name());
    else
      check_nccl(ncclRecv(op.tensor.data(), count, type, op.peer, comm_, stream_), "ncclRecv", name());
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd", name());
  return end();
}

void NcclCommunicator::do_barrier() {
  synchronize();
  check_mpi(MPI_Barrier(mpi_comm_), "MPI_Barrier", name());
}

GridComms make_nccl_comms(const ProcessGrid& grid, MPI_Comm world, CommBackend backend) {
  check_grid_matches(grid, world);
  GridComms comms;
  // Same order on every rank: each ncclCommInitRank blocks until its whole
  // group has joined.
  auto make = [&](Axis axis) {
    MPI_Comm group = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(world, grid.group_color(axis), grid.rank(axis), &group), "MPI_Comm_split",
              axis_name(axis));
    auto comm = std::make_unique<NcclCommunicator>(group, axis_name(axis), backend);
    MPI_Comm_free(&group);  // the communicator keeps its own duplicate
    return comm;
  };
  comms.tp = make(Axis::kTp);
  comms.dp = make(Axis::kDp);
  comms.pp = make(Axis::kPp);
  return comms;
}

}  // namespace parallel
