#include "parallel/nccl_host_double.h"

#include <algorithm>
#include <functional>
#include <cstdlib>
#include <string>
#include <utility>

#include "engine/check.h"
#include "engine/cuda/host_signal.h"
#include "parallel/staging_ring.h"

namespace parallel {

namespace {

void check_cuda(cudaError_t rc, const char* call, const std::string& name) {
  if (rc == cudaSuccess) [[likely]]
    return;
  ENGINE_FAIL(call, " for the ", name, " communicator's NCCL test double failed: ", cudaGetErrorString(rc));
}

std::int64_t env_int(const char* name, std::int64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  ENGINE_CHECK(end != text && *end == '\0' && value >= 0, name, " must be a whole number >= 0, got '", text, "'");
  return value;
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

constexpr std::size_t kAlign = 256;
std::size_t aligned_bytes(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// A host function on `stream`: `task` runs on CUDA's host-callback thread once
// the stream reaches this point (it must not call into CUDA).
void enqueue_host_task(cudaStream_t stream, std::function<void()> task, const std::string& name) {
  auto* owned = new std::function<void()>(std::move(task));
  const cudaError_t rc = cudaLaunchHostFunc(
      stream,
      [](void* p) {
        auto* f = static_cast<std::function<void()>*>(p);
        (*f)();
        delete f;
      },
      owned);
  if (rc != cudaSuccess) delete owned;
  check_cuda(rc, "cudaLaunchHostFunc", name);
}

}  // namespace

NcclDoubleOptions NcclDoubleOptions::from_environment() {
  NcclDoubleOptions o;
  o.max_delay_us = env_int("ENGINE_NCCL_DOUBLE_DELAY_US", o.max_delay_us);
  o.seed = static_cast<std::uint64_t>(env_int("ENGINE_NCCL_DOUBLE_SEED", static_cast<std::int64_t>(o.seed)));
  o.staging_mb = env_int("ENGINE_NCCL_DOUBLE_STAGING_MB", o.staging_mb);
  ENGINE_CHECK(o.staging_mb >= 1, "ENGINE_NCCL_DOUBLE_STAGING_MB must be at least 1, got ", o.staging_mb);
  return o;
}

// The worker, the mapped counter it writes and the staging ring (one pinned
// block, parallel/staging_ring.h).
struct NcclHostDouble::State {
  std::uint64_t* counter = nullptr;  // mapped: the worker writes it, the stream waits on it
  std::unique_ptr<HostCollectiveWorker> worker;
  char* staging = nullptr;
  std::unique_ptr<StagingRing> ring;

  ~State() {
    worker.reset();  // joins the thread before the counter it writes is freed
    if (staging) cudaFreeHost(staging);
    if (counter) cudaFreeHost(counter);
  }
};

NcclHostDouble::NcclHostDouble(MPI_Comm group, std::string name, const NcclDoubleOptions& options)
    : name_(std::move(name)),
      state_(std::make_unique<State>()),
      random_(options.seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(world_rank())),
      max_delay_us_(options.max_delay_us) {
  void* counter = nullptr;
  check_cuda(cudaHostAlloc(&counter, kAlign, cudaHostAllocMapped), "cudaHostAlloc(mapped counter)", name_);
  state_->counter = static_cast<std::uint64_t*>(counter);  // the worker starts it at 0
  void* staging = nullptr;
  const std::size_t capacity = aligned_bytes(static_cast<std::size_t>(options.staging_mb) << 20);
  check_cuda(cudaHostAlloc(&staging, capacity, cudaHostAllocDefault), "cudaHostAlloc(staging)", name_);
  state_->staging = static_cast<char*>(staging);
  state_->ring = std::make_unique<StagingRing>(
      capacity, "the " + name_ + " communicator's NCCL test double staging (raise ENGINE_NCCL_DOUBLE_STAGING_MB)");
  // One stream of delays per rank and group, so the groups' workers do not sleep in step.
  random_.seed(random_() ^ std::hash<std::string>{}(name_));
  const WorkerDelays delays{options.max_delay_us, random_()};
  state_->worker = std::make_unique<HostCollectiveWorker>(group, name_, state_->counter, delays);
}

NcclHostDouble::~NcclHostDouble() {
  // After an abort the stream may still hold host functions that name the
  // worker and the staging ring: leave them allocated (the process is failing).
  if (aborted_) (void)state_.release();
}

std::int64_t NcclHostDouble::random_delay_ns() {
  if (max_delay_us_ <= 0) return 0;
  return std::uniform_int_distribution<std::int64_t>(0, max_delay_us_ * 1000)(random_);
}

void NcclHostDouble::delay(cudaStream_t stream) { engine::cuda::delay_stream(random_delay_ns(), stream); }

std::optional<std::string> NcclHostDouble::async_error() const { return state_->worker->error(); }

void NcclHostDouble::abort() {
  aborted_ = true;
  state_->worker->cancel();
}

void NcclHostDouble::run(const std::vector<Staged>& tensors, HostWork work, cudaStream_t stream) {
  // As NCCL after an error or an abort: nothing more is moved.
  if (const auto error = state_->worker->error()) ENGINE_FAIL("the ", name_, " communicator failed earlier: ", *error);
  ENGINE_CHECK(!aborted_, "the ", name_, " communicator was aborted; it moves nothing more");
  std::size_t total = 0;
  for (const Staged& s : tensors) total += aligned_bytes(s.device.bytes());
  const StagingRing::Range range = state_->ring->take(std::max<std::size_t>(total, kAlign));
  char* staging = state_->staging + range.offset;
  std::vector<Tensor> host;
  std::size_t offset = 0;
  for (const Staged& s : tensors) {
    host.emplace_back(staging + offset, s.device.shape(), s.device.dtype(), engine::DeviceType::kCpu);
    offset += aligned_bytes(s.device.bytes());
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].copy_in && tensors[i].device.bytes() > 0)
      check_cuda(cudaMemcpyAsync(host[i].data(), tensors[i].device.data(), tensors[i].device.bytes(),
                                 cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync(staging in)", name_);
  HostCollectiveWorker* worker = state_->worker.get();
  const std::uint64_t job = worker->submit([work = std::move(work), host](Communicator& c) { work(c, host); });
  enqueue_host_task(stream, [worker, job] { worker->mark_ready(job); }, name_);
  engine::cuda::wait_for_host_counter(state_->counter, job, stream);
  // Late results: a reader that did not wait for `done` reads stale bytes.
  engine::cuda::delay_stream(random_delay_ns(), stream);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].copy_out && tensors[i].device.bytes() > 0)
      check_cuda(cudaMemcpyAsync(tensors[i].device.data(), host[i].data(), tensors[i].device.bytes(),
                                 cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync(staging out)", name_);
  enqueue_host_task(stream, [ring = state_->ring.get(), consumed = range.consumed] { ring->give_back(consumed); },
                    name_);
}

void NcclHostDouble::all_reduce(const Tensor& inout, ReduceOp op, cudaStream_t stream) {
  run({{inout, true, true}}, [op](Communicator& c, const std::vector<Tensor>& h) { c.all_reduce(h[0], op); },
      stream);
}

void NcclHostDouble::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, cudaStream_t stream) {
  // Staged apart even when `out` is this rank's slice of `in`: `in` is read
  // whole before the job, `out` written after it.
  run({{in, true, false}, {out, false, true}},
      [op](Communicator& c, const std::vector<Tensor>& h) { c.reduce_scatter(h[0], h[1], op); }, stream);
}

void NcclHostDouble::all_gather(const Tensor& in, const Tensor& out, cudaStream_t stream) {
  run({{in, true, false}, {out, false, true}},
      [](Communicator& c, const std::vector<Tensor>& h) { c.all_gather(h[0], h[1]); }, stream);
}

void NcclHostDouble::broadcast(const Tensor& t, int root, cudaStream_t stream) {
  run({{t, true, true}}, [root](Communicator& c, const std::vector<Tensor>& h) { c.broadcast(h[0], root); },
      stream);
}

void NcclHostDouble::all_to_all(const Tensor& in, const Tensor& out, cudaStream_t stream) {
  run({{in, true, false}, {out, false, true}},
      [](Communicator& c, const std::vector<Tensor>& h) { c.all_to_all(h[0], h[1]); }, stream);
}

void NcclHostDouble::p2p(std::span<const P2POp> ops, cudaStream_t stream) {
  std::vector<Staged> tensors;
  std::vector<P2POp::Kind> kinds;
  std::vector<int> peers;
  for (const P2POp& op : ops) {
    const bool send = op.kind == P2POp::Kind::kSend;
    tensors.push_back({op.tensor, send, !send});
    kinds.push_back(op.kind);
    peers.push_back(op.peer);
  }
  run(tensors,
      [kinds, peers](Communicator& c, const std::vector<Tensor>& h) {
        std::vector<P2POp> host_ops;
        for (std::size_t i = 0; i < h.size(); ++i) host_ops.push_back({kinds[i], h[i], peers[i]});
        c.batch_p2p(host_ops);
      },
      stream);
}

}  // namespace parallel
