#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <vector>

#include "engine/check.h"
#include "engine/device.h"
#include "parallel/watchdog.h"

#ifdef ENGINE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace parallel {

using engine::DeviceType;
using engine::DType;

namespace {

void check_mpi(int rc, const char* call, const std::string& comm_name) {
  if (rc == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  ENGINE_FAIL(call, " on the ", comm_name, " communicator failed: ", std::string(text, len));
}

// ---- bf16 <-> f32 (bf16 is the top half of an IEEE f32) ----------------------

float bf16_to_f32(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

MPI_Datatype wire_type(DType dtype, bool reduce) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kBF16: return reduce ? MPI_FLOAT : MPI_UINT16_T;
  }
  ENGINE_FAIL("unsupported dtype ", static_cast<int>(dtype));
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

int mpi_count(std::int64_t numel, const char* call) {
  ENGINE_CHECK(numel <= INT_MAX, call, ": ", numel,
               " elements exceed MPI's int count (2^31 - 1); split the buffer into buckets");
  return static_cast<int>(numel);
}

}  // namespace

// ---- staging buffers --------------------------------------------------------------

// Host memory MPI can read and write, pinned when a GPU is there to copy from.
class HostBlock {
 public:
  HostBlock(std::size_t bytes, bool try_pinned) : bytes_(bytes) {
#ifdef ENGINE_WITH_CUDA
    if (try_pinned) {
      if (cudaMallocHost(&ptr_, bytes) == cudaSuccess) {
        pinned_ = true;
        return;
      }
      cudaGetLastError();  // clear the error; fall back to pageable memory
      ptr_ = nullptr;
    }
#endif
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    ptr_ = std::aligned_alloc(64, rounded);
    ENGINE_CHECK(ptr_ != nullptr, "could not allocate ", bytes, " bytes of host staging memory");
  }
  ~HostBlock() {
#ifdef ENGINE_WITH_CUDA
    if (pinned_) {
      cudaFreeHost(ptr_);
      return;
    }
#endif
    std::free(ptr_);
  }
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;

  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  bool pinned_ = false;
};

// A free list of host blocks. Each operation in flight leases the blocks it
// needs and returns them when it completes; a block that is too small is
// replaced by a larger one, so the pool's size settles at the peak need.
class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  class Lease {
   public:
    Lease(std::shared_ptr<StagingPool> pool, std::unique_ptr<HostBlock> block)
        : pool_(std::move(pool)), block_(std::move(block)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) noexcept = default;
    ~Lease() {
      if (block_) pool_->free_.push_back(std::move(block_));
    }
    void* data() const { return block_->data(); }

   private:
    std::shared_ptr<StagingPool> pool_;
    std::unique_ptr<HostBlock> block_;
  };

  explicit StagingPool(bool pinned) : pinned_(pinned) {}

  Lease acquire(std::size_t bytes) {
    bytes = std::max<std::size_t>(bytes, 64);
    // Smallest free block that fits; else replace the largest (it grows).
    int best = -1, largest = -1;
    for (int i = 0; i < static_cast<int>(free_.size()); ++i) {
      const std::size_t b = free_[i]->bytes();
      if (b >= bytes && (best < 0 || b < free_[best]->bytes())) best = i;
      if (largest < 0 || b > free_[largest]->bytes()) largest = i;
    }
    std::unique_ptr<HostBlock> block;
    if (best >= 0) {
      block = std::move(free_[best]);
      free_.erase(free_.begin() + best);
    } else {
      if (largest >= 0) free_.erase(free_.begin() + largest);  // frees it
      block = std::make_unique<HostBlock>(bytes, pinned_);
    }
    return Lease(shared_from_this(), std::move(block));
  }

 private:
  bool pinned_;
  std::vector<std::unique_ptr<HostBlock>> free_;
};

namespace {

// An MPI operation in flight: its requests, the staging it holds, and the
// steps that move results from staging into the caller's tensors.
class MpiPending final : public PendingOp {
 public:
  // `operation`: a string literal ("all_reduce", "send/recv"), for messages.
  MpiPending(const std::string& comm_name, MPI_Comm comm, const char* operation)
      : comm_name_(comm_name), comm_(comm), operation_(operation) {}
  ~MpiPending() override {
    // While an exception unwinds, the peers of this operation may never post
    // theirs: waiting would hang the job instead of letting it abort.
    if (!done_ && std::uncaught_exceptions() == 0) {
      try {
        wait();
      } catch (...) {
        // Destructors must not throw; the job is failing already.
      }
    }
  }

  void wait() override {
    if (done_) return;
    done_ = true;
    // Not MPI_Waitall: it busy-polls forever if a peer never arrives. The
    // watchdog's wait backs off and ends a stalled job (parallel/watchdog.h).
    check_mpi(wait_for_requests(static_cast<int>(requests.size()), requests.data(), [this] { return describe(); }),
              "MPI_Waitall", comm_name_);
    for (const auto& step : unstage) step();
    unstage.clear();
    leases.clear();
  }

  void progress() override {
    if (done_) return;
    int complete = 0;  // completed requests become MPI_REQUEST_NULL; wait() then finishes at once
    check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &complete, MPI_STATUSES_IGNORE),
              "MPI_Testall", comm_name_);
  }

  MPI_Request* new_request() {
    requests.push_back(MPI_REQUEST_NULL);
    return &requests.back();
  }

  std::vector<MPI_Request> requests;
  std::vector<StagingPool::Lease> leases;
  std::vector<std::function<void()>> unstage;
  int peer = -1;  // point to point: the first peer, as a rank of this group

 private:
  // "pp send/recv with world rank 3", "dp all_reduce": what the watchdog
  // reports when this operation never completes.
  std::string describe() const {
    std::string text = comm_name_ + " " + operation_;
    if (peer < 0) return text;
    int world_peer = peer;
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_translate_ranks(group, 1, &peer, world, &world_peer);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return text + " with world rank " + std::to_string(world_peer);
  }

  std::string comm_name_;
  MPI_Comm comm_;
  const char* operation_;
  bool done_ = false;
};

// Where MPI reads or writes one tensor.
struct Wire {
  void* ptr;
  MPI_Datatype type;
  int count;
};

// Prepares one tensor for MPI: the tensor itself when MPI can use it as it
// is, else a host staging buffer (device memory, bf16 reductions, aliasing).
//   reduce:   values are combined arithmetically (bf16 travels as f32)
//   read:     MPI reads the tensor (copy it into staging first)
//   write:    MPI writes the tensor (copy staging back on completion)
//   separate: give MPI its own buffer even for host memory (in/out overlap)
Wire stage(MpiPending& op, StagingPool& pool, const Tensor& t, bool reduce, bool read, bool write,
           const char* call, bool separate = false) {
  const bool as_f32 = reduce && t.dtype() == DType::kBF16;
  const bool on_device = t.device() != DeviceType::kCpu;
  const std::int64_t n = t.numel();
  Wire wire{t.data(), wire_type(t.dtype(), reduce), mpi_count(n, call)};
  if (!as_f32 && !on_device && !separate) return wire;

  // `host`: the tensor's bytes, in its own dtype, in host memory.
  void* host = t.data();
  if (on_device || (separate && !as_f32)) {
    op.leases.push_back(pool.acquire(t.bytes()));
    host = op.leases.back().data();
    if (read) engine::copy_bytes(host, DeviceType::kCpu, t.data(), t.device(), t.bytes());
  }
  // `wire.ptr`: what MPI sees; f32 for bf16 reductions.
  wire.ptr = host;
  if (as_f32) {
    op.leases.push_back(pool.acquire(static_cast<std::size_t>(n) * sizeof(float)));
    wire.ptr = op.leases.back().data();
    if (read) {
      const auto* src = static_cast<const std::uint16_t*>(host);
      auto* dst = static_cast<float*>(wire.ptr);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
    }
  }
  if (write) {
    op.unstage.push_back([t, host, f32 = as_f32 ? static_cast<float*>(wire.ptr) : nullptr, n] {
      if (f32) {
        auto* dst = static_cast<std::uint16_t*>(host);
        for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(f32[i]);
      }
      if (host != t.data()) engine::copy_bytes(t.data(), t.device(), host, DeviceType::kCpu, t.bytes());
    });
  }
  return wire;
}

constexpr int kP2PTag = 0;  // one tag: pairs match in posting order

}  // namespace

// ---- construction --------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, HostStaging staging)
    : Communicator(std::move(name)),
      staging_(std::make_shared<StagingPool>(staging == HostStaging::kPinnedWithGpu && engine::cuda_device_count() > 0)) {
  check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", this->name());
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", this->name());
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

MpiCommunicator::MpiCommunicator(Adopt, MPI_Comm owned, std::string name)
    : Communicator(std::move(name)), comm_(owned), staging_(std::make_shared<StagingPool>(engine::cuda_device_count() > 0)) {
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", this->name());
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(MPI_Comm parent, int color, int key,
                                                        std::string name) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(parent, color, key, &comm), "MPI_Comm_split", name);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(Adopt{}, comm, std::move(name)));
}

MpiCommunicator::~MpiCommunicator() {
  // A communicator outliving MPI_Finalize (a static, a test fixture) has
  // nothing left to free.
  int finalized = 0;
  MPI_Finalized(&finalized);
  // MPI_Comm_free is collective in principle; while an exception unwinds
  // the other ranks may never call it, so leave the handle to MPI_Abort.
  if (!finalized && comm_ != MPI_COMM_NULL && std::uncaught_exceptions() == 0) MPI_Comm_free(&comm_);
}

// ---- operations --------------------------------------------------------------------

CommHandle MpiCommunicator::start_all_reduce(const Tensor& inout, ReduceOp op) {
  auto pending = std::make_unique<MpiPending>(name(), comm_, "all_reduce");
  const Wire w = stage(*pending, *staging_, inout, true, true, true, "all_reduce");
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, w.ptr, w.count, w.type, mpi_op(op), comm_, pending->new_request()),
            "MPI_Iallreduce", name());
  return pending;
}

CommHandle MpiCommunicator::start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  auto pending = std::make_unique<MpiPending>(name(), comm_, "reduce_scatter");
  const Wire wi = stage(*pending, *staging_, in, true, true, false, "reduce_scatter");
  // MPI forbids aliasing between send and receive buffers: an in-place
  // reduce-scatter (out = my slice of in) receives into staging.
  const Wire wo = stage(*pending, *staging_, out, true, false, true, "reduce_scatter", overlaps(in, out));
  check_mpi(MPI_Ireduce_scatter_block(wi.ptr, wo.ptr, wo.count, wo.type, mpi_op(op), comm_,
                                      pending->new_request()),
            "MPI_Ireduce_scatter_block", name());
  return pending;
}

CommHandle MpiCommunicator::start_all_gather(const Tensor& in, const Tensor& out) {
  auto pending = std::make_unique<MpiPending>(name(), comm_, "all_gather");
  // In place (in = my slice of out): send from a copy of my slice.
  const Wire wi = stage(*pending, *staging_, in, false, true, false, "all_gather", overlaps(in, out));
  const Wire wo = stage(*pending, *staging_, out, false, false, true, "all_gather");
  check_mpi(MPI_Iallgather(wi.ptr, wi.count, wi.type, wo.ptr, wi.count, wo.type, comm_,
                           pending->new_request()),
            "MPI_Iallgather", name());
  return pending;
}

CommHandle MpiCommunicator::start_broadcast(const Tensor& t, int root) {
  auto pending = std::make_unique<MpiPending>(name(), comm_, "broadcast");
  const bool is_root = rank_ == root;
  const Wire w = stage(*pending, *staging_, t, false, is_root, !is_root, "broadcast");
  check_mpi(MPI_Ibcast(w.ptr, w.count, w.type, root, comm_, pending->new_request()), "MPI_Ibcast", name());
  return pending;
}

CommHandle MpiCommunicator::start_all_to_all(const Tensor& in, const Tensor& out) {
  auto pending = std::make_unique<MpiPending>(name(), comm_, "all_to_all");
  const Wire wi = stage(*pending, *staging_, in, false, true, false, "all_to_all");
  const Wire wo = stage(*pending, *staging_, out, false, false, true, "all_to_all");
  const int block = wi.count / size_;
  check_mpi(MPI_Ialltoall(wi.ptr, block, wi.type, wo.ptr, block, wo.type, comm_, pending->new_request()),
            "MPI_Ialltoall", name());
  return pending;
}

CommHandle MpiCommunicator::start_p2p(std::span<const P2POp> ops) {
  const bool sends_only = std::all_of(ops.begin(), ops.end(), [](const P2POp& op) { return op.kind == P2POp::Kind::kSend; });
  const bool recvs_only = std::all_of(ops.begin(), ops.end(), [](const P2POp& op) { return op.kind == P2POp::Kind::kRecv; });
  auto pending = std::make_unique<MpiPending>(name(), comm_, sends_only ? "send" : recvs_only ? "recv" : "send/recv");
  pending->peer = ops.front().peer;
  pending->requests.reserve(ops.size());
  for (const P2POp& op : ops) {
    if (op.kind == P2POp::Kind::kSend) {
      const Wire w = stage(*pending, *staging_, op.tensor, false, true, false, "send");
      check_mpi(MPI_Isend(w.ptr, w.count, w.type, op.peer, kP2PTag, comm_, pending->new_request()),
                "MPI_Isend", name());
    } else {
      const Wire w = stage(*pending, *staging_, op.tensor, false, false, true, "recv");
      check_mpi(MPI_Irecv(w.ptr, w.count, w.type, op.peer, kP2PTag, comm_, pending->new_request()),
                "MPI_Irecv", name());
    }
  }
  return pending;
}

void MpiCommunicator::do_barrier() {
  MpiPending pending(name(), comm_, "barrier");
  check_mpi(MPI_Ibarrier(comm_, pending.new_request()), "MPI_Ibarrier", name());
  pending.wait();
}

// ---- the grid's communicators ----------------------------------------------------------

void check_grid_matches(const ProcessGrid& grid, MPI_Comm world) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(world, &world_size);
  MPI_Comm_rank(world, &world_rank);
  ENGINE_CHECK(world_size == grid.world_size() && world_rank == grid.world_rank(),
               "the process grid was built for rank ", grid.world_rank(), " of ", grid.world_size(),
               " but MPI says this is rank ", world_rank, " of ", world_size);
}

GridComms make_mpi_comms(const ProcessGrid& grid, MPI_Comm world) {
  check_grid_matches(grid, world);
  GridComms comms;
  // Every rank splits along the three axes in the same order (collective).
  // Key = my coordinate on the axis, so group rank == axis coordinate.
  comms.tp = MpiCommunicator::split(world, grid.group_color(Axis::kTp), grid.tp_rank(), "tp");
  comms.dp = MpiCommunicator::split(world, grid.group_color(Axis::kDp), grid.dp_rank(), "dp");
  comms.pp = MpiCommunicator::split(world, grid.group_color(Axis::kPp), grid.pp_rank(), "pp");
  for (Axis a : {Axis::kTp, Axis::kDp, Axis::kPp})
    ENGINE_CHECK(comms.axis(a).size() == grid.size(a) && comms.axis(a).rank() == grid.rank(a),
                 "MPI_Comm_split gave the ", axis_name(a), " group size ", comms.axis(a).size(),
                 " rank ", comms.axis(a).rank(), ", expected size ", grid.size(a), " rank ", grid.rank(a));
  return comms;
}

}  // namespace parallel
