// The planner behind `plan` (launch/plan_main.cpp): every layout of a model
// on a cluster, with its predicted memory per device and step time, ranked.
//
// A layout is (tp, pp, dp, micro-batch, ZeRO stage, recomputation, pipeline
// schedule, sequence parallelism) for a global batch of B sequences of T
// tokens on N devices. The prediction composes the engine's own models:
//   memory     model/memory_plan.h, exactly what `train` allocates;
//   compute    model/step_cost.h per stage and micro-batch;
//   comm       parallel/comm_cost.h, alpha-beta per grid axis;
// into a step the way the engine runs it:
//   pipeline   stage s takes t_s = forward + backward + its sends per
//              micro-batch (+ ZeRO-2/3's per-micro-batch traffic); a 1F1B or
//              AFAB pipeline of m micro-batches takes sum_s t_s + (m-1) max_s t_s
//              (the fill and drain cross every stage once, the steady state
//              runs at the slowest; with equal stages this is (m + p - 1) t,
//              the bubble of Narayanan et al. 2021, section 2.2); with v
//              virtual stages (the interleaved schedule, their section
//              2.2.2) each device runs v chunks of
//              its layers, so the fill and drain take 1/v as long,
//              m max_s t_s + (sum_s t_s - max_s t_s) / v, and every chunk
//              boundary sends: per micro-batch a middle device sends 2v
//              messages instead of 2, an end device 2v - 1 instead of 1;
//              ZB-H1 (Qi et al. 2024, section 3.1; software with
//              zero_bubble_schedule) moves each stage's weight-gradient
//              matmuls W_s into the bubble: every stage's part of the fill
//              and drain is t_s - 2 W_s (the paper's F + B - W against
//              1F1B's F + B + W), the memory plan adds its stashes;
//   data parallel  the gradient reduction of plain DP and ZeRO-1 starts during
//              the last micro-batch's backward (buckets, Li et al. 2020): on
//              a GPU only what exceeds that backward is exposed; ZeRO-2/3
//              reduce every micro-batch and ZeRO-3 gathers weights before
//              forward and backward, hidden behind them likewise; ZeRO-1/2
//              all-gather the updated weights after the optimizer (exposed).
//              On the CPU backend communication is memcpy by the same cores
//              that compute (MPI over shared memory), so nothing overlaps;
//   after      the tied embedding's gradient sum between the first and last
//              stage, the optimizer (the slowest stage's), the loss and norm
//              reductions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/flops.h"
#include "model/gpt_config.h"
#include "model/memory_plan.h"
#include "model/step_cost.h"
#include "parallel/cluster.h"

namespace launch {

struct PlanRequest {
  model::GptConfig model;
  std::int64_t global_batch = 0;  // sequences per optimizer step
  std::int64_t seq_len = 0;
  int devices = 0;
  parallel::Cluster cluster;
  model::AttentionFlops attention = model::AttentionFlops::kCausal;
  // Which implementation runs the layouts (model/step_cost.h): "engine", or
  // "megatron-lm-2021" to check the model against published figures.
  std::string software = "engine";
  // Restrictions of the enumeration; empty = every valid choice.
  std::vector<int> tp, pp, micro_batch, zero, sequence_parallel;
  std::vector<model::Recompute> recompute;
  std::vector<parallel::ScheduleKind> schedule;
  // Chunks of layers per device in an interleaved 1F1B pipeline (Megatron-LM's
  // virtual pipeline stages; the engine's --pipeline-schedule interleaved);
  // 1 = plain. Only for software that has the schedule
  // (model::Software::interleaved_schedule); it applies to the 1F1B layouts
  // of more than two stages whose layers split into pp x v equal chunks and
  // whose micro-batches are a multiple of pp (Megatron-LM's conditions), and
  // other pipelined layouts are left out. The memory column is the engine's
  // memory plan of the interleaved layout (a stage per chunk, each with its
  // warm-up's activation slots), for either software.
  // 0 = choose: every plain layout, and besides each 1F1B layout that can be
  // interleaved the same layout interleaved at every v >= 2 it allows
  // (schedule kInterleaved, ParallelLayout::virtual_stages = v), for
  // `train --layout auto` to pick from. Only for software that has the
  // schedule; without it, as 1.
  int virtual_stages = 1;

  // The run's --precision: auto (bf16 on CUDA, fp32 on the CPU, what `train`
  // uses there), fp32, bf16, fp8 (bf16 storage, the blocks' matmuls in E4M3)
  // or fp8-emulated (its CPU reference). Under fp8 the memory side counts the
  // blocks' FP8 weight copies where the trainer keeps them (below ZeRO-3,
  // with fp8_weight_cache), and the step time runs their linear layers at
  // the cluster's fp8_gemm_speedup (1 until measured) with their casts
  // (model/step_cost.h).
  std::string precision_flag = "auto";
  bool fp8_weight_cache = true;  // train's hidden --fp8-weight-cache
  // NCCL's buffer sizes on GPU clusters (model/memory_plan.h): NCCL's
  // defaults; `plan` and `train --layout auto` take the job's variables
  // (NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS, ...), as train's own plan does.
  parallel::NcclBufferSizes nccl_buffers;
  bool nccl_comm = true;  // on GPU clusters the ranks talk over NCCL (false: train's --comm mpi)
  // The storage precision the layouts run in.
  model::Precision precision() const;
  // The blocks' matmuls in FP8 (fp8, fp8-emulated).
  bool fp8_matmuls() const { return precision_flag == "fp8" || precision_flag == "fp8-emulated"; }
  // "" or one line naming what is wrong (sizes, the model's shape).
  std::string check() const;
};

struct Prediction {
  model::ParallelLayout layout;
  double step_seconds = 0;
  // The step split into three parts. The sweep (examples/scaling) splits a
  // measured step by where ranks wait, which files pipeline transfers and
  // the tied-embedding sum under the bubble; here they count as
  // communication. Compare the totals, not the parts, across the two.
  double compute_seconds = 0;       // the rest
  double exposed_comm_seconds = 0;  // tensor-parallel collectives, pipeline sends, data-parallel reductions not hidden
  double bubble_seconds = 0;        // the pipeline's fill and drain: (sum_s t_s - max_s t_s) / virtual_stages
  double optimizer_seconds = 0;     // included in compute_seconds
  int virtual_stages = 1;           // chunks per device (interleaved 1F1B when > 1)
  double model_flops = 0;           // per step, all devices (model/flops.h)
  double hardware_flops = 0;        // with recomputation
  double tflops_per_device = 0;     // model FLOPs
  double mfu = 0, hfu = 0;
  model::RankMemory memory;         // largest of each kind over ranks
  std::vector<std::size_t> stage_activations;  // [pp stage] activation bytes of its ranks (the schedule holds more on some)
  std::size_t memory_bytes_per_device = 0;  // the rank that holds most
  bool fits = false;
};

// Every valid layout the request allows, in a fixed order.
std::vector<model::ParallelLayout> enumerate_layouts(const PlanRequest& request);
Prediction predict(const PlanRequest& request, const model::ParallelLayout& layout);
// ZB-V's idle seconds in a step beyond micro_batches times the rank's
// micro-batch time: parallel::zero_bubble_v's lists simulated with the
// rank's passes (`other`, its messages and ZeRO traffic, added to the
// forward), each chunk half of each; past 2 pp micro-batches extrapolated
// from two simulations (the steady state adds the same per micro-batch).
double zero_bubble_v_idle_seconds(int pp, std::int64_t micro_batches, const model::StageSeconds& rank, double other);
// All predictions, those that fit first, each part by step time.
std::vector<Prediction> plan(const PlanRequest& request);

// The planner's JSON record: tp, pp, dp, micro_batch, zero, recompute,
// schedule, virtual_stages, sequence_parallel, step_seconds, tflops_per_device, mfu,
// memory_bytes_per_device, fits, and the step's split.
nlohmann::json prediction_json(const Prediction& p);

}  // namespace launch
