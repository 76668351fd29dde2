// The training loop of the `train` program: builds this rank's part of the
// model (its pipeline stage, its tensor-parallel slices), the optimizer, data
// and communicators from a resolved TrainConfig, then runs steps, validation,
// checkpoints and the final sample, logging every step on rank 0.
//
// One step (DESIGN.md, "One training step, as data"): each data-parallel rank
// reads its slice of the global batch as micro-batches; the pipeline schedule
// (1F1B by default) runs them through the stages; during the last
// micro-batch's backward, data-parallel gradient buckets start reducing while
// earlier layers still compute; the tied embedding's two copies (first and
// last stage) are summed; the global gradient norm is taken over every axis
// counting replicated tensors once; AdamW updates; the step's figures are
// reduced to rank 0 and logged.
//
// With --optimizer onebit-adam (optim/onebit_adam.h) the steps before
// --freeze-step are exactly the above. From the freeze step on, the
// data-parallel gradient reduction is skipped (only the tied embedding's
// copies are still summed, on local gradients), the global norm is taken over
// the local gradients (see global_grad_norm), and OneBitAdam averages the
// momentum over dp with the 1-bit compressed all-reduce instead.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "engine/buffer.h"
#include "launch/data_loader.h"
#include "launch/metrics.h"
#include "launch/train_config.h"
#include "model/gpt_stage.h"
#include "model/param_registry.h"
#include "model/param_store.h"
#include "optim/adamw.h"
#include "optim/onebit_adam.h"
#include "parallel/communicator.h"
#include "parallel/grad_buckets.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"
#include "parallel/zero_units.h"

namespace launch {

struct TrainingState;  // launch/checkpoint.h

// Bytes this rank holds, by kind (launch/trainer.cpp prints them at
// start-up; the ZeRO memory test compares them across dp).
struct MemoryAccount {
  std::size_t weights = 0;       // master + working copy (this rank's chunks under ZeRO-3)
  std::size_t grads = 0;         // gradient buffer (this rank's chunks under ZeRO-2/3)
  std::size_t optimizer = 0;     // moments (+ 1-bit Adam's error buffers)
  std::size_t activations = 0;   // the activation arena
  std::size_t zero_staging = 0;  // ZeRO-2/3 gather and reduce buffers allocated so far (parallel/zero_units.h)
};

struct RunSummary {
  std::vector<double> losses;  // training loss of each step this run took (the same on every rank)
  std::int64_t first_step = 0; // step the run started from (non-zero after resume)
  double final_val_loss = -1;  // -1 when there was no validation
  std::string sample;          // generated text, when asked for (rank 0)
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
  // --optimizer adamw only (onebit_optimizer() otherwise).
  const optim::AdamW& optimizer() const {
    ENGINE_CHECK(adamw_ != nullptr, "Trainer::optimizer(): this run uses --optimizer onebit-adam");
    return *adamw_;
  }
  const optim::OneBitAdam* onebit_optimizer() const { return onebit_.get(); }  // null unless onebit-adam
  const parallel::ProcessGrid& grid() const { return grid_; }
  int zero_stage() const { return zero_stage_; }  // 0 when dp = 1 (nothing to shard)
  MemoryAccount memory_account() const;
  // The whole master weights of this rank's (tp, pp) part as f32, laid out
  // by registry(). Under ZeRO it is collective over the data-parallel group
  // (the chunks are gathered): every rank of the group must call it.
  void download_master(float* host);

 private:
  class PipelineStage;
  double train_step(std::int64_t step);  // returns the global mean loss
  void reduce_gradients();  // waits for the data-parallel and tied-embedding reductions
  double global_grad_norm();
  bool compressing() const { return onebit_ && onebit_->compressing(); }  // this step is a 1-bit Adam compression step
  std::vector<optim::CompressionGroup> compression_groups() const;
  void optimizer_step(double lr, double norm);
  const engine::Tensor& optimizer_m() const { return adamw_ ? adamw_->m() : onebit_->m(); }
  const engine::Tensor& optimizer_v() const { return adamw_ ? adamw_->v() : onebit_->v(); }
  bool momentum_sharded() const { return zero_sharded() && !onebit_; }  // 1-bit Adam keeps m whole
  nlohmann::json onebit_layout() const;  // what its per-rank state depends on
  void resume_onebit(const std::string& dir, const TrainingState& state);
  double validate();
  void save(std::int64_t steps_done);
  void resume();
  nlohmann::json run_identity() const;
  double peak_flops_per_device();
  std::string sample_text(const model::ParamStore& store);
  // t (laid out by registry(), or this rank's ZeRO shard of it when
  // `sharded`) as whole f32 on the host; collective under ZeRO.
  void gather_to_host(const engine::Tensor& t, bool sharded, float* host);
  double sum_over_world(double local);
  bool is_logger() const { return grid_.world_rank() == 0; }
  bool zero_sharded() const { return !owned_.empty(); }

  const TrainConfig& config_;
  std::ostream& out_;
  parallel::ProcessGrid grid_;
  parallel::GridComms comms_;                               // device traffic (MPI or NCCL)
  std::unique_ptr<parallel::Communicator> host_world_;      // host scalars, checkpoint coordination (MPI)
  std::unique_ptr<parallel::Communicator> embedding_comm_;  // first + last stage, for the tied wte (pp > 1)
  model::StageRange range_;
  model::TensorParallel tp_;
  model::ParamRegistry registry_;
  std::unique_ptr<model::ParamStore> store_;
  int zero_stage_ = 0;
  std::vector<parallel::FlatRange> unit_ranges_;        // the registry's units (ZeRO-2/3 shard by them)
  std::unique_ptr<parallel::ZeroUnits> zero_units_;     // ZeRO-2/3; before stage_, which points to it
  std::unique_ptr<model::GptStage> stage_;
  engine::Arena activations_;
  std::unique_ptr<optim::AdamW> adamw_;        // --optimizer adamw
  std::unique_ptr<optim::OneBitAdam> onebit_;  // --optimizer onebit-adam
  std::unique_ptr<parallel::GradBuckets> grad_buckets_;
  std::vector<std::pair<std::int64_t, std::int64_t>> norm_ranges_;  // flat ranges counted once in the norm
  // The same over the whole local buffer (under ZeRO norm_ranges_ keeps only
  // the owned chunks): 1-bit Adam's compression stage norms local gradients.
  std::vector<std::pair<std::int64_t, std::int64_t>> local_norm_ranges_;
  bool onebit_m_partial_ = false;  // ZeRO warm-up: only the owned chunks of the whole momentum are current
  std::vector<parallel::ShardChunk> owned_;  // ZeRO: the chunks whose optimizer state this rank holds
  std::unique_ptr<DataLoader> train_data_, val_data_;
  BatchLayout layout_{};
  std::vector<parallel::Action> schedule_;
  std::unique_ptr<PipelineStage> pipeline_;
  std::mt19937_64 sampler_rng_;
  std::int64_t start_step_ = 0;
  double exposed_comm_seconds_ = 0;  // last step's wait in reduce_gradients()
  MetricsLog metrics_;
};

// Peak fp32 FLOP/s of this CPU as our matmul op achieves it (a few
// 1024^3 GEMMs, best time): the CPU's MFU denominator when no peak is given.
double measure_cpu_matmul_flops();

// Checks what can be checked without communicating: the data shards open and
// hold in-vocabulary headers, an --init-from file has the configured shape.
// Every rank runs it before the job's first collective, so a bad input is
// reported once and every rank exits (train_main.cpp).
void check_inputs(const TrainConfig& config);

}  // namespace launch
