// Trainer: what a run reports and leaves besides its checkpoints: each
// step's figures, the model in llm.c's format and a sample of generated
// text, and the end-of-run summary.
#include "launch/run/trainer.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <ostream>
#include <random>

#include "engine/device.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/byte_tokenizer.h"
#include "launch/data/llmc_tokenizer.h"
#include "launch/formats/llmc_model.h"
#include "launch/formats/model_files.h"
#include "launch/resilience/fault_injection.h"
#include "launch/run/run_folder.h"
#include "launch/run/sampler.h"
#include "launch/run/whole_model.h"
#include "model/gpt_params.h"
#include "parallel/pipeline_schedule.h"

namespace launch {

namespace {
std::optional<HfSpecialToken> special_token(const BpeTokenizer& bpe, const std::string& text) {
  const std::optional<std::int32_t> id = bpe.token_to_id(text);
  if (!id) return std::nullopt;
  return HfSpecialToken{*id, text};
}
}  // namespace

StepMetrics Trainer::step_metrics(std::int64_t step, double loss, double norm, double lr, double seconds,
                                  const StepFlops& flops, PeakFlops& peak) {
  const int devices = grid_.world_size();
  // Read before this function's own reductions over the world add to it.
  const double world_wait = host_world_->wait_seconds();
  StepMetrics m;
  m.step = step + 1;
  m.steps = config_.steps;
  m.loss = loss;
  m.grad_norm = norm;
  m.lr = lr;
  m.step_seconds = seconds;
  m.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (step == start_step_) {
    first_step_seconds_ = seconds;
  } else {
    later_steps_seconds_ += seconds;
    ++later_steps_;
  }
  const double mean_step = later_steps_ > 0 ? later_steps_seconds_ / static_cast<double>(later_steps_) : first_step_seconds_;
  m.eta_seconds = mean_step * static_cast<double>(config_.steps - m.step);
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
    m.bubble_fraction = bubble_theory_;
    m.comm_bytes_tp = sum_over_world(static_cast<double>(comms_.tp->bytes_sent()));
    m.comm_bytes_dp = sum_over_world(static_cast<double>(comms_.dp->bytes_sent()));
    m.comm_bytes_pp = sum_over_world(static_cast<double>(comms_.pp->bytes_sent()) +
                                     (embedding ? static_cast<double>(embedding->bytes_sent()) : 0.0));
    // Means over ranks (metrics.h), summed in one reduction.
    double waits[4] = {comms_.tp->wait_seconds(), comms_.pp->wait_seconds() + (embedding ? embedding->wait_seconds() : 0.0),
                       comms_.dp->wait_seconds(), world_wait};
    host_world_->all_reduce(engine::Tensor(waits, engine::Shape{4}, engine::DType::kF64, engine::DeviceType::kCpu));
    m.wait_seconds_tp = waits[0] / devices;
    m.wait_seconds_pp = waits[1] / devices;
    m.wait_seconds_dp = waits[2] / devices;
    m.wait_seconds_world = waits[3] / devices;
  }
  return m;
}

// ---- after the last step ----------------------------------------------------------

void Trainer::write_outputs(RunSummary& summary) {
  if (config_.save_model.empty() && config_.save_hf.empty() && config_.sample_tokens == 0) return;
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
  if (!config_.save_hf.empty()) {
    // The run's tokenizer.json goes with the model; llm.c's tokenizer file
    // (decoding only) and the byte tokenizer have none to give.
    HfTokenizer tokenizer;
    if (!config_.tokenizer.empty() && !LlmcTokenizer::is_llmc_file(config_.tokenizer)) {
      tokenizer.tokenizer_json = config_.tokenizer;
      const BpeTokenizer bpe = BpeTokenizer::from_file(config_.tokenizer);
      tokenizer.bos = tokenizer.eos = special_token(bpe, kEndOfText);
      // Llama 3's template starts each document with its own token and its
      // documents end with "<|end_of_text|>" (meta-llama's config.json).
      if (bpe.document_start_from_template() && !bpe.document_start().empty()) {
        const std::int32_t first = bpe.document_start().front();
        tokenizer.bos = HfSpecialToken{first, bpe.decode(std::span<const std::int32_t>(&first, 1))};
        if (auto end = special_token(bpe, "<|end_of_text|>")) tokenizer.eos = end;
      }
    }
    write_hf_model(config_.save_hf, config_.model, whole_registry, whole.data(), parse_hf_dtype(config_.save_hf_dtype),
                   tokenizer);
    out_ << "model      written to " << config_.save_hf << " (Hugging Face " << hf_architecture(config_.model)
         << ": model.safetensors, config.json, "
         << "generation_config.json" << (tokenizer.tokenizer_json.empty() ? "" : ", tokenizer.json, tokenizer_config.json")
         << ", " << config_.save_hf_dtype << ")\n";
    if (tokenizer.tokenizer_json.empty())
      out_ << "model      " << config_.save_hf << " has no tokenizer: "
           << (config_.tokenizer.empty()
                   ? "the run had no --tokenizer; give `train --tokenizer FILE`, the tokenizer.json its shards "
                     "were made with (`prepare --tokenizer FILE` or `--train-tokenizer N`), to export it with the "
                     "model\n"
                   : "llm.c's tokenizer file only decodes; give `train --tokenizer` the tokenizer.json the "
                     "shards were made with to export it with the model\n");
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
  const SamplingOptions options{config_.sample_tokens, config_.temperature, config_.top_k};
  std::vector<std::int32_t> prompt;
  if (!config_.tokenizer.empty() && LlmcTokenizer::is_llmc_file(config_.tokenizer)) {
    // Decoding only (the configuration refused any prompt but the default): start a document.
    const LlmcTokenizer tokenizer = LlmcTokenizer::from_file(config_.tokenizer);
    prompt.push_back(tokenizer.end_of_text());
    return config_.sample_prompt + tokenizer.decode(generate(sampler, config_.model.vocab_size, prompt, options, sampler_rng_));
  }
  if (!config_.tokenizer.empty()) {
    const BpeTokenizer tokenizer = BpeTokenizer::from_file(config_.tokenizer);
    prompt = tokenizer.encode(config_.sample_prompt);
    // An empty prompt starts a document as prepare does (<|endoftext|>, Llama 3's <|begin_of_text|>).
    if (prompt.empty()) prompt = tokenizer.document_start();
    if (prompt.empty()) prompt.push_back(tokenizer.encode("\n").at(0));
    const std::vector<std::int32_t> ids = generate(sampler, config_.model.vocab_size, prompt, options, sampler_rng_);
    return config_.sample_prompt + tokenizer.decode(ids);
  }
  ByteTokenizer tokenizer;
  for (std::uint16_t t : tokenizer.encode(config_.sample_prompt)) prompt.push_back(t);
  if (prompt.empty()) prompt.push_back('\n');
  const std::vector<std::int32_t> ids = generate(sampler, config_.model.vocab_size, prompt, options, sampler_rng_);
  return config_.sample_prompt + tokenizer.decode(ids);
}

// ---- the summary -------------------------------------------------------------------

void Trainer::add_to_summary(RunSummary& summary, const StepMetrics& m) {
  summary.losses.push_back(m.loss);
  if (!m.skipped) summary.tokens += config_.batch_tokens;  // a skipped step trained nothing
  summary.train_seconds += m.step_seconds;
  if (m.val_loss) {
    summary.final_val_loss = *m.val_loss;
    if (summary.best_val_loss < 0 || *m.val_loss < summary.best_val_loss) {
      summary.best_val_loss = *m.val_loss;
      summary.best_val_step = m.step;
    }
  }
  // The first step of a run warms caches and allocators up: the means leave
  // it out once there is another.
  if (m.step - 1 == start_step_) {
    summary.mean_mfu = m.mfu;
    summary.mean_hfu = m.hfu;
    return;
  }
  mfu_sum_ += m.mfu;
  hfu_sum_ += m.hfu;
  ++mfu_steps_;
  summary.mean_mfu = mfu_sum_ / static_cast<double>(mfu_steps_);
  summary.mean_hfu = hfu_sum_ / static_cast<double>(mfu_steps_);
}

namespace {
std::string format_count(double n) {
  char text[32];
  if (n >= 1e9) std::snprintf(text, sizeof text, "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(text, sizeof text, "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(text, sizeof text, "%.1fk", n / 1e3);
  else std::snprintf(text, sizeof text, "%.0f", n);
  return text;
}

std::string format_duration(double seconds) {
  char text[48];
  const long long s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm%02llds", s / 3600, s / 60 % 60, s % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, seconds >= 1 ? "%.1f s" : "%.3f s", seconds);
  return text;
}
}  // namespace

void Trainer::report_summary(RunSummary& summary) {
  summary.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (!is_logger()) return;
  if (summary.losses.empty()) {
    // A restart of a finished run, or a stop before the first step: nothing
    // to add, and the summary an earlier attempt wrote stays as it was.
    out_ << "summary    no step taken this run ("
         << (start_step_ >= config_.steps ? "it had already finished at step " + std::to_string(start_step_)
                                          : "stopped before step " + std::to_string(start_step_ + 1))
         << ")" << std::endl;
    return;
  }
  const std::int64_t steps_done = start_step_ + static_cast<std::int64_t>(summary.losses.size());
  const double tokens_per_second = summary.train_seconds > 0 ? summary.tokens / summary.train_seconds : 0.0;
  nlohmann::ordered_json outputs;
  const RunPaths paths = run_paths(config_);
  if (!paths.config.empty()) outputs["config"] = paths.config;
  if (!config_.log_file.empty()) outputs["metrics"] = config_.log_file;
  if (!paths.text_log.empty()) outputs["log"] = paths.text_log;
  if (!paths.summary.empty()) outputs["summary"] = paths.summary;
  if (!config_.checkpoint_dir.empty() && last_saved_step_ >= 0)
    outputs["checkpoint"] = (std::filesystem::path(config_.checkpoint_dir) / checkpoint_files::step_dir_name(last_saved_step_)).string();
  if (!config_.save_model.empty() && summary.exit_code == kExitDone) outputs["model"] = config_.save_model;
  if (!config_.save_hf.empty() && summary.exit_code == kExitDone) outputs["hf_model"] = config_.save_hf;

  nlohmann::ordered_json record = {{"event", "summary"},
                                   {"status", summary.exit_code == kExitDone ? "done" : "stopped"},
                                   {"first_step", summary.first_step},
                                   {"last_step", steps_done},
                                   {"steps", config_.steps},
                                   {"tokens", summary.tokens},
                                   {"wall_s", summary.wall_seconds},
                                   {"train_s", summary.train_seconds},
                                   {"tokens_per_s", tokens_per_second},
                                   {"mean_mfu", summary.mean_mfu},
                                   {"mean_hfu", summary.mean_hfu}};
  if (!summary.losses.empty()) record["final_loss"] = summary.losses.back();
  if (summary.best_val_loss >= 0) {
    record["best_val_loss"] = summary.best_val_loss;
    record["best_val_step"] = summary.best_val_step;
    record["final_val_loss"] = summary.final_val_loss;
  }
  record["outputs"] = outputs;

  char line[256];
  std::snprintf(line, sizeof line,
                "summary    %s after step %lld of %lld: %s and %s tokens this run, wall %s (steps %s)",
                summary.exit_code == kExitDone ? "done" : "stopped", static_cast<long long>(steps_done),
                static_cast<long long>(config_.steps),
                counted(static_cast<std::int64_t>(summary.losses.size()), "step").c_str(),
                format_count(static_cast<double>(summary.tokens)).c_str(),
                format_duration(summary.wall_seconds).c_str(), format_duration(summary.train_seconds).c_str());
  out_ << line << "\n";
  if (!summary.losses.empty()) {
    char hfu[32] = "";
    if (config_.recompute_mode != model::Recompute::kNone)
      std::snprintf(hfu, sizeof hfu, ", HFU %.1f%%", summary.mean_hfu * 100.0);
    std::snprintf(line, sizeof line, "           mean %.0f tok/s, MFU %.1f%%%s%s; final loss %.4f", tokens_per_second,
                  summary.mean_mfu * 100.0, hfu, mfu_steps_ > 0 ? " (steps after the first)" : "",
                  summary.losses.back());
    out_ << line << "\n";
    if (!config_.auto_layout.chosen.empty() && tokens_per_second > 0) {
      // The planner's prediction beside what the chosen layout measured.
      const double predicted = config_.auto_layout.predicted_step_seconds;
      const double measured = static_cast<double>(config_.batch_tokens) / tokens_per_second;
      std::snprintf(line, sizeof line, "           layout auto: predicted %.1f ms/step, measured %.1f ms (%+.1f%%)",
                    predicted * 1e3, measured * 1e3, (predicted / measured - 1.0) * 100.0);
      out_ << line << "\n";
      record["auto_layout"] = {{"layout", config_.auto_layout.chosen},
                               {"predicted_step_s", predicted},
                               {"measured_step_s", measured}};
    }
  }
  if (summary.best_val_loss >= 0) {
    std::snprintf(line, sizeof line, "           val loss best %.4f (step %lld%s), final %.4f", summary.best_val_loss,
                  static_cast<long long>(summary.best_val_step), summary.first_step > 0 ? ", since the resume" : "",
                  summary.final_val_loss);
    out_ << line << "\n";
  }
  for (const auto& [what, where] : outputs.items())
    out_ << "           " << what << std::string(what.size() < 11 ? 11 - what.size() : 1, ' ')
         << where.get<std::string>() << "\n";
  out_ << std::flush;
  metrics_.record_event(nlohmann::json(record));
  if (paths.summary.empty()) return;
  try {  // the run is done: a summary that cannot be written is not worth failing it
    write_file_atomically(paths.summary,
                          record.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
  } catch (const std::exception& e) {
    std::cerr << "warning: " << e.what() << std::endl;
  }
}

}  // namespace launch
