// Trainer: saving and resuming the training state (launch/checkpoint.h has the format).
#include "launch/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <sstream>
#include <string>

#include "engine/ops.h"
#include "launch/checkpoint.h"
#include "launch/fault_injection.h"
#include "launch/job_error.h"
#include "parallel/watchdog.h"

namespace launch {

nlohmann::json Trainer::run_identity() const {
  // What must not change across a resume for the continuation to be exact.
  return {{"model", config_.model.describe()},
          {"seq_len", config_.seq_len},
          {"batch_tokens", config_.batch_tokens},
          {"seed", config_.seed},
          {"shuffle", config_.shuffle},
          {"train_data", train_data_->fingerprint()}};
}

// ---- checkpoints --------------------------------------------------------------------

void Trainer::resume() {
  parallel::WatchdogPhase phase("resume", parallel::kWatchdogFileIoScale);
  // Rank 0 decides which checkpoint (ranks may see `latest` at different
  // moments on a network file system); every rank loads its part; all agree
  // on the outcome before anyone goes on, so a failure on one rank stops all.
  std::string dir, error;
  if (grid_.world_rank() == 0) {
    try {
      dir = resolve_checkpoint(config_.resume, config_.checkpoint_dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Failures every rank agrees on are job-wide errors: printed once.
  error = first_error(*host_world_, error);
  if (!error.empty()) throw JobError(kExitFailed, error);
  dir = broadcast_string(*host_world_, dir);
  if (dir.empty()) {  // --resume auto with nothing saved yet
    if (is_logger()) {
      out_ << "resume     auto: no checkpoint in " << config_.checkpoint_dir << " yet, starting fresh\n";
      // Steps an earlier attempt logged before it failed will be taken again.
      metrics_.restart_at(0, {{"event", "resume"}, {"step", 0}, {"from", nullptr}, {"attempt", restart_count()}});
    }
    return;
  }
  const std::size_t n = static_cast<std::size_t>(registry_.total_numel());
  std::vector<float> master(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  TrainingState state;
  try {
    state = load_checkpoint(dir, run_identity(), registry_, {master.data(), m.data(), v.data()});
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = first_error(*host_world_, error);
  if (!error.empty()) throw JobError(kExitFailed, error);
  // A checkpoint past --steps belongs to a longer run; one at --steps is a
  // finished run (a restart after the last save): only the outputs remain.
  if (state.step > config_.steps)
    throw JobError(kExitUsage, "checkpoint '" + dir + "' is at step " + std::to_string(state.step) +
                                   ", past --steps " + std::to_string(config_.steps));
  store_->upload_master(master.data());
  data_parallel_->upload_state(optimizer_->m(), m.data());
  data_parallel_->upload_state(optimizer_->v(), v.data());
  optimizer_->set_steps_taken(state.optimizer_steps >= 0 ? state.optimizer_steps : state.step);
  const std::string restored = optimizer_checkpoint_->resume(dir, state);
  if (is_logger() && !restored.empty()) out_ << restored << "\n";
  if (!state.sampler_rng.empty()) {
    std::istringstream in(state.sampler_rng);
    in >> sampler_rng_;
  }
  start_step_ = state.step;
  last_saved_step_ = state.step;
  if (is_logger()) {
    out_ << "resumed    from " << dir << " at step " << state.step << "\n";
    metrics_.restart_at(state.step,
                        {{"event", "resume"}, {"step", state.step}, {"from", dir}, {"attempt", restart_count()}});
  }
}

std::string Trainer::save(std::int64_t steps_done) {
  parallel::WatchdogPhase phase("checkpoint", parallel::kWatchdogFileIoScale);
  const auto start = std::chrono::steady_clock::now();
  // Checkpoints hold whole tensors: the strategy gathers whatever is sharded
  // (collective over dp), and dp rank 0 of each (tp, pp) position writes.
  const std::size_t n = static_cast<std::size_t>(registry_.total_numel());
  std::vector<float> master(n), m(n), v(n);
  data_parallel_->download_master(master.data());
  data_parallel_->download_state(optimizer_->m(), m.data());
  data_parallel_->download_state(optimizer_->v(), v.data());
  // A checkpoint holding a NaN or infinity would be trusted by every resume:
  // never write one (DESIGN.md, "Failures are expected").
  bool finite = true;
  for (const std::vector<float>* values : {&master, &m, &v})
    finite = finite && std::all_of(values->begin(), values->end(), [](float x) { return std::isfinite(x); });
  if (!all_ranks_ok(*host_world_, finite))
    throw JobError(kExitFailed, "refusing to write the checkpoint of step " + std::to_string(steps_done) +
                                    ": the weights or optimizer state hold non-finite values (the previous "
                                    "checkpoint is kept)");
  TrainingState state;
  state.step = steps_done;
  state.optimizer_steps = optimizer_->steps_taken();
  state.run = run_identity();
  state.layout = {{"tp", grid_.tp_size()}, {"pp", grid_.pp_size()}, {"dp", grid_.dp_size()}};
  state.optimizer = optimizer_checkpoint_->describe(steps_done);
  std::ostringstream rng;
  rng << sampler_rng_;
  state.sampler_rng = rng.str();
  const ShardRole role{grid_.world_rank(), grid_.dp_rank() == 0,
                       grid_.world_rank() == 0 && grid_.tp_size() == 1 && grid_.pp_size() == 1,
                       faults_.save_fails(steps_done)};
  // Rank-own optimizer state (1-bit Adam's error buffers): every rank saves its own.
  const std::optional<RankExtra> extra = optimizer_checkpoint_->rank_extra(steps_done);
  const std::string dir = save_checkpoint(config_.checkpoint_dir, state, config_.model, registry_,
                                          {master.data(), m.data(), v.data()}, role, *host_world_,
                                          extra ? &*extra : nullptr);
  if (is_logger()) {
    // What a save costs: the δ of Young/Daly's checkpoint interval (examples/benchmarks/goodput.py).
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out_ << "checkpoint " << dir << "\n";
    metrics_.record_event({{"event", "checkpoint"}, {"step", steps_done}, {"seconds", seconds}});
  }
  last_saved_step_ = steps_done;
  failed_saves_in_a_row_ = 0;
  return dir;
}

void Trainer::save_or_warn(std::int64_t steps_done) {
  try {
    save(steps_done);
  } catch (const CheckpointError& e) {
    // Every rank is here with the same message; any other error is one
    // rank's and ends the job.
    ++failed_saves_in_a_row_;
    if (failed_saves_in_a_row_ >= config_.max_failed_saves)
      throw JobError(kExitFailed, std::string(e.what()) + "; " + std::to_string(failed_saves_in_a_row_) +
                                      " saves failed in a row (--max-failed-saves), stopping");
    if (is_logger())
      std::cerr << "warning: " << e.what() << "; training goes on (" << failed_saves_in_a_row_ << " of "
                << config_.max_failed_saves << " failed saves in a row allowed by --max-failed-saves)" << std::endl;
  }
}

std::string Trainer::save_or_stop(std::int64_t steps_done) {
  try {
    return save(steps_done);
  } catch (const CheckpointError& e) {
    throw JobError(kExitFailed, e.what());
  }
}

}  // namespace launch
