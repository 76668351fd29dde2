// Everything a training run is configured by, the flags that set it, and its
// validation. Every rank builds and validates the same TrainConfig before
// allocating anything.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "engine/ops.h"
#include "model/flops.h"
#include "model/gpt_config.h"
#include "model/param_store.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/onebit_adam.h"
#include "parallel/cluster.h"
#include "parallel/communicator.h"

namespace launch {

// Thrown by TrainConfig::resolve under --layout auto when the job's machine
// must be measured first (TrainConfig::may_calibrate).
struct MachineCalibrationNeeded : std::runtime_error {
  explicit MachineCalibrationNeeded(std::int64_t width)
      : std::runtime_error("--layout auto: this job's machine is to be measured first"), matmul_width(width) {}
  std::int64_t matmul_width;  // the model's width, the calibration's matmul shape
};

struct TrainConfig {
  // Model: a preset, optionally overridden per dimension (0 = the preset's).
  // No preset: the shape of --init-from's config.json (a Hugging Face
  // folder), else gpt-demo. A preset or override that disagrees with that
  // config.json is refused.
  std::string preset;
  std::string model_source;  // resolved: the preset's name, or the config.json the shape came from
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, vocab_size = 0, max_seq_len = 0;
  std::int64_t n_kv_head = 0, ffn_hidden = 0;  // llama presets only

  // Batch. The global batch is counted in tokens; with micro-batches of B
  // sequences of T tokens it takes batch_tokens / (B*T) micro-batches
  // (gradient accumulation).
  std::int64_t micro_batch = 8;
  std::int64_t seq_len = 0;       // 0 = the model's max_seq_len
  std::int64_t batch_tokens = 0;  // 0 = one micro-batch
  std::int64_t steps = 1000;

  // Optimizer and schedule.
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  // cosine floor as a fraction of lr
  std::int64_t warmup_steps = 0;
  std::string schedule = "cosine";
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;  // 0 = no clipping
  // A step whose loss or gradient norm is not finite is never applied:
  // "stop" ends the run (no checkpoint is written), "skip" leaves weights and
  // optimizer state untouched and goes on, stopping after max_skipped_steps
  // consecutive skips.
  std::string on_nonfinite = "stop";
  std::int64_t max_skipped_steps = 5;
  std::string optimizer = "adamw";  // adamw | onebit-adam (optim/onebit_adam.h)
  std::int64_t freeze_step = 0;     // onebit-adam: AdamW warm-up steps before compression (>= 1)

  // Data.
  std::string train_data;  // shard file or glob
  std::string val_data;    // optional
  // Hugging Face tokenizer.json of a byte-level BPE (launch/data/bpe_tokenizer.h)
  // the shards were made with (prepare --tokenizer); "" = bytes
  // (launch/data/byte_tokenizer.h). It sets the model's vocabulary unless
  // --vocab-size does, and decodes the sample.
  std::string tokenizer;
  bool shuffle = true;
  std::int64_t val_interval = 0;  // steps; 0 = only at the end (when val_data is set)
  // Tokens each validation scores: the first val_tokens / seq_len sequences
  // of the validation set, whatever the layout and micro-batch.
  std::int64_t val_tokens = 32768;

  // Checkpoints.
  std::string checkpoint_dir;
  std::int64_t checkpoint_interval = 0;  // steps; 0 = only at the end (when checkpoint_dir is set)
  std::string resume;                     // "", "latest", "auto" (latest if any, else fresh), or a directory
  // A resumed checkpoint records its learning-rate schedule; a run whose
  // schedule differs (another --steps, --lr, ...) is refused unless this is
  // set, and then follows its own schedule from the checkpoint's step.
  bool reset_schedule = false;
  // An llm.c GPT-2 model file, or a Hugging Face folder / .safetensors (GPT-2, Llama, Qwen2), to start from.
  std::string init_from;
  // A save that fails (disk full) keeps the previous checkpoint and training
  // goes on; this many failures in a row stop the run.
  std::int64_t max_failed_saves = 3;
  // The newest this many checkpoints are kept (0: all); an older one is
  // deleted only once a newer one is complete.
  std::int64_t keep_checkpoints = 3;
  // Periodic saves copy the state to host memory and write it on a
  // background thread while training goes on (launch/checkpoint/checkpoint_saver.h).
  bool async_checkpoint = true;

  // Parallel layout (world = tp x dp x pp) and communication.
  // layout "auto": the planner chooses the fields below that were not given
  // by hand (layout_given) for --cluster's devices (launch/run/auto_layout.h).
  std::string layout = "manual";  // manual | auto
  std::string cluster;            // cluster file for layout auto
  double calibrate_seconds = 1.0;  // each measurement's budget when layout auto measures the machine
  std::set<std::string> layout_given;
  int tp = 1, pp = 1;
  int dp = 0;                     // 0 = world size / (tp x pp)
  // auto | mpi | nccl, or nccl-double: NCCL's stream protocol with the bytes
  // moved over MPI through host memory, for several ranks on one GPU (a test
  // double set by the test fixture, not a flag: parallel/nccl_host_double.h).
  std::string comm = "auto";
  std::string pipeline_schedule = "1f1b";  // 1f1b | afab | interleaved
  int virtual_stages = 1;                   // interleaved: chunks of layers per pipeline rank
  bool overlap_grad_reduce = true;  // start data-parallel reductions during the last backward
  double bucket_mb = 25;            // data-parallel reduction bucket size

  // Memory.
  std::string recompute = "none";  // none | selective | full (model/recompute.h)
  int zero = 0;                     // ZeRO stage over the data-parallel axis (0-3)
  bool sequence_parallel = false;   // split layer norms and residuals over the tokens (needs tp > 1)

  // Run.
  std::uint64_t seed = 1337;
  std::string device = "auto";     // auto | cpu | cuda
  std::string precision = "auto";  // auto | fp32 | bf16 | fp8 | fp8-emulated
  std::string fp8_scaling = "tensor";  // tensor | block (engine::ops::Fp8Scaling), under fp8 and fp8-emulated
  std::string log_file;            // JSONL metrics, one object per step
  // A run folder (launch/run/run_folder.h): config.json, metrics.jsonl,
  // train.log, summary.json and checkpoints/ unless named otherwise.
  std::string run_dir;
  // Start afresh where outputs of another run are found (they are removed);
  // without it (or --resume) such a start is refused.
  bool overwrite = false;
  bool eval_only = false;          // score the model (--init-from or --resume) on --val-data and exit
  std::int64_t log_interval = 1;   // print every K-th step (the JSONL keeps every step)
  std::string save_model;          // write the final model in llm.c's format here
  // Write the final model as a Hugging Face folder here: GPT-2, Llama or Qwen2 by the model's architecture
  // (launch/formats/model_files.h).
  std::string save_hf;
  std::string save_hf_dtype = "fp32";  // fp32 | bf16: the dtype of its model.safetensors
  double peak_tflops = 0;          // per device; 0 = table (GPU) or measured once and cached (CPU, launch/hardware/cpu_peak.h)
  std::string attention_flops = "causal";  // causal | full: attention FLOPs in MFU/HFU (model/flops.h)
  // Seconds one collective or pipeline transfer may wait before the job ends
  // (parallel/watchdog.h); 0 = forever.
  double collective_timeout = 300;
  std::int64_t sample_tokens = 0;  // generate this many tokens at the end
  std::string sample_prompt = "\n";
  double temperature = 0.8;
  std::int64_t top_k = 40;

  // Derived (after resolve()).
  struct AutoLayout {
    std::string chosen;  // "" unless layout auto chose
    double predicted_step_seconds = 0;
    std::size_t predicted_memory_bytes = 0;
    std::size_t candidates = 0;  // layouts ranked
    std::string cluster_source;  // "cluster file X", or where the job's own calibration came from
  } auto_layout;
  // --layout auto without --cluster plans for the job's own machine, which
  // must be measured first, by every rank together (launch/plan/
  // cached_calibration.h). A collective cannot start inside resolve(): a
  // rank that failed earlier would never join it. So resolve() throws
  // MachineCalibrationNeeded when may_calibrate is set and machine_cluster
  // is not; train's main agrees with the other ranks, measures, sets
  // machine_cluster (and its note) on the configuration as given, and
  // resolves again. Without may_calibrate --layout auto needs --cluster.
  bool may_calibrate = false;
  std::optional<parallel::Cluster> machine_cluster;
  std::string machine_cluster_note;
  model::GptConfig model;
  optim::LrSchedule lr_schedule;
  optim::AdamWConfig adamw;
  bool onebit = false;              // optimizer == "onebit-adam"
  optim::OneBitAdamConfig onebit_adam;
  engine::DeviceType device_type = engine::DeviceType::kCpu;
  model::Precision precision_mode = model::Precision::kFp32;
  // The blocks' linear layers: FP8 E4M3 under --precision fp8 (bf16 storage
  // and activations) and fp8-emulated (the CPU's f32 reference of the same
  // rounding, for tests), native otherwise.
  engine::ops::MatmulFormat matmul_format = engine::ops::MatmulFormat::kNative;
  engine::ops::Fp8Scaling fp8_scaling_mode = engine::ops::Fp8Scaling::kTensor;
  // FP8 weights cast once per optimizer step and kept (model::GptStage::set_fp8_weight_cache).
  // Not a flag: test_parity_fp8 turns it off to check that keeping them changes no number.
  bool fp8_weight_cache = true;
  model::Recompute recompute_mode = model::Recompute::kNone;
  model::AttentionFlops attention_flops_mode = model::AttentionFlops::kCausal;
  std::int64_t grad_accum = 1;  // micro-batches per data-parallel rank and step
  // Whether checkpoint_dir / log_file were derived from run_dir (and so are
  // left out of the saved configuration, which names run_dir instead).
  bool checkpoint_dir_from_run_dir = false, log_file_from_run_dir = false;
  int world_size = 1;

  // Fills the derived fields and checks every value for a job of
  // `world_size` ranks; throws engine::Error naming every bad value of the
  // layout at once. Deterministic, so every rank agrees.
  void resolve(int cuda_devices, int world_size = 1);
  std::string describe() const;  // multi-line summary printed at start-up
  // Device memory moves between ranks through NCCL's stream protocol (nccl, nccl-double).
  bool nccl_protocol() const { return comm == "nccl" || comm == "nccl-double"; }
  parallel::CommBackend comm_backend() const {
    return comm == "nccl" ? parallel::CommBackend::kNccl
           : comm == "nccl-double" ? parallel::CommBackend::kNcclHostDouble
                                   : parallel::CommBackend::kMpi;
  }
};

// Registers every flag on `app` bound to `config` (and --config for JSON).
void add_train_options(CLI::App& app, TrainConfig& config);

// The resolved configuration as JSON that --config accepts: every flag with
// the value this run uses (dp, seq-len, device ... as resolved), except the
// flags that say how to start (--resume, --overwrite, --eval-only, --config).
std::string resolved_config_json(const TrainConfig& config);

// "1 step", "2 steps": a count with its noun, plural unless it is 1 (`plural`
// when it is not the noun and an s: "micro-batches").
std::string counted(std::int64_t n, const std::string& noun, const std::string& plural = "");

}  // namespace launch
