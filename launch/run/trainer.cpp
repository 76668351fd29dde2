// Trainer: set-up, one step and the step loop (launch/run/trainer.h says what
// a step does, in order).
#include "launch/run/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"
#include "launch/formats/model_files.h"
#include "launch/resilience/job_error.h"
#include "launch/resilience/stop_request.h"
#include "launch/run/gpu_assignment.h"
#include "launch/run/optimizer_setup.h"
#include "launch/run/peak_flops.h"
#include "launch/run/run_folder.h"
#include "model/flat_layout.h"
#include "model/flops.h"
#include "model/gpt_params.h"
#include "model/memory_plan.h"
#include "optim/grad_clip.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pipeline_runner.h"
#include "parallel/watchdog.h"
#ifdef ENGINE_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace launch {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int rank_of(MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  return rank;
}

int size_of(MPI_Comm world) {
  int size = 1;
  MPI_Comm_size(world, &size);
  return size;
}

// Device traffic over MPI or NCCL.
parallel::GridComms make_comms(const TrainConfig& config, const parallel::ProcessGrid& grid, MPI_Comm world) {
  if (!config.nccl_protocol()) return parallel::make_mpi_comms(grid, world);
#ifdef ENGINE_WITH_NCCL
  return parallel::make_nccl_comms(grid, world, config.comm_backend());
#else
  ENGINE_FAIL("--comm ", config.comm, ": this engine was built without NCCL");
#endif
}

// Rank 0, before anything of the run is opened: --overwrite deletes the
// outputs of the run that was here; a run folder gets the copy of the text
// log (appended to, so a refused start adds its lines to the run's log).
std::unique_ptr<TextLogCopy> start_outputs(const TrainConfig& config, int rank, std::ostream& console) {
  if (rank != 0 || config.eval_only) return nullptr;
  if (config.overwrite) remove_previous_run(config);
  const RunPaths paths = run_paths(config);
  if (paths.config.empty()) return nullptr;
  std::filesystem::create_directories(config.run_dir);
  return std::make_unique<TextLogCopy>(console, paths.text_log);
}

// Rank 0, once every start-up check has passed (the resumed checkpoint's
// identity included): a start refused for a mistyped flag must not replace
// the run's saved configuration, which `--config DIR/config.json --resume
// auto` continues the run from.
void save_run_config(const TrainConfig& config, int rank) {
  const RunPaths paths = run_paths(config);
  if (rank != 0 || config.eval_only || paths.config.empty()) return;
  write_file_atomically(paths.config, resolved_config_json(config));
}

}  // namespace

// ---- set-up ---------------------------------------------------------------------

Trainer::Trainer(const TrainConfig& config, std::ostream& out, MPI_Comm world)
    : config_(config),
      started_(Clock::now()),
      text_log_(start_outputs(config, rank_of(world), out)),
      out_(text_log_ ? text_log_->stream() : out),
      grid_(size_of(world), rank_of(world), config.tp, config.pp, config.dp),
      nonfinite_(config),
      metrics_(rank_of(world) == 0 ? config.log_file : std::string()),
      faults_(FaultInjection::from_environment(rank_of(world), size_of(world))) {
  const model::GptConfig& mc = config.model;
  if (config.device_type == engine::DeviceType::kCuda) {
    // The node-local rank picks the GPU (one GPU per rank; several ranks share
    // one only in correctness runs with the MPI communicator), found once, by
    // every rank alike: node_local_rank may split `world`.
    gpu_ = node_local_rank(world) % engine::cuda_device_count();
    if (config.comm == "nccl") check_one_gpu_per_rank(world, engine::cuda_pci_bus_id(gpu_));
    engine::cuda_set_device(gpu_);
    std::string why;
    ENGINE_CHECK(config.matmul_format != engine::ops::MatmulFormat::kFp8E4M3 || engine::cuda_fp8_supported(gpu_, &why),
                 "--precision fp8: ", why);
    ENGINE_CHECK(config.matmul_format != engine::ops::MatmulFormat::kFp8E4M3 ||
                     config.fp8_scaling_mode != engine::ops::Fp8Scaling::kBlock ||
                     engine::cuda_fp8_block_scaling_supported(gpu_, &why),
                 "--fp8-scaling block: ", why);
  }
  host_world_ = std::make_unique<parallel::MpiCommunicator>(world, "world");
  if (config.device_type == engine::DeviceType::kCuda) gpu_free_before_comms_ = engine::cuda_free_bytes();
  comms_ = make_comms(config, grid_, world);

  batch_ = BatchLayout{config.batch_tokens / config.seq_len, grid_.dp_size(), grid_.dp_rank(), config.micro_batch};
  batch_.validate();
  // A run that cannot fit on its GPU, or in its node's host memory, is
  // refused before anything is allocated or laid out (a model of 100,000
  // layers takes seconds to register), with the plan's bytes (every rank
  // checks; all agree and fail together).
  refuse_if_too_big(planned_memory_before_allocating());

  // This rank's slice of the model and how the data-parallel strategy sees it.
  const parallel::ScheduleKind schedule = parallel::parse_schedule(config.pipeline_schedule);
  placement_ = parallel::stage_placement(schedule);
  chunks_ = model::pipeline_chunk_ranges(mc, grid_.pp_rank(), grid_.pp_size(), config.virtual_stages, placement_);
  range_ = model::rank_range(chunks_);
  tp_ = model::TensorParallel{grid_.tp_rank(), grid_.tp_size(), config.sequence_parallel};
  registry_ = model::build_gpt_registry(mc, chunks_, tp_, shard_ways(config, grid_));
  layout_ = model::flat_layout(registry_, range_, tp_, mc.n_layer);
  // In ZB-V's V, rank 0 holds both uses of wte: one copy, nothing to sum.
  tied_ = std::make_unique<parallel::TiedEmbedding>(world, grid_, layout_.tied, layout_.tied_unit,
                                                    config.comm_backend(), mc.tied_embeddings,
                                                    placement_ == parallel::StagePlacement::kVShape);

  // --eval-only needs no training data.
  if (!config.train_data.empty())
    train_data_ = std::make_unique<DataLoader>(config.train_data, static_cast<int>(config.seq_len),
                                               static_cast<int>(mc.vocab_size), config.shuffle, config.seed);
  if (!config.val_data.empty())
    val_data_ = std::make_unique<DataLoader>(config.val_data, static_cast<int>(config.seq_len),
                                             static_cast<int>(mc.vocab_size), false, config.seed);

  // Parameters, the strategy that keeps the replicas in step, the optimizer.
  store_ = std::make_unique<model::ParamStore>(registry_, config.device_type, config.precision_mode,
                                               store_sharding(config, grid_, layout_, *comms_.dp));
  Optimization optimization = make_optimization(config, grid_, *comms_.dp, registry_, layout_, *store_, *tied_);
  optimizer_ = std::move(optimization.optimizer);
  optimizer_checkpoint_ = std::move(optimization.checkpoint);
  data_parallel_ = std::move(optimization.data_parallel);
  initialize_weights();
  if (!config.checkpoint_dir.empty() && !config.eval_only)
    saver_ = std::make_unique<CheckpointSaver>(
        CheckpointSaver::Options{config.checkpoint_dir, static_cast<int>(config.keep_checkpoints),
                                 config.async_checkpoint},
        mc, registry_, *host_world_, config.device_type);

  // The schedule decides how many micro-batches are alive at once, and so
  // how many activation slots each chunk's stage needs.
  schedule_ = parallel::make_schedule(schedule, grid_.pp_size(), grid_.pp_rank(), batch_.micro_batches(),
                                      config.virtual_stages);
  bubble_theory_ = parallel::equal_pass_bubble_fraction(schedule, grid_.pp_size(), batch_.micro_batches(),
                                                        config.virtual_stages);
  const model::ActivationShape shape{config.micro_batch, config.seq_len, model::activation_dtype(config.precision_mode),
                                     config.matmul_format == engine::ops::MatmulFormat::kFp8E4M3};
  engine::Arena plan = engine::Arena::planning(config.device_type);
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const int slots = std::max(1, parallel::peak_in_flight(schedule_, static_cast<int>(c)));
    // A zero-bubble schedule splits each backward in two: the weight passes'
    // inputs and stashes are kept from forward and input pass to weight pass.
    const model::WeightPassSets sets = model::weight_pass_sets(schedule_, static_cast<int>(c));
    stages_.push_back(std::make_unique<model::GptStage>(mc, *store_, chunks_[c], shape, slots, tp_, comms_.tp.get(),
                                                        config.recompute_mode, data_parallel_->staged_units(),
                                                        sets.stash, sets.inputs));
    stages_.back()->set_matmul_format(config.matmul_format);
    stages_.back()->set_fp8_weight_cache(keeps_fp8_weight_copies());
    stages_.back()->set_fp8_scaling(config.fp8_scaling_mode);
    stages_.back()->allocate(plan);
  }
  activations_ = engine::Arena(config.device_type, plan.used());
  for (auto& stage : stages_) stage->allocate(activations_);
  if (train_data_)
    for (auto& stage : stages_) {
      pipeline_.push_back(std::make_unique<TrainingStage>(*stage, *train_data_, batch_, config.seq_len, *data_parallel_));
      pipeline_chunks_.push_back(pipeline_.back().get());
    }
  sampler_rng_.seed(config.seed);

  report_start();
  if (!config.resume.empty()) resume();
  save_run_config(config, grid_.world_rank());
  faults_.start_failure_clock();
}

Trainer::~Trainer() = default;

// ---- one step ------------------------------------------------------------------------

double Trainer::sum_over_world(double local) {
  host_world_->all_reduce(engine::Tensor(&local, engine::Shape{1}, engine::DType::kF64, engine::DeviceType::kCpu));
  return local;
}

void Trainer::finish_gradients() {
  parallel::WatchdogPhase phase("gradient reduction");
  // Whatever of the reductions backward did not hide is exposed here.
  engine::device_synchronize();
  const auto t0 = Clock::now();
  data_parallel_->finish_gradients();
  engine::device_synchronize();
  exposed_comm_seconds_ = seconds_since(t0);
}

double Trainer::global_grad_norm() {
  parallel::WatchdogPhase phase("gradient norm");
  double local = 0;
  for (const parallel::FlatRange& r : data_parallel_->norm_ranges())
    local += optim::grad_sum_of_squares(store_->grads().flat_slice(r.offset, r.count));
  return std::sqrt(sum_over_world(local) * data_parallel_->norm_scale());
}

double Trainer::train_step(std::int64_t step) {
  // Each token's loss enters the objective with weight 1/(tokens per step).
  const double grad_scale = 1.0 / static_cast<double>(config_.batch_tokens);
  parallel::watchdog_set_phase("forward");
  store_->zero_grads();
  data_parallel_->begin_step();
  for (auto& chunk : pipeline_) chunk->begin_step(step, grad_scale);
  parallel::run_schedule(schedule_, pipeline_chunks_, *comms_.pp, placement_);
  finish_gradients();
  if (nonfinite_.poisoned(step) && is_logger() && !data_parallel_->norm_ranges().empty())
    engine::ops::fill(store_->grads().flat_slice(data_parallel_->norm_ranges().front().offset, 1), std::nan(""));
  // After the data-parallel reduction has landed (it may still be writing
  // these buffers until then); sums commute, so the order is free.
  for (auto& stage : stages_) stage->reduce_sequence_parallel_grads();
  // Every data-parallel replica's last stage holds part of the loss; count
  // each tensor-parallel group once.
  parallel::watchdog_set_phase("loss");
  const bool contributes = range_.has_head && tp_.rank == 0;
  return sum_over_world(contributes ? pipeline_.back()->loss_sum() : 0.0) * grad_scale;  // the head's chunk
}

Trainer::StepGate Trainer::agree_between_steps(bool my_data_is_bad) {
  parallel::WatchdogPhase phase("between steps");
  std::int32_t flags[3] = {stop_requested(), my_data_is_bad ? 1 : 0, saver_ && !saver_->written() ? 1 : 0};
  host_world_->all_reduce(engine::Tensor(flags, engine::Shape{3}, engine::DType::kI32, engine::DeviceType::kCpu),
                          parallel::ReduceOp::kMax);
  return {flags[0], flags[1] != 0, flags[2] != 0};
}

std::string Trainer::check_step_data(std::int64_t step) {
  // Each shard is scanned whole the first time one of its sequences is
  // needed, so a bad one stops the run before any of its tokens is used.
  // Then the step's tokens are read here, before the ranks agree to take
  // the step: a shard that shrank since (overwritten under the run) stops
  // the run with a checkpoint like any bad shard, instead of failing one
  // rank in the middle of the step.
  try {
    for (int micro = 0; micro < batch_.micro_batches(); ++micro)
      train_data_->verify_sequences(batch_.first_sequence(step, micro), batch_.micro_batch);
    for (auto& chunk : pipeline_) chunk->load_step(step);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

RunSummary Trainer::run() {
  if (config_.eval_only) return evaluate_only();
  RunSummary summary;
  try {
    summary = run_steps();
  } catch (const JobError&) {
    // A job-wide error (every rank is here, agreed): a checkpoint whose
    // write finished is still committed, so nothing saved is lost. Errors
    // of one rank only skip this (the others are not here to agree).
    try {
      finish_save_in_flight();
    } catch (const std::exception&) {
    }
    throw;
  }
  report_summary(summary);
  return summary;
}

RunSummary Trainer::run_steps() {
  RunSummary summary;
  summary.first_step = start_step_;
  PeakFlops peak = PeakFlops::for_run(config_, gpu_,
                                      host_world_->comm(), is_logger() ? &out_ : nullptr);
  // The step line's `mem` is the steps' own peak: start-up's temporaries (the
  // CPU peak probe's three 16 MiB GEMM operands, freed by now) would put it
  // above the memory plan, which counts what a step holds (issue 36, item 4).
  engine::reset_peak_memory(config_.device_type);
  const StepFlops flops = step_flops(config_);
  for (std::int64_t step = start_step_; step < config_.steps; ++step) {
    parallel::watchdog_set_step(step + 1);
    faults_.at_step_start(step + 1);
    const std::string data_problem = check_step_data(step);
    const StepGate gate = agree_between_steps(!data_problem.empty());
    if (gate.stop_signal != 0 || gate.bad_input) return stop_early(step, gate, data_problem, std::move(summary));
    // A background checkpoint write every rank has finished: commit it now,
    // between steps, rather than make the next save wait for it.
    if (saver_ && saver_->in_flight() && !gate.writes_pending) finish_save_in_flight();

    for (parallel::Communicator* c : {comms_.tp.get(), comms_.dp.get(), comms_.pp.get(), tied_->comm(),
                                      static_cast<parallel::Communicator*>(host_world_.get())})
      if (c) { c->reset_bytes_sent(); c->reset_wait_seconds(); }
    const auto t0 = Clock::now();
    const std::size_t allocations_before = engine::memory_stats(config_.device_type).allocations;
    const double loss = train_step(step);
    const double norm = global_grad_norm();
    const double lr = config_.lr_schedule.at(step);
    const NonFiniteGuard::Verdict verdict = nonfinite_.judge(step, loss, norm);
    if (verdict == NonFiniteGuard::Verdict::kSkipLimit) {
      // The weights and optimizer state are those of the last applied step:
      // keep the progress since the last checkpoint before stopping.
      const std::string saved =
          config_.checkpoint_dir.empty() ? "" : " after a checkpoint (" + save_or_stop(step + 1) + ")";
      throw JobError(kExitFailed, nonfinite_.last_problem() + "; stopping" + saved);
    }
    const bool apply = verdict == NonFiniteGuard::Verdict::kApply;
    if (apply) {
      parallel::WatchdogPhase phase("optimizer");
      data_parallel_->before_update();
      optimizer_->step(lr, optim::clip_factor(norm, config_.grad_clip) * data_parallel_->update_scale());
      data_parallel_->after_update();
      for (auto& stage : stages_) stage->weights_changed();  // FP8 weight copies are now stale
    }
    engine::device_synchronize();
    if (step > start_step_)
      summary.allocations_in_steps += engine::memory_stats(config_.device_type).allocations - allocations_before;
    parallel::watchdog_set_phase("metrics");
    StepMetrics m = step_metrics(step, loss, norm, lr, seconds_since(t0), flops, peak);
    m.skipped = !apply;

    const bool last = step + 1 == config_.steps;
    if (val_data_ && ((config_.val_interval > 0 && (step + 1) % config_.val_interval == 0) || last))
      m.val_loss = validate();
    if (is_logger()) {
      // The JSONL keeps every step; the console every --log-interval-th, and
      // every step worth seeing (the first, the last, validations, skips).
      if ((step + 1) % config_.log_interval == 0 || step == start_step_ || last || m.val_loss || m.skipped)
        out_ << MetricsLog::format_line(m) << std::endl;
      metrics_.record(m);
    }
    add_to_summary(summary, m);
    if (config_.checkpoint_dir.empty()) continue;
    if (last)
      save_or_stop(step + 1);  // the run's result: a failure here is an error
    else if (config_.checkpoint_interval > 0 && (step + 1) % config_.checkpoint_interval == 0)
      save_or_warn(step + 1);
  }
  parallel::WatchdogPhase phase("final outputs", parallel::kWatchdogFileIoScale);
  write_outputs(summary);
  return summary;
}



}  // namespace launch
