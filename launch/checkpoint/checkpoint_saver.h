// Saving checkpoints without stopping training for the write.
//
// A save has a fast part and a slow part. The step loop does the fast part
// only: it copies the state into host memory that this saver owns
// (page-locked on CUDA, so the copy runs at full bus speed), and the ranks
// agree to begin. A background thread does the slow part, writing and
// checksumming this rank's files, while training goes on. The commit (all
// ranks agree every file is written, state.json, the rename, `latest`) is
// collective, so it runs on the step loop's thread: between two steps once
// every rank's write is done (Trainer::agree_between_steps), or before the
// next save starts (the next save waits for the previous write), or at once
// when the run needs the checkpoint (a stop, the last step). A crash before
// the commit leaves the previous checkpoint in force.
//
// This is the snapshot-then-persist split of CheckFreq (Mohan et al.,
// FAST 2021) and DLRover's flash checkpoint, which cut a 1.5B Megatron
// model's blocking save from 151 s to 0.5 s. With async off the saver writes
// and commits in start() and finish(), in the caller's thread.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "engine/tensor.h"
#include "launch/checkpoint/checkpoint.h"

namespace launch {

class CheckpointSaver {
 public:
  struct Options {
    std::string checkpoint_dir;
    int keep = 0;        // --keep-checkpoints (0: all)
    bool async = true;   // --async-checkpoint
  };
  // `device`: where the training state lives (kCuda: the snapshot buffers
  // are page-locked).
  CheckpointSaver(Options options, const model::GptConfig& config, const model::ParamRegistry& registry,
                  parallel::Communicator& world, engine::DeviceType device);
  // Waits for a write in flight (it is never committed: its checkpoint does
  // not exist as far as any resume is concerned).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  bool async() const { return options_.async; }
  // Host buffers to copy the state into before start(), laid out by the
  // registry; allocated on first use, so ranks that write no shard never
  // hold them. Only while no save is in flight.
  HostState snapshot_buffers();
  // Collective. Begins the checkpoint of `state` (which the snapshot buffers
  // hold) and writes this rank's part: on a background thread when async,
  // else here. `copy_seconds`: how long the caller took to fill the buffers,
  // counted in the blocking time. Throws CheckpointError when the ranks
  // cannot begin (nothing is in flight then).
  void start(const TrainingState& state, const ShardRole& role, std::optional<RankExtra> extra, double copy_seconds);
  bool in_flight() const { return pending_ != nullptr; }
  // Local: false while this rank's write is still running.
  bool written() const;

  struct Committed {
    std::string dir;
    std::int64_t step = 0;
    double blocking_seconds = 0;  // the step loop's time in this save (copy, begin, any wait, commit)
    double write_seconds = 0;     // the write itself (on the background thread when async)
  };
  // Collective, with a save in flight: waits for this rank's write, then
  // commits. Throws CheckpointError (NonFiniteStateError) as
  // commit_checkpoint does; either way nothing is in flight afterwards.
  Committed finish();

 private:
  struct Pending;
  struct HostBuffer {
    float* data = nullptr;
    engine::DeviceType device = engine::DeviceType::kCpu;
    ~HostBuffer();
  };

  Options options_;
  const model::GptConfig& config_;
  const model::ParamRegistry& registry_;
  parallel::Communicator& world_;
  engine::DeviceType device_;
  HostBuffer master_, adam_m_, adam_v_;
  std::unique_ptr<Pending> pending_;
};

}  // namespace launch
