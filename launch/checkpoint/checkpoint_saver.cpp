#include "launch/checkpoint/checkpoint_saver.h"

#include <chrono>

#include "engine/device.h"

namespace launch {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

// A save between start() and finish(). The future is declared last so it
// is destroyed first: its destructor waits for the thread, which reads
// `extra` and the saver's buffers, before anything it reads goes away.
struct CheckpointSaver::Pending {
  TrainingState state;
  std::optional<RankExtra> extra;
  double blocking_seconds = 0;
  double write_seconds = 0;
  std::future<RankFiles> written;
};

CheckpointSaver::HostBuffer::~HostBuffer() { engine::host_staging_free(data, device); }

CheckpointSaver::CheckpointSaver(Options options, const model::GptConfig& config, const model::ParamRegistry& registry,
                                 parallel::Communicator& world, engine::DeviceType device)
    : options_(std::move(options)), config_(config), registry_(registry), world_(world), device_(device) {}

CheckpointSaver::~CheckpointSaver() = default;

HostState CheckpointSaver::snapshot_buffers() {
  ENGINE_CHECK(!in_flight(), "a checkpoint's buffers are still being written");
  if (master_.data == nullptr) {
    // Allocated on first use and kept: the pages are touched (and, on CUDA,
    // pinned) once, not at every save.
    const std::size_t bytes = static_cast<std::size_t>(registry_.total_numel()) * sizeof(float);
    for (HostBuffer* b : {&master_, &adam_m_, &adam_v_}) {
      b->device = device_;
      b->data = static_cast<float*>(engine::host_staging_malloc(bytes, device_));
    }
  }
  return {master_.data, adam_m_.data, adam_v_.data};
}

void CheckpointSaver::start(const TrainingState& state, const ShardRole& role, std::optional<RankExtra> extra,
                            double copy_seconds) {
  ENGINE_CHECK(!in_flight(), "a checkpoint save started while another is in flight");
  const auto t0 = Clock::now();
  const std::string temp_dir = begin_checkpoint(options_.checkpoint_dir, state.step, world_);
  auto pending = std::make_unique<Pending>();
  pending->state = state;
  pending->extra = std::move(extra);
  const HostState host{master_.data, adam_m_.data, adam_v_.data};
  Pending* p = pending.get();
  auto write = [this, temp_dir, host, role, p] {
    const auto w0 = Clock::now();
    RankFiles files = write_rank_files(temp_dir, config_, registry_, host, role, p->extra ? &*p->extra : nullptr);
    p->write_seconds = seconds_since(w0);
    return files;
  };
  if (options_.async) {
    pending->written = std::async(std::launch::async, write);
  } else {
    std::promise<RankFiles> done;
    done.set_value(write());
    pending->written = done.get_future();
  }
  pending->blocking_seconds = copy_seconds + seconds_since(t0);
  pending_ = std::move(pending);
}

bool CheckpointSaver::written() const {
  return !pending_ || pending_->written.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

CheckpointSaver::Committed CheckpointSaver::finish() {
  ENGINE_CHECK(in_flight(), "no checkpoint save to finish");
  const auto t0 = Clock::now();
  std::unique_ptr<Pending> pending = std::move(pending_);
  const RankFiles mine = pending->written.get();
  Committed out;
  out.step = pending->state.step;
  out.dir = commit_checkpoint(options_.checkpoint_dir, pending->state, mine, options_.keep, world_);
  out.write_seconds = pending->write_seconds;
  out.blocking_seconds = pending->blocking_seconds + seconds_since(t0);
  return out;
}

}  // namespace launch
