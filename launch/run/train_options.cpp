// The train program's flags (`train --help`): each flag of TrainConfig
// registered with CLI11, its group, help text, default and checks. The
// configuration itself and what resolve() derives are in train_config.cpp.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "launch/run/json_config.h"
#include "launch/run/train_config.h"

namespace launch {

// A boolean flag in every spelling users type: `--name` (as Megatron-LM
// does), `--name=true|false`, `--name true|false` (joined by
// launch/resilience/command_line.h) and `--no-name`; true or false in a
// config file. Its default is shown in --help and written by config_to_str.
namespace {
CLI::Option* add_switch(CLI::App& app, const std::string& name, bool& value, const std::string& help) {
  return app.add_flag(name + ",!--no-" + name.substr(2), value, help + " (a switch: " + name + ", --no-" +
                                                                    name.substr(2) + ", or " + name + " true|false)")
      ->default_function([&value] { return std::string(value ? "true" : "false"); })
      ->capture_default_str();
}
}  // namespace

void add_train_options(CLI::App& app, TrainConfig& c) {
  // A flag given twice (or in the config file and on the command line) takes the last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // The formatter reads the app's options to check each key's type, and the
  // --config option for the file's name in its messages.
  app.config_formatter(std::make_shared<JsonConfig>(&app));
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error, not a silent default
  app.set_config("--config", "", "JSON file of flag values (keys are flag names; command-line flags override it)");

  const char* kModel = "Model";
  std::string presets;
  for (const std::string& name : model::gpt_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  app.add_option("--model", c.preset,
                 "Model preset: " + presets + " (default: the shape in --init-from's config.json, else gpt-demo)")
      ->group(kModel);
  app.add_option("--n-layer", c.n_layer, "Override the preset's number of layers")->group(kModel);
  app.add_option("--n-head", c.n_head, "Override the preset's number of attention heads")->group(kModel);
  app.add_option("--n-embd", c.n_embd, "Override the preset's width")->group(kModel);
  app.add_option("--vocab-size", c.vocab_size, "Override the preset's vocabulary (padded to a multiple of 128)")->group(kModel);
  app.add_option("--max-seq-len", c.max_seq_len, "Override the preset's position-table length")->group(kModel);
  app.add_option("--n-kv-head", c.n_kv_head, "Override a llama preset's key/value heads (grouped-query attention)")
      ->group(kModel);
  app.add_option("--ffn-hidden", c.ffn_hidden, "Override a llama preset's SwiGLU width")->group(kModel);
  app.add_option("--init-from", c.init_from,
                 "Start from a model: a Hugging Face folder (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM; "
                 "model.safetensors or its sharded index) or .safetensors file, or an llm.c GPT-2 model file; "
                 "without --model, the architecture and shape come from the folder's config.json")
      ->group(kModel);

  const char* kBatch = "Batch";
  app.add_option("--micro-batch", c.micro_batch, "Sequences per micro-batch (B)")->group(kBatch)->capture_default_str();
  app.add_option("--seq-len", c.seq_len, "Tokens per sequence (T); 0 = the model's max_seq_len")->group(kBatch)->capture_default_str();
  app.add_option("--batch-tokens", c.batch_tokens, "Global batch in tokens, all ranks together: a multiple of B*T*dp (0 = one micro-batch per data-parallel rank)")
      ->group(kBatch)->capture_default_str();
  app.add_option("--steps", c.steps, "Optimizer steps to train")->group(kBatch)->capture_default_str();

  const char* kOpt = "Optimizer";
  app.add_option("--lr", c.lr, "Peak learning rate")->group(kOpt)->capture_default_str();
  app.add_option("--lr-schedule", c.schedule, "cosine (decay to --min-lr-ratio * lr) or constant")
      ->group(kOpt)->capture_default_str()->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--min-lr-ratio", c.min_lr_ratio, "Cosine floor as a fraction of --lr")->group(kOpt)->capture_default_str();
  app.add_option("--warmup-steps", c.warmup_steps, "Linear warm-up steps (0 = none)")->group(kOpt)->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW decoupled weight decay on 2-D tensors (0 = none)")
      ->group(kOpt)->capture_default_str();
  app.add_option("--beta1", c.beta1, "AdamW beta1")->group(kOpt)->capture_default_str();
  app.add_option("--beta2", c.beta2, "AdamW beta2")->group(kOpt)->capture_default_str();
  app.add_option("--adam-eps", c.adam_eps, "AdamW epsilon")->group(kOpt)->capture_default_str();
  app.add_option("--grad-clip", c.grad_clip, "Global gradient-norm clip (0 = no clipping)")->group(kOpt)->capture_default_str();
  app.add_option("--on-nonfinite", c.on_nonfinite,
                 "A step with a non-finite loss or gradient norm is never applied: stop (end the run, no "
                 "checkpoint) or skip (leave weights and optimizer state untouched and go on)")
      ->group(kOpt)->capture_default_str()->check(CLI::IsMember({"stop", "skip"}));
  app.add_option("--max-skipped-steps", c.max_skipped_steps,
                 "--on-nonfinite skip: stop after this many consecutive skipped steps")
      ->group(kOpt)->capture_default_str();
  app.add_option("--optimizer", c.optimizer,
                 "adamw, or onebit-adam (Tang et al. 2021): AdamW for --freeze-step steps, then the variance is "
                 "frozen and the momentum is averaged over data-parallel ranks with a 1-bit compressed "
                 "all-reduce instead of reducing gradients")
      ->group(kOpt)->capture_default_str()->check(CLI::IsMember({"adamw", "onebit-adam"}));
  app.add_option("--freeze-step", c.freeze_step,
                 "onebit-adam: AdamW (warm-up) steps before compression starts, >= 1 (the paper freezes after "
                 "roughly 10-20% of training, once the variance has settled)")
      ->group(kOpt)->capture_default_str();

  const char* kData = "Data";
  app.add_option("--train-data", c.train_data, "Training token shards: a file or a glob (llm.c format)")->group(kData);
  app.add_option("--val-data", c.val_data, "Validation token shards: a file or a glob")->group(kData);
  app.add_option("--tokenizer", c.tokenizer,
                 "Hugging Face tokenizer.json (byte-level BPE) the shards were made with (prepare --tokenizer), "
                 "or llm.c's gpt2_tokenizer.bin (decodes only: no --sample-prompt): sets the vocabulary to the "
                 "tokenizer's unless --vocab-size is given, and decodes the sample (default: bytes)")
      ->group(kData);
  add_switch(app, "--shuffle", c.shuffle, "Shuffle sequences each epoch")->group(kData);
  app.add_option("--val-interval", c.val_interval, "Validate every N steps (0 = at the end only)")->group(kData)->capture_default_str();
  app.add_option("--val-tokens", c.val_tokens,
                 "Tokens each validation scores: the first val-tokens / seq-len sequences of --val-data (all of it "
                 "if shorter), the same for every layout and micro-batch")
      ->group(kData)->capture_default_str();

  const char* kCkpt = "Checkpoints";
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "Directory for checkpoints (step_NNNNNNNN/ and 'latest')")->group(kCkpt);
  app.add_option("--checkpoint-interval", c.checkpoint_interval, "Save every N steps (0 = at the end only)")
      ->group(kCkpt)->capture_default_str();
  app.add_option("--resume", c.resume,
                 "Resume from 'latest' (in --checkpoint-dir), a checkpoint directory, or 'auto': the latest "
                 "checkpoint if there is one, else start fresh (for restarts under launch/supervise)")
      ->group(kCkpt);
  add_switch(app, "--reset-schedule", c.reset_schedule,
             "With --resume: follow this run's learning-rate schedule (--steps, --lr, --lr-schedule, "
             "--min-lr-ratio, --warmup-steps) from the checkpoint's step where it differs from the one the "
             "checkpoint recorded (without it, such a resume is refused)")
      ->group(kCkpt);
  app.add_option("--keep-checkpoints", c.keep_checkpoints,
                 "Keep the newest K checkpoints, deleting older ones once a newer one is complete (0 = keep all)")
      ->group(kCkpt)->capture_default_str();
  add_switch(app, "--async-checkpoint", c.async_checkpoint,
             "Periodic saves only copy the state to host memory in the step loop and write it on a background "
             "thread")
      ->group(kCkpt);
  app.add_option("--save-model", c.save_model,
                 "Write the final model here in llm.c's GPT-2 format (any layout: rank 0 gathers the slices)")
      ->group(kCkpt);
  app.add_option("--save-hf", c.save_hf,
                 "Write the final model into this folder for Hugging Face transformers (GPT2LMHeadModel, "
                 "LlamaForCausalLM, or Qwen2ForCausalLM with a q/k/v bias): model.safetensors, config.json, "
                 "generation_config.json and, with --tokenizer, the tokenizer files")
      ->group(kCkpt);
  app.add_option("--save-hf-dtype", c.save_hf_dtype, "dtype of --save-hf's tensors: fp32 or bf16")
      ->group(kCkpt)->capture_default_str()->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--max-failed-saves", c.max_failed_saves,
                 "A checkpoint that cannot be written (disk full) is abandoned with a warning, the previous one "
                 "kept, and training goes on; stop after this many failed saves in a row")
      ->group(kCkpt)->capture_default_str();

  const char* kPar = "Parallelism";
  app.add_option("--layout", c.layout,
                 "manual, or auto: the planner chooses tp, pp, dp, micro-batch, ZeRO, recomputation, schedule and "
                 "sequence parallelism not given by hand, for --cluster's devices and --batch-tokens")
      ->group(kPar)->capture_default_str();
  app.add_option("--cluster", c.cluster, "Cluster file --layout auto plans for (plan --calibrate --out FILE, or "
                 "examples/scaling/clusters/; without it the job measures its machine once and caches it)")->group(kPar);
  app.add_option("--calibrate-seconds", c.calibrate_seconds,
                 "Budget of each measurement when --layout auto measures the machine (about 8 of them)")
      ->group(kPar)->capture_default_str();
  app.add_option("--tp", c.tp, "Tensor-parallel size (splits heads, MLP and vocabulary)")->group(kPar)->capture_default_str();
  app.add_option("--pp", c.pp, "Pipeline-parallel stages")->group(kPar)->capture_default_str();
  app.add_option("--dp", c.dp, "Data-parallel size (0 = world size / (tp x pp))")->group(kPar)->capture_default_str();
  app.add_option("--comm", c.comm, "Communicator: auto (nccl on cuda with one GPU per rank, else mpi), mpi or nccl")
      ->group(kPar)->capture_default_str()->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  app.add_option("--pipeline-schedule", c.pipeline_schedule,
                 "1f1b, afab (all-forward-all-backward), interleaved (Megatron-LM's interleaved 1F1B: "
                 "--virtual-stages chunks of layers per rank, the bubble divided by that many; pp > 2, "
                 "micro-batches a multiple of pp), zb-h1 (zero bubble, Qi et al. 2024: each backward split into "
                 "an input-gradient and a weight-gradient pass, the weight passes filling the bubble) or zb-v "
                 "(ZB-V: two chunks per rank in a V, rank 0 holding the embedding and the head; no bubble but the "
                 "first forward's when forward, input and weight passes take equal time; best with micro-batches "
                 ">= 2 pp)")
      ->group(kPar)->capture_default_str()->check(CLI::IsMember({"1f1b", "afab", "interleaved", "zb-h1", "zb-v"}));
  app.add_option("--virtual-stages", c.virtual_stages,
                 "interleaved: chunks of layers per pipeline rank (>= 2; the layers must split into pp x this)")
      ->group(kPar)->capture_default_str()->check(CLI::Range(1, 64));
  add_switch(app, "--overlap-grad-reduce", c.overlap_grad_reduce,
             "Start data-parallel gradient reductions during the last micro-batch's backward (ZeRO-2/3 always "
             "reduce each layer's gradient as soon as its backward is done)")
      ->group(kPar);
  app.add_option("--bucket-mb", c.bucket_mb,
                 "Data-parallel reduction bucket size in MiB (ZeRO-2/3 reduce by layer instead)")->group(kPar)->capture_default_str();

  const char* kMemory = "Memory";
  app.add_option("--recompute", c.recompute,
                 "Activation recomputation (Korthikanti et al. 2023): none; selective (drop the attention "
                 "probabilities, rerun the attention core in backward); full (keep only each block's input, "
                 "rerun its forward in backward)")
      ->group(kMemory)->capture_default_str()->check(CLI::IsMember({"none", "selective", "full"}));
  app.add_option("--zero", c.zero,
                 "ZeRO stage over the data-parallel axis (Rajbhandari et al. 2020): 0 off; 1 optimizer state "
                 "sharded (gradients reduce-scattered, updated parameters all-gathered); 2 also gradients, each "
                 "layer's reduce-scattered into the owner's shard during backward; 3 also parameters, each layer's "
                 "gathered just before its forward and backward (the next one prefetched) and freed after")
      ->group(kMemory)->capture_default_str();
  add_switch(app, "--sequence-parallel", c.sequence_parallel,
             "With --tp > 1: layer norms and residual adds work on 1/tp of the tokens, the all-reduces become "
             "all-gather + reduce-scatter (Korthikanti et al. 2023)")
      ->group(kMemory);

  const char* kRun = "Run";
  app.add_option("--seed", c.seed, "Seed for initialisation, shuffling and sampling")->group(kRun)->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu or cuda")->group(kRun)->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--precision", c.precision,
                 "auto (bf16 on cuda, fp32 on cpu), fp32, bf16, fp8 (bf16 with the transformer blocks' matmuls in "
                 "FP8 E4M3, per-tensor current scaling; cuda on Ada or Hopper) or fp8-emulated (the same rounding "
                 "in fp32 on the cpu, for tests)")
      ->group(kRun)->capture_default_str()->check(CLI::IsMember({"auto", "fp32", "bf16", "fp8", "fp8-emulated"}));
  app.add_option("--fp8-scaling", c.fp8_scaling,
                 "Under --precision fp8 or fp8-emulated: tensor (one current scale per tensor) or block "
                 "(DeepSeek-V3's fine-grained scaling: activations and gradients per 1 x 128 tile along each "
                 "GEMM's reduction, weights per 128 x 128 block; cuda needs Hopper and cuBLAS 12.9)")
      ->group(kRun)->capture_default_str()->check(CLI::IsMember({"tensor", "block"}));
  app.add_option("--run-dir", c.run_dir,
                 "Run folder: the resolved configuration (config.json, which --config accepts), metrics.jsonl, a "
                 "copy of the text log (train.log), summary.json and checkpoints/ (unless --log-file or "
                 "--checkpoint-dir name other places)")
      ->group(kRun);
  app.add_option("--log-file", c.log_file, "Write one JSON object per step (JSONL) to this file")->group(kRun);
  add_switch(app, "--overwrite", c.overwrite,
               "Start afresh even where another run's checkpoints or metrics are found: they are deleted (without "
               "it, or --resume, such a start is refused)")
      ->group(kRun);
  add_switch(app, "--eval-only", c.eval_only,
               "Score the model (--init-from FILE, or --resume DIR|latest) on --val-data over --val-tokens and "
               "exit; writes nothing (but --log-file, if given)")
      ->group(kRun);
  app.add_option("--log-interval", c.log_interval,
                 "Print every K-th step (and the first, the last and those with validation); the JSONL keeps every "
                 "step")
      ->group(kRun)->capture_default_str();
  app.add_option("--collective-timeout", c.collective_timeout,
                 "Seconds a rank may wait in one collective or pipeline transfer of the MPI transport (not yet "
                 "NCCL's) before the job ends (exit 124) naming the step, the phase and the ranks that did not "
                 "arrive; 10x longer in checkpoints (0 = wait forever)")
      ->group(kRun)->capture_default_str();
  app.add_option("--peak-tflops", c.peak_tflops,
                 "Peak TFLOP/s per device for MFU (0 = GPU table / CPU measured once per machine and thread count, "
                 "cached)")
      ->group(kRun)->capture_default_str();
  app.add_option("--attention-flops", c.attention_flops,
                 "Attention FLOPs in MFU and HFU: causal (half of s x s, llm.c and Megatron-LM since 2025) or full "
                 "(the whole square, Megatron-LM 2021)")
      ->group(kRun)->capture_default_str()->check(CLI::IsMember({"causal", "full"}));
  app.add_option("--sample-tokens", c.sample_tokens, "Generate this many tokens at the end (0 = none)")
      ->group(kRun)->capture_default_str();
  app.add_option("--sample-prompt", c.sample_prompt, "Text the sample starts from")->group(kRun);
  app.add_option("--temperature", c.temperature, "Sampling temperature")->group(kRun)->capture_default_str();
  app.add_option("--top-k", c.top_k, "Sample among the k most likely tokens (0 = all)")->group(kRun)->capture_default_str();
}

}  // namespace launch
