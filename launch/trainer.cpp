#include "launch/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <sstream>

#include "engine/device.h"
#include "engine/ops.h"
#include "launch/byte_tokenizer.h"
#include "launch/checkpoint.h"
#include "launch/sampler.h"
#include "model/flops.h"
#include "model/gpt_params.h"
#include "optim/grad_clip.h"

namespace launch {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The node-local rank picks the GPU (one GPU per rank; several ranks share
// one only in correctness runs).
int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

std::vector<optim::ParamSegment> optimizer_segments(const model::ParamRegistry& registry) {
  std::vector<optim::ParamSegment> out;
  for (const model::DecaySegment& s : registry.decay_segments()) out.push_back({s.offset, s.count, s.decay});
  return out;
}

}  // namespace

double measure_cpu_matmul_flops() {
  const std::int64_t n = 1024;
  engine::Buffer a(engine::DeviceType::kCpu, n * n * 4), w(engine::DeviceType::kCpu, n * n * 4),
      o(engine::DeviceType::kCpu, n * n * 4);
  const engine::Tensor ta = a.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  const engine::Tensor tw = w.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  const engine::Tensor to = o.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  engine::ops::fill(ta, 0.5);
  engine::ops::fill(tw, 0.25);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms up caches and threads
    const auto t0 = Clock::now();
    engine::ops::matmul_forward(to, ta, tw, engine::Tensor{});
    if (rep > 0) best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * n * n / best;
}

Trainer::Trainer(const TrainConfig& config, std::ostream& out)
    : config_(config), out_(out), registry_(model::build_gpt_registry(config.model)), metrics_(config.log_file) {
  const model::GptConfig& mc = config.model;
  if (config.device_type == engine::DeviceType::kCuda)
    engine::cuda_set_device(local_rank() % engine::cuda_device_count());

  // Data first: a bad shard should fail before large allocations.
  train_data_ = std::make_unique<DataLoader>(config.train_data, static_cast<int>(config.seq_len),
                                             static_cast<int>(mc.vocab_size), config.shuffle, config.seed);
  if (!config.val_data.empty())
    val_data_ = std::make_unique<DataLoader>(config.val_data, static_cast<int>(config.seq_len),
                                             static_cast<int>(mc.vocab_size), false, config.seed);
  layout_ = BatchLayout{config.batch_tokens / config.seq_len, 1, 0, config.micro_batch};
  layout_.validate();

  store_ = std::make_unique<model::ParamStore>(registry_, config.device_type, config.precision_mode);
  if (!config.init_from.empty()) {
    std::vector<float> host(static_cast<std::size_t>(registry_.total_numel()), 0.0f);
    read_llmc_model(config.init_from, mc, registry_, host.data());
    store_->upload_master(host.data());
  } else {
    store_->initialize(config.seed);
  }

  // Activations: plan the allocation sequence once, then allocate it for real.
  const model::ActivationShape shape{config.micro_batch, config.seq_len, model::activation_dtype(config.precision_mode)};
  stage_ = std::make_unique<model::GptStage>(mc, *store_, model::whole_model(mc), shape, 1);
  engine::Arena plan = engine::Arena::planning(config.device_type);
  stage_->allocate(plan);
  activations_ = engine::Arena(config.device_type, plan.used());
  stage_->allocate(activations_);

  adamw_ = std::make_unique<optim::AdamW>(optim::FlatParams{store_->master(), store_->grads(), store_->working()},
                                          optimizer_segments(registry_), config.adamw);
  sampler_rng_.seed(config.seed);

  const std::size_t master_bytes = store_->master().bytes();
  out_ << config.describe() << "\n"
       << "memory     params " << engine::format_bytes(master_bytes)
       << (store_->working().data() != store_->master().data()
               ? " + working copy " + engine::format_bytes(store_->working().bytes())
               : std::string())
       << ", grads " << engine::format_bytes(store_->grads().bytes()) << ", AdamW state "
       << engine::format_bytes(2 * master_bytes) << ", activations " << engine::format_bytes(activations_.capacity())
       << "\n"
       << "flops      " << model::flops_convention() << "\n";
  if (!config.resume.empty()) resume();
}

Trainer::~Trainer() = default;

nlohmann::json Trainer::run_identity() const {
  // What must not change across a resume for the continuation to be exact.
  return {{"model", config_.model.describe()},
          {"seq_len", config_.seq_len},
          {"batch_tokens", config_.batch_tokens},
          {"seed", config_.seed},
          {"shuffle", config_.shuffle},
          {"train_data", train_data_->fingerprint()}};
}

void Trainer::resume() {
  const std::string dir = resolve_checkpoint(config_.resume, config_.checkpoint_dir);
  const std::size_t n = static_cast<std::size_t>(registry_.total_numel());
  std::vector<float> master(n), m(n), v(n);
  const TrainingState state = load_checkpoint(dir, run_identity(), registry_, {master.data(), m.data(), v.data()});
  ENGINE_CHECK(state.step < config_.steps, "checkpoint '", dir, "' is at step ", state.step,
               ", nothing left to do for --steps ", config_.steps);
  store_->upload_master(master.data());
  const engine::DeviceType host = engine::DeviceType::kCpu;
  engine::ops::copy(adamw_->m(), engine::Tensor(m.data(), adamw_->m().shape(), engine::DType::kF32, host));
  engine::ops::copy(adamw_->v(), engine::Tensor(v.data(), adamw_->v().shape(), engine::DType::kF32, host));
  adamw_->set_steps_taken(state.step);
  if (!state.sampler_rng.empty()) {
    std::istringstream in(state.sampler_rng);
    in >> sampler_rng_;
  }
  start_step_ = state.step;
  out_ << "resumed    from " << dir << " at step " << state.step << "\n";
}

void Trainer::save(std::int64_t steps_done) {
  const std::size_t n = static_cast<std::size_t>(registry_.total_numel());
  std::vector<float> master(n), m(n), v(n);
  store_->download_master(master.data());
  const engine::DeviceType host = engine::DeviceType::kCpu;
  engine::ops::copy(engine::Tensor(m.data(), adamw_->m().shape(), engine::DType::kF32, host), adamw_->m());
  engine::ops::copy(engine::Tensor(v.data(), adamw_->v().shape(), engine::DType::kF32, host), adamw_->v());
  TrainingState state;
  state.step = steps_done;
  state.run = run_identity();
  std::ostringstream rng;
  rng << sampler_rng_;
  state.sampler_rng = rng.str();
  const std::string dir =
      save_checkpoint(config_.checkpoint_dir, state, config_.model, registry_, {master.data(), m.data(), v.data()});
  out_ << "checkpoint " << dir << "\n";
}

double Trainer::peak_flops_per_device() {
  if (config_.peak_tflops > 0) {
    out_ << "peak       " << config_.peak_tflops << " TFLOP/s per device (--peak-tflops)\n";
    return config_.peak_tflops * 1e12;
  }
  if (config_.device_type == engine::DeviceType::kCuda) {
    const std::string name = engine::cuda_device_name(local_rank() % engine::cuda_device_count());
    const double peak = engine::gpu_peak_flops_by_name(name);
    ENGINE_CHECK(peak > 0, "no peak FLOP/s known for GPU '", name, "'; give it with --peak-tflops");
    out_ << "peak       " << peak / 1e12 << " TFLOP/s dense bf16 (" << name << ", from the device table)\n";
    return peak;
  }
  const double peak = measure_cpu_matmul_flops();
  out_ << "peak       " << peak / 1e9 << " GFLOP/s fp32 (measured: best 1024^3 matmul on this CPU)\n";
  return peak;
}

double Trainer::train_step(std::int64_t step) {
  const std::int64_t B = config_.micro_batch, T = config_.seq_len;
  const int micro_batches = layout_.micro_batches();
  // Each token's loss enters the objective with weight 1/(tokens per step).
  const double grad_scale = 1.0 / static_cast<double>(B * T * micro_batches * layout_.dp_size);
  store_->zero_grads();
  double loss_sum = 0.0;
  for (int micro = 0; micro < micro_batches; ++micro) {
    train_data_->read_sequences(layout_.first_sequence(step, micro), B, inputs_.data(), targets_.data());
    stage_->forward(0, inputs_.data(), targets_.data(), grad_scale);
    loss_sum += stage_->loss_sum(0);
    stage_->backward(0);
  }
  return loss_sum * grad_scale;
}

double Trainer::validate() {
  const std::int64_t B = config_.micro_batch, T = config_.seq_len;
  const std::int64_t batches =
      std::max<std::int64_t>(1, std::min(config_.val_batches, val_data_->sequences_per_epoch() / B));
  double loss_sum = 0.0;
  for (std::int64_t i = 0; i < batches; ++i) {
    val_data_->read_sequences(i * B, B, inputs_.data(), targets_.data());
    stage_->forward(0, inputs_.data(), targets_.data(), 0.0);
    loss_sum += stage_->loss_sum(0);
  }
  return loss_sum / static_cast<double>(batches * B * T);
}

std::string Trainer::sample_text() {
  const model::ActivationShape shape{1, config_.seq_len, model::activation_dtype(config_.precision_mode)};
  model::GptStage sampler(config_.model, *store_, model::whole_model(config_.model), shape, 1);
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

RunSummary Trainer::run() {
  RunSummary summary;
  summary.first_step = start_step_;
  const std::int64_t B = config_.micro_batch, T = config_.seq_len;
  inputs_.assign(static_cast<std::size_t>(B * T), 0);
  targets_.assign(static_cast<std::size_t>(B * T), 0);
  const double peak = peak_flops_per_device();
  const double step_flops = model::training_flops_per_step(config_.model, config_.batch_tokens / T, T);
  const int devices = 1;

  for (std::int64_t step = start_step_; step < config_.steps; ++step) {
    const auto t0 = Clock::now();
    const double loss = train_step(step);
    ENGINE_CHECK(std::isfinite(loss), "training loss is ", loss, " at step ", step + 1,
                 "; stopping without saving (try a lower --lr or --grad-clip)");
    const double norm = std::sqrt(optim::grad_sum_of_squares(store_->grads()));
    const double lr = config_.lr_schedule.at(step);
    adamw_->step(lr, optim::clip_factor(norm, config_.grad_clip));
    engine::device_synchronize();
    const double seconds = seconds_since(t0);

    StepMetrics m;
    m.step = step + 1;
    m.steps = config_.steps;
    m.loss = loss;
    m.grad_norm = norm;
    m.lr = lr;
    m.step_seconds = seconds;
    m.tokens_per_second = static_cast<double>(config_.batch_tokens) / seconds;
    m.tflops_per_device = step_flops / seconds / devices / 1e12;
    m.mfu = step_flops / (seconds * devices * peak);
    m.peak_memory_bytes = engine::memory_stats(config_.device_type).peak;
    m.peak_rss_bytes = peak_rss_bytes();
    const bool last = step + 1 == config_.steps;
    if (val_data_ && ((config_.val_interval > 0 && (step + 1) % config_.val_interval == 0) || last)) {
      m.val_loss = validate();
      summary.final_val_loss = *m.val_loss;
    }
    out_ << MetricsLog::format_line(m) << std::endl;
    metrics_.record(m);
    summary.losses.push_back(loss);
    if (!config_.checkpoint_dir.empty() &&
        ((config_.checkpoint_interval > 0 && (step + 1) % config_.checkpoint_interval == 0) || last))
      save(step + 1);
  }
  if (!config_.save_model.empty()) {
    std::vector<float> master(static_cast<std::size_t>(registry_.total_numel()));
    store_->download_master(master.data());
    write_llmc_model(config_.save_model, config_.model, registry_, master.data());
    out_ << "model      written to " << config_.save_model << " (llm.c GPT-2 format)\n";
  }
  if (config_.sample_tokens > 0) {
    summary.sample = sample_text();
    out_ << "sample     ----\n" << summary.sample << "\n----" << std::endl;
  }
  return summary;
}

}  // namespace launch
