// Trainer: saving and resuming the training state (launch/checkpoint/checkpoint.h has
// the format, launch/checkpoint/checkpoint_saver.h the asynchronous saves), and
// stopping early (a stop signal, bad data) with the progress saved.
#include "launch/run/trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "engine/device.h"
#include "launch/checkpoint/checkpoint.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/checkpoint/checkpoint_saver.h"
#include "launch/formats/llmc_model.h"
#include "launch/resilience/command_line.h"
#include "launch/resilience/fault_injection.h"
#include "launch/resilience/job_error.h"
#include "launch/resilience/rank_agreement.h"
#include "launch/resilience/stop_request.h"
#include "optim/lr_schedule.h"
#include "parallel/watchdog.h"

namespace launch {

nlohmann::json Trainer::run_identity() const {
  // What must not change across a resume for the continuation to be exact.
  // Scoring a checkpoint (--eval-only) only needs the same model.
  if (config_.eval_only) return {{"model", config_.model.describe()}};
  return {{"model", config_.model.describe()},
          {"seq_len", config_.seq_len},
          {"batch_tokens", config_.batch_tokens},
          {"seed", config_.seed},
          {"shuffle", config_.shuffle},
          {"train_data", train_data_->fingerprint()}};
}

// ---- resuming -------------------------------------------------------------------------

namespace {
std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// The learning-rate schedule a checkpoint records: what the learning rate of
// every later step follows from. A resume under another --steps would
// otherwise reshape the cosine silently (issue 36, item 5).
nlohmann::json schedule_record(const optim::LrSchedule& s) {
  return {{"kind", s.kind == optim::LrSchedule::Kind::kConstant ? "constant" : "cosine"},
          {"max_lr", s.max_lr},
          {"min_lr", s.min_lr},
          {"warmup_steps", s.warmup_steps},
          {"total_steps", s.total_steps}};
}

// The recorded schedule read back; a field of the wrong type is bad input.
optim::LrSchedule schedule_from_record(const nlohmann::json& r, const std::string& dir) {
  const auto bad = [&] {
    return JobError(kExitBadInput, "checkpoint '" + dir + "': its \"lr_schedule\" is " + r.dump().substr(0, 200) +
                                       ", expected {kind, max_lr, min_lr, warmup_steps, total_steps}");
  };
  if (!r.is_object()) throw bad();
  optim::LrSchedule s;
  try {
    const std::string kind = r.at("kind").get<std::string>();
    if (kind != "cosine" && kind != "constant") throw bad();
    s.kind = optim::parse_lr_kind(kind);
    if (!r.at("max_lr").is_number() || !r.at("min_lr").is_number() || !r.at("warmup_steps").is_number_integer() ||
        !r.at("total_steps").is_number_integer())
      throw bad();
    s.max_lr = r.at("max_lr").get<double>();
    s.min_lr = r.at("min_lr").get<double>();
    s.warmup_steps = r.at("warmup_steps").get<std::int64_t>();
    s.total_steps = r.at("total_steps").get<std::int64_t>();
  } catch (const nlohmann::json::exception&) {
    throw bad();
  }
  return s;
}

// Where two schedules give different learning rates, as "--flag theirs vs
// ours" items; empty when they agree at every step. A constant schedule does
// not depend on --steps or the floor.
std::string schedule_differences(const optim::LrSchedule& saved, const optim::LrSchedule& now) {
  std::ostringstream out;
  const auto item = [&](const char* flag, const auto& a, const auto& b) {
    if (a == b) return;
    out << (out.tellp() > 0 ? ", " : "") << flag << " " << a << " (checkpoint) vs " << b << " (this run)";
  };
  const auto kind = [](const optim::LrSchedule& s) { return s.kind == optim::LrSchedule::Kind::kConstant ? "constant" : "cosine"; };
  item("--lr-schedule", std::string(kind(saved)), std::string(kind(now)));
  item("--lr", saved.max_lr, now.max_lr);
  item("--warmup-steps", saved.warmup_steps, now.warmup_steps);
  if (saved.kind == optim::LrSchedule::Kind::kCosine && now.kind == optim::LrSchedule::Kind::kCosine) {
    item("--steps", saved.total_steps, now.total_steps);
    item("minimum lr", saved.min_lr, now.min_lr);
  }
  return out.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}
}  // namespace

void Trainer::resume() {
  parallel::WatchdogPhase phase("resume", parallel::kWatchdogFileIoScale);
  // Rank 0 decides where to look (ranks may see the directory at different
  // moments on a network file system); every rank loads its part of each
  // candidate in turn; all agree on the outcome before anyone goes on.
  std::vector<std::string> candidates, notes;
  std::string error;
  if (grid_.world_rank() == 0) {
    try {
      candidates = resume_candidates(config_.resume, config_.checkpoint_dir, notes);
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (const std::string& note : notes) std::cerr << "warning: " << note << std::endl;
  }
  // Failures every rank agrees on are job-wide errors: printed once.
  // Nothing to resume from is bad input (train_main.cpp refuses it before
  // anything is written; here it can only be a folder emptied since).
  error = first_error(*host_world_, error);
  if (!error.empty()) throw JobError(kExitBadInput, error);
  candidates = split_lines(broadcast_string(*host_world_, join_lines(candidates)));
  if (candidates.empty()) {  // --resume auto with nothing saved yet
    if (is_logger()) {
      out_ << "resume     auto: no checkpoint in " << config_.checkpoint_dir << " yet, starting fresh\n";
      // Steps an earlier attempt logged before it failed will be taken again.
      if (!config_.eval_only) metrics_.restart_at(0, {{"event", "resume"}, {"step", 0}, {"from", nullptr}, {"attempt", restart_count()}});
    }
    return;
  }
  const bool named = config_.resume != "latest" && config_.resume != "auto";
  std::vector<std::string> damage_reports;
  for (const std::string& dir : candidates) {
    std::string damage, hard;
    std::string restored;
    std::optional<TrainingState> state;
    try {
      state = load_into_store(dir, restored);
    } catch (const DamagedCheckpoint& e) {
      damage = e.what();
    } catch (const std::exception& e) {
      hard = e.what();
    }
    // Another run's checkpoint, a model of another shape, a layout 1-bit Adam
    // cannot take: an older checkpoint would not do better, nor would a
    // restart with the same flags. Stop, as for bad input (no source
    // location: the fault is in what was given, not in the engine).
    hard = first_error(*host_world_, hard);
    if (!hard.empty()) throw JobError(kExitBadInput, without_source_location(hard));
    damage = first_error(*host_world_, damage);
    if (damage.empty()) {
      finish_resume(dir, *state, restored, damage_reports);
      return;
    }
    if (named) throw JobError(kExitFailed, damage + " (--resume names it, so no other checkpoint is tried)");
    damage_reports.push_back(damage);
    if (is_logger() && config_.eval_only) {
      std::cerr << "warning: " << damage << "; not loaded; falling back to an older checkpoint" << std::endl;
    } else if (is_logger()) {
      // Set aside, not deleted: kept for inspection, never tried again, and
      // not counted by --keep-checkpoints.
      const std::string aside = dir + ".damaged";
      std::error_code ec;
      std::filesystem::remove_all(aside, ec);
      std::filesystem::rename(dir, aside, ec);
      std::cerr << "warning: " << damage << "; not loaded" << (ec ? "" : ", set aside as " + aside)
                << "; falling back to an older checkpoint" << std::endl;
      metrics_.record_event({{"event", "damaged_checkpoint"}, {"dir", dir}, {"error", damage}});
    }
  }
  std::string reasons;
  for (const std::string& r : damage_reports) reasons += "\n  " + r;
  throw JobError(kExitFailed, "no intact checkpoint to resume from in '" + config_.checkpoint_dir + "':" + reasons);
}

TrainingState Trainer::load_into_store(const std::string& dir, std::string& restored) {
  const std::size_t n = static_cast<std::size_t>(registry_.total_numel());
  std::vector<float> master(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  const TrainingState state = load_checkpoint(dir, run_identity(), registry_, {master.data(), m.data(), v.data()});
  restored = optimizer_checkpoint_->resume(dir, state);
  store_->upload_master(master.data());
  data_parallel_->upload_state(optimizer_->m(), m.data());
  data_parallel_->upload_state(optimizer_->v(), v.data());
  optimizer_->set_steps_taken(state.optimizer_steps >= 0 ? state.optimizer_steps : state.step);
  return state;
}

void Trainer::finish_resume(const std::string& dir, const TrainingState& state, const std::string& restored,
                            const std::vector<std::string>& damage_reports) {
  // A checkpoint past --steps belongs to a longer run; one at --steps is a
  // finished run (a restart after the last save): only the outputs remain.
  if (state.step > config_.steps && !config_.eval_only)
    throw JobError(kExitUsage, "checkpoint '" + dir + "' is at step " + std::to_string(state.step) +
                                   ", past --steps " + std::to_string(config_.steps));
  bool schedule_reset = false;
  if (!config_.eval_only) {
    if (state.lr_schedule.is_null()) {
      if (is_logger())
        std::cerr << "warning: checkpoint '" << dir << "' does not record its learning-rate schedule (written before "
                  << "schedules were recorded): this run's (" << config_.lr_schedule.describe()
                  << ") is followed from step " << state.step << std::endl;
    } else {
      const optim::LrSchedule saved = schedule_from_record(state.lr_schedule, dir);
      const std::string differences = schedule_differences(saved, config_.lr_schedule);
      if (!differences.empty() && !config_.reset_schedule)
        throw JobError(kExitUsage, "checkpoint '" + dir + "' follows another learning-rate schedule: " + differences +
                                       "; resume with the checkpoint's values, or give --reset-schedule to follow "
                                       "this run's from step " + std::to_string(state.step));
      schedule_reset = !differences.empty();
      if (schedule_reset && is_logger())
        out_ << "schedule   --reset-schedule: from step " << state.step << " the learning rate follows this run's "
             << config_.lr_schedule.describe() << " instead of the checkpoint's " << saved.describe() << "\n";
    }
  }
  if (!state.sampler_rng.empty()) {
    std::istringstream in(state.sampler_rng);
    in >> sampler_rng_;
  }
  start_step_ = state.step;
  last_saved_step_ = state.step;
  if (!is_logger()) return;
  if (!restored.empty()) out_ << restored << "\n";
  out_ << "resumed    from " << dir << " at step " << state.step;
  if (state.layout.is_object()) out_ << " (written under " << state.layout.dump() << ")";
  if (!damage_reports.empty()) out_ << ", after " << damage_reports.size() << " damaged newer checkpoint(s)";
  out_ << "\n";
  if (config_.eval_only) return;  // scoring a checkpoint leaves the run's metrics alone
  metrics_.restart_at(state.step, {{"event", "resume"},
                                   {"step", state.step},
                                   {"from", dir},
                                   {"attempt", restart_count()},
                                   {"damaged_skipped", damage_reports.size()},
                                   {"schedule_reset", schedule_reset}});
}

// ---- saving -----------------------------------------------------------------------------

void Trainer::start_save(std::int64_t steps_done) {
  parallel::WatchdogPhase phase("checkpoint", parallel::kWatchdogFileIoScale);
  const auto t0 = std::chrono::steady_clock::now();
  // Checkpoints hold whole tensors: the strategy gathers whatever is sharded
  // (collective over dp), and dp rank 0 of each (tp, pp) position keeps it.
  // The other replicas take part in the gather but keep no host copy.
  const bool writes_shard = grid_.dp_rank() == 0;
  const HostState host = writes_shard ? saver_->snapshot_buffers() : HostState{nullptr, nullptr, nullptr};
  data_parallel_->download_master(host.master);
  data_parallel_->download_state(optimizer_->m(), host.adam_m);
  data_parallel_->download_state(optimizer_->v(), host.adam_v);
  engine::device_synchronize();
  TrainingState state;
  state.step = steps_done;
  state.optimizer_steps = optimizer_->steps_taken();
  state.run = run_identity();
  state.layout = {{"tp", grid_.tp_size()},
                  {"pp", grid_.pp_size()},
                  {"dp", grid_.dp_size()},
                  {"zero", config_.zero},
                  {"sequence_parallel", config_.sequence_parallel}};
  state.optimizer = optimizer_checkpoint_->describe(steps_done);
  state.lr_schedule = schedule_record(config_.lr_schedule);
  std::ostringstream rng;
  rng << sampler_rng_;
  state.sampler_rng = rng.str();
  const ShardRole role{grid_.world_rank(), writes_shard,
                       grid_.world_rank() == 0 && grid_.tp_size() == 1 && grid_.pp_size() == 1 &&
                           llmc_format_refusal(config_.model).empty(),  // llm.c's model.bin: a tied GPT-2 only
                       faults_.save_fails(steps_done)};
  // Rank-own optimizer state (1-bit Adam's error buffers): every rank saves its own.
  saver_->start(state, role, optimizer_checkpoint_->rank_extra(steps_done),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

std::string Trainer::finish_save() {
  parallel::WatchdogPhase phase("checkpoint", parallel::kWatchdogFileIoScale);
  const CheckpointSaver::Committed c = saver_->finish();
  if (is_logger()) {
    // What a save costs the step loop: the δ of Young/Daly's checkpoint
    // interval (examples/benchmarks/goodput.py); the write itself overlaps
    // training when asynchronous.
    char timing[96];
    std::snprintf(timing, sizeof timing, " (blocked %.3f s, wrote in %.3f s%s)", c.blocking_seconds, c.write_seconds,
                  saver_->async() ? " in the background" : "");
    out_ << "checkpoint " << c.dir << timing << "\n";
    metrics_.record_event({{"event", "checkpoint"},
                           {"step", c.step},
                           {"seconds", c.blocking_seconds},
                           {"write_seconds", c.write_seconds},
                           {"async", saver_->async()}});
  }
  last_saved_step_ = c.step;
  failed_saves_in_a_row_ = 0;
  return c.dir;
}

void Trainer::survive_failed_save(const CheckpointError& e) {
  // Every rank is here with the same message; any other error is one rank's
  // and ends the job. A state with a NaN in it is not a full disk: stop.
  if (dynamic_cast<const NonFiniteStateError*>(&e)) throw JobError(kExitFailed, e.what());
  ++failed_saves_in_a_row_;
  if (failed_saves_in_a_row_ >= config_.max_failed_saves)
    throw JobError(kExitFailed, std::string(e.what()) + "; " + std::to_string(failed_saves_in_a_row_) +
                                    " saves failed in a row (--max-failed-saves), stopping");
  if (is_logger())
    std::cerr << "warning: " << e.what() << "; training goes on (" << failed_saves_in_a_row_ << " of "
              << config_.max_failed_saves << " failed saves in a row allowed by --max-failed-saves)" << std::endl;
}

void Trainer::finish_save_in_flight() {
  if (!saver_ || !saver_->in_flight()) return;
  try {
    finish_save();
  } catch (const CheckpointError& e) {
    survive_failed_save(e);
  }
}

void Trainer::save_or_warn(std::int64_t steps_done) {
  finish_save_in_flight();  // the next save waits for the previous write
  try {
    start_save(steps_done);
    if (!saver_->async()) finish_save();
  } catch (const CheckpointError& e) {
    survive_failed_save(e);
  }
}

std::string Trainer::save_or_stop(std::int64_t steps_done) {
  try {
    finish_save_in_flight();
  } catch (const JobError&) {
    // Too many failed saves in a row: this save, which the run needs, decides.
  }
  if (last_saved_step_ == steps_done)
    return (std::filesystem::path(config_.checkpoint_dir) / checkpoint_files::step_dir_name(steps_done)).string();
  try {
    start_save(steps_done);
    return finish_save();
  } catch (const CheckpointError& e) {
    throw JobError(kExitFailed, e.what());
  }
}

// ---- stopping early -------------------------------------------------------------

RunSummary Trainer::stop_early(std::int64_t steps_done, const StepGate& gate, const std::string& data_problem,
                               RunSummary summary) {
  // Nothing is lost: the progress since the last checkpoint is saved. With
  // no step taken since start-up there is none, and `latest` (perhaps
  // another run's) stays as it was.
  std::string saved = "nothing saved: rerun with --run-dir or --checkpoint-dir to keep progress";
  bool save_failed = false;
  try {
    finish_save_in_flight();  // perhaps the very checkpoint of steps_done
  } catch (const JobError&) {
    // Too many failed saves in a row: the stop's own save below says whether
    // this one fails too.
  }
  if (steps_done == start_step_) {
    saved = "no step taken, nothing to save";
  } else if (!config_.checkpoint_dir.empty() && last_saved_step_ == steps_done) {
    saved = "checkpoint of step " + std::to_string(steps_done) + " already saved";
  } else if (!config_.checkpoint_dir.empty()) {
    try {
      start_save(steps_done);
      saved = "checkpoint " + finish_save();
    } catch (const CheckpointError& e) {  // every rank alike
      saved = e.what();
      save_failed = true;
    }
  }
  if (gate.bad_input) {
    // Every rank stops here; the lowest rank that found bad data says what.
    const std::string problem = first_error(*host_world_, data_problem);
    throw JobError(kExitBadInput, problem + "; stopped before step " + std::to_string(steps_done + 1) + " (" +
                                      saved + ")");
  }
  if (save_failed)
    throw JobError(kExitFailed, std::string("stop requested (") + signal_name(gate.stop_signal) + ") after step " +
                                    std::to_string(steps_done) + ", but " + saved);
  if (is_logger()) {
    // --resume auto is advice only where a checkpoint holds this run's
    // progress; with none it would start from scratch.
    const bool resumable = !config_.checkpoint_dir.empty() && last_saved_step_ >= 0;
    out_ << "stopped    on request (" << signal_name(gate.stop_signal) << ") after step " << steps_done << " of "
         << config_.steps << "; " << saved << (resumable ? "; continue with --resume auto" : "") << std::endl;
    metrics_.record_event({{"event", "stopped"}, {"step", steps_done}, {"signal", signal_name(gate.stop_signal)}});
  }
  summary.exit_code = kExitStopped;
  return summary;
}

}  // namespace launch
