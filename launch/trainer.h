// The training loop of the `train` program: builds the model, optimizer and
// data from a resolved TrainConfig, then runs steps, validation, checkpoints
// and the final sample, logging every step.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <memory>
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

namespace launch {

struct RunSummary {
  std::vector<double> losses;  // training loss of each step this run took
  std::int64_t first_step = 0; // step the run started from (non-zero after resume)
  double final_val_loss = -1;  // -1 when there was no validation
  std::string sample;          // generated text, when asked for
};

class Trainer {
 public:
  // `out` receives the human-readable log (stdout in the program).
  Trainer(const TrainConfig& config, std::ostream& out);
  ~Trainer();
  RunSummary run();

  const model::ParamStore& params() const { return *store_; }
  const optim::AdamW& optimizer() const { return *adamw_; }

 private:
  double train_step(std::int64_t step);  // returns the mean loss
  double validate();
  void save(std::int64_t steps_done);
  void resume();
  nlohmann::json run_identity() const;
  double peak_flops_per_device();
  std::string sample_text();

  const TrainConfig& config_;
  std::ostream& out_;
  model::ParamRegistry registry_;
  std::unique_ptr<model::ParamStore> store_;
  std::unique_ptr<model::GptStage> stage_;
  engine::Arena activations_;
  std::unique_ptr<optim::AdamW> adamw_;
  std::unique_ptr<DataLoader> train_data_, val_data_;
  BatchLayout layout_{};
  std::vector<std::int32_t> inputs_, targets_;  // (B,T) host staging
  std::mt19937_64 sampler_rng_;
  std::int64_t start_step_ = 0;
  MetricsLog metrics_;
};

// Peak fp32 FLOP/s of this CPU as our matmul op achieves it (a few
// 1024^3 GEMMs, best time): the CPU's MFU denominator when no peak is given.
double measure_cpu_matmul_flops();

}  // namespace launch
