#include "launch/run/train_config.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/llmc_tokenizer.h"
#include "launch/formats/llmc_model.h"
#include "launch/formats/model_files.h"
#include "launch/run/auto_layout.h"
#include "model/partition.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"

namespace launch {

namespace {

// The largest activation of one micro-batch, in bytes: B x T x the widest of
// the MLP, the padded vocabulary (logits) and the heads' T x T attention
// scores, x 8 bytes (fp64). Past 2^48 bytes (256 TiB, more than any machine
// holds) it is refused here, in one line, so that every size the engine
// derives from it (x layers, x slots, x ranks) stays far inside int64 instead
// of overflowing (undefined behaviour) before the memory plan could refuse it.
void check_sizes_fit(const TrainConfig& c) {
  constexpr std::int64_t kMaxActivationBytes = std::int64_t{1} << 48;
  const model::GptConfig& m = c.model;
  const std::int64_t widest = std::max({m.fc_width(), m.qkv_width(), m.padded_vocab(), m.n_head * c.seq_len, m.n_embd});
  std::int64_t bytes = 0;
  const bool overflow = __builtin_mul_overflow(c.micro_batch, c.seq_len, &bytes) ||
                        __builtin_mul_overflow(bytes, widest, &bytes) ||
                        __builtin_mul_overflow(bytes, std::int64_t{8}, &bytes);
  ENGINE_CHECK(!overflow && bytes <= kMaxActivationBytes, "--micro-batch ", c.micro_batch, " x --seq-len ", c.seq_len,
               " x ", widest, " (the model's widest activation) x 8 bytes overflows the sizes the engine can hold "
               "(at most 2^48 bytes): the micro-batch is far too large");
}

// The floating-point flags and the fields they set: checked for finiteness,
// and written exactly by resolved_config_json (CLI11 would print them with
// six significant digits).
std::vector<std::pair<const char*, double*>> floating_options(TrainConfig& c) {
  return {{"lr", &c.lr},
          {"min-lr-ratio", &c.min_lr_ratio},
          {"weight-decay", &c.weight_decay},
          {"beta1", &c.beta1},
          {"beta2", &c.beta2},
          {"adam-eps", &c.adam_eps},
          {"grad-clip", &c.grad_clip},
          {"bucket-mb", &c.bucket_mb},
          {"peak-tflops", &c.peak_tflops},
          {"temperature", &c.temperature},
          {"collective-timeout", &c.collective_timeout},
          {"calibrate-seconds", &c.calibrate_seconds}};
}

}  // namespace

void TrainConfig::resolve(int cuda_devices, int world) {
  world_size = world;
  // A run folder: what is not named elsewhere goes into it.
  // (Only ever set, never cleared: resolve() may run again on a resolved config.)
  if (!run_dir.empty()) {
    if (checkpoint_dir.empty()) {
      checkpoint_dir = run_dir + "/checkpoints";
      checkpoint_dir_from_run_dir = true;
    }
    // --eval-only writes nothing but an explicitly named --log-file.
    if (log_file.empty() && !eval_only) {
      log_file = run_dir + "/metrics.jsonl";
      log_file_from_run_dir = true;
    }
  }
  // --init-from a Hugging Face folder: its config.json gives the architecture
  // and shape (GPT-2, Llama or Qwen2: launch/formats/model_files.h).
  const std::optional<model::GptConfig> init_shape = init_from.empty() ? std::nullopt : read_hf_config_shape(init_from);
  const bool shape_from_init = preset.empty() && init_shape.has_value();
  if (preset.empty() && !shape_from_init) preset = "gpt-demo";
  model = shape_from_init ? *init_shape : model::gpt_preset(preset);
  if (n_layer) model.n_layer = n_layer;
  if (n_head) model.n_head = n_head;
  if (n_embd) model.n_embd = n_embd;
  if (vocab_size) model.vocab_size = vocab_size;
  if (n_kv_head) model.n_kv_head = n_kv_head;
  if (ffn_hidden) model.ffn_hidden = ffn_hidden;
  if (!tokenizer.empty()) {
    // Loaded here only for its size (every rank, before allocating); the
    // sampler loads it again at the end.
    const bool llmc = LlmcTokenizer::is_llmc_file(tokenizer);
    const int needed = llmc ? LlmcTokenizer::from_file(tokenizer).vocab_size() : BpeTokenizer::from_file(tokenizer).vocab_size();
    // The default prompt ("\n") and "" start a document at <|endoftext|>; any other needs encoding.
    ENGINE_CHECK(!llmc || sample_prompt.empty() || sample_prompt == "\n" || sample_tokens == 0,
                 "--sample-prompt needs a tokenizer that encodes: llm.c's tokenizer file '", tokenizer,
                 "' only decodes (give its tokenizer.json, or no prompt)");
    ENGINE_CHECK(vocab_size == 0 || vocab_size >= needed, "--vocab-size ", vocab_size, " is smaller than --tokenizer '",
                 tokenizer, "' needs (", needed, " tokens)");
    ENGINE_CHECK(!shape_from_init || vocab_size != 0 || needed <= model.vocab_size, "--tokenizer '", tokenizer,
                 "' has ", needed, " tokens, more than the vocabulary of --init-from '", init_from, "' (",
                 hf_config_path(init_from), ": vocab_size ", model.vocab_size, ")");
    if (vocab_size == 0 && !shape_from_init) model.vocab_size = needed;
  }
  if (max_seq_len) model.max_seq_len = max_seq_len;
  model_source = shape_from_init ? hf_config_path(init_from) : preset;
  if (init_shape && !(model == *init_shape)) {
    std::string asked = shape_from_init ? "" : "--model " + preset;
    for (const auto& [flag, value] : {std::pair<const char*, std::int64_t>{"--n-layer", n_layer}, {"--n-head", n_head},
                                      {"--n-embd", n_embd}, {"--vocab-size", vocab_size}, {"--max-seq-len", max_seq_len},
                                      {"--n-kv-head", n_kv_head}, {"--ffn-hidden", ffn_hidden}})
      if (value) asked += (asked.empty() ? "" : " ") + std::string(flag) + " " + std::to_string(value);
    if (!tokenizer.empty() && !shape_from_init && vocab_size == 0) asked += " with --tokenizer's vocabulary";
    ENGINE_CHECK(false, "--init-from '", init_from, "' holds a model of another shape: its config.json says ",
                 init_shape->describe(), ", ", asked, " asks for ", model.describe(), " (config.json's ",
                 hf_config_difference(*init_shape, model), "; leave out --model and the shape flags to take the "
                 "folder's)");
  }
  model.validate();
  // llm.c's model file holds a tied GPT-2 only (launch/formats/llmc_model.h).
  const std::string llmc_refusal = llmc_format_refusal(model);
  ENGINE_CHECK(llmc_refusal.empty() || save_model.empty(), "--save-model writes llm.c's GPT-2 format, which cannot ",
               "hold this model's ", llmc_refusal, "; use --save-hf DIR");
  ENGINE_CHECK(llmc_refusal.empty() || init_from.empty() || is_hf_model_path(init_from), "--init-from '", init_from,
               "' is an llm.c model file (a tied GPT-2 only) and this model has ", llmc_refusal,
               "; give a Hugging Face folder");

  // A NaN or infinite flag value would pass every range check below (all
  // comparisons with NaN are false) and poison the run from step 1.
  for (const auto& [flag, value] : floating_options(*this))
    ENGINE_CHECK(std::isfinite(*value), "--", flag, " ", *value, " is not a finite number");

  if (seq_len == 0) seq_len = model.max_seq_len;
  ENGINE_CHECK(seq_len >= 1 && seq_len <= model.max_seq_len, "--seq-len ", seq_len, " must be in [1, ",
               model.max_seq_len, "] (the model's max_seq_len)");
  ENGINE_CHECK(micro_batch >= 1, "--micro-batch must be >= 1, got ", micro_batch);
  check_sizes_fit(*this);

  ENGINE_CHECK(layout == "manual" || layout == "auto", "--layout ", layout, ": expected manual or auto");
  ENGINE_CHECK(layout == "auto" || cluster.empty(), "--cluster is read by --layout auto only");
  ENGINE_CHECK(calibrate_seconds > 0 && calibrate_seconds <= 600, "--calibrate-seconds ", calibrate_seconds,
               " must be in (0, 600]");
  if (layout == "auto" && auto_layout.chosen.empty()) choose_layout(*this, layout_given);

  // The layout: every problem in one message, the same on every rank.
  {
    std::string problems = parallel::ProcessGrid::check(world, 0, tp, pp, dp);
    if (tp >= 1 && pp >= 1) {
      const std::string partition = model::check_partition(model, tp, pp);
      if (!partition.empty()) problems += (problems.empty() ? "" : " ") + std::string("The model ") +
                                          model.describe() + " cannot be split: " + partition + ".";
    }
    ENGINE_CHECK(problems.empty(), problems);
  }
  if (dp == 0) dp = world / (tp * pp);
  const std::int64_t micro_tokens = micro_batch * seq_len;
  // --eval-only takes no training step: any --micro-batch will do.
  if (batch_tokens == 0 || eval_only) batch_tokens = micro_tokens * dp;
  ENGINE_CHECK(batch_tokens > 0 && batch_tokens % (micro_tokens * dp) == 0, "--batch-tokens ", batch_tokens,
               " must be a positive multiple of micro-batch x seq-len x dp = ", micro_batch, " x ", seq_len, " x ", dp,
               " = ", micro_tokens * dp, " (the micro-batches must divide the batch)");
  grad_accum = batch_tokens / (micro_tokens * dp);
  // Megatron-LM's interleaved 1F1B (parallel/pipeline_schedule.h): v chunks
  // of layers per rank, under Megatron's conditions.
  const bool interleaved = pipeline_schedule == "interleaved", v_shape = pipeline_schedule == "zb-v";
  // ZB-V runs two chunks per rank, in a V (its own placement, not the interleaved one).
  if (v_shape) {
    ENGINE_CHECK(virtual_stages == 1 || virtual_stages == 2, "--pipeline-schedule zb-v runs 2 chunks of layers per "
                 "rank; --virtual-stages ", virtual_stages, " does not apply");
    virtual_stages = 2;
    const std::string refusal = parallel::zero_bubble_v_refusal(pp, model.n_layer);
    ENGINE_CHECK(eval_only || refusal.empty(), "--pipeline-schedule zb-v: ", refusal);
  }
  ENGINE_CHECK(interleaved || v_shape || virtual_stages == 1, "--virtual-stages ", virtual_stages,
               " needs --pipeline-schedule interleaved (this run uses ", pipeline_schedule, ")");
  if (interleaved && !eval_only) {
    const std::string refusal = parallel::interleaved_refusal(pp, static_cast<int>(grad_accum), virtual_stages,
                                                              model.n_layer);
    ENGINE_CHECK(refusal.empty(), "--pipeline-schedule interleaved: ", refusal);
  }
  // --eval-only runs one forward per batch and no schedule: its single
  // micro-batch could not be interleaved, has no backward to split, and any cut of the layers scores
  // the same (checkpoints load under any layout), so it takes the plain one.
  if (eval_only) {
    if (interleaved || v_shape || pipeline_schedule == "zb-h1") pipeline_schedule = "1f1b";
    virtual_stages = 1;
  }
  ENGINE_CHECK(bucket_mb > 0, "--bucket-mb must be > 0, got ", bucket_mb);
  ENGINE_CHECK(!sequence_parallel || tp > 1, "--sequence-parallel splits tokens over the tensor-parallel group and "
               "needs --tp > 1 (got tp ", tp, ")");
  ENGINE_CHECK(!sequence_parallel || (micro_batch * seq_len) % tp == 0, "--sequence-parallel: the micro-batch's ",
               micro_batch, " x ", seq_len, " tokens do not split evenly over tp ", tp);
  ENGINE_CHECK(zero >= 0 && zero <= 3, "--zero ", zero, ": expected a ZeRO stage 0, 1, 2 or 3");
  ENGINE_CHECK(steps >= 1, "--steps must be >= 1, got ", steps, eval_only ? "" : " (to score a model without training, give --eval-only)");
  ENGINE_CHECK(log_interval >= 1, "--log-interval must be >= 1, got ", log_interval);
  ENGINE_CHECK(grad_clip >= 0, "--grad-clip must be >= 0 (0 = off), got ", grad_clip);
  ENGINE_CHECK(eval_only || !train_data.empty(), "--train-data is required: a token shard file or glob (see `prepare`)");
  ENGINE_CHECK(val_interval >= 0, "--val-interval must be >= 0, got ", val_interval);
  ENGINE_CHECK(val_tokens >= seq_len, "--val-tokens ", val_tokens, " is less than one sequence of --seq-len ", seq_len);
  if (eval_only) {
    ENGINE_CHECK(!val_data.empty(), "--eval-only scores the model on --val-data, which is not given");
    ENGINE_CHECK(!init_from.empty() || !resume.empty(),
                 "--eval-only needs a model to score: --init-from FILE, or --resume DIR|latest");
    ENGINE_CHECK(resume != "auto", "--eval-only --resume auto: name the checkpoint (DIR or latest); 'auto' would "
                 "score an untrained model where none is found");
  }
  ENGINE_CHECK(!(overwrite && !resume.empty()), "--overwrite starts afresh and --resume continues: give one of them");
  ENGINE_CHECK(!(overwrite && eval_only), "--eval-only writes nothing, so --overwrite has nothing to replace");
  ENGINE_CHECK(checkpoint_interval >= 0, "--checkpoint-interval must be >= 0, got ", checkpoint_interval);
  ENGINE_CHECK((resume != "latest" && resume != "auto") || !checkpoint_dir.empty(), "--resume ", resume,
               " needs --checkpoint-dir to look in");
  ENGINE_CHECK(on_nonfinite == "stop" || on_nonfinite == "skip", "--on-nonfinite '", on_nonfinite,
               "': expected stop or skip");
  ENGINE_CHECK(max_skipped_steps >= 1, "--max-skipped-steps must be >= 1, got ", max_skipped_steps);
  ENGINE_CHECK(save_hf_dtype == "fp32" || save_hf_dtype == "bf16", "--save-hf-dtype '", save_hf_dtype,
               "': expected fp32 or bf16");
  ENGINE_CHECK(max_failed_saves >= 1, "--max-failed-saves must be >= 1, got ", max_failed_saves);
  ENGINE_CHECK(keep_checkpoints >= 0, "--keep-checkpoints must be >= 0 (0 = keep all), got ", keep_checkpoints);
  ENGINE_CHECK(collective_timeout >= 0, "--collective-timeout must be >= 0 seconds, got ", collective_timeout);
  ENGINE_CHECK(sample_tokens >= 0 && top_k >= 0 && temperature > 0,
               "sampling needs --sample-tokens >= 0, --top-k >= 0 and --temperature > 0");
  ENGINE_CHECK(peak_tflops >= 0, "--peak-tflops must be >= 0, got ", peak_tflops);

  lr_schedule.kind = optim::parse_lr_kind(schedule);
  lr_schedule.max_lr = lr;
  lr_schedule.min_lr = lr * min_lr_ratio;
  lr_schedule.warmup_steps = warmup_steps;
  lr_schedule.total_steps = steps;
  ENGINE_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "--min-lr-ratio must be in [0, 1], got ", min_lr_ratio);
  lr_schedule.validate();
  adamw = optim::AdamWConfig{beta1, beta2, adam_eps, weight_decay};
  adamw.validate();
  ENGINE_CHECK(optimizer == "adamw" || optimizer == "onebit-adam", "--optimizer '", optimizer,
               "': expected adamw or onebit-adam");
  onebit = optimizer == "onebit-adam";
  ENGINE_CHECK(!onebit || zero <= 1, "--optimizer onebit-adam composes with --zero 0 or 1, not --zero ", zero,
               ": its compression stage exchanges each rank's whole local momentum, built from whole local "
               "gradients, which ZeRO-2/3 no longer keep");
  ENGINE_CHECK(onebit || freeze_step == 0, "--freeze-step ", freeze_step,
               " only applies to --optimizer onebit-adam (this run uses ", optimizer, ")");
  if (onebit) {
    onebit_adam.adam = adamw;
    onebit_adam.freeze_step = freeze_step;
    onebit_adam.validate();
  }

  if (device == "auto") device = cuda_devices > 0 ? "cuda" : "cpu";
  ENGINE_CHECK(device != "cuda" || cuda_devices > 0,
               "--device cuda, but no GPU is visible (or the engine was built without CUDA)");
  device_type = device == "cuda" ? engine::DeviceType::kCuda : engine::DeviceType::kCpu;
  if (precision == "auto") precision = device_type == engine::DeviceType::kCuda ? "bf16" : "fp32";
  // --precision fp8 is bf16 storage with the blocks' matmuls in FP8 E4M3
  // (issue 35); fp8-emulated is its f32 reference on the CPU.
  const bool fp8 = precision == "fp8", fp8_emulated = precision == "fp8-emulated";
  ENGINE_CHECK(!fp8 || device_type == engine::DeviceType::kCuda,
               "--precision fp8 needs --device cuda with FP8 tensor cores (Ada or Hopper); the CPU has none "
               "(--precision fp8-emulated applies the same E4M3 rounding in fp32, for tests)");
  ENGINE_CHECK(!fp8_emulated || device_type == engine::DeviceType::kCpu,
               "--precision fp8-emulated is the CPU's reference of FP8 training; on --device cuda use --precision fp8");
  matmul_format = fp8 || fp8_emulated ? engine::ops::MatmulFormat::kFp8E4M3 : engine::ops::MatmulFormat::kNative;
  fp8_scaling_mode = engine::ops::parse_fp8_scaling(fp8_scaling);
  ENGINE_CHECK(fp8_scaling_mode == engine::ops::Fp8Scaling::kTensor || fp8 || fp8_emulated, "--fp8-scaling ",
               fp8_scaling, " applies to --precision fp8 or fp8-emulated, not ", precision);
  precision_mode = model::parse_precision(fp8 ? "bf16" : fp8_emulated ? "fp32" : precision);
  if (fp8) {
    const std::string problem = model::check_fp8_shapes(model, tp, micro_batch * seq_len);
    ENGINE_CHECK(problem.empty(), "--precision fp8: ", problem,
                 ", not a multiple of 16 as the FP8 GEMMs need (cuBLASLt on sm_89/sm_90)");
  }
  recompute_mode = model::parse_recompute(recompute);
  attention_flops_mode = model::parse_attention_flops(attention_flops);
  if (comm == "auto") comm = device_type == engine::DeviceType::kCuda && cuda_devices > 0 ? "nccl" : "mpi";
  ENGINE_CHECK(!nccl_protocol() || device_type == engine::DeviceType::kCuda, "--comm ", comm,
               " needs --device cuda (NCCL moves device memory); use --comm mpi on the CPU");
  ENGINE_CHECK(!(precision_mode == model::Precision::kBf16 && device_type == engine::DeviceType::kCpu),
               "--precision bf16 needs --device cuda; the CPU backend computes in fp32");
}

std::string TrainConfig::describe() const {
  std::ostringstream out;
  out << "model      " << model_source << ": " << model.describe() << ", " << model.num_parameters() << " parameters\n";
  if (eval_only) {
    // Scoring a model: no training data, optimizer, steps, gradient reduction,
    // recomputation (backward only) or checkpoint schedule to speak of.
    out << "batch      " << micro_batch << " x " << seq_len << " tokens per micro-batch\n"
        << "data       val " << val_data << "\n";
  } else {
    out << "batch      " << micro_batch << " x " << seq_len << " tokens per micro-batch, "
        << counted(grad_accum, "micro-batch", "micro-batches") << " per data-parallel rank, "
        << batch_tokens << " tokens per step, " << counted(steps, "step") << "\n"
        << "optimizer  " << (onebit ? "1-bit Adam (AdamW for " + counted(freeze_step, "step") +
                                          ", then frozen variance and 1-bit compressed momentum over dp) "
                                    : std::string("AdamW "))
        << "beta=(" << beta1 << ", " << beta2 << ") eps=" << adam_eps << " wd=" << weight_decay
        << ", clip " << (grad_clip > 0 ? std::to_string(grad_clip) : std::string("off")) << ", lr "
        << lr_schedule.describe() << "\n"
        << "data       train " << train_data << (val_data.empty() ? "" : ", val " + val_data)
        << (shuffle ? ", shuffled" : ", in order") << "\n";
  }
  out << "layout     world " << world_size << " = tp " << tp << " x dp " << dp << " x pp " << pp << ", " << comm
      << " communicator"
      << (pp > 1 ? ", pipeline " + pipeline_schedule +
                       (virtual_stages > 1 ? " (" + std::to_string(virtual_stages) + " chunks of layers per rank)" : "")
                 : std::string())
      << (dp > 1 && !eval_only ? std::string(", gradient reduction ") + (overlap_grad_reduce ? "overlapped" : "after backward") : std::string())
      << (zero > 0 ? ", ZeRO stage " + std::to_string(zero) : std::string())
      << (sequence_parallel ? ", sequence parallel" : "")
      << "\n";
  if (!auto_layout.chosen.empty())
    out << "auto       " << auto_layout.chosen << ": the fastest of " << auto_layout.candidates
        << " layouts the planner ranked for " << auto_layout.cluster_source << " (predicted "
        << auto_layout.predicted_step_seconds * 1e3 << " ms/step, " << engine::format_bytes(auto_layout.predicted_memory_bytes)
        << " per device)\n";
  out << "device     " << device << ", precision " << model::precision_name(precision_mode);
  if (matmul_format == engine::ops::MatmulFormat::kFp8E4M3)
    out << (device_type == engine::DeviceType::kCuda ? "; the blocks' matmuls in FP8 E4M3"
                                                     : "; the blocks' matmuls rounded to FP8 E4M3 (emulated)")
        << (fp8_scaling_mode == engine::ops::Fp8Scaling::kBlock
                ? " with block scaling (1 x 128 activation tiles, 128 x 128 weight blocks)"
                : " with per-tensor current scaling")
        << " (embedding and head " << model::precision_name(precision_mode)
        << "; MFU still against the bf16 peak)";
  if (eval_only) {
    out << "\nscoring    "
        << (!init_from.empty() ? "the model file " + init_from
            : resume == "latest" ? "the latest checkpoint in " + checkpoint_dir
                                 : "the checkpoint " + resume);
    return out.str();
  }
  out << ", seed " << seed << "\n"
      << "recompute  " << model::recompute_name(recompute_mode)
      << (recompute_mode == model::Recompute::kSelective ? " (attention core rerun in backward)"
          : recompute_mode == model::Recompute::kFull    ? " (each block's forward rerun in backward)"
                                                         : "");
  if (!checkpoint_dir.empty())
    out << "\ncheckpoint " << checkpoint_dir << " every "
        << (checkpoint_interval ? counted(checkpoint_interval, "step") : std::string("run (at the end)"))
        << ", keep " << (keep_checkpoints ? std::to_string(keep_checkpoints) : std::string("all"))
        << (async_checkpoint ? ", written in the background" : ", written synchronously")
        << (resume.empty() ? "" : ", resume " + resume);
  return out.str();
}

std::string counted(std::int64_t n, const std::string& noun, const std::string& plural) {
  return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

std::string resolved_config_json(const TrainConfig& config) {
  // The flags themselves say what to write: bind a copy of the resolved
  // configuration to a fresh set of options, read each one's value back
  // (CLI11's capture_default_str) and let the config formatter write them
  // with the JSON types it reads (launch/run/json_config.h), so a new flag is
  // written without being listed here.
  TrainConfig copy = config;
  CLI::App app;
  add_train_options(app, copy);
  for (CLI::Option* option : app.get_options()) option->capture_default_str();
  nlohmann::ordered_json out = nlohmann::ordered_json::parse(app.config_to_str(/*default_also=*/true, false));
  // CLI11 prints doubles with six significant digits; nlohmann writes the
  // shortest text that reads back exactly.
  for (const auto& [flag, value] : floating_options(copy)) out[flag] = *value;
  // How to start, not what to run; and paths that follow from --run-dir.
  for (const char* how : {"resume", "reset-schedule", "overwrite", "eval-only"}) out.erase(how);
  if (config.preset.empty()) out.erase("model");  // the shape of --init-from's config.json
  if (config.checkpoint_dir_from_run_dir) out.erase("checkpoint-dir");
  if (config.log_file_from_run_dir) out.erase("log-file");
  return out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace launch
