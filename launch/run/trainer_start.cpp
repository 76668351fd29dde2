// What the trainer does before step 1 besides building its parts (trainer.cpp):
// the initial weights (seeded, or --init-from), and what it checks and says:
// the layout as the memory plan sees it (model/memory_plan.h), a run refused
// before anything is allocated when the plan does not fit its GPU or its
// node's host memory, the bytes
// planned against those allocated, the configuration, and where validation
// reads and outputs go.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "engine/device.h"
#include "launch/formats/model_files.h"
#include "launch/hardware/host_memory.h"
#include "launch/resilience/job_error.h"
#include "launch/resilience/rank_agreement.h"
#include "launch/run/optimizer_setup.h"
#include "launch/run/run_folder.h"
#include "launch/run/trainer.h"
#include "model/flops.h"
#include "model/gpt_params.h"

namespace launch {

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

namespace {

// "[0, 2)", or "[0, 1) [4, 5)" for a rank's interleaved chunks.
std::string layers_of(const std::vector<model::StageRange>& chunks) {
  std::string out;
  for (const model::StageRange& c : chunks)
    out += (out.empty() ? "[" : " [") + std::to_string(c.first_layer) + ", " + std::to_string(c.last_layer) + ")";
  return out;
}

}  // namespace

model::ParallelLayout Trainer::parallel_layout() const {
  model::ParallelLayout l;
  l.tp = grid_.tp_size();
  l.pp = grid_.pp_size();
  l.dp = grid_.dp_size();
  l.zero = zero_stage(config_, grid_);
  l.sequence_parallel = config_.sequence_parallel;
  l.recompute = config_.recompute_mode;
  l.schedule = parallel::parse_schedule(config_.pipeline_schedule);
  l.virtual_stages = config_.virtual_stages;
  l.micro_batch = config_.micro_batch;
  l.micro_batches = batch_.micro_batches();
  l.seq_len = config_.seq_len;
  l.precision = config_.precision_mode;
  l.device = config_.device_type;
  l.fp8_weight_copies = keeps_fp8_weight_copies();
  l.fp8_matmuls = config_.matmul_format == engine::ops::MatmulFormat::kFp8E4M3;
  l.nccl = config_.comm_backend() == parallel::CommBackend::kNccl;  // the test double's staging is host memory
  if (l.nccl) l.nccl_buffers = parallel::NcclBufferSizes::from_environment();
  return l;
}

bool Trainer::keeps_fp8_weight_copies() const {
  return config_.matmul_format == engine::ops::MatmulFormat::kFp8E4M3 && config_.fp8_weight_cache &&
         zero_stage(config_, grid_) < 3;
}

model::RankMemory Trainer::planned_memory_before_allocating() const {
  return model::plan_stage_memory(config_.model, parallel_layout(), grid_.pp_rank());
}

void Trainer::refuse_if_too_big(const model::RankMemory& planned) const {
  // A GPU holds its rank's bytes; on the CPU the ranks of one node share its
  // memory, so their plans are summed over the node (MPI_COMM_TYPE_SHARED).
  const bool gpu = config_.device_type == engine::DeviceType::kCuda;
  std::size_t needed = planned.total(), available = 0;
  int node_ranks = 1;
  if (gpu) {
    available = gpu_free_before_comms_;  // NCCL's own memory is in the plan (communication)
  } else {
    available = host_available_bytes();
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(host_world_->comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    unsigned long long mine = needed, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node);
    MPI_Comm_size(node, &node_ranks);
    MPI_Comm_free(&node);
    needed = static_cast<std::size_t>(sum);
  }
  std::string error;
  // 0: not known (no /proc/meminfo, no free-page count): nothing to refuse against.
  if (available > 0 && needed > available) {
    std::ostringstream what;
    what << "this layout needs " << engine::format_bytes(needed) << " (" << needed << " bytes) "
         << (gpu ? "on GPU " + std::to_string(gpu_) : "of host memory")
         << (node_ranks > 1 ? " for this node's " + std::to_string(node_ranks) + " ranks" : std::string())
         << " (rank " << grid_.world_rank() << ": parameters " << engine::format_bytes(planned.weights)
         << ", gradients " << engine::format_bytes(planned.grads) << ", optimizer state "
         << engine::format_bytes(planned.optimizer) << ", activations " << engine::format_bytes(planned.activations)
         << ", ZeRO buffers " << engine::format_bytes(planned.staging)
         << (planned.communication > 0 ? ", NCCL's buffers (estimate) " + engine::format_bytes(planned.communication)
                                       : std::string())
         << ") but only "
         << engine::format_bytes(available) << (gpu ? " are free" : " are available (MemAvailable)")
         << ": use more ranks, ZeRO, recomputation, a smaller micro-batch or model (build/launch/plan predicts each)";
    error = what.str();
  }
  // Every rank reaches this check: the first refusal is the job's, printed
  // once, and a bad input that no restart helps.
  error = first_error(*host_world_, error);
  if (!error.empty()) throw JobError(kExitBadInput, error);
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
  for (const auto& stage : stages_) a.weights += stage->fp8_weight_copy_bytes();
  a.grads = store_->grads().bytes();
  a.optimizer = optimizer_->state_bytes();
  a.activations = activations_.capacity();
  a.staging = data_parallel_->staging_bound();
  // NCCL allocates its own (lazily, at a communicator's first use): the plan's estimate stands for it.
  a.communication = model::nccl_buffer_bytes(config_.model, parallel_layout(), grid_.pp_rank());
  return a;
}

void Trainer::report_start() {
  // Bytes each rank holds, as laid out for this layout before step 1; the
  // largest over all ranks is what must fit on one device.
  if (is_logger() && !config_.eval_only && config_.warmup_steps > config_.steps)
    out_ << "warning    --warmup-steps " << config_.warmup_steps << " is longer than the run's --steps "
         << config_.steps << ": the learning rate ends at " << config_.lr_schedule.at(config_.steps - 1)
         << ", short of --lr " << config_.lr << "\n";
  // 1-bit Adam divides by the variance frozen at --freeze-step for the rest of
  // the run (optim/onebit_adam.h); frozen before its moving average spans two
  // of its time constants, 1 / (1 - beta2) steps, it still holds the large
  // gradients of the first steps. Measured (RESULTS.md, "After the freeze
  // step"): frozen at 10 or 40 of 600 steps (beta2 0.95) the loss ends 1.3 and
  // 0.4 nats above AdamW's, frozen at 120 below it.
  const double variance_settles = 2.0 / (1.0 - config_.beta2);
  if (is_logger() && config_.onebit && static_cast<double>(config_.freeze_step) < variance_settles)
    out_ << "warning    --freeze-step " << config_.freeze_step << " freezes Adam's variance before it settles (about "
         << static_cast<std::int64_t>(std::ceil(variance_settles)) << " steps at beta2 " << config_.beta2
         << "); 1-bit Adam then trails AdamW (Tang et al. 2021 freeze after 15-20% of training)\n";
  if (is_logger())
    out_ << config_.describe() << "\n"
         << "rank 0     " << grid_.describe() << ", layers " << layers_of(chunks_) << "\n";
  int slots = 0;  // summed over the chunks (each of 1/v of the layers)
  for (const auto& stage : stages_) slots += stage->slots();
  const MemoryNotes notes{store_->working().data() != store_->master().data(), slots,
                          static_cast<int>(stages_.size()), config_.recompute_mode};
  memory_ = report_memory(is_logger() ? &out_ : nullptr, *host_world_, planned_memory(), allocated_memory(),
                          *data_parallel_, *optimizer_, notes);
  if (!config_.eval_only) metrics_.record_event(memory_.event());
  // The FLOP convention is MFU's, which only training steps report.
  if (is_logger() && !config_.eval_only) out_ << "flops      " << model::flops_convention(config_.attention_flops_mode, config_.model) << "\n";
  if (is_logger()) report_paths();
}

void Trainer::report_paths() {
  if (val_data_) {
    const std::int64_t n = validation_sequences();
    out_ << "validation " << n * config_.seq_len << " tokens (the first " << counted(n, "sequence") << " of " << config_.seq_len
         << ") of " << config_.val_data;
    if (n < config_.val_tokens / config_.seq_len)
      out_ << ": all it holds, fewer than --val-tokens " << config_.val_tokens;
    out_ << (config_.eval_only ? "" : config_.val_interval > 0 ? ", every " + counted(config_.val_interval, "step") + " and at the end" : ", at the end") << "\n";
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

}  // namespace launch
