// Trainer: what a run reports and leaves besides its checkpoints: each
// step's figures, the model in llm.c's format and a sample of generated
// text; and the input checks every rank runs before the first collective.
#include "launch/trainer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>

#include "engine/device.h"
#include "launch/byte_tokenizer.h"
#include "launch/llmc_model.h"
#include "launch/whole_model.h"
#include "model/gpt_params.h"
#include "launch/sampler.h"
#include "parallel/pipeline_schedule.h"

namespace launch {

namespace {
// Creates `dir` if needed and writes, reads back and removes a small file in
// it, so an unwritable or missing folder stops the run before any step
// rather than at its first save.
void probe_writable_dir(const std::filesystem::path& dir, const char* flag) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  ENGINE_CHECK(!error, flag, " '", dir.string(), "': cannot create the folder: ", error.message());
  const std::filesystem::path probe = dir / (".write_probe_" + std::to_string(std::random_device{}()));
  {
    std::ofstream out(probe, std::ios::binary);
    out << "probe";
    out.close();
    ENGINE_CHECK(out.good(), flag, " '", dir.string(), "': cannot write in the folder (", probe.filename().string(),
                 "): ", std::strerror(errno));
  }
  std::filesystem::remove(probe, error);
}
}  // namespace

void check_inputs(const TrainConfig& config) {
  const int T = static_cast<int>(config.seq_len), V = static_cast<int>(config.model.vocab_size);
  DataLoader train(config.train_data, T, V, config.shuffle, config.seed);
  // Validation data is small and read again and again: check every token now
  // rather than find a bad one after the first interval of training. (The
  // training shards are checked as each is first needed, see Trainer::run.)
  if (!config.val_data.empty()) DataLoader(config.val_data, T, V, false, config.seed).verify_all();
  if (!config.checkpoint_dir.empty()) probe_writable_dir(config.checkpoint_dir, "--checkpoint-dir");
  if (!config.log_file.empty()) {
    const std::filesystem::path parent = std::filesystem::path(config.log_file).parent_path();
    probe_writable_dir(parent.empty() ? "." : parent, "--log-file");
  }
  if (!config.init_from.empty()) {
    const model::GptConfig found = read_llmc_config(config.init_from);
    ENGINE_CHECK(found == config.model, "--init-from '", config.init_from, "' holds a model of another shape: ",
                 found.describe(), "; this run's model is ", config.model.describe());
  }
}

StepMetrics Trainer::step_metrics(std::int64_t step, double loss, double norm, double lr, double seconds,
                                  const StepFlops& flops, PeakFlops& peak) {
  const int devices = grid_.world_size();
  StepMetrics m;
  m.step = step + 1;
  m.steps = config_.steps;
  m.loss = loss;
  m.grad_norm = norm;
  m.lr = lr;
  m.step_seconds = seconds;
  m.tokens_per_second = static_cast<double>(config_.batch_tokens) / seconds;
  m.tflops_per_device = flops.model / seconds / devices / 1e12;
  const PeakFlops::Utilization used = peak.utilization(m.step, flops, seconds, devices, is_logger() ? &out_ : nullptr);
  m.mfu = used.mfu;
  m.hfu = used.hfu;
  m.recompute = config_.recompute_mode != model::Recompute::kNone;
  m.peak_memory_bytes = engine::memory_stats(config_.device_type).peak;
  m.peak_rss_bytes = peak_rss_bytes();
  m.parallel = devices > 1;
  m.exposed_comm_seconds = exposed_comm_seconds_;
  if (m.parallel) {
    const parallel::Communicator* embedding = tied_->comm();
    m.bubble_fraction = parallel::bubble_fraction(grid_.pp_size(), batch_.micro_batches());
    m.comm_bytes_tp = sum_over_world(static_cast<double>(comms_.tp->bytes_sent()));
    m.comm_bytes_dp = sum_over_world(static_cast<double>(comms_.dp->bytes_sent()));
    m.comm_bytes_pp = sum_over_world(static_cast<double>(comms_.pp->bytes_sent()) +
                                     (embedding ? static_cast<double>(embedding->bytes_sent()) : 0.0));
  }
  return m;
}

// ---- after the last step ----------------------------------------------------------

void Trainer::write_outputs(RunSummary& summary) {
  if (config_.save_model.empty() && config_.sample_tokens == 0) return;
  // The whole model on rank 0, under any layout: each (tp, pp) position's
  // data-parallel rank 0 downloads its master weights (collective over dp
  // where they are sharded) and sends its slices to rank 0.
  const bool contributes = grid_.dp_rank() == 0;
  std::vector<float> master(contributes ? static_cast<std::size_t>(registry_.total_numel()) : 0);
  data_parallel_->download_master(contributes ? master.data() : nullptr);
  const model::ParamRegistry whole_registry = model::build_gpt_registry(config_.model);
  const std::vector<float> whole =
      gather_whole_model(*host_world_, registry_, contributes ? master.data() : nullptr, whole_registry);
  if (!is_logger()) return;
  if (!config_.save_model.empty()) {
    write_llmc_model(config_.save_model, config_.model, whole_registry, whole.data());
    out_ << "model      written to " << config_.save_model << " (llm.c GPT-2 format)\n";
  }
  if (config_.sample_tokens == 0) return;
  if (grid_.tp_size() == 1 && grid_.pp_size() == 1 && !store_->weights_sharded()) {
    summary.sample = sample_text(*store_);  // already the whole model: no second copy on the device
  } else {
    model::ParamStore store(whole_registry, config_.device_type, config_.precision_mode);
    store.upload_master(whole.data());
    summary.sample = sample_text(store);
  }
  out_ << "sample     ----\n" << summary.sample << "\n----" << std::endl;
}

std::string Trainer::sample_text(const model::ParamStore& store) {
  const model::ActivationShape shape{1, config_.seq_len, model::activation_dtype(config_.precision_mode)};
  model::GptStage sampler(config_.model, store, model::whole_model(config_.model), shape, 1);
  engine::Arena plan = engine::Arena::planning(config_.device_type);
  sampler.allocate(plan);
  engine::Arena arena(config_.device_type, plan.used());
  sampler.allocate(arena);
  ByteTokenizer tokenizer;
  std::vector<std::int32_t> prompt;
  for (std::uint16_t t : tokenizer.encode(config_.sample_prompt)) prompt.push_back(t);
  if (prompt.empty()) prompt.push_back('\n');
  const SamplingOptions options{config_.sample_tokens, config_.temperature, config_.top_k};
  const std::vector<std::int32_t> ids = generate(sampler, config_.model.vocab_size, prompt, options, sampler_rng_);
  return config_.sample_prompt + tokenizer.decode(ids);
}

}  // namespace launch
