// The training loop of the `train` program (its public face: construct, run(),
// and the read-only views the tests use): builds this rank's part of the
// model (its pipeline stage, its tensor-parallel slices), the data-parallel
// strategy, the optimizer, data and communicators from a resolved
// TrainConfig, then runs steps, validation, checkpoints and the final
// sample, logging every step on rank 0.
//
// One step (ARCHITECTURE.md, "One training step, as data"), Trainer::run:
//   read the batch and run the schedule  each data-parallel rank reads its
//       slice of the global batch as micro-batches; the pipeline schedule
//       (1F1B by default) runs them through the stages; during the last
//       micro-batch's backward the data-parallel strategy starts reducing
//       gradients while earlier layers still compute;
//   finish the gradients                 the strategy lands its reductions
//       (the tied embedding's copies included); sequence-parallel layer-norm
//       sums over tp;
//   norm                                  over every axis, counting each
//       gradient once, over the ranges the strategy names;
//   optimizer, after-step                 the optimizer updates the chunks
//       the strategy gives this rank; the strategy rebuilds what the next
//       step needs (ZeRO's all-gathers);
//   log, checkpoint.
// How the replicas are kept in step (plain all-reduce, ZeRO-1/2/3, 1-bit
// Adam's compression) is chosen once, by launch/run/optimizer_setup.h.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "engine/buffer.h"
#include "launch/checkpoint/checkpoint_saver.h"
#include "launch/checkpoint/optimizer_checkpoint.h"
#include "launch/data/data_loader.h"
#include "launch/resilience/exit_codes.h"
#include "launch/resilience/fault_injection.h"
#include "launch/run/memory_report.h"
#include "launch/run/metrics.h"
#include "launch/run/nonfinite_guard.h"
#include "launch/run/peak_flops.h"
#include "launch/run/text_log.h"
#include "launch/run/train_config.h"
#include "launch/run/training_stage.h"
#include "model/gpt_stage.h"
#include "model/param_registry.h"
#include "model/param_store.h"
#include "optim/onebit_adam.h"
#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"
#include "parallel/tied_embedding.h"

namespace launch {

struct RunSummary {
  std::vector<double> losses;  // training loss of each step this run took (the same on every rank)
  std::int64_t first_step = 0; // step the run started from (non-zero after resume)
  double final_val_loss = -1;  // -1 when there was no validation
  double best_val_loss = -1;   // the lowest validation loss of this run, at best_val_step
  std::int64_t best_val_step = 0;
  std::int64_t tokens = 0;     // trained by this run (all ranks together)
  double train_seconds = 0;    // the steps' own time (no validation, no checkpoints)
  double wall_seconds = 0;     // from the trainer's construction to the end of run()
  // Means over this run's steps but its first (which warms caches and
  // allocators up), or over the first when it is the only one.
  double mean_mfu = 0, mean_hfu = 0;
  std::string sample;          // generated text, when asked for (rank 0)
  // Buffers this rank allocated on the run's device inside its steps after
  // the first (training step, optimizer, synchronisation): 0 by design, since
  // every buffer is sized before step 1 or in it (ARCHITECTURE.md), and an
  // allocation in the middle of a step could synchronise a device whose
  // NCCL collectives wait for other ranks. The parity suites check it.
  std::size_t allocations_in_steps = 0;
  int exit_code = kExitDone;   // kExitStopped when a stop was requested (launch/resilience/exit_codes.h)
};

class Trainer {
 public:
  // `world`: the ranks of this job (MPI_COMM_SELF for one process). `out`
  // receives the human-readable log on rank 0 (stdout in the program).
  Trainer(const TrainConfig& config, std::ostream& out, MPI_Comm world = MPI_COMM_WORLD);
  ~Trainer();
  RunSummary run();

  const model::ParamRegistry& registry() const { return registry_; }
  const model::ParamStore& params() const { return *store_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  // Null unless the run uses --optimizer onebit-adam.
  const optim::OneBitAdam* onebit_optimizer() const { return dynamic_cast<const optim::OneBitAdam*>(optimizer_.get()); }
  const parallel::ProcessGrid& grid() const { return grid_; }
  // This rank's bytes by kind: as the memory plan predicts them
  // (model/memory_plan.h) and as this run allocated them (ZeRO staging at
  // its bound); memory() holds both, largest over ranks, from start-up.
  model::RankMemory planned_memory() const;
  model::RankMemory allocated_memory() const;
  const MemoryFigures& memory() const { return memory_; }
  model::ParallelLayout parallel_layout() const;
  // Under --precision fp8, whether the stages keep each block weight's FP8
  // form between optimizer steps: yes, unless ZeRO-3 shards the weights, whose
  // whole FP8 copies (2 bytes a parameter on every rank) would undo its saving.
  bool keeps_fp8_weight_copies() const;

  // The whole master weights of this rank's (tp, pp) part as f32, laid out
  // by registry(). Under ZeRO it is collective over the data-parallel group
  // (the chunks are gathered): every rank of the group must call it.
  void download_master(float* host) { data_parallel_->download_master(host); }

  // ---- the rest is private: the step loop's parts (trainer.cpp), start-up
  // (trainer_start.cpp), validation (trainer_validation.cpp), checkpoints and
  // stops (trainer_checkpoint.cpp), outputs and summary (trainer_outputs.cpp).
 private:
  model::RankMemory planned_memory_before_allocating() const;  // without 1-bit Adam's own count
  void refuse_if_too_big(const model::RankMemory& planned) const;
  RunSummary run_steps();                // run() without the last commit on a job-wide error
  RunSummary evaluate_only();            // --eval-only: one validation, reported
  double train_step(std::int64_t step);  // returns the global mean loss
  void finish_gradients();               // and times what the reductions left exposed
  double global_grad_norm();
  // flops: the step's model and hardware FLOPs; peak: one device's, raised if a step beats a measured one
  // (launch/run/peak_flops.h, ARCHITECTURE.md "Numbers and conventions").
  StepMetrics step_metrics(std::int64_t step, double loss, double norm, double lr, double seconds,
                           const StepFlops& flops, PeakFlops& peak);
  // The mean loss over the first --val-tokens of the validation set (the
  // same sequences for any layout); forward only, collective.
  double validate();
  std::int64_t validation_sequences() const;
  // What a run that ends (done or stopped) prints and leaves: the summary
  // lines, a "summary" JSONL event and the run folder's summary.json.
  void report_summary(RunSummary& summary);
  void add_to_summary(RunSummary& summary, const StepMetrics& m);
  void write_outputs(RunSummary& summary);  // the model file and the sample, after the last step
  std::string sample_text(const model::ParamStore& store);
  void initialize_weights();
  void report_start();
  void report_paths();  // where validation reads and the outputs go (logger)
  // Between two steps every rank says whether it must stop (a stop signal, a
  // bad shard among the next step's data) and whether its checkpoint write
  // is still running; all agree (collective, one small all-reduce).
  struct StepGate {
    int stop_signal = 0;          // the signal some rank received, or 0
    bool bad_input = false;       // some rank's data for the next step is bad
    bool writes_pending = false;  // some rank's background checkpoint write is still running
  };
  StepGate agree_between_steps(bool my_data_is_bad);
  // "" if every shard this rank's share of `step` reads is good, else why not.
  std::string check_step_data(std::int64_t step);
  // Checkpoints `steps_done` (unless just saved), reports and returns the
  // summary with kExitStopped; throws JobError(kExitBadInput) for bad data.
  RunSummary stop_early(std::int64_t steps_done, const StepGate& gate, const std::string& data_problem,
                        RunSummary summary);
  // Saving (launch/checkpoint/checkpoint_saver.h). start_save copies the state into the
  // saver's host buffers and starts the write; finish_save waits for it and
  // commits, returning the directory. Both throw CheckpointError (the same on
  // every rank, the previous checkpoint untouched).
  void start_save(std::int64_t steps_done);
  std::string finish_save();
  // Commits a save still in flight, surviving its failure as save_or_warn does.
  void finish_save_in_flight();
  // A periodic save: a failure (disk full) is a warning and training goes on,
  // until --max-failed-saves failures in a row end the run. Asynchronous
  // unless --async-checkpoint off.
  void save_or_warn(std::int64_t steps_done);
  void survive_failed_save(const CheckpointError& e);  // counts it, or throws JobError
  // A save the run cannot go on without (a stop, the last step): written and
  // committed before it returns; a failure is a job-wide error.
  std::string save_or_stop(std::int64_t steps_done);
  // Resuming: tries each candidate checkpoint, newest first, falling back
  // past damaged ones (--resume latest|auto).
  void resume();
  TrainingState load_into_store(const std::string& dir, std::string& restored);
  void finish_resume(const std::string& dir, const TrainingState& state, const std::string& restored,
                     const std::vector<std::string>& damage_reports);
  nlohmann::json run_identity() const;
  double sum_over_world(double local);
  bool is_logger() const { return grid_.world_rank() == 0; }

  const TrainConfig& config_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<TextLogCopy> text_log_;  // rank 0 with a run folder: the text log's copy
  std::ostream& out_;                      // rank 0's text log (the console, and the copy)
  parallel::ProcessGrid grid_;
  parallel::GridComms comms_;                           // device traffic (MPI or NCCL)
  std::unique_ptr<parallel::MpiCommunicator> host_world_;  // host scalars, checkpoint coordination, CPU peak
  int gpu_ = 0;  // the GPU this rank uses (launch/run/gpu_assignment.h); 0 on the CPU
  // Its free bytes before the communicators are made: what NCCL allocates
  // then is part of the plan's communication estimate, not to be counted twice.
  std::size_t gpu_free_before_comms_ = 0;
  std::vector<model::StageRange> chunks_;  // this rank's layers: one chunk, or v with the interleaved schedule
  parallel::StagePlacement placement_ = parallel::StagePlacement::kLooped;  // which virtual stage each chunk runs
  model::StageRange range_;                // what the chunks hold together (model::rank_range)
  model::TensorParallel tp_;
  model::ParamRegistry registry_;
  parallel::FlatLayout layout_;
  std::unique_ptr<parallel::TiedEmbedding> tied_;  // the first and last stage's wte copies
  std::unique_ptr<model::ParamStore> store_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<OptimizerCheckpoint> optimizer_checkpoint_;
  std::unique_ptr<CheckpointSaver> saver_;  // null without --checkpoint-dir
  std::unique_ptr<parallel::DataParallel> data_parallel_;  // before stages_, which may acquire through it
  std::vector<std::unique_ptr<model::GptStage>> stages_;  // one per chunk of chunks_
  engine::Arena activations_;
  MemoryFigures memory_;  // planned and allocated bytes, from report_start()
  std::unique_ptr<DataLoader> train_data_, val_data_;
  BatchLayout batch_{};
  std::vector<parallel::Action> schedule_;
  std::vector<std::unique_ptr<TrainingStage>> pipeline_;  // one per chunk; empty with --eval-only
  std::vector<parallel::Stage*> pipeline_chunks_;         // the same, as run_schedule takes them
  std::mt19937_64 sampler_rng_;
  std::int64_t start_step_ = 0;
  double exposed_comm_seconds_ = 0;  // last step's wait in finish_gradients()
  NonFiniteGuard nonfinite_;
  MetricsLog metrics_;
  FaultInjection faults_;              // test-only failures (launch/resilience/fault_injection.h)
  std::int64_t failed_saves_in_a_row_ = 0;
  std::int64_t last_saved_step_ = -1;  // the checkpoint written or resumed from last
  double mfu_sum_ = 0, hfu_sum_ = 0;   // over this run's steps but its first
  std::int64_t mfu_steps_ = 0;
  // Step times for the step line's ETA: the first step's, and the sum over
  // this run's later steps (the first warms caches and allocators up).
  double first_step_seconds_ = 0, later_steps_seconds_ = 0;
  // The schedule's bubble fraction at equal pass times (parallel::equal_pass_bubble_fraction), for the step line.
  double bubble_theory_ = 0;
  std::int64_t later_steps_ = 0;
};

}  // namespace launch
