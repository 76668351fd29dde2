#include "launch/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"
#include "launch/checkpoint.h"
#include "launch/hf_gpt2.h"
#include "launch/llmc_model.h"
#include "launch/rank_agreement.h"
#include "launch/job_error.h"
#include "launch/optimizer_setup.h"
#include "launch/peak_flops.h"
#include "launch/run_folder.h"
#include "launch/stop_request.h"
#include "model/flat_layout.h"
#include "model/flops.h"
#include "model/gpt_params.h"
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

// The node-local rank picks the GPU (one GPU per rank; several ranks share
// one only in correctness runs with the MPI communicator). Found once, by
// every rank, as the trainer starts (node_local_rank may be collective); the
// messages that name the GPU later only read it.
int g_node_local_rank = -1;

int local_gpu() {
  ENGINE_CHECK(g_node_local_rank >= 0, "local_gpu() before the trainer found the node-local rank");
  return g_node_local_rank % engine::cuda_device_count();
}

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
  if (config.comm != "nccl") return parallel::make_mpi_comms(grid, world);
#ifdef ENGINE_WITH_NCCL
  return parallel::make_nccl_comms(grid, world);
#else
  ENGINE_FAIL("--comm nccl: this engine was built without NCCL");
#endif
}

// Rank 0, before anything of the run is opened: --overwrite deletes the
// outputs of the run that was here; a run folder gets this run's resolved
// configuration and the copy of the text log.
std::unique_ptr<TextLogCopy> start_outputs(const TrainConfig& config, int rank, std::ostream& console) {
  if (rank != 0 || config.eval_only) return nullptr;
  if (config.overwrite) remove_previous_run(config);
  const RunPaths paths = run_paths(config);
  if (paths.config.empty()) return nullptr;
  std::filesystem::create_directories(config.run_dir);
  write_file_atomically(paths.config, resolved_config_json(config));
  return std::make_unique<TextLogCopy>(console, paths.text_log);
}

}  // namespace

int node_local_rank(MPI_Comm world) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return std::atoi(v);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank_of(world), MPI_INFO_NULL, &node);
  const int local = rank_of(node);
  MPI_Comm_free(&node);
  return local;
}

void check_one_gpu_per_rank(MPI_Comm world, const std::string& gpu_id) {
  constexpr int kIdBytes = 64;
  char mine[kIdBytes] = {};
  gpu_id.copy(mine, kIdBytes - 1);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank_of(world), MPI_INFO_NULL, &node);
  const int local_ranks = size_of(node);
  std::vector<char> all(static_cast<std::size_t>(local_ranks) * kIdBytes);
  MPI_Allgather(mine, kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, node);
  MPI_Comm_free(&node);
  int sharing = 0;  // ranks of this node on my GPU, me included
  for (int r = 0; r < local_ranks; ++r)
    if (std::strncmp(all.data() + static_cast<std::size_t>(r) * kIdBytes, mine, kIdBytes) == 0) ++sharing;
  int worst = sharing;
  MPI_Allreduce(&sharing, &worst, 1, MPI_INT, MPI_MAX, world);
  ENGINE_CHECK(worst <= 1, "NCCL (--comm nccl, and --comm auto on CUDA) needs a GPU per rank, but ", worst,
               " ranks of one node share a GPU", sharing > 1 ? " (this rank's, " + gpu_id + ")" : std::string(),
               ": start at most one rank per GPU, or use --comm mpi to let ranks share a GPU (host-staged, "
               "for correctness runs)");
}

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
    g_node_local_rank = node_local_rank(world);  // every rank alike: may split `world`
    if (config.comm == "nccl") check_one_gpu_per_rank(world, engine::cuda_pci_bus_id(local_gpu()));
    engine::cuda_set_device(local_gpu());
  }
  host_world_ = std::make_unique<parallel::MpiCommunicator>(world, "world");
  comms_ = make_comms(config, grid_, world);

  // This rank's slice of the model and how the data-parallel strategy sees it.
  range_ = model::pipeline_stage_range(mc, grid_.pp_rank(), grid_.pp_size());
  tp_ = model::TensorParallel{grid_.tp_rank(), grid_.tp_size(), config.sequence_parallel};
  registry_ = model::build_gpt_registry(mc, range_, tp_, shard_ways(config, grid_));
  layout_ = model::flat_layout(registry_, range_, tp_, mc.n_layer);
  tied_ = std::make_unique<parallel::TiedEmbedding>(world, grid_, layout_.tied, layout_.tied_unit,
                                                    config.comm == "nccl");

  // --eval-only needs no training data.
  if (!config.train_data.empty())
    train_data_ = std::make_unique<DataLoader>(config.train_data, static_cast<int>(config.seq_len),
                                               static_cast<int>(mc.vocab_size), config.shuffle, config.seed);
  if (!config.val_data.empty())
    val_data_ = std::make_unique<DataLoader>(config.val_data, static_cast<int>(config.seq_len),
                                             static_cast<int>(mc.vocab_size), false, config.seed);
  batch_ = BatchLayout{config.batch_tokens / config.seq_len, grid_.dp_size(), grid_.dp_rank(), config.micro_batch};
  batch_.validate();

  // A run that cannot fit on its GPU is refused before anything is allocated,
  // with the plan's bytes (every rank checks its own; all fail together).
  if (config.device_type == engine::DeviceType::kCuda) refuse_if_too_big(planned_memory_before_allocating());

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
  // how many activation slots the stage needs.
  schedule_ = parallel::make_schedule(parallel::parse_schedule(config.pipeline_schedule), grid_.pp_size(),
                                      grid_.pp_rank(), batch_.micro_batches());
  const int slots = std::max(1, parallel::peak_in_flight(schedule_));
  const model::ActivationShape shape{config.micro_batch, config.seq_len, model::activation_dtype(config.precision_mode)};
  stage_ = std::make_unique<model::GptStage>(mc, *store_, range_, shape, slots, tp_, comms_.tp.get(),
                                             config.recompute_mode, data_parallel_->staged_units());
  engine::Arena plan = engine::Arena::planning(config.device_type);
  stage_->allocate(plan);
  activations_ = engine::Arena(config.device_type, plan.used());
  stage_->allocate(activations_);
  if (train_data_)
    pipeline_ = std::make_unique<TrainingStage>(*stage_, *train_data_, batch_, config.seq_len, *data_parallel_);
  sampler_rng_.seed(config.seed);

  report_start();
  if (!config.resume.empty()) resume();
  faults_.start_failure_clock();
}

Trainer::~Trainer() = default;

void Trainer::initialize_weights() {
  if (config_.init_from.empty()) {
    store_->initialize(config_.seed);
    return;
  }
  // Read the whole model, then keep this rank's slices of it.
  const model::ParamRegistry full = model::build_gpt_registry(config_.model);
  std::vector<float> whole(static_cast<std::size_t>(full.total_numel()), 0.0f);
  read_init_model(config_.init_from, config_.model, full, whole.data());  // llm.c or Hugging Face
  std::vector<float> mine(static_cast<std::size_t>(registry_.total_numel()), 0.0f);
  for (const model::ParamInfo& p : registry_.entries()) {
    const float* src = whole.data() + full.find(p.name).offset;
    model::for_each_run(p, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
      std::copy(src + global, src + global + count, mine.data() + p.offset + local);
    });
  }
  store_->upload_master(mine.data());
}

model::ParallelLayout Trainer::parallel_layout() const {
  model::ParallelLayout l;
  l.tp = grid_.tp_size();
  l.pp = grid_.pp_size();
  l.dp = grid_.dp_size();
  l.zero = zero_stage(config_, grid_);
  l.sequence_parallel = config_.sequence_parallel;
  l.recompute = config_.recompute_mode;
  l.schedule = parallel::parse_schedule(config_.pipeline_schedule);
  l.micro_batch = config_.micro_batch;
  l.micro_batches = batch_.micro_batches();
  l.seq_len = config_.seq_len;
  l.precision = config_.precision_mode;
  l.device = config_.device_type;
  return l;
}

model::RankMemory Trainer::planned_memory_before_allocating() const {
  return model::plan_stage_memory(config_.model, parallel_layout(), grid_.pp_rank());
}

void Trainer::refuse_if_too_big(const model::RankMemory& planned) const {
  const std::size_t free_bytes = engine::cuda_free_bytes();
  ENGINE_CHECK(planned.total() <= free_bytes, "this layout needs ", engine::format_bytes(planned.total()),
               " on GPU ", local_gpu(), " (rank ", grid_.world_rank(), ": parameters ", engine::format_bytes(planned.weights),
               ", gradients ", engine::format_bytes(planned.grads), ", optimizer state ",
               engine::format_bytes(planned.optimizer), ", activations ", engine::format_bytes(planned.activations),
               ", ZeRO buffers ", engine::format_bytes(planned.staging), ") but only ", engine::format_bytes(free_bytes),
               " are free: use more ranks, ZeRO, recomputation or a smaller micro-batch (build/launch/plan predicts each)");
}

model::RankMemory Trainer::planned_memory() const {
  model::RankMemory m = planned_memory_before_allocating();
  // 1-bit Adam's error buffers are not planned (model/memory_plan.h): take its own count.
  if (onebit_optimizer()) m.optimizer = optimizer_->state_bytes();
  return m;
}

model::RankMemory Trainer::allocated_memory() const {
  model::RankMemory a;
  const bool separate_working = store_->working().data() != store_->master().data();
  a.weights = store_->master().bytes() + (separate_working ? store_->working().bytes() : 0);
  a.grads = store_->grads().bytes();
  a.optimizer = optimizer_->state_bytes();
  a.activations = activations_.capacity();
  a.staging = data_parallel_->staging_bound();
  return a;
}

void Trainer::report_start() {
  // Bytes each rank holds, as laid out for this layout before step 1; the
  // largest over all ranks is what must fit on one device.
  if (is_logger() && !config_.eval_only && config_.warmup_steps > config_.steps)
    out_ << "warning    --warmup-steps " << config_.warmup_steps << " is longer than the run's --steps "
         << config_.steps << ": the learning rate ends at " << config_.lr_schedule.at(config_.steps - 1)
         << ", short of --lr " << config_.lr << "\n";
  if (is_logger())
    out_ << config_.describe() << "\n"
         << "rank 0     " << grid_.describe() << ", layers [" << range_.first_layer << ", " << range_.last_layer
         << ")\n";
  const MemoryNotes notes{store_->working().data() != store_->master().data(), stage_->slots(),
                          config_.recompute_mode};
  memory_ = report_memory(is_logger() ? &out_ : nullptr, *host_world_, planned_memory(), allocated_memory(),
                          *data_parallel_, *optimizer_, notes);
  if (!config_.eval_only) metrics_.record_event(memory_.event());
  if (is_logger()) out_ << "flops      " << model::flops_convention(config_.attention_flops_mode) << "\n";
  if (is_logger()) report_paths();
}

void Trainer::report_paths() {
  if (val_data_) {
    const std::int64_t n = validation_sequences();
    out_ << "validation " << n * config_.seq_len << " tokens (the first " << n << " sequences of " << config_.seq_len
         << ") of " << config_.val_data;
    if (n < config_.val_tokens / config_.seq_len)
      out_ << ": all it holds, fewer than --val-tokens " << config_.val_tokens;
    out_ << (config_.eval_only ? "" : config_.val_interval > 0 ? ", every " + std::to_string(config_.val_interval) + " steps and at the end" : ", at the end") << "\n";
  }
  if (config_.eval_only) return;
  const RunPaths paths = run_paths(config_);
  std::vector<std::string> where;
  if (!paths.config.empty()) where.push_back("config " + paths.config);
  if (!config_.log_file.empty()) where.push_back("metrics " + config_.log_file);
  if (!paths.text_log.empty()) where.push_back("log " + paths.text_log);
  if (!config_.checkpoint_dir.empty()) where.push_back("checkpoints " + config_.checkpoint_dir);
  if (!config_.save_model.empty()) where.push_back("model " + config_.save_model);
  if (!config_.save_hf.empty()) where.push_back("hf model " + config_.save_hf);
  if (where.empty()) where.push_back("none written (no --run-dir, --log-file, --checkpoint-dir or --save-model)");
  out_ << "outputs    ";
  for (std::size_t i = 0; i < where.size(); ++i) out_ << (i ? " | " : "") << where[i];
  out_ << "\n";
}

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
  pipeline_->begin_step(step, grad_scale);
  parallel::run_schedule(schedule_, *pipeline_, *comms_.pp);
  finish_gradients();
  if (nonfinite_.poisoned(step) && is_logger() && !data_parallel_->norm_ranges().empty())
    engine::ops::fill(store_->grads().flat_slice(data_parallel_->norm_ranges().front().offset, 1), std::nan(""));
  // After the data-parallel reduction has landed (it may still be writing
  // these buffers until then); sums commute, so the order is free.
  stage_->reduce_sequence_parallel_grads();
  // Every data-parallel replica's last stage holds part of the loss; count
  // each tensor-parallel group once.
  parallel::watchdog_set_phase("loss");
  const bool contributes = range_.has_head && tp_.rank == 0;
  return sum_over_world(contributes ? pipeline_->loss_sum() : 0.0) * grad_scale;
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
  try {
    for (int micro = 0; micro < batch_.micro_batches(); ++micro)
      train_data_->verify_sequences(batch_.first_sequence(step, micro), batch_.micro_batch);
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
  PeakFlops peak = PeakFlops::for_run(config_, config_.device_type == engine::DeviceType::kCuda ? local_gpu() : 0,
                                      host_world_->comm(), is_logger() ? &out_ : nullptr);
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
    }
    engine::device_synchronize();
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

RunSummary Trainer::stop_early(std::int64_t steps_done, const StepGate& gate, const std::string& data_problem,
                               RunSummary summary) {
  // Nothing is lost: the progress since the last checkpoint is saved. With
  // no step taken since start-up there is none, and `latest` (perhaps
  // another run's) stays as it was.
  std::string saved = "no --checkpoint-dir, nothing saved";
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
    out_ << "stopped    on request (" << signal_name(gate.stop_signal) << ") after step " << steps_done << " of "
         << config_.steps << "; " << saved << "; continue with --resume auto" << std::endl;
    metrics_.record_event({{"event", "stopped"}, {"step", steps_done}, {"signal", signal_name(gate.stop_signal)}});
  }
  summary.exit_code = kExitStopped;
  return summary;
}

std::int64_t Trainer::validation_sequences() const {
  return std::min(config_.val_tokens / config_.seq_len, val_data_->sequences_per_epoch());
}

double Trainer::validate() {
  parallel::WatchdogPhase phase("validation");
  // The first N sequences of the validation set, in order, whatever the
  // layout: data-parallel replica d scores the d-th of dp equal shares of
  // them, micro-batch by micro-batch through the pipeline. Every replica
  // runs the same number of forwards (ZeRO-3 gathers weights over the
  // replicas); rows past a replica's share are padding, run but not counted.
  const std::int64_t B = config_.micro_batch, T = config_.seq_len, N = validation_sequences();
  const std::int64_t share = (N + grid_.dp_size() - 1) / grid_.dp_size();
  const std::int64_t first = std::min(N, grid_.dp_rank() * share), end = std::min(N, first + share);
  const std::int64_t batches = (share + B - 1) / B;
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(B * T)), targets(inputs.size());
  std::vector<std::int32_t> pad_inputs(static_cast<std::size_t>(T)), pad_targets(pad_inputs.size());
  val_data_->read_sequences(0, 1, pad_inputs.data(), pad_targets.data());
  parallel::Communicator& pp = *comms_.pp;
  double loss_sum = 0.0;
  for (std::int64_t i = 0; i < batches; ++i) {
    const std::int64_t begin = first + i * B;
    const std::int64_t rows = std::clamp<std::int64_t>(end - begin, 0, B);
    if (rows > 0) val_data_->read_sequences(begin, rows, inputs.data(), targets.data());
    for (std::int64_t r = rows; r < B; ++r) {
      std::copy(pad_inputs.begin(), pad_inputs.end(), inputs.begin() + r * T);
      std::copy(pad_targets.begin(), pad_targets.end(), targets.begin() + r * T);
    }
    if (!range_.has_embedding) pp.recv(stage_->input(0), pp.rank() - 1);
    stage_->forward(0, inputs.data(), targets.data(), 0.0);
    if (!range_.has_head) pp.send(stage_->output(0), pp.rank() + 1);
    if (range_.has_head) loss_sum += stage_->loss_sum(0, rows);
  }
  // Each tensor-parallel group's loss counted once, every replica's share.
  const bool contributes = range_.has_head && tp_.rank == 0;
  return sum_over_world(contributes ? loss_sum : 0.0) / static_cast<double>(N * T);
}

RunSummary Trainer::evaluate_only() {
  RunSummary summary;
  summary.first_step = start_step_;
  const auto t0 = Clock::now();
  const double loss = validate();
  summary.final_val_loss = summary.best_val_loss = loss;
  summary.best_val_step = start_step_;
  summary.wall_seconds = seconds_since(started_);
  if (is_logger()) {
    const std::string model =
        config_.resume.empty() ? "--init-from " + config_.init_from : "the checkpoint of step " + std::to_string(start_step_);
    char line[160];
    std::snprintf(line, sizeof line, "eval       val loss %.4f over %lld tokens (%lld sequences of %lld) in %.1f s",
                  loss, static_cast<long long>(validation_sequences() * config_.seq_len),
                  static_cast<long long>(validation_sequences()), static_cast<long long>(config_.seq_len),
                  seconds_since(t0));
    out_ << line << ", " << model << std::endl;
    metrics_.record_event({{"event", "eval"},
                           {"step", start_step_},
                           {"val_loss", loss},
                           {"val_tokens", validation_sequences() * config_.seq_len},
                           {"model", config_.resume.empty() ? config_.init_from : config_.resume}});
  }
  return summary;
}

}  // namespace launch
